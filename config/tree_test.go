package config_test

// An external test: balance imports jobmap, which imports config.

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/config"
)

// TestTreeLinesParse: the tree lines of persyst.conf make the agent tree, and its
// errors name the file's line.
func TestTreeLinesParse(t *testing.T) {
	c, err := config.Parse(strings.NewReader("Digest=on\nSync=s1 Collectors=c[1-2] Addr=s1:16833\nCollector=c1 Nodes=n[1-2]\nCollector=c2 Nodes=n[3-4]\n"), "p.conf")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := balance.ParseTreeSpec(strings.NewReader(c.Tree))
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Collectors(); !cmp.Equal(got, []string{"c1", "c2"}) {
		t.Errorf("collectors %v", got)
	}
	c, _ = config.Parse(strings.NewReader("Digest=on\n\nSync=s1 Collectors=c[1-2]\nCollector=c1 Nodes=n[1-2]\n"), "p.conf")
	if _, err := balance.ParseTreeSpec(strings.NewReader(c.Tree)); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("error %v does not name line 3 of the file", err)
	}
}
