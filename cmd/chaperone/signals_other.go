//go:build !unix

package main

import "os"

var forwardedSignals = []os.Signal{os.Interrupt}

func shouldForward(os.Signal) bool { return true }
