package jobmap

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/persyst/persyst/sample"
	"github.com/persyst/persyst/slurmver"
)

// `scontrol show job -o -d`: the text form every Slurm prints, one job a line of Key=value
// pairs, read where no JSON is (cli.go).

// scontrolKey finds the start of each Key= in `scontrol show job -o` output. Values may
// contain spaces (job names, paths), so a value runs until the next " Key=".
var scontrolKey = regexp.MustCompile(`(?:^| )([A-Za-z][A-Za-z_:/]*)=`)

// parseScontrol parses `scontrol show job -o -d` output of Slurm release rel (zero: not
// known, read as the oldest release persyst is tested with): one job per line.
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

// scontrolJob is a job as `scontrol show job -o -d` prints it, while its line is read.
type scontrolJob struct {
	Job
	err          error
	pendingTasks bool // a pending array record of several tasks ("1-100")
	// The -d detail: groups of nodes ("Nodes=n[1-2] CPU_IDs=0-3 Mem=100") with the same
	// allocation, each node expression with its group's allocation.
	detail      []NodeAlloc
	detailNodes []string
}

// scontrolFields read the keys of a job's line into the job.
var scontrolFields = map[string]func(j *scontrolJob, v string){
	"JobId": func(j *scontrolJob, v string) {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			j.err = fmt.Errorf("JobId=%q", v)
		}
		j.JobID = uint32(n)
	},
	"ArrayJobId": func(j *scontrolJob, v string) {
		n, _ := strconv.ParseUint(v, 10, 32)
		j.ArrayJobID = uint32(n)
	},
	"ArrayTaskId": func(j *scontrolJob, v string) {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil {
			j.ArrayTaskID, j.IsArray = uint32(n), true
		} else if v != "" && v != "N/A" {
			j.IsArray, j.pendingTasks = true, true
		}
	},
	"JobName":      func(j *scontrolJob, v string) { j.Name = v },
	"AdminComment": func(j *scontrolJob, v string) { j.AdminComment = strings.TrimSpace(v) },
	"UserId":       func(j *scontrolJob, v string) { j.User, j.UID = nameID(v) },
	"GroupId":      func(j *scontrolJob, v string) { _, j.GID = nameID(v) },
	"JobState":     func(j *scontrolJob, v string) { j.State = v; j.setRequeue(v) },
	"Partition":    func(j *scontrolJob, v string) { j.Partition = v },
	"Account":      func(j *scontrolJob, v string) { j.Account = nullText(v) },
	"QOS":          func(j *scontrolJob, v string) { j.QOS = nullText(v) },
	"NodeList": func(j *scontrolJob, v string) {
		if v != "(null)" {
			j.NodeList = v
		}
	},
	"BatchHost":   func(j *scontrolJob, v string) { j.BatchHost = v },
	"TimeLimit":   func(j *scontrolJob, v string) { j.TimeLimit = parseSlurmDuration(v) },
	"SubmitTime":  func(j *scontrolJob, v string) { j.Submit = parseSlurmTime(v) },
	"StartTime":   func(j *scontrolJob, v string) { j.Start = parseSlurmTime(v) },
	"EndTime":     func(j *scontrolJob, v string) { j.End = parseSlurmTime(v) },
	"PreemptTime": func(j *scontrolJob, v string) { j.Preempted = parseSlurmTime(v) },
	"Restarts": func(j *scontrolJob, v string) {
		n, _ := strconv.Atoi(strings.TrimSpace(v))
		j.Restarts = max(n, 0)
	},
	"MinMemoryNode": func(j *scontrolJob, v string) { j.MemPerNodeMB = parseMem(v) },
	"MinMemoryCPU":  func(j *scontrolJob, v string) { j.MemPerCPUMB = parseMem(v) },
	"WorkDir":       func(j *scontrolJob, v string) { j.WorkDir = v },
	// 24.11 ends the line with a space.
	"StdOut": func(j *scontrolJob, v string) { j.StdoutPattern = strings.TrimRight(v, " ") },
	"StdErr": func(j *scontrolJob, v string) { j.StderrPattern = strings.TrimRight(v, " ") },
	"Nodes": func(j *scontrolJob, v string) {
		j.detail = append(j.detail, NodeAlloc{})
		j.detailNodes = append(j.detailNodes, v)
	},
	"CPU_IDs": func(j *scontrolJob, v string) {
		if a := j.group(); a != nil && v != "" {
			if ids, err := sample.ParseCPUList(v); err == nil {
				a.CPUIDs, a.Cores = ids, len(ids)
			}
		}
	},
	"Mem": func(j *scontrolJob, v string) {
		if a := j.group(); a != nil {
			a.MemoryMB, _ = strconv.Atoi(v)
		}
	},
}

// group is the detail group read last (nil: none yet).
func (j *scontrolJob) group() *NodeAlloc {
	if len(j.detail) == 0 {
		return nil
	}
	return &j.detail[len(j.detail)-1]
}

// byNode is the -d detail's allocation by node name.
func (j *scontrolJob) byNode() map[string]NodeAlloc {
	byNode := map[string]NodeAlloc{}
	for i, expr := range j.detailNodes {
		names, err := ExpandHostlist(expr)
		if err != nil {
			continue
		}
		for _, n := range names {
			a := j.detail[i]
			a.Node = n
			byNode[n] = a
		}
	}
	return byNode
}

// parseScontrolLine reads one job's line of `scontrol show job -o -d`, of Slurm release
// rel (zero: not known, read as the oldest tested).
func parseScontrolLine(line string, rel slurmver.Release, hosts func(string) string) (*Job, error) {
	var sj scontrolJob
	for _, p := range splitScontrol(line) {
		if read, ok := scontrolFields[p.k]; ok {
			if read(&sj, p.v); sj.err != nil {
				return nil, sj.err
			}
		}
	}
	j := &sj.Job
	if j.JobID == 0 {
		return nil, errors.New("no JobId")
	}
	if !j.IsArray {
		j.ArrayJobID = 0
	}
	if j.NodeList != "" {
		if err := j.setNodes("NodeList", sj.byNode()); err != nil {
			return nil, err
		}
	}
	if sj.pendingTasks {
		return j, nil // Stdout/Stderr unknown until the tasks exist
	}
	// With slurmver.OutputPartlyExpanded scontrol prints StdOut/StdErr as the data parser
	// does (slurm_get_job_stdout): what the batch step would still expand is finished the
	// same way.
	if rel.Has(slurmver.OutputPartlyExpanded) {
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

// nullText is scontrol's text value, "" for its "(null)".
func nullText(v string) string {
	if v == "(null)" {
		return ""
	}
	return v
}
