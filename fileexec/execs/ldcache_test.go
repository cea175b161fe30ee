package execs

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// newLDCache builds a cache of the new format with the entries key→value
// given in pairs, optionally after an old-format one (which lists none).
func newLDCache(withOld bool, pairs ...string) []byte {
	bo := binary.NativeEndian
	n := len(pairs) / 2
	var strs bytes.Buffer
	strOff := ldCacheNewHeader + n*ldCacheNewEntry
	offs := make([]uint32, len(pairs))
	for i, s := range pairs {
		offs[i] = uint32(strOff + strs.Len())
		strs.WriteString(s)
		strs.WriteByte(0)
	}
	b := []byte(ldCacheNew)
	b = bo.AppendUint32(b, uint32(n))
	b = bo.AppendUint32(b, uint32(strs.Len()))
	b = append(b, make([]byte, 4+4+12)...)
	for i := 0; i < n; i++ {
		b = bo.AppendUint32(b, 0x303) // flags: ELF, x86-64
		b = bo.AppendUint32(b, offs[2*i])
		b = bo.AppendUint32(b, offs[2*i+1])
		b = append(b, make([]byte, 4+8)...)
	}
	b = append(b, strs.Bytes()...)
	if withOld {
		old := append([]byte(ldCacheOld), 0)
		old = bo.AppendUint32(old, 0)
		b = append(old, b...)
	}
	return b
}

func TestLDCacheLookup(t *testing.T) {
	cache := newLDCache(false, "libc.so.6", "/lib/libc.so.6", "openssl", "/usr/bin/openssl", "openssl", "/opt/openssl")
	tests := []struct {
		name  string
		cache []byte
		key   string
		want  []string
		ok    bool
	}{
		{name: "one", cache: cache, key: "libc.so.6", want: []string{"/lib/libc.so.6"}, ok: true},
		{name: "every entry of the name", cache: cache, key: "openssl", want: []string{"/usr/bin/openssl", "/opt/openssl"}, ok: true},
		{name: "absent", cache: cache, key: "libz.so.1", ok: true},
		{name: "after the old format", cache: newLDCache(true, "x", "/y"), key: "x", want: []string{"/y"}, ok: true},
		{name: "entries past the end", cache: cache[:60], key: "x", ok: false},
		{name: "not a cache", cache: []byte("hello"), key: "x", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ldCacheLookup(tt.cache, tt.key)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestLDCacheSystem reads the system's cache: every name and path
// `ldconfig -p` lists is found.
func TestLDCacheSystem(t *testing.T) {
	b, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		t.Skip(err)
	}
	out, err := exec.Command("ldconfig", "-p").Output()
	if err != nil {
		t.Skipf("ldconfig -p: %v", err)
	}
	n := 0
	for line := range strings.SplitSeq(string(out), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), " (")
		_, path, ok2 := strings.Cut(rest, " => ")
		if !ok || !ok2 {
			continue
		}
		got, ok := ldCacheLookup(b, name)
		if !ok || !slices.Contains(got, path) {
			t.Errorf("%s: %q, %v; ldconfig says %s", name, got, ok, path)
		}
		n++
	}
	if n == 0 {
		t.Skip("ldconfig -p listed nothing")
	}
}

// FuzzLDCacheLookup: no input makes it fail, and every path it returns is
// a NUL-terminated string of the input.
func FuzzLDCacheLookup(f *testing.F) {
	f.Add(newLDCache(false, "a", "/b"), "a")
	f.Add(newLDCache(true, "a", "/b", "c", "/d"), "c")
	f.Fuzz(func(t *testing.T, b []byte, name string) {
		paths, _ := ldCacheLookup(b, name)
		for _, p := range paths {
			if p == "" || !bytes.Contains(b, append([]byte(p), 0)) {
				t.Fatalf("path %q is not in the input", p)
			}
		}
	})
}
