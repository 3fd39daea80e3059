package jobmap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/persyst/persyst/slurmver"
)

// ErrNoJob means Slurm does not know the job (any more): a normal result for a job that
// ended and was purged, not a failure.
var ErrNoJob = errors.New("no such job")

// RestConfig says how to reach slurmrestd.
type RestConfig struct {
	// URL is "unix:/path/to/socket" (rest_auth/local: slurmrestd identifies the caller by
	// its uid) or "http://host:port" / "https://host:port" (rest_auth/jwt).
	URL string
	// User and Token are sent as X-SLURM-USER-NAME and X-SLURM-USER-TOKEN (JWT auth).
	User, Token string
	// Timeout bounds one request (default 10 s).
	Timeout time.Duration
}

// RestSource reads jobs from slurmrestd through the adapter of the newest data parser it
// serves (dataParser), chosen once.
type RestSource struct {
	url     string
	hc      *http.Client
	server  string
	edit    func(context.Context, *http.Request) error // JWT headers (nil: none)
	parsers []dataParser                               // preferred first, with their clients

	mu    sync.Mutex
	dp    dataParser // the data parser in use (nil: not asked yet)
	hosts hostCache
}

// NewRestSource returns a source for the slurmrestd at cfg.URL.
func NewRestSource(cfg RestConfig) (*RestSource, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	hc := &http.Client{Timeout: cfg.Timeout}
	server := cfg.URL
	switch {
	case strings.HasPrefix(cfg.URL, "unix:"):
		path := strings.TrimPrefix(cfg.URL, "unix:")
		if path == "" {
			return nil, fmt.Errorf("slurmrestd URL %q: no socket path", cfg.URL)
		}
		var d net.Dialer
		hc.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		}}
		server = "http://slurmrestd"
	case strings.HasPrefix(cfg.URL, "http://"), strings.HasPrefix(cfg.URL, "https://"):
		if cfg.User == "" || cfg.Token == "" {
			return nil, fmt.Errorf("slurmrestd URL %q: TCP needs a user and a JWT token (rest_auth/jwt)", cfg.URL)
		}
	default:
		return nil, fmt.Errorf("slurmrestd URL %q: want unix:/path or http(s)://host:port", cfg.URL)
	}
	s := &RestSource{url: cfg.URL, hc: hc, server: server}
	if cfg.Token != "" {
		s.edit = func(_ context.Context, r *http.Request) error {
			r.Header.Set("X-SLURM-USER-NAME", cfg.User)
			r.Header.Set("X-SLURM-USER-TOKEN", cfg.Token)
			return nil
		}
	}
	var err error
	if s.parsers, err = restParsers(server, hc, s.edit); err != nil {
		return nil, fmt.Errorf("slurmrestd client for %s: %w", cfg.URL, err)
	}
	return s, nil
}

// Name says where the jobs come from, and with which data parser once known.
func (s *RestSource) Name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dp == nil {
		return "slurmrestd " + s.url
	}
	return "slurmrestd " + s.url + " (data parser " + s.dp.version() + ")"
}

// API returns the data parser the source speaks with the server: the newest of
// APIv0042 and APIv0038 that the server lists in its OpenAPI document (/openapi/v3),
// asked for once.
func (s *RestSource) API(ctx context.Context) (string, error) {
	p, err := s.parser(ctx)
	if err != nil {
		return "", err
	}
	return p.version(), nil
}

// parser is the adapter of the data parser the source speaks with the server (API),
// chosen when first asked for.
func (s *RestSource) parser(ctx context.Context) (dataParser, error) {
	s.mu.Lock()
	p := s.dp
	s.mu.Unlock()
	if p != nil {
		return p, nil
	}
	paths, err := s.openAPIPaths(ctx)
	if err != nil {
		return nil, err
	}
	var offered, speaks []string
	for path := range paths {
		if v, _, ok := strings.Cut(strings.TrimPrefix(path, "/slurm/"), "/"); ok && strings.HasPrefix(path, "/slurm/v") && !slices.Contains(offered, v) {
			offered = append(offered, v)
		}
	}
	for _, c := range s.parsers {
		speaks = append(speaks, c.version())
		if _, ok := paths["/slurm/"+c.version()+"/job/{job_id}"]; ok {
			s.mu.Lock()
			s.dp = c
			s.mu.Unlock()
			return c, nil
		}
	}
	slices.Sort(offered)
	return nil, fmt.Errorf("slurmrestd %s serves none of the data parsers persyst speaks (%s), only %v: set SlurmRestd to a slurmrestd of Slurm %s to %s, or leave it out to use Slurm's commands",
		s.url, strings.Join(speaks, ", "), offered, slurmver.OldestTested().Series(), slurmver.NewestTested().Series())
}

// openAPIPaths are the paths the server's OpenAPI document (/openapi/v3) lists.
func (s *RestSource) openAPIPaths(ctx context.Context) (map[string]json.RawMessage, error) {
	const endpoint = "GET /openapi/v3"
	req, err := http.NewRequestWithContext(ctx, "GET", s.server+"/openapi/v3", nil)
	if err != nil {
		return nil, err
	}
	if s.edit != nil {
		_ = s.edit(ctx, req)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, httpError(s.url, endpoint, resp, body)
	}
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	return doc.Paths, nil
}

// Jobs returns every job slurmctld knows, in one request.
func (s *RestSource) Jobs(ctx context.Context) ([]*Job, error) {
	p, err := s.parser(ctx)
	if err != nil {
		return nil, err
	}
	endpoint := "GET /slurm/" + p.version() + "/jobs"
	a, err := p.getJobs(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	if a.doc == nil {
		return nil, httpError(s.url, endpoint, a.resp, a.body)
	}
	if err := a.doc.slurmErrors(); err != nil {
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	return a.doc.jobs(s.hostnames(ctx))
}

// Job returns one job ("123" or "120_3"); ErrNoJob if Slurm does not know it.
func (s *RestSource) Job(ctx context.Context, id string) (*Job, error) {
	if _, _, _, err := parseJobID(id); err != nil {
		return nil, err
	}
	p, err := s.parser(ctx)
	if err != nil {
		return nil, err
	}
	endpoint := "GET /slurm/" + p.version() + "/job/" + id
	a, err := p.getJobs(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	if a.doc == nil {
		return nil, s.jobError(id, endpoint, a.resp, a.body, nil)
	}
	if errs := a.doc.slurmErrors(); errs != nil {
		return nil, s.jobError(id, endpoint, a.resp, a.body, errs)
	}
	jobs, err := a.doc.jobs(s.hostnames(ctx))
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("job %s: %w", id, ErrNoJob)
	}
	return jobs[0], nil
}

// jobError is the error of a job's lookup that gave no job: ErrNoJob when the server
// says it does not know the job, never when it refused the caller (24.11 answers a bad
// token with HTTP 511, "Protocol authentication error" and "Unable to query JobId=N").
func (s *RestSource) jobError(id, endpoint string, r *http.Response, body []byte, slurm error) error {
	refused := r != nil && (r.StatusCode == http.StatusUnauthorized || r.StatusCode == http.StatusForbidden ||
		r.StatusCode == http.StatusNetworkAuthenticationRequired) || strings.Contains(strings.ToLower(string(body)), "authentication")
	switch {
	case isInvalidJob(body) && !refused:
		return fmt.Errorf("job %s: %w", id, ErrNoJob)
	case slurm != nil && r != nil:
		return fmt.Errorf("slurmrestd %s: %s: HTTP %s: %w", s.url, endpoint, r.Status, slurm)
	case slurm != nil:
		return fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, slurm)
	}
	return httpError(s.url, endpoint, r, body)
}

// hostnames maps node names to host names (for %N), kept a while (hostCache); node
// names where the node list cannot be read.
func (s *RestSource) hostnames(ctx context.Context) func(string) string {
	return s.hosts.lookup(func() (map[string]string, error) {
		nodes, err := s.nodes(ctx)
		if err != nil {
			return nil, err
		}
		m := map[string]string{}
		for _, n := range nodes {
			if n.host != "" {
				m[n.name] = n.host
			}
		}
		return m, nil
	})
}

// NodeAddrs maps node names to their addresses (NodeAddr).
func (s *RestSource) NodeAddrs(ctx context.Context) (map[string]string, error) {
	nodes, err := s.nodes(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, n := range nodes {
		if n.addr != "" {
			m[n.name] = n.addr
		}
	}
	return m, nil
}

// node is what the job map takes of a node: its name, host name and address.
type node struct{ name, host, addr string }

// nodes lists the cluster's nodes.
func (s *RestSource) nodes(ctx context.Context) ([]node, error) {
	p, err := s.parser(ctx)
	if err != nil {
		return nil, err
	}
	return p.getNodes(ctx)
}

func httpError(url, endpoint string, r *http.Response, body []byte) error {
	status := "no response"
	if r != nil {
		status = r.Status
	}
	b := strings.TrimSpace(string(body))
	if len(b) > 300 {
		b = b[:300] + "..."
	}
	return fmt.Errorf("slurmrestd %s: %s: HTTP %s: %s", url, endpoint, status, b)
}

// isInvalidJob recognises slurmrestd's answer for a job it does not know.
func isInvalidJob(body []byte) bool {
	b := strings.ToLower(string(body))
	return strings.Contains(b, "invalid job id") || strings.Contains(b, "unable to query jobid")
}
