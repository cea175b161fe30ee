//go:build linux

package session

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pdeathChild is a program that asks to be killed when its parent dies
// (PR_SET_PDEATHSIG, as bubblewrap's --die-with-parent), says so, and
// answers every line it reads until its stdin closes.
const pdeathChild = `import ctypes, sys
ctypes.CDLL(None).prctl(1, 9)
print("ready", flush=True)
for line in sys.stdin:
    print("alive", flush=True)
`

// pdeath is a running pdeathChild.
type pdeath struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startPdeath starts pdeathChild with start and waits until it is ready
// (its parent-death signal is set).
func startPdeath(t *testing.T, start func(*exec.Cmd) error) *pdeath {
	t.Helper()
	cmd := exec.Command("python3", "-c", pdeathChild)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := start(cmd); err != nil {
		t.Fatal(err)
	}
	p := &pdeath{cmd: cmd, in: in, out: bufio.NewReader(out)}
	if line, err := p.out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("the child said %q (%v)", line, err)
	}
	return p
}

// alive asks the child to answer. A child sent its parent-death signal
// before the question never answers it: the signal is taken before the
// child runs again.
func (p *pdeath) alive() bool {
	if _, err := io.WriteString(p.in, "?\n"); err != nil {
		return false
	}
	line, err := p.out.ReadString('\n')
	return err == nil && line == "alive\n"
}

// end closes the child's stdin and returns how it exited.
func (p *pdeath) end() error {
	p.in.Close()
	return p.cmd.Wait()
}

// onEndingThread runs f on an OS thread that ends when f returns, as the
// threads file mediation enters namespaces with: f's goroutine locks its
// thread and returns without unlocking it. f is told the thread's id.
// Never the main thread, which Go keeps (wedged) rather than end.
func onEndingThread(f func(tid int)) {
	for {
		ran := make(chan bool)
		go func() {
			runtime.LockOSThread() // never unlocked when f runs
			tid := unix.Gettid()
			if tid == unix.Getpid() {
				runtime.UnlockOSThread()
				ran <- false
				return
			}
			f(tid)
			ran <- true
		}()
		if <-ran {
			return
		}
	}
}

// endThreads ends n OS threads and returns their ids.
func endThreads(n int) []int {
	tids := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { onEndingThread(func(tid int) { tids[i] = tid }) })
	}
	wg.Wait()
	return tids
}

// waitThreadsGone waits until none of threads tids of this process
// exists. The kernel sends the parent-death signals of a thread's
// children before it removes the thread.
func waitThreadsGone(t *testing.T, tids []int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, tid := range tids {
		for {
			_, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid))
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("thread %d did not end (%v)", tid, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// The kernel's parent of a child is the thread that forked it: a child
// with a parent-death signal dies with that thread. startOnOwnThread keeps
// the thread for the child's life, however many threads Chaperone ends
// meanwhile.
func TestStartOnOwnThread(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skipf("python3 is not installed: %v", err)
	}
	t.Run("a thread that ends kills its child", func(t *testing.T) {
		// The premise, and proof that the test sees such a death.
		release := make(chan struct{})
		var tid int
		p := startPdeath(t, func(cmd *exec.Cmd) error {
			started := make(chan error, 1)
			go onEndingThread(func(t int) {
				tid = t
				started <- cmd.Start()
				<-release // until the child is ready
			})
			return <-started
		})
		close(release)
		waitThreadsGone(t, []int{tid})
		if p.alive() {
			t.Fatalf("the child outlived the thread that started it: %v", p.end())
		}
		err := p.cmd.Wait()
		var killed bool
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			ws, ok := ee.Sys().(syscall.WaitStatus)
			killed = ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}
		if !killed {
			t.Errorf("the child exited with %v, want its parent-death signal (SIGKILL)", err)
		}
	})
	t.Run("startOnOwnThread", func(t *testing.T) {
		done := make(chan struct{})
		defer close(done)
		p := startPdeath(t, func(cmd *exec.Cmd) error { return startOnOwnThread(cmd, done) })
		for round := range 20 {
			waitThreadsGone(t, endThreads(16))
			if !p.alive() {
				t.Fatalf("round %d: the child died while Chaperone ended threads: %v", round, p.cmd.Wait())
			}
		}
		if err := p.end(); err != nil {
			t.Errorf("the child: %v", err)
		}
	})
}
