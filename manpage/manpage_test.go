package manpage

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWrite(t *testing.T) {
	fs := flag.NewFlagSet("persyst x", flag.ContinueOnError)
	fs.String("db", "/var/lib/x.db", "the `path` of the database")
	fs.Bool("json", false, "JSON out")
	var b bytes.Buffer
	err := Write(&b, Page{Name: "persyst-x", Summary: "does x", Synopsis: "persyst x [flags]",
		Description: ".dotted line\n\nback\\slash", Flags: fs, SeeAlso: []string{"persyst(1)", "slurm.conf(5)"},
		Version: "1.2", Date: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	want := `.TH PERSYST\-X 1 "2026-11-24" "persyst 1.2" "User Commands"
.SH NAME
persyst\-x \- does x
.SH SYNOPSIS
.B persyst x [flags]
.SH DESCRIPTION
\&.dotted line
.PP
back\eslash
.SH OPTIONS
.TP
.BI \-\-db " path"
the path of the database (default: /var/lib/x.db)
.TP
.B \-\-json
JSON out
.SH SEE ALSO
.BR persyst (1),
.BR slurm.conf (5)
`
	if diff := cmp.Diff(strings.Split(want, "\n"), strings.Split(b.String(), "\n")); diff != "" {
		t.Errorf("page (-want +got):\n%s", diff)
	}
}
