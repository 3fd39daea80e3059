package htmlreport

import (
	_ "embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"math"
	"time"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
)

//go:embed report.html.tmpl
var reportTemplate string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"chart":    func(c Chart, v View) template.HTML { return chartSVG(c, v.Start, v.End, v.Report.Phases) },
	"whenWhy":  digest.WhenLines,
	"phasesOf": digest.FindingPhases,
	"lanes":    func(v View) template.HTML { return lanesSVG(v.Lanes, v.Start, v.End) },
	"pct":      func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) },
	"width": func(f float64) template.CSS {
		return template.CSS(fmt.Sprintf("width:%.0f%%", 100*math.Min(math.Max(f, 0), 1)))
	},
	"while": func(f properties.Result) float64 {
		if f.TimeShare > 0 {
			return math.Min(f.MeanSeverity/f.TimeShare, 1)
		}
		return f.MeanSeverity
	},
	"word":  digest.SeverityWord,
	"value": digest.FormatValue,
	"median": func(f properties.Result) string {
		if len(f.Deciles) != 11 {
			return "no value"
		}
		s := digest.FormatValue(f.Median(), f.Unit)
		if f.Deciles[1] != f.Deciles[9] {
			s += fmt.Sprintf(" (10-90%%: %s to %s)", digest.FormatValue(f.Deciles[1], f.Unit), digest.FormatValue(f.Deciles[9], f.Unit))
		}
		if f.Threshold != nil {
			s += ", threshold " + digest.FormatValue(*f.Threshold, f.Unit)
		}
		return s
	},
	"duration": digest.Duration,
	"energy":   digest.EnergyLine,
	"when":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"png": func(b []byte) template.URL {
		return template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(b))
	},
	"color":      func(i int) template.CSS { return template.CSS("background:" + lineColors[i%len(lineColors)]) },
	"heatHeight": func(h *Heat) int { return min(max(h.Rows*4, 120), 900) },
	"rowTop": func(h *Heat, r RowLabel) template.CSS {
		return template.CSS(fmt.Sprintf("top:%.2f%%", 100*float64(r.Row)/float64(max(h.Rows, 1))))
	},
	"coverage": func(r digest.Report) []string { return digest.CoverageLines(r) },
}).Parse(reportTemplate))

// Options are the page's.
type Options struct {
	// Version is persyst's, stated at the bottom.
	Version string
}

// Render writes the view as one self-contained HTML page.
func Render(w io.Writer, v View, o Options) error {
	return page.Execute(w, struct {
		View
		Options
	}{v, o})
}
