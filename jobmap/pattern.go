// sbatch output file patterns.
//
// ExpandPattern, DefaultOutput, ResolvePath and OutputPath give the file
// that the batch step of a job writes its stdout/stderr to, as Slurm 22.05
// names it. Slurm expands the --output/--error pattern on the compute node,
// in slurmstepd (src/slurmd/common/fname.c: fname_create and
// _create_batch_fname/_batch_path_check), not in sbatch. The rules below
// were read from that code: the slurmstepd of Debian's slurmd
// 22.05.8-4+deb12u3, disassembled (no 22.05 fname.c was at hand; the public
// fname.c of earlier releases has the same structure), and man sbatch(1) of
// the same package, section "filename pattern":
//
//  1. Backslash (fname.c remove_path_slashes; man: "\\ Do not process any of
//     the replacement symbols"): if the pattern holds a '\' anywhere, no '%'
//     is replaced at all. Each "\\" becomes one '\', every other '\' is
//     dropped: "a\%j" names the file "a%j".
//  2. "%%" is one '%'.
//  3. '%', optional decimal width, letter. The width zero-pads numbers
//     ("%0*u"); a width above 10 is taken as 10 (MAX_WIDTH in fname.c; the
//     man page gives no maximum). As the man page says, the width is
//     ignored for non-numeric data (%N, %s, %u, %x).
//     %A  array master job id; the job id if the job is not an array task
//     %a  array task id; 4294967294 (NO_VAL) if the job is not an array task
//     %J  job id: for the batch step Slurm prints no ".stepid" (the man
//         page's "128.0" is for srun steps)
//     %j  job id
//     %N  short host name of the node running the batch script (slurmd's
//         conf->hostname in 22.05, i.e. gethostname() cut at the first '.',
//         not the NodeName; newer fname.c uses conf->node_name)
//     %n  node index, 0 for the batch step
//     %s  "batch" for the batch step; width ignored
//     %t  task id, 0 for the batch step
//     %u  user name; width ignored
//     %x  job name (SLURM_JOB_NAME); width ignored
//  4. Anything else is copied, and Slurm's parser has quirks that are kept:
//     "%Q" (unknown letter) stays "%Q"; a '%' at the end stays; but after a
//     width the '%' and all digits but the last are lost: "%12Q" gives "2Q",
//     a trailing "%12" gives "2", and "%3%j" gives "3" and the job id.
//  5. Path (fname_create): a pattern not starting with '/' is relative to
//     the job's working directory: workdir + "/" + expansion (no '/' added
//     if workdir ends with one). If the pattern held a backslash, Slurm
//     22.05 joins workdir and the unescaped pattern with no '/' between
//     them ("a\%j" in /home/u gives "/home/ua%j"). A pattern that is only a
//     number (strtoul, e.g. "3") names a task: every other task, including
//     the batch script (task 0), writes to /dev/null.
//  6. Defaults (slurmstepd_job.c _batchfilename): no --output gives
//     "slurm-%J.out" (so slurm-<jobid>.out), or "slurm-%A_%a.out" for array
//     tasks; no --error means stderr goes where stdout goes.

package jobmap

import (
	"errors"
	"strconv"
	"strings"
)

// SlurmNoVal is Slurm's NO_VAL (0xfffffffe): the array task id of a job that
// is not an array task, which is what %a prints for such a job.
const SlurmNoVal uint32 = 0xfffffffe

// patMaxWidth is Slurm's MAX_WIDTH: the largest zero-padding width.
const patMaxWidth = 10

// ErrBadPattern is the kind of every error from ExpandPattern and
// OutputPath, for errors.Is.
var ErrBadPattern = errors.New("bad output pattern")

// PatternJob is what an output pattern of a batch step can refer to.
type PatternJob struct {
	JobID       uint32 // %j, %J; %A when not an array task
	ArrayJobID  uint32 // %A for an array task
	ArrayTaskID uint32 // %a for an array task
	IsArray     bool   // false: %a is 4294967294 and %A is JobID
	StepID      string // "batch" (or ""): only the batch step is modelled
	User        string // %u
	Name        string // %x, the job name
	BatchHost   string // %N: short host name of the node running the script
	NodeIndex   int    // %n, 0 for the batch step
	TaskID      int    // %t, 0 for the batch step
}

// arrayTask is the array task id as slurmstepd holds it.
func (j *PatternJob) arrayTask() uint32 {
	if j.IsArray {
		return j.ArrayTaskID
	}
	return SlurmNoVal
}

func patternError(pattern, detail string) error {
	return &patternErr{pattern: pattern, detail: detail}
}

type patternErr struct{ pattern, detail string }

func (e *patternErr) Error() string {
	return "jobmap: output pattern " + quoteShort(e.pattern) + ": " + e.detail
}

func (e *patternErr) Unwrap() error { return ErrBadPattern }

func checkPattern(pattern string, j *PatternJob) error {
	switch {
	case pattern == "":
		return patternError(pattern, "empty pattern")
	case strings.IndexByte(pattern, 0) >= 0:
		return patternError(pattern, "NUL byte at "+strconv.Itoa(strings.IndexByte(pattern, 0)))
	case j.StepID != "" && j.StepID != "batch":
		return patternError(pattern, "step "+strconv.Quote(j.StepID)+
			": only the batch step (\"batch\") is supported")
	case j.NodeIndex < 0 || int64(j.NodeIndex) > 1<<32-1:
		return patternError(pattern, "node index "+strconv.Itoa(j.NodeIndex)+" out of range")
	case j.TaskID < 0 || int64(j.TaskID) > 1<<32-1:
		return patternError(pattern, "task id "+strconv.Itoa(j.TaskID)+" out of range")
	}
	return nil
}

// ExpandPattern expands an sbatch --output/--error pattern for the batch
// step of job j exactly as slurmstepd 22.05 does (see the rules above), but
// without joining it to the working directory (see ResolvePath and
// OutputPath). It fails only on input Slurm could not have: an empty
// pattern, a NUL byte, a step other than the batch step, or a negative node
// index or task id.
func ExpandPattern(pattern string, j PatternJob) (string, error) {
	if err := checkPattern(pattern, &j); err != nil {
		return "", err
	}
	if s, escaped := unescapePattern(pattern); escaped {
		return s, nil
	}
	return expandBatchPattern(pattern, &j), nil
}

// unescapePattern is fname.c remove_path_slashes: with no backslash it
// reports false; otherwise it turns "\\" into '\' and drops other '\'.
func unescapePattern(p string) (string, bool) {
	if strings.IndexByte(p, '\\') < 0 {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] != '\\' {
			b.WriteByte(p[i])
			continue
		}
		if i+1 < len(p) && p[i+1] == '\\' {
			b.WriteByte('\\')
			i++
		}
	}
	return b.String(), true
}

// expandBatchPattern follows _create_batch_fname: q is the start of text
// not yet copied, i the scan position.
func expandBatchPattern(p string, j *PatternJob) string {
	var b strings.Builder
	b.Grow(len(p) + 16)
	q, i := 0, 0
	for i < len(p) {
		if p[i] != '%' {
			i++
			continue
		}
		if i+1 < len(p) && p[i+1] == '%' { // "%%": keep one '%'
			b.WriteString(p[q : i+1])
			i += 2
			q = i
			continue
		}
		k := i + 1 // the conversion letter
		width := 0
		if k < len(p) && hlIsDigit(p[k]) {
			b.WriteString(p[q:i])
			end := k
			for end < len(p) && hlIsDigit(p[end]) {
				if width <= patMaxWidth {
					width = width*10 + int(p[end]-'0')
				}
				end++
			}
			width = min(width, patMaxWidth)
			q = end - 1 // Slurm leaves the last digit of the width uncopied
			if end == len(p) {
				i = end
				break
			}
			k = end
		}
		if k < len(p) {
			if s, ok := patternField(p[k], width, j); ok {
				b.WriteString(p[q : k-1])
				b.WriteString(s)
				i = k + 1
				q = i
				continue
			}
		}
		i = k // not a conversion: scan on from the letter
	}
	b.WriteString(p[q:])
	return b.String()
}

// patternField is the text of conversion c (_batch_path_check).
func patternField(c byte, width int, j *PatternJob) (string, bool) {
	num := func(v uint64) string { return string(appendPadded(nil, v, width)) }
	switch c {
	case 'A':
		if j.arrayTask() == SlurmNoVal {
			return num(uint64(j.JobID)), true
		}
		return num(uint64(j.ArrayJobID)), true
	case 'a':
		return num(uint64(j.arrayTask())), true
	case 'J', 'j': // the batch step adds no ".stepid" to %J
		return num(uint64(j.JobID)), true
	case 'N':
		return j.BatchHost, true
	case 'n':
		return num(uint64(j.NodeIndex)), true
	case 's':
		return "batch", true
	case 't':
		return num(uint64(j.TaskID)), true
	case 'u':
		return j.User, true
	case 'x':
		return j.Name, true
	}
	return "", false
}

// DefaultOutput is the stdout file name of a job submitted without
// --output: "slurm-<jobid>.out", or "slurm-<arrayjobid>_<taskid>.out" for
// an array task (slurmstepd expands "slurm-%J.out" or "slurm-%A_%a.out").
func DefaultOutput(j PatternJob) string {
	if j.arrayTask() != SlurmNoVal {
		return expandBatchPattern("slurm-%A_%a.out", &j)
	}
	return expandBatchPattern("slurm-%J.out", &j)
}

// ResolvePath makes an expanded file name absolute the way slurmstepd does:
// a name not starting with '/' is relative to the job's working directory,
// joined with one '/' (none if workdir ends with '/'). The result is not
// cleaned, as Slurm does not clean it. An empty workdir leaves the name as
// it is. For the exact path Slurm uses, including the backslash and
// task-number cases, use OutputPath.
func ResolvePath(workdir, expanded string) string {
	if strings.HasPrefix(expanded, "/") || workdir == "" {
		return expanded
	}
	if strings.HasSuffix(workdir, "/") {
		return workdir + expanded
	}
	return workdir + "/" + expanded
}

// OutputPath is the file the batch step writes to for pattern, as
// slurmstepd 22.05's fname_create computes it from the pattern and the
// job's working directory. It differs from ResolvePath(workdir,
// ExpandPattern(pattern, j)) in three cases, all Slurm's: the relative/absolute
// test looks at the pattern, not its expansion ("%x" with job name "/a" gives
// workdir + "//a"); an escaped relative pattern is joined to workdir without
// a '/'; and a pattern that is only a number other than j.TaskID gives
// "/dev/null".
func OutputPath(workdir, pattern string, j PatternJob) (string, error) {
	if err := checkPattern(pattern, &j); err != nil {
		return "", err
	}
	if workdir == "" {
		return "", patternError(pattern, "empty working directory")
	}
	if id, ok := singleTaskIO(pattern); ok && id != int64(j.TaskID) {
		return "/dev/null", nil
	}
	esc, escaped := unescapePattern(pattern)
	if pattern[0] == '/' {
		if escaped {
			return esc, nil
		}
		return expandBatchPattern(pattern, &j), nil
	}
	if escaped {
		return workdir + esc, nil
	}
	if !strings.HasSuffix(workdir, "/") {
		workdir += "/"
	}
	return workdir + expandBatchPattern(pattern, &j), nil
}

// singleTaskIO is fname_single_task_io: if the whole pattern is a number as
// C's strtoul reads it (leading white space, optional sign, decimal digits),
// it returns that number cast to a C int, and ok if it is not negative.
func singleTaskIO(p string) (int64, bool) {
	i := 0
	for i < len(p) && (p[i] == ' ' || ('\t' <= p[i] && p[i] <= '\r')) {
		i++
	}
	neg := false
	if i < len(p) && (p[i] == '+' || p[i] == '-') {
		neg = p[i] == '-'
		i++
	}
	start := i
	var v uint64
	overflow := false
	for i < len(p) && hlIsDigit(p[i]) {
		d := uint64(p[i] - '0')
		if v > (1<<64-1-d)/10 {
			overflow = true
		} else {
			v = v*10 + d
		}
		i++
	}
	if i == start || i != len(p) {
		return 0, false // no digits, or more than a number
	}
	switch {
	case overflow:
		v = 1<<64 - 1 // ULONG_MAX, whatever the sign
	case neg:
		v = -v
	}
	id := int64(int32(uint32(v))) // (int) of an unsigned long
	return id, id >= 0
}

// finishBatchPattern finishes a path Slurm 24.11 to 25.05 gives for a job's output
// (slurm_get_job_stdout: %A %a %b %j %u %x, widths and %% expanded already) as the batch
// step expands the rest: %J %N %n %s %t, with their widths; and a width before another
// letter as the batch step mangles it ("%12Q" is "2Q": expandBatchPattern). Any other
// '%' is kept as it is: after Slurm's expansion it is literal text ("%%j" became "%j",
// "%%%j" became "%" and the job id, a job name holding "%j" was put in). What cannot be
// told apart: a width right before '%' ("%3%j" is "3" and the job id to the batch step,
// and "%3" and the job id here), and a width and letter that came from a job name.
func finishBatchPattern(p string, j *PatternJob) string {
	if strings.IndexByte(p, '%') < 0 || strings.IndexByte(p, '\\') >= 0 {
		return p
	}
	var b strings.Builder
	b.Grow(len(p) + 16)
	for i := 0; i < len(p); i++ {
		if p[i] != '%' {
			b.WriteByte(p[i])
			continue
		}
		k, width := i+1, 0
		for k < len(p) && hlIsDigit(p[k]) {
			if width <= patMaxWidth {
				width = width*10 + int(p[k]-'0')
			}
			k++
		}
		switch {
		case k < len(p) && strings.IndexByte("JNnst", p[k]) >= 0:
			s, _ := patternField(p[k], min(width, patMaxWidth), j)
			b.WriteString(s)
			i = k
		case k > i+1 && k < len(p) && (p[k] >= 'a' && p[k] <= 'z' || p[k] >= 'A' && p[k] <= 'Z'):
			// Slurm's own expansion left "%<width><letter>": the batch step keeps the
			// width's last digit and the letter.
			b.WriteByte(p[k-1])
			i = k - 1
		default:
			b.WriteByte('%')
		}
	}
	return b.String()
}
