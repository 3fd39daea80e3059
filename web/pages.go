package web

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/persyst/persyst/digest"
)

//go:embed pages.html.tmpl
var pagesTemplate string

var pages = template.Must(template.New("pages").Funcs(template.FuncMap{
	"hours": func(h float64) string {
		if h >= 10 {
			return fmt.Sprintf("%.0f", h)
		}
		return fmt.Sprintf("%.2g", h)
	},
	"pct": func(share float64) float64 { return 100 * share },
	// held is how long from to to, as digests say it.
	"held":   func(from, to time.Time) string { return digest.Duration(to.Sub(from).Seconds()) },
	"notice": digest.NoticeSubject,
	// used is the share used of the hours measured, or a dash where none was.
	"used": func(used, measured float64) string {
		if !(measured > 0) {
			return "–"
		}
		return fmt.Sprintf("%.0f%%", 100*used/measured)
	},
}).Parse(pagesTemplate))

// page renders a page (a template of pages.html.tmpl) whole before writing it, so that a
// failure is an error page, not half a page.
func (s *server) page(w http.ResponseWriter, name string, data any) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, struct {
		Data    any
		Source  string
		Version string
	}{data, s.o.Source, s.o.Version}); err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}
