package rewrite

import (
	"testing"
	"time"
)

// ProcessCPU and ReportCPU serve the external tests' benchmarks
// (corpus_test.go).
func ProcessCPU() time.Duration { return processCPU() }

// ReportCPU reports the process's CPU time per operation since cpu0.
func ReportCPU(b *testing.B, cpu0 time.Duration) { reportCPU(b, cpu0) }
