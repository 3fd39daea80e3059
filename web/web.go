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
	"sort"
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
	lq := listQuery{User: q.Get("user"), Finding: q.Get("finding"), Since: q.Get("since"), MinNodes: q.Get("min_nodes")}
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
type listQuery struct{ User, Finding, Since, MinNodes string }

// row is a job in the list.
type row struct {
	ID                    uint32
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
	rw := row{ID: l.Job.ID, User: l.Job.User, Nodes: l.Job.Nodes, NNodes: l.Job.NNodes, CPUs: l.Job.CPUs}
	if !l.Job.Start.IsZero() {
		rw.Start = l.Job.Start.UTC().Format("2006-01-02 15:04")
	}
	if r := l.Report; r != nil {
		rw.HasReport = true
		rw.Duration = digest.Duration(r.Seconds)
		if rw.CPUs == 0 {
			rw.CPUs = r.CPUs
		}
		rw.Findings = len(r.Findings) + r.Omitted
		if len(r.Findings) > 0 {
			f := r.Findings[0]
			while := f.MeanSeverity
			if f.TimeShare > 0 {
				while = f.MeanSeverity / f.TimeShare
			}
			rw.Top, rw.TopKey, rw.Severity = f.Name, f.Key, digest.SeverityWord(while)
			rw.Share = fmt.Sprintf("%.0f%%", 100*f.TimeShare)
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
	j, err := s.o.Store.Job(r.Context(), uint32(id))
	if errors.Is(err, store.ErrNotFound) || err == nil && !v.Admin && j.User != v.User {
		http.NotFound(w, r) // another user's job is not found, not forbidden
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	rep, err := s.o.Store.Report(r.Context(), uint32(id))
	if errors.Is(err, store.ErrNotFound) {
		http.Error(w, fmt.Sprintf("job %d has no report yet", id), http.StatusNotFound)
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	view, err := htmlreport.FromStore(r.Context(), s.o.Store, s.o.Source, rep)
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := htmlreport.Render(w, view, htmlreport.Options{Version: s.o.Version}); err != nil {
		s.o.Log.Warn().Err(err).Uint64("job", id).Msg("web: job page not rendered")
	}
}

// cost is what one finding cost over the jobs it was found in.
type cost struct {
	Key, Name string
	Jobs      int
	CoreHours float64
	Users     []named
	TopJobs   []named
	byUser    map[string]float64
	byJob     map[uint32]float64
}

type named struct {
	Name      string
	ID        uint32
	CoreHours float64
}

// site is the week's findings: for each, the jobs it was found in and the core-hours it
// held for (the job's CPUs × its measured hours × the finding's share of the job).
func (s *server) site(w http.ResponseWriter, r *http.Request) {
	v := viewerOf(r)
	f := store.JobFilter{Since: s.o.Now().Add(-7 * 24 * time.Hour)}
	if !v.Admin {
		f.User = v.User
	}
	list, err := s.o.Store.ListJobs(r.Context(), f)
	if err != nil {
		s.fail(w, err)
		return
	}
	costs := map[string]*cost{}
	total, jobs := 0.0, 0
	for _, l := range list {
		rep := l.Report
		if rep == nil {
			continue
		}
		jobs++
		cpus := rep.CPUs
		if cpus == 0 {
			cpus = l.Job.CPUs
		}
		total += float64(cpus) * rep.Seconds / 3600
		for _, fd := range rep.Findings {
			c := costs[fd.Key]
			if c == nil {
				c = &cost{Key: fd.Key, Name: fd.Name, byUser: map[string]float64{}, byJob: map[uint32]float64{}}
				costs[fd.Key] = c
			}
			h := float64(cpus) * rep.Seconds / 3600 * fd.TimeShare
			c.Jobs++
			c.CoreHours += h
			u := l.Job.User
			if u == "" {
				u = "(unknown)"
			}
			c.byUser[u] += h
			c.byJob[l.Job.ID] += h
		}
	}
	out := make([]*cost, 0, len(costs))
	for _, c := range costs {
		for u, h := range c.byUser {
			c.Users = append(c.Users, named{Name: u, CoreHours: h})
		}
		for id, h := range c.byJob {
			c.TopJobs = append(c.TopJobs, named{ID: id, CoreHours: h})
		}
		sort.Slice(c.Users, func(a, b int) bool { return c.Users[a].CoreHours > c.Users[b].CoreHours })
		sort.Slice(c.TopJobs, func(a, b int) bool { return c.TopJobs[a].CoreHours > c.TopJobs[b].CoreHours })
		c.Users, c.TopJobs = c.Users[:min(5, len(c.Users))], c.TopJobs[:min(5, len(c.TopJobs))]
		out = append(out, c)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].CoreHours != out[b].CoreHours {
			return out[a].CoreHours > out[b].CoreHours
		}
		return out[a].Key < out[b].Key
	})
	// The site-wide I/O episodes are counts of jobs, no user's: every viewer sees them.
	eps, err := s.o.Store.Episodes(r.Context(), s.o.Now().Add(-7*24*time.Hour))
	if err != nil {
		s.fail(w, err)
		return
	}
	s.page(w, "site", struct {
		Viewer    viewer
		Costs     []*cost
		Jobs      int
		CoreHours float64
		Truncated bool
		Limit     int
		Episodes  []episodes.Episode
	}{v, out, jobs, total, len(list) == store.MaxListed, store.MaxListed, eps})
}

func (s *server) fail(w http.ResponseWriter, err error) {
	s.o.Log.Warn().Err(err).Msg("web: request failed")
	http.Error(w, "the database could not be read", http.StatusInternalServerError)
}
