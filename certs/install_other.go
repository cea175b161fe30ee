//go:build !linux

package certs

import (
	"errors"
	"fmt"
	"runtime"
)

// systemStoreSupported: Install knows Linux's trust stores only. On macOS
// the CA goes into the System keychain by hand (docs/proxy.md):
//
//	sudo security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain "$(chaperone ca path)"
func systemStoreSupported() error {
	if runtime.GOOS == "darwin" {
		return fmt.Errorf("the macOS keychain is not changed by chaperone: run sudo security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain \"$(chaperone ca path)\": %w", errors.ErrUnsupported)
	}
	return fmt.Errorf("the trust store of %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
