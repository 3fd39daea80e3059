package balance

import (
	"strings"
	"testing"
)

// FuzzParse checks that no input makes the parsers or Balance panic, and that
// every tree they accept gives consistent distances.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		fig52, twoSyncs,
		"SwitchName=s0 Nodes=tux[0-3]\nSwitchName=s1 Nodes=tux[4-7]\nSwitchName=s2 Switches=s[0-1]\n",
		"SwitchName=a Switches=b\nSwitchName=b Switches=a\n",
		"Collector=c1 Nodes=n[1-\n", "Sync=s Syncs=s\n", "=\n", "#\n\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, parse := range []func(string) (*Tree, error){
			func(s string) (*Tree, error) { return ParseTopologyConf(strings.NewReader(s)) },
			func(s string) (*Tree, error) { return ParseTreeSpec(strings.NewReader(s)) },
		} {
			tr, err := parse(s)
			if err != nil {
				if !strings.Contains(err.Error(), "line") && !strings.Contains(err.Error(), "no agents") {
					t.Errorf("error without a line: %v", err)
				}
				continue
			}
			nodes := tr.Nodes()
			for i := 0; i+1 < len(nodes) && i < 50; i++ {
				d, err := tr.Distance(nodes[i], nodes[i+1])
				if err != nil || d < 1 || d > tr.Height() {
					t.Errorf("Distance(%s, %s) = %d, %v", nodes[i], nodes[i+1], d, err)
				}
			}
			if len(nodes) > 0 && len(nodes) < 1000 {
				jobs := []Job{{ID: "1", Nodes: nodes}, {ID: "2", Nodes: nodes[:1]}}
				if _, err := Balance(tr, jobs, Config{}); err != nil {
					t.Errorf("Balance: %v", err)
				}
			}
		}
	})
}
