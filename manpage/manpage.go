// Package manpage writes persyst's manual pages (roff, man(7) macros) from what a command
// says of itself: its synopsis and its flags as the flag package defines them, so that a
// page cannot drift from the command.
package manpage

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Page is one manual page of section 1.
type Page struct {
	Name     string // "persyst-daemon"
	Summary  string // one line: what it is
	Synopsis string // "persyst daemon [flags]"
	// Description is plain text paragraphs (separated by blank lines).
	Description string
	Flags       *flag.FlagSet // nil: no flags
	SeeAlso     []string      // "persyst(1)", ...
	Version     string
	Date        time.Time
}

// Write renders p.
func Write(w io.Writer, p Page) error {
	var b strings.Builder
	date := p.Date.UTC().Format("2006-01-02")
	fmt.Fprintf(&b, ".TH %s 1 %q %q \"User Commands\"\n", strings.ToUpper(escape(p.Name)), date, "persyst "+escape(p.Version))
	b.WriteString(".SH NAME\n")
	fmt.Fprintf(&b, "%s \\- %s\n", escape(p.Name), escape(p.Summary))
	b.WriteString(".SH SYNOPSIS\n")
	fmt.Fprintf(&b, ".B %s\n", escape(p.Synopsis))
	if p.Description != "" {
		b.WriteString(".SH DESCRIPTION\n")
		for i, para := range strings.Split(strings.TrimSpace(p.Description), "\n\n") {
			if i > 0 {
				b.WriteString(".PP\n")
			}
			b.WriteString(text(para) + "\n")
		}
	}
	if p.Flags != nil {
		var flags []*flag.Flag
		p.Flags.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
		sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
		if len(flags) > 0 {
			b.WriteString(".SH OPTIONS\n")
		}
		for _, f := range flags {
			arg, usage := flag.UnquoteUsage(f)
			b.WriteString(".TP\n")
			if arg != "" {
				fmt.Fprintf(&b, ".BI \\-\\-%s \" %s\"\n", escape(f.Name), escape(arg))
			} else {
				fmt.Fprintf(&b, ".B \\-\\-%s\n", escape(f.Name))
			}
			line := usage
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
				line += fmt.Sprintf(" (default: %s)", f.DefValue)
			}
			b.WriteString(text(line) + "\n")
		}
	}
	if len(p.SeeAlso) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		var refs []string
		for _, s := range p.SeeAlso {
			name, sec, ok := strings.Cut(strings.TrimSuffix(s, ")"), "(")
			if !ok {
				sec = "1"
			}
			refs = append(refs, fmt.Sprintf(".BR %s (%s)", escape(name), sec))
		}
		b.WriteString(strings.Join(refs, ",\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// escape makes s safe inside a roff line: backslashes and hyphens (which roff would make
// hyphenation points) escaped.
func escape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	return strings.ReplaceAll(s, "-", `\-`)
}

// text is escaped running text: a line that would start with a control character (. or ')
// is protected with \&.
func text(s string) string {
	var out []string
	for _, l := range strings.Split(escape(s), "\n") {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			l = `\&` + l
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// WriteFiles writes the pages into dir, as <Name>.1, with version and date.
func WriteFiles(dir, version string, date time.Time, pages []Page) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range pages {
		p.Version, p.Date = version, date
		f, err := os.Create(filepath.Join(dir, p.Name+".1"))
		if err != nil {
			return err
		}
		if err := Write(f, p); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// BuildDate is the date pages carry: SOURCE_DATE_EPOCH's for reproducible builds, else
// now.
func BuildDate() time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var sec int64
		if _, err := fmt.Sscan(s, &sec); err == nil {
			return time.Unix(sec, 0)
		}
	}
	return time.Now()
}
