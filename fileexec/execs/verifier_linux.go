//go:build linux

package execs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
)

// Reasons in a killed record (bpf/verify.c REASON_*).
const (
	killedArgv       = 1
	killedFilename   = 2
	killedUnreadable = 3
	killedInterp     = 4
	killedProgram    = 5
)

// verifier is the loaded bpf/verify.c: an expectation per allowed exec,
// checked when the new image is in place.
type verifier struct {
	objs   verifyObjects
	links  []link.Link
	killed *ringbuf.Reader
}

// loadVerifier loads and attaches the programs. It needs root (CAP_BPF
// and CAP_PERFMON), kernel BTF, tp_btf and bpf_loop (Linux 5.17).
func loadVerifier() (*verifier, error) {
	if err := samePIDNamespace(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("execs: verifier: remove memlock limit: %w", err)
	}
	v := &verifier{}
	if err := loadVerifyObjects(&v.objs, nil); err != nil {
		return nil, fmt.Errorf("execs: verifier: load: %w", err)
	}
	for _, p := range []*ebpf.Program{v.objs.OnExec, v.objs.OnExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			v.close()
			return nil, fmt.Errorf("execs: verifier: attach %s: %w", p, err)
		}
		v.links = append(v.links, l)
	}
	rd, err := ringbuf.NewReader(v.objs.Killed)
	if err != nil {
		v.close()
		return nil, fmt.Errorf("execs: verifier: ring buffer: %w", err)
	}
	v.killed = rd
	return v, nil
}

// samePIDNamespace fails when this process is in a pid namespace below
// the initial one: notifications then carry pids of that namespace, and
// the programs see the kernel's.
func samePIDNamespace() error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("execs: verifier: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok && len(strings.Fields(v)) > 1 {
			return errors.New("execs: verifier: chaperone runs in a nested pid namespace")
		}
	}
	return nil
}

// arm records what thread tid was allowed to exec. It must be in place
// before the system call continues.
func (v *verifier) arm(tid int, e expectation) error {
	k := verifyExpectation{
		ArgvHash: e.ArgvHash, TailHash: e.TailHash, FileHash: e.FileHash, InterpHash: e.InterpHash,
		ArgvLen: e.ArgvLen, TailLen: e.TailLen, FileLen: e.FileLen, InterpLen: e.InterpLen,
		Flags: e.Flags, Ino: e.Ino, Size: e.Size, CtimeSec: e.CtimeSec, CtimeNsec: e.CtimeNsec, Dev: e.Dev,
	}
	if err := v.objs.Expect.Put(uint32(tid), k); err != nil {
		return fmt.Errorf("execs: verifier: arm %d: %w", tid, err)
	}
	return nil
}

// disarm removes tid's expectation, if any.
func (v *verifier) disarm(tid int) {
	_ = v.objs.Expect.Delete(uint32(tid))
}

// next waits for the next killed exec; ringbuf.ErrClosed after close.
func (v *verifier) next() (verifyKilledRec, error) {
	var r verifyKilledRec
	rec, err := v.killed.Read()
	if err != nil {
		return r, err
	}
	if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &r); err != nil {
		return r, fmt.Errorf("execs: verifier: bad record: %w", err)
	}
	return r, nil
}

func (v *verifier) close() error {
	var errs []error
	if v.killed != nil {
		errs = append(errs, v.killed.Close())
	}
	for _, l := range v.links {
		errs = append(errs, l.Close())
	}
	errs = append(errs, v.objs.Close())
	return errors.Join(errs...)
}
