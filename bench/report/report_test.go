package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sample is a small run: direct, one Chaperone column and mitmproxy.
func sample() Run {
	return Run{
		Date:     time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Machine:  Machine{CPUs: 2, Kernel: "Linux 6.1", Go: "go1.26"},
		Settings: Settings{Duration: "5s", Warmup: "1s", NewConnC: 16, IdleConns: 10000, Rounds: 2},
		Proxies: []Proxy{
			{Name: Direct, Values: map[string]Value{
				KeepAliveH1C1RPS: Num(10000), KeepAliveH1C1P50: Num(0.05),
				KeepAliveH1C64RPS: Num(20000), KeepAliveH2C1RPS: Num(8000), KeepAliveH2C1P50: Num(0.1),
				KeepAliveH2C64RPS: Num(16000), NewConnsPerSec: Num(1000), DownloadMBps: Num(1000),
			}},
			{Name: "chaperone-proxy", Values: map[string]Value{
				KeepAliveH1C1RPS: Num(6000), KeepAliveH1C1P50: Num(0.2),
				KeepAliveH1C64RPS: Num(9000), KeepAliveH2C1RPS: Num(4000), KeepAliveH2C1P50: Num(0.4),
				KeepAliveH2C64RPS: Num(8000), NewConnsPerSec: Num(400), DownloadMBps: Num(450),
				CPUKeepAliveH1: Num(60), CPUKeepAliveH2: Num(80),
				IdleRSSPer1000MB: Num(25), IdleHeld: Num(10000), PeakRSSMB: Num(70.25),
			}},
			{Name: Mitmproxy, Values: map[string]Value{
				KeepAliveH1C1RPS: Num(300), KeepAliveH1C64RPS: Num(800),
				KeepAliveH2C64RPS: NA("the proxy does not offer h2 to the client (got HTTP/1.1)"),
				IdleRSSPer1000MB:  Num(90), IdleHeld: Num(4000),
			}},
		},
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, sample()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if got, want := len(lines), 2+len(Figures()); got != want {
		t.Fatalf("%d lines, want %d:\n%s", got, want, b.String())
	}
	// Every line is as wide as the header: the columns line up.
	width := len([]rune(lines[0]))
	for i, l := range lines {
		if n := len([]rune(l)); n != width {
			t.Errorf("line %d is %d wide, header %d: %q", i, n, width, l)
		}
	}
	row := func(label string) []string {
		for _, l := range lines {
			cells := strings.Split(strings.Trim(l, "|"), "|")
			if strings.TrimSpace(cells[0]) == label {
				for i := range cells {
					cells[i] = strings.TrimSpace(cells[i])
				}
				return cells[1:]
			}
		}
		t.Fatalf("no row %q in\n%s", label, b.String())
		return nil
	}
	tests := []struct {
		label string
		want  []string
	}{
		{"figure", []string{Direct, "chaperone-proxy", Mitmproxy}},
		{"keep-alive h1 c=1 req/s", []string{"10,000", "6,000 (0.60×)", "300 (0.03×)"}},
		{"keep-alive h2 c=64 req/s", []string{"16,000", "8,000 (0.50×)", "n/a"}},
		{"new TLS connections/s", []string{"1,000", "400 (0.40×)", "–"}},
		{"proxy CPU µs/req, keep-alive h1 c=64", []string{"–", "60.0", "–"}},
		{"proxy peak RSS MB (load scenarios)", []string{"–", "70.2", "–"}},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, row(tt.label)); diff != "" {
				t.Errorf("row (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFormatNum(t *testing.T) {
	tests := []struct {
		n      float64
		digits int
		want   string
	}{
		{0, 0, "0"},
		{999, 0, "999"},
		{1000, 0, "1,000"},
		{1234567.891, 2, "1,234,567.89"},
		{-4321.5, 1, "-4,321.5"},
		{0.0456, 3, "0.046"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := formatNum(tt.n, tt.digits); got != tt.want {
				t.Errorf("formatNum(%v, %d) = %q, want %q", tt.n, tt.digits, got, tt.want)
			}
		})
	}
}

func TestJSONRoundTrip(t *testing.T) {
	in := sample()
	in.Targets = Targets(in)
	var b bytes.Buffer
	if err := WriteJSON(&b, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadJSON(&b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// A missing figure is a reason, never a zero.
	var raw bytes.Buffer
	WriteJSON(&raw, sample())
	if !strings.Contains(raw.String(), `"na": "the proxy does not offer h2 to the client (got HTTP/1.1)"`) {
		t.Errorf("n/a reason missing from\n%s", raw.String())
	}
}

func TestTargets(t *testing.T) {
	got := map[string]Check{}
	for _, c := range Targets(sample()) {
		if c.Proxy != "chaperone-proxy" {
			t.Errorf("checked %q: only Chaperone columns are checked", c.Proxy)
		}
		got[c.Target] = c
	}
	tests := []struct {
		target, got, status string
	}{
		{"keep-alive req/s ≥ 0.5× direct, h1 c=1", "0.60×", "meets"},
		{"keep-alive req/s ≥ 0.5× direct, h1 c=64", "0.45×", "misses"},
		{"keep-alive req/s ≥ 0.5× direct, h2 c=1", "0.50×", "meets"},
		{"keep-alive req/s ≥ 0.5× direct, h2 c=64", "0.50×", "meets"},
		{"keep-alive req/s ≥ 10× mitmproxy, h1 c=64", "11.2×", "meets"},
		{"keep-alive req/s ≥ 10× mitmproxy, h2 c=64", "–", "unknown"},
		{"added p50 latency ≤ 0.25 ms, c=1 h1", "+0.150 ms", "meets"},
		{"added p50 latency ≤ 0.25 ms, c=1 h2", "+0.300 ms", "misses"},
		{"new connections/s ≥ 0.5× direct", "0.40×", "misses"},
		{"100 MB download ≥ 0.45× direct", "0.45×", "meets"},
		{"proxy CPU ≤ 70 µs per keep-alive request at goproxy's 95, h1 c=64", "60.0 µs (no goproxy figure: unscaled)", "meets"},
		{"proxy CPU ≤ 70 µs per keep-alive request at goproxy's 95, h2 c=64", "80.0 µs (no goproxy figure: unscaled)", "misses"},
		{"10,000 idle connections < 300 MB RSS", "250 MB for 10,000", "meets"},
		{"ahead of every peer on each figure with a target", "by 3.60× at least (mitmproxy, RSS per idle connection)", "meets"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			c, ok := got[tt.target]
			if !ok {
				t.Fatalf("no check %q", tt.target)
			}
			if diff := cmp.Diff(Check{Target: tt.target, Proxy: "chaperone-proxy", Got: tt.got, Status: tt.status}, c); diff != "" {
				t.Errorf("check (-want +got):\n%s", diff)
			}
		})
	}
	if len(got) != len(tests) {
		t.Errorf("%d checks, want %d", len(got), len(tests))
	}
}

// TestAheadOfPeers: Chaperone must be ahead of every proxy a user could
// pick instead, on each figure with a target, less being better for
// latency, CPU and memory; the relay, the TLS floor and direct are not
// peers, and a peer's missing figure is no comparison.
func TestAheadOfPeers(t *testing.T) {
	const p = "chaperone-proxy"
	withPeers := func(peers ...Proxy) Run {
		r := sample()
		r.Proxies = append(r.Proxies[:2], peers...) // direct, chaperone-proxy
		return r
	}
	relay := Proxy{Name: Relay, Values: map[string]Value{KeepAliveH1C1RPS: Num(9000), CPUKeepAliveH1: Num(10)}}
	floor := Proxy{Name: Floor, Values: map[string]Value{KeepAliveH1C1RPS: Num(8000), CPUKeepAliveH1: Num(20)}}
	goproxy := func(h1c1, cpuH1 float64) Proxy {
		return Proxy{Name: "goproxy", Values: map[string]Value{
			KeepAliveH1C1RPS: Num(h1c1), KeepAliveH1C1P50: Num(0.25), CPUKeepAliveH1: Num(cpuH1),
			KeepAliveH2C64RPS: NA("not measured"),
		}}
	}
	squid := Proxy{Name: "squid", Values: map[string]Value{KeepAliveH1C64RPS: Num(4000), KeepAliveH2C1RPS: NA("no h2")}}
	tests := []struct {
		name string
		run  Run
		want Check
	}{
		{"ahead of all", withPeers(relay, floor, goproxy(4000, 120), squid),
			Check{Got: "by 1.25× at least (goproxy, h1 c=1 p50)", Status: "meets"}},
		{"level with one, behind another", withPeers(goproxy(6000, 50), squid),
			Check{Got: "level or behind: goproxy 1.00×, h1 c=1 req/s; goproxy 0.83×, CPU per h1 request", Status: "misses"}},
		{"no peer", withPeers(relay, floor), Check{Got: "–", Status: "unknown"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Target, tt.want.Proxy = "ahead of every peer on each figure with a target", p
			if diff := cmp.Diff(tt.want, aheadOfPeers(tt.run, p)); diff != "" {
				t.Errorf("check (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTargetsCPUScaled: Chaperone's CPU per request is put in goproxy's
// terms, 95 µs × its CPU over goproxy's per h1 request, round by round
// (the median), h1 and h2 alike; from the table's figures when there are
// no rounds; as measured when there is no goproxy figure.
func TestTargetsCPUScaled(t *testing.T) {
	const h1, h2 = "proxy CPU ≤ 70 µs per keep-alive request at goproxy's 95, h1 c=64", "proxy CPU ≤ 70 µs per keep-alive request at goproxy's 95, h2 c=64"
	tests := []struct {
		name           string
		goproxy        Proxy
		mine           map[string][]float64 // chaperone-proxy's CPU rounds
		wantH1, wantH2 Check
	}{
		{"rounds, one of them slow for one column only",
			Proxy{Values: map[string]Value{CPUKeepAliveH1: Num(80)}, CPURounds: map[string][]float64{CPUKeepAliveH1: {80, 120, 150}}},
			map[string][]float64{CPUKeepAliveH1: {60, 72, 75}, CPUKeepAliveH2: {100, 60, 75}},
			// h1: 0.75 0.60 0.50, median 0.60 → 57.0; h2: 1.25 0.50 0.50 → 47.5
			Check{Got: "57.0 µs at goproxy's 95 (60.0 µs here; 0.60× goproxy's per h1 request, median of rounds 0.75 0.60 0.50)", Status: "meets"},
			Check{Got: "47.5 µs at goproxy's 95 (80.0 µs here; 0.50× goproxy's per h1 request, median of rounds 1.25 0.50 0.50)", Status: "meets"}},
		{"a failed round is left out",
			Proxy{Values: map[string]Value{CPUKeepAliveH1: Num(80)}, CPURounds: map[string][]float64{CPUKeepAliveH1: {80, 0, 100}}},
			map[string][]float64{CPUKeepAliveH1: {72, 50, 0}, CPUKeepAliveH2: {64, 90}},
			Check{Got: "85.5 µs at goproxy's 95 (60.0 µs here; 0.90× goproxy's per h1 request, median of rounds 0.90)", Status: "misses"},
			Check{Got: "76.0 µs at goproxy's 95 (80.0 µs here; 0.80× goproxy's per h1 request, median of rounds 0.80)", Status: "misses"}},
		{"no rounds: the table's figures",
			Proxy{Values: map[string]Value{CPUKeepAliveH1: Num(114)}},
			nil,
			Check{Got: "50.0 µs at goproxy's 95 (60.0 µs here; 0.53× goproxy's per h1 request)", Status: "meets"},
			Check{Got: "66.7 µs at goproxy's 95 (80.0 µs here; 0.70× goproxy's per h1 request)", Status: "meets"}},
		{"goproxy failed",
			Proxy{Values: map[string]Value{CPUKeepAliveH1: NA("proxy did not start")}},
			map[string][]float64{CPUKeepAliveH1: {60}},
			Check{Got: "60.0 µs (no goproxy figure: unscaled)", Status: "meets"},
			Check{Got: "80.0 µs (no goproxy figure: unscaled)", Status: "misses"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sample() // chaperone-proxy: 60 µs per h1 request, 80 per h2 request
			r.Proxies[1].CPURounds = tt.mine
			tt.goproxy.Name = Goproxy
			r.Proxies = append(r.Proxies, tt.goproxy)
			got := map[string]Check{}
			for _, c := range Targets(r) {
				got[c.Target] = c
			}
			for target, want := range map[string]Check{h1: tt.wantH1, h2: tt.wantH2} {
				want.Target, want.Proxy = target, "chaperone-proxy"
				if diff := cmp.Diff(want, got[target]); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestTargetsIdleExtrapolated(t *testing.T) {
	r := sample()
	r.Proxies[1].Name = "chaperone-transparent"
	r.Proxies[1].Values[IdleHeld] = Num(4000)
	r.Proxies[1].Values[IdleRSSPer1000MB] = Num(31)
	for _, c := range Targets(r) {
		if strings.HasPrefix(c.Target, "10,000 idle") {
			want := Check{Target: c.Target, Proxy: "chaperone-transparent", Got: "310 MB for 10,000 (extrapolated from 4000 held)", Status: "misses"}
			if diff := cmp.Diff(want, c); diff != "" {
				t.Errorf("check (-want +got):\n%s", diff)
			}
			return
		}
	}
	t.Fatal("no idle check")
}

func TestWriteTargets(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTargets(&b, Targets(sample())); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2+14 {
		t.Fatalf("%d lines:\n%s", len(lines), b.String())
	}
	if !strings.HasPrefix(lines[1], "|---") || !strings.Contains(lines[2], "| meets ") {
		t.Errorf("not a Markdown table:\n%s", b.String())
	}
}

func TestWriteSVG(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSVG(&b, sample()); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, and one bar per (chart figure, proxy) that has a ratio.
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	bars, root := 0, ""
	var titles []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v\n%s", err, b.String())
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			for _, a := range se.Attr {
				if se.Name.Local == "rect" && a.Name.Local == "class" && a.Value == "bar" {
					bars++
				}
			}
			if se.Name.Local == "title" {
				var s string
				dec.DecodeElement(&s, &se)
				titles = append(titles, s)
			}
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	// chaperone-proxy: 6 chart figures; mitmproxy: h1 c=1 and h1 c=64.
	if bars != 8 {
		t.Errorf("%d bars, want 8; titles %q", bars, titles)
	}
	want := "chaperone-proxy keep-alive h1 c=1 req/s: 0.60×"
	found := false
	for _, s := range titles {
		found = found || s == want
	}
	if !found {
		t.Errorf("no bar titled %q in %q", want, titles)
	}
	if !strings.Contains(b.String(), "n/a") {
		t.Error("a missing ratio is not marked n/a")
	}
}

func TestRatio(t *testing.T) {
	r := sample()
	tests := []struct {
		proxy, key string
		want       float64
		wantOK     bool
	}{
		{"chaperone-proxy", KeepAliveH1C1RPS, 0.6, true},
		{Mitmproxy, KeepAliveH2C64RPS, 0, false}, // n/a
		{Mitmproxy, DownloadMBps, 0, false},      // not measured
		{"squid", KeepAliveH1C1RPS, 0, false},    // not run
	}
	for _, tt := range tests {
		t.Run(tt.proxy+"/"+tt.key, func(t *testing.T) {
			got, ok := r.Ratio(tt.proxy, tt.key)
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("Ratio = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestTargetsHTTP3(t *testing.T) {
	const c1, c64 = "keep-alive req/s ≥ 0.4× direct, h3 c=1", "keep-alive req/s ≥ 0.4× direct, h3 c=64"
	run := func(direct, mine map[string]Value) Run {
		return Run{Proxies: []Proxy{{Name: Direct, Values: direct}, {Name: "chaperone-transparent", Values: mine}}}
	}
	tests := []struct {
		name string
		r    Run
		want map[string]Check
	}{
		{"measured", run(map[string]Value{KeepAliveH3C1RPS: Num(1000), KeepAliveH3C64RPS: Num(10000)},
			map[string]Value{KeepAliveH3C1RPS: Num(500), KeepAliveH3C64RPS: Num(3000)}),
			map[string]Check{c1: {Target: c1, Proxy: "chaperone-transparent", Got: "0.50×", Status: "meets"},
				c64: {Target: c64, Proxy: "chaperone-transparent", Got: "0.30×", Status: "misses"}}},
		{"a column without HTTP/3", run(map[string]Value{KeepAliveH3C1RPS: Num(1000), KeepAliveH3C64RPS: Num(10000)},
			map[string]Value{KeepAliveH3C1RPS: NA("carries no HTTP/3"), KeepAliveH3C64RPS: NA("carries no HTTP/3")}),
			map[string]Check{}},
		{"no HTTP/3 in the run", run(map[string]Value{}, map[string]Value{}), map[string]Check{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]Check{}
			for _, c := range Targets(tt.r) {
				if c.Target == c1 || c.Target == c64 {
					got[c.Target] = c
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("HTTP/3 checks (-want +got):\n%s", diff)
			}
		})
	}
}
