package jobmap

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// patJob is a plain batch job; patArrayJob is task 2 of array job 128.
var (
	patJob = PatternJob{
		JobID: 128, StepID: "batch", User: "alice", Name: "my job", BatchHost: "node1",
	}
	patArrayJob = PatternJob{
		JobID: 130, ArrayJobID: 128, ArrayTaskID: 2, IsArray: true, StepID: "batch",
		User: "alice", Name: "arr", BatchHost: "gpu07",
	}
)

func TestExpandPattern(t *testing.T) {
	named := func(name string) PatternJob { j := patJob; j.Name = name; return j }
	tests := []struct {
		name    string
		pattern string
		job     PatternJob
		want    string
	}{
		{"plain", "out.txt", patJob, "out.txt"},
		{"jobid", "slurm-%j.out", patJob, "slurm-128.out"},
		// man sbatch examples; %J of the batch step has no ".stepid".
		{"man %J", "job%J.out", patJob, "job128.out"},
		{"man %4j", "job%4j.out", patJob, "job0128.out"},
		{"man %2t", "job%j-%2t.out", patJob, "job128-00.out"},
		{"percent", "100%%.out", patJob, "100%.out"},
		{"percent before letter", "%%j", patJob, "%j"},
		{"three percents", "%%%j", patJob, "%128"},
		{"four percents", "%%%%", patJob, "%%"},
		{"A not array", "%A", patJob, "128"},
		{"a not array is NO_VAL", "%a", patJob, "4294967294"},
		{"a not array width", "%3a", patJob, "4294967294"},
		{"array A_a", "%A_%a", patArrayJob, "128_2"},
		{"array padded task", "%A_%4a", patArrayJob, "128_0002"},
		{"array own job id", "%j", patArrayJob, "130"},
		{"array J", "%J", patArrayJob, "130"},
		{"array with NO_VAL task is not an array",
			"%A-%a", PatternJob{JobID: 9, ArrayJobID: 8, ArrayTaskID: SlurmNoVal, IsArray: true}, "9-4294967294"},
		{"host", "%N.log", patJob, "node1.log"},
		{"host width ignored", "%5N", patJob, "node1"},
		{"user", "%u", patJob, "alice"},
		{"user width ignored", "%9u", patJob, "alice"},
		{"job name", "%x-%j", patJob, "my job-128"},
		{"job name width ignored", "%12x", patJob, "my job"},
		{"job name not expanded again", "%x", named("50%j"), "50%j"},
		{"job name with slash", "out/%x", named("a/b"), "out/a/b"},
		{"empty job name", "[%x]", named(""), "[]"},
		{"step is batch", "%s", patJob, "batch"},
		{"step width ignored", "%4s", patJob, "batch"},
		{"jobid.step", "%J.%s", patJob, "128.batch"},
		{"node index", "%n", patJob, "0"},
		{"node index padded", "%3n", patJob, "000"},
		{"task", "%t", patJob, "0"},
		{"J padded", "%6J", patJob, "000128"},
		{"width 10", "%10j", patJob, "0000000128"},
		{"width above 10 is 10", "%12j", patJob, "0000000128"},
		{"huge width is 10", "%99999999999999999999999j", patJob, "0000000128"},
		{"width with leading zero", "%010j", patJob, "0000000128"},
		{"width 0", "%0j", patJob, "128"},
		{"width 00005", "%00005j", patJob, "00128"},
		{"width smaller than number", "%2j", patJob, "128"},
		{"all fields", "%A_%a-%J-%j-%N-%n-%s-%t-%u-%x", patJob,
			"128_4294967294-128-128-node1-0-batch-0-alice-my job"},
		// Unknown letters and other quirks of _create_batch_fname.
		{"unknown letter kept", "a%Qb", patJob, "a%Qb"},
		{"unknown then known", "%Q%j", patJob, "%Q128"},
		{"minus is not a width", "%-5j", patJob, "%-5j"},
		{"unknown after width loses percent", "%12Q", patJob, "2Q"},
		{"trailing percent", "x%", patJob, "x%"},
		{"only percent", "%", patJob, "%"},
		{"trailing width", "x%5", patJob, "x5"},
		{"trailing long width", "x%123", patJob, "x3"},
		{"width then percent", "%3%j", patJob, "3128"},
		{"width then percents", "%5%%", patJob, "5%"},
		{"space after percent", "% j", patJob, "% j"},
		// A backslash anywhere turns expansion off.
		{"backslash", `a\%j`, patJob, "a%j"},
		{"double backslash", `\\%j`, patJob, `\%j`},
		{"trailing backslash", `%j\`, patJob, "%j"},
		{"three backslashes", `a\\\b`, patJob, `a\b`},
		{"backslash far away", `%j-%u\`, patJob, "%j-%u"},
		{"empty step id is batch", "%J-%s", PatternJob{JobID: 5}, "5-batch"},
		{"bytes passed through", "é%jü", patJob, "é128ü"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExpandPattern(tc.pattern, tc.job)
			if err != nil {
				t.Fatalf("ExpandPattern(%q): %v", tc.pattern, err)
			}
			if got != tc.want {
				t.Errorf("ExpandPattern(%q) = %q, want %q", tc.pattern, got, tc.want)
			}
		})
	}
}

func TestExpandPatternErrors(t *testing.T) {
	withStep := func(s string) PatternJob { j := patJob; j.StepID = s; return j }
	tests := []struct {
		name     string
		pattern  string
		job      PatternJob
		wantPart string
	}{
		{"empty", "", patJob, "empty pattern"},
		{"NUL", "a\x00%j", patJob, "NUL byte at 1"},
		{"numeric step", "%s", withStep("0"), `step "0"`},
		{"extern step", "%J", withStep("extern"), `step "extern"`},
		{"negative node", "%n", PatternJob{NodeIndex: -1}, "node index -1"},
		{"negative task", "%t", PatternJob{TaskID: -2}, "task id -2"},
	}
	if strconv.IntSize == 64 {
		shift := 32
		tests = append(tests, struct {
			name     string
			pattern  string
			job      PatternJob
			wantPart string
		}{"task too big", "%t", PatternJob{TaskID: 1 << shift}, "task id 4294967296"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExpandPattern(tc.pattern, tc.job)
			if err == nil {
				t.Fatalf("ExpandPattern(%q) = %q, want an error", tc.pattern, got)
			}
			if !errors.Is(err, ErrBadPattern) {
				t.Errorf("error %v is not ErrBadPattern", err)
			}
			msg := err.Error()
			for _, want := range []string{tc.wantPart, "jobmap: output pattern " + strconv.Quote(tc.pattern)} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			if _, err := OutputPath("/w", tc.pattern, tc.job); !errors.Is(err, ErrBadPattern) {
				t.Errorf("OutputPath(%q): got %v, want ErrBadPattern", tc.pattern, err)
			}
		})
	}
}

func TestDefaultOutput(t *testing.T) {
	tests := []struct {
		name string
		job  PatternJob
		want string
	}{
		{"plain job", patJob, "slurm-128.out"},
		{"array task", patArrayJob, "slurm-128_2.out"},
		{"array task 0", PatternJob{JobID: 41, ArrayJobID: 40, ArrayTaskID: 0, IsArray: true}, "slurm-40_0.out"},
		{"array task NO_VAL", PatternJob{JobID: 41, ArrayJobID: 40, ArrayTaskID: SlurmNoVal, IsArray: true}, "slurm-41.out"},
		{"task id ignored when not array", PatternJob{JobID: 7, ArrayJobID: 6, ArrayTaskID: 3}, "slurm-7.out"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefaultOutput(tc.job); got != tc.want {
				t.Errorf("DefaultOutput(%+v) = %q, want %q", tc.job, got, tc.want)
			}
		})
	}
}

func TestResolvePath(t *testing.T) {
	tests := []struct{ workdir, expanded, want string }{
		{"/home/u", "out.txt", "/home/u/out.txt"},
		{"/home/u/", "out.txt", "/home/u/out.txt"},
		{"/", "x", "/x"},
		{"/home/u", "/abs/x", "/abs/x"},
		{"/home/u", "sub/x", "/home/u/sub/x"},
		{"/home/u", "./x/../y", "/home/u/./x/../y"}, // not cleaned, as Slurm
		{"", "x", "x"},
	}
	for _, tc := range tests {
		if got := ResolvePath(tc.workdir, tc.expanded); got != tc.want {
			t.Errorf("ResolvePath(%q, %q) = %q, want %q", tc.workdir, tc.expanded, got, tc.want)
		}
	}
}

func TestOutputPath(t *testing.T) {
	slashName := patJob
	slashName.Name = "/a"
	task3 := patJob
	task3.TaskID = 3
	tests := []struct {
		name             string
		workdir, pattern string
		job              PatternJob
		want             string
	}{
		{"relative", "/home/u", "out-%j.txt", patJob, "/home/u/out-128.txt"},
		{"workdir with slash", "/home/u/", "o", patJob, "/home/u/o"},
		{"absolute", "/home/u", "/scratch/%u/%j.out", patJob, "/scratch/alice/128.out"},
		{"default", "/home/u", "slurm-%A_%a.out", patArrayJob, "/home/u/slurm-128_2.out"},
		// Slurm tests the pattern, not its expansion, for a leading '/'.
		{"expansion starts with slash", "/home/u", "%x", slashName, "/home/u//a"},
		// Slurm 22.05 joins an escaped relative pattern without a '/'.
		{"escaped relative", "/home/u", `a\%j`, patJob, "/home/ua%j"},
		{"escaped relative, workdir with slash", "/home/u/", `a\%j`, patJob, "/home/u/a%j"},
		{"escaped absolute", "/home/u", `/o/a\%j`, patJob, "/o/a%j"},
		// A pattern that is only a number names the task that gets the output.
		{"other task number", "/home/u", "3", patJob, "/dev/null"},
		{"own task number", "/home/u", "3", task3, "/home/u/3"},
		{"task 0", "/home/u", "0", patJob, "/home/u/0"},
		{"number with space", "/home/u", " 3", patJob, "/dev/null"},
		{"number with plus", "/home/u", "+3", patJob, "/dev/null"},
		{"negative number", "/home/u", "-1", patJob, "/home/u/-1"},
		{"number wraps to 0", "/home/u", "4294967296", patJob, "/home/u/4294967296"},
		{"number wraps to 1", "/home/u", "4294967297", patJob, "/dev/null"},
		{"number overflows", "/home/u", "99999999999999999999999", patJob, "/home/u/99999999999999999999999"},
		{"number and text", "/home/u", "3x", patJob, "/home/u/3x"},
		{"trailing space", "/home/u", "3 ", patJob, "/home/u/3 "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := OutputPath(tc.workdir, tc.pattern, tc.job)
			if err != nil {
				t.Fatalf("OutputPath(%q, %q): %v", tc.workdir, tc.pattern, err)
			}
			if got != tc.want {
				t.Errorf("OutputPath(%q, %q) = %q, want %q", tc.workdir, tc.pattern, got, tc.want)
			}
		})
	}
	if _, err := OutputPath("", "x", patJob); !errors.Is(err, ErrBadPattern) ||
		!strings.Contains(err.Error(), "empty working directory") {
		t.Errorf("OutputPath with no workdir: got %v, want an empty working directory error", err)
	}
}

// Where OutputPath and ResolvePath(ExpandPattern) agree, they must agree.
func TestOutputPathMatchesResolvePath(t *testing.T) {
	patterns := []string{"out", "%j.out", "/abs/%u-%j", "dir/%x_%A_%a.%N", "%%j", "%5Q", "x%"}
	for _, job := range []PatternJob{patJob, patArrayJob} {
		for _, p := range patterns {
			exp, err := ExpandPattern(p, job)
			if err != nil {
				t.Fatal(err)
			}
			got, err := OutputPath("/w", p, job)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ResolvePath("/w", exp), got); diff != "" {
				t.Errorf("pattern %q (-ResolvePath +OutputPath):\n%s", p, diff)
			}
		}
	}
}

// TestFinishBatchPattern: what Slurm 24.11's slurmrestd and scontrol give for a job's
// output (%A %a %b %j %u %x, %% and widths expanded) is finished as the batch step
// expands the rest; want is the file Slurm 24.11 wrote (TestJobmap's patterns, job 11 on
// node2 as user nobody, names recorded from a trixie cluster).
func TestFinishBatchPattern(t *testing.T) {
	j := PatternJob{JobID: 11, User: "nobody", Name: "wrap", BatchHost: "node2", StepID: "batch"}
	for _, tc := range []struct{ given, want string }{
		{"three-%J.out", "three-11.out"},
		{"logs/wrap-11-%N.out", "logs/wrap-11-node2.out"},
		{"err-11-%-%n-%t.txt", "err-11-%-0-0.txt"},
		{"0007_6-nobody.%s.out", "0007_6-nobody.batch.out"},
		{"p3-%Q-%12Q.out", "p3-%Q-2Q.out"}, // the batch step's quirk after a width
		{"p5-%j-%11.out", "p5-%j-%11.out"}, // "%%j-%%%j": %-signs Slurm kept
		{"p6-a%jb.out", "p6-a%jb.out"},     // a job name holding %j
		{"%5J", "00011"},
		{"plain.out", "plain.out"},
		{`a\%N`, `a\%N`}, // escaped: Slurm expands nothing
	} {
		if got := finishBatchPattern(tc.given, &j); got != tc.want {
			t.Errorf("finishBatchPattern(%q) = %q, want %q", tc.given, got, tc.want)
		}
	}
}
