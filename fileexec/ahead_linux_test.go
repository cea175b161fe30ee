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

// TestMarkAhead: once one file of a directory is ignore-marked, the
// directory's other files that qualify are marked too, and their first
// opens raise no event; those that do not qualify (Static says no, a
// second link, another path to a protected file, a file made since) are
// decided when opened, and Forget undoes it all.
func TestMarkAhead(t *testing.T) {
	requireRoot(t)
	const plain = 40
	tests := []struct {
		name  string
		ahead int
		// Events raised by opening every file of the directory once more
		// after the first, and then the file made since.
		wantEvents uint64
	}{
		// notstatic, linked, alias, new.
		{name: "ahead", ahead: 4096, wantEvents: 4},
		// Every file but the first, and new.
		{name: "not ahead", ahead: 0, wantEvents: plain - 1 + 3 + 1},
		// The directory read no further than three entries: the rest, and
		// the three others, are decided when opened (which entries are
		// read first is the filesystem's order).
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
			if got := c.do(t, "open "+files[0]+" r"); got != "ok" {
				t.Fatalf("first open: %q", got)
			}
			// The directory is marked ahead after the open is answered:
			// wait for its marks (the test's deadline bounds it).
			wantMarks := uint64(1)
			if tt.ahead > 0 {
				wantMarks = min(plain, uint64(tt.ahead)) // the first, and the others read that qualify
				if tt.ahead >= plain+3 {
					wantMarks = plain
				}
			}
			if tt.ahead != 3 {
				waitFor(t, "the directory marked ahead", func() bool { return f.Stats().Static >= wantMarks })
			}
			before := f.Stats()
			for _, p := range files[1:] {
				if got := c.do(t, "open "+p+" r"); got != "ok" {
					t.Fatalf("open %s: %q", p, got)
				}
			}
			made := filepath.Join(dir, "new")
			if err := os.WriteFile(made, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if got := c.do(t, "open "+made+" r"); got != "ok" {
				t.Fatalf("open %s: %q", made, got)
			}
			got := f.Stats().Events - before.Events
			if tt.ahead == 3 {
				// At most the two other entries read (the directory may
				// list sub, or the exceptions, among the first three).
				if low := uint64(len(files)) - 1 - 2; got < low-3 || got > uint64(len(files)) {
					t.Errorf("events after the first open: %d, want about %d", got, low)
				}
				return
			}
			if got != tt.wantEvents {
				t.Errorf("events after the first open: %d, want %d; decided: %v", got, tt.wantEvents, r.decideCalls())
			}
			if tt.ahead == 0 {
				return
			}
			// Forget: the marks and the directory's walk are gone; the
			// next open is decided and marks ahead again.
			if err := f.Forget(); err != nil {
				t.Fatal(err)
			}
			before = f.Stats()
			if got := c.do(t, "open "+files[1]+" r"); got != "ok" {
				t.Fatalf("open after Forget: %q", got)
			}
			// The directory again, and new.
			waitFor(t, "the directory marked ahead again", func() bool { return f.Stats().Static-before.Static >= plain+1 })
			before = f.Stats()
			for _, p := range files {
				if got := c.do(t, "open "+p+" r"); got != "ok" {
					t.Fatalf("open %s: %q", p, got)
				}
			}
			if diff := cmp.Diff(uint64(3), f.Stats().Events-before.Events); diff != "" {
				t.Errorf("events after Forget and a walk (-want +got):\n%s", diff)
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
