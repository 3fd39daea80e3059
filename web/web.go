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
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/htmlreport"
	"github.com/persyst/persyst/siteview"
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
	// Coordinated returns the accounts a user coordinates in Slurm's accounting (and
	// those below them): the user sees their jobs and figures too (nil: none).
	Coordinated func(ctx context.Context, user string) []string
	Now         func() time.Time
	Log         zerolog.Logger
	Version     string
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// viewer is who asks: a user, or everyone (admin); Accounts are those the user
// coordinates.
type viewer struct {
	User     string
	Admin    bool
	Accounts []string
}

// scope is what the viewer may see in the store.
func (v viewer) scope() store.Scope {
	if v.Admin {
		return store.Scope{All: true}
	}
	return store.Scope{User: v.User, Accounts: v.Accounts}
}

// sees says whether the viewer may see a job.
func (v viewer) sees(j store.Job) bool {
	return v.Admin || j.User == v.User || j.Account != "" && slices.Contains(v.Accounts, j.Account)
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
	v := viewer{User: u, Admin: s.o.IsAdmin(u)}
	if !v.Admin && s.o.Coordinated != nil {
		v.Accounts = s.o.Coordinated(r.Context(), u)
	}
	return v, 0, ""
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
	lq := listQuery{User: q.Get("user"), Finding: q.Get("finding"), Since: q.Get("since"), MinNodes: q.Get("min_nodes"), Job: q.Get("job"),
		Period: q.Get("period"), Account: q.Get("account"), Partition: q.Get("partition"), QOS: q.Get("qos"), Cluster: q.Get("cluster")}
	// Another user's or account's jobs, asked for without the right, are none (scope).
	f := store.JobFilter{Scope: v.scope(), User: lq.User, Finding: lq.Finding, Limit: 500, Account: lq.Account,
		Partition: lq.Partition, QOS: lq.QOS, Cluster: lq.Cluster}
	if f.User != "" && !userRE.MatchString(f.User) {
		return f, lq, fmt.Errorf("user %q: not a user name", f.User)
	}
	for _, n := range []struct{ what, v string }{{"account", f.Account}, {"partition", f.Partition}, {"qos", f.QOS}, {"cluster", f.Cluster}} {
		if err := checkName(n.what, n.v); err != nil {
			return f, lq, err
		}
	}
	if lq.Period != "" {
		p, err := siteview.ParsePeriod(lq.Period, s.o.Now())
		if err != nil {
			return f, lq, err
		}
		f.Since, f.Before = p.From, p.To
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
type listQuery struct {
	User, Finding, Since, MinNodes, Job      string
	Period, Account, Partition, QOS, Cluster string
}

// checkName refuses a name no account, partition, QOS or cluster has: control
// characters, or more than 256 bytes. Any other text is looked up as it is (the store's
// queries take it as a value, the pages escape it).
func checkName(what, v string) error {
	if len(v) > 256 || strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return fmt.Errorf("%s %q: not a name", what, v)
	}
	return nil
}

// row is a job in the list.
type row struct {
	ID                    uint32
	Key                   store.Key
	Cluster               string
	Name, Account         string
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
	rw := row{ID: l.Job.ID, Key: l.Job.Key, Cluster: l.Job.Cluster, Name: l.Job.JobName, Account: l.Job.Account, User: l.Job.User, Nodes: l.Job.Nodes, NNodes: l.Job.NNodes, CPUs: l.Job.CPUs}
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
		if v.sees(j) && (key == 0 || j.Key == store.Key(key)) {
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

// sitePeriod is the period the site page sums by default: today and the 6 days before.
const sitePeriod = "7d"

// site is the admin's view (siteview): a period's jobs, the CPU-, GPU- and memory-hours
// they held, used and left unused, by account (user, partition, QOS, cluster), the
// findings that cost the most, and the trend per week over a year; each group a link
// down (account → its users → a user's jobs → a job). A viewer sees what their scope
// allows: an admin every job, a user their own and their coordinated accounts'.
// ?format=csv or json gives one table (?table=groups, total, findings, weeks, jobs or
// running).
func (s *server) site(w http.ResponseWriter, r *http.Request) {
	v := viewerOf(r)
	q, sq, err := s.siteQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	view, err := siteview.Build(r.Context(), s.o.Store, q, v.scope())
	if err != nil {
		s.fail(w, err)
		return
	}
	if f := r.URL.Query().Get("format"); f != "" {
		s.siteTable(w, r, view, v, f)
		return
	}
	// The site-wide I/O episodes are counts of jobs, no user's: every viewer sees them.
	eps, err := s.o.Store.Episodes(r.Context(), view.Site.From, q.Cluster)
	if err != nil {
		s.fail(w, err)
		return
	}
	eps = slices.DeleteFunc(eps, func(e episodes.Episode) bool { return !e.From.Before(view.Site.To) })
	groups := make([]groupRow, len(view.Groups))
	for i, g := range view.Groups {
		groups[i] = groupRow{Group: g, Link: groupLink(sq, q.By, g.Name)}
	}
	s.page(w, "site", sitePage{Viewer: v, Query: sq, View: view, Groups: groups, Links: siteLinks(sq), Episodes: eps, EpisodeClusters: severalClusters(eps),
		CPUChart: template.HTML(siteview.Chart(view.Weeks, siteview.CPU)), GPUChart: trendOf(view, siteview.GPU), EnergyChart: trendOf(view, siteview.Energy)})
}

// trendOf is the GPU or energy trend where the year had GPU-hours or measured energy.
func trendOf(v *siteview.View, r siteview.Resource) template.HTML {
	for _, w := range v.Weeks {
		if (r == siteview.GPU && w.GPUHours > 0) || (r == siteview.Energy && w.EnergyJobs > 0) {
			return template.HTML(siteview.Chart(v.Weeks, r))
		}
	}
	return ""
}

// siteQuery reads the site page's query: period (or days), cluster, account, user,
// partition, qos, by.
func (s *server) siteQuery(r *http.Request) (siteview.Query, siteQuery, error) {
	in := r.URL.Query()
	sq := siteQuery{Period: in.Get("period"), Cluster: in.Get("cluster"), Account: in.Get("account"), User: in.Get("user"),
		Partition: in.Get("partition"), QOS: in.Get("qos"), By: in.Get("by")}
	if d := in.Get("days"); d != "" && sq.Period == "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > 3660 {
			return siteview.Query{}, sq, fmt.Errorf("days %q: want 1 to 3660", d)
		}
		sq.Period = d + "d"
	}
	if sq.Period == "" {
		sq.Period = sitePeriod
	}
	p, err := siteview.ParsePeriod(sq.Period, s.o.Now())
	if err != nil {
		return siteview.Query{}, sq, err
	}
	q := siteview.Query{Period: p, Cluster: sq.Cluster, Account: sq.Account, User: sq.User, Partition: sq.Partition, QOS: sq.QOS, Now: s.o.Now()}
	if sq.User != "" && !userRE.MatchString(sq.User) {
		return q, sq, fmt.Errorf("user %q: not a user name", sq.User)
	}
	for _, n := range []struct{ what, v string }{{"account", q.Account}, {"partition", q.Partition}, {"qos", q.QOS}, {"cluster", q.Cluster}} {
		if err := checkName(n.what, n.v); err != nil {
			return q, sq, err
		}
	}
	if sq.By == "" {
		sq.By = string(defaultBy(q))
	}
	if q.By, err = store.ParseDim(sq.By); err != nil {
		return q, sq, fmt.Errorf("by %w", err)
	}
	return q, sq, nil
}

// defaultBy is the next step down from what the query names: accounts, then an
// account's users.
func defaultBy(q siteview.Query) store.Dim {
	if q.Account != "" {
		return store.ByUser
	}
	return store.ByAccount
}

// siteQuery is the site page's query as given (links and the form keep it).
type siteQuery struct{ Period, Cluster, Account, User, Partition, QOS, By string }

// values is the query as URL values, with changes (a key set to "" is left out).
func (q siteQuery) values(change ...string) url.Values {
	v := url.Values{}
	for k, x := range map[string]string{"period": q.Period, "cluster": q.Cluster, "account": q.Account, "user": q.User,
		"partition": q.Partition, "qos": q.QOS, "by": q.By} {
		if x != "" {
			v.Set(k, x)
		}
	}
	for i := 0; i+1 < len(change); i += 2 {
		if change[i+1] == "" {
			v.Del(change[i])
		} else {
			v.Set(change[i], change[i+1])
		}
	}
	return v
}

// sitePage is what the site page shows.
type sitePage struct {
	Viewer                          viewer
	Query                           siteQuery
	View                            *siteview.View
	Groups                          []groupRow
	Links                           siteLinkSet
	Episodes                        []episodes.Episode
	EpisodeClusters                 bool // the episodes are of several clusters: each names its own
	CPUChart, GPUChart, EnergyChart template.HTML
}

// siteLinkSet are the site page's links: periods, groupings, tables to download, and
// each group's drill-down.
type siteLinkSet struct {
	Periods, Bys, Tables []link
}

type link struct{ Text, URL string }

// groupRow is a group of the site page and where it leads.
type groupRow struct {
	store.Group
	Link string
}

// siteLinks makes the site page's links: a group leads down (an account to its users, a
// user to their jobs, a partition, QOS or cluster to its accounts).
func siteLinks(sq siteQuery) siteLinkSet {
	var l siteLinkSet
	for _, p := range []struct{ text, period string }{{"7 days", "7d"}, {"this month", "month"}, {"last month", "last-month"},
		{"this quarter", "quarter"}, {"last quarter", "last-quarter"}, {"this year", "year"}, {"12 months", "365d"}} {
		l.Periods = append(l.Periods, link{p.text, "/site?" + sq.values("period", p.period).Encode()})
	}
	for _, b := range []store.Dim{store.ByAccount, store.ByUser, store.ByPartition, store.ByQOS, store.ByCluster} {
		l.Bys = append(l.Bys, link{string(b), "/site?" + sq.values("by", string(b)).Encode()})
	}
	for _, t := range siteview.TableNames {
		for _, f := range []string{"csv", "json"} {
			l.Tables = append(l.Tables, link{t + "." + f, "/site?" + sq.values("format", f, "table", t).Encode()})
		}
	}
	return l
}

// groupLink is where a group of the site page leads.
func groupLink(sq siteQuery, by store.Dim, name string) string {
	switch by {
	case store.ByAccount:
		return "/site?" + sq.values("account", name, "by", string(store.ByUser)).Encode()
	case store.ByUser:
		v := url.Values{"user": {name}, "period": {sq.Period}}
		for k, x := range map[string]string{"account": sq.Account, "partition": sq.Partition, "qos": sq.QOS, "cluster": sq.Cluster} {
			if x != "" {
				v.Set(k, x)
			}
		}
		return "/?" + v.Encode()
	}
	return "/site?" + sq.values(string(by), name, "by", string(store.ByAccount)).Encode()
}

// siteTable writes one of the view's tables as CSV or JSON.
func (s *server) siteTable(w http.ResponseWriter, r *http.Request, view *siteview.View, v viewer, format string) {
	t, err := view.Named(r.Context(), s.o.Store, v.scope(), r.URL.Query().Get("table"))
	if errors.Is(err, siteview.ErrNoTable) {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	var b bytes.Buffer
	switch format {
	case "csv":
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		err = siteview.WriteCSV(&b, t)
	case "json":
		w.Header().Set("Content-Type", "application/json")
		err = siteview.WriteJSON(&b, t)
	default:
		http.Error(w, fmt.Sprintf("format %q: want csv or json", format), http.StatusBadRequest)
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="persyst-site-%s.%s"`, strings.ReplaceAll(t.Name, " ", "-"), format))
	_, _ = w.Write(b.Bytes())
}

func (s *server) fail(w http.ResponseWriter, err error) {
	s.o.Log.Warn().Err(err).Msg("web: request failed")
	http.Error(w, "the database could not be read", http.StatusInternalServerError)
}

// severalClusters says whether the episodes are of more than one cluster.
func severalClusters(eps []episodes.Episode) bool {
	return slices.ContainsFunc(eps, func(e episodes.Episode) bool { return e.Cluster != eps[0].Cluster })
}
