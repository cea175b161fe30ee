//go:build !linux

package attribution

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// OSProc returns the real /proc. There is none on this system: every read
// fails with an error wrapping errors.ErrUnsupported.
func OSProc() FS { return noProc{} }

type noProc struct{}

func errNoProc(name string) error {
	return fmt.Errorf("attribution: read /proc/%s: %w", name, errors.ErrUnsupported)
}

func (noProc) ReadFile(name string) ([]byte, error)       { return nil, errNoProc(name) }
func (noProc) ReadDir(name string) ([]fs.DirEntry, error) { return nil, errNoProc(name) }
func (noProc) Readlink(name string) (string, error)       { return "", errNoProc(name) }
func (noProc) Open(name string) (fs.File, error)          { return nil, errNoProc(name) }

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }
