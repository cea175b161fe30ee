package ask

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// serve starts b's control socket in a new directory and returns the
// directory.
func serve(t *testing.T, b *Broker, check PeerCheck) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ask")
	ln, err := Listen(filepath.Join(dir, "s1.sock"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Serve(ln, check) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return dir
}

func TestControlSocket(t *testing.T) {
	b, qs := newTestBroker(time.Minute, event.Deny)
	var mu sync.Mutex
	var peers []int
	dir := serve(t, b, func(pid, uid int) error {
		mu.Lock()
		defer mu.Unlock()
		peers = append(peers, pid)
		return nil
	})
	for _, p := range []string{dir, filepath.Join(dir, "s1.sock")} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if perm := st.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %v, want no access for group and others", p, perm)
		}
	}

	got := decideAsync(context.Background(), b, httpEvent("example.com"))
	q := <-qs
	list, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != q.ID || list[0].Summary != q.Summary {
		t.Fatalf("List = %+v, want the one question %+v", list, q)
	}
	if err := Send(dir, "nope", true, false, ""); !errors.Is(err, ErrUnknown) {
		t.Errorf("Send(unknown id) = %v, want ErrUnknown", err)
	}
	if err := Send(dir, q.ID, true, false, "somebody"); err == nil || !strings.Contains(err.Error(), "unknown from") {
		t.Errorf("Send(from somebody) = %v, want unknown from", err)
	}
	if err := Send(dir, q.ID, false, false, ""); err != nil {
		t.Fatal(err)
	}
	v := <-got
	if v.Action != event.Deny || v.DecidedBy != event.DecidedByHuman || !strings.Contains(v.Reason, "chaperone deny (uid ") {
		t.Errorf("verdict %v", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(peers) == 0 || peers[0] != os.Getpid() {
		t.Errorf("peer pids %v, want this process", peers)
	}
}

func TestControlSocketRefusesPeers(t *testing.T) {
	b, qs := newTestBroker(time.Minute, event.Deny)
	dir := serve(t, b, func(pid, uid int) error { return errors.New("refused: the session's own process") })
	got := decideAsync(context.Background(), b, httpEvent("example.com"))
	q := <-qs
	if err := Send(dir, q.ID, true, false, ""); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("Send = %v, want refused", err)
	}
	if _, err := List(dir); err == nil {
		t.Error("List from a refused peer succeeded")
	}
	b.Answer(q.ID, Answer{})
	if v := <-got; v.DecidedBy != event.DecidedByHuman || v.Action != event.Deny {
		t.Errorf("verdict %v", v)
	}
}

func TestControlSocketBadRequests(t *testing.T) {
	b, _ := newTestBroker(time.Minute, event.Deny)
	dir := serve(t, b, nil)
	for _, tt := range []struct{ in, want string }{
		{"not json\n", "bad request"},
		{`{"op":"shutdown"}` + "\n", `unknown op \"shutdown\"`},
		{strings.Repeat("x", maxRequest+10), "bad request"},
	} {
		c, err := net.Dial("unix", filepath.Join(dir, "s1.sock"))
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(tt.in))
		buf := make([]byte, 512)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := c.Read(buf)
		c.Close()
		if !strings.Contains(string(buf[:n]), tt.want) {
			t.Errorf("reply to %.20q = %q, want it to contain %q", tt.in, buf[:n], tt.want)
		}
	}
}

func TestSocketsOfEndedSessionsAreSkipped(t *testing.T) {
	dir := t.TempDir()
	ln, err := Listen(filepath.Join(dir, "gone.sock"))
	if err != nil {
		t.Fatal(err)
	}
	// A socket file whose listener is closed (a session that crashed).
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	qs, err := List(dir)
	if err != nil || len(qs) != 0 {
		t.Errorf("List = %v, %v; want nothing, no error", qs, err)
	}
	if err := Send(dir, "q1", true, false, ""); !errors.Is(err, ErrUnknown) {
		t.Errorf("Send = %v, want ErrUnknown", err)
	}
}

func FuzzControlRequest(f *testing.F) {
	f.Add([]byte(`{"op":"list"}`))
	f.Add([]byte(`{"op":"answer","id":"q1","allow":true,"always":true}`))
	f.Add([]byte(`{"op":"answer","id":"q1"}`))
	f.Add([]byte(`{"op":7}`))
	f.Add([]byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, line []byte) {
		b, qs := newTestBroker(time.Minute, event.Deny)
		got := decideAsync(context.Background(), b, httpEvent("example.com"))
		<-qs
		r := b.handle(line, "")
		if r.OK == (r.Error != "") {
			t.Fatalf("reply %+v is neither ok nor an error", r)
		}
		if len(b.Pending()) == 0 {
			// The request answered the question: it must say so.
			v := <-got
			if v.DecidedBy != event.DecidedByHuman || !r.OK {
				t.Fatalf("question settled by %v with reply %+v", v, r)
			}
			return
		}
		b.Close()
		<-got
	})
}
