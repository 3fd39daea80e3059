package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/standalone"
)

// TestMain lets this test binary stand in for persyst where `persyst run` re-executes
// itself (/proc/self/exe is the test binary here).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == standalone.ChildCommand {
		os.Exit(standalone.Child(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// TestWiring runs the command line as persyst's main does and checks the exit code and
// what is printed: usage errors exit 2, failures 1, and each names what is wrong.
func TestWiring(t *testing.T) {
	dir := t.TempDir()
	conf := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty := conf("empty.conf", "")
	badKey := conf("bad.conf", "CycleSeconds=5\nCycleSecs=5\n")
	badSource := conf("source.conf", "\nMetricSource.shedstat=off\n")
	badThreshold := conf("threshold.conf", "Threshold.no_such_property=3\n")
	missingSock := filepath.Join(dir, "no.sock")
	db := twoJobsOneID(t, filepath.Join(dir, "front.db"))
	tests := []struct {
		name     string
		args     []string
		code     int
		out, err string // substrings of stdout and stderr
	}{
		{"no command", nil, 2, "", "usage: persyst COMMAND"},
		{"unknown command", []string{"deamon"}, 2, "", `unknown command "deamon"`},
		{"help", []string{"help"}, 0, "calibrate", ""},
		{"version", []string{"version"}, 0, "persyst dev", ""},
		{"--version", []string{"--version"}, 0, "persyst dev", ""},
		{"version with arguments", []string{"version", "x"}, 2, "", "unexpected arguments"},
		{"a command's help", []string{"jobs", "-h"}, 0, "", "-socket"},
		{"unknown flag", []string{"daemon", "--bogus"}, 2, "", "flag provided but not defined: -bogus"},
		{"cycle below 1 s", []string{"daemon", "--config", empty, "--cycle", "500ms"}, 2, "", "--cycle 500ms: the cycle must be at least 1s"},
		{"bad configuration", []string{"daemon", "--config", badKey}, 1, "", badKey + `:2: unknown key "CycleSecs"`},
		{"unknown metric source", []string{"daemon", "--config", badSource}, 1, "", badSource + `:2: MetricSource.shedstat: no metric source "shedstat"`},
		{"bad log level", []string{"daemon", "--config", empty, "--log-level", "loud"}, 2, "", "--log-level"},
		{"report without a job", []string{"report"}, 2, "", "want one JOBID"},
		{"report of a bad job id", []string{"report", "12x"}, 2, "", `bad JOBID "12x"`},
		{"report without a daemon", []string{"report", "--socket", missingSock, "7"}, 1, "", missingSock},
		{"jobs with arguments", []string{"jobs", "x"}, 2, "", "unexpected arguments"},
		{"jobs without a daemon", []string{"jobs", "--socket", missingSock}, 1, "", missingSock},
		{"balance without simulate", []string{"balance"}, 2, "", "persyst balance simulate"},
		{"balance with a bad preset", []string{"balance", "simulate", "--preset", "tiny"}, 2, "", `--preset "tiny"`},
		{"balance simulate", []string{"balance", "simulate", "--nodes", "64", "--collectors", "4", "--syncs", "0", "--cycles", "2", "--min-jobs", "4", "--max-jobs", "8"}, 0, "", ""},
		{"calibrate for no time", []string{"calibrate", "--seconds", "0"}, 2, "", "--seconds 0"},
		{"frontend with bad loads", []string{"frontend", "--loads", "some"}, 2, "", `--loads "some"`},
		{"frontend without nodes", []string{"frontend", "--config", empty}, 1, "", "--nodes"},
		{"collector with a bad threshold", []string{"collector", "--config", badThreshold, "--listen", "127.0.0.1:0", "--db", filepath.Join(dir, "c.db")}, 1, "", badThreshold + ":1: Threshold.no_such_property: no such property"},
		{"run without a command", []string{"run", "--config", empty}, 2, "", "no command given"},
		{"run with a short interval", []string{"run", "--interval", "10ms", "--", "true"}, 2, "", "--interval 10ms"},
		{"run passes the exit status", []string{"run", "--config", empty, "--", "sh", "-c", "exit 3"}, 3, "", "persyst:"},
		{"run of a missing command", []string{"run", "--config", empty, "--", filepath.Join(dir, "nothing")}, 127, "", "nothing"},
		{"run of a file that cannot be run", []string{"run", "--config", empty, "--", empty}, 126, "", "permission denied"},
		{"run with an interval beyond an hour", []string{"run", "--interval", "100000h", "--", "true"}, 2, "", "between 1s and 1h"},
		{"db without an action", []string{"db"}, 2, "", "persyst db stats|check"},
		{"db with an unknown action", []string{"db", "drop", "--db", db}, 2, "", "want stats, check, prune, vacuum, export or copy"},
		{"db copy without --to", []string{"db", "copy", "--db", db}, 2, "", "--to names"},
		{"db copy", []string{"db", "copy", "--db", db, "--to", filepath.Join(dir, "copy.db")}, 0, "jobs                            2 rows", ""},
		{"db copy into a store with jobs", []string{"db", "copy", "--db", db, "--to", filepath.Join(dir, "copy.db")}, 1, "", "has 2 jobs already"},
		{"db check of the copy", []string{"db", "check", "--db", filepath.Join(dir, "copy.db")}, 0, "no problems found", ""},
		{"db stats", []string{"db", "stats", "--db", db}, 0, "cluster b: 1 jobs", ""},
		{"db check", []string{"db", "check", "--db", db}, 0, "no problems found", ""},
		{"db export", []string{"db", "export", "--db", db, "--from", "2000-01-01", "--to", "2100-01-01"}, 0, `"cluster":"a","job_id":5,"user":"alice"`, ""},
		{"db export, days the wrong way", []string{"db", "export", "--db", db, "--from", "2026-01-02", "--to", "2026-01-01"}, 2, "", "is not after"},
		{"report of an id two clusters share", []string{"report", "--db", db, "5"}, 0, "job 5", "2 jobs in " + db + " have id 5"},
		{"report of one cluster's job", []string{"report", "--db", db, "--cluster", "a", "5"}, 0, "job 5", "of cluster a"},
		{"report of a cluster without the job", []string{"report", "--db", db, "--cluster", "c", "5"}, 1, "", "none of cluster c"},
		{"report --cluster without --db", []string{"report", "--cluster", "a", "5"}, 2, "", "--cluster needs --db"},
		{"site", []string{"site", "--db", db, "--config", empty, "--period", "7d"}, 0, "2 jobs. CPU-hours: 12 allocated", ""},
		{"site by cluster as CSV", []string{"site", "--db", db, "--config", empty, "--period", "7d", "--by", "cluster", "--csv"}, 0, ",b,1,8,", ""},
		{"site's jobs as JSON", []string{"site", "--db", db, "--config", empty, "--table", "jobs", "--json"}, 0, `"cluster": "a", "job_id": 5,`, ""},
		{"site with a bad period", []string{"site", "--db", db, "--period", "soon"}, 2, "", `period "soon"`},
		{"site as CSV and JSON", []string{"site", "--db", db, "--csv", "--json"}, 2, "", "not both"},
		{"site by what it has not", []string{"site", "--db", db, "--by", "project"}, 2, "", `"project": want cluster`},
		{"site with an unknown table", []string{"site", "--db", db, "--config", empty, "--table", "all"}, 2, "", `--table "all"`},
		{"db prune", []string{"db", "prune", "--db", db, "--config", empty, "--jobs", "1h"}, 0, "2 jobs", ""},
		{"db prune, a bad retention", []string{"db", "prune", "--db", db, "--jobs", "soon"}, 2, "", "want days"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), tc.args, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), tc.out) {
				t.Errorf("stdout lacks %q:\n%s", tc.out, out.String())
			}
			if !strings.Contains(errOut.String(), tc.err) {
				t.Errorf("stderr lacks %q:\n%s", tc.err, errOut.String())
			}
		})
	}
}

// TestUsageListsEveryCommand: the usage names every command the dispatcher knows.
func TestUsageListsEveryCommand(t *testing.T) {
	u := usage()
	for _, c := range commands {
		if !strings.Contains(u, "\n  "+c.name+" ") {
			t.Errorf("usage does not list %q:\n%s", c.name, u)
		}
	}
}

// twoJobsOneID writes a database at path with job 5 of cluster a (alice's) and job 5 of
// cluster b (bob's), both ended two hours ago.
func twoJobsOneID(t *testing.T, path string) string {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	end := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	for i, c := range []string{"a", "b"} {
		start := end.Add(-time.Duration(i+1) * time.Hour)
		r := digest.Report{Schema: digest.SchemaVersion, JobID: 5, Nodes: []string{"n1"}, NNodes: 1, CPUs: 4,
			Start: start, End: end, Seconds: end.Sub(start).Seconds(), Findings: []properties.Result{}}
		if err := st.Keep(ctx, store.Job{Cluster: c, User: []string{"alice", "bob"}[i], Start: start, End: end}, r); err != nil {
			t.Fatal(err)
		}
	}
	return path
}
