package jobmap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/slurmver"
)

// TestCommandsParser: the data parser Slurm's commands of each release are read with.
func TestCommandsParser(t *testing.T) {
	for _, tc := range []struct {
		rel  slurmver.Release
		want string // "": none, the text form only
	}{
		{slurmver.Release{}, APIv0038}, // not known: read as the oldest tested
		{slurmver.Release{Major: 22, Minor: 5, Micro: 8}, APIv0038},
		{slurmver.Release{Major: 23, Minor: 2}, ""},
		{slurmver.Release{Major: 24, Minor: 5}, ""},
		{slurmver.Release{Major: 24, Minor: 11, Micro: 5}, APIv0042},
		{slurmver.Release{Major: 26, Minor: 5}, APIv0042},
	} {
		got := ""
		if p := commandsParser(tc.rel); p != nil {
			got = p.version()
		}
		if got != tc.want {
			t.Errorf("Slurm %v: commands read with %q, want %q", tc.rel, got, tc.want)
		}
	}
	// slurmrestd's and the commands' adapters are the same data parsers, preferred alike.
	rest, err := restParsers("http://slurmrestd", http.DefaultClient, nil)
	if err != nil {
		t.Fatal(err)
	}
	versions := func(ps []dataParser) (out []string) {
		for _, p := range ps {
			out = append(out, p.version())
		}
		return out
	}
	if diff := cmp.Diff(versions(commandParsers), versions(rest)); diff != "" {
		t.Errorf("data parsers (-commands +slurmrestd):\n%s", diff)
	}
}

// TestCLISourceByRelease: for each release persyst is tested with, the commands' source
// learns the release once and reads the jobs from the JSON of the data parser it chose, as
// the recording's JSON command gives them, without the text form.
func TestCLISourceByRelease(t *testing.T) {
	for _, d := range slurmver.Tested {
		rel, series := d.Slurm, d.Slurm.Series()
		t.Run(series, func(t *testing.T) {
			dir := filepath.Join("testdata", "slurm-"+series)
			files := map[string]string{
				"scontrol --json=" + APIv0042 + " show job": "scontrol-json.json",
				"squeue --json":           "squeue.json",
				"scontrol show job -o -d": "scontrol-show-job-o-d.txt",
			}
			calls := map[string]int{}
			run := func(_ context.Context, name string, args ...string) ([]byte, error) {
				cmd := name + " " + strings.Join(args, " ")
				calls[cmd]++
				switch {
				case cmd == "scontrol --version":
					return []byte("slurm " + series + ".1\n"), nil
				case files[cmd] == "":
					return nil, fmt.Errorf("%s: exit status 1: unrecognized option", cmd)
				}
				return os.ReadFile(filepath.Join(dir, files[cmd]))
			}
			jobs, err := NewCLISource(run, 0, zerolog.Nop()).Jobs(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if calls["scontrol --version"] != 1 || calls["scontrol show job -o -d"] != 0 {
				t.Errorf("commands run: %v; want the release asked once and no text form", calls)
			}
			command := "squeue --json"
			if rel.Has(slurmver.DataParserPlugins) {
				command = "scontrol --json"
			}
			if diff := cmp.Diff(readRecorded(t, dir, rel)[command], jobs); diff != "" {
				t.Errorf("jobs differ from %s's (-%s +CLISource):\n%s", command, command, diff)
			}
		})
	}
}

// TestRestSourceChoosesNewest: for each release persyst is tested with, a slurmrestd
// that lists v0.0.38 besides the recording's data parser is asked through the newest, and
// its request chain reads the recording as that data parser's documents read.
func TestRestSourceChoosesNewest(t *testing.T) {
	for _, d := range slurmver.Tested {
		rel, series := d.Slurm, d.Slurm.Series()
		t.Run(series, func(t *testing.T) {
			dir := filepath.Join("testdata", "slurm-"+series)
			p := commandsParser(rel)
			doc, err := os.ReadFile(filepath.Join(dir, "restd-jobs.json"))
			if err != nil {
				t.Fatal(err)
			}
			s := recordedRestd(t, dir, p.version(), doc)
			want, err := p.parse(doc, func(n string) string { return n })
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if api, err := s.API(ctx); api != p.version() || err != nil {
				t.Fatalf("API = %q, %v; want %s", api, err, p.version())
			}
			if !strings.Contains(s.Name(), "(data parser "+p.version()+")") {
				t.Errorf("Name = %q", s.Name())
			}
			got, err := s.Jobs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Jobs (-parse +RestSource):\n%s", diff)
			}
			one, err := s.Job(ctx, want[0].ID())
			if err != nil || one.JobID != want[0].JobID || one.Stdout != want[0].Stdout {
				t.Errorf("Job(%s) = %+v, %v", want[0].ID(), one, err)
			}
			if _, err := s.Job(ctx, "424242"); !errors.Is(err, ErrNoJob) {
				t.Errorf("Job(424242) error = %v, want ErrNoJob", err)
			}
		})
	}
}

// recordedRestd serves a recording's slurmrestd answers (doc: its jobs) at data parser
// api's paths, and lists v0.0.38's besides.
func recordedRestd(t *testing.T, dir, api string, doc []byte) *RestSource {
	t.Helper()
	nodes, err := os.ReadFile(filepath.Join(dir, "restd-nodes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]json.RawMessage
	var jobs []map[string]any
	if err := json.Unmarshal(doc, &all); err != nil || json.Unmarshal(all["jobs"], &jobs) != nil {
		t.Fatalf("%s/restd-jobs.json: %v", dir, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/openapi/v3", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"paths":{"/slurm/%s/job/{job_id}":{},"/slurm/%s/job/{job_id}":{}}}`, api, APIv0038)
	})
	// v0.0.42's client asks for ".../jobs/", v0.0.38's for ".../jobs".
	for _, p := range []string{"", "/"} {
		mux.HandleFunc("/slurm/"+api+"/jobs"+p, func(w http.ResponseWriter, r *http.Request) { w.Write(doc) })
		mux.HandleFunc("/slurm/"+api+"/nodes"+p, func(w http.ResponseWriter, r *http.Request) { w.Write(nodes) })
	}
	mux.HandleFunc("/slurm/"+api+"/job/", func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/slurm/"+api+"/job/")
		for _, j := range jobs {
			if fmt.Sprint(j["job_id"]) == id {
				b, _ := json.Marshal(map[string]any{"meta": all["meta"], "errors": []any{}, "jobs": []any{j}})
				w.Write(b)
				return
			}
		}
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"errors":[{"error":"Invalid job id specified","error_number":2017}],"jobs":[]}`)
	})
	sock := filepath.Join(t.TempDir(), "restd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	s, err := NewRestSource(RestConfig{URL: "unix:" + sock})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
