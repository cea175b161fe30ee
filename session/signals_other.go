//go:build !unix

package session

import "os"

var forwardedSignals = []os.Signal{os.Interrupt}

// reloadSignal: none here; the policy file's changes are still watched.
var reloadSignal os.Signal

func shouldForward(os.Signal) bool { return true }
