package attribution

// OSProc returns the real /proc.
func OSProc() FS { return dirFS("/proc") }
