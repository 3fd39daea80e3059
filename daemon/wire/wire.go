// Package wire is the protocol between the SPANK plugin (and the persyst CLI) and the node
// daemon: one JSON request and one JSON reply per unix-socket connection, each a single
// line of at most MaxMessage bytes.
//
// Every message carries the protocol version V. A daemon answers a request of another
// version with an error reply naming both versions, so a mixed rollout fails loudly in the
// logs instead of misreading fields. Unknown fields are rejected for the same reason.
package wire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/persyst/persyst/sample"
)

// Version is the protocol version spoken by this build.
const Version = 1

// MaxMessage bounds one request line (bytes, without the newline): requests come from
// slurmstepd and are small.
const MaxMessage = 64 << 10

// MaxReply bounds one reply line: a job list with measurements, or a job's samples, can be
// large; replies come from the root daemon.
const MaxReply = 64 << 20

// Kind says what a request is.
type Kind string

// Request kinds. The first four are lifecycle events sent by the SPANK plugin; List is a
// query used by `persyst jobs`.
const (
	JobStart  Kind = "job_start"
	StepStart Kind = "step_start"
	StepEnd   Kind = "step_end"
	JobEnd    Kind = "job_end"
	List      Kind = "list"
	Samples   Kind = "samples"
	Report    Kind = "report"
)

// Option values of --persyst.
const (
	On  = "on"
	Off = "off"
)

// Request is what a client sends.
type Request struct {
	V     int    `json:"v"`
	Kind  Kind   `json:"kind"`
	Event *Event `json:"event,omitempty"`
	// JobID names the job of a Samples query.
	JobID uint32 `json:"job_id,omitempty"`
}

// Event is a job or step lifecycle event as seen by slurmstepd (or the job prolog/epilog)
// on one node. Fields the sender could not learn are left at their zero value.
type Event struct {
	JobID       uint32 `json:"job_id"`
	StepID      string `json:"step_id,omitempty"` // "batch", "extern", "interactive" or a number; empty for job events
	ArrayJobID  uint32 `json:"array_job_id,omitempty"`
	ArrayTaskID uint32 `json:"array_task_id,omitempty"`
	UID         uint32 `json:"uid"`
	GID         uint32 `json:"gid"`
	User        string `json:"user,omitempty"`
	Node        string `json:"node,omitempty"` // informational; the daemon records its own node name
	NodeID      uint32 `json:"node_id,omitempty"`
	NNodes      uint32 `json:"nnodes,omitempty"`
	LocalTasks  uint32 `json:"local_tasks,omitempty"`
	TotalTasks  uint32 `json:"total_tasks,omitempty"`
	NCPUs       uint32 `json:"ncpus,omitempty"`
	JobCores    string `json:"job_cores,omitempty"`  // Slurm list format, e.g. "0-3,8"
	StepCores   string `json:"step_cores,omitempty"` // Slurm list format
	// GPUs are the job's GPUs on the node (job start, from the prolog: SLURM_JOB_GPUS,
	// Slurm's GRES indices, e.g. "0,2"; MIG instances: their UUIDs, "MIG-…,MIG-…").
	GPUs      string `json:"gpus,omitempty"`
	JobMemMB  uint64 `json:"job_mem_mb,omitempty"`
	StepMemMB uint64 `json:"step_mem_mb,omitempty"`
	// Cgroups maps a controller ("freezer", "cpuset", ... or "unified" for cgroup v2) to
	// the absolute path of the job's cgroup directory the sender found.
	Cgroups map[string]string `json:"cgroups,omitempty"`
	Persyst string            `json:"persyst"` // On or Off
	// ExitStatus is the wait(2) status of the step's tasks (the worst one), when known.
	ExitStatus *int      `json:"exit_status,omitempty"`
	Time       time.Time `json:"time"`
}

// Reply is what the daemon answers.
type Reply struct {
	V     int    `json:"v"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Node and Jobs answer a List request.
	Node string          `json:"node,omitempty"`
	Jobs json.RawMessage `json:"jobs,omitempty"`
	// Unannounced answers a List request of root or an admin: the jobs Slurm ran on the
	// node that the plugin never announced (daemon.UnannouncedJobs).
	Unannounced json.RawMessage `json:"unannounced,omitempty"`
	// Cgroup answers a step_start: the cgroup directory (absolute, in the node's mount
	// namespace) that the plugin moves the step's tasks into before they exec, so that
	// perf events count them; empty when Slurm's own job cgroup serves.
	Cgroup string `json:"cgroup,omitempty"`
	// Samples answers a Samples query: the job's samples on this node.
	Samples json.RawMessage `json:"samples,omitempty"`
	// Report answers a Report query: the job's digest report (digest.Report).
	Report json.RawMessage `json:"report,omitempty"`
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	userRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._@-]{0,63}\$?$`)
	stepRE = regexp.MustCompile(`^(batch|extern|interactive|[0-9]{1,10}(\+[0-9]{1,5})?)$`)
	ctrlRE = regexp.MustCompile(`^[a-z0-9_,=]{1,64}$`)
)

// Validate checks a request for everything the daemon relies on. Errors name the field.
func (r *Request) Validate() error {
	if r.V != Version {
		return fmt.Errorf("protocol version %d not supported (this daemon speaks %d)", r.V, Version)
	}
	switch r.Kind {
	case List:
		if r.Event != nil || r.JobID != 0 {
			return errors.New("list request must not carry an event or job id")
		}
		return nil
	case Samples, Report:
		if r.Event != nil {
			return fmt.Errorf("%s request must not carry an event", r.Kind)
		}
		if r.JobID == 0 {
			return fmt.Errorf("%s: field job_id: missing", r.Kind)
		}
		return nil
	case JobStart, JobEnd, StepStart, StepEnd:
		if r.JobID != 0 {
			return fmt.Errorf("%s: field job_id: only for queries (the event carries the job)", r.Kind)
		}
	case "":
		return errors.New("field kind: missing")
	default:
		return fmt.Errorf("field kind: unknown %q", r.Kind)
	}
	if r.Event == nil {
		return fmt.Errorf("%s: field event: missing", r.Kind)
	}
	if err := r.Event.validate(r.Kind); err != nil {
		return fmt.Errorf("%s: %w", r.Kind, err)
	}
	return nil
}

func (e *Event) validate(k Kind) error {
	if e.JobID == 0 || e.JobID >= 0xfffffff0 {
		return fmt.Errorf("field job_id: %d is not a job id", e.JobID)
	}
	isStep := k == StepStart || k == StepEnd
	if isStep && !validStep(e.StepID) {
		return fmt.Errorf("field step_id: %q is not a step id", e.StepID)
	}
	if !isStep && e.StepID != "" {
		return fmt.Errorf("field step_id: must be empty for %s", k)
	}
	if e.Node != "" && !nameRE.MatchString(e.Node) {
		return fmt.Errorf("field node: %q is not a node name", e.Node)
	}
	if e.User != "" && !userRE.MatchString(e.User) {
		return fmt.Errorf("field user: %q is not a user name", e.User)
	}
	if e.Persyst != On && e.Persyst != Off {
		return fmt.Errorf("field persyst: %q must be %q or %q", e.Persyst, On, Off)
	}
	if e.NNodes != 0 && e.NodeID >= e.NNodes {
		return fmt.Errorf("field node_id: %d not below nnodes %d", e.NodeID, e.NNodes)
	}
	for _, c := range []struct{ name, v string }{{"job_cores", e.JobCores}, {"step_cores", e.StepCores}} {
		if c.v == "" {
			continue
		}
		if _, err := sample.ParseCPUList(c.v); err != nil {
			return fmt.Errorf("field %s: %w", c.name, err)
		}
	}
	if len(e.Cgroups) > 32 {
		return fmt.Errorf("field cgroups: %d entries, at most 32", len(e.Cgroups))
	}
	for ctrl, p := range e.Cgroups {
		if !ctrlRE.MatchString(ctrl) {
			return fmt.Errorf("field cgroups: bad controller name %q", ctrl)
		}
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") || strings.ContainsRune(p, 0) {
			return fmt.Errorf("field cgroups[%s]: %q is not a clean absolute path", ctrl, p)
		}
	}
	if e.ExitStatus != nil && k != StepEnd && k != JobEnd {
		return fmt.Errorf("field exit_status: only for step_end and job_end")
	}
	if e.Time.IsZero() {
		return errors.New("field time: missing")
	}
	return nil
}

// validStep accepts the named steps and numeric ids of normal steps (below Slurm's
// SLURM_MAX_NORMAL_STEP_ID), optionally with a heterogeneous component "+N".
func validStep(s string) bool {
	if !stepRE.MatchString(s) {
		return false
	}
	num, _, _ := strings.Cut(s, "+")
	if n, err := strconv.ParseUint(num, 10, 64); err == nil && n >= 0xfffffff0 {
		return false
	}
	return true
}

// ReadLine reads one newline-terminated message line of at most MaxMessage bytes and
// returns it without the newline. A line cut short by EOF or a timeout is an error, never
// a message (bufio.Reader.ReadLine would return the fragment as a line).
func ReadLine(r *bufio.Reader) ([]byte, error) { return readLine(r, MaxMessage) }

func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > limit+1 {
			return nil, fmt.Errorf("message longer than %d bytes", limit)
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(buf[:len(buf)-1], []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(buf) > 0:
			return nil, fmt.Errorf("message cut short after %d bytes: %w", len(buf), io.ErrUnexpectedEOF)
		default:
			return nil, err
		}
	}
}

// DecodeRequest parses and validates one request line.
func DecodeRequest(line []byte) (*Request, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var r Request
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("decode request: %w", err)
	}
	if rest := bytes.TrimSpace(line[dec.InputOffset():]); len(rest) > 0 {
		return nil, errors.New("decode request: trailing data after the JSON object")
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// WriteMessage writes a request as one JSON line.
func WriteMessage(w io.Writer, v any) error { return writeLine(w, v, MaxMessage) }

// WriteReply writes a reply as one JSON line.
func WriteReply(w io.Writer, r *Reply) error { return writeLine(w, r, MaxReply) }

func writeLine(w io.Writer, v any, limit int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > limit {
		return fmt.Errorf("message longer than %d bytes", limit)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Deliver sends one request without waiting for the reply: it returns once the request
// is in the socket's buffer, which takes microseconds even when the daemon is busy or
// stopped (the request waits in the socket until the daemon reads it). Used for end
// events, where any wait delays Slurm's accounting of the step's end. Errors are those of
// connecting and writing only.
func Deliver(ctx context.Context, socket string, req *Request) error {
	req.V = Version
	conn, err := dial(ctx, socket)
	if err != nil {
		return err // net.OpError names the socket path
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if err := WriteMessage(conn, req); err != nil {
		return fmt.Errorf("send to %s: %w", socket, err)
	}
	return nil
}

// dial connects to the daemon's socket. A full listen backlog (EAGAIN: the daemon is
// accepting a burst of connections) is retried a few times within ctx, over about 60 ms.
func dial(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	wait := 2 * time.Millisecond
	for try := 0; ; try++ {
		conn, err := d.DialContext(ctx, "unix", socket)
		if err == nil || !errors.Is(err, syscall.EAGAIN) || try == 5 {
			return conn, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait *= 2
	}
}

// Call sends one request to the daemon at socket and waits for its reply, all within ctx.
// A reply with OK=false is returned as an error carrying the daemon's message.
func Call(ctx context.Context, socket string, req *Request) (*Reply, error) {
	req.V = Version
	conn, err := dial(ctx, socket)
	if err != nil {
		return nil, err // net.OpError names the socket path
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	werr := WriteMessage(conn, req)
	// Even when the write failed, read: a daemon that refuses a peer answers and closes
	// without reading the request, and its answer says why (EPIPE would not).
	line, err := readLine(bufio.NewReader(conn), MaxReply)
	if err != nil {
		if werr != nil {
			return nil, fmt.Errorf("send to %s: %w", socket, werr)
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("reply from %s: %w", socket, err)
	}
	var rep Reply
	if err := json.Unmarshal(line, &rep); err != nil {
		return nil, fmt.Errorf("reply from %s: %w", socket, err)
	}
	if !rep.OK {
		return &rep, fmt.Errorf("daemon at %s: %s", socket, rep.Error)
	}
	return &rep, nil
}
