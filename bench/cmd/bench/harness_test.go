//go:build linux

package main

import (
	"io"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/bench/loadgen"
	"github.com/chaperone-dev/chaperone/bench/report"
)

func TestFill(t *testing.T) {
	ok := &loadgen.Result{Proto: "HTTP/2.0", Requests: 100, RPS: 50, Latency: loadgen.Latency{P50Ms: 1, P99Ms: 2},
		Before: &loadgen.Sample{}, After: &loadgen.Sample{}, CPUPerReqUs: 40}
	h1 := *ok
	h1.Proto = "HTTP/1.1"
	none := &loadgen.Result{Proto: "HTTP/1.1", FirstError: "refused"}
	unsampled := *ok
	unsampled.After = nil
	h3 := *ok
	h3.Proto = "HTTP/3.0"
	tests := []struct {
		name string
		s    scenario
		res  *loadgen.Result
		want map[string]report.Value
	}{
		{"h2 measured", scenario{id: "ka-h2-c64", group: "ka", h2: true}, ok, map[string]report.Value{
			"ka_h2_c64_rps": report.Num(50), "ka_h2_c64_p50_ms": report.Num(1), "ka_h2_c64_p99_ms": report.Num(2),
			report.CPUKeepAliveH2: report.Num(40),
		}},
		{"h2 asked, h1 given", scenario{id: "ka-h2-c1", group: "ka", h2: true}, &h1, map[string]report.Value{
			"ka_h2_c1_rps":    report.NA("the proxy does not offer h2 to the client (got HTTP/1.1)"),
			"ka_h2_c1_p50_ms": report.NA("the proxy does not offer h2 to the client (got HTTP/1.1)"),
			"ka_h2_c1_p99_ms": report.NA("the proxy does not offer h2 to the client (got HTTP/1.1)"),
		}},
		{"h3 measured", scenario{id: "ka-h3-c64", group: "ka", h3: true}, &h3, map[string]report.Value{
			"ka_h3_c64_rps": report.Num(50), "ka_h3_c64_p50_ms": report.Num(1), "ka_h3_c64_p99_ms": report.Num(2),
			report.CPUKeepAliveH3: report.Num(40),
		}},
		{"h3 asked, h2 given", scenario{id: "ka-h3-c1", group: "ka", h3: true}, ok, map[string]report.Value{
			"ka_h3_c1_rps":    report.NA("the response came over HTTP/2.0, not HTTP/3"),
			"ka_h3_c1_p50_ms": report.NA("the response came over HTTP/2.0, not HTTP/3"),
			"ka_h3_c1_p99_ms": report.NA("the response came over HTTP/2.0, not HTTP/3"),
		}},
		{"nothing succeeded", scenario{id: "new", group: "new"}, none, map[string]report.Value{
			report.NewConnsPerSec: report.NA("no request succeeded: refused"),
			report.CPUNewConn:     report.NA("no request succeeded: refused"),
		}},
		{"proxy not sampled", scenario{id: "ka-h1-c64", group: "ka"}, &unsampled, map[string]report.Value{
			"ka_h1_c64_rps": report.Num(50), "ka_h1_c64_p50_ms": report.Num(1), "ka_h1_c64_p99_ms": report.Num(2),
			report.CPUKeepAliveH1: report.NA("proxy not sampled"),
		}},
		{"failed run", scenario{id: "download", group: "download"}, nil, map[string]report.Value{
			report.DownloadMBps: report.NA("failed: boom"),
		}},
		{"idle", scenario{id: "idle", group: "idle", hold: true}, &loadgen.Result{Mode: "hold", Held: 900, Requests: 900, RSSPer1000MB: 30, After: &loadgen.Sample{}}, map[string]report.Value{
			report.IdleRSSPer1000MB: report.Num(30), report.IdleHeld: report.Num(900),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]report.Value{}
			why := ""
			if tt.res == nil {
				why = "failed: boom"
			}
			fill(got, tt.s, tt.res, why)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("fill (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSkips(t *testing.T) {
	ka, h3 := scenario{id: "ka-h1-c1", group: "ka"}, scenario{id: "ka-h3-c1", group: "ka", h3: true}
	col := func(name string) *column { return &column{out: report.Proxy{Name: name}} }
	tests := []struct {
		name  string
		h3Err string
		col   string
		s     scenario
		want  string
	}{
		{"h1 everywhere", "", colChaperone, ka, ""},
		{"h3 direct", "", colDirect, h3, ""},
		{"h3 transparent", "", colTransparent, h3, ""},
		{"h3 explicit proxy", "", colChaperone, h3, "carries no HTTP/3"},
		{"h3 a peer", "", colGoproxy, h3, "carries no HTTP/3"},
		{"h3 without an origin", "listen udp 127.0.0.1:443: bind: permission denied", colTransparent, h3,
			"the origin serves no HTTP/3 here: listen udp 127.0.0.1:443: bind: permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &harness{h3Err: tt.h3Err}
			if got := h.skips(col(tt.col), tt.s); got != tt.want {
				t.Errorf("skips = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBetter(t *testing.T) {
	tests := []struct {
		name string
		a, b loadgen.Result
		want bool
	}{
		{"faster wins", loadgen.Result{Requests: 10, RPS: 200}, loadgen.Result{Requests: 10, RPS: 100}, true},
		{"slower loses", loadgen.Result{Requests: 10, RPS: 100}, loadgen.Result{Requests: 10, RPS: 200}, false},
		{"any success beats none", loadgen.Result{Requests: 1, RPS: 0.5}, loadgen.Result{Errors: 9}, true},
		{"downloads by bytes", loadgen.Result{Requests: 2, MBps: 900, RPS: 9}, loadgen.Result{Requests: 3, MBps: 800, RPS: 8}, true},
		{"holds by count", loadgen.Result{Mode: "hold", Held: 10}, loadgen.Result{Mode: "hold", Held: 9}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := better(tt.a, tt.b); got != tt.want {
				t.Errorf("better = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    options
		wantErr bool
	}{
		{"quick shortens what is not set", []string{"-quick", "-idle", "50"}, options{
			columns: allColumns(), groups: allGroups(), duration: 2 * time.Second, warmup: 500 * time.Millisecond,
			newConnC: 16, idle: 50, holdOpen: 2 * time.Minute, out: "bench/results", install: true, quick: true, rounds: 1,
		}, false},
		{"subset", []string{"-proxies", "direct, squid", "-scenarios", "ka", "-no-install", "-rounds", "3"}, options{
			columns: []string{"direct", "squid"}, groups: []string{"ka"}, duration: 5 * time.Second, warmup: time.Second,
			newConnC: 16, idle: 10000, holdOpen: 2 * time.Minute, out: "bench/results", rounds: 3,
		}, false},
		{"unknown proxy", []string{"-proxies", "nginx"}, options{}, true},
		{"unknown scenario", []string{"-scenarios", "h4"}, options{}, true},
		{"no rounds", []string{"-rounds", "0"}, options{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlags(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseFlags error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(options{})); diff != "" {
				t.Errorf("parseFlags (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRoundRatios: each round's figure over direct's in the same round,
// and their median; failed rounds and single rounds left out.
func TestRoundRatios(t *testing.T) {
	scen := []scenario{{id: "ka-h1-c1", group: "ka"}, {id: "download", group: "download"}, {id: "new", group: "new"},
		{id: "ka-h1-c64", group: "ka"}, {id: "idle", group: "idle", hold: true}}
	direct := map[string][]float64{"ka-h1-c1": {100, 200, 100}, "download": {1000, 1000}, "new": {50}, "ka-h1-c64": {10, 0, 10, 10}, "idle": {1, 1}}
	col := map[string][]float64{"ka-h1-c1": {60, 80, 45}, "download": {400, 600}, "new": {30}, "ka-h1-c64": {5, 5, 0, 6}, "idle": {1, 1}}
	got := roundRatios(col, direct, scen)
	want := "rounds' own ratios to direct: ka-h1-c1 0.60 0.40 0.45 (median 0.45); download 0.40 0.60 (median 0.50); ka-h1-c64 0.50 0.60 (median 0.55)"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := roundRatios(map[string][]float64{"new": {1}}, map[string][]float64{"new": {2}}, scen); got != "" {
		t.Errorf("one round: %q, want no note", got)
	}
}

// TestRecordCPURounds: each round's CPU per request is kept for the
// keep-alive c=64 scenarios, in round order, 0 for a round that failed,
// had errors or was not sampled; direct has none.
func TestRecordCPURounds(t *testing.T) {
	h1, h2, c1 := scenario{id: "ka-h1-c64", group: "ka"}, scenario{id: "ka-h2-c64", group: "ka"}, scenario{id: "ka-h1-c1", group: "ka"}
	ok := func(cpu float64) loadgen.Result {
		return loadgen.Result{Requests: 100, RPS: 1000, CPUPerReqUs: cpu, Before: &loadgen.Sample{}, After: &loadgen.Sample{}}
	}
	c := newColumn(colChaperone)
	c.record(h1, 1, ok(60), nil)
	c.record(c1, 1, ok(150), nil)
	// round 2 of h1 failed: nothing recorded
	c.record(h1, 3, ok(55), nil)
	c.record(h2, 1, loadgen.Result{Requests: 100, RPS: 900, CPUPerReqUs: 70}, nil) // not sampled
	bad := ok(80)
	bad.Errors = 3
	c.record(h2, 2, bad, nil)
	c.record(h2, 3, ok(50), nil)
	want := map[string][]float64{report.CPUKeepAliveH1: {60, 0, 55}, report.CPUKeepAliveH2: {0, 0, 50}}
	if diff := cmp.Diff(want, c.out.CPURounds); diff != "" {
		t.Errorf("CPU rounds (-want +got):\n%s", diff)
	}
	if got := c.best[h1.id].CPUPerReqUs; got != 60 {
		t.Errorf("best h1 round: cpu %v, want the first round's 60 (ties keep the first)", got)
	}
	d := newColumn(colDirect)
	d.record(h1, 1, ok(0), nil)
	if len(d.out.CPURounds) != 0 {
		t.Errorf("direct: CPU rounds %v, want none", d.out.CPURounds)
	}
}

// TestRoundFigure: the figure a round is compared by.
func TestRoundFigure(t *testing.T) {
	ka, dl := scenario{id: "ka-h1-c1", group: "ka"}, scenario{id: "download", group: "download"}
	for _, tt := range []struct {
		s    scenario
		r    loadgen.Result
		want float64
	}{
		{ka, loadgen.Result{Requests: 10, RPS: 5000, MBps: 5}, 5000},
		{dl, loadgen.Result{Requests: 10, RPS: 9, MBps: 900}, 900},
		{ka, loadgen.Result{Requests: 10, RPS: 5000, Errors: 1}, 0},
		{ka, loadgen.Result{}, 0},
	} {
		if got := roundFigure(tt.s, tt.r); got != tt.want {
			t.Errorf("%s %+v: %v, want %v", tt.s.id, tt.r, got, tt.want)
		}
	}
}

// TestRoundOrder: the columns run as given in odd rounds, reversed in
// even ones, and the given order is left as it was.
func TestRoundOrder(t *testing.T) {
	cols := []string{"direct", "relay", "chaperone-proxy", "chaperone-transparent"}
	for round, want := range map[int][]string{
		1: {"direct", "relay", "chaperone-proxy", "chaperone-transparent"},
		2: {"chaperone-transparent", "chaperone-proxy", "relay", "direct"},
		3: {"direct", "relay", "chaperone-proxy", "chaperone-transparent"},
	} {
		if got := roundOrder(cols, round); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", round, got, want)
		}
	}
	if cols[0] != "direct" {
		t.Errorf("the given order changed: %v", cols)
	}
}
