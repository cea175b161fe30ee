package execs

import (
	"bytes"
	"encoding/binary"
)

// The formats of glibc's /etc/ld.so.cache (sysdeps/generic/dl-cache.h):
// the old one ("ld.so-1.7.0", string offsets from the end of its entries),
// the new one ("glibc-ld.so.cache1.1", string offsets from its own
// start), or the old one followed by the new one at an 8-byte boundary.
const (
	ldCacheOld       = "ld.so-1.7.0"
	ldCacheNew       = "glibc-ld.so.cache1.1"
	ldCacheOldHeader = 16 // magic, padded, and nlibs
	ldCacheOldEntry  = 12 // flags, key, value
	ldCacheNewHeader = 48 // magic, version, nlibs, len_strings, flags, padding, extension_offset, unused[3]
	ldCacheNewEntry  = 24 // flags, key, value, osversion, hwcap
)

// ldCacheLookup returns every path the cache b gives for name: where
// glibc's loader, run as a command with a program named without a slash,
// finds it (it searches no directory for its program). All entries of
// that name count, whatever their architecture or hardware flags; ok is
// false when b is not a cache glibc would read.
func ldCacheLookup(b []byte, name string) (paths []string, ok bool) {
	bo := binary.NativeEndian
	switch {
	case len(b) > ldCacheOldHeader && bytes.HasPrefix(b, []byte(ldCacheOld)):
		n := uint64(bo.Uint32(b[12:]))
		if uint64(len(b)-ldCacheOldHeader)/ldCacheOldEntry < n {
			return nil, false
		}
		end := ldCacheOldHeader + int(n)*ldCacheOldEntry
		if off := (end + 7) &^ 7; off+ldCacheNewHeader <= len(b) && bytes.HasPrefix(b[off:], []byte(ldCacheNew)) {
			return ldCacheNewLookup(b[off:], name)
		}
		return ldCacheEntries(b[ldCacheOldHeader:end], ldCacheOldEntry, b[end:], name), true
	case len(b) > ldCacheNewHeader && bytes.HasPrefix(b, []byte(ldCacheNew)):
		return ldCacheNewLookup(b, name)
	}
	return nil, false
}

// ldCacheNewLookup looks name up in a cache of the new format at the
// start of b.
func ldCacheNewLookup(b []byte, name string) ([]string, bool) {
	n := uint64(binary.NativeEndian.Uint32(b[20:]))
	if uint64(len(b)-ldCacheNewHeader)/ldCacheNewEntry < n {
		return nil, false
	}
	end := ldCacheNewHeader + int(n)*ldCacheNewEntry
	return ldCacheEntries(b[ldCacheNewHeader:end], ldCacheNewEntry, b, name), true
}

// ldCacheEntries returns the values of the entries (each size bytes:
// flags, key, value) whose key is name; strings are at offsets into data.
func ldCacheEntries(entries []byte, size int, data []byte, name string) []string {
	var paths []string
	for e := entries; len(e) >= size; e = e[size:] {
		key, ok := ldCacheString(data, binary.NativeEndian.Uint32(e[4:]))
		if !ok || key != name {
			continue
		}
		if v, ok := ldCacheString(data, binary.NativeEndian.Uint32(e[8:])); ok && v != "" {
			paths = append(paths, v)
		}
	}
	return paths
}

// ldCacheString is the NUL-terminated string at off in data.
func ldCacheString(data []byte, off uint32) (string, bool) {
	if uint64(off) >= uint64(len(data)) {
		return "", false
	}
	s := data[off:]
	i := indexNUL(s)
	if i < 0 {
		return "", false
	}
	return string(s[:i]), true
}
