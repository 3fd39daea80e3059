package htmlreport

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/phases"
)

// Chart geometry, in SVG units (the SVG scales to the page's width).
const (
	chartW, chartH = 900, 200
	padL, padR     = 80, 10
	padT, padB     = 10, 28
	laneH          = 18
)

// lineColors are the lines' colours (nodes), cycled.
var lineColors = []string{"#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#d62728", "#393b79", "#637939"}

// xScale maps times onto the plot's width.
type xScale struct{ t0, t1 time.Time }

func (x xScale) at(t time.Time) float64 {
	span := x.t1.Sub(x.t0).Seconds()
	if span <= 0 {
		return padL
	}
	f := t.Sub(x.t0).Seconds() / span
	return padL + math.Min(math.Max(f, 0), 1)*(chartW-padL-padR)
}

// ticks are the time axis's labels: elapsed time since the job's start.
func (x xScale) ticks(b *strings.Builder, y float64) {
	span := x.t1.Sub(x.t0).Seconds()
	for i := 0; i <= 4; i++ {
		s := span * float64(i) / 4
		px := padL + float64(i)/4*(chartW-padL-padR)
		anchor := "middle"
		if i == 4 {
			anchor = "end"
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" class="tick">%s</text>`, px, y, anchor, html.EscapeString("+"+digest.Duration(s)))
	}
}

// niceCeil rounds v up to 1, 2, 2.5, 4 or 5 times a power of ten, so that the axis's
// quarters are round numbers (4 ticks of 0.25 each for 1, 0.5 for 2, ...).
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 4, 5, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// niceCeilIn is niceCeil in the unit's own steps: bytes in KiB, MiB, GiB, ...
func niceCeilIn(v float64, unit string) float64 {
	if unit != "bytes" && unit != "B/s" {
		return niceCeil(v)
	}
	scale := 1.0
	for v/scale >= 1024 {
		scale *= 1024
	}
	return niceCeil(v/scale) * scale
}

// chartSVG draws a chart: the job's phases (where it had more than one) as numbered grey
// bands, shaded stretches, bands, lines, the reference, the axes.
func chartSVG(c Chart, t0, t1 time.Time, ph []phases.Phase) template.HTML {
	x, y := xScale{t0, t1}, yScale{chartTop(c)}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s" data-lines="%d">`, chartW, chartH, html.EscapeString(c.Title), len(c.Lines))
	if len(ph) > 1 {
		phasesSVG(&b, ph, x)
	}
	for _, l := range c.Shade {
		for _, s := range l.Spans {
			x0, x1 := x.at(s.From), x.at(s.To)
			fmt.Fprintf(&b, `<rect class="shade" data-finding="%s" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.13"/>`,
				html.EscapeString(l.Key), x0, padT, math.Max(x1-x0, 1), chartH-padT-padB, l.Color)
		}
	}
	y.grid(&b, c.Unit)
	seriesSVG(&b, c, x, y)
	if c.Ref != nil {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" class="ref"><title>%s</title></line>`, padL, chartW-padR, y.at(*c.Ref), y.at(*c.Ref),
			html.EscapeString(c.RefName+": "+digest.FormatValue(*c.Ref, c.Unit)))
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" class="axis"/>`, padL, chartW-padR, chartH-padB, chartH-padB)
	x.ticks(&b, chartH-8)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// chartTop is the top of a chart's value axis: a little above its lines, its bands and
// its reference, rounded up so that its quarters are round numbers (a chart with no
// positive value is scaled as if its top were 1).
func chartTop(c Chart) float64 {
	top := 0.0
	for _, l := range c.Lines {
		for _, p := range l.Points {
			top = math.Max(top, p.V)
		}
	}
	for _, bd := range c.Bands {
		for _, p := range bd.Hi {
			top = math.Max(top, p.V)
		}
	}
	if c.Ref != nil {
		top = math.Max(top, *c.Ref)
	}
	if top <= 0 || math.IsNaN(top) || math.IsInf(top, 0) {
		top = 1
	}
	return niceCeilIn(top*1.02, c.Unit)
}

// yScale maps values from 0 to top onto the plot's height (values outside drawn at its
// edges).
type yScale struct{ top float64 }

func (y yScale) at(v float64) float64 {
	return padT + (1-math.Min(math.Max(v/y.top, 0), 1))*(chartH-padT-padB)
}

// grid draws the value axis: a line and a label at each quarter of the scale.
func (y yScale) grid(b *strings.Builder, unit string) {
	for i := 0; i <= 4; i++ {
		v := y.top * float64(i) / 4
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" class="grid"/>`, padL, chartW-padR, y.at(v), y.at(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" class="tick">%s</text>`, padL-4, y.at(v)+4, html.EscapeString(digest.FormatValue(v, unit)))
	}
}

// phasesSVG draws the job's phases behind a chart: each stretch of each a grey band,
// alternately lighter and darker, numbered where it is wide enough.
func phasesSVG(b *strings.Builder, ph []phases.Phase, x xScale) {
	for _, p := range ph[:min(len(ph), phases.MaxPhases)] {
		for _, s := range p.Stretches[:min(len(p.Stretches), MaxPoints)] {
			x0, x1 := x.at(s.From), x.at(s.To)
			fmt.Fprintf(b, `<rect class="phase" data-phase="%d" x="%.1f" y="%d" width="%.1f" height="%d" fill="#000" fill-opacity="%.2f"><title>phase %d</title></rect>`,
				p.N, x0, padT, math.Max(x1-x0, 1), chartH-padT-padB, 0.03+0.04*float64(p.N%2), p.N)
			if x1-x0 >= 12 {
				fmt.Fprintf(b, `<text x="%.1f" y="%d" class="tick phase-n">%d</text>`, x0+3, padT+11, p.N)
			}
		}
	}
}

// seriesSVG draws a chart's data: its bands (the range between Lo and Hi), then its
// lines over them, a line of one point as a dot.
func seriesSVG(b *strings.Builder, c Chart, x xScale, y yScale) {
	for _, bd := range c.Bands {
		if len(bd.Lo) == 0 {
			continue
		}
		var pts []string
		for _, p := range bd.Hi {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x.at(p.T), y.at(p.V)))
		}
		for i := len(bd.Lo) - 1; i >= 0; i-- {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x.at(bd.Lo[i].T), y.at(bd.Lo[i].V)))
		}
		fmt.Fprintf(b, `<polygon class="band" points="%s" fill="#1f77b4" fill-opacity="0.18"><title>%s</title></polygon>`, strings.Join(pts, " "), html.EscapeString(bd.Name))
	}
	for i, l := range c.Lines {
		pts := make([]string, 0, len(l.Points))
		for _, p := range l.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x.at(p.T), y.at(p.V)))
		}
		if len(pts) == 1 { // one interval: a dot
			fmt.Fprintf(b, `<circle cx="%s" r="3" fill="%s"><title>%s</title></circle>`, strings.Replace(pts[0], ",", `" cy="`, 1), lineColors[i%len(lineColors)], html.EscapeString(l.Name))
			continue
		}
		fmt.Fprintf(b, `<polyline class="line" points="%s" fill="none" stroke="%s" stroke-width="1.5"><title>%s</title></polyline>`,
			strings.Join(pts, " "), lineColors[i%len(lineColors)], html.EscapeString(l.Name))
	}
}

// lanesSVG draws the findings' timeline: a lane per finding, its stretches filled.
func lanesSVG(lanes []Lane, t0, t1 time.Time) template.HTML {
	x := xScale{t0, t1}
	h := len(lanes)*laneH + padB
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="lanes" viewBox="0 0 %d %d" role="img" aria-label="when each finding held">`, chartW, h)
	for i, l := range lanes {
		y := i * laneH
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" class="tick">%d.</text>`, padL-4, y+13, i+1)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" class="lane"/>`, padL, y+2, chartW-padL-padR, laneH-4)
		if len(l.Spans) == 0 {
			// A job-level property (between nodes, memory over the job): judged once.
			fmt.Fprintf(&b, `<text x="%d" y="%d" class="tick">judged over the whole job, not per interval</text>`, padL+6, y+13)
		}
		for _, s := range l.Spans {
			x0, x1 := x.at(s.From), x.at(s.To)
			fmt.Fprintf(&b, `<rect class="held" data-finding="%s" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`,
				html.EscapeString(l.Key), x0, y+2, math.Max(x1-x0, 1), laneH-4, l.Color, html.EscapeString(l.Name))
		}
	}
	x.ticks(&b, float64(h-8))
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
