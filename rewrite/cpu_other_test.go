//go:build !unix

package rewrite

import "time"

// processCPU is not measured here; the CPU metric is then not reported.
func processCPU() time.Duration { return 0 }
