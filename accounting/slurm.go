package accounting

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/persyst/persyst/digest"
)

// Runner runs a Slurm command and returns its standard output (jobmap.ExecRunner).
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Write puts a job's summary into its AdminComment with `scontrol update` (root or the
// Slurm user may), merged with what the job's AdminComment holds already (existing, as
// the job map read it). job is the job as Slurm's commands name it ("123", "120_3"). It
// returns the result for persyst_daemon_accounting_writes_total: written, present,
// no_room, or error (with the error).
func Write(ctx context.Context, run Runner, job, existing string, r digest.Report) (string, error) {
	tok, err := Encode(r)
	if err != nil {
		return "error", err
	}
	merged, err := Merge(existing, tok)
	switch {
	case errors.Is(err, ErrPresent):
		return "present", err
	case errors.Is(err, ErrNoRoom):
		return "no_room", err
	case err != nil:
		return "error", err
	}
	if _, err := run(ctx, "scontrol", "update", "JobId="+job, "AdminComment="+merged); err != nil {
		return "error", fmt.Errorf("job %s: AdminComment: %w", job, err)
	}
	return "written", nil
}

// ErrNoSummary: the job's accounting record holds no persyst summary.
var ErrNoSummary = errors.New("no persyst summary in the job's AdminComment")

// Read returns the summary token of a job from Slurm's accounting (`sacct`, which shows
// the caller the jobs Slurm lets them see), and the job's AdminComment.
func Read(ctx context.Context, run Runner, job string) (tok, comment string, err error) {
	out, err := run(ctx, "sacct", "-j", job, "-X", "-n", "-P", "-o", "JobID,AdminComment")
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		id, ac, ok := strings.Cut(line, "|")
		if !ok || id != job {
			continue
		}
		if t, ok := Find(ac); ok {
			return t, ac, nil
		}
		return "", ac, fmt.Errorf("job %s: %w", job, ErrNoSummary)
	}
	return "", "", fmt.Errorf("job %s: not in Slurm's accounting (sacct lists no such job)", job)
}
