package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Load is one measured run: Concurrency workers each send requests one
// after another for Duration, after a Warmup whose requests are not counted
// (it fills connection pools and the proxy's certificate cache).
type Load struct {
	Client
	Target      *url.URL
	Concurrency int
	Warmup      time.Duration
	Duration    time.Duration
	// Watch, when it names processes, is sampled just before and just
	// after the measured window.
	Watch Watch
}

// Result is what a Load or a Hold measured. JSON field names are stable:
// the bench harness reads them.
type Result struct {
	Mode        string  `json:"mode"` // "load" or "hold"
	Via         string  `json:"via"`  // "direct" or "proxy"
	Proto       string  `json:"proto,omitempty"`
	KeepAlive   bool    `json:"keep_alive"`
	Concurrency int     `json:"concurrency,omitempty"`
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	RPS         float64 `json:"rps"`
	MBps        float64 `json:"mb_per_s"` // 10^6 bytes per second
	Latency

	// The watched processes over the measured window (load) or while
	// holding (hold).
	Before *Sample `json:"before,omitempty"`
	After  *Sample `json:"after,omitempty"`
	// CPUPerReqUs is the watched processes' CPU time per request, in µs.
	CPUPerReqUs float64 `json:"cpu_per_req_us,omitempty"`

	// Hold only.
	Wanted        int     `json:"wanted,omitempty"`
	Held          int     `json:"held,omitempty"`
	RSSPer1000MB  float64 `json:"rss_per_1000_mb,omitempty"`
	OpenSeconds   float64 `json:"open_s,omitempty"`
	WatchError    string  `json:"watch_error,omitempty"`
	WatchedPIDs   []int   `json:"watched_pids,omitempty"`
	GeneratorPPID int     `json:"generator_ppid,omitempty"`
}

// worker state: latencies and counters, merged at the end.
type tally struct {
	lat      []time.Duration
	requests int64
	errors   int64
	bytes    int64
	firstErr string
	proto    string
}

// Run runs l and returns what it measured. An error means the run could
// not start; failed requests are counted in the Result.
func Run(ctx context.Context, l Load) (Result, error) {
	if l.Concurrency < 1 || l.Duration <= 0 || l.Target == nil {
		return Result{}, errors.New("loadgen: run: need a target, concurrency ≥ 1 and a duration")
	}
	if l.Client.Proto == HTTP3 && l.Client.Proxy != nil {
		return Result{}, errors.New("loadgen: run: HTTP/3 goes direct (no proxy carries it; a transparent session redirects it)")
	}
	l.Client.Conns = l.Concurrency
	tr := l.Client.transport()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Minute}

	res := Result{Mode: "load", Via: via(l.Client), KeepAlive: l.KeepAlive, Concurrency: l.Concurrency}
	if l.Warmup > 0 {
		phase(ctx, hc, l.Target.String(), l.Concurrency, l.Warmup, false)
	}
	watching := len(l.Watch.PIDs) > 0
	if watching {
		if s, err := l.Watch.Take(); err != nil {
			res.WatchError = err.Error()
		} else {
			res.Before = &s
		}
	}
	start := time.Now()
	tallies := phase(ctx, hc, l.Target.String(), l.Concurrency, l.Duration, true)
	elapsed := time.Since(start)
	if watching && res.Before != nil {
		if s, err := l.Watch.Take(); err != nil {
			res.WatchError = err.Error()
		} else {
			res.After = &s
		}
	}
	var lat []time.Duration
	for _, t := range tallies {
		lat = append(lat, t.lat...)
		res.Requests += t.requests
		res.Errors += t.errors
		res.Bytes += t.bytes
		if res.FirstError == "" {
			res.FirstError = t.firstErr
		}
		if res.Proto == "" {
			res.Proto = t.proto
		}
	}
	res.Latency = Summarize(lat)
	res.Seconds = elapsed.Seconds()
	res.RPS = float64(res.Requests) / res.Seconds
	res.MBps = float64(res.Bytes) / 1e6 / res.Seconds
	if res.After != nil && res.Requests > 0 {
		res.CPUPerReqUs = (res.After.CPUSec - res.Before.CPUSec) * 1e6 / float64(res.Requests)
	}
	return res, nil
}

func via(c Client) string {
	if c.Proxy != nil {
		return "proxy"
	}
	return "direct"
}

// phase runs n workers for d. Requests started before the deadline finish;
// record says whether to keep latencies.
func phase(ctx context.Context, hc *http.Client, target string, n int, d time.Duration, record bool) []*tally {
	deadline := time.Now().Add(d)
	tallies := make([]*tally, n)
	var wg sync.WaitGroup
	for i := range tallies {
		t := &tally{}
		tallies[i] = t
		wg.Go(func() {
			buf := make([]byte, 64<<10)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				begin := time.Now()
				n, proto, err := get(ctx, hc, target, buf)
				took := time.Since(begin)
				t.bytes += n
				if err != nil {
					t.errors++
					if t.firstErr == "" {
						t.firstErr = err.Error()
					}
					time.Sleep(time.Millisecond) // no hot loop on a refusing proxy
					continue
				}
				t.requests++
				if t.proto == "" {
					t.proto = proto
				}
				if record {
					t.lat = append(t.lat, took)
				}
			}
		})
	}
	wg.Wait()
	return tallies
}

// get fetches target and reads the whole body into buf, returning the body
// bytes read and the protocol the response came in.
func get(ctx context.Context, hc *http.Client, target string, buf []byte) (int64, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var n int64
	for {
		m, err := resp.Body.Read(buf)
		n += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, resp.Proto, err
		}
	}
	if resp.StatusCode != http.StatusOK {
		return n, resp.Proto, fmt.Errorf("status %s", resp.Status)
	}
	return n, resp.Proto, nil
}

// Hold opens Conns keep-alive connections to Target, one request on each,
// with Parallel dialling at once for at most Open, then samples Watch and
// holds them idle for Idle before closing them.
type Hold struct {
	Client
	Target   *url.URL
	Conns    int
	Parallel int
	Open     time.Duration // budget to open them all
	Settle   time.Duration // wait after the last opened before sampling
	Idle     time.Duration // hold this long after sampling
	Watch    Watch
}

// RunHold runs h. Connections that fail to open are counted as errors;
// Held says how many were open when the memory was sampled.
func RunHold(ctx context.Context, h Hold) (Result, error) {
	if h.Conns < 1 || h.Target == nil {
		return Result{}, errors.New("loadgen: hold: need a target and conns ≥ 1")
	}
	h.Parallel = max(h.Parallel, 1)
	res := Result{Mode: "hold", Via: via(h.Client), Proto: "HTTP/1.1", KeepAlive: true, Wanted: h.Conns, Concurrency: h.Parallel}
	watching := len(h.Watch.PIDs) > 0
	if watching {
		if s, err := h.Watch.Take(); err != nil {
			res.WatchError = err.Error()
		} else {
			res.Before = &s
		}
	}
	openCtx, cancel := context.WithTimeout(ctx, h.Open)
	defer cancel()
	var (
		mu       sync.Mutex
		conns    []net.Conn
		next     atomic.Int64
		errs     atomic.Int64
		firstErr atomic.Pointer[string]
		wg       sync.WaitGroup
	)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	for range h.Parallel {
		wg.Go(func() {
			for openCtx.Err() == nil && next.Add(1) <= int64(h.Conns) {
				c, err := h.Client.holdConn(openCtx, h.Target)
				if err != nil {
					if openCtx.Err() == nil {
						errs.Add(1)
						msg := err.Error()
						firstErr.CompareAndSwap(nil, &msg)
					}
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.OpenSeconds = time.Since(start).Seconds()
	res.Held, res.Requests, res.Errors = len(conns), int64(len(conns)), errs.Load()
	if p := firstErr.Load(); p != nil {
		res.FirstError = *p
	}
	if res.Held < h.Conns && res.FirstError == "" {
		res.FirstError = fmt.Sprintf("opened %d of %d within %s", res.Held, h.Conns, h.Open)
	}
	sleep(ctx, h.Settle)
	if watching && res.Before != nil {
		if s, err := h.Watch.Take(); err != nil {
			res.WatchError = err.Error()
		} else {
			res.After = &s
			if res.Held > 0 {
				grow := float64(s.RSSKB) - float64(res.Before.RSSKB)
				res.RSSPer1000MB = grow / 1024 / float64(res.Held) * 1000
			}
		}
	}
	// Still open? A connection the proxy dropped while idle shows here.
	var alive atomic.Int64
	var check sync.WaitGroup
	for i := range h.Parallel {
		check.Go(func() {
			for j := i; j < len(conns); j += h.Parallel {
				c := conns[j]
				c.SetReadDeadline(time.Now().Add(time.Millisecond))
				var one [1]byte
				if _, err := c.Read(one[:]); err != nil && isTimeout(err) {
					alive.Add(1)
				}
			}
		})
	}
	check.Wait()
	if alive := int(alive.Load()); alive < res.Held {
		res.FirstError = strings.TrimSpace(res.FirstError + fmt.Sprintf(" %d of %d held connections were closed by the peer", res.Held-alive, res.Held))
	}
	sleep(ctx, h.Idle)
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
