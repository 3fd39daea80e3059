package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestManPagesListEveryFlag: `persyst man` writes a page for every command, and each
// page documents every flag the command defines, so the pages cannot drift from the
// flags.
func TestManPagesListEveryFlag(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{manCommand, "--dir", dir}, stdio{in: strings.NewReader(""), out: &out, err: &errOut}); code != 0 {
		t.Fatalf("persyst man: exit %d: %s", code, errOut.String())
	}
	pages := map[string]bool{"persyst": true}
	for _, c := range commands {
		if c.name != "version" {
			pages["persyst-"+c.name] = true
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "persyst-run.1")); err != nil {
		t.Errorf("no page for persyst run: %v", err)
	}
	for name := range pages {
		b, err := os.ReadFile(filepath.Join(dir, name+".1"))
		if err != nil {
			t.Errorf("no page %s.1: %v", name, err)
			continue
		}
		page := string(b)
		if !strings.HasPrefix(page, ".TH "+strings.ToUpper(strings.ReplaceAll(name, "-", `\-`))+" 1 ") {
			t.Errorf("%s.1 does not start with its .TH line: %.60q", name, page)
		}
		if name == "persyst" {
			continue
		}
		if _, ok := flagless[strings.TrimPrefix(name, "persyst-")]; ok {
			if !strings.Contains(page, "no flags of its own") {
				t.Errorf("%s.1 does not say the command has no flags", name)
			}
			continue
		}
		fs := commandFlags(context.Background(), strings.TrimPrefix(name, "persyst-"))
		if fs == nil {
			t.Errorf("%s defines no flags", name)
			continue
		}
		n := 0
		fs.VisitAll(func(f *flag.Flag) {
			n++
			if !strings.Contains(page, `\-\-`+strings.ReplaceAll(f.Name, "-", `\-`)) {
				t.Errorf("%s.1 does not document --%s", name, f.Name)
			}
		})
		if n == 0 {
			t.Errorf("%s: no flags seen", name)
		}
	}
}
