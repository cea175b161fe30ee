package attribution

import (
	"io/fs"
	"os"
	"testing"
)

// openCounter is the real /proc, counting opens for reading.
type openCounter struct {
	dirFS
	opens int
}

func (o *openCounter) Open(name string) (fs.File, error) {
	o.opens++
	return o.dirFS.Open(name)
}

// A digest in the cache is found without opening the executable for
// reading (an open fanotify would hold on a watched mount).
func TestExeDigestCachedWithoutOpen(t *testing.T) {
	fsys := &openCounter{dirFS: dirFS("/proc")}
	tbl := NewTable(fsys)
	first, err := tbl.ExeDigest(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	second, err := tbl.ExeDigest(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Errorf("digests differ: %s, %s", first, second)
	}
	if fsys.opens != 1 {
		t.Errorf("%d opens for reading, want 1 (the first, to hash)", fsys.opens)
	}
}
