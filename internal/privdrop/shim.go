package privdrop

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ShimArg is the hidden argv[1] that makes chaperone's binary act as the
// shim. What follows it is written by Wrap and read by RunShim.
const ShimArg = "__chaperone-exec"

// maxID is the largest uid or gid: (uid_t)-1 is reserved as "no change".
const maxID = 1<<32 - 2

// maxGroups is the kernel's NGROUPS_MAX.
const maxGroups = 65536

// shimSpec is what the shim does, as carried on its command line:
//
//	__chaperone-exec [--uid N] [--gid N] [--groups a,b] [--pdeathsig N] [--gate N]
//	    [--mountns 1] [--exec-notify 1] [--confine 1] -- path argv0 [args...]
type shimSpec struct {
	UID, GID  int   // -1 keeps the current id
	Gate      int   // fd of the gate socket; -1 for none
	MountNS   bool  // make "/" recursively private (the namespace is new)
	Notify    bool  // install the exec notification filter
	Confine   bool  // private mounts, read-only cgroups, the session's filter
	Groups    []int // nil keeps the supplementary groups; empty clears them
	Pdeathsig int   // 0 for none; re-armed after the uid change clears it
	Path      string
	Argv      []string
}

// args renders s as the arguments that follow ShimArg.
func (s shimSpec) args() []string {
	var a []string
	if s.UID >= 0 {
		a = append(a, "--uid", strconv.Itoa(s.UID))
	}
	if s.GID >= 0 {
		a = append(a, "--gid", strconv.Itoa(s.GID))
	}
	if s.Groups != nil {
		g := make([]string, len(s.Groups))
		for i, id := range s.Groups {
			g[i] = strconv.Itoa(id)
		}
		a = append(a, "--groups", strings.Join(g, ","))
	}
	if s.Pdeathsig != 0 {
		a = append(a, "--pdeathsig", strconv.Itoa(s.Pdeathsig))
	}
	if s.Gate >= 0 {
		a = append(a, "--gate", strconv.Itoa(s.Gate))
	}
	if s.MountNS {
		a = append(a, "--mountns", "1")
	}
	if s.Notify {
		a = append(a, "--exec-notify", "1")
	}
	if s.Confine {
		a = append(a, "--confine", "1")
	}
	a = append(a, "--", s.Path)
	return append(a, s.Argv...)
}

// parseShimArgs reads the arguments that follow ShimArg. It accepts exactly
// what args produces (each flag at most once, decimal numbers only) and
// rejects everything else, since a mistake here would run the program with
// the wrong identity.
func parseShimArgs(args []string) (shimSpec, error) {
	s := shimSpec{UID: -1, GID: -1, Gate: -1}
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		flag := args[i]
		if flag == "--" {
			rest := args[i+1:]
			if len(rest) < 2 {
				return shimSpec{}, errors.New("privdrop: shim: want a path and argv[0] after --")
			}
			if rest[0] == "" {
				return shimSpec{}, errors.New("privdrop: shim: empty program path")
			}
			s.Path, s.Argv = rest[0], rest[1:]
			return s, s.checkGate()
		}
		if seen[flag] {
			return shimSpec{}, fmt.Errorf("privdrop: shim: %q given twice", flag)
		}
		seen[flag] = true
		if i+1 >= len(args) {
			return shimSpec{}, fmt.Errorf("privdrop: shim: %q needs a value", flag)
		}
		i++
		val := args[i]
		var err error
		switch flag {
		case "--uid":
			s.UID, err = parseNum(val, maxID)
		case "--gid":
			s.GID, err = parseNum(val, maxID)
		case "--groups":
			s.Groups, err = parseGroups(val)
		case "--gate":
			s.Gate, err = parseNum(val, 1<<20)
			if err == nil && s.Gate < 3 {
				err = errors.New("not an inherited extra file")
			}
		case "--mountns", "--exec-notify", "--confine":
			if val != "1" {
				err = errors.New("want 1")
			}
			switch flag {
			case "--mountns":
				s.MountNS = true
			case "--exec-notify":
				s.Notify = true
			default:
				s.Confine = true
			}
		case "--pdeathsig":
			s.Pdeathsig, err = parseNum(val, 64)
			if err == nil && s.Pdeathsig == 0 {
				err = errors.New("signal 0")
			}
		default:
			return shimSpec{}, fmt.Errorf("privdrop: shim: unknown flag %q", flag)
		}
		if err != nil {
			return shimSpec{}, fmt.Errorf("privdrop: shim: %s: %w", flag, err)
		}
	}
	return shimSpec{}, errors.New("privdrop: shim: missing --")
}

// checkGate refuses what only a gated shim can do without a gate.
func (s shimSpec) checkGate() error {
	if (s.MountNS || s.Notify) && s.Gate < 0 {
		return errors.New("privdrop: shim: --mountns and --exec-notify need --gate")
	}
	return nil
}

func parseGroups(v string) ([]int, error) {
	if v == "" {
		return []int{}, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > maxGroups {
		return nil, fmt.Errorf("more than %d groups", maxGroups)
	}
	g := make([]int, len(parts))
	for i, p := range parts {
		n, err := parseNum(p, maxID)
		if err != nil {
			return nil, err
		}
		g[i] = n
	}
	return g, nil
}

// parseNum reads a decimal number in [0, max]: digits only, no sign.
func parseNum(v string, max uint64) (int, error) {
	if v == "" || len(v) > 10 {
		return 0, fmt.Errorf("bad number %q", v)
	}
	var n uint64
	for _, c := range []byte(v) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad number %q", v)
		}
		n = n*10 + uint64(c-'0')
	}
	if n > max || n > math.MaxInt {
		return 0, fmt.Errorf("%d out of range", n)
	}
	return int(n), nil
}
