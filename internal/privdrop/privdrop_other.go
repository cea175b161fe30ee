//go:build !linux

package privdrop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
)

// Wrap is not supported on this system: it returns an error wrapping
// errors.ErrUnsupported and leaves cmd as it is.
func Wrap(cmd *exec.Cmd, o Options) error {
	return fmt.Errorf("privdrop: dropping privileges on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// RunShim returns false unless argv[1] is ShimArg; the shim cannot run on
// this system, so then it fails closed: it prints the reason and exits 126.
func RunShim() bool {
	if len(os.Args) < 2 || os.Args[1] != ShimArg {
		return false
	}
	fmt.Fprintf(os.Stderr, "chaperone: dropping privileges on %s: %v\n", runtime.GOOS, errors.ErrUnsupported)
	os.Exit(126)
	return true
}

// ProtectSelf does nothing on this system, where Wrap starts nothing.
func ProtectSelf(o Options) (undo func(), err error) { return func() {}, nil }

// Gate is not supported on this system.
type Gate struct{}

// WrapGated is not supported on this system.
func WrapGated(cmd *exec.Cmd, o Options) (*Gate, error) {
	return nil, fmt.Errorf("privdrop: gated start on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// Ready is not supported on this system.
func (g *Gate) Ready(context.Context) (*os.File, error) { return nil, errors.ErrUnsupported }

// Open is not supported on this system.
func (g *Gate) Open() error { return errors.ErrUnsupported }

// Close does nothing here.
func (g *Gate) Close() error { return nil }
