package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// gapSVG draws the cumulative distribution of handoff gaps (release by one
// holder to grant to the next) per library, log-scaled in time.
func gapSVG(order []string, gaps map[string][]time.Duration) []byte {
	const w, h, left, bottom, top, right = 760, 420, 70, 50, 30, 230
	colors := []string{"#444", "#1f77b4", "#2ca02c", "#d62728", "#ff7f0e", "#9467bd"}
	lo, hi := math.Log10(10), math.Log10(1e6) // 10 µs .. 1 s
	x := func(d time.Duration) float64 {
		v := math.Log10(math.Max(float64(d)/float64(time.Microsecond), 10))
		return left + (math.Min(v, hi)-lo)/(hi-lo)*float64(w-left-right)
	}
	y := func(p float64) float64 { return top + (1-p)*float64(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="18" font-size="14">Contended handoff gap (release → next grant), cumulative share</text>`+"\n", left)
	for e := 1; e <= 6; e++ {
		d := time.Duration(math.Pow10(e)) * time.Microsecond
		px := x(d)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%v</text>`+"\n", px, top, px, h-bottom, px, h-bottom+16, d)
	}
	for _, p := range []float64{0, 0.5, 0.9, 1} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.0f%%</text>`+"\n", left, y(p), w-right, y(p), left-6, y(p)+4, p*100)
	}
	for i, name := range order {
		g := append([]time.Duration(nil), gaps[name]...)
		sort.Slice(g, func(a, c int) bool { return g[a] < g[c] })
		var pts []string
		for k, d := range g {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(d), y(float64(k+1)/float64(len(g)))))
		}
		c := colors[i%len(colors)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		ly := top + 20*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s</text>`+"\n", w-right+10, ly, w-right+30, ly, c, w-right+36, ly+4, name)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">gap (log scale)</text></svg>`+"\n", (left+w-right)/2, h-10)
	return []byte(b.String())
}
