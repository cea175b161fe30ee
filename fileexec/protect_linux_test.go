//go:build linux

package fileexec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// protectedTree lays out a session's protected files under a fresh
// directory (its real path: the test's temporary directory may be reached
// through a symbolic link):
//
//	work/policy.yaml      NoWrite, named through the symbolic link link.yaml
//	work/plugin.py        NoWrite
//	logs/audit.jsonl      NoAccess
//	state/                NoAccess tree (ca-key.pem, sub/x)
//	home/.aws/credentials an alias
//	hard                  a hard link to the policy, made before
func protectedTree(t *testing.T) (dir string, p *Protected) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"work", "logs", "state/sub", "home/.aws", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"work/policy.yaml", "work/plugin.py", "logs/audit.jsonl", "state/ca-key.pem", "state/sub/x", "home/.aws/credentials", "other/x"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f+"\n"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.Symlink("work/policy.yaml", filepath.Join(dir, "link.yaml")))
	must(t, os.Link(filepath.Join(dir, "work/policy.yaml"), filepath.Join(dir, "hard")))
	p, err = NewProtected([]Protect{
		{Path: filepath.Join(dir, "link.yaml"), What: "the policy file", Protection: NoWrite},
		{Path: filepath.Join(dir, "work/plugin.py"), What: "a plugin", Protection: NoWrite},
		{Path: filepath.Join(dir, "logs/audit.jsonl"), What: "the audit log", Protection: NoAccess},
		{Path: filepath.Join(dir, "state"), What: "Chaperone's state", Protection: NoAccess, Tree: true},
		{Path: filepath.Join(dir, "state/ca-key.pem"), What: "inside the tree", Protection: NoWrite},
		{Path: filepath.Join(dir, "missing.yaml"), What: "the config file", Protection: NoWrite},
	}, []string{filepath.Join(dir, "home/.aws/credentials")})
	if err != nil {
		t.Fatal(err)
	}
	return dir, p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func idOf(t *testing.T, path string) fileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fileID{uint64(st.Dev), st.Ino}
}

func TestProtectedOpen(t *testing.T) {
	dir, p := protectedTree(t)
	at := func(rel string) string { return filepath.Join(dir, rel) }
	for _, tt := range []struct {
		name, path, by string // by: the path whose inode the open reaches ("" for none known)
		access         event.FileAccess
		refused        bool
		what           string
	}{
		{"policy read", "work/policy.yaml", "work/policy.yaml", event.FileRead, false, ""},
		{"policy run", "work/policy.yaml", "work/policy.yaml", event.FileExec, false, ""},
		{"policy written", "work/policy.yaml", "work/policy.yaml", event.FileWrite, true, "the policy file"},
		{"policy of unknown access", "work/policy.yaml", "work/policy.yaml", event.FileUnknown, true, "the policy file"},
		{"policy written by its hard link", "hard", "hard", event.FileWrite, true, "the policy file"},
		{"policy read by its hard link", "hard", "hard", event.FileRead, false, ""},
		{"audit log read", "logs/audit.jsonl", "logs/audit.jsonl", event.FileRead, true, "the audit log"},
		{"state file read", "state/sub/x", "state/sub/x", event.FileRead, true, "Chaperone's state"},
		{"the tree holds over a file in it", "state/ca-key.pem", "state/ca-key.pem", event.FileRead, true, "Chaperone's state"},
		{"a state file made later, by its path", "state/new", "", event.FileRead, true, "Chaperone's state"},
		{"a lookalike of the state directory", "state2/x", "", event.FileWrite, false, ""},
		{"another file written", "other/x", "other/x", event.FileWrite, false, ""},
		{"the missing config file", "missing.yaml", "", event.FileWrite, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var id fileID
			if tt.by != "" {
				id = idOf(t, at(tt.by))
			}
			v, refused := p.Open(id, at(tt.path), tt.access)
			if refused != tt.refused {
				t.Fatalf("Open refused %v (%v), want %v", refused, v, tt.refused)
			}
			if refused && (v.Action != event.Deny || v.Rule != RuleProtected || !strings.Contains(v.Reason, tt.what)) {
				t.Errorf("verdict %v, want a deny by %s naming %q", v, RuleProtected, tt.what)
			}
		})
	}
	if !p.Protects(idOf(t, at("work")), at("work")) || !p.Protects(idOf(t, at("hard")), at("hard")) || p.Protects(idOf(t, at("other/x")), at("other/x")) {
		t.Error("Protects: want the policy's directory and the hard link protected, other/x not")
	}
	if orig, ok := p.Alias(unpack2(idOf(t, at("home/.aws/credentials")), at("home/.aws/credentials"))); ok {
		t.Errorf("Alias of the credentials by their own path = %q", orig)
	}
	must(t, os.Link(at("home/.aws/credentials"), at("other/creds")))
	if orig, ok := p.Alias(unpack2(idOf(t, at("other/creds")), at("other/creds"))); !ok || orig != at("home/.aws/credentials") {
		t.Errorf("Alias of a hard link to the credentials = %q, %v", orig, ok)
	}
}

func unpack2(id fileID, path string) (uint64, uint64, string) {
	return id.dev, id.ino, path
}

func TestProtectedChange(t *testing.T) {
	dir, p := protectedTree(t)
	at := func(rel string) string { return filepath.Join(dir, rel) }
	id := func(rel string) fileID { return idOf(t, at(rel)) }
	for _, tt := range []struct {
		name    string
		c       change
		refused bool
	}{
		{"link the policy", change{op: "link", src: id("work/policy.yaml"), srcPath: at("work/policy.yaml"), dstPath: at("work/l")}, true},
		{"link the policy by its hard link", change{op: "link", src: id("hard"), srcPath: at("hard"), dstPath: at("other/l")}, true},
		{"rename the policy", change{op: "rename", src: id("work/policy.yaml"), srcPath: at("work/policy.yaml"), dstPath: at("work/p2")}, true},
		{"rename over the policy", change{op: "rename", src: id("other/x"), srcPath: at("other/x"), dst: id("work/policy.yaml"), dstPath: at("work/policy.yaml"), dstExists: true}, true},
		{"rename its directory", change{op: "rename", src: id("work"), srcPath: at("work"), dstPath: at("work2")}, true},
		{"rename over its directory", change{op: "rename", src: id("other"), srcPath: at("other"), dst: id("work"), dstPath: at("work"), dstExists: true}, true},
		{"rename the directory above it", change{op: "rename", src: idOf(t, dir), srcPath: dir, dstPath: dir + "2"}, true},
		{"truncate the policy", change{op: "truncate", src: id("work/policy.yaml"), srcPath: at("work/policy.yaml")}, true},
		{"truncate the audit log", change{op: "truncate", src: id("logs/audit.jsonl"), srcPath: at("logs/audit.jsonl")}, true},
		{"rename out of the state", change{op: "rename", src: id("state/sub/x"), srcPath: at("state/sub/x"), dstPath: at("other/y")}, true},
		{"link into the state", change{op: "link", src: id("other/x"), srcPath: at("other/x"), dstPath: at("state/y")}, true},
		{"rename something else", change{op: "rename", src: id("other/x"), srcPath: at("other/x"), dstPath: at("work/y")}, false},
		{"link something else", change{op: "link", src: id("other/x"), srcPath: at("other/x"), dstPath: at("work/y")}, false},
		{"truncate something else", change{op: "truncate", src: id("other/x"), srcPath: at("other/x")}, false},
		{"rename a file beside the policy", change{op: "rename", src: id("other/x"), srcPath: at("other/x"), dstPath: at("work/z")}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, refused := p.change(tt.c)
			if refused != tt.refused {
				t.Fatalf("change refused %v (%v), want %v", refused, v, tt.refused)
			}
			if refused && (v.Action != event.Deny || v.Rule != RuleProtected || v.Reason == "") {
				t.Errorf("verdict %v", v)
			}
		})
	}
}

// The mounts go from the root down: every directory before what is under
// it; files and trees read-only, directories as they are.
func TestProtectedMounts(t *testing.T) {
	dir, p := protectedTree(t)
	ms := p.Mounts()
	seen := map[string]bool{}
	var readOnly []string
	for _, m := range ms {
		for d := filepath.Dir(m.Path); d != "/"; d = filepath.Dir(d) {
			if !seen[d] {
				t.Errorf("%s is mounted before %s, above it", m.Path, d)
			}
		}
		seen[m.Path] = true
		if m.ReadOnly {
			readOnly = append(readOnly, strings.TrimPrefix(m.Path, dir+"/"))
		}
	}
	if d := cmp.Diff([]string{"state", "logs/audit.jsonl", "work/plugin.py", "work/policy.yaml"}, readOnly); d != "" {
		t.Errorf("read-only mounts (-want +got):\n%s", d)
	}
	if seen[filepath.Join(dir, "state/sub")] || seen[filepath.Join(dir, "other")] || seen["/"] {
		t.Errorf("mounts %+v: want none inside the tree, of other, or of /", ms)
	}
}

// In the session's namespace the kernel itself refuses what would change a
// protected file, by any path, while the rest of the machine sees no
// change.
func TestMountProtection(t *testing.T) {
	requireRoot(t)
	dir, p := protectedTree(t)
	at := func(rel string) string { return filepath.Join(dir, rel) }
	c := startChild(t)
	if got := c.do(t, "cd "+at("work")); got != "ok" {
		t.Fatalf("child: %q", got)
	}
	if err := MountProtection(c.pid, p); err != nil {
		t.Fatal(err)
	}
	if got := c.do(t, "recd ."); got != "ok" {
		t.Fatalf("child: %q", got)
	}
	for _, tt := range []struct{ op, want string }{
		{"fsop read " + at("work/policy.yaml"), "ok"},
		{"fsop write " + at("work/policy.yaml"), "err EROFS"},
		{"fsop write policy.yaml", "err EROFS"}, // from the working directory, entered again
		{"fsop append " + at("logs/audit.jsonl"), "err EROFS"},
		{"fsop trunc " + at("work/policy.yaml"), "err EROFS"},
		{"fsop rename " + at("work/policy.yaml") + " " + at("work/moved"), "err EBUSY"},
		{"fsop rename " + at("other/x") + " " + at("work/policy.yaml"), "err EXDEV"}, // the directory is a mount of its own
		{"open " + at("work/new") + " c", "ok"},
		{"fsop rename " + at("work/new") + " " + at("work/policy.yaml"), "err EBUSY"},
		{"fsop unlink " + at("work/policy.yaml"), "err EBUSY"},
		{"fsop link " + at("work/policy.yaml") + " " + at("work/linked"), "err EXDEV"},
		{"fsop rename " + at("work") + " " + at("work2"), "err EBUSY"},
		{"fsop rename " + dir + " " + dir + "-moved", "err EBUSY"},
		{"fsop unlink " + at("state/ca-key.pem"), "err EROFS"},
		{"fsop write " + at("state/new"), "err ENOENT"},
		{"fsop rename " + at("other/x") + " " + at("state/x"), "err EXDEV"},
		{"fsop write " + at("other/x"), "ok"},
		{"fsop rename " + at("work/policy.yaml") + " " + at("work/policy.yaml") + ".bak", "err EBUSY"},
	} {
		if got := c.do(t, tt.op); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.op, got, tt.want)
		}
	}
	// The pre-existing hard link is another name on a writable mount: its
	// opens are refused by inode (Files), not by the kernel.
	if got := c.do(t, "fsop write "+at("hard")); got != "ok" {
		t.Errorf("write through the hard link: %s (the kernel cannot know it)", got)
	}
	if b, err := os.ReadFile(at("work/policy.yaml")); err != nil || string(b) != "work/policy.yaml\n" {
		t.Errorf("the policy is %q, %v; want it unchanged", b, err)
	}
	// Outside the session's namespace nothing changed.
	if err := os.WriteFile(at("work/policy.yaml"), []byte("changed by its owner\n"), 0o666); err != nil {
		t.Errorf("the policy's owner cannot write it: %v", err)
	}
	if got := c.do(t, "fsop read "+at("work/policy.yaml")); got != "ok" {
		t.Errorf("read after its owner changed it: %s", got)
	}
}

// Opens of protected files are refused whatever the policy, by path and
// by inode, and published; a protected file is never ignore-marked, even
// where the policy would let every open of it through.
func TestProtectedOpens(t *testing.T) {
	requireRoot(t)
	dir, p := protectedTree(t)
	at := func(rel string) string { return filepath.Join(dir, rel) }
	c := startChild(t)
	f, r := watch(t, c, allowAll, func(o *FileOptions) {
		o.Protected = p
		o.Static = func(string, event.FileAccess, event.Verdict) bool { return true }
	})
	for _, tt := range []struct{ op, want string }{
		{"open " + at("work/policy.yaml") + " r", "ok"},
		{"open " + at("work/plugin.py") + " r", "ok"}, // one link: it would be ignore-marked if it were not protected
		{"open " + at("work/plugin.py") + " w", "err EPERM"},
		{"open " + at("work/policy.yaml") + " w", "err EPERM"},
		{"open " + at("work/policy.yaml") + " t", "err EPERM"},
		{"open " + at("hard") + " a", "err EPERM"},
		{"open " + at("logs/audit.jsonl") + " r", "err EPERM"},
		{"open " + at("state/sub/x") + " r", "err EPERM"},
		{"open " + at("other/x") + " rw", "ok"},
	} {
		if got := c.do(t, tt.op); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.op, got, tt.want)
		}
	}
	var got []string
	for _, e := range r.events() {
		if e.Verdict.Rule == RuleProtected {
			if e.Process == nil || e.Process.PID != c.pid {
				t.Errorf("event %+v: want the child's process", e)
			}
			got = append(got, strings.TrimPrefix(e.File.Path, dir+"/")+" "+string(e.File.Access))
		}
	}
	want := []string{"work/plugin.py write", "work/policy.yaml write", "work/policy.yaml write", "hard write", "logs/audit.jsonl read", "state/sub/x read"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("refusals published (-want +got):\n%s", d)
	}
	// other/x is ignore-marked, the plugin is not.
	if n := f.Stats().Static; n != 1 {
		t.Errorf("%d files ignore-marked, want 1 (other/x): a protected file was marked", n)
	}
}

// BenchmarkProtectedOpen is what a session adds to every open it decides
// or answers from the cache: the protected set's lookup of the file.
func BenchmarkProtectedOpen(b *testing.B) {
	dir := b.TempDir()
	var list []Protect
	for _, n := range []string{"policy.yaml", "config.yaml", "audit.jsonl"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			b.Fatal(err)
		}
		list = append(list, Protect{Path: filepath.Join(dir, n), Protection: NoWrite})
	}
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	list = append(list, Protect{Path: filepath.Join(dir, "state"), Protection: NoAccess, Tree: true})
	p, err := NewProtected(list, nil)
	if err != nil {
		b.Fatal(err)
	}
	id, path := fileID{dev: 2049, ino: 123456}, "/home/u/proj/src/main.go"
	b.ReportAllocs()
	for b.Loop() {
		if _, refused := p.Open(id, path, event.FileRead); refused {
			b.Fatal("refused")
		}
		if p.Protects(id, path) {
			b.Fatal("protected")
		}
	}
}
