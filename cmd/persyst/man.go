package main

import (
	"context"
	"flag"
	"io"
	"strings"

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
	return manpage.WriteFiles(*dir, version, manpage.BuildDate(), manPages(ctx))
}

// manPages are persyst's page and a page per command (but version), from what each
// command says of itself.
func manPages(ctx context.Context) []manpage.Page {
	var see []string
	for _, c := range commands {
		if c.name != "version" {
			see = append(see, "persyst-"+c.name+"(1)")
		}
	}
	pages := []manpage.Page{{Name: "persyst", Summary: "an always-on job performance monitor for Slurm clusters",
		Synopsis: "persyst COMMAND [flags]", Description: strings.TrimSuffix(usage(), "\n"), SeeAlso: see}}
	for _, c := range commands {
		if c.name == "version" {
			continue
		}
		summary, _, _ := strings.Cut(c.synopsis, ": persyst ")
		p := manpage.Page{Name: "persyst-" + c.name, Summary: summary, SeeAlso: []string{"persyst(1)"}}
		if d, ok := flagless[c.name]; ok {
			p.Synopsis, p.Description = d.synopsis, d.text
			pages = append(pages, p)
			continue
		}
		p.Flags = commandFlags(ctx, c.name)
		p.Synopsis = "persyst " + c.name + " [flags]"
		if fs := p.Flags; fs != nil {
			p.Synopsis = fs.Name() + " [flags]"
			if strings.Contains(fs.Name(), "[flags]") {
				p.Synopsis = fs.Name()
			}
		}
		pages = append(pages, p)
	}
	return pages
}
