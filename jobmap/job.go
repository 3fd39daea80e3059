package jobmap

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/persyst/persyst/slurmver"
)

// Job is what persyst needs to know of one Slurm job.
type Job struct {
	JobID       uint32 `json:"job_id"`
	ArrayJobID  uint32 `json:"array_job_id,omitempty"` // 0 unless an array task
	ArrayTaskID uint32 `json:"array_task_id,omitempty"`
	IsArray     bool   `json:"is_array"`
	Name        string `json:"name"`
	User        string `json:"user"`
	UID         uint32 `json:"uid"`
	GID         uint32 `json:"gid"`
	Partition   string `json:"partition"`
	// Account and QOS are the job's (what Slurm charges it to and its quality of
	// service); Cluster is the cluster Slurm names (slurmrestd and squeue --json give it,
	// scontrol does not: "").
	Account string `json:"account,omitempty"`
	QOS     string `json:"qos,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	State   string `json:"state"` // RUNNING, PENDING, COMPLETED, ...
	// NodeList is Slurm's hostlist expression; Nodes its expansion, in order.
	NodeList string   `json:"node_list"`
	Nodes    []string `json:"nodes"`
	// Alloc is the allocation on each node, in the order of Nodes.
	Alloc     []NodeAlloc `json:"alloc,omitempty"`
	BatchHost string      `json:"batch_host,omitempty"`
	// MemPerNodeMB and MemPerCPUMB are the memory the job was given (0: none, memory is
	// not a consumable resource). MemDefault: the job did not ask for it (--mem,
	// --mem-per-cpu), the site's default (DefMemPerCPU, ...) applies; known from
	// slurmrestd (Slurm's JOB_MEM_SET flag), not from scontrol, whose jobs count as asked.
	MemPerNodeMB int           `json:"mem_per_node_mb,omitempty"`
	MemPerCPUMB  int           `json:"mem_per_cpu_mb,omitempty"`
	MemDefault   bool          `json:"mem_default,omitempty"`
	TimeLimit    time.Duration `json:"time_limit"` // 0: unlimited
	Submit       time.Time     `json:"submit"`
	Start        time.Time     `json:"start"`
	End          time.Time     `json:"end"` // for a running job: the time limit's end
	WorkDir      string        `json:"work_dir"`
	// StdoutPattern and StderrPattern are the file names as Slurm stores them ("" when
	// the user gave none); Stdout and Stderr are the files Slurm writes, patterns expanded
	// and relative to WorkDir. Stderr equals Stdout when not given separately.
	StdoutPattern string `json:"stdout_pattern,omitempty"`
	StderrPattern string `json:"stderr_pattern,omitempty"`
	Stdout        string `json:"stdout"`
	Stderr        string `json:"stderr"`
	// AdminComment is the job's administrator comment (where persyst keeps its summary
	// in Slurm accounting, beside a site's own text).
	AdminComment string `json:"admin_comment,omitempty"`
	// Restarts counts the times Slurm requeued the job (its restart_cnt: raised as a run
	// is requeued, so a job running for the second time says 1). Preempted is when Slurm
	// last preempted it (zero: never).
	Restarts  int       `json:"restarts,omitempty"`
	Preempted time.Time `json:"preempted,omitzero"`
	// Requeued: Slurm's state says the job is being requeued or waits to run again after
	// a requeue (its REQUEUED, REQUEUE_FED, REQUEUE_HOLD or SPECIAL_EXIT flag, where the
	// source shows flags beside COMPLETING; PENDING after it ran); Held: held after it.
	Requeued bool `json:"requeued,omitempty"`
	Held     bool `json:"held,omitempty"`
}

// setRequeue sets Requeued and Held from the job's state names (its base state and
// flags, as the source gives them).
func (j *Job) setRequeue(states ...string) {
	for _, s := range states {
		switch s {
		case "REQUEUE_HOLD", "SPECIAL_EXIT":
			j.Requeued, j.Held = true, true
		case "REQUEUED", "REQUEUE_FED":
			j.Requeued = true
		}
	}
}

// NodeAlloc is a job's allocation on one node.
type NodeAlloc struct {
	Node  string `json:"node"`
	Cores int    `json:"cores"` // allocated cores (0: unknown)
	// CPUIDs are the allocated CPU ids where the source reports them (scontrol -d).
	CPUIDs   []int `json:"cpu_ids,omitempty"`
	MemoryMB int   `json:"memory_mb,omitempty"`
}

// Running says whether the job holds its nodes now.
func (j *Job) Running() bool {
	return j.State == "RUNNING" || j.State == "COMPLETING" || j.State == "SUSPENDED"
}

// ID is the job's name in Slurm's commands: "123" or, for an array task, "120_3".
func (j *Job) ID() string {
	if j.IsArray {
		return fmt.Sprintf("%d_%d", j.ArrayJobID, j.ArrayTaskID)
	}
	return strconv.FormatUint(uint64(j.JobID), 10)
}

// setArray sets the job's array ids from a record's: arr the array's job id (0: not an
// array task), task the task's id (<0 or NO_VAL: not given) and tasks the record's task
// string. It says whether the record stands for array tasks not started yet, whose output
// files are not known.
func (j *Job) setArray(arr, task int64, tasks string) bool {
	if arr <= 0 {
		return false
	}
	if task >= 0 && task < int64(SlurmNoVal) {
		j.IsArray, j.ArrayJobID, j.ArrayTaskID = true, uint32(arr), uint32(task)
		return false
	}
	if tasks == "" {
		return false
	}
	// A pending array's meta record: "5" is one task, "1-100" many whose files are not
	// decided yet.
	j.IsArray, j.ArrayJobID = true, uint32(arr)
	t, err := strconv.ParseUint(tasks, 10, 32)
	if err != nil {
		return true
	}
	j.ArrayTaskID = uint32(t)
	return false
}

// setMemory sets the memory the job was given, in MB per node and per CPU (0 or less:
// none), and whether it is the site's default: where the record has flags, it lacks
// asked, the flag of a job that asked for memory.
func (j *Job) setMemory(perNode, perCPU int64, flags *[]string, asked string) {
	if perNode > 0 {
		j.MemPerNodeMB = int(perNode)
	}
	if perCPU > 0 {
		j.MemPerCPUMB = int(perCPU)
	}
	if flags != nil && (j.MemPerNodeMB > 0 || j.MemPerCPUMB > 0) {
		j.MemDefault = !slices.Contains(*flags, asked)
	}
}

// setTimeLimit sets the job's time limit from Slurm's minutes (0 or NO_VAL and above:
// unlimited).
func (j *Job) setTimeLimit(minutes int64) {
	if minutes > 0 && minutes < int64(SlurmNoVal) {
		j.TimeLimit = time.Duration(minutes) * time.Minute
	}
}

// setNodes expands the job's node list (Slurm's "(null)": none) and puts the allocation
// of each node, byNode, in the order of the nodes; field names the list in an error.
func (j *Job) setNodes(field string, byNode map[string]NodeAlloc) error {
	if j.NodeList == "(null)" {
		j.NodeList = ""
	}
	if j.NodeList == "" {
		return nil
	}
	nodes, err := ExpandHostlist(j.NodeList)
	if err != nil {
		return fmt.Errorf("job %d: %s: %w", j.JobID, field, err)
	}
	j.Nodes = nodes
	for _, n := range nodes {
		if a, ok := byNode[n]; ok {
			j.Alloc = append(j.Alloc, a)
		}
	}
	return nil
}

// resolveOutput expands the output patterns as Slurm does for the batch step.
func (j *Job) resolveOutput(hostname func(string) string) error {
	pj := PatternJob{
		JobID: j.JobID, ArrayJobID: j.ArrayJobID, ArrayTaskID: j.ArrayTaskID, IsArray: j.IsArray,
		StepID: "batch", User: j.User, Name: j.Name, BatchHost: j.BatchHost,
	}
	if hostname != nil && j.BatchHost != "" {
		pj.BatchHost = hostname(j.BatchHost)
	}
	expand := func(pattern string) (string, error) {
		if pattern == "" {
			return ResolvePath(j.WorkDir, DefaultOutput(pj)), nil
		}
		s, err := OutputPath(j.WorkDir, pattern, pj)
		if err != nil {
			return "", fmt.Errorf("job %s: output pattern %q: %w", j.ID(), pattern, err)
		}
		return s, nil
	}
	var err error
	if j.Stdout, err = expand(j.StdoutPattern); err != nil {
		return err
	}
	if j.StderrPattern == "" {
		j.Stderr = j.Stdout
		return nil
	}
	j.Stderr, err = expand(j.StderrPattern)
	return err
}

// slurmOutput sets the job's output files from the paths Slurm gives (stdout, stderr:
// "" when not given apart) as release rel expands them: with slurmver.OutputExpanded
// wholly (Slurm's own expansion, %N the node's name); before, only %A %a %b %j %u %x, %%
// and widths (OutputPartlyExpanded), so what the batch step expands besides (%J %N %n %s
// %t) is finished here. The pattern as the user gave it is lost then: a width right
// before a '%' ("%3%j") is the one case that cannot be told apart.
func (j *Job) slurmOutput(stdout, stderr string, rel slurmver.Release, hostname func(string) string) error {
	whole := rel.Has(slurmver.OutputExpanded)
	pj := PatternJob{JobID: j.JobID, ArrayJobID: j.ArrayJobID, ArrayTaskID: j.ArrayTaskID, IsArray: j.IsArray,
		StepID: "batch", User: j.User, Name: j.Name, BatchHost: j.BatchHost}
	if hostname != nil && j.BatchHost != "" && !whole {
		pj.BatchHost = hostname(j.BatchHost)
	}
	finish := func(p string) string {
		if !whole {
			p = finishBatchPattern(p, &pj)
		}
		return ResolvePath(j.WorkDir, p)
	}
	j.StdoutPattern, j.StderrPattern = stdout, stderr
	if stdout == "" {
		j.Stdout = ResolvePath(j.WorkDir, DefaultOutput(pj))
	} else {
		j.Stdout = finish(stdout)
	}
	if stderr == "" || stderr == stdout {
		j.Stderr = j.Stdout
	} else {
		j.Stderr = finish(stderr)
	}
	return nil
}

// countAllocated counts the cores marked "allocated" in a node allocation's raw
// {"<socket>": {"cores": {"<core>": "allocated"}}}: the keys are numbers and the values
// Slurm's fixed words, so the quoted word occurs only as a value.
func countAllocated(raw []byte) int {
	return bytes.Count(raw, []byte(`"allocated"`))
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// num is *p, 0 when not given.
func num[T int | int32 | int64](p *T) T {
	if p == nil {
		return 0
	}
	return *p
}

func unix(p *int64) time.Time {
	if p == nil || *p <= 0 || *p >= 0xfffffffe {
		return time.Time{}
	}
	return time.Unix(*p, 0).UTC()
}

// collected orders the jobs a source read by id; errors of single records are dropped
// when others were read (one bad record must not hide the rest), returned otherwise.
func collected(jobs []*Job, errs []error) ([]*Job, error) {
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].JobID < jobs[b].JobID })
	if len(jobs) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return jobs, nil
}

// hostsTTL is how long a node → host name map is used before it is asked for again.
const hostsTTL = time.Minute

// hostCache keeps Slurm's node → host name map (for %N in output patterns) between job
// lists: the names change with slurm.conf, not per job, and asking for them at every
// list (sinfo, or slurmrestd's nodes) doubled what a frontend's poll asked of slurmctld.
// A name missing from the map, or a map older than hostsTTL, asks again, at most once
// per lookup function; where asking fails the names known before serve.
type hostCache struct {
	now func() time.Time // nil: time.Now

	mu sync.Mutex
	m  map[string]string
	at time.Time
}

// lookup returns a node → host name function for one call's conversions (fetch may use
// that call's context); it asks only when a name is looked up (a job's batch host), and
// any name it does not know maps to itself.
func (c *hostCache) lookup(fetch func() (map[string]string, error)) func(string) string {
	var once sync.Once
	return func(node string) string {
		c.mu.Lock()
		defer c.mu.Unlock()
		now := time.Now
		if c.now != nil {
			now = c.now
		}
		if h, ok := c.m[node]; ok && now().Sub(c.at) < hostsTTL {
			return h
		}
		once.Do(func() {
			if m, err := fetch(); err == nil {
				c.m, c.at = m, now()
			}
		})
		if h, ok := c.m[node]; ok {
			return h
		}
		return node
	}
}

// parseJobID accepts "123" and "120_3" (array task).
func parseJobID(id string) (job, task uint32, isTask bool, err error) {
	a, b, isTask := strings.Cut(id, "_")
	n, err := strconv.ParseUint(a, 10, 32)
	if err != nil || n == 0 {
		return 0, 0, false, fmt.Errorf("job id %q: want N or N_T", id)
	}
	if !isTask {
		return uint32(n), 0, false, nil
	}
	t, err := strconv.ParseUint(b, 10, 32)
	if err != nil {
		return 0, 0, false, fmt.Errorf("job id %q: want N or N_T", id)
	}
	return uint32(n), uint32(t), true, nil
}
