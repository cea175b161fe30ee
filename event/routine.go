package event

import "strings"

// Routine reports whether e is a routine file read: an allowed open for
// reading (decided by the policy's default or a rule, not by a person, a
// plugin or the judge) of a file that programs read as a matter of course
// and that holds nothing of the user's secrets:
//
//   - shared libraries and the loader's cache: /lib/, /lib64/, /usr/lib/,
//     /usr/lib64/, /usr/local/lib/, /etc/ld.so.cache, and any *.so or
//     *.so.N file;
//   - locale, time zone, font and certificate data: /usr/share/locale/,
//     /usr/share/i18n/, /usr/share/zoneinfo/, /usr/share/fonts/,
//     /usr/share/ca-certificates/, /etc/localtime, /etc/fonts/,
//     /etc/ssl/certs/, /etc/ca-certificates/;
//   - the agent's caches under its home: .cache/, .npm/, go/pkg/mod/,
//     .cargo/registry/, .rustup/, .m2/repository/, .gradle/caches/,
//     .local/share/uv/;
//   - the session's working tree (session.workdir).
//
// A read of a file whose name says it holds credentials (.env files,
// .netrc, .git-credentials, private keys: id_*, *.pem, *.key, *.p12,
// anything under .ssh/, .aws/, .gnupg/, .docker/, .kube/, .config/gh/)
// is never routine, wherever it is; nor is a write, an exec, an open of
// unknown access, a link, a rename, or anything not allowed.
//
// The working tree and home come from e.SessionInfo, which the session
// sets on file events; without it only the system's paths count. The audit
// log folds routine reads into one record per process; the live views
// may hide them.
func Routine(e *Event) bool {
	if e.Kind != KindFile || e.File == nil || e.File.Op != "" || e.File.Access != FileRead ||
		e.Verdict.Action != Allow || (e.Verdict.DecidedBy != DecidedByDefault && e.Verdict.DecidedBy != DecidedByRule) {
		return false
	}
	path := e.File.Path
	if !strings.HasPrefix(path, "/") || strings.Contains(path, "/../") || strings.HasSuffix(path, "/..") || credentialName(path) {
		return false
	}
	for _, p := range routinePrefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	switch path {
	case "/etc/ld.so.cache", "/etc/localtime":
		return true
	}
	if sharedLibrary(path[strings.LastIndexByte(path, '/')+1:]) {
		return true
	}
	s := e.SessionInfo
	if s == nil {
		return false
	}
	if under(path, s.Workdir) {
		return true
	}
	if s.Home != "" && under(path, s.Home) {
		rel := path[len(strings.TrimSuffix(s.Home, "/"))+1:]
		for _, c := range homeCaches {
			if strings.HasPrefix(rel, c) {
				return true
			}
		}
	}
	return false
}

// routinePrefixes are the system's directories whose reads are routine.
var routinePrefixes = [...]string{
	"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/lib/",
	"/usr/share/locale/", "/usr/share/i18n/", "/usr/share/zoneinfo/", "/usr/share/fonts/",
	"/usr/share/ca-certificates/", "/etc/fonts/", "/etc/ssl/certs/", "/etc/ca-certificates/",
}

// homeCaches are the agents' and their tools' caches, relative to a home.
var homeCaches = [...]string{
	".cache/", ".npm/", "go/pkg/mod/", ".cargo/registry/", ".rustup/", ".m2/repository/",
	".gradle/caches/", ".local/share/uv/",
}

// under reports whether path is inside dir (not dir itself).
func under(path, dir string) bool {
	if dir == "" || dir == "/" {
		return false
	}
	dir = strings.TrimSuffix(dir, "/")
	return len(path) > len(dir)+1 && path[len(dir)] == '/' && strings.HasPrefix(path, dir)
}

// sharedLibrary reports whether a file's name is a shared library's:
// NAME.so or NAME.so.VERSION.
func sharedLibrary(name string) bool {
	i := strings.Index(name, ".so")
	if i <= 0 {
		return false
	}
	rest := name[i+3:]
	return rest == "" || rest[0] == '.' && strings.Trim(rest, ".0123456789") == ""
}

// credentialName reports whether path names a file that holds
// credentials by its name or its directory.
func credentialName(path string) bool {
	for _, d := range [...]string{"/.ssh/", "/.aws/", "/.gnupg/", "/.docker/", "/.kube/", "/.config/gh/"} {
		if strings.Contains(path, d) {
			return true
		}
	}
	name := path[strings.LastIndexByte(path, '/')+1:]
	switch {
	case name == ".env", strings.HasPrefix(name, ".env."), name == ".netrc", name == ".git-credentials",
		strings.HasPrefix(name, "id_"), strings.HasSuffix(name, ".pem"), strings.HasSuffix(name, ".key"),
		strings.HasSuffix(name, ".p12"), strings.HasSuffix(name, ".pfx"):
		return true
	}
	return false
}
