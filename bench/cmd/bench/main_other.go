//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "bench: runs on Linux only (it reads /proc and runs the peers as Linux processes)")
	os.Exit(1)
}
