package integration

// The agent tree over mutual TLS: the test cluster's agents hold certificates of a test
// CA naming each one (persyst://ROLE/NAME), made by scripts/cluster.sh with openssl.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/collectors/treeauth/tlstest"
)

// TestTreeTLS: with TreeAuth=tls a 2-node job's digest still covers both nodes through
// the collector; a node's certificate pushes only its node's records and sets no routes;
// a certificate of the site's CA without an identity, one of another CA, TLS without a
// certificate and plain connections are refused.
func TestTreeTLS(t *testing.T) {
	defer sideBySide(t)()
	c := startCluster(t, 2, "PERSYST_COLLECTORS=1", "PERSYST_TREEAUTH=tls")
	_, load := binaries(t)
	id := c.sbatch(t, nil, "-N2", "-o", filepath.Join(c.work, "tls-%j.out"), "--wrap", "srun -N2 "+load+" spin -seconds 3")
	if st := c.waitDone(t, id, 3*time.Minute); st != "COMPLETED" {
		t.Fatalf("job %d ended %s", id, st)
	}
	b, _ := os.ReadFile(filepath.Join(c.work, fmt.Sprintf("tls-%d.out", id)))
	if rep := c.jobReport(t, id); len(rep.Nodes) != 2 {
		t.Errorf("over mutual TLS, job %d's report covers %v, want both nodes:\n%s", id, rep.Nodes, b)
	}

	dir := filepath.Join(c.dir, "tls")
	files := func(name string) treeauth.TLSFiles {
		return treeauth.TLSFiles{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, "ca.crt")}
	}
	col1 := c.collectorAddr(t, "col1")
	node1, node2 := netOf(col1)+".11:16831", netOf(col1)+".12:16831"
	n1, n2 := c.nodes[0], c.nodes[1] // the addresses' nodes
	scratch := t.TempDir()
	noSAN := signed(t, scratch, "nosan", filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	rogue := signed(t, scratch, "rogue", "", "", "persyst://frontend/frontend")
	bin := selfCopy(t)

	tests := []struct {
		name           string
		asRoot         bool
		mode           string
		files          treeauth.TLSFiles
		target, method string
		job            uint32
		node, want     string // want: "" succeeds, else the refusal's code or text in it
	}{
		{"the frontend's certificate pings a node", true, "tls", files("frontend"), node1, "NodePing", 0, "", ""},
		{"node1's certificate pushes node1's records", true, "tls", files(n1), col1, "Push", id, n1, ""},
		{"node1's certificate pushes node2's records", true, "tls", files(n1), col1, "Push", id, n2, `may not push records of node "` + n2 + `"`},
		{"node1's certificate pushes a job Slurm does not know", true, "tls", files(n1), col1, "Push", 4_000_000, n1, "Slurm does not know it"},
		{"node1's certificate sets node2's routes", true, "tls", files(n1), node2, "SetRoutes", id, n2, "may not call"},
		{"the site CA's certificate without an identity", true, "tls", noSAN, col1, "Summary", id, n1, "Unavailable"},
		{"another CA's frontend certificate", true, "tls", rogue, node1, "SetRoutes", id, n1, "Unavailable"},
		{"an ordinary user without a certificate", false, "tls-nocert", treeauth.TLSFiles{}, col1, "Push", id, n1, "Unavailable"},
		{"an ordinary user, plain", false, "plain", treeauth.TLSFiles{}, node1, "SetRoutes", id, n1, "Unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := attempt(t, bin, tc.asRoot, intrusion{Target: tc.target, Mode: tc.mode, As: "node/" + n1, TLS: tc.files,
				Method: tc.method, Job: tc.job, Node: tc.node})
			switch {
			case tc.want == "" && !o.OK:
				t.Errorf("refused: %+v", o)
			case tc.want != "" && (o.OK || (o.Code != tc.want && !strings.Contains(o.Error, tc.want))):
				t.Errorf("%+v; want refused with %q", o, tc.want)
			}
		})
	}
}

// collectorAddr reads a collector's address from the cluster's environment.
func (c *cluster) collectorAddr(t *testing.T, name string) string {
	t.Helper()
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, "PERSYST_COLLECTOR_ADDRS="); ok {
			for _, p := range strings.Split(v, ",") {
				if n, a, _ := strings.Cut(p, "="); n == name {
					return a
				}
			}
		}
	}
	t.Fatalf("no address of collector %s in the cluster's environment", name)
	return ""
}

// signed writes a key and a certificate with the URI SANs uris signed by the CA in
// caCert/caKey ("": a CA of its own), and returns them as TLS files.
func signed(t *testing.T, dir, name, caCert, caKey string, uris ...string) treeauth.TLSFiles {
	t.Helper()
	var ca *tlstest.CA
	var err error
	if caCert != "" {
		ca, err = tlstest.Load(caCert, caKey)
	} else {
		ca, err = tlstest.New(name + "-ca")
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.Issue(dir, name, uris...)
	if err != nil {
		t.Fatal(err)
	}
	return treeauth.TLSFiles(f)
}
