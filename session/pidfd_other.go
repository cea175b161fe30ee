//go:build !linux

package session

import "errors"

// holdProcess is built for Linux only.
func holdProcess(int) (kill func() error, release func(), err error) {
	return nil, func() {}, errors.ErrUnsupported
}
