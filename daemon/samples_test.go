package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/sample"
)

// TestSampleFiles: samples kept on disk come back in order; a line cut short by a crash
// is skipped and logged with its file and line; another job's file under the same id
// restores nothing; a file that is not a job's samples is an error naming its first
// line; growing past the limit rewrites the file from the samples in memory; sweeping
// keeps the running jobs' files only.
func TestSampleFiles(t *testing.T) {
	var logs bytes.Buffer
	f := newSampleFiles(t.TempDir(), 1<<10, zerolog.New(&logs))
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	h := sampleHeader{JobID: 7, JobStarted: t0, Started: t0, CPUs: "0-1"}
	var all []sample.Sample
	for i := 1; i <= 3; i++ {
		s := sample.Sample{Time: t0.Add(time.Duration(i) * time.Second), Seconds: 1, Job: map[string]float64{"cpu_user_seconds": float64(i)}}
		all = append(all, s)
		if err := f.add(h, s, func() []sample.Sample { return all }); err != nil {
			t.Fatal(err)
		}
	}
	// A crash in the middle of a line.
	fh, err := os.OpenFile(f.path(7), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteString(`{"time":"2026-11-21T12:00:04Z","seco`)
	fh.Close()
	got, samples, err := f.load(7, t0)
	if err != nil || got == nil || len(samples) != 3 || samples[2].Job["cpu_user_seconds"] != 3 {
		t.Fatalf("load: header %+v, %d samples, %v", got, len(samples), err)
	}
	if !strings.Contains(logs.String(), `"line":5`) || !strings.Contains(logs.String(), "7.jsonl") {
		t.Errorf("the cut line is not logged with its file and line: %s", logs.String())
	}
	if h2, s2, err := f.load(7, t0.Add(time.Hour)); err != nil || h2 != nil || s2 != nil {
		t.Errorf("another job with id 7: %+v %d %v, want nothing", h2, len(s2), err)
	}
	if err := os.WriteFile(f.path(8), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.load(8, t0); err == nil || !strings.Contains(err.Error(), "8.jsonl:1") {
		t.Errorf("a file without a header: %v", err)
	}
	// Past the limit (4 KiB here), the file is the header and the samples in memory.
	for i := 4; i <= 60; i++ {
		s := sample.Sample{Time: t0.Add(time.Duration(i) * time.Second), Seconds: 1, Job: map[string]float64{"cpu_user_seconds": 1}}
		if err := f.add(h, s, func() []sample.Sample { return all[:2] }); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := os.Stat(f.path(7)); st.Size() > f.limit {
		t.Errorf("file of %d bytes, limit %d", st.Size(), f.limit)
	}
	f.sweep(func(id uint32) bool { return id == 7 })
	left, _ := filepath.Glob(filepath.Join(f.dir, "*"))
	if len(left) != 1 || filepath.Base(left[0]) != "7.jsonl" {
		t.Errorf("after the sweep: %v, want 7.jsonl only", left)
	}
}

// TestSampleFilesKeptOpen: a running job's file stays open for appending; when the file
// is written anew the appends go to the new one; removing it closes it.
func TestSampleFilesKeptOpen(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	f := newSampleFiles(t.TempDir(), 1<<20, zerolog.Nop())
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	h := sampleHeader{JobID: 9, JobStarted: t0, Started: t0, CPUs: "0"}
	var all []sample.Sample
	add := func(i int) {
		s := sample.Sample{Time: t0.Add(time.Duration(i) * time.Second), Seconds: 1, Job: map[string]float64{"tasks": float64(i)}}
		all = append(all, s)
		if err := f.add(h, s, func() []sample.Sample { return all }); err != nil {
			t.Fatal(err)
		}
	}
	type result struct{ Samples, Open, FDs int }
	got := func() result {
		_, samples, err := f.load(9, t0)
		if err != nil {
			t.Fatal(err)
		}
		return result{len(samples), len(f.open.files), fds() - before}
	}
	for _, step := range []struct {
		name string
		do   func()
		want result
	}{
		{"first sample: file made, then kept open", func() { add(1) }, result{1, 0, 0}},
		{"second sample: appended through the kept file", func() { add(2) }, result{2, 1, 1}},
		{"file written anew", func() {
			if err := f.write(h, all); err != nil {
				t.Fatal(err)
			}
		}, result{2, 0, 0}},
		{"appended to the new file", func() { add(3); add(4) }, result{4, 1, 1}},
		{"removed", func() { f.remove(9) }, result{0, 0, 0}},
	} {
		step.do()
		if diff := cmp.Diff(step.want, got()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
	}
}
