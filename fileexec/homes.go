package fileexec

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// credentialFiles are the credential files, relative to a home directory,
// that WatchFiles's caller protects besides ~/.ssh/id_* (credentialKeys).
var credentialFiles = [...]string{
	".aws/credentials",
	".netrc",
	".config/gh/hosts.yml",
	".docker/config.json",
	".git-credentials",
	".kube/config",
	".npmrc",
	".pypirc",
}

// CredentialFiles returns the credential files of each of homes that
// exist now as regular files (symbolic links followed): ~/.ssh/id_*
// except the public keys (.pub), ~/.aws/credentials, ~/.netrc,
// ~/.config/gh/hosts.yml, ~/.docker/config.json, ~/.git-credentials,
// ~/.kube/config, ~/.npmrc and ~/.pypirc, home by home in the order
// given. Relative and empty homes are skipped. The daemon marks them
// (WatchFiles) so that an agent's opens of them are decided.
func CredentialFiles(homes []string) []string {
	var out []string
	for _, home := range homes {
		if !filepath.IsAbs(home) {
			continue
		}
		for _, rel := range credentialFiles {
			if p := filepath.Join(home, rel); regularFile(p) {
				out = append(out, p)
			}
		}
		// Read, not globbed: a home's name may hold glob metacharacters.
		ssh := filepath.Join(home, ".ssh")
		ents, _ := os.ReadDir(ssh)
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, "id_") && !strings.HasSuffix(n, ".pub") && regularFile(filepath.Join(ssh, n)) {
				out = append(out, filepath.Join(ssh, n))
			}
		}
	}
	return out
}

func regularFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// firstUserUID is the lowest uid of an ordinary user (Debian, Fedora,
// Arch: UID_MIN in /etc/login.defs).
const firstUserUID = 1000

// nobodyUID is the overflow user's, nobody's, whose home is / on some
// systems (Arch) and holds no one's credentials.
const nobodyUID = 65534

// Homes returns /root and the home directories of /etc/passwd's users
// with a uid of 1000 or more but nobody (65534), those that exist as
// directories, each once,
// /root first and then in /etc/passwd's order. Lines that are not a user
// entry (comments, NIS "+" and "-" lines, a bad uid, a relative home) are
// skipped; an unreadable /etc/passwd leaves /root alone.
func Homes() []string {
	b, _ := os.ReadFile("/etc/passwd")
	return homesOf(b, func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && st.IsDir()
	})
}

// homesOf is Homes for the passwd file b, with exists telling which
// directories exist.
func homesOf(b []byte, exists func(string) bool) []string {
	var out []string
	seen := map[string]bool{}
	add := func(h string) {
		if !seen[h] && exists(h) {
			seen[h] = true
			out = append(out, h)
		}
	}
	add("/root")
	for _, u := range parsePasswd(b) {
		if u.UID >= firstUserUID && u.UID != nobodyUID {
			add(u.Home)
		}
	}
	return out
}

// passwdUser is what Homes needs of one /etc/passwd entry.
type passwdUser struct {
	Name string
	UID  uint32
	Home string // absolute and clean
}

// parsePasswd reads the user entries of an /etc/passwd file
// (name:password:uid:gid:gecos:home:shell, passwd(5)). A line that is not
// one is skipped: a comment or blank line, an NIS line ("+" or "-"), one
// without seven fields, with an empty name, a uid or gid that is not a
// 32-bit decimal number, a home that is not an absolute path, or a NUL.
func parsePasswd(b []byte) []passwdUser {
	var out []passwdUser
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if u, ok := parsePasswdLine(string(line)); ok {
			out = append(out, u)
		}
	}
	return out
}

func parsePasswdLine(line string) (passwdUser, bool) {
	if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' || strings.IndexByte(line, 0) >= 0 {
		return passwdUser{}, false
	}
	f := strings.Split(line, ":")
	if len(f) != 7 || f[0] == "" {
		return passwdUser{}, false
	}
	// Base 10 takes no sign, prefix or underscore.
	uid, err := strconv.ParseUint(f[2], 10, 32)
	if err != nil {
		return passwdUser{}, false
	}
	if _, err := strconv.ParseUint(f[3], 10, 32); err != nil {
		return passwdUser{}, false
	}
	if !strings.HasPrefix(f[5], "/") {
		return passwdUser{}, false
	}
	return passwdUser{Name: f[0], UID: uint32(uid), Home: filepath.Clean(f[5])}, true
}
