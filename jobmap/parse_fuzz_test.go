package jobmap

import (
	"errors"
	"strings"
	"testing"

	"github.com/persyst/persyst/slurmver"
)

// FuzzExpandPattern: any output pattern either expands or is refused as a bad pattern;
// the expansion never holds a NUL byte and stays bounded.
func FuzzExpandPattern(f *testing.F) {
	for _, s := range []string{"slurm-%j.out", "%x-%A_%a.%N", "%10j", "%%j", "\\%j", "out/%u/%t.log", "%"} {
		f.Add(s, "job", uint32(42))
	}
	f.Fuzz(func(t *testing.T, pattern, name string, id uint32) {
		got, err := ExpandPattern(pattern, PatternJob{JobID: id, User: "u", Name: name, BatchHost: "node1", StepID: "batch"})
		if err != nil {
			if !errors.Is(err, ErrBadPattern) {
				t.Fatalf("error %v is not ErrBadPattern", err)
			}
			return
		}
		if strings.ContainsRune(got, 0) && !strings.ContainsRune(pattern+name, 0) {
			t.Fatalf("expansion of %q holds a NUL byte", pattern)
		}
		if len(got) > len(pattern)*16+len(name)*len(pattern)+64 {
			t.Fatalf("expansion of %q is %d bytes", pattern, len(got))
		}
	})
}

// FuzzParseScontrolLine: any `scontrol show job -o -d` line parses into a job or an
// error, never a panic.
func FuzzParseScontrolLine(f *testing.F) {
	for _, s := range []string{
		"JobId=5 JobName=wrap UserId=nobody(65534) GroupId=nogroup(65534) JobState=RUNNING NodeList=node[1-2] BatchHost=node1 NumNodes=2 StdOut=/tmp/slurm-5.out WorkDir=/tmp",
		"JobId=7 ArrayJobId=6 ArrayTaskId=1 Nodes=node1 CPU_IDs=0-1 Mem=100 TimeLimit=1-00:00:00 MinMemoryNode=1G",
		"JobId=x", "", "=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		j, err := parseScontrolLine(line, slurmver.Release{}, func(s string) string { return s })
		if err == nil && j == nil {
			t.Fatalf("no job and no error for %q", line)
		}
	})
}
