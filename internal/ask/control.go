package ask

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// The control protocol: a client connects, writes one JSON request line
// and reads one JSON reply line.
//
//	{"op":"list"}                                   → {"questions":[...]}
//	{"op":"answer","id":"3f2a","allow":true,"always":false,"from":"live view"} → {"ok":true} or {"error":"..."}
//	{"op":"watch"} → {"ok":true,"questions":[...]}, then one {"questions":[q]} line per new question
//
// A watch keeps its connection, and counts as somebody who can answer
// (Broker.Attend), until the client closes it.
type request struct {
	Op     string `json:"op"`
	ID     string `json:"id,omitempty"`
	Allow  bool   `json:"allow,omitempty"`
	Always bool   `json:"always,omitempty"`
	// From names the tool that answered for the verdict's reason: empty
	// (chaperone approve or deny) or FromLiveView.
	From string `json:"from,omitempty"`
}

// FromLiveView is the From of an answer given on the live view's page.
const FromLiveView = "live view"

type reply struct {
	OK        bool       `json:"ok,omitempty"`
	Error     string     `json:"error,omitempty"`
	Questions []Question `json:"questions,omitempty"`
}

// maxRequest bounds a control request line.
const maxRequest = 4096

// Listen makes the control socket at path, mode 0600 in a directory of
// mode 0700, replacing a stale socket left by a session that died.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("ask: control socket: %w", err)
	}
	if err := os.Chmod(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("ask: control socket: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("ask: control socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("ask: control socket: %w", err)
	}
	// The directory already keeps others out; the mode says so too.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("ask: control socket: %w", err)
	}
	return ln, nil
}

// PeerCheck refuses a control connection from a process that may not
// answer (one of the session's own): pid and uid are the peer's, as the
// kernel says.
type PeerCheck func(pid, uid int) error

// Serve answers control requests on ln until it is closed. check, when
// not nil, vets every peer; a peer whose credentials cannot be read is
// refused where the platform can read them.
func (b *Broker) Serve(ln net.Listener, check PeerCheck) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("ask: control socket: %w", err)
		}
		go b.serveConn(c, check)
	}
}

func (b *Broker) serveConn(c net.Conn, check PeerCheck) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	enc := json.NewEncoder(c)
	// The request is read before anything is answered, so that a refused
	// client reads its refusal rather than a broken pipe.
	line, rerr := bufio.NewReader(io.LimitReader(c, maxRequest)).ReadBytes('\n')
	pid, uid, err := PeerCred(c)
	who := ""
	if err == nil {
		who = fmt.Sprintf(" (uid %d)", uid)
	}
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		// The socket's mode is the only guard here.
	case err != nil:
		enc.Encode(reply{Error: "cannot tell who is asking: " + err.Error()})
		return
	case check != nil:
		if err := check(pid, uid); err != nil {
			enc.Encode(reply{Error: err.Error()})
			return
		}
	}
	if rerr != nil && !(errors.Is(rerr, io.EOF) && len(line) > 0) {
		enc.Encode(reply{Error: "no request"})
		return
	}
	var req request
	if json.Unmarshal(line, &req) == nil && req.Op == "watch" {
		b.watch(c, enc)
		return
	}
	enc.Encode(b.handle(line, who))
}

// watch streams new questions to c until the client closes it or the
// broker closes.
func (b *Broker) watch(c net.Conn, enc *json.Encoder) {
	qs, release := b.Watch()
	defer release()
	_ = c.SetDeadline(time.Time{})
	if enc.Encode(reply{OK: true, Questions: b.Pending()}) != nil {
		return
	}
	gone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, c) // until the client closes
		close(gone)
	}()
	for {
		select {
		case <-gone:
			return
		case q, ok := <-qs:
			if !ok || enc.Encode(reply{Questions: []Question{q}}) != nil {
				return
			}
		}
	}
}

// handle answers one request line; who says who sent it.
func (b *Broker) handle(line []byte, who string) reply {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return reply{Error: "bad request: " + err.Error()}
	}
	switch req.Op {
	case "list":
		return reply{OK: true, Questions: b.Pending()}
	case "answer":
		by := "chaperone approve"
		switch {
		case req.From == FromLiveView:
			by = "the live view"
		case req.From != "":
			return reply{Error: fmt.Sprintf("unknown from %q", Printable(req.From, 40))}
		case !req.Allow:
			by = "chaperone deny"
		}
		if err := b.Answer(req.ID, Answer{Allow: req.Allow, Always: req.Always, By: by + who}); err != nil {
			return reply{Error: err.Error()}
		}
		return reply{OK: true}
	default:
		return reply{Error: fmt.Sprintf("unknown op %q (want list, answer or watch)", Printable(req.Op, 40))}
	}
}

// call sends one request to the socket at path.
func call(path string, req request) (reply, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return reply{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return reply{}, err
	}
	var r reply
	if err := json.NewDecoder(io.LimitReader(c, 1<<20)).Decode(&r); err != nil {
		return reply{}, fmt.Errorf("ask: bad reply from %s: %w", path, err)
	}
	if r.Error != "" {
		return r, errors.New(r.Error)
	}
	return r, nil
}

// Sockets lists the control sockets in dir (one per running session).
func Sockets(dir string) ([]string, error) {
	ms, err := filepath.Glob(filepath.Join(dir, "*.sock"))
	if err != nil {
		return nil, err
	}
	sort.Strings(ms)
	return ms, nil
}

// List returns the questions waiting in every session whose control socket
// is in dir. Sockets of sessions that are gone are skipped.
func List(dir string) ([]Question, error) {
	socks, err := Sockets(dir)
	if err != nil {
		return nil, err
	}
	var all []Question
	for _, s := range socks {
		r, err := call(s, request{Op: "list"})
		if err != nil {
			if isGone(err) {
				continue
			}
			return all, fmt.Errorf("ask: %s: %w", filepath.Base(s), err)
		}
		all = append(all, r.Questions...)
	}
	return all, nil
}

// Send answers question id in whichever session of dir holds it; from
// is the request's From.
func Send(dir, id string, allow, always bool, from string) error {
	socks, err := Sockets(dir)
	if err != nil {
		return err
	}
	var problems []string
	for _, s := range socks {
		_, err := call(s, request{Op: "answer", ID: id, Allow: allow, Always: always, From: from})
		if err == nil {
			return nil
		}
		if isGone(err) || err.Error() == ErrUnknown.Error() {
			continue
		}
		problems = append(problems, filepath.Base(s)+": "+err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("ask: %s", strings.Join(problems, "; "))
	}
	return fmt.Errorf("%w: %s", ErrUnknown, id)
}

// isGone reports whether err says nobody listens on the socket.
func isGone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscallECONNREFUSED)
}

// Watch calls fn with every question waiting or asked from now on in the
// sessions whose control sockets are in dir, and counts as somebody who
// can answer them (ask.unattended does not apply) while it runs, until
// ctx ends. dir is looked at again every rescan, for sessions started
// since; joined, when not nil, is called with a session's id once it is
// watched. fn and joined are called from one goroutine at a time.
func Watch(ctx context.Context, dir string, rescan time.Duration, fn func(Question), joined func(session string)) error {
	var mu sync.Mutex
	call := func(q Question) {
		mu.Lock()
		defer mu.Unlock()
		fn(q)
	}
	join := func(path string) {
		if joined != nil {
			mu.Lock()
			defer mu.Unlock()
			joined(strings.TrimSuffix(filepath.Base(path), ".sock"))
		}
	}
	watching := map[string]bool{}
	ended := make(chan string)
	t := time.NewTicker(rescan)
	defer t.Stop()
	for {
		socks, err := Sockets(dir)
		if err != nil {
			return err
		}
		for _, s := range socks {
			if !watching[s] {
				watching[s] = true
				go func() {
					watchOne(ctx, s, call, join)
					select {
					case ended <- s:
					case <-ctx.Done():
					}
				}()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case s := <-ended:
			delete(watching, s)
		case <-t.C:
		}
	}
}

// watchOne streams the questions of one session's socket to fn until the
// session or ctx ends; joined is called once the session has taken the
// watch.
func watchOne(ctx context.Context, path string, fn func(Question), joined func(path string)) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if json.NewEncoder(c).Encode(request{Op: "watch"}) != nil {
		return
	}
	dec := json.NewDecoder(c)
	for first := true; ; first = false {
		var r reply
		if dec.Decode(&r) != nil || r.Error != "" {
			return
		}
		if first {
			joined(path)
		}
		for _, q := range r.Questions {
			fn(q)
		}
	}
}
