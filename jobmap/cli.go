package jobmap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

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
// --version`, asked once), which chooses the data parser whose JSON they are read with
// (commandsParser): with slurmver.DataParserPlugins it is asked for by name, `scontrol
// --json=v0.0.42 show job [ID]` from 24.11 (the default one changes with each release and
// with slurm.conf's DataParserParameters); before, `squeue --json` prints v0.0.38's form
// (22.05); else, or when the JSON cannot be read, `scontrol show job -o -d [ID]` (any
// Slurm). What a command cannot do is learned, and logged, once: a lookup runs one
// command, or two when the first cannot be read.
type CLISource struct {
	run     Runner
	timeout time.Duration
	log     zerolog.Logger
	mu      sync.Mutex
	noJSON  map[string]bool // commands found without JSON output
	cmds    *commands       // what the commands are (nil: not asked yet)
	hosts   hostCache
}

// commands is what Slurm's commands are: their release (zero: not known) and the data
// parser whose JSON they print (nil: none persyst reads).
type commands struct {
	rel  slurmver.Release
	json dataParser
}

// named says whether the commands are asked for the data parser by name (--json=VERSION),
// and for one job at a time.
func (c commands) named() bool { return c.json != nil && c.rel.Has(slurmver.DataParserPlugins) }

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

// slurm asks the commands' release once, and chooses their data parser with it.
func (s *CLISource) slurm(ctx context.Context) commands {
	s.mu.Lock()
	if s.cmds != nil {
		defer s.mu.Unlock()
		return *s.cmds
	}
	s.mu.Unlock()
	var c commands
	out, err := s.run(ctx, "scontrol", "--version")
	if err == nil {
		c.rel, err = slurmver.Parse(string(out)) // "slurm 22.05.8", "slurm-wlm 24.11.5"
	}
	c.json = commandsParser(c.rel)
	if ctx.Err() != nil {
		return c // asked again next time
	}
	if err != nil {
		s.log.Warn().Err(err).Msg("jobmap: Slurm's release not known: its commands are read as Slurm " + slurmver.OldestTested().Series() + "'s")
	}
	s.mu.Lock()
	s.cmds = &c
	s.mu.Unlock()
	s.log.Info().Str("source", s.Name()).Str("slurm", c.rel.String()).Str("format", s.format(c)).
		Msg("jobmap: Slurm's commands")
	return c
}

// format names what the commands c are read as.
func (s *CLISource) format(c commands) string {
	switch {
	case c.named() && !s.skip(namedKey(c.json)):
		return "scontrol --json=" + c.json.version()
	case c.json != nil && !c.named():
		return "squeue --json (" + c.json.version() + "), else scontrol show job -o -d"
	}
	return "scontrol show job -o -d"
}

// namedKey is the JSON of data parser p, asked for by name, in noJSON.
func namedKey(p dataParser) string { return "scontrol-" + p.version() }

// jobsNamed runs `scontrol --json=VERSION show job [id]` for data parser p; ok is false
// when the output cannot be read (then it says so once, and the text form is used from
// then on).
func (s *CLISource) jobsNamed(ctx context.Context, p dataParser, hosts func(string) string, id ...string) ([]*Job, bool, error) {
	key := namedKey(p)
	if s.skip(key) {
		return nil, false, nil
	}
	args := append([]string{"--json=" + p.version(), "show", "job"}, id...)
	out, err := s.run(ctx, "scontrol", args...)
	if err != nil && len(id) == 1 && strings.Contains(strings.ToLower(err.Error()), "invalid job id") {
		return nil, true, fmt.Errorf("job %s: %w", id[0], ErrNoJob)
	}
	if err == nil {
		jobs, perr := p.parse(out, hosts)
		if perr == nil {
			return jobs, true, nil
		}
		err = perr
	}
	if ctx.Err() != nil {
		return nil, true, err
	}
	s.mu.Lock()
	first := !s.noJSON[key]
	s.noJSON[key] = true
	s.mu.Unlock()
	if first {
		s.log.Warn().Err(err).Msg("jobmap: scontrol --json=" + p.version() + " cannot be read; using scontrol show job -o -d from now on")
	}
	return nil, false, nil
}

// unnamedForms are the commands whose --json printed one form before the data parser
// plugins (v0.0.38's on 22.05), every job at once.
var unnamedForms = []struct {
	key, name string
	args      []string
}{
	{"scontrol", "scontrol", []string{"--json", "show", "job"}},
	{"squeue", "squeue", []string{"--json"}},
}

// jobsUnnamed reads every job from the first of unnamedForms whose output data parser p
// reads; ok is false when none could be read, each failure added to errs. A command
// without JSON output is not tried again; other failures are, next time.
func (s *CLISource) jobsUnnamed(ctx context.Context, p dataParser, hosts func(string) string, errs *[]error) ([]*Job, bool, error) {
	for _, f := range unnamedForms {
		if s.skip(f.key) {
			continue
		}
		out, err := s.run(ctx, f.name, f.args...)
		if err == nil {
			jobs, perr := p.parse(out, hosts)
			if perr == nil {
				return jobs, true, nil
			}
			err = fmt.Errorf("%s %s: %w", f.name, strings.Join(f.args, " "), perr)
		}
		if ctx.Err() != nil {
			return nil, true, err
		}
		s.markNoJSON(f.key, err)
		*errs = append(*errs, err)
	}
	return nil, false, nil
}

// Jobs returns every job slurmctld knows.
func (s *CLISource) Jobs(ctx context.Context) ([]*Job, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	hosts := s.hostnames(ctx)
	c := s.slurm(ctx)
	var errs []error
	switch {
	case c.named():
		if jobs, ok, err := s.jobsNamed(ctx, c.json, hosts); ok {
			return jobs, err
		}
	case c.json != nil:
		if jobs, ok, err := s.jobsUnnamed(ctx, c.json, hosts, &errs); ok {
			return jobs, err
		}
	}
	out, err := s.run(ctx, "scontrol", "show", "job", "-o", "-d")
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	return parseScontrol(out, c.rel, hosts)
}

// Job returns one job; ErrNoJob if Slurm does not know it. With the data parser plugins
// (no JSON of every job persyst reads) it asks for the one job, not for all of them.
func (s *CLISource) Job(ctx context.Context, id string) (*Job, error) {
	job, task, isTask, err := parseJobID(id)
	if err != nil {
		return nil, err
	}
	if s.slurm(ctx).rel.Has(slurmver.DataParserPlugins) {
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

// oneJob asks Slurm (with the data parser plugins) for job id alone.
func (s *CLISource) oneJob(ctx context.Context, id string) (*Job, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	hosts := s.hostnames(ctx)
	c := s.slurm(ctx)
	var jobs []*Job
	var err error
	ok := false
	if c.named() {
		jobs, ok, err = s.jobsNamed(ctx, c.json, hosts, id)
	}
	if !ok {
		var out []byte
		if out, err = s.run(ctx, "scontrol", "show", "job", "-o", "-d", id); err != nil {
			if strings.Contains(strings.ToLower(err.Error()), "invalid job id") {
				return nil, fmt.Errorf("job %s: %w", id, ErrNoJob)
			}
			return nil, err
		}
		jobs, err = parseScontrol(out, c.rel, hosts)
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

// hostnames maps node names to host names with `sinfo -N -h -o "%N %n"`, kept a while
// (hostCache); node names where sinfo fails.
func (s *CLISource) hostnames(ctx context.Context) func(string) string {
	return s.hosts.lookup(func() (map[string]string, error) {
		out, err := s.run(ctx, "sinfo", "-N", "-h", "-o", "%N %n")
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
