package privdrop

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
)

// Options says who the agent runs as. Capabilities are always dropped and
// no_new_privs always set; Options only chooses the identity.
//
// The zero value runs the program as uid 0 and gid 0 with no supplementary
// groups. Use -1 for UID and GID to keep chaperone's own ids.
type Options struct {
	// UID and GID to switch to, or -1 to keep. A UID without a GID is
	// refused: it would leave the program in chaperone's group.
	UID, GID int
	// Groups are the supplementary groups. When UID or GID changes, nil
	// means none (never chaperone's); otherwise nil keeps them.
	Groups []int
	// Name and Home, when Name is set, replace USER, LOGNAME and (if Home
	// is set) HOME in the program's environment.
	Name, Home string
	// MountNS starts the program in a mount namespace of its own: a
	// private copy of chaperone's ("/" made recursively private), so that
	// marks on its mounts see only its opens. Needs CAP_SYS_ADMIN; only
	// with WrapGated.
	MountNS bool
	// ExecNotify runs the program, and everything it starts, under a
	// seccomp filter that hands every execve and execveat to a listener,
	// which Gate.Ready returns. The program's own first exec is the first
	// notification. The listener also gets unshare and clone asking for a
	// new mount namespace, and mount, umount2 and pivot_root, so that the
	// mounts of the namespaces the program makes are marked before it
	// goes on (fileexec's Nested); the new mount API (fsopen, open_tree,
	// move_mount, ...) fails with ENOSYS. Only with WrapGated.
	ExecNotify bool
	// Confine keeps the program inside the session when chaperone runs as
	// root. It starts in a mount namespace of its own, a private copy of
	// chaperone's (as MountNS), where every cgroup and cgroup2 mount is
	// read-only, so that it cannot move itself or any process out of the
	// session's cgroup even as uid 0. It runs under a seccomp filter that
	// refuses clone3 (whose CLONE_INTO_CGROUP a filter cannot see). The
	// program may make user namespaces, and in them mount and other
	// namespaces of its own (a sandbox such as bubblewrap): the copies of
	// the cgroup mounts stay read-only there (the kernel locks the flag of
	// a mount copied into a namespace of a less privileged user), and its
	// connections stay in the session's cgroup. A program of uid 0 is
	// refused new cgroup namespaces, in which it could mount its cgroups
	// afresh and writable. When the program runs as uid 0, which the
	// kernel lets signal and limit every process of that uid, the filter
	// also refuses what aims at chaperone by its pid or process group (see
	// filterSpec.guard), and [ProtectSelf] keeps it from reading
	// chaperone's memory. Needs CAP_SYS_ADMIN; with Wrap or WrapGated.
	// With ExecNotify, the two filters are one.
	Confine bool
}

// Keep returns the Options that keep chaperone's uid, gid and groups.
func Keep() Options { return Options{UID: -1, GID: -1} }

func (o Options) validate() error {
	for _, id := range []int{o.UID, o.GID} {
		if id < -1 || int64(id) > maxID {
			return fmt.Errorf("privdrop: id %d out of range", id)
		}
	}
	if o.UID >= 0 && o.GID < 0 {
		return errors.New("privdrop: uid set without gid")
	}
	if len(o.Groups) > maxGroups {
		return fmt.Errorf("privdrop: more than %d groups", maxGroups)
	}
	for _, g := range o.Groups {
		if g < 0 || int64(g) > maxID {
			return fmt.Errorf("privdrop: group %d out of range", g)
		}
	}
	return nil
}

// environ returns env with USER, LOGNAME and HOME set for o's user. It
// returns env unchanged when o names no user.
func (o Options) environ(env []string) []string {
	if o.Name == "" {
		return env
	}
	set := map[string]string{"USER": o.Name, "LOGNAME": o.Name}
	if o.Home != "" {
		set["HOME"] = o.Home
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range []string{"HOME", "USER", "LOGNAME"} {
		if v, ok := set[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// account is what the user database says about a user.
type account struct {
	UID, GID   int
	Name, Home string
	Groups     []int
}

// FromSudo returns the Options for the user who ran chaperone through sudo:
// when the effective uid is 0 and SUDO_UID is set, the program runs as
// SUDO_UID and SUDO_GID with that user's supplementary groups, name and home
// from the user database. Otherwise it returns Keep(). If the user is not in
// the database (a directory user in a build without cgo), the groups are just
// SUDO_GID, the name is SUDO_USER and HOME is left as it is.
func FromSudo(getenv func(string) string) (Options, error) {
	return fromSudo(getenv, os.Geteuid(), lookupID)
}

func fromSudo(getenv func(string) string, euid int, lookup func(uid int) (account, error)) (Options, error) {
	su := getenv("SUDO_UID")
	if euid != 0 || su == "" {
		return Keep(), nil
	}
	uid, err := parseNum(su, maxID)
	if err != nil {
		return Options{}, fmt.Errorf("privdrop: SUDO_UID: %w", err)
	}
	sg := getenv("SUDO_GID")
	if sg == "" {
		return Options{}, errors.New("privdrop: SUDO_UID set without SUDO_GID")
	}
	gid, err := parseNum(sg, maxID)
	if err != nil {
		return Options{}, fmt.Errorf("privdrop: SUDO_GID: %w", err)
	}
	o := Options{UID: uid, GID: gid, Groups: []int{gid}, Name: getenv("SUDO_USER")}
	a, err := lookup(uid)
	if err != nil {
		return o, nil
	}
	o.Name, o.Home = a.Name, a.Home
	o.Groups = withGroup(a.Groups, gid)
	return o, nil
}

// ForUser returns the Options for a user given by name or numeric uid, with
// the primary group, supplementary groups and home from the user database.
// The user must be in the database.
func ForUser(nameOrUID string) (Options, error) {
	var (
		a   account
		err error
	)
	if uid, perr := parseNum(nameOrUID, maxID); perr == nil {
		a, err = lookupID(uid)
	} else {
		a, err = lookupName(nameOrUID)
	}
	if err != nil {
		return Options{}, err
	}
	return Options{UID: a.UID, GID: a.GID, Groups: withGroup(a.Groups, a.GID), Name: a.Name, Home: a.Home}, nil
}

func lookupID(uid int) (account, error) {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return account{}, fmt.Errorf("privdrop: look up uid %d: %w", uid, err)
	}
	return fromUser(u)
}

func lookupName(name string) (account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return account{}, fmt.Errorf("privdrop: look up user: %w", err)
	}
	return fromUser(u)
}

func fromUser(u *user.User) (account, error) {
	uid, err := parseNum(u.Uid, maxID)
	if err != nil {
		return account{}, fmt.Errorf("privdrop: user %s: uid: %w", u.Username, err)
	}
	gid, err := parseNum(u.Gid, maxID)
	if err != nil {
		return account{}, fmt.Errorf("privdrop: user %s: gid: %w", u.Username, err)
	}
	a := account{UID: uid, GID: gid, Name: u.Username, Home: u.HomeDir}
	ids, err := u.GroupIds()
	if err != nil {
		return account{}, fmt.Errorf("privdrop: user %s: groups: %w", u.Username, err)
	}
	for _, s := range ids {
		g, err := parseNum(s, maxID)
		if err != nil {
			return account{}, fmt.Errorf("privdrop: user %s: group: %w", u.Username, err)
		}
		a.Groups = append(a.Groups, g)
	}
	return a, nil
}

// withGroup returns groups with gid in it, sorted and without duplicates, as
// login(1) would set them up.
func withGroup(groups []int, gid int) []int {
	g := append(slices.Clone(groups), gid)
	slices.Sort(g)
	return slices.Compact(g)
}
