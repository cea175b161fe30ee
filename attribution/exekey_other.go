//go:build !linux

package attribution

import "io/fs"

// exeKeyOf reports no identity: without /proc there is nothing to cache
// for, and ExeDigest reads the file on every call.
func exeKeyOf(fs.FileInfo) (exeKey, bool) { return exeKey{}, false }
