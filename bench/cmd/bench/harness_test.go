//go:build linux

package main

import (
	"io"
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
		{"unknown scenario", []string{"-scenarios", "h3"}, options{}, true},
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
