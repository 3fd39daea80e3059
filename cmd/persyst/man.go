package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/persyst/persyst/manpage"
)

// manCommand is the hidden command that writes persyst's manual pages (make package).
const manCommand = "man"

// helpArgs are the arguments that make a command define its flags and stop (-h).
func helpArgs(name string) []string {
	if name == "balance" {
		return []string{"balance", "simulate", "-h"}
	}
	return []string{name, "-h"}
}

// commandFlags runs a command with -h and returns the flags it defined (nil: none).
func commandFlags(ctx context.Context, name string) *flag.FlagSet {
	var got *flag.FlagSet
	run(ctx, helpArgs(name), stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard, onFlags: func(fs *flag.FlagSet) { got = fs }})
	return got
}

// flagless are the commands that take no flags of their own (their arguments belong to
// another program): their pages say so.
var flagless = map[string]struct{ synopsis, text string }{
	"mail": {"persyst mail -s SUBJECT RECIPIENT...",
		"Slurm's MailProg (slurm.conf: MailProg=/usr/lib/persyst/slurm-mail). slurmctld runs it for a job's mail with " +
			"mail(1)'s arguments, the body on standard input and the job in SLURM_JOB_* variables. For the mails of a job's " +
			"end (Ended, Failed) persyst mail appends the job's digest to the body, from the node daemons or from the summary " +
			"in Slurm's accounting, waiting for it up to 15 seconds; then it runs the site's mail program (persyst.conf " +
			"MailProg, default /usr/bin/mail) with the same arguments. Without a digest the mail goes out as Slurm wrote it. " +
			"All arguments go to the mail program: persyst mail has no flags of its own."},
}

// runMan writes persyst.1 and persyst-COMMAND.1 for every command into --dir.
func runMan(ctx context.Context, io stdio, args []string) error {
	fs := flagSet(manCommand, io)
	dir := fs.String("dir", ".", "directory to write the pages into")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	date := time.Now()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" { // reproducible builds
		var sec int64
		if _, err := fmt.Sscan(s, &sec); err == nil {
			date = time.Unix(sec, 0)
		}
	}
	var see []string
	for _, c := range commands {
		if c.name != "version" {
			see = append(see, "persyst-"+c.name+"(1)")
		}
	}
	write := func(p manpage.Page) error {
		p.Version, p.Date = version, date
		f, err := os.Create(filepath.Join(*dir, p.Name+".1"))
		if err != nil {
			return err
		}
		if err := manpage.Write(f, p); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if err := write(manpage.Page{Name: "persyst", Summary: "an always-on job performance monitor for Slurm clusters",
		Synopsis: "persyst COMMAND [flags]", Description: strings.TrimSuffix(usage(), "\n"), SeeAlso: see}); err != nil {
		return err
	}
	for _, c := range commands {
		if c.name == "version" {
			continue
		}
		if d, ok := flagless[c.name]; ok {
			summary, _, _ := strings.Cut(c.synopsis, ": persyst ")
			if err := write(manpage.Page{Name: "persyst-" + c.name, Summary: summary, Synopsis: d.synopsis, Description: d.text,
				SeeAlso: []string{"persyst(1)"}}); err != nil {
				return err
			}
			continue
		}
		fs := commandFlags(ctx, c.name)
		synopsis := "persyst " + c.name + " [flags]"
		if fs != nil {
			synopsis = fs.Name() + " [flags]"
			if strings.Contains(fs.Name(), "[flags]") {
				synopsis = fs.Name()
			}
		}
		summary, _, _ := strings.Cut(c.synopsis, ": persyst ")
		if err := write(manpage.Page{Name: "persyst-" + c.name, Summary: summary, Synopsis: synopsis, Flags: fs,
			SeeAlso: []string{"persyst(1)"}}); err != nil {
			return err
		}
	}
	return nil
}
