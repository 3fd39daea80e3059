package sitesim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Slurm is a fake slurmrestd (named so: no Slurm runs thousands of simulated nodes here)
// that serves the simulated site's jobs in the v0.0.42 data parser's form, as Slurm 26.05's
// slurmrestd does: GET /openapi/v3 (the parsers it offers), /slurm/v0.0.42/jobs (every
// job: running, and those that ended in the last 10 minutes) and /slurm/v0.0.42/job/{id}.
// The fields are those persyst's job map reads (jobmap.fromV0042).
type Slurm struct {
	cluster string
	mu      sync.Mutex
	jobs    map[uint32]map[string]any
	ended   map[uint32]time.Time
}

// keepEnded is how long an ended job is still served (the frontend asks for its facts
// when its report arrives).
const keepEnded = 10 * time.Minute

// jobBook is where Live announces its jobs: its own Slurm, or another process's.
type jobBook interface {
	start(j *liveJob, nodes []string, now time.Time)
	end(id uint32, now time.Time)
}

// NewSlurm is a fake slurmrestd of the cluster, without jobs.
func NewSlurm(cluster string) *Slurm {
	return &Slurm{cluster: cluster, jobs: map[uint32]map[string]any{}, ended: map[uint32]time.Time{}}
}

func noVal(t time.Time) map[string]any {
	return map[string]any{"set": !t.IsZero(), "infinite": false, "number": t.Unix()}
}

func (s *Slurm) start(j *liveJob, nodes []string, now time.Time) {
	list := nodes[0]
	if len(nodes) > 1 {
		p := strings.TrimRight(nodes[0], "0123456789")
		list = fmt.Sprintf("%s[%s-%s]", p, nodes[0][len(p):], nodes[len(nodes)-1][len(p):])
	}
	job := map[string]any{
		"job_id": j.id, "name": "sim", "user_name": j.user, "user_id": 1000, "group_id": 1000,
		"partition": "cpu", "account": j.acct, "qos": "normal", "cluster": s.cluster,
		"nodes": list, "batch_host": nodes[0], "job_state": []string{"RUNNING"},
		"submit_time": noVal(now), "start_time": noVal(now), "end_time": noVal(now.Add(24 * time.Hour)),
		"time_limit":                map[string]any{"set": true, "infinite": false, "number": 1440},
		"array_job_id":              map[string]any{"set": true, "infinite": false, "number": 0},
		"array_task_id":             map[string]any{"set": false, "infinite": false, "number": 0},
		"current_working_directory": "/tmp", "standard_output": "/tmp/slurm-" + strconv.Itoa(int(j.id)) + ".out",
	}
	s.mu.Lock()
	s.jobs[j.id] = job
	s.mu.Unlock()
}

func (s *Slurm) end(id uint32, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.jobs[id]; j != nil {
		j["job_state"], j["end_time"] = []string{"COMPLETED"}, noVal(now)
		s.ended[id] = now
	}
	for old, t := range s.ended {
		if now.Sub(t) > keepEnded {
			delete(s.ended, old)
			delete(s.jobs, old)
		}
	}
}

var slurmMeta = map[string]any{"plugin": map[string]any{"data_parser": "data_parser/v0.0.42"},
	"slurm": map[string]any{"version": map[string]any{"major": "26", "minor": "05", "micro": "0"}, "release": "26.05.0", "cluster": ""}}

// ServeHTTP answers the job map's requests.
func (s *Slurm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/openapi/v3":
		_ = json.NewEncoder(w).Encode(map[string]any{"paths": map[string]any{
			"/slurm/v0.0.42/jobs": map[string]any{}, "/slurm/v0.0.42/job/{job_id}": map[string]any{}, "/slurm/v0.0.42/nodes": map[string]any{}}})
	case r.URL.Path == "/slurm/v0.0.42/jobs/" || r.URL.Path == "/slurm/v0.0.42/jobs":
		s.mu.Lock()
		list := make([]map[string]any, 0, len(s.jobs))
		for _, j := range s.jobs {
			list = append(list, j)
		}
		b, err := json.Marshal(map[string]any{"jobs": list, "meta": slurmMeta, "errors": []any{}, "warnings": []any{}})
		s.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		_, _ = w.Write(b)
	case strings.HasPrefix(r.URL.Path, "/slurm/v0.0.42/job/"):
		id, err := strconv.ParseUint(strings.TrimPrefix(r.URL.Path, "/slurm/v0.0.42/job/"), 10, 32)
		s.mu.Lock()
		j := s.jobs[uint32(id)]
		var b []byte
		if err == nil && j != nil {
			b, err = json.Marshal(map[string]any{"jobs": []any{j}, "meta": slurmMeta, "errors": []any{}, "warnings": []any{}})
		}
		s.mu.Unlock()
		if err != nil || j == nil {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"jobs": [], "errors": [{"description": "Invalid job id specified", "error_number": 2017}]}`))
			return
		}
		_, _ = w.Write(b)
	case r.Method == http.MethodPost && r.URL.Path == "/sim/start":
		var in announce
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.start(&liveJob{id: in.ID, user: in.User, acct: in.Account}, in.Nodes, time.Unix(in.Time, 0))
	case r.Method == http.MethodPost && r.URL.Path == "/sim/end":
		var in announce
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.end(in.ID, time.Unix(in.Time, 0))
	case strings.TrimSuffix(r.URL.Path, "/") == "/slurm/v0.0.42/nodes":
		_, _ = w.Write([]byte(`{"nodes": [], "errors": [], "warnings": []}`))
	default:
		http.NotFound(w, r)
	}
}

// announce is a job's start or end, from a Live of another process (POST /sim/start,
// /sim/end: the simulation's own, not Slurm's).
type announce struct {
	ID      uint32   `json:"id"`
	User    string   `json:"user,omitempty"`
	Account string   `json:"account,omitempty"`
	Nodes   []string `json:"nodes,omitempty"`
	Time    int64    `json:"time"`
}

// slurmClient announces a Live's jobs to the Slurm of another process.
type slurmClient struct {
	hc *http.Client
}

func newSlurmClient(socket string) *slurmClient {
	return &slurmClient{hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}}
}

func (c *slurmClient) post(path string, a announce) {
	b, _ := json.Marshal(a)
	resp, err := c.hc.Post("http://sim"+path, "application/json", bytes.NewReader(b))
	if err == nil {
		resp.Body.Close()
	}
}

func (c *slurmClient) start(j *liveJob, nodes []string, now time.Time) {
	c.post("/sim/start", announce{ID: j.id, User: j.user, Account: j.acct, Nodes: nodes, Time: now.Unix()})
}

func (c *slurmClient) end(id uint32, now time.Time) {
	c.post("/sim/end", announce{ID: id, Time: now.Unix()})
}
