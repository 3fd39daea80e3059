// Package mailprog is `persyst mail`, a wrapper for Slurm's MailProg: slurmctld runs it
// for a job's mail as it would run mail(1) (`-s SUBJECT RECIPIENT`, the body on standard
// input, the job in SLURM_JOB_* variables). For the mails of a job's end (Ended, Failed)
// it appends the job's digest to the body; then it hands the mail, with the same
// arguments, to the site's real mail program.
//
// The mail is never lost for persyst's sake: when the digest cannot be had within the
// wait (the job opted out, the daemon and accounting do not know it), or the job is not
// one persyst follows, the mail goes out as Slurm wrote it. Only the real mail program's
// failure is an error.
package mailprog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/persyst/persyst/digest"
)

// DefaultMailer is the mail program persyst hands mails to unless persyst.conf says.
const DefaultMailer = "/usr/bin/mail"

// MaxBody bounds the body read from standard input.
const MaxBody = 1 << 20

// Options are one mail's.
type Options struct {
	// Args are the arguments slurmctld gave (-s SUBJECT RECIPIENT...), passed on as they
	// are.
	Args []string
	// Getenv reads the job's SLURM_JOB_* variables.
	Getenv func(string) string
	Stdin  io.Reader
	// Report finds the job's report ("123" or "120_3"); it is retried until Wait passes.
	Report func(ctx context.Context, job string) (*digest.Report, error)
	Wait   time.Duration
	// Mailer is the real mail program; Send runs it with Args and the body on its input.
	Mailer string
	Stderr io.Writer
}

// loopGuard is set in the mail program's environment: a mail program that is persyst mail
// again (through a wrapper) finds it and stops.
const loopGuard = "PERSYST_MAIL_SENT"

// endTypes are the mail types of a job's end (SLURM_JOB_MAIL_TYPE).
var endTypes = map[string]bool{"Ended": true, "Failed": true}

// Send appends the digest to an end-of-job mail and hands the mail to the mailer.
func Send(ctx context.Context, o Options) error {
	if o.Mailer == "" {
		o.Mailer = DefaultMailer
	}
	if err := notSelf(o.Mailer); err != nil {
		return err
	}
	if o.Getenv(loopGuard) != "" {
		return fmt.Errorf("mail program %s started persyst mail again: set MailProg in persyst.conf to the site's mail program, not to persyst", o.Mailer)
	}
	body, err := readBody(o.Stdin)
	if err != nil {
		fmt.Fprintf(o.Stderr, "persyst mail: %v (the mail goes out without the rest of its body)\n", err)
	}
	if job := jobName(o.Getenv); job != "" && endTypes[o.Getenv("SLURM_JOB_MAIL_TYPE")] && o.Report != nil {
		if text, err := digestText(ctx, o, job); err != nil {
			fmt.Fprintf(o.Stderr, "persyst mail: job %s: no digest: %v\n", job, err)
		} else {
			if len(body) > 0 && !bytes.HasSuffix(body, []byte("\n")) {
				body = append(body, '\n')
			}
			if len(body) > 0 {
				body = append(body, '\n')
			}
			body = append(body, text...)
		}
	}
	cmd := exec.CommandContext(ctx, o.Mailer, o.Args...)
	cmd.Stdin = bytes.NewReader(body)
	cmd.Env = append(os.Environ(), loopGuard+"=1")
	cmd.Stdout, cmd.Stderr = o.Stderr, o.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mail program %s: %w", o.Mailer, err)
	}
	return nil
}

// jobName is the job the mail is about, as Slurm's commands name it.
func jobName(getenv func(string) string) string {
	if a, t := getenv("SLURM_ARRAY_JOB_ID"), getenv("SLURM_ARRAY_TASK_ID"); a != "" && t != "" && isDigits(a) && isDigits(t) {
		return a + "_" + t
	}
	if j := getenv("SLURM_JOB_ID"); isDigits(j) {
		return j
	}
	return ""
}

func isDigits(s string) bool {
	if s == "" || len(s) > 10 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// digestText asks for the job's report until it comes or the wait is over.
func digestText(ctx context.Context, o Options, job string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, max(o.Wait, time.Second))
	defer cancel()
	for {
		r, err := o.Report(ctx, job)
		if err == nil {
			return digest.Text(*r, digest.TextOptions{}), nil
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// readBody reads the body slurmctld gives (usually none), at most MaxBody bytes.
func readBody(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxBody+1))
	if len(b) > MaxBody {
		return b[:MaxBody], fmt.Errorf("body longer than %d bytes, cut", MaxBody)
	}
	return b, err
}

// notSelf refuses a mailer that is persyst itself (MailProg and persyst.conf's MailProg
// naming the same program would loop).
func notSelf(mailer string) error {
	if !filepath.IsAbs(mailer) {
		return fmt.Errorf("mail program %q: want an absolute path", mailer)
	}
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	a, err1 := os.Stat(self)
	b, err2 := os.Stat(mailer)
	if err1 == nil && err2 == nil && os.SameFile(a, b) {
		return errors.New("the mail program is persyst itself: set MailProg in persyst.conf to the site's mail program (e.g. /usr/bin/mail)")
	}
	if err2 != nil {
		return fmt.Errorf("mail program: %w", err2)
	}
	if strings.TrimSpace(mailer) == "" {
		return errors.New("no mail program")
	}
	return nil
}

// recipientRE is a recipient Mail hands to the mail program: a user name or an address,
// never one that starts with '-' (it would be an option of the mail program).
var recipientRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._@+-]{0,127}$`)

// Mail hands one mail persyst wrote (an efficiency report) to the site's mail program:
// `MAILER -s SUBJECT RECIPIENT`, the body on its input, within a minute. The subject's
// control characters are replaced by spaces (no header can be forged).
func Mail(ctx context.Context, mailer, to, subject, body string) error {
	if mailer == "" {
		mailer = DefaultMailer
	}
	if err := notSelf(mailer); err != nil {
		return err
	}
	if !recipientRE.MatchString(to) {
		return fmt.Errorf("recipient %q: not a user name or address", to)
	}
	subject = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, subject)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mailer, "-s", subject, to)
	cmd.Stdin = strings.NewReader(body)
	cmd.Env = append(os.Environ(), loopGuard+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mail program %s: %w: %s", mailer, err, strings.TrimSpace(out.String()))
	}
	return nil
}
