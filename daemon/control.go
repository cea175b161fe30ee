package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/chaperone-dev/chaperone/certs"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/ask"
)

// The control protocol: a client connects, writes one JSON Request on a
// line, and reads one Reply on a line.
type Request struct {
	// Op is "sessions" (the live sessions), "adopt" (make process PID and
	// its descendants an agent's session: its owner or root only) or "run"
	// (make the asking process itself one, before it execs its agent).
	Op    string `json:"op"`
	PID   int    `json:"pid,omitempty"`
	Agent string `json:"agent,omitempty"` // the agent's name; "" tells it from the command line
}

// Reply answers a Request.
type Reply struct {
	Error    string          `json:"error,omitempty"`
	Sessions []event.Session `json:"sessions,omitempty"`
	Session  *event.Session  `json:"session,omitempty"`
	// Trust is the trust bundle (PEM) an agent's TLS clients are given:
	// the system's roots and Chaperone's CA (for "run").
	Trust string `json:"trust,omitempty"`
}

// maxRequest bounds a request line.
const maxRequest = 4096

// listen makes the control socket at path: mode 0600, or 0660 with group
// (people allowed to watch and adopt), in a directory others may enter.
func listen(path, group string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("daemon: control socket: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("daemon: control socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("daemon: control socket: %w", err)
	}
	mode, gid := os.FileMode(0o600), -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("daemon: control socket: group %q: %w", group, err)
		}
		gid, _ = strconv.Atoi(g.Gid)
		mode = 0o660
	}
	if err := os.Chown(path, 0, gid); err != nil {
		ln.Close()
		return nil, fmt.Errorf("daemon: control socket: %w", err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("daemon: control socket: %w", err)
	}
	return ln, nil
}

// handler answers one request from the process pid of user uid.
type handler func(req Request, pid, uid int) Reply

// serve answers requests on ln until it is closed.
func serve(ln net.Listener, h handler) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serveConn(c, h)
	}
}

func serveConn(c net.Conn, h handler) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	pid, uid, err := ask.PeerCred(c)
	if err != nil {
		writeReply(c, Reply{Error: "daemon: cannot tell who is asking: " + err.Error()})
		return
	}
	line, err := bufio.NewReader(io.LimitReader(c, maxRequest+1)).ReadBytes('\n')
	if len(line) > maxRequest {
		writeReply(c, Reply{Error: fmt.Sprintf("daemon: request longer than %d bytes", maxRequest)})
		return
	}
	if err != nil && len(line) == 0 {
		return
	}
	req, err := ParseRequest(line)
	if err != nil {
		writeReply(c, Reply{Error: err.Error()})
		return
	}
	writeReply(c, h(req, pid, uid))
}

// ParseRequest parses one request line, naming what is wrong with it.
func ParseRequest(line []byte) (Request, error) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("daemon: request is not a JSON object of op, pid and agent: %w", err)
	}
	switch req.Op {
	case "sessions", "run":
	case "adopt":
		if req.PID <= 0 {
			return req, fmt.Errorf("daemon: adopt: pid %d is not a process id", req.PID)
		}
	case "":
		return req, errors.New(`daemon: request has no op (want "sessions", "adopt" or "run")`)
	default:
		return req, fmt.Errorf(`daemon: unknown op %q (want "sessions", "adopt" or "run")`, req.Op)
	}
	return req, nil
}

func writeReply(w io.Writer, r Reply) {
	b, _ := json.Marshal(r)
	w.Write(append(b, '\n'))
}

// Call sends req to the daemon whose control socket is path and returns
// its reply; a reply's error is returned as an error.
func Call(path string, req Request) (Reply, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return Reply{}, fmt.Errorf("daemon: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return Reply{}, fmt.Errorf("daemon: %w", err)
	}
	var rep Reply
	if err := json.NewDecoder(c).Decode(&rep); err != nil {
		return Reply{}, fmt.Errorf("daemon: reply: %w", err)
	}
	if rep.Error != "" {
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}

// Join asks the daemon listening at socket to make the calling process an
// agent's session (agent: its name; "" tells it from the command line the
// process has when it asks, so ask just before exec'ing the agent). It
// returns the session and the environment the agent needs besides its own:
// the trust variables for the daemon's CA. ok is false when no daemon
// listens there: run a session of your own.
func Join(socket, agent string) (info event.Session, env []string, ok bool, err error) {
	if _, err := os.Stat(socket); err != nil {
		return info, nil, false, nil
	}
	rep, err := Call(socket, Request{Op: "run", Agent: agent})
	var ne *net.OpError
	if errors.As(err, &ne) && ne.Op == "dial" {
		return info, nil, false, nil // a socket left by a daemon that is gone
	}
	if err != nil {
		return info, nil, true, err
	}
	if rep.Session == nil {
		return info, nil, true, errors.New("daemon: run: the reply has no session")
	}
	return *rep.Session, certs.TrustEnv(rep.Trust), true, nil
}
