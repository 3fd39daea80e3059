package siteview

import (
	"fmt"
	"html"
	"strings"
	"time"

	"github.com/persyst/persyst/collectors/store"
)

// Resource is what a trend chart shows: CPU- or GPU-hours, or energy.
type Resource string

// The resources a trend chart shows.
const (
	CPU    Resource = "cpu"
	GPU    Resource = "gpu"
	Energy Resource = "energy" // kWh of the jobs whose energy was measured (one bar)
)

// Chart draws a resource's hours per week as an SVG bar chart (no script, no external
// resource): each week's hours allocated (light), of them used (dark), and the hours
// not measured hatched out of neither; the axis in hours, a label per quarter.
func Chart(weeks []store.Week, r Resource) string {
	const w, h, left, bottom, top = 720.0, 180.0, 48.0, 20.0, 8.0
	alloc := func(u store.Usage) (all, used float64) {
		switch r {
		case GPU:
			return u.GPUHours, u.GPUUsedHours
		case Energy:
			return u.EnergyKWh, u.EnergyKWh
		}
		return u.CPUHours, u.CPUUsedHours
	}
	peak := 0.0
	for _, wk := range weeks {
		a, _ := alloc(wk.Usage)
		peak = max(peak, a)
	}
	var b strings.Builder
	title := map[Resource]string{CPU: "CPU-hours per week", GPU: "GPU-hours per week", Energy: "kWh per week, of the jobs whose energy was measured"}[r]
	fmt.Fprintf(&b, `<svg class="trend" id="trend-%s" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s">`,
		r, w, h, w, h, html.EscapeString(title))
	fmt.Fprintf(&b, `<title>%s: allocated (light) and used (dark)</title>`, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="11" fill="#444">%s</text>`, left+6, top+10, html.EscapeString(title))
	plotH := h - bottom - top
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#999"/>`, left, top+plotH, w, top+plotH)
	if peak > 0 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-size="10" text-anchor="end">%s</text>`, left-4, top+8, hours(peak))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-size="10" text-anchor="end">0</text>`, left-4, top+plotH)
	}
	n := max(len(weeks), 1)
	bw := (w - left) / float64(n)
	for i, wk := range weeks {
		a, u := alloc(wk.Usage)
		x := left + float64(i)*bw
		if peak > 0 && a > 0 {
			ha, hu := plotH*a/peak, plotH*min(u, a)/peak
			fmt.Fprintf(&b, `<rect class="allocated" data-week="%s" data-hours="%g" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#c9d7ea"/>`,
				day(wk.From), a, x+0.5, top+plotH-ha, max(bw-1, 0.5), ha)
			fmt.Fprintf(&b, `<rect class="used" data-week="%s" data-hours="%g" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#3a6ea5"/>`,
				day(wk.From), u, x+0.5, top+plotH-hu, max(bw-1, 0.5), hu)
		}
		// A label at the week that holds the first day of a quarter.
		end := wk.From.AddDate(0, 0, 6)
		first := time.Date(end.Year(), end.Month(), 1, 0, 0, 0, 0, time.UTC)
		if !first.Before(wk.From) && (end.Month()-1)%3 == 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10">%s</text>`, x, h-6, end.Format("2006-01"))
		}
	}
	b.WriteString(`</svg>`)
	return b.String()
}
