// Package web is `persyst web`: a read-only web view over a database of the agent tree
// (the frontend's keeps every job's final report): a job list with each job's top
// finding, filtered by user, finding, time and size; a page per job (the HTML report,
// htmlreport); and a site page: this week's most common findings, the core-hours each
// cost, and the users and jobs behind them.
//
// # Who sees what
//
// The view knows users only from a reverse proxy that authenticated them: with
// UserHeader set, a request must come from the proxy and name its user in that header;
// IsAdmin's users see every job, everyone else only their own (another user's job is "not
// found", not "forbidden": the view does not say which jobs exist). The proxy is known by
// what the kernel or a certificate says, never by an address alone (listen.go): on the
// view's unix socket (the default) the connecting process must be the proxy's user
// (ProxyUIDs) or root; on a TCP address the proxy proves itself with a client certificate
// or a password, and must connect from Proxies. Without UserHeader there are no users:
// the view then shows every job (All), to root alone, on a unix socket only. The view only
// reads the database.
package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/htmlreport"
)

// Options configure the view.
type Options struct {
	Store *store.Store
	// Source names the database in the pages.
	Source string
	// UserHeader is the request header in which the reverse proxy names the user ("":
	// no users; All must be set).
	UserHeader string
	// ProxyUIDs are the users whose processes are the proxy on the view's unix socket
	// (root always may connect).
	ProxyUIDs []uint32
	// Proxies are the networks the proxy connects from on a TCP address (nil: loopback).
	Proxies []netip.Prefix
	// All shows every job, to root on the view's unix socket (no UserHeader).
	All bool
	// IsAdmin says whether a user sees every job.
	IsAdmin func(user string) bool
	Now     func() time.Time
	Log     zerolog.Logger
	Version string
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// viewer is who asks: a user, or everyone (admin).
type viewer struct {
	User  string
	Admin bool
}

// Handler returns the view's handler, or why the options do not make a safe view.
func Handler(o Options) (http.Handler, error) {
	switch {
	case o.Store == nil:
		return nil, errors.New("web: no database")
	case o.UserHeader == "" && !o.All:
		return nil, errors.New("say who may see what: --user-header NAME (behind a reverse proxy that authenticates users and names them in that header) or --all (every job, to root on the view's unix socket)")
	case o.UserHeader != "" && o.All:
		return nil, errors.New("--user-header and --all exclude each other")
	}
	if o.Proxies == nil {
		o.Proxies = loopback
	}
	if o.IsAdmin == nil {
		o.IsAdmin = func(string) bool { return false }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &server{o: o}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.jobs)
	mux.HandleFunc("GET /job/{id}", s.job)
	mux.HandleFunc("GET /site", s.site)
	return s.guard(mux), nil
}

type server struct{ o Options }

type ctxKey struct{}

// userRE is what a user name may be (Slurm's, POSIX-like).
var userRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._@-]{0,63}$`)

// guard finds who asks, and refuses whom it cannot tell.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		v, code, why := s.who(r)
		if code != 0 {
			http.Error(w, why, code)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, v)))
	})
}

// who is who asks, or the status and why they are refused.
func (s *server) who(r *http.Request) (viewer, int, string) {
	p, onSocket := peerOf(r)
	switch {
	case s.o.All && (!onSocket || p.uid != 0):
		return viewer{}, http.StatusForbidden, "forbidden: every job is shown to root on the view's unix socket only"
	case s.o.All:
		return viewer{Admin: true}, 0, ""
	case onSocket && !s.mayProxy(p):
		return viewer{}, http.StatusForbidden, "forbidden: only the site's proxy may connect here"
	case !onSocket:
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil || !contains(s.o.Proxies, ap.Addr().Unmap()) {
			return viewer{}, http.StatusForbidden, "forbidden: not through the site's proxy"
		}
	}
	u := r.Header.Get(s.o.UserHeader)
	if !userRE.MatchString(u) {
		return viewer{}, http.StatusUnauthorized, "unauthorized: no user named by the proxy"
	}
	return viewer{User: u, Admin: s.o.IsAdmin(u)}, 0, ""
}

func contains(nets []netip.Prefix, a netip.Addr) bool {
	for _, p := range nets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func viewerOf(r *http.Request) viewer { v, _ := r.Context().Value(ctxKey{}).(viewer); return v }

// filter reads the job list's filters from the query; a user sees their own jobs only.
func (s *server) filter(r *http.Request, v viewer) (store.JobFilter, listQuery, error) {
	q := r.URL.Query()
	lq := listQuery{User: q.Get("user"), Finding: q.Get("finding"), Since: q.Get("since"), MinNodes: q.Get("min_nodes"), Job: q.Get("job")}
	f := store.JobFilter{User: lq.User, Finding: lq.Finding, Limit: 500}
	if !v.Admin {
		f.User, lq.User = v.User, v.User
	}
	if f.User != "" && !userRE.MatchString(f.User) {
		return f, lq, fmt.Errorf("user %q: not a user name", f.User)
	}
	if f.Finding != "" && !keyRE.MatchString(f.Finding) {
		return f, lq, fmt.Errorf("finding %q: not a property key", f.Finding)
	}
	if lq.Since != "" {
		d, err := parseAge(lq.Since)
		if err != nil {
			return f, lq, err
		}
		f.Since = s.o.Now().Add(-d)
	}
	if lq.Job != "" {
		id, err := strconv.ParseUint(lq.Job, 10, 32)
		if err != nil || id == 0 {
			return f, lq, fmt.Errorf("job %q: want a Slurm job id", lq.Job)
		}
		f.ID = uint32(id)
	}
	if lq.MinNodes != "" {
		n, err := strconv.Atoi(lq.MinNodes)
		if err != nil || n < 0 {
			return f, lq, fmt.Errorf("min_nodes %q: want a number of nodes", lq.MinNodes)
		}
		f.MinNodes = n
	}
	return f, lq, nil
}

var keyRE = regexp.MustCompile(`^[a-z0-9_:]{1,64}$`)

// parseAge reads "12h", "7d" or "30m".
func parseAge(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(strings.TrimSuffix(s, "d")); err == nil && strings.HasSuffix(s, "d") && n > 0 && n <= 3650 {
		return time.Duration(n) * 24 * time.Hour, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("since %q: want an age such as 12h or 7d", s)
}

// listQuery are the filters as given (to fill the form again).
type listQuery struct{ User, Finding, Since, MinNodes, Job string }

// row is a job in the list.
type row struct {
	ID                    uint32
	Key                   store.Key
	Cluster               string
	User, Nodes           string
	NNodes, CPUs          int
	Start                 string
	Duration              string
	Top, TopKey, Severity string
	Share                 string
	Findings              int
	HasReport             bool
}

func toRow(l store.Listed) row {
	rw := row{ID: l.Job.ID, Key: l.Job.Key, Cluster: l.Job.Cluster, User: l.Job.User, Nodes: l.Job.Nodes, NNodes: l.Job.NNodes, CPUs: l.Job.CPUs}
	if !l.Job.Start.IsZero() {
		rw.Start = l.Job.Start.UTC().Format("2006-01-02 15:04")
	}
	if r := l.Summary; r != nil {
		rw.HasReport = true
		rw.Duration = digest.Duration(r.Seconds)
		rw.Findings = r.Findings
		if r.TopKey != "" {
			while := r.TopMeanSeverity
			if r.TopShare > 0 {
				while = r.TopMeanSeverity / r.TopShare
			}
			rw.Top, rw.TopKey, rw.Severity = r.TopName, r.TopKey, digest.SeverityWord(while)
			rw.Share = fmt.Sprintf("%.0f%%", 100*r.TopShare)
		}
	}
	return rw
}

func (s *server) jobs(w http.ResponseWriter, r *http.Request) {
	v := viewerOf(r)
	f, lq, err := s.filter(r, v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	list, err := s.o.Store.ListJobs(r.Context(), f)
	if err != nil {
		s.fail(w, err)
		return
	}
	rows := make([]row, 0, len(list))
	for _, l := range list {
		rows = append(rows, toRow(l))
	}
	s.page(w, "jobs", struct {
		Viewer viewer
		Query  listQuery
		Rows   []row
		Limit  int
	}{v, lq, rows, f.Limit})
}

func (s *server) job(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 32)
	if err != nil || id == 0 {
		http.NotFound(w, r)
		return
	}
	v := viewerOf(r)
	// Another user's job is not found, not forbidden. A job id Slurm gave out again, or
	// one of another cluster, is a job of its own: the list of them when the link names
	// none (?key=, the store's key, as the job list links).
	js, err := s.o.Store.Jobs(r.Context(), uint32(id))
	if err != nil {
		s.fail(w, err)
		return
	}
	var key int64
	if k := r.URL.Query().Get("key"); k != "" {
		if key, err = strconv.ParseInt(k, 10, 64); err != nil {
			http.NotFound(w, r)
			return
		}
	}
	var seen []store.Job
	for _, j := range js {
		if (v.Admin || j.User == v.User) && (key == 0 || j.Key == store.Key(key)) {
			seen = append(seen, j)
		}
	}
	switch {
	case len(seen) == 0:
		http.NotFound(w, r)
		return
	case len(seen) > 1:
		http.Redirect(w, r, "/?job="+strconv.FormatUint(id, 10), http.StatusSeeOther)
		return
	}
	j := seen[0]
	rep, err := s.o.Store.ReportAt(r.Context(), j.Key)
	if errors.Is(err, store.ErrNotFound) {
		http.Error(w, fmt.Sprintf("job %d has no report yet", id), http.StatusNotFound)
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	view, err := htmlreport.FromStore(r.Context(), s.o.Store, s.o.Source, j.Key, rep)
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := htmlreport.Render(w, view, htmlreport.Options{Version: s.o.Version}); err != nil {
		s.o.Log.Warn().Err(err).Uint64("job", id).Msg("web: job page not rendered")
	}
}

// siteDays is how many days the site page sums by default (today and the 6 before it).
const siteDays = 7

// site is the figures of the last days (?days=, default 7), from the store's roll-ups:
// the jobs, the CPU- and GPU-hours they held and used, and each finding's cost with the
// users and jobs behind it. A user sees the figures of their own jobs.
func (s *server) site(w http.ResponseWriter, r *http.Request) {
	v := viewerOf(r)
	days := siteDays
	if d := r.URL.Query().Get("days"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > 3660 {
			http.Error(w, fmt.Sprintf("days %q: want 1 to 3660", d), http.StatusBadRequest)
			return
		}
		days = n
	}
	now := s.o.Now()
	f := store.SiteFilter{From: now.AddDate(0, 0, 1-days), To: now}
	if !v.Admin {
		f.User = v.User
	}
	site, err := s.o.Store.Site(r.Context(), f)
	if err != nil {
		s.fail(w, err)
		return
	}
	// The site-wide I/O episodes are counts of jobs, no user's: every viewer sees them.
	eps, err := s.o.Store.Episodes(r.Context(), site.From)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.page(w, "site", struct {
		Viewer   viewer
		Days     int
		Site     *store.Site
		Last     time.Time
		Episodes []episodes.Episode
	}{v, days, site, site.To.Add(-time.Second), eps})
}

func (s *server) fail(w http.ResponseWriter, err error) {
	s.o.Log.Warn().Err(err).Msg("web: request failed")
	http.Error(w, "the database could not be read", http.StatusInternalServerError)
}
