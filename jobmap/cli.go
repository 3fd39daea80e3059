package jobmap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	v0038 "github.com/persyst/persyst/jobmap/v0038"
	"github.com/persyst/persyst/sample"
	"github.com/persyst/persyst/slurmver"
	"github.com/rs/zerolog"
)

// Runner runs a command and returns its standard output; tests inject recorded output.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// ExecRunner runs real commands.
func ExecRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// CLISource reads jobs with Slurm's commands, by the release they are of (`scontrol
// --version`, asked once): from 24.11 `scontrol --json=v0.0.42 show job [ID]` (the data
// parser persyst speaks, asked for by name: the default one changes with each release
// and with slurm.conf's DataParserParameters); on 22.05 `squeue --json` (the v0.0.38
// schema); else, or when the JSON cannot be read, `scontrol show job -o -d [ID]` (any
// Slurm). What a command cannot do is learned, and logged, once: a lookup runs one
// command, or two when the first cannot be read.
type CLISource struct {
	run     Runner
	timeout time.Duration
	log     zerolog.Logger
	mu      sync.Mutex
	noJSON  map[string]bool   // commands found without JSON output
	rel     *slurmver.Release // the commands' Slurm release (nil: not asked yet)
}

// NewCLISource returns a CLI source; run nil means ExecRunner.
func NewCLISource(run Runner, timeout time.Duration, log zerolog.Logger) *CLISource {
	if run == nil {
		run = ExecRunner
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return &CLISource{run: run, timeout: timeout, log: log, noJSON: map[string]bool{}}
}

// Name says where the jobs come from.
func (s *CLISource) Name() string { return "scontrol/squeue" }

// release is the Slurm release of the commands (zero: not known), asked once.
func (s *CLISource) release(ctx context.Context) slurmver.Release {
	s.mu.Lock()
	if s.rel != nil {
		defer s.mu.Unlock()
		return *s.rel
	}
	s.mu.Unlock()
	var rel slurmver.Release
	out, err := s.run(ctx, "scontrol", "--version")
	if err == nil {
		rel, err = slurmver.Parse(string(out)) // "slurm 22.05.8", "slurm-wlm 24.11.5"
	}
	if ctx.Err() != nil {
		return rel // asked again next time
	}
	if err != nil {
		s.log.Warn().Err(err).Msg("jobmap: Slurm's release not known: its commands are read as Slurm 22.05's")
	}
	s.mu.Lock()
	s.rel = &rel
	s.mu.Unlock()
	s.log.Info().Str("source", s.Name()).Str("slurm", rel.String()).Str("format", s.format(rel)).
		Msg("jobmap: Slurm's commands")
	return rel
}

// format names what the commands are read as, for Slurm release rel.
func (s *CLISource) format(rel slurmver.Release) string {
	switch {
	case rel.AtLeast(24, 11) && !s.skip(v0042Key):
		return "scontrol --json=" + APIv0042
	case !rel.Known() || !rel.AtLeast(23, 2):
		return "squeue --json (" + APIv0038 + "), else scontrol show job -o -d"
	}
	return "scontrol show job -o -d"
}

// v0042Key is the JSON form of Slurm 24.11 and later in noJSON.
const v0042Key = "scontrol-v0.0.42"

// jobsV0042 runs `scontrol --json=v0.0.42 show job [id]`; ok is false when the output
// cannot be read (then it says so once, and the text form is used from then on).
func (s *CLISource) jobsV0042(ctx context.Context, hosts func(string) string, id ...string) ([]*Job, bool, error) {
	args := append([]string{"--json=" + APIv0042, "show", "job"}, id...)
	out, err := s.run(ctx, "scontrol", args...)
	if err != nil && len(id) == 1 && strings.Contains(strings.ToLower(err.Error()), "invalid job id") {
		return nil, true, fmt.Errorf("job %s: %w", id[0], ErrNoJob)
	}
	if err == nil {
		jobs, perr := parseV0042JSON(out, hosts)
		if perr == nil {
			return jobs, true, nil
		}
		err = perr
	}
	if ctx.Err() != nil {
		return nil, true, err
	}
	s.mu.Lock()
	first := !s.noJSON[v0042Key]
	s.noJSON[v0042Key] = true
	s.mu.Unlock()
	if first {
		s.log.Warn().Err(err).Msg("jobmap: scontrol --json=" + APIv0042 + " cannot be read; using scontrol show job -o -d from now on")
	}
	return nil, false, nil
}

var jsonForms = []struct {
	key, name string
	args      []string
}{
	{"scontrol", "scontrol", []string{"--json", "show", "job"}},
	{"squeue", "squeue", []string{"--json"}},
}

// Jobs returns every job slurmctld knows.
func (s *CLISource) Jobs(ctx context.Context) ([]*Job, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	hosts := s.hostnames(ctx)
	rel := s.release(ctx)
	if rel.AtLeast(24, 11) && !s.skip(v0042Key) {
		if jobs, ok, err := s.jobsV0042(ctx, hosts); ok {
			return jobs, err
		}
	}
	var errs []error
	for _, f := range jsonForms {
		if s.skip(f.key) || (rel.Known() && rel.AtLeast(23, 2)) {
			continue // their JSON is not v0.0.38's from 23.02 on
		}
		out, err := s.run(ctx, f.name, f.args...)
		if err == nil {
			jobs, perr := parseV0038JSON(out, hosts)
			if perr == nil {
				return jobs, nil
			}
			err = fmt.Errorf("%s %s: %w", f.name, strings.Join(f.args, " "), perr)
		}
		if ctx.Err() != nil {
			return nil, err
		}
		s.markNoJSON(f.key, err)
		errs = append(errs, err)
	}
	out, err := s.run(ctx, "scontrol", "show", "job", "-o", "-d")
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	return parseScontrol(out, s.release(ctx), hosts)
}

// Job returns one job; ErrNoJob if Slurm does not know it. From Slurm 23.02 on it asks
// for the one job, not for all of them.
func (s *CLISource) Job(ctx context.Context, id string) (*Job, error) {
	job, task, isTask, err := parseJobID(id)
	if err != nil {
		return nil, err
	}
	if rel := s.release(ctx); rel.Known() && rel.AtLeast(23, 2) {
		return s.oneJob(ctx, id)
	}
	jobs, err := s.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		if (!isTask && j.JobID == job) || (isTask && j.IsArray && j.ArrayJobID == job && j.ArrayTaskID == task) {
			return j, nil
		}
	}
	return nil, fmt.Errorf("job %s: %w", id, ErrNoJob)
}

// oneJob asks Slurm (23.02 and later) for job id alone.
func (s *CLISource) oneJob(ctx context.Context, id string) (*Job, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	hosts := s.hostnames(ctx)
	var jobs []*Job
	var err error
	ok := false
	if s.release(ctx).AtLeast(24, 11) && !s.skip(v0042Key) {
		jobs, ok, err = s.jobsV0042(ctx, hosts, id)
	}
	if !ok {
		var out []byte
		if out, err = s.run(ctx, "scontrol", "show", "job", "-o", "-d", id); err != nil {
			if strings.Contains(strings.ToLower(err.Error()), "invalid job id") {
				return nil, fmt.Errorf("job %s: %w", id, ErrNoJob)
			}
			return nil, err
		}
		jobs, err = parseScontrol(out, s.release(ctx), hosts)
	}
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("job %s: %w", id, ErrNoJob)
	}
	return jobs[0], nil
}

func (s *CLISource) skip(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.noJSON[key]
}

// markNoJSON remembers a command that has no JSON output (an option error), so later
// calls do not try it again; other failures are tried again next time.
func (s *CLISource) markNoJSON(key string, err error) {
	m := err.Error()
	if strings.Contains(m, "unrecognized option") || strings.Contains(m, "invalid option") || strings.Contains(m, "not a valid") {
		s.mu.Lock()
		s.noJSON[key] = true
		s.mu.Unlock()
	}
}

// hostnames maps node names to host names with `sinfo -N -h -o "%N %n"`; node names on failure.
// sinfo runs only when a name is looked up (lazyHosts).
func (s *CLISource) hostnames(ctx context.Context) func(string) string {
	return lazyHosts(func() map[string]string {
		m := map[string]string{}
		if out, err := s.run(ctx, "sinfo", "-N", "-h", "-o", "%N %n"); err == nil {
			for _, line := range strings.Split(string(out), "\n") {
				if f := strings.Fields(line); len(f) == 2 {
					m[f[0]] = f[1]
				}
			}
		}
		return m
	})
}

// NodeAddrs maps node names to their addresses (NodeAddr) with `sinfo -N -h -o "%N %o"`.
func (s *CLISource) NodeAddrs(ctx context.Context) (map[string]string, error) {
	out, err := s.run(ctx, "sinfo", "-N", "-h", "-o", "%N %o")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			m[f[0]] = f[1]
		}
	}
	return m, nil
}

// parseV0038JSON parses the v0.0.38 jobs document of squeue/scontrol --json.
func parseV0038JSON(b []byte, hosts func(string) string) ([]*Job, error) {
	var doc v0038.V0038JobsResponse
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("parse jobs JSON: %w", err)
	}
	if err := slurmErrors(doc.Errors); err != nil {
		return nil, err
	}
	if doc.Jobs == nil {
		return nil, errors.New("parse jobs JSON: no \"jobs\" list")
	}
	return convertAll(doc.Jobs, hosts)
}

// scontrolKey finds the start of each Key= in `scontrol show job -o` output. Values may
// contain spaces (job names, paths), so a value runs until the next " Key=".
var scontrolKey = regexp.MustCompile(`(?:^| )([A-Za-z][A-Za-z_:/]*)=`)

// parseScontrol parses `scontrol show job -o -d` output of Slurm release rel (zero: not
// known, read as 22.05's): one job per line.
func parseScontrol(b []byte, rel slurmver.Release, hosts func(string) string) ([]*Job, error) {
	var out []*Job
	var errs []error
	for n, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "No jobs in the system") {
			continue
		}
		j, err := parseScontrolLine(line, rel, hosts)
		if err != nil {
			errs = append(errs, fmt.Errorf("scontrol output line %d: %w", n+1, err))
			continue
		}
		out = append(out, j)
	}
	return collected(out, errs)
}

type kv struct{ k, v string }

func splitScontrol(line string) []kv {
	idx := scontrolKey.FindAllStringSubmatchIndex(line, -1)
	out := make([]kv, 0, len(idx))
	for i, m := range idx {
		end := len(line)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		out = append(out, kv{line[m[2]:m[3]], line[m[1]:end]})
	}
	return out
}

func parseScontrolLine(line string, rel slurmver.Release, hosts func(string) string) (*Job, error) {
	j := &Job{}
	pendingTasks := false // a pending array record of several tasks ("1-100")
	var cur *NodeAlloc    // the current "Nodes=... CPU_IDs=... Mem=..." detail group
	var detail []NodeAlloc
	var detailNodes []string
	for _, p := range splitScontrol(line) {
		switch p.k {
		case "JobId":
			n, err := strconv.ParseUint(p.v, 10, 32)
			if err != nil || n == 0 {
				return nil, fmt.Errorf("JobId=%q", p.v)
			}
			j.JobID = uint32(n)
		case "ArrayJobId":
			n, _ := strconv.ParseUint(p.v, 10, 32)
			j.ArrayJobID = uint32(n)
		case "ArrayTaskId":
			if n, err := strconv.ParseUint(p.v, 10, 32); err == nil {
				j.ArrayTaskID, j.IsArray = uint32(n), true
			} else if p.v != "" && p.v != "N/A" {
				j.IsArray, pendingTasks = true, true
			}
		case "JobName":
			j.Name = p.v
		case "AdminComment":
			j.AdminComment = strings.TrimSpace(p.v)
		case "UserId":
			j.User, j.UID = nameID(p.v)
		case "GroupId":
			_, j.GID = nameID(p.v)
		case "JobState":
			j.State = p.v
			j.setRequeue(p.v)
		case "Partition":
			j.Partition = p.v
		case "NodeList":
			if p.v != "(null)" {
				j.NodeList = p.v
			}
		case "BatchHost":
			j.BatchHost = p.v
		case "TimeLimit":
			j.TimeLimit = parseSlurmDuration(p.v)
		case "SubmitTime":
			j.Submit = parseSlurmTime(p.v)
		case "StartTime":
			j.Start = parseSlurmTime(p.v)
		case "EndTime":
			j.End = parseSlurmTime(p.v)
		case "Restarts":
			n, _ := strconv.Atoi(strings.TrimSpace(p.v))
			j.Restarts = max(n, 0)
		case "PreemptTime":
			j.Preempted = parseSlurmTime(p.v)
		case "MinMemoryNode":
			j.MemPerNodeMB = parseMem(p.v)
		case "MinMemoryCPU":
			j.MemPerCPUMB = parseMem(p.v)
		case "WorkDir":
			j.WorkDir = p.v
		case "StdOut": // 24.11 ends the line with a space
			j.StdoutPattern = strings.TrimRight(p.v, " ")
		case "StdErr":
			j.StderrPattern = strings.TrimRight(p.v, " ")
		case "Nodes": // -d detail: a group of nodes with the same allocation
			detail = append(detail, NodeAlloc{})
			cur = &detail[len(detail)-1]
			detailNodes = append(detailNodes, p.v)
		case "CPU_IDs":
			if cur != nil && p.v != "" {
				if ids, err := sample.ParseCPUList(p.v); err == nil {
					cur.CPUIDs, cur.Cores = ids, len(ids)
				}
			}
		case "Mem":
			if cur != nil {
				cur.MemoryMB, _ = strconv.Atoi(p.v)
			}
		}
	}
	if j.JobID == 0 {
		return nil, errors.New("no JobId")
	}
	if !j.IsArray {
		j.ArrayJobID = 0
	}
	if j.NodeList != "" {
		nodes, err := ExpandHostlist(j.NodeList)
		if err != nil {
			return nil, fmt.Errorf("job %d: NodeList: %w", j.JobID, err)
		}
		j.Nodes = nodes
		byNode := map[string]NodeAlloc{}
		for i, expr := range detailNodes {
			names, err := ExpandHostlist(expr)
			if err != nil {
				continue
			}
			for _, n := range names {
				a := detail[i]
				a.Node = n
				byNode[n] = a
			}
		}
		for _, n := range nodes {
			if a, ok := byNode[n]; ok {
				j.Alloc = append(j.Alloc, a)
			}
		}
	}
	if pendingTasks {
		return j, nil // Stdout/Stderr unknown until the tasks exist
	}
	// From Slurm 24.11 scontrol prints StdOut/StdErr as the data parser v0.0.42 does
	// (slurm_get_job_stdout): what the batch step would still expand is finished the same way.
	if rel.AtLeast(24, 11) {
		return j, j.slurmOutput(j.StdoutPattern, j.StderrPattern, rel, hosts)
	}
	// Before, scontrol prints them partly expanded (it expands %A %a %j %u %x and leaves
	// %N %n %s %t %J, widths and %%), so the raw pattern is lost. Expanding what it
	// prints again is exact for ordinary patterns, and wrong for odd ones: "%%" next to
	// a letter, a width before "%", a job name containing '%' (measured on Slurm 22.05:
	// "p4%3%j.out" gives p41.out here, Slurm wrote p4311.out). squeue --json (Slurm
	// 21.08+) and scontrol --json give the raw pattern and are tried first.
	if err := j.resolveOutput(hosts); err != nil {
		return nil, err
	}
	return j, nil
}

// parseMem reads scontrol's memory sizes ("4000M", "2G", "0") in MB.
func parseMem(s string) int {
	mult := 1
	switch {
	case strings.HasSuffix(s, "M"):
		s = strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		s, mult = strings.TrimSuffix(s, "G"), 1024
	case strings.HasSuffix(s, "T"):
		s, mult = strings.TrimSuffix(s, "T"), 1024*1024
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n * mult
}

// nameID splits "alice(1000)".
func nameID(s string) (string, uint32) {
	name, rest, ok := strings.Cut(s, "(")
	if !ok {
		return s, 0
	}
	n, _ := strconv.ParseUint(strings.TrimSuffix(rest, ")"), 10, 32)
	return name, uint32(n)
}

// parseSlurmTime parses scontrol's local times ("2026-11-21T06:20:40"); Unknown/None → zero.
func parseSlurmTime(s string) time.Time {
	t, err := time.ParseInLocation("2006-01-02T15:04:05", s, time.Local)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// parseSlurmDuration parses [days-]hours:minutes:seconds, minutes, ...; UNLIMITED → 0.
func parseSlurmDuration(s string) time.Duration {
	days := 0
	if d, rest, ok := strings.Cut(s, "-"); ok {
		days, _ = strconv.Atoi(d)
		s = rest
	}
	parts := strings.Split(s, ":")
	var vals []int
	for _, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			return 0
		}
		vals = append(vals, v)
	}
	var h, m, sec int
	switch len(vals) {
	case 1:
		m = vals[0]
	case 2:
		m, sec = vals[0], vals[1]
	case 3:
		h, m, sec = vals[0], vals[1], vals[2]
	default:
		return 0
	}
	return time.Duration(days)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second
}
