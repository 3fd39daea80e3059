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

	v0038 "github.com/persyst/persyst/jobmap/v0038"
	v0042 "github.com/persyst/persyst/jobmap/v0042"
)

// The slurmrestd data parsers this package speaks, preferred first: v0.0.42 (Slurm 24.11
// to 26.05) and v0.0.38 (22.05, and 23.11 deprecated). Each has its generated client
// (jobmap/v0042, jobmap/v0038) and converter. A server is asked once which it serves.
const (
	APIv0042 = "v0.0.42"
	APIv0038 = "v0.0.38"
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

// RestSource reads jobs from slurmrestd with the client generated from the spec of the
// newest data parser it serves.
type RestSource struct {
	url    string
	hc     *http.Client
	server string
	edit   func(context.Context, *http.Request) error // JWT headers (nil: none)
	c38    *v0038.ClientWithResponses
	c42    *v0042.ClientWithResponses

	mu  sync.Mutex
	api string // the data parser in use ("": not asked yet)
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
	opts38 := []v0038.ClientOption{v0038.WithHTTPClient(hc)}
	opts42 := []v0042.ClientOption{v0042.WithHTTPClient(hc)}
	if s.edit != nil {
		opts38 = append(opts38, v0038.WithRequestEditorFn(s.edit))
		opts42 = append(opts42, v0042.WithRequestEditorFn(s.edit))
	}
	var err error
	if s.c38, err = v0038.NewClientWithResponses(server, opts38...); err != nil {
		return nil, fmt.Errorf("slurmrestd client for %s: %w", cfg.URL, err)
	}
	if s.c42, err = v0042.NewClientWithResponses(server, opts42...); err != nil {
		return nil, fmt.Errorf("slurmrestd client for %s: %w", cfg.URL, err)
	}
	return s, nil
}

// Name says where the jobs come from, and with which data parser once known.
func (s *RestSource) Name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.api == "" {
		return "slurmrestd " + s.url
	}
	return "slurmrestd " + s.url + " (data parser " + s.api + ")"
}

// API returns the data parser the source speaks with the server: the newest of
// APIv0042 and APIv0038 that the server lists in its OpenAPI document (/openapi/v3),
// asked for once.
func (s *RestSource) API(ctx context.Context) (string, error) {
	s.mu.Lock()
	api := s.api
	s.mu.Unlock()
	if api != "" {
		return api, nil
	}
	const endpoint = "GET /openapi/v3"
	req, err := http.NewRequestWithContext(ctx, "GET", s.server+"/openapi/v3", nil)
	if err != nil {
		return "", err
	}
	if s.edit != nil {
		_ = s.edit(ctx, req)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", httpError(s.url, endpoint, resp, body)
	}
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	var offered []string
	for p := range doc.Paths {
		if v, _, ok := strings.Cut(strings.TrimPrefix(p, "/slurm/"), "/"); ok && strings.HasPrefix(p, "/slurm/v") && !slices.Contains(offered, v) {
			offered = append(offered, v)
		}
	}
	for _, v := range []string{APIv0042, APIv0038} {
		if _, ok := doc.Paths["/slurm/"+v+"/job/{job_id}"]; ok {
			s.mu.Lock()
			s.api = v
			s.mu.Unlock()
			return v, nil
		}
	}
	slices.Sort(offered)
	return "", fmt.Errorf("slurmrestd %s serves none of the data parsers persyst speaks (%s, %s), only %v: set SlurmRestd to a slurmrestd of Slurm 22.05 to 26.05, or leave it out to use Slurm's commands",
		s.url, APIv0042, APIv0038, offered)
}

// Jobs returns every job slurmctld knows, in one request.
func (s *RestSource) Jobs(ctx context.Context) ([]*Job, error) {
	api, err := s.API(ctx)
	if err != nil {
		return nil, err
	}
	endpoint := "GET /slurm/" + api + "/jobs"
	fail := func(err error) error { return fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err) }
	if api == APIv0042 {
		rep, err := s.c42.SlurmV0042GetJobsWithResponse(ctx, nil)
		if err != nil {
			return nil, fail(err)
		}
		if err := decode200(rep.HTTPResponse, rep.Body, &rep.JSON200); err != nil {
			return nil, fail(err)
		}
		if rep.JSON200 == nil {
			return nil, httpError(s.url, endpoint, rep.HTTPResponse, rep.Body)
		}
		if err := v0042Errors(rep.JSON200.Errors); err != nil {
			return nil, fail(err)
		}
		return convertV0042(rep.JSON200.Jobs, releaseOf(rep.JSON200.Meta), s.hostnames(ctx))
	}
	rep, err := s.c38.SlurmV0038GetJobsWithResponse(ctx, nil)
	if err != nil {
		return nil, fail(err)
	}
	if err := decode200(rep.HTTPResponse, rep.Body, &rep.JSON200); err != nil {
		return nil, fail(err)
	}
	if rep.JSON200 == nil {
		return nil, httpError(s.url, endpoint, rep.HTTPResponse, rep.Body)
	}
	if err := slurmErrors(rep.JSON200.Errors); err != nil {
		return nil, fail(err)
	}
	return convertAll(rep.JSON200.Jobs, s.hostnames(ctx))
}

// Job returns one job ("123" or "120_3"); ErrNoJob if Slurm does not know it.
func (s *RestSource) Job(ctx context.Context, id string) (*Job, error) {
	if _, _, _, err := parseJobID(id); err != nil {
		return nil, err
	}
	api, err := s.API(ctx)
	if err != nil {
		return nil, err
	}
	endpoint := "GET /slurm/" + api + "/job/" + id
	var jobs []*Job
	var body []byte
	var errs, cerr error
	var resp *http.Response
	if api == APIv0042 {
		rep, err := s.c42.SlurmV0042GetJobWithResponse(ctx, id, nil)
		if err != nil {
			return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
		}
		if err := decode200(rep.HTTPResponse, rep.Body, &rep.JSON200); err != nil {
			return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
		}
		body = rep.Body
		resp = rep.HTTPResponse
		if rep.JSON200 == nil {
			return nil, s.jobError(id, endpoint, resp, body, nil)
		}
		if errs = v0042Errors(rep.JSON200.Errors); errs == nil {
			jobs, cerr = convertV0042(rep.JSON200.Jobs, releaseOf(rep.JSON200.Meta), s.hostnames(ctx))
		}
	} else {
		rep, err := s.c38.SlurmV0038GetJobWithResponse(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
		}
		if err := decode200(rep.HTTPResponse, rep.Body, &rep.JSON200); err != nil {
			return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
		}
		body = rep.Body
		resp = rep.HTTPResponse
		if rep.JSON200 == nil {
			return nil, s.jobError(id, endpoint, resp, body, nil)
		}
		if errs = slurmErrors(rep.JSON200.Errors); errs == nil {
			jobs, cerr = convertAll(rep.JSON200.Jobs, s.hostnames(ctx))
		}
	}
	if errs != nil {
		return nil, s.jobError(id, endpoint, resp, body, errs)
	}
	if cerr != nil {
		return nil, cerr
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

// hostnames maps node names to host names (for %N); on failure node names are used.
// The node list is asked for only when a name is looked up (lazyHosts).
func (s *RestSource) hostnames(ctx context.Context) func(string) string {
	return lazyHosts(func() map[string]string {
		m := map[string]string{}
		nodes, err := s.nodes(ctx)
		if err == nil {
			for _, n := range nodes {
				if n.host != "" {
					m[n.name] = n.host
				}
			}
		}
		return m
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
	api, err := s.API(ctx)
	if err != nil {
		return nil, err
	}
	var out []node
	if api == APIv0042 {
		rep, err := s.c42.SlurmV0042GetNodesWithResponse(ctx, nil)
		if err != nil {
			return nil, err
		}
		if err := decode200(rep.HTTPResponse, rep.Body, &rep.JSON200); err != nil || rep.JSON200 == nil {
			return nil, fmt.Errorf("slurmrestd: nodes: status %d %v", rep.StatusCode(), err)
		}
		for _, n := range rep.JSON200.Nodes {
			out = append(out, node{str(n.Name), str(n.Hostname), str(n.Address)})
		}
		return out, nil
	}
	rep, err := s.c38.SlurmV0038GetNodesWithResponse(ctx, nil)
	if err != nil {
		return nil, err
	}
	if rep.JSON200 == nil || rep.JSON200.Nodes == nil {
		return nil, fmt.Errorf("slurmrestd: nodes: status %d", rep.StatusCode())
	}
	for _, n := range *rep.JSON200.Nodes {
		out = append(out, node{str(n.Name), str(n.Hostname), str(n.Address)})
	}
	return out, nil
}

// decode200 parses a 200 answer whose Content-Type the generated client did not take
// for JSON (it only decodes "application/json"); *dst stays as is otherwise.
func decode200[T any](r *http.Response, body []byte, dst **T) error {
	if *dst != nil || r == nil || r.StatusCode != http.StatusOK {
		return nil
	}
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("HTTP 200 with a body that is not the expected JSON: %w", err)
	}
	*dst = &v
	return nil
}

func convertAll(src *[]v0038.V0038JobResponseProperties, hosts func(string) string) ([]*Job, error) {
	if src == nil {
		return nil, nil
	}
	out := make([]*Job, 0, len(*src))
	var errs []error
	for i := range *src {
		j, err := fromV0038(&(*src)[i], hosts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, j)
	}
	return collected(out, errs)
}

func slurmErrors(errs *[]v0038.V0038Error) error {
	if errs == nil || len(*errs) == 0 {
		return nil
	}
	var parts []string
	for _, e := range *errs {
		msg := str(e.Error)
		if e.ErrorNumber != nil {
			msg = fmt.Sprintf("%s (errno %d)", msg, *e.ErrorNumber)
		}
		parts = append(parts, msg)
	}
	return fmt.Errorf("slurm errors: %s", strings.Join(parts, "; "))
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
