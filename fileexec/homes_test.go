package fileexec

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePasswd(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []passwdUser
	}{
		{"debian", "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\nalice:x:1000:1000:Alice,,,:/home/alice:/bin/bash\n",
			[]passwdUser{{"root", 0, "/root"}, {"daemon", 1, "/usr/sbin"}, {"alice", 1000, "/home/alice"}}},
		{"no final newline, CRLF", "bob:x:1001:1001::/home/bob:/bin/sh\r\ncarol:x:1002:1002::/home/carol/:/bin/sh",
			[]passwdUser{{"bob", 1001, "/home/bob"}, {"carol", 1002, "/home/carol"}}},
		{"comments, blanks, NIS", "# users\n\n+@admins::::::\n-mallory::::::\n+\nbob:x:1001:1001::/home/bob:/bin/sh\n",
			[]passwdUser{{"bob", 1001, "/home/bob"}}},
		{"bad fields", strings.Join([]string{
			"short:x:1000:1000:/home/short:/bin/sh",          // six fields
			"long:x:1000:1000::/home/long:/bin/sh:extra",     // eight
			":x:1000:1000::/home/noname:/bin/sh",             // no name
			"neg:x:-1:1000::/home/neg:/bin/sh",               // signed uid
			"plus:x:+1000:1000::/home/plus:/bin/sh",          // signed uid
			"hex:x:0x3e8:1000::/home/hex:/bin/sh",            // not decimal
			"big:x:4294967296:1000::/home/big:/bin/sh",       // over 32 bits
			"gid:x:1000:g::/home/gid:/bin/sh",                // bad gid
			"rel:x:1000:1000::home/rel:/bin/sh",              // relative home
			"empty:x:1000:1000:::/bin/sh",                    // no home
			"nul:x:1000:1000::/home/n\x00ul:/bin/sh",         // NUL
			"ok:x:4294967295:1000::/home/../home/ok:/bin/sh", // the largest uid; home cleaned
		}, "\n"), []passwdUser{{"ok", 4294967295, "/home/ok"}}},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, parsePasswd([]byte(tt.in))); d != "" {
				t.Errorf("parsePasswd (-want +got):\n%s", d)
			}
		})
	}
}

func TestHomesOf(t *testing.T) {
	passwd := "root:x:0:0:root:/root:/bin/bash\n" +
		"nobody:x:65534:65534:nobody:/:/usr/sbin/nologin\n" + // Arch's
		"sys:x:999:999::/home/sys:/bin/sh\n" + // below 1000
		"alice:x:1000:1000::/home/alice:/bin/bash\n" +
		"garbage line\n" +
		"alias:x:1003:1003::/home/alice/:/bin/bash\n" + // alice's home again
		"gone:x:1004:1004::/home/gone:/bin/bash\n" +
		"toor:x:1005:0::/root:/bin/bash\n" // /root again
	exist := map[string]bool{"/": true, "/root": true, "/home/alice": true, "/home/sys": true}
	tests := []struct {
		name   string
		passwd string
		exist  map[string]bool
		want   []string
	}{
		{"passwd", passwd, exist, []string{"/root", "/home/alice"}},
		{"no passwd", "", exist, []string{"/root"}},
		{"no /root", passwd, map[string]bool{"/home/alice": true}, []string{"/home/alice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := homesOf([]byte(tt.passwd), func(p string) bool { return tt.exist[p] })
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("homesOf (-want +got):\n%s", d)
			}
		})
	}
}

// TestHomes reads this machine's /etc/passwd: /root, when it exists, is
// first, and every home is an existing directory.
func TestHomes(t *testing.T) {
	got := Homes()
	if st, err := os.Stat("/root"); err == nil && st.IsDir() && (len(got) == 0 || got[0] != "/root") {
		t.Errorf("Homes() = %q, want /root first", got)
	}
	for _, h := range got {
		if st, err := os.Stat(h); err != nil || !st.IsDir() {
			t.Errorf("Homes() lists %s, not a directory: %v", h, err)
		}
	}
}

func TestCredentialFiles(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, p := range []string{
		"a/.ssh/id_ed25519", "a/.ssh/id_ed25519.pub", "a/.ssh/id_rsa", "a/.ssh/known_hosts", "a/.ssh/config",
		"a/.aws/credentials", "a/.aws/config", "a/.netrc", "a/.config/gh/hosts.yml", "a/.docker/config.json",
		"a/.git-credentials", "a/.kube/config", "a/.npmrc", "a/.pypirc", "a/.bashrc",
		"b/.npmrc", "b/.target",
	} {
		home, rel, _ := strings.Cut(p, "/")
		p = filepath.Join(map[string]string{"a": a, "b": b}[home], rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Not regular files: a directory where a file is expected, a dangling
	// link; a link to a regular file counts.
	for _, d := range []string{"b/.ssh/id_dir", "b/.aws/credentials"} {
		home, rel, _ := strings.Cut(d, "/")
		if err := os.MkdirAll(filepath.Join(map[string]string{"a": a, "b": b}[home], rel), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("nowhere", filepath.Join(b, ".netrc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(b, ".target"), filepath.Join(b, ".git-credentials")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		a + "/.aws/credentials", a + "/.netrc", a + "/.config/gh/hosts.yml", a + "/.docker/config.json",
		a + "/.git-credentials", a + "/.kube/config", a + "/.npmrc", a + "/.pypirc",
		a + "/.ssh/id_ed25519", a + "/.ssh/id_rsa",
		b + "/.git-credentials", b + "/.npmrc",
	}
	got := CredentialFiles([]string{a, "relative/home", "", b, filepath.Join(a, "missing")})
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("CredentialFiles (-want +got):\n%s", d)
	}
	if got := CredentialFiles(nil); got != nil {
		t.Errorf("CredentialFiles(nil) = %q, want nil", got)
	}
}

// FuzzParsePasswd checks that parsePasswd reads a file as the sum of its
// lines, that what it returns is well formed, and that the entries written
// back as lines read back the same.
func FuzzParsePasswd(f *testing.F) {
	f.Add([]byte("root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000:Alice:/home/alice:/bin/bash\n"))
	f.Add([]byte("+@admins::::::\n# c\n\nbob:x:1001:1001::/home/bob/:/bin/sh\r\n"))
	f.Add([]byte("a:x:4294967296:0::/h:/s\nb:x:-1:0::/h:/s\nc:x:1:0::h:/s"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got := parsePasswd(b)
		var byLine []passwdUser
		for _, l := range bytes.Split(b, []byte("\n")) {
			byLine = append(byLine, parsePasswd(l)...)
		}
		if d := cmp.Diff(byLine, got); d != "" {
			t.Fatalf("the whole file and its lines one by one differ (-lines +file):\n%s", d)
		}
		var back strings.Builder
		for _, u := range got {
			if u.Name == "" || strings.ContainsAny(u.Name, ":\n\x00") {
				t.Fatalf("name %q", u.Name)
			}
			if !filepath.IsAbs(u.Home) || filepath.Clean(u.Home) != u.Home || strings.ContainsAny(u.Home, ":\n\x00") {
				t.Fatalf("home %q", u.Home)
			}
			fmt.Fprintf(&back, "%s:x:%d:0::%s:/bin/sh\n", u.Name, u.UID, u.Home)
		}
		if d := cmp.Diff(got, parsePasswd([]byte(back.String()))); d != "" {
			t.Fatalf("written back and read again (-first +again):\n%s", d)
		}
	})
}
