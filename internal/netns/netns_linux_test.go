//go:build linux

package netns

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func newNS(t *testing.T) *NS {
	t.Helper()
	n, err := New()
	if errors.Is(err, fs.ErrPermission) {
		t.Skipf("network namespaces need CAP_SYS_ADMIN: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func nsLink(t *testing.T, path string) string {
	t.Helper()
	l, err := os.Readlink(path)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Inside, only loopback, up; a listener there answers there and not
// outside; a process started inside is inside; and no thread of the test
// is left inside.
func TestNamespace(t *testing.T) {
	n := newNS(t)
	outside := nsLink(t, "/proc/thread-self/ns/net")
	var inside string
	var ln net.Listener
	var ifaces []string
	var child string
	err := n.Do(func() error {
		inside = nsLink(t, "/proc/thread-self/ns/net")
		is, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, i := range is {
			ifaces = append(ifaces, i.Name+" up="+boolWord(i.Flags&net.FlagUp != 0))
		}
		if ln, err = net.Listen("tcp", "127.0.30.1:0"); err != nil {
			return err
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		c.Close()
		out, err := exec.Command("readlink", "/proc/self/ns/net").Output()
		child = strings.TrimSpace(string(out))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if inside == outside {
		t.Fatalf("Do ran in the test's own namespace %s", inside)
	}
	if diff := cmp.Diff([]string{"lo up=yes"}, ifaces); diff != "" {
		t.Errorf("interfaces inside (-want +got):\n%s", diff)
	}
	if child != inside {
		t.Errorf("a process started in Do is in %q, want %q", child, inside)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Errorf("the namespace's listener %s answered outside it", ln.Addr())
	}
	// The listener still accepts, from inside, after Do returned.
	if err := n.Do(func() error {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Errorf("dial inside after Do: %v", err)
	}
	// The threads that entered end with their goroutines, a moment after
	// Do returned.
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		left = left[:0]
		for _, task := range tasks {
			if l, err := os.Readlink(task); err == nil && l == inside {
				left = append(left, task)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("threads %q are left in the namespace", left)
	}
}

func boolWord(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
