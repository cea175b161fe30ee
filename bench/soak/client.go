package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The client side runs as the session's agent. It knows nothing of
// Chaperone: it dials the origin's IP literal and trusts what the
// environment says to trust (SSL_CERT_FILE, set by the session), so every
// request it gets through went through the proxy's interception.
//
// It talks to the orchestrator in lines: it prints "WARM <stats>" after the
// warm-up and waits for "GO" on stdin, prints "DONE <stats>" after the load
// and waits for "EXIT" (or the end of stdin) before it exits, so that the
// orchestrator measures Chaperone with the session still open and idle.

// Line prefixes of the protocol.
const (
	lineWarm = "WARM "
	lineDone = "DONE "
	lineGo   = "GO"
	lineExit = "EXIT"
)

// clientConfig is one client run.
type clientConfig struct {
	Target   string        // https://IP:PORT of the origin
	Clients  int           // concurrent clients, each with its own connections
	Warmup   time.Duration // load before the baseline
	Duration time.Duration // load after it
	Interval time.Duration // mean time between one client's requests
	Timeout  time.Duration // one request, end to end
}

// loadStats is what one phase of load did.
type loadStats struct {
	Requests int64    `json:"requests"`
	Failures int64    `json:"failures"`
	Examples []string `json:"examples,omitempty"` // the first few failures
	// Reused counts requests sent on a connection that carried an earlier
	// one; NewConns, requests that opened one.
	Reused   int64 `json:"reused"`
	NewConns int64 `json:"new_conns"`
	HTTP2    int64 `json:"http2"`
}

func clientMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("soak client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c clientConfig
	fs.StringVar(&c.Target, "target", "", "origin URL, https://IP:PORT")
	fs.IntVar(&c.Clients, "clients", 100, "concurrent clients")
	fs.DurationVar(&c.Warmup, "warmup", 10*time.Second, "warm-up load")
	fs.DurationVar(&c.Duration, "duration", time.Minute, "load")
	fs.DurationVar(&c.Interval, "interval", time.Second, "mean time between one client's requests")
	fs.DurationVar(&c.Timeout, "timeout", time.Minute, "one request")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !strings.HasPrefix(c.Target, "https://") || c.Clients < 1 {
		fmt.Fprintln(stderr, "soak client: -target https://IP:PORT and -clients > 0 are required")
		return 2
	}
	clients := newClients(c)
	in := bufio.NewScanner(stdin)
	wait := func(want string) bool {
		for in.Scan() {
			if strings.TrimSpace(in.Text()) == want {
				return true
			}
		}
		return false
	}
	report := func(prefix string, s *loadStats) {
		b, _ := json.Marshal(s)
		fmt.Fprintf(stdout, "%s%s\n", prefix, b)
	}

	warm := runLoad(clients, c, c.Warmup)
	closeIdle(clients)
	report(lineWarm, warm)
	if !wait(lineGo) {
		fmt.Fprintln(stderr, "soak client: stdin ended before GO")
		return 1
	}
	load := runLoad(clients, c, c.Duration)
	closeIdle(clients)
	report(lineDone, load)
	wait(lineExit) // EOF will do as well
	return 0
}

// soakClient is one of the concurrent clients. Kinds rotate: one in eight
// opens a connection per request (the connect path, the redirect map, the
// leaf cache), one in eight speaks HTTP/2, the rest HTTP/1.1 keep-alive.
type soakClient struct {
	id        int
	http      *http.Client
	transport *http.Transport
}

func newClients(c clientConfig) []*soakClient {
	out := make([]*soakClient, c.Clients)
	for i := range out {
		t := &http.Transport{
			// Roots: nil means the system's, which SSL_CERT_FILE names.
			TLSClientConfig:     &tls.Config{},
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     time.Minute,
			DisableKeepAlives:   i%8 == 0,
			ForceAttemptHTTP2:   i%8 == 1,
		}
		if i%8 != 1 {
			t.TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
		out[i] = &soakClient{id: i, transport: t, http: &http.Client{Transport: t, Timeout: c.Timeout}}
	}
	return out
}

func closeIdle(clients []*soakClient) {
	for _, c := range clients {
		c.transport.CloseIdleConnections()
	}
}

// runLoad runs every client for d, each sending a request every Interval
// on average, and waits for the requests in flight.
func runLoad(clients []*soakClient, c clientConfig, d time.Duration) *loadStats {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		st       loadStats
		mu       sync.Mutex
		examples []string
		wg       sync.WaitGroup
		seq      atomic.Int64
	)
	fail := func(err error) {
		atomic.AddInt64(&st.Failures, 1)
		mu.Lock()
		if len(examples) < 10 {
			examples = append(examples, err.Error())
		}
		mu.Unlock()
	}
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the clients' first requests over one interval.
			next := time.Duration(rand.Int64N(int64(c.Interval)))
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(next):
				}
				atomic.AddInt64(&st.Requests, 1)
				reused, h2, err := cl.do(c.Target, seq.Add(1))
				switch {
				case err != nil:
					fail(fmt.Errorf("client %d: %w", cl.id, err))
				case reused:
					atomic.AddInt64(&st.Reused, 1)
				default:
					atomic.AddInt64(&st.NewConns, 1)
				}
				if h2 {
					atomic.AddInt64(&st.HTTP2, 1)
				}
				next = c.Interval/2 + time.Duration(rand.Int64N(int64(c.Interval)))
			}
		}()
	}
	wg.Wait()
	st.Examples = examples
	return &st
}

// do sends one request, a GET or (every other one) a POST echoed back, and
// checks the status and the whole body.
func (cl *soakClient) do(target string, n int64) (reused, h2 bool, err error) {
	var (
		req  *http.Request
		want []byte
	)
	if n%2 == 0 {
		path := fmt.Sprintf("/soak/%d/%d", cl.id, n)
		want = originBody(path)
		req, err = http.NewRequest(http.MethodGet, target+path, nil)
	} else {
		want = make([]byte, 256+rand.IntN(4096))
		for i := range want {
			want[i] = 'a' + byte(rand.IntN(26))
		}
		req, err = http.NewRequest(http.MethodPost, target+"/echo", bytes.NewReader(want))
	}
	if err != nil {
		return false, false, err
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	}))
	resp, err := cl.http.Do(req)
	if err != nil {
		return reused, false, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return reused, resp.ProtoMajor == 2, fmt.Errorf("%s %s: read body: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return reused, resp.ProtoMajor == 2, fmt.Errorf("%s %s: status %d: %.200q", req.Method, req.URL.Path, resp.StatusCode, got)
	}
	if !bytes.Equal(got, want) {
		return reused, resp.ProtoMajor == 2, errors.New(req.Method + " " + req.URL.Path + ": wrong body")
	}
	return reused, resp.ProtoMajor == 2, nil
}

// originBody is what the origin answers a GET of path with.
func originBody(path string) []byte {
	return []byte("soak origin: " + path + "\n")
}

// runClient runs the client side when the binary is started as
// "soak client ..."; main and TestMain call it.
func runClient(args []string) int {
	return clientMain(args, os.Stdin, os.Stdout, os.Stderr)
}
