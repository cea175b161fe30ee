package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Figure keys, shared with the harness that fills them.
const (
	KeepAliveH1C1RPS  = "ka_h1_c1_rps"
	KeepAliveH1C1P50  = "ka_h1_c1_p50_ms"
	KeepAliveH1C1P99  = "ka_h1_c1_p99_ms"
	KeepAliveH1C64RPS = "ka_h1_c64_rps"
	KeepAliveH1C64P50 = "ka_h1_c64_p50_ms"
	KeepAliveH1C64P99 = "ka_h1_c64_p99_ms"
	KeepAliveH2C1RPS  = "ka_h2_c1_rps"
	KeepAliveH2C1P50  = "ka_h2_c1_p50_ms"
	KeepAliveH2C1P99  = "ka_h2_c1_p99_ms"
	KeepAliveH2C64RPS = "ka_h2_c64_rps"
	KeepAliveH2C64P50 = "ka_h2_c64_p50_ms"
	KeepAliveH2C64P99 = "ka_h2_c64_p99_ms"
	KeepAliveH3C1RPS  = "ka_h3_c1_rps"
	KeepAliveH3C1P50  = "ka_h3_c1_p50_ms"
	KeepAliveH3C1P99  = "ka_h3_c1_p99_ms"
	KeepAliveH3C64RPS = "ka_h3_c64_rps"
	KeepAliveH3C64P50 = "ka_h3_c64_p50_ms"
	KeepAliveH3C64P99 = "ka_h3_c64_p99_ms"
	NewConnsPerSec    = "new_conns_per_s"
	DownloadMBps      = "download_mb_per_s"
	CPUKeepAliveH1    = "cpu_us_per_req_ka_h1_c64"
	CPUKeepAliveH2    = "cpu_us_per_req_ka_h2_c64"
	CPUKeepAliveH3    = "cpu_us_per_req_ka_h3_c64"
	CPUNewConn        = "cpu_us_per_new_conn"
	PeakRSSMB         = "peak_rss_mb"
	IdleRSSPer1000MB  = "idle_rss_mb_per_1000"
	IdleHeld          = "idle_held"
)

// Direct is the name of the baseline: no proxy at all.
const Direct = "direct"

// Figure describes one row of the table.
type Figure struct {
	Key    string
	Label  string
	Digits int  // after the decimal point
	Ratio  bool // shown with its ratio to direct
	Chart  bool // a group in the SVG chart (throughput: higher is better)
}

// Figures returns the rows of the table, in order.
func Figures() []Figure {
	var fs []Figure
	for _, ka := range []struct{ rps, p50, p99, label string }{
		{KeepAliveH1C1RPS, KeepAliveH1C1P50, KeepAliveH1C1P99, "keep-alive h1 c=1"},
		{KeepAliveH1C64RPS, KeepAliveH1C64P50, KeepAliveH1C64P99, "keep-alive h1 c=64"},
		{KeepAliveH2C1RPS, KeepAliveH2C1P50, KeepAliveH2C1P99, "keep-alive h2 c=1"},
		{KeepAliveH2C64RPS, KeepAliveH2C64P50, KeepAliveH2C64P99, "keep-alive h2 c=64"},
		{KeepAliveH3C1RPS, KeepAliveH3C1P50, KeepAliveH3C1P99, "keep-alive h3 c=1"},
		{KeepAliveH3C64RPS, KeepAliveH3C64P50, KeepAliveH3C64P99, "keep-alive h3 c=64"},
	} {
		fs = append(fs,
			Figure{Key: ka.rps, Label: ka.label + " req/s", Ratio: true, Chart: true},
			Figure{Key: ka.p50, Label: "  p50 ms", Digits: 3, Ratio: true},
			Figure{Key: ka.p99, Label: "  p99 ms", Digits: 3, Ratio: true},
		)
	}
	return append(fs,
		Figure{Key: NewConnsPerSec, Label: "new TLS connections/s", Ratio: true, Chart: true},
		Figure{Key: DownloadMBps, Label: "100 MB download MB/s", Ratio: true, Chart: true},
		Figure{Key: CPUKeepAliveH1, Label: "proxy CPU µs/req, keep-alive h1 c=64", Digits: 1},
		Figure{Key: CPUKeepAliveH2, Label: "proxy CPU µs/req, keep-alive h2 c=64", Digits: 1},
		Figure{Key: CPUKeepAliveH3, Label: "proxy CPU µs/req, keep-alive h3 c=64", Digits: 1},
		Figure{Key: CPUNewConn, Label: "proxy CPU µs/new connection", Digits: 1},
		Figure{Key: PeakRSSMB, Label: "proxy peak RSS MB (load scenarios)", Digits: 1},
		Figure{Key: IdleRSSPer1000MB, Label: "proxy RSS MB per 1,000 idle conns", Digits: 1},
		Figure{Key: IdleHeld, Label: "  idle connections held"},
	)
}

// Value is a figure's value, or why there is none.
type Value struct {
	V  *float64 `json:"v,omitempty"`
	NA string   `json:"na,omitempty"`
}

// Num is a measured value.
func Num(v float64) Value { return Value{V: &v} }

// NA is a missing value and the reason.
func NA(reason string) Value { return Value{NA: reason} }

// OK reports whether v holds a number, and the number.
func (v Value) OK() (float64, bool) {
	if v.V == nil || math.IsNaN(*v.V) || math.IsInf(*v.V, 0) {
		return 0, false
	}
	return *v.V, true
}

// Proxy is one column: direct or a proxy, its figures and notes.
type Proxy struct {
	Name    string           `json:"name"`
	Version string           `json:"version,omitempty"`
	Setup   string           `json:"setup,omitempty"` // how it ran
	Values  map[string]Value `json:"values"`
	Notes   []string         `json:"notes,omitempty"`
	// Raw holds each scenario's loadgen output as it was printed.
	Raw map[string]json.RawMessage `json:"raw,omitempty"`
	// CPURounds holds each round's proxy CPU per request for the figures
	// CPUKeepAliveH1 and CPUKeepAliveH2, in round order; 0 for a round
	// that failed or was not sampled. The table shows the best round's.
	CPURounds map[string][]float64 `json:"cpu_rounds,omitempty"`
}

// Machine is where the run happened.
type Machine struct {
	CPUs   int    `json:"cpus"`
	Kernel string `json:"kernel,omitempty"`
	OS     string `json:"os,omitempty"`
	Go     string `json:"go,omitempty"`
	// The 1-minute load average before and after: the machine's other work.
	LoadStart string `json:"load_start,omitempty"`
	LoadEnd   string `json:"load_end,omitempty"`
}

// Settings are the run's knobs.
type Settings struct {
	Duration  string `json:"duration"`
	Warmup    string `json:"warmup"`
	NewConnC  int    `json:"new_conn_concurrency"`
	IdleConns int    `json:"idle_conns"`
	Rounds    int    `json:"rounds"`
	FileLimit uint64 `json:"file_limit,omitempty"` // RLIMIT_NOFILE of the proxies
	IdleNote  string `json:"idle_note,omitempty"`
}

// Run is one benchmark run: every column measured on one machine, one after
// another. Proxies[0] is normally direct.
type Run struct {
	Date     time.Time `json:"date"`
	Machine  Machine   `json:"machine"`
	Settings Settings  `json:"settings"`
	Proxies  []Proxy   `json:"proxies"`
	Targets  []Check   `json:"targets,omitempty"`
}

// value returns proxy p's figure key.
func (r Run) value(p, key string) Value {
	for _, x := range r.Proxies {
		if x.Name == p {
			if v, ok := x.Values[key]; ok {
				return v
			}
			return NA("not measured")
		}
	}
	return NA("not run")
}

// cpuRounds returns proxy p's CPU per request in each round for key.
func (r Run) cpuRounds(p, key string) []float64 {
	for _, x := range r.Proxies {
		if x.Name == p {
			return x.CPURounds[key]
		}
	}
	return nil
}

// Ratio returns proxy p's figure over direct's, when both exist.
func (r Run) Ratio(p, key string) (float64, bool) {
	v, ok := r.value(p, key).OK()
	d, dok := r.value(Direct, key).OK()
	if !ok || !dok || d == 0 {
		return 0, false
	}
	return v / d, true
}

// WriteJSON writes r as indented JSON.
func WriteJSON(w io.Writer, r Run) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("report: json: %w", err)
	}
	return nil
}

// ReadJSON reads what WriteJSON wrote.
func ReadJSON(rd io.Reader) (Run, error) {
	var r Run
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return Run{}, fmt.Errorf("report: json: %w", err)
	}
	return r, nil
}

// WriteTable writes one row per figure and one column per proxy, as a
// Markdown table padded to line up in a terminal; a ratio-bearing figure
// shows its ratio to direct in parentheses.
func WriteTable(w io.Writer, r Run) error {
	rows := [][]string{{"figure"}}
	for _, p := range r.Proxies {
		rows[0] = append(rows[0], p.Name)
	}
	for _, f := range Figures() {
		row := []string{f.Label}
		for _, p := range r.Proxies {
			row = append(row, cell(r, p, f))
		}
		rows = append(rows, row)
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(row []string) {
		for i, c := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString("| " + c + pad + " ")
			} else {
				b.WriteString("| " + pad + c + " ")
			}
		}
		b.WriteString("|\n")
	}
	line(rows[0])
	for i, wd := range widths {
		if i == 0 {
			b.WriteString("|" + strings.Repeat("-", wd+2))
		} else {
			b.WriteString("|" + strings.Repeat("-", wd+1) + ":")
		}
	}
	b.WriteString("|\n")
	for _, row := range rows[1:] {
		line(row)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("report: table: %w", err)
	}
	return nil
}

func cell(r Run, p Proxy, f Figure) string {
	v, ok := p.Values[f.Key]
	if !ok {
		return "–"
	}
	n, ok := v.OK()
	if !ok {
		return "n/a"
	}
	s := formatNum(n, f.Digits)
	if f.Ratio && p.Name != Direct {
		if ratio, ok := r.Ratio(p.Name, f.Key); ok {
			s += fmt.Sprintf(" (%.2f×)", ratio)
		}
	}
	return s
}

// formatNum prints n with digits decimals, thousands grouped.
func formatNum(n float64, digits int) string {
	s := fmt.Sprintf("%.*f", digits, n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	intPart, frac, _ := strings.Cut(s, ".")
	var g strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			g.WriteByte(',')
		}
		g.WriteRune(c)
	}
	out := g.String()
	if frac != "" {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}
