package main

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/mailprog"
)

// mailWait bounds how long an end-of-job mail waits for the job's digest.
const mailWait = 15 * time.Second

// runMail is Slurm's MailProg (slurm.conf MailProg=/usr/lib/persyst/slurm-mail, which runs
// persyst mail): every argument goes to the site's mail program (persyst.conf MailProg),
// so persyst mail takes no flags of its own.
func runMail(ctx context.Context, io stdio, args []string) error {
	// slurmctld gives MailProg only SLURM_* variables: Slurm's commands (the job map,
	// sacct) are found on the standard path.
	if os.Getenv("PATH") == "" {
		os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	confPath := config.DefaultFile()
	conf, err := loadConfig(confPath)
	if err != nil {
		// The mail goes out anyway, to the default mail program, without a digest.
		conf = config.Defaults()
		_, _ = io.err.Write([]byte("persyst mail: " + err.Error() + "\n"))
	}
	o := mailprog.Options{Args: args, Getenv: os.Getenv, Stdin: io.in, Mailer: conf.MailProg, Wait: mailWait, Stderr: io.err,
		Report: mailReport(confPath)}
	if err != nil {
		o.Report = nil
	}
	return mailprog.Send(ctx, o)
}

// mailReport finds a job's report for its mail: from the node daemons (the batch host's
// kept it at the job's end), else from the summary in Slurm's accounting.
func mailReport(confPath string) func(ctx context.Context, job string) (*digest.Report, error) {
	o := reportOptions{config: confPath, socket: socketDefault()}
	return func(ctx context.Context, job string) (*digest.Report, error) {
		id, _ := strconv.ParseUint(job, 10, 32)
		arr, task, isArray := arrayTask(job)
		r, err := findReport(ctx, o, job, id, arr, task, isArray)
		if err == nil {
			return r, nil
		}
		r, aerr := fromAccounting(ctx, job)
		if aerr == nil {
			return r, nil
		}
		return nil, errors.Join(err, aerr)
	}
}
