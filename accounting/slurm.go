package accounting

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/persyst/persyst/slurmver"

	"github.com/persyst/persyst/digest"
)

// Runner runs a Slurm command and returns its standard output (jobmap.ExecRunner).
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Write puts a job's summary into its AdminComment (root or the Slurm user may), merged
// with what the job's AdminComment holds already (existing, as the job map read it). job
// is the job as Slurm's commands name it ("123", "120_3"), id its job id.
//
// While the job runs, `scontrol update` sets it in slurmctld, which hands it to slurmdbd
// with the job's end record. slurmctld refuses to change a job that has finished (a late
// digest, or a write that came after the job's end): then `sacctmgr modify job` writes
// it into the database (retried while the database has no record of the job yet),
// merged with the AdminComment the database holds, and only when this cluster's
// database holds exactly one job with that id: `sacctmgr modify job where jobid=`
// changes every record with the id, and job ids start again after a reset. It returns
// the result for persyst_daemon_accounting_writes_total: written, present, no_room, or
// error (with the error).
func Write(ctx context.Context, run Runner, job string, id uint32, existing string, r digest.Report) (string, error) {
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
	_, err = run(ctx, "scontrol", "update", "JobId="+job, "AdminComment="+merged)
	if err == nil {
		return "written", nil
	}
	if !strings.Contains(err.Error(), "already finished") {
		return "error", fmt.Errorf("job %s: AdminComment: %w", job, err)
	}
	return writeDatabase(ctx, run, job, id, tok)
}

// lowercases says whether sacctmgr lowercases the AdminComment it sets (a release without
// slurmver.SacctmgrKeepsCase), or may: when its release is not known.
func lowercases(ctx context.Context, run Runner) bool {
	out, err := run(ctx, "sacctmgr", "--version")
	if err != nil {
		return true
	}
	rel, err := slurmver.Parse(string(out))
	return err != nil || !rel.Has(slurmver.SacctmgrKeepsCase)
}

// writeDatabase writes the token into the job's record in the database (Write), once the
// record says the job has ended: slurmctld's end record sets the AdminComment it holds,
// and a value written before would be replaced. sacctmgr before Slurm 23.02 lowercases
// what it sets (the token is lowercase); a site's text with capitals is never rewritten
// that way: then nothing is written.
func writeDatabase(ctx context.Context, run Runner, job string, id uint32, tok string) (string, error) {
	raw := strconv.FormatUint(uint64(id), 10)
	for {
		// This cluster's records of the job id (sacct shows the local cluster's).
		out, err := run(ctx, "sacct", "-j", raw, "-a", "-X", "-n", "-P", "-D", "-o", "JobIDRaw,Cluster,State,AdminComment")
		if err != nil {
			return "error", fmt.Errorf("job %s: its record in the database: %w", job, err)
		}
		var recs [][]string
		for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			if f := strings.SplitN(line, "|", 4); len(f) == 4 && f[0] == raw {
				recs = append(recs, f)
			}
		}
		if len(recs) > 1 {
			return "error", fmt.Errorf("job %s: %d jobs with id %s in the database: none changed", job, len(recs), raw)
		}
		if len(recs) == 1 && ended(recs[0][2]) {
			existing := recs[0][3]
			merged, err := Merge(existing, tok)
			switch {
			case errors.Is(err, ErrPresent):
				return "present", err
			case errors.Is(err, ErrNoRoom):
				return "no_room", err
			case merged != strings.ToLower(merged) && lowercases(ctx, run):
				return "error", fmt.Errorf("job %s: AdminComment in the database: sacctmgr would lowercase the site's text %q: not written", job, clipText(existing, 80))
			}
			out, err := run(ctx, "sacctmgr", "-i", "modify", "job", "where", "jobid="+raw, "cluster="+recs[0][1], "set", "AdminComment="+merged)
			switch {
			case err != nil && !strings.Contains(err.Error(), "No error"):
				return "error", fmt.Errorf("job %s: AdminComment in the database: %w", job, err)
			case err == nil && strings.Contains(string(out), "Modified jobs"):
				return "written", nil
			}
			// Nothing modified ("sacctmgr: No error", exit status 1): slurmdbd had the
			// job's end in sacct's answer but not yet where modify looks (seen on 24.11
			// a moment after the job's end): asked again.
		}
		// No record yet, or not the job's end: slurmctld has not sent it to the database.
		select {
		case <-ctx.Done():
			return "error", fmt.Errorf("job %s: AdminComment in the database: no record of the job's end: %w", job, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// ended says whether a job state from sacct is one of a job that has ended ("CANCELLED by
// 0" included).
func ended(state string) bool {
	st, _, _ := strings.Cut(strings.TrimSpace(state), " ")
	switch st {
	case "", "PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUE_HOLD", "REQUEUE_FED",
		"EXPEDITING", "SIGNALING", "STAGE_OUT":
		return false
	}
	return true
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
