package jobmap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/persyst/persyst/jobmap/v0038"
)

// APIVersion is the slurmrestd data parser this package speaks (Slurm 22.05). A newer
// parser (v0.0.40+) goes beside jobmap/v0038 with its own generated client and converter.
const APIVersion = "v0.0.38"

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

// RestSource reads jobs from slurmrestd with the client generated from its spec.
type RestSource struct {
	url string
	c   *v0038.ClientWithResponses
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
	opts := []v0038.ClientOption{v0038.WithHTTPClient(hc)}
	if cfg.Token != "" {
		opts = append(opts, v0038.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("X-SLURM-USER-NAME", cfg.User)
			r.Header.Set("X-SLURM-USER-TOKEN", cfg.Token)
			return nil
		}))
	}
	c, err := v0038.NewClientWithResponses(server, opts...)
	if err != nil {
		return nil, fmt.Errorf("slurmrestd client for %s: %w", cfg.URL, err)
	}
	return &RestSource{url: cfg.URL, c: c}, nil
}

// Name says where the jobs come from.
func (s *RestSource) Name() string { return "slurmrestd " + s.url }

// Jobs returns every job slurmctld knows, in one request.
func (s *RestSource) Jobs(ctx context.Context) ([]*Job, error) {
	endpoint := "GET /slurm/" + APIVersion + "/jobs"
	rep, err := s.c.SlurmV0038GetJobsWithResponse(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	if err := decode200(rep.HTTPResponse, rep.Body, &rep.JSON200); err != nil {
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	if rep.JSON200 == nil {
		return nil, httpError(s.url, endpoint, rep.HTTPResponse, rep.Body)
	}
	if err := slurmErrors(rep.JSON200.Errors); err != nil {
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	hosts := s.hostnames(ctx)
	return convertAll(rep.JSON200.Jobs, hosts)
}

// Job returns one job ("123" or "120_3"); ErrNoJob if Slurm does not know it.
func (s *RestSource) Job(ctx context.Context, id string) (*Job, error) {
	if _, _, _, err := parseJobID(id); err != nil {
		return nil, err
	}
	endpoint := "GET /slurm/" + APIVersion + "/job/" + id
	rep, err := s.c.SlurmV0038GetJobWithResponse(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	if err := decode200(rep.HTTPResponse, rep.Body, &rep.JSON200); err != nil {
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	if rep.JSON200 == nil {
		if isInvalidJob(rep.Body) {
			return nil, fmt.Errorf("job %s: %w", id, ErrNoJob)
		}
		return nil, httpError(s.url, endpoint, rep.HTTPResponse, rep.Body)
	}
	if err := slurmErrors(rep.JSON200.Errors); err != nil {
		if isInvalidJob(rep.Body) {
			return nil, fmt.Errorf("job %s: %w", id, ErrNoJob)
		}
		return nil, fmt.Errorf("slurmrestd %s: %s: %w", s.url, endpoint, err)
	}
	jobs, err := convertAll(rep.JSON200.Jobs, s.hostnames(ctx))
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("job %s: %w", id, ErrNoJob)
	}
	return jobs[0], nil
}

// hostnames maps node names to host names (for %N); on failure node names are used.
// The node list is asked for only when a name is looked up (lazyHosts).
func (s *RestSource) hostnames(ctx context.Context) func(string) string {
	return lazyHosts(func() map[string]string {
		rep, err := s.c.SlurmV0038GetNodesWithResponse(ctx, nil)
		m := map[string]string{}
		if err == nil && rep.JSON200 != nil && rep.JSON200.Nodes != nil {
			for _, n := range *rep.JSON200.Nodes {
				if n.Name != nil && n.Hostname != nil && *n.Hostname != "" {
					m[*n.Name] = *n.Hostname
				}
			}
		}
		return m
	})
}

// NodeAddrs maps node names to their addresses (NodeAddr).
func (s *RestSource) NodeAddrs(ctx context.Context) (map[string]string, error) {
	rep, err := s.c.SlurmV0038GetNodesWithResponse(ctx, nil)
	if err != nil {
		return nil, err
	}
	if rep.JSON200 == nil || rep.JSON200.Nodes == nil {
		return nil, fmt.Errorf("slurmrestd: nodes: status %d", rep.StatusCode())
	}
	m := map[string]string{}
	for _, n := range *rep.JSON200.Nodes {
		if n.Name != nil && n.Address != nil && *n.Address != "" {
			m[*n.Name] = *n.Address
		}
	}
	return m, nil
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
