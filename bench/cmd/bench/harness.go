//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chaperone-dev/chaperone/bench/loadgen"
	"github.com/chaperone-dev/chaperone/bench/origin"
	"github.com/chaperone-dev/chaperone/bench/report"
)

type binaries struct {
	loadgen, chaperone, relay, gomitm, tlsfloor string
}

type harness struct {
	o      options
	tmp    string
	bins   binaries
	origin *origin.Server
	logf   func(string, ...any)
	h3Err  string // why the origin serves no HTTP/3 ("" when it does, or was not asked to)
}

// scenario is one loadgen invocation.
type scenario struct {
	id    string
	group string
	args  []string
	h2    bool
	h3    bool // HTTP/3: run by the columns that carry it (carriesH3)
	hold  bool
}

func (h *harness) scenarios() []scenario {
	o := h.o
	d, w := o.duration.String(), o.warmup.String()
	var out []scenario
	want := func(g string) bool { return contains(o.groups, g) }
	if want("ka") {
		for _, proto := range []string{"h1", "h2"} {
			for _, c := range []int{1, 64} {
				out = append(out, scenario{
					id: fmt.Sprintf("ka-%s-c%d", proto, c), group: "ka", h2: proto == "h2",
					args: []string{"-target", h.origin.URL(origin.Path1K), "-proto", proto, "-c", strconv.Itoa(c), "-d", d, "-warmup", w},
				})
			}
		}
	}
	if want("h3") {
		for _, c := range []int{1, 64} {
			out = append(out, scenario{
				id: fmt.Sprintf("ka-h3-c%d", c), group: "ka", h3: true,
				args: []string{"-target", h.origin.H3URL(origin.Path1K), "-proto", "h3", "-c", strconv.Itoa(c), "-d", d, "-warmup", w},
			})
		}
	}
	if want("new") {
		out = append(out, scenario{
			id: "new", group: "new",
			args: []string{"-target", h.origin.URL(origin.Path1K), "-keepalive=false", "-c", strconv.Itoa(o.newConnC), "-d", d, "-warmup", w},
		})
	}
	if want("download") {
		out = append(out, scenario{
			id: "download", group: "download",
			// One warm-up download at most: the measured loop does the rest.
			args: []string{"-target", h.origin.URL(origin.Path100MB), "-c", "1", "-d", d, "-warmup", "1ms"},
		})
	}
	// Last: for long-running peers the peak RSS of the load scenarios is
	// read before the idle connections raise it.
	if want("idle") {
		out = append(out, scenario{
			id: "idle", group: "idle", hold: true,
			args: []string{"-target", h.origin.URL(origin.Path1K), "-hold", strconv.Itoa(o.idle),
				"-hold-parallel", "32", "-hold-open", o.holdOpen.String(), "-hold-settle", "3s", "-hold-idle", "2s"},
		})
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// column is one column's peer and what its scenarios measured so far.
type column struct {
	out    report.Proxy
	peer   peer
	best   map[string]loadgen.Result // per scenario: the least disturbed round
	rounds map[string][]float64      // per scenario: each round's score (0: failed)
	failed map[string]string         // per scenario: the last failure
	peakKB uint64
}

// newColumn is column name with nothing measured yet, and no peer.
func newColumn(name string) *column {
	return &column{
		out:    report.Proxy{Name: name, Values: map[string]report.Value{}, Raw: map[string]json.RawMessage{}, CPURounds: map[string][]float64{}},
		best:   map[string]loadgen.Result{},
		rounds: map[string][]float64{},
		failed: map[string]string{},
	}
}

// startColumn starts the peer of column name; a peer that cannot start
// leaves a column of notes.
func (h *harness) startColumn(ctx context.Context, name string) *column {
	c := newColumn(name)
	var err error
	switch name {
	case colDirect:
		c.peer = directPeer{h: h}
	case colChaperone, colTransparent:
		c.peer, err = newChaperonePeer(h, name == colTransparent)
	case colRelay:
		c.peer, err = startRelay(ctx, h)
	case colFloor:
		c.peer, err = startFloor(ctx, h)
	case colGoproxy:
		c.peer, err = startGomitm(ctx, h)
	case colMitm:
		c.peer, err = startMitmproxy(ctx, h)
	case colSquid:
		c.peer, err = startSquid(ctx, h)
	}
	if err != nil {
		h.logf("%s: %v", name, err)
		c.out.Notes = append(c.out.Notes, "not measured: "+err.Error())
		c.peer = nil
		return c
	}
	c.out.Version, c.out.Setup = c.peer.describe()
	return c
}

// measure runs every column: the load scenarios round after round, each
// scenario across all columns before the next (so that a burst of other
// load on the machine hits them alike), in the reverse order every other
// round (roundOrder), then the idle connections once per proxy. Each peer
// runs from the first scenario to the last.
func (h *harness) measure(ctx context.Context) []report.Proxy {
	var cols []*column
	for _, name := range h.o.columns {
		cols = append(cols, h.startColumn(ctx, name))
	}
	defer func() {
		for _, c := range cols {
			if c.peer != nil {
				c.peer.stop()
			}
		}
	}()
	scen := h.scenarios()
	for round := 1; round <= h.o.rounds; round++ {
		for _, s := range scen {
			if s.hold {
				continue
			}
			for _, c := range roundOrder(cols, round) {
				if ctx.Err() != nil || c.peer == nil || h.skips(c, s) != "" {
					continue
				}
				h.runOne(ctx, c, s, round)
			}
		}
	}
	for _, s := range scen {
		if !s.hold {
			continue
		}
		for _, c := range cols {
			if ctx.Err() != nil || c.peer == nil || !holdsIdle(c.out.Name) {
				continue
			}
			h.runOne(ctx, c, s, 1)
		}
	}
	var direct *column
	for _, c := range cols {
		if c.out.Name == colDirect {
			direct = c
		}
	}
	var out []report.Proxy
	for _, c := range cols {
		if direct != nil && c != direct && c.peer != nil {
			if note := roundRatios(c.rounds, direct.rounds, scen); note != "" {
				c.out.Notes = append(c.out.Notes, note)
			}
		}
		out = append(out, h.finish(ctx, c, scen))
	}
	return out
}

// roundOrder is the order of the columns in a round: as given in odd
// rounds, reversed in even ones, so that a column measured just after
// another (its session's end, its daemon's last work) in one round is
// measured just before it in the next. Reversing the two Chaperone
// columns' order has been seen to reverse which of them did better at
// c=1.
func roundOrder[T any](cols []T, round int) []T {
	if round%2 == 1 {
		return cols
	}
	rev := slices.Clone(cols)
	slices.Reverse(rev)
	return rev
}

// roundRatios lists, for each load scenario, the column's figure over
// direct's in the same round, and their median. Each round measures a
// scenario's columns within a minute or so, so these ratios are less
// disturbed by the machine's changes of speed than the best rounds' ratio,
// which may pair rounds far apart.
func roundRatios(col, direct map[string][]float64, scen []scenario) string {
	var parts []string
	for _, s := range scen {
		if s.hold {
			continue
		}
		a, b := col[s.id], direct[s.id]
		var rs []float64
		for i := range min(len(a), len(b)) {
			if a[i] > 0 && b[i] > 0 {
				rs = append(rs, a[i]/b[i])
			}
		}
		if len(rs) < 2 {
			continue // one round: the table's ratio says it all
		}
		var b2 strings.Builder
		fmt.Fprintf(&b2, "%s", s.id)
		for _, r := range rs {
			fmt.Fprintf(&b2, " %.2f", r)
		}
		fmt.Fprintf(&b2, " (median %.2f)", report.Median(rs))
		parts = append(parts, b2.String())
	}
	if len(parts) == 0 {
		return ""
	}
	return "rounds' own ratios to direct: " + strings.Join(parts, "; ")
}

// carriesH3 says whether column name carries HTTP/3: direct, and
// Chaperone's transparent mode, which sends a session's QUIC to its
// proxy. An explicit proxy carries none (a client sends HTTP/3 around
// it, over UDP), and the other proxies do not intercept it.
func carriesH3(name string) bool { return name == colDirect || name == colTransparent }

// skips says why column c does not run scenario s ("" when it does).
func (h *harness) skips(c *column, s scenario) string {
	switch {
	case !s.h3:
		return ""
	case h.h3Err != "":
		return "the origin serves no HTTP/3 here: " + h.h3Err
	case !carriesH3(c.out.Name):
		return "carries no HTTP/3"
	}
	return ""
}

// holdsIdle says whether column name runs the idle-connections scenario:
// direct has no proxy to weigh, and what the relay holds an idle
// connection with says nothing of a proxy one would run.
func holdsIdle(name string) bool { return name != colDirect && name != colRelay }

// runOne runs scenario s through column c and keeps the result if it is
// the best so far.
func (h *harness) runOne(ctx context.Context, c *column, s scenario, round int) {
	name := c.out.Name
	res, raw, err := h.runLoadgen(ctx, c.peer, s)
	if err != nil {
		h.logf("%s %s #%d: %v", name, s.id, round, err)
		c.failed[s.id] = err.Error()
		return
	}
	h.logf("%s %s #%d: %s", name, s.id, round, summary(res))
	c.record(s, round, res, raw)
}

// record keeps round's result res of scenario s: its figure for the
// rounds' own ratios, its CPU per request where the scenario has a CPU
// figure, the proxy's peak memory, and res itself if it is the best round.
func (c *column) record(s scenario, round int, res loadgen.Result, raw json.RawMessage) {
	if !s.hold {
		c.rounds[s.id] = append(padRounds(c.rounds[s.id], round), roundFigure(s, res))
	}
	if key := keepAliveCPU(s.id); key != "" && c.out.Name != colDirect {
		cpu := 0.0 // a round with errors or without a sample
		if res.After != nil && res.Errors == 0 && res.Requests > 0 {
			cpu = res.CPUPerReqUs
		}
		c.out.CPURounds[key] = append(padRounds(c.out.CPURounds[key], round), cpu)
	}
	if !s.hold && res.After != nil {
		c.peakKB = max(c.peakKB, res.After.PeakKB)
	}
	prev, seen := c.best[s.id]
	if !seen || better(res, prev) {
		c.best[s.id] = res
		c.out.Raw[s.id] = raw
	}
}

// padRounds gives xs a 0 for each round before round that left nothing
// in it (it failed).
func padRounds(xs []float64, round int) []float64 {
	for len(xs) < round-1 {
		xs = append(xs, 0)
	}
	return xs
}

// better says whether a is a less disturbed run than b: more successful
// requests per second (bytes for a download), errors counting against.
func better(a, b loadgen.Result) bool { return score(a) > score(b) }

// roundFigure is the figure of a round that the rounds' own ratios
// compare: MB/s for the download, requests per second for the others; 0
// for a round with errors.
func roundFigure(s scenario, r loadgen.Result) float64 {
	switch {
	case r.Errors > 0 || r.Requests == 0:
		return 0
	case s.group == "download":
		return r.MBps
	}
	return r.RPS
}

// score is a run's figure for comparing rounds: requests per second, or
// MB/s for a download (whose requests per second are a handful), errors
// counting against; connections held for the idle scenario.
func score(r loadgen.Result) float64 {
	if r.Mode == "hold" {
		return float64(r.Held)
	}
	if r.Requests == 0 {
		return -1
	}
	return r.MBps + r.RPS - float64(r.Errors)
}

// finish turns a column's best results into its figures and notes.
func (h *harness) finish(ctx context.Context, c *column, scen []scenario) report.Proxy {
	col := c.out
	name := col.Name
	if c.peer == nil {
		return col
	}
	for _, s := range scen {
		if s.hold && !holdsIdle(name) {
			continue
		}
		if why := h.skips(c, s); why != "" {
			fill(col.Values, s, nil, why)
			continue
		}
		res, ok := c.best[s.id]
		if !ok {
			why := c.failed[s.id]
			if why == "" {
				why = "not run"
			}
			col.Notes = append(col.Notes, fmt.Sprintf("%s: %s", s.id, why))
			fill(col.Values, s, nil, "failed: "+why)
			continue
		}
		if res.Errors > 0 {
			col.Notes = append(col.Notes, fmt.Sprintf("%s: %d errors, first: %s", s.id, res.Errors, res.FirstError))
		} else if s.hold && res.FirstError != "" {
			col.Notes = append(col.Notes, fmt.Sprintf("%s: %s", s.id, res.FirstError))
		}
		if res.WatchError != "" {
			col.Notes = append(col.Notes, fmt.Sprintf("%s: proxy not sampled: %s", s.id, res.WatchError))
		}
		fill(col.Values, s, &res, "")
	}
	if name == colDirect {
		// No proxy: nothing to weigh.
		for _, k := range []string{report.CPUKeepAliveH1, report.CPUKeepAliveH2, report.CPUKeepAliveH3, report.CPUNewConn} {
			delete(col.Values, k)
		}
	}
	if name == colDirect && contains(h.o.groups, "ka") {
		if rps, err := h2loadRPS(ctx, h.origin.URL(origin.Path1K), h.o.duration); err == nil {
			note := fmt.Sprintf("h2load (nghttp2) h2 c=1 to the origin: %.0f req/s", rps)
			if v, ok := col.Values[report.KeepAliveH2C1RPS].OK(); ok {
				note += fmt.Sprintf("; loadgen: %.0f req/s", v)
			}
			col.Notes = append(col.Notes, note)
		} else {
			h.logf("cross-check: %v", err)
		}
	}
	if name != colDirect && c.peakKB > 0 {
		col.Values[report.PeakRSSMB] = report.Num(float64(c.peakKB) / 1024)
	}
	return col
}

func summary(r loadgen.Result) string {
	if r.Mode == "hold" {
		return fmt.Sprintf("held %d/%d in %.1fs, %.1f MB per 1,000, %d errors", r.Held, r.Wanted, r.OpenSeconds, r.RSSPer1000MB, r.Errors)
	}
	s := fmt.Sprintf("%s %.0f req/s p50 %.3fms p99 %.3fms %.1f MB/s %d errors", r.Proto, r.RPS, r.P50Ms, r.P99Ms, r.MBps, r.Errors)
	if r.After != nil {
		s += fmt.Sprintf(" cpu %.1fµs/req", r.CPUPerReqUs)
	}
	return s
}

// keepAliveCPU is the CPU figure of keep-alive scenario id, or "".
func keepAliveCPU(id string) string {
	switch id {
	case "ka-h1-c64":
		return report.CPUKeepAliveH1
	case "ka-h2-c64":
		return report.CPUKeepAliveH2
	case "ka-h3-c64":
		return report.CPUKeepAliveH3
	}
	return ""
}

// fill sets the figures scenario s yields from res (nil: all n/a, why).
func fill(v map[string]report.Value, s scenario, res *loadgen.Result, why string) {
	num := func(key string, x float64) {
		if res == nil {
			v[key] = report.NA(why)
			return
		}
		v[key] = report.Num(x)
	}
	if res != nil && res.Requests == 0 {
		res, why = nil, "no request succeeded: "+res.FirstError
	}
	if res != nil && s.h2 && res.Proto != "HTTP/2.0" {
		res, why = nil, "the proxy does not offer h2 to the client (got "+res.Proto+")"
	}
	if res != nil && s.h3 && res.Proto != "HTTP/3.0" {
		res, why = nil, "the response came over "+res.Proto+", not HTTP/3"
	}
	cpu := func(key string) {
		if res != nil && res.After == nil {
			v[key] = report.NA("proxy not sampled")
			return
		}
		if res == nil {
			v[key] = report.NA(why)
			return
		}
		v[key] = report.Num(res.CPUPerReqUs)
	}
	get := func(f func(r *loadgen.Result) float64) float64 {
		if res == nil {
			return 0
		}
		return f(res)
	}
	switch s.group {
	case "ka":
		prefix := strings.ReplaceAll(s.id, "-", "_")
		num(prefix+"_rps", get(func(r *loadgen.Result) float64 { return r.RPS }))
		num(prefix+"_p50_ms", get(func(r *loadgen.Result) float64 { return r.P50Ms }))
		num(prefix+"_p99_ms", get(func(r *loadgen.Result) float64 { return r.P99Ms }))
		if key := keepAliveCPU(s.id); key != "" {
			cpu(key)
		}
	case "new":
		num(report.NewConnsPerSec, get(func(r *loadgen.Result) float64 { return r.RPS }))
		cpu(report.CPUNewConn)
	case "download":
		num(report.DownloadMBps, get(func(r *loadgen.Result) float64 { return r.MBps }))
	case "idle":
		if res != nil && res.After == nil {
			v[report.IdleRSSPer1000MB] = report.NA("proxy not sampled")
		} else {
			num(report.IdleRSSPer1000MB, get(func(r *loadgen.Result) float64 { return r.RSSPer1000MB }))
		}
		num(report.IdleHeld, get(func(r *loadgen.Result) float64 { return float64(r.Held) }))
	}
}

// runLoadgen runs scenario s through peer p and parses what loadgen printed.
func (h *harness) runLoadgen(ctx context.Context, p peer, s scenario) (loadgen.Result, json.RawMessage, error) {
	limit := h.o.duration + h.o.warmup + 2*time.Minute
	if s.hold {
		limit = h.o.holdOpen + 2*time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	argv, env, cleanup, err := p.command(s, append([]string{h.bins.loadgen}, s.args...))
	if err != nil {
		return loadgen.Result{}, nil, err
	}
	defer cleanup()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr := cmd.Run()
	// The last line that is a JSON object is loadgen's.
	var raw json.RawMessage
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); strings.HasPrefix(l, "{") {
			raw = json.RawMessage(l)
			break
		}
	}
	if raw == nil {
		if runErr == nil {
			runErr = errors.New("no output")
		}
		return loadgen.Result{}, nil, fmt.Errorf("loadgen: %w: %s", runErr, tail(errb.String(), 400))
	}
	var res loadgen.Result
	if err := json.Unmarshal(raw, &res); err != nil {
		return loadgen.Result{}, raw, fmt.Errorf("loadgen output: %w", err)
	}
	if runErr != nil {
		h.logf("%s: exit %v: %s", s.id, runErr, tail(errb.String(), 400))
	}
	return res, raw, nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.ReplaceAll(s, "\n", " | ")
}

// peer is one column's proxy (or none).
type peer interface {
	// command returns the argv and environment that run loadgen (given as
	// argv) through this peer, and what to clean up after it.
	command(s scenario, loadgenArgv []string) (argv, env []string, cleanup func(), err error)
	describe() (version, setup string)
	stop()
}

type directPeer struct{ h *harness }

func (d directPeer) command(_ scenario, lg []string) ([]string, []string, func(), error) {
	return append(lg, "-direct", "-ca", d.h.origin.CAFile), os.Environ(), func() {}, nil
}
func (directPeer) describe() (string, string) { return "", "no proxy: loadgen to the origin" }
func (directPeer) stop()                      {}

// moduleDir returns the directory of the Chaperone module (go.mod).
func moduleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("bench: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("bench: run from inside the Chaperone module")
	}
	return filepath.Dir(mod), nil
}

// build compiles loadgen and the binaries of the columns that run:
// chaperone, relay, tlsfloor, gomitm.
func build(ctx context.Context, mod, tmp string, columns []string) (binaries, error) {
	b := binaries{loadgen: filepath.Join(tmp, "loadgen"), chaperone: filepath.Join(tmp, "chaperone"),
		relay: filepath.Join(tmp, "relay"), gomitm: filepath.Join(tmp, "gomitm"), tlsfloor: filepath.Join(tmp, "tlsfloor")}
	targets := [][2]string{{b.loadgen, "./bench/cmd/loadgen"}}
	if contains(columns, colChaperone) || contains(columns, colTransparent) {
		targets = append(targets, [2]string{b.chaperone, "./cmd/chaperone"})
	}
	if contains(columns, colRelay) {
		targets = append(targets, [2]string{b.relay, "./bench/cmd/relay"})
	}
	if contains(columns, colFloor) {
		targets = append(targets, [2]string{b.tlsfloor, "./bench/cmd/tlsfloor"})
	}
	if contains(columns, colGoproxy) {
		targets = append(targets, [2]string{b.gomitm, "./bench/cmd/gomitm"})
	}
	for _, t := range targets {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", t[0], t[1])
		cmd.Dir = mod
		if out, err := cmd.CombinedOutput(); err != nil {
			return binaries{}, fmt.Errorf("bench: go build %s: %w: %s", t[1], err, out)
		}
	}
	return b, nil
}
