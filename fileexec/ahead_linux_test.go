//go:build linux

package fileexec

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// TestMarkAhead: once a file of a directory is ignore-marked, more of the
// directory's files that qualify are marked too, each mark walking twice
// as far as the one before, and their first opens raise no event; those
// that do not qualify (Static says no, a second link, another path to a
// protected file, a file made since) are decided when opened, and Forget
// undoes it all.
func TestMarkAhead(t *testing.T) {
	requireRoot(t)
	const plain = 40
	tests := []struct {
		name  string
		ahead int
		// Events raised by opening every file of the directory once, then
		// the file made since: of plain files, one per walk (16, 32, 64
		// entries: the directory's 44 in three), and the others.
		wantEvents uint64
	}{
		{name: "ahead", ahead: 4096, wantEvents: 3 + 3 + 1},
		{name: "not ahead", ahead: 0, wantEvents: plain + 3 + 1},
		// The directory read no further than three entries: the rest are
		// decided when opened (which three is the filesystem's order).
		{name: "bounded", ahead: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var files []string
			for i := range plain {
				files = append(files, filepath.Join(dir, fmt.Sprintf("f%02d", i)))
			}
			notStatic, linked, alias := filepath.Join(dir, "notstatic"), filepath.Join(dir, "linked"), filepath.Join(dir, "alias")
			files = append(files, notStatic, linked, alias)
			for _, p := range files {
				if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Link(linked, filepath.Join(t.TempDir(), "other-name")); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			aliasID := statID(t, alias)
			c := startChild(t)
			f, r := watch(t, c, allowAll, func(o *FileOptions) {
				o.Ahead = tt.ahead
				o.Static = func(p string, access event.FileAccess, v event.Verdict) bool {
					if access != "" && !v.Allowed() {
						t.Errorf("Static(%q) asked after an open for %q given %+v", p, access, v)
					}
					return p != notStatic
				}
				o.Alias = func(dev, ino uint64, p string) (string, bool) {
					return "/the/original", (fileID{dev, ino}) == aliasID
				}
			})
			// Each open, then the walk it started (if any) to its end, so
			// that what the next open finds marked does not depend on how
			// fast the walk is.
			openAll := func(paths ...string) uint64 {
				t.Helper()
				before := f.Stats().Events
				for _, p := range paths {
					if got := c.do(t, "open "+p+" r"); got != "ok" {
						t.Fatalf("open %s: %q", p, got)
					}
					waitFor(t, "the walk ahead to end", func() bool {
						f.markMu.Lock()
						defer f.markMu.Unlock()
						a := f.ahead[dir]
						return a == nil || !a.walking
					})
				}
				return f.Stats().Events - before
			}
			made := filepath.Join(dir, "new")
			got := openAll(files...)
			if err := os.WriteFile(made, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			got += openAll(made)
			if tt.ahead == 3 {
				// At most the three entries read (the directory may list
				// sub, or the exceptions, among them).
				if low := uint64(len(files)) + 1 - 3; got < low || got > uint64(len(files))+1 {
					t.Errorf("events: %d, want %d to %d", got, low, len(files)+1)
				}
				return
			}
			if got != tt.wantEvents {
				t.Errorf("events: %d, want %d; decided: %v", got, tt.wantEvents, r.decideCalls())
			}
			if tt.ahead == 0 {
				return
			}
			// Forget: the marks and the walks are gone; opening the files
			// again decides them again and marks ahead again (new is a
			// file of the directory like the others now).
			if err := f.Forget(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(uint64(3+3), openAll(append(files, made)...)); diff != "" {
				t.Errorf("events after Forget (-want +got):\n%s", diff)
			}
		})
	}
}

// statID is the device and inode of path.
func statID(t *testing.T, path string) fileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fileID{uint64(st.Dev), st.Ino}
}

// TestMarkAheadBounded: marking ahead stops at half CacheSize marks; it
// never evicts the marks of opens.
func TestMarkAheadBounded(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	for i := range 40 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := startChild(t)
	f, _ := watch(t, c, allowAll, func(o *FileOptions) {
		o.Ahead, o.CacheSize = 4096, 8
		o.Static = func(string, event.FileAccess, event.Verdict) bool { return true }
	})
	if got := c.do(t, "open "+filepath.Join(dir, "f00")+" r"); got != "ok" {
		t.Fatalf("open: %q", got)
	}
	waitFor(t, "the walk ahead to end", func() bool {
		f.markMu.Lock()
		defer f.markMu.Unlock()
		return !f.ahead[dir].walking
	})
	f.markMu.Lock()
	marked := len(f.marked)
	f.markMu.Unlock()
	if st := f.Stats(); marked != 4 || st.Static != 4 {
		t.Errorf("%d inodes marked (%d marks put), want 4: the open's and three ahead, none evicted", marked, st.Static)
	}
}
