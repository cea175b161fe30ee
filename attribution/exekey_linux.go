package attribution

import (
	"io/fs"
	"syscall"
)

// exeKeyOf returns the identity of the file version fi describes.
func exeKeyOf(fi fs.FileInfo) (exeKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return exeKey{}, false
	}
	return exeKey{
		dev:   uint64(st.Dev),
		ino:   uint64(st.Ino),
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
	}, true
}
