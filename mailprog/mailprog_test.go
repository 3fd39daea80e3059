package mailprog

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
)

// capture writes a mail program (a stand-in for the site's MTA; the integration test
// hands mails to a real one) that records its arguments and input.
func capture(t *testing.T) (mailer, out string) {
	dir := t.TempDir()
	out = filepath.Join(dir, "mail.txt")
	mailer = filepath.Join(dir, "mail")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + out + ".args\ncat > " + out + "\n"
	if err := os.WriteFile(mailer, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return mailer, out
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestSend(t *testing.T) {
	rep := &digest.Report{JobID: 77, Nodes: []string{"node1"}, NNodes: 1, CPUs: 2, Seconds: 30, Samples: 31,
		Findings: []properties.Result{}}
	tests := []struct {
		name     string
		env      map[string]string
		body     string
		report   func(calls *int) func(context.Context, string) (*digest.Report, error)
		wantBody string
		wantJob  string
	}{
		{"an end mail gets the digest", map[string]string{"SLURM_JOB_ID": "77", "SLURM_JOB_MAIL_TYPE": "Ended"}, "",
			okAfter(0, rep), "persyst: job 77: no issues found (2 CPUs, 30 s, 31 samples)\n", "77"},
		{"after Slurm's own body", map[string]string{"SLURM_JOB_ID": "77", "SLURM_JOB_MAIL_TYPE": "Failed"}, "site text",
			okAfter(0, rep), "site text\n\npersyst: job 77: no issues found (2 CPUs, 30 s, 31 samples)\n", "77"},
		{"an array task is named as Slurm names it", map[string]string{"SLURM_JOB_ID": "80", "SLURM_ARRAY_JOB_ID": "79", "SLURM_ARRAY_TASK_ID": "1", "SLURM_JOB_MAIL_TYPE": "Ended"}, "",
			okAfter(0, rep), "persyst: job 77: no issues found (2 CPUs, 30 s, 31 samples)\n", "79_1"},
		{"the digest is waited for", map[string]string{"SLURM_JOB_ID": "77", "SLURM_JOB_MAIL_TYPE": "Ended"}, "",
			okAfter(2, rep), "persyst: job 77: no issues found (2 CPUs, 30 s, 31 samples)\n", "77"},
		{"a start mail is passed on as it is", map[string]string{"SLURM_JOB_ID": "77", "SLURM_JOB_MAIL_TYPE": "Began"}, "hello",
			okAfter(0, rep), "hello", ""},
		{"no digest: the mail still goes", map[string]string{"SLURM_JOB_ID": "77", "SLURM_JOB_MAIL_TYPE": "Ended"}, "",
			okAfter(1000, rep), "", "77"},
		{"a job id that is no number is not looked up", map[string]string{"SLURM_JOB_ID": "77;rm", "SLURM_JOB_MAIL_TYPE": "Ended"}, "",
			okAfter(0, rep), "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mailer, out := capture(t)
			calls := 0
			var asked string
			find := tc.report(&calls)
			var errb bytes.Buffer
			err := Send(context.Background(), Options{Args: []string{"-s", "Slurm Job_id=77 Ended", "alice"}, Getenv: env(tc.env),
				Stdin: strings.NewReader(tc.body), Mailer: mailer, Wait: 1500 * time.Millisecond, Stderr: &errb,
				Report: func(ctx context.Context, job string) (*digest.Report, error) { asked = job; return find(ctx, job) }})
			if err != nil {
				t.Fatal(err)
			}
			body, _ := os.ReadFile(out)
			if diff := cmp.Diff(tc.wantBody, string(body)); diff != "" {
				t.Errorf("body (-want +got):\n%s\nstderr: %s", diff, errb.String())
			}
			args, _ := os.ReadFile(out + ".args")
			if diff := cmp.Diff("-s\nSlurm Job_id=77 Ended\nalice\n", string(args)); diff != "" {
				t.Errorf("arguments passed on (-want +got):\n%s", diff)
			}
			if asked != tc.wantJob {
				t.Errorf("asked for job %q, want %q", asked, tc.wantJob)
			}
		})
	}
}

// okAfter finds the report at the n+1th call.
func okAfter(n int, r *digest.Report) func(*int) func(context.Context, string) (*digest.Report, error) {
	return func(calls *int) func(context.Context, string) (*digest.Report, error) {
		return func(context.Context, string) (*digest.Report, error) {
			*calls++
			if *calls <= n {
				return nil, errors.New("not yet")
			}
			return r, nil
		}
	}
}

func TestSendRefuses(t *testing.T) {
	mailer, _ := capture(t)
	self, _ := os.Executable()
	cases := []struct {
		name, mailer string
		env          map[string]string
		want         string
	}{
		{"itself", self, nil, "the mail program is persyst itself"},
		{"a wrapper that calls persyst mail again", mailer, map[string]string{loopGuard: "1"}, "started persyst mail again"},
		{"relative", "mail", nil, "want an absolute path"},
		{"missing", "/nonexistent/mail", nil, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Send(context.Background(), Options{Mailer: c.mailer, Getenv: env(c.env), Stderr: &bytes.Buffer{}})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Send = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestMailerFailureIsAnError(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "mail")
	os.WriteFile(bad, []byte("#!/bin/sh\ncat >/dev/null\nexit 3\n"), 0o755)
	err := Send(context.Background(), Options{Mailer: bad, Getenv: env(nil), Stderr: &bytes.Buffer{}, Stdin: strings.NewReader("x")})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Send = %v, want the mail program's failure", err)
	}
}
