package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// Check is one target applied to one proxy.
type Check struct {
	Target string `json:"target"`
	Proxy  string `json:"proxy"`
	Got    string `json:"got"`
	// Status is "meets", "misses", or "unknown" (a figure is missing).
	Status string `json:"status"`
}

// Mitmproxy is the name the comparison with mitmproxy looks for.
const Mitmproxy = "mitmproxy"

// Goproxy is the column of a bare goproxy, the proxy the CPU line was
// set against.
const Goproxy = "goproxy"

// The CPU line: 70 µs per keep-alive request when a bare goproxy took 95
// per h1 request on the same kind of machine. A machine's price of a
// request moves (its host, its neighbours, the kernel's mitigations), and
// an absolute line moves with it; so Chaperone's CPU is put in goproxy's
// terms: 95 µs × Chaperone's CPU over goproxy's per h1 request at c=64, in
// the same round (the median over rounds: a round measures a scenario's
// columns within a minute, and the machine's speed moves over minutes).
// Without a goproxy column the line applies to the figure as measured.
const (
	cpuLine       = 70.0
	goproxyCPUSet = 95.0
)

// cpuAtGoproxy95 is proxy p's CPU per request for figure key in goproxy's
// terms (see cpuLine), with how it was found; p's own figure where there is
// no goproxy figure.
func cpuAtGoproxy95(r Run, p, key string) (v float64, got string, ok bool) {
	v, ok = r.value(p, key).OK()
	if !ok {
		return 0, "", false
	}
	var ratios []float64
	mine, theirs := r.cpuRounds(p, key), r.cpuRounds(Goproxy, CPUKeepAliveH1)
	for i := range min(len(mine), len(theirs)) {
		if mine[i] > 0 && theirs[i] > 0 {
			ratios = append(ratios, mine[i]/theirs[i])
		}
	}
	if len(ratios) > 0 {
		parts := make([]string, len(ratios))
		for i, x := range ratios {
			parts[i] = fmt.Sprintf("%.2f", x)
		}
		m := Median(ratios)
		return goproxyCPUSet * m, fmt.Sprintf("%.1f µs at goproxy's 95 (%.1f µs here; %.2f× goproxy's per h1 request, median of rounds %s)",
			goproxyCPUSet*m, v, m, strings.Join(parts, " ")), true
	}
	if g, gok := r.value(Goproxy, CPUKeepAliveH1).OK(); gok && g > 0 {
		return goproxyCPUSet * v / g, fmt.Sprintf("%.1f µs at goproxy's 95 (%.1f µs here; %.2f× goproxy's per h1 request)",
			goproxyCPUSet*v/g, v, v/g), true
	}
	return v, fmt.Sprintf("%.1f µs (no goproxy figure: unscaled)", v), true
}

// Median returns the median of xs (not empty); it sorts xs.
func Median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Relay is the column that only copies bytes: the cost of the hop, not a
// proxy anyone would pick instead of Chaperone.
const Relay = "relay"

// Floor is bench/tlsfloor's column, about the least a TLS-intercepting
// proxy in Go does: a measure of the machine, not a proxy to pick either.
const Floor = "tls-floor"

// isPeer reports whether column name is a proxy a user could pick instead
// of Chaperone: any column but direct, the relay, the floor and
// Chaperone's own.
func isPeer(name string) bool {
	return name != Direct && name != Relay && name != Floor && !strings.HasPrefix(name, "chaperone")
}

// targetFigures are the figures with a target, and whether more is better.
var targetFigures = []struct {
	key, what string
	more      bool
}{
	{KeepAliveH1C1RPS, "h1 c=1 req/s", true}, {KeepAliveH1C64RPS, "h1 c=64 req/s", true},
	{KeepAliveH2C1RPS, "h2 c=1 req/s", true}, {KeepAliveH2C64RPS, "h2 c=64 req/s", true},
	{KeepAliveH1C1P50, "h1 c=1 p50", false}, {KeepAliveH2C1P50, "h2 c=1 p50", false},
	{NewConnsPerSec, "new connections/s", true}, {DownloadMBps, "download MB/s", true},
	{CPUKeepAliveH1, "CPU per h1 request", false}, {CPUKeepAliveH2, "CPU per h2 request", false},
	{IdleRSSPer1000MB, "RSS per idle connection", false},
}

// aheadOfPeers checks proxy p against every peer in r on each figure with
// a target: it must be ahead of all of them. Got is the narrowest margin
// (p's figure over the peer's, or the peer's over p's where less is
// better), or the figures on which a peer is level or ahead.
func aheadOfPeers(r Run, p string) Check {
	c := Check{Target: "ahead of every peer on each figure with a target", Proxy: p, Got: "–", Status: "unknown"}
	narrowest, where := 0.0, ""
	var behind []string
	for _, f := range targetFigures {
		v, ok := r.value(p, f.key).OK()
		if !ok || v <= 0 {
			continue
		}
		for _, q := range r.Proxies {
			w, ok := q.Values[f.key].OK()
			if !isPeer(q.Name) || !ok || w <= 0 {
				continue
			}
			m := v / w
			if !f.more {
				m = w / v
			}
			if m <= 1 {
				behind = append(behind, fmt.Sprintf("%s %.2f×, %s", q.Name, m, f.what))
			}
			if where == "" || m < narrowest {
				narrowest, where = m, q.Name+", "+f.what
			}
		}
	}
	switch {
	case len(behind) > 0:
		c.Got, c.Status = "level or behind: "+strings.Join(behind, "; "), "misses"
	case where != "":
		c.Got, c.Status = fmt.Sprintf("by %.2f× at least (%s)", narrowest, where), "meets"
	}
	return c
}

// Targets checks every proxy whose name starts with "chaperone" against
// Chaperone's performance targets.
func Targets(r Run) []Check {
	var out []Check
	for _, p := range r.Proxies {
		if !strings.HasPrefix(p.Name, "chaperone") {
			continue
		}
		add := func(target, got string, pass, known bool) {
			status := "unknown"
			if !known {
				got = "–"
			}
			switch {
			case known && pass:
				status = "meets"
			case known:
				status = "misses"
			}
			out = append(out, Check{Target: target, Proxy: p.Name, Got: got, Status: status})
		}
		ratio := func(target, key string, min float64) {
			v, ok := r.Ratio(p.Name, key)
			add(target, fmt.Sprintf("%.2f×", v), v >= min, ok)
		}
		for _, k := range []struct{ key, what string }{
			{KeepAliveH1C1RPS, "h1 c=1"}, {KeepAliveH1C64RPS, "h1 c=64"},
			{KeepAliveH2C1RPS, "h2 c=1"}, {KeepAliveH2C64RPS, "h2 c=64"},
		} {
			ratio("keep-alive req/s ≥ 0.5× direct, "+k.what, k.key, 0.5)
		}
		if _, ok := r.value(Direct, KeepAliveH3C64RPS).OK(); ok {
			// HTTP/3 is carried by the transparent mode only: a target
			// where there is an HTTP/3 figure to hold it to.
			for _, k := range []struct{ key, what string }{{KeepAliveH3C1RPS, "h3 c=1"}, {KeepAliveH3C64RPS, "h3 c=64"}} {
				if _, mine := r.value(p.Name, k.key).OK(); mine {
					ratio("keep-alive req/s ≥ 0.4× direct, "+k.what, k.key, 0.4)
				}
			}
		}
		for _, k := range []struct{ key, what string }{{KeepAliveH1C64RPS, "h1"}, {KeepAliveH2C64RPS, "h2"}} {
			v, vok := r.value(p.Name, k.key).OK()
			m, mok := r.value(Mitmproxy, k.key).OK()
			got := "no mitmproxy figure"
			if vok && mok && m > 0 {
				got = fmt.Sprintf("%.1f×", v/m)
			}
			add("keep-alive req/s ≥ 10× mitmproxy, "+k.what+" c=64", got, vok && mok && m > 0 && v >= 10*m, vok && mok && m > 0)
		}
		for _, k := range []struct{ key, what string }{{KeepAliveH1C1P50, "h1"}, {KeepAliveH2C1P50, "h2"}} {
			v, vok := r.value(p.Name, k.key).OK()
			d, dok := r.value(Direct, k.key).OK()
			add("added p50 latency ≤ 0.25 ms, c=1 "+k.what, fmt.Sprintf("%+.3f ms", v-d), v-d <= 0.25, vok && dok)
		}
		ratio("new connections/s ≥ 0.5× direct", NewConnsPerSec, 0.5)
		ratio("100 MB download ≥ 0.45× direct", DownloadMBps, 0.45)
		for _, k := range []struct{ key, what string }{{CPUKeepAliveH1, "h1"}, {CPUKeepAliveH2, "h2"}} {
			v, got, ok := cpuAtGoproxy95(r, p.Name, k.key)
			add("proxy CPU ≤ 70 µs per keep-alive request at goproxy's 95, "+k.what+" c=64", got, v <= cpuLine, ok)
		}
		per, pok := r.value(p.Name, IdleRSSPer1000MB).OK()
		held, hok := r.value(p.Name, IdleHeld).OK()
		got := fmt.Sprintf("%.0f MB for 10,000", per*10)
		if hok && held < 10000 {
			got += fmt.Sprintf(" (extrapolated from %.0f held)", held)
		}
		add("10,000 idle connections < 300 MB RSS", got, per*10 < 300, pok && hok && held > 0)
		out = append(out, aheadOfPeers(r, p.Name))
	}
	return out
}

// WriteTargets writes the checks as a Markdown table.
func WriteTargets(w io.Writer, checks []Check) error {
	rows := [][]string{{"target", "proxy", "got", "status"}}
	for _, c := range checks {
		rows = append(rows, []string{c.Target, c.Proxy, c.Got, c.Status})
	}
	widths := make([]int, 4)
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for n, row := range rows {
		for i, c := range row {
			b.WriteString("| " + c + strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)) + " ")
		}
		b.WriteString("|\n")
		if n == 0 {
			for _, wd := range widths {
				b.WriteString("|" + strings.Repeat("-", wd+2))
			}
			b.WriteString("|\n")
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("report: targets: %w", err)
	}
	return nil
}
