package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// config is one soak run.
type config struct {
	Chaperone string   // the chaperone binary
	Client    []string // argv that starts this program's client side
	Clients   int
	Warmup    time.Duration // load before the baseline is taken
	Duration  time.Duration // load between the baseline and the end
	Interval  time.Duration // mean time between one client's requests
	Sample    time.Duration // RSS and counts sampled this often under load
	// RSSGrowth bounds the resident memory under load: of the samples
	// taken after the first fifth of the load (allocator and caches at
	// their steady size), the median of the last third at most RSSGrowth
	// times the median of the first third.
	RSSGrowth float64
	Dir       string    // scratch: state, audit log, CA file
	Out       io.Writer // progress and the summary
}

// snapshot is the chaperone process at one moment.
type snapshot struct {
	At         time.Duration     `json:"at"`  // since the load started
	RSS        int64             `json:"rss"` // bytes
	Goroutines int               `json:"goroutines"`
	FDs        int               `json:"fds"`         // /proc/PID/fd
	MapEntries int               `json:"map_entries"` // redirect map records
	fdNames    map[string]string // fd number → what it is, for a leak's report
	closeWait  int               // sockets the peer closed and chaperone has yet to
}

// report is what a run measured and what it found wrong.
type report struct {
	Warm, Load     loadStats
	OriginRequests int64
	OriginLogLines int64    // lines the origin's server logged (handshake failures…)
	OriginLog      []string // the first few
	Before, After  snapshot
	Samples        []snapshot
	RSSRef         int64
	RSSFinal       int64
	ExitCode       int
	Violations     []string
}

func (r *report) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// origin is the HTTPS server the clients reach through the session.
type origin struct {
	srv      *http.Server
	addr     string
	requests atomic.Int64

	mu       sync.Mutex
	logLines int64
	examples []string // the first few lines its server logged
}

func startOrigin(dir string) (*origin, string, error) {
	ca, err := upstream.NewCA("soak-origin")
	if err != nil {
		return nil, "", err
	}
	caFile, err := ca.WriteFile(dir)
	if err != nil {
		return nil, "", err
	}
	leaf, err := ca.Leaf("127.0.0.1")
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("soak: origin: %w", err)
	}
	o := &origin{addr: ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /soak/", func(w http.ResponseWriter, r *http.Request) {
		o.requests.Add(1)
		w.Write(originBody(r.URL.Path))
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		o.requests.Add(1)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(b)
	})
	o.srv = &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{leaf}, NextProtos: []string{"h2", "http/1.1"}},
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(o, "", 0),
	}
	go o.srv.ServeTLS(ln, "", "")
	return o, caFile, nil
}

// closeIdle closes the origin's idle HTTP/1 connections, so that the
// proxy's pooled upstream connections (closed on its side by its next check
// of the pool) do not count as Chaperone's own.
func (o *origin) closeIdle() {
	o.srv.SetKeepAlivesEnabled(false)
	o.srv.SetKeepAlivesEnabled(true)
}

// Write counts the lines the origin's server logs and keeps a few.
func (o *origin) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.logLines++
	if len(o.examples) < 5 {
		o.examples = append(o.examples, strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// run soaks one transparent session and returns what it measured. An error
// means the soak could not run; violations are in the report.
func run(ctx context.Context, c config) (*report, error) {
	o, caFile, err := startOrigin(c.Dir)
	if err != nil {
		return nil, err
	}
	defer o.srv.Close()
	// The session's resolver forwards to a port where nothing answers: the
	// clients dial an IP literal, and the machine's resolver is never asked.
	dnsSink, err := net.ListenPacket("udp4", "127.0.0.9:0")
	if err != nil {
		return nil, fmt.Errorf("soak: dns sink: %w", err)
	}
	defer dnsSink.Close()
	debugAddr, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}

	args := []string{"run", "--mode", "transparent",
		"--upstream-ca", caFile,
		"--dns-upstream", dnsSink.LocalAddr().String(),
		"--log", filepath.Join(c.Dir, "audit.jsonl"),
		"--"}
	args = append(args, c.Client...)
	args = append(args, "-target", "https://"+o.addr, "-clients", strconv.Itoa(c.Clients),
		"-warmup", c.Warmup.String(), "-duration", c.Duration.String(), "-interval", c.Interval.String())
	cmd := exec.Command(c.Chaperone, args...)
	cmd.Env = append(cleanEnv(),
		"CHAPERONE_STATE_DIR="+filepath.Join(c.Dir, "state"),
		"HOME="+filepath.Join(c.Dir, "home"),
		"CHAPERONE_DEBUG_ADDR="+debugAddr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderrPath := filepath.Join(c.Dir, "chaperone.stderr")
	stderr, err := os.Create(stderrPath)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("soak: start chaperone: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ended := false
	defer func() {
		if !ended {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
		}
	}()
	fail := func(err error) (*report, error) {
		b, _ := os.ReadFile(stderrPath)
		return nil, fmt.Errorf("%w\nchaperone's stderr (last 4 KiB):\n%s", err, tail(b, 4096))
	}

	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	defer func() {
		go func() {
			for range lines { // what the client prints after the last line read
			}
		}()
	}()
	// next waits for the client's line with prefix and decodes its stats.
	next := func(prefix string, within time.Duration) (loadStats, error) {
		var st loadStats
		timeout := time.After(within)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					return st, fmt.Errorf("soak: the session ended before the client printed %q", strings.TrimSpace(prefix))
				}
				if rest, found := strings.CutPrefix(l, prefix); found {
					return st, json.Unmarshal([]byte(rest), &st)
				}
				fmt.Fprintln(c.Out, "client:", l)
			case err := <-exited:
				ended = true
				return st, fmt.Errorf("soak: chaperone exited before the client printed %q: %v", strings.TrimSpace(prefix), err)
			case <-timeout:
				return st, fmt.Errorf("soak: no %q from the client within %s", strings.TrimSpace(prefix), within)
			case <-ctx.Done():
				return st, ctx.Err()
			}
		}
	}

	pid := cmd.Process.Pid
	probe := newProber(pid, debugAddr)
	r := &report{}
	fmt.Fprintf(c.Out, "soak: %d clients, warm-up %s, load %s, chaperone pid %d\n", c.Clients, c.Warmup, c.Duration, pid)
	if r.Warm, err = next(lineWarm, c.Warmup+3*time.Minute); err != nil {
		return fail(err)
	}
	// Settled: the proxy closed its pooled connections that the origin
	// closed (it checks them every few seconds).
	if r.Before, err = probe.settle(ctx, o.closeIdle, func(s snapshot) bool { return s.closeWait == 0 }, 20*time.Second); err != nil {
		return fail(err)
	}
	probe.dump(filepath.Join(c.Dir, "goroutines-before.txt"))
	fmt.Fprintf(c.Out, "soak: warm-up: %d requests, %d failures; idle: %s\n", r.Warm.Requests, r.Warm.Failures, r.Before)

	if _, err := io.WriteString(stdin, lineGo+"\n"); err != nil {
		return fail(fmt.Errorf("soak: tell the client to go: %w", err))
	}
	start := time.Now()
	var (
		mu      sync.Mutex
		stopped = make(chan struct{})
		sampled = make(chan struct{})
	)
	go func() {
		defer close(sampled)
		tick := time.NewTicker(c.Sample)
		defer tick.Stop()
		for {
			select {
			case <-stopped:
				return
			case <-tick.C:
			}
			s, err := probe.snapshot()
			if err != nil {
				continue
			}
			s.At = time.Since(start).Round(time.Second)
			mu.Lock()
			r.Samples = append(r.Samples, s)
			mu.Unlock()
			fmt.Fprintf(c.Out, "soak: %s\n", s)
		}
	}()
	r.Load, err = next(lineDone, c.Duration+3*time.Minute)
	close(stopped)
	<-sampled
	if err != nil {
		return fail(err)
	}
	if r.After, err = probe.settle(ctx, o.closeIdle, func(s snapshot) bool {
		return s.Goroutines <= r.Before.Goroutines && s.FDs <= r.Before.FDs && s.MapEntries <= 0 && s.closeWait == 0
	}, 30*time.Second); err != nil {
		return fail(err)
	}
	probe.dump(filepath.Join(c.Dir, "goroutines-after.txt"))
	r.OriginRequests = o.requests.Load()
	o.mu.Lock()
	r.OriginLogLines, r.OriginLog = o.logLines, o.examples
	o.mu.Unlock()

	io.WriteString(stdin, lineExit+"\n")
	stdin.Close()
	select {
	case err := <-exited:
		ended = true
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.ExitCode = ee.ExitCode()
		} else if err != nil {
			return fail(fmt.Errorf("soak: chaperone: %w", err))
		}
	case <-time.After(time.Minute):
		return fail(errors.New("soak: chaperone did not exit within a minute of the client's end"))
	}
	r.judge(c)
	if len(r.Violations) > 0 {
		b, _ := os.ReadFile(stderrPath)
		fmt.Fprintf(c.Out, "chaperone's stderr (last 4 KiB):\n%s\n", tail(b, 4096))
	}
	return r, nil
}

// judge records every way the run fell short.
func (r *report) judge(c config) {
	for _, p := range []struct {
		name string
		st   loadStats
	}{{"warm-up", r.Warm}, {"load", r.Load}} {
		if p.st.Failures > 0 {
			r.violate("%s: %d of %d requests failed, e.g. %q", p.name, p.st.Failures, p.st.Requests, p.st.Examples)
		}
	}
	if r.Load.Requests == 0 {
		r.violate("load: no request was sent")
	}
	if sent := r.Warm.Requests + r.Load.Requests; r.Warm.Failures+r.Load.Failures == 0 && r.OriginRequests != sent {
		r.violate("the origin received %d requests, the clients had %d answered", r.OriginRequests, sent)
	}
	if r.After.Goroutines > r.Before.Goroutines {
		r.violate("goroutines: %d after the load, %d before", r.After.Goroutines, r.Before.Goroutines)
	}
	if r.After.FDs > r.Before.FDs {
		r.violate("file descriptors: %d after the load, %d before; new: %s", r.After.FDs, r.Before.FDs, newFDs(r.Before.fdNames, r.After.fdNames))
	}
	if r.After.MapEntries != 0 {
		r.violate("redirect map: %d entries left after the load (%d before)", r.After.MapEntries, r.Before.MapEntries)
	}
	// RSS: skip the first fifth of the load, then compare the medians of
	// the first and last thirds of the samples: RSS under load swings with
	// the GC cycle by a quarter, and a median of many samples does not.
	var steady []int64
	for _, s := range r.Samples {
		if s.At >= c.Duration/5 {
			steady = append(steady, s.RSS)
		}
	}
	if len(steady) < 6 {
		r.violate("rss: %d samples after the first fifth of the load, want at least 6 (lower -sample)", len(steady))
	} else {
		third := len(steady) / 3
		r.RSSRef, r.RSSFinal = median(steady[:third]), median(steady[len(steady)-third:])
		if float64(r.RSSFinal) > c.RSSGrowth*float64(r.RSSRef) {
			r.violate("rss grew under steady load: %s at the end, %s at the start (limit %.2fx)", mib(r.RSSFinal), mib(r.RSSRef), c.RSSGrowth)
		}
	}
	if r.ExitCode != 0 {
		r.violate("chaperone exited with status %d", r.ExitCode)
	}
}

func (r *report) print(w io.Writer, c config) {
	fmt.Fprintf(w, "\nsoak summary (%d clients, %s load after %s warm-up)\n", c.Clients, c.Duration, c.Warmup)
	for _, p := range []struct {
		name string
		st   loadStats
	}{{"warm-up", r.Warm}, {"load", r.Load}} {
		fmt.Fprintf(w, "  %-8s %d requests (%.0f/s), %d failed, %d on new connections, %d reused, %d over HTTP/2\n",
			p.name, p.st.Requests, perSecond(p.st.Requests, map[string]time.Duration{"warm-up": c.Warmup, "load": c.Duration}[p.name]),
			p.st.Failures, p.st.NewConns, p.st.Reused, p.st.HTTP2)
	}
	fmt.Fprintf(w, "  origin   %d requests, %d server log lines\n", r.OriginRequests, r.OriginLogLines)
	for _, l := range r.OriginLog {
		fmt.Fprintf(w, "           %s\n", l)
	}
	fmt.Fprintf(w, "  before   %s\n  after    %s\n", r.Before, r.After)
	// At most 24 samples, evenly spaced, and the extremes.
	var rss []string
	lo, hi := int64(0), int64(0)
	step := max(1, (len(r.Samples)+23)/24)
	for i, s := range r.Samples {
		if lo == 0 || s.RSS < lo {
			lo = s.RSS
		}
		hi = max(hi, s.RSS)
		if i%step == 0 || i == len(r.Samples)-1 {
			rss = append(rss, fmt.Sprintf("%s:%s", s.At, mib(s.RSS)))
		}
	}
	fmt.Fprintf(w, "  rss      %d samples, %s to %s: %s\n", len(r.Samples), mib(lo), mib(hi), strings.Join(rss, " "))
	if r.RSSRef > 0 {
		fmt.Fprintf(w, "  rss      steady start %s, end %s (%.2fx, limit %.2fx)\n", mib(r.RSSRef), mib(r.RSSFinal), float64(r.RSSFinal)/float64(r.RSSRef), c.RSSGrowth)
	}
	fmt.Fprintf(w, "  chaperone exit status %d\n", r.ExitCode)
	if len(r.Violations) == 0 {
		fmt.Fprintln(w, "soak: PASS")
		return
	}
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  VIOLATION %s\n", v)
	}
	fmt.Fprintln(w, "soak: FAIL")
}

func (s snapshot) String() string {
	return fmt.Sprintf("rss %s, goroutines %d, fds %d, redirect map entries %d", mib(s.RSS), s.Goroutines, s.FDs, s.MapEntries)
}

// prober reads the chaperone process from outside (RSS and descriptors
// from /proc) and inside (goroutines and the redirect map from its debug
// listener, over one kept-alive connection, so that probing costs the same
// goroutine and descriptor every time).
type prober struct {
	pid  int
	vars string
	http *http.Client
}

func newProber(pid int, debugAddr string) *prober {
	return &prober{
		pid:  pid,
		vars: "http://" + debugAddr + "/debug/chaperone/vars",
		http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}},
	}
}

// dump writes chaperone's goroutines, grouped by stack, to path: what a
// leak report starts from.
func (p *prober) dump(path string) {
	resp, err := p.http.Get(strings.Replace(p.vars, "/vars", "/goroutines?debug=1", 1))
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if f, err := os.Create(path); err == nil {
		io.Copy(f, resp.Body)
		f.Close()
	}
}

func (p *prober) snapshot() (snapshot, error) {
	var s snapshot
	resp, err := p.http.Get(p.vars)
	if err != nil {
		return s, fmt.Errorf("soak: debug vars: %w", err)
	}
	var v struct {
		Goroutines      int `json:"goroutines"`
		RedirectEntries int `json:"redirect_entries"`
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return s, fmt.Errorf("soak: debug vars: %w", err)
	}
	s.Goroutines, s.MapEntries = v.Goroutines, v.RedirectEntries
	if s.fdNames, err = fdNames(p.pid); err != nil {
		return s, err
	}
	s.FDs = len(s.fdNames)
	for _, name := range s.fdNames {
		if strings.HasSuffix(name, " CLOSE_WAIT") {
			s.closeWait++
		}
	}
	if s.RSS, err = rss(p.pid); err != nil {
		return s, err
	}
	return s, nil
}

// settle polls until done holds (nil: always) and six polls in a row, over
// two and a half seconds, agree; or until within passes. It returns the
// last snapshot. Before each poll it calls tidy, which closes the origin's
// connections that went idle since the last call.
func (p *prober) settle(ctx context.Context, tidy func(), done func(snapshot) bool, within time.Duration) (snapshot, error) {
	deadline := time.Now().Add(within)
	var last []snapshot
	for {
		tidy()
		s, err := p.snapshot()
		if err != nil {
			return s, err
		}
		last = append(last, s)
		if n := len(last); n >= 6 && (done == nil || done(s)) && same(last[n-6:]) {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// fdNames maps each descriptor of pid to what it refers to: a path, a
// socket with its addresses and TCP state, an anonymous inode.
func fdNames(pid int) (map[string]string, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	names := make(map[string]string, len(fds))
	var sockets map[string]string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue // closed since the listing
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			if sockets == nil {
				sockets = tcpSockets(pid)
			}
			if desc, ok := sockets[strings.TrimSuffix(inode, "]")]; ok {
				target += " " + desc
			}
		}
		names[fd.Name()] = target
	}
	return names, nil
}

// tcpSockets maps the socket inodes of pid's network namespace to
// "tcp local→remote STATE", from /proc/PID/net/tcp and tcp6.
func tcpSockets(pid int) map[string]string {
	states := map[string]string{"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
		"06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}
	m := map[string]string{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for l := range strings.Lines(string(b)) {
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(l)
			if len(fs) < 10 || fs[0] == "sl" {
				continue
			}
			m[fs[9]] = fmt.Sprintf("%s %s→%s %s", f, procAddr(fs[1]), procAddr(fs[2]), cmp.Or(states[fs[3]], fs[3]))
		}
	}
	return m
}

// procAddr turns /proc/net/tcp's "0100007F:1F90" into "127.0.0.1:8080";
// IPv6 addresses stay in the kernel's hex.
func procAddr(s string) string {
	host, port, ok := strings.Cut(s, ":")
	p, err := strconv.ParseUint(port, 16, 16)
	if !ok || err != nil {
		return s
	}
	if len(host) == 8 {
		if v, err := strconv.ParseUint(host, 16, 32); err == nil {
			return fmt.Sprintf("%d.%d.%d.%d:%d", v&0xff, v>>8&0xff, v>>16&0xff, v>>24, p)
		}
	}
	return fmt.Sprintf("[%s]:%d", host, p)
}

// newFDs lists the descriptors of after that before did not have.
func newFDs(before, after map[string]string) string {
	var out []string
	for fd, target := range after {
		if before[fd] != target {
			out = append(out, fd+"="+target)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "none by name"
	}
	return strings.Join(out, ", ")
}

func same(ss []snapshot) bool {
	for _, s := range ss[1:] {
		if s.Goroutines != ss[0].Goroutines || s.FDs != ss[0].FDs || s.MapEntries != ss[0].MapEntries {
			return false
		}
	}
	return true
}

// rss reads VmRSS of pid, in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("soak: %w", err)
	}
	for l := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("soak: VmRSS %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("soak: no VmRSS for pid %d", pid)
}

func freeLoopbackPort() (string, error) {
	// On the soak's own address, not 127.0.0.1: between this close and
	// chaperone's bind, another test's listener could take the port.
	ln, err := net.Listen("tcp4", "127.0.25.9:0")
	if err != nil {
		return "", fmt.Errorf("soak: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// cleanEnv is this process's environment without anything that would point
// chaperone elsewhere.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "CHAPERONE_") || strings.HasSuffix(strings.ToUpper(k), "_PROXY") || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func median(xs []int64) int64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
