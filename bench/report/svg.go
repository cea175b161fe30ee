package report

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// palette colours the proxies' bars, in column order.
func palette(i int) string {
	colors := []string{"#2b6cb0", "#63b3ed", "#dd6b20", "#38a169", "#805ad5", "#d53f8c"}
	return colors[i%len(colors)]
}

// WriteSVG draws a grouped bar chart: one group per throughput figure, one
// bar per proxy (direct excluded: it is the 1.0 line), the bar's height its
// ratio to direct. A dashed line marks 0.5×, the lowest target.
func WriteSVG(w io.Writer, r Run) error {
	var figs []Figure
	for _, f := range Figures() {
		if f.Chart {
			figs = append(figs, f)
		}
	}
	var proxies []Proxy
	for _, p := range r.Proxies {
		if p.Name != Direct {
			proxies = append(proxies, p)
		}
	}
	top := 1.2
	for _, p := range proxies {
		for _, f := range figs {
			if v, ok := r.Ratio(p.Name, f.Key); ok {
				top = math.Max(top, v*1.1)
			}
		}
	}
	top = math.Ceil(top*5) / 5

	const (
		left, right, topPad, bottom = 60.0, 95.0, 50.0, 90.0
		barW, gap                   = 22.0, 40.0
		plotH                       = 300.0
	)
	groupW := float64(max(len(proxies), 1))*barW + gap
	width := left + right + float64(len(figs))*groupW
	height := topPad + plotH + bottom
	y := func(v float64) float64 { return topPad + plotH - v/top*plotH }

	bw := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="#fff"/>` + "\n")
	title := "Throughput relative to a direct connection (1.0 = direct)"
	if !r.Date.IsZero() {
		title += ", " + r.Date.UTC().Format("2006-01-02")
	}
	p(`<text x="%.0f" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, esc(title))
	// Grid and axis labels every 0.2 (or 0.5 above 3×).
	step := 0.2
	if top > 3 {
		step = 0.5
	}
	for v := 0.0; v <= top+1e-9; v += step {
		p(`<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#e2e8f0"/>`+"\n", left, width-right, y(v), y(v))
		p(`<text x="%.0f" y="%.1f" text-anchor="end">%.1f×</text>`+"\n", left-6, y(v)+4, v)
	}
	p(`<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#000" stroke-width="1.5"/>`+"\n", left, width-right, y(1), y(1))
	p(`<text x="%.0f" y="%.1f">direct</text>`+"\n", width-right+6, y(1)+4)
	p(`<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#c53030" stroke-dasharray="5,4"/>`+"\n", left, width-right, y(0.5), y(0.5))
	p(`<text x="%.0f" y="%.1f" fill="#c53030">target 0.5×</text>`+"\n", width-right+6, y(0.5)+4)
	for gi, f := range figs {
		x0 := left + float64(gi)*groupW + gap/2
		for pi, px := range proxies {
			x := x0 + float64(pi)*barW
			v, ok := r.Ratio(px.Name, f.Key)
			if !ok {
				p(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9" fill="#718096">n/a</text>`+"\n", x+barW/2, y(0)-4)
				continue
			}
			p(`<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.2f×</title></rect>`+"\n",
				x, y(v), barW-2, y(0)-y(v), palette(pi), esc(px.Name), esc(f.Label), v)
			p(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="8">%.2f</text>`+"\n", x+barW/2-1, y(v)-3, v)
		}
		// Two lines: "keep-alive h1" over "c=1".
		label := strings.TrimSuffix(strings.TrimSuffix(f.Label, " req/s"), " MB/s")
		cx := x0 + float64(len(proxies))*barW/2
		first, second := label, ""
		if i := strings.LastIndexByte(label, ' '); i > 0 {
			first, second = label[:i], label[i+1:]
		}
		p(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", cx, y(0)+15, esc(first))
		p(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", cx, y(0)+28, esc(second))
	}
	// Legend.
	for pi, px := range proxies {
		x := left + float64(pi%4)*170
		ly := y(0) + 55 + float64(pi/4)*18
		p(`<rect x="%.0f" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", x, ly-10, palette(pi))
		p(`<text x="%.0f" y="%.1f">%s</text>`+"\n", x+16, ly, esc(px.Name))
	}
	p("</svg>\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("report: svg: %w", err)
	}
	return nil
}

func esc(s string) string { return html.EscapeString(s) }
