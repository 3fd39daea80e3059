package check

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/target"
)

// checkStore looks at the site's store (persyst.conf's SiteStore) where this host can
// read it: the frontend's and the web view's hosts. Elsewhere (a compute node: no
// SQLite file, no MariaDB password file here) it says where the store is and checks
// nothing. Neither the password nor anything read with it is ever shown.
func checkStore(ctx context.Context, n *Node) []Result {
	s := n.o.Config.SiteStore
	if s == "" {
		return nil
	}
	where, local := target.Describe(s), s
	if target.IsMySQL(s) {
		t, err := target.ParseMySQL(s)
		if err != nil {
			return []Result{fail("SiteStore: "+err.Error(), "SiteStore=mysql://USER@HOST/DATABASE?password-file=PATH (docs/admin.md)")}
		}
		local = t.PasswordFile
	}
	if local != "" {
		if _, err := os.Stat(n.h.Path(local)); errors.Is(err, fs.ErrNotExist) {
			return []Result{info(fmt.Sprintf("the site's store %s is kept on the frontend's host, not here (%s: no such file)", where, local))}
		}
	}
	c, cancel := context.WithTimeout(ctx, n.o.Timeout)
	defer cancel()
	to := s
	if !target.IsMySQL(s) {
		to = n.h.Path(s)
	}
	p, err := store.ProbeStore(c, to)
	if err != nil {
		return []Result{fail(fmt.Sprintf("the site's store %s: %v", where, short(err)),
			"the frontend keeps no job's report while its store does not answer: check the server, the user's grants, the password file (docs/admin.md, \"On MariaDB\")")}
	}
	schema := fmt.Sprintf("schema %d", p.Schema)
	if p.Schema == 0 {
		schema = "no schema yet (the frontend makes it at its start)"
	}
	return []Result{ok(fmt.Sprintf("the site's store %s answers: %s, %s, %s", where, p.Server, schema, plural(int(p.Jobs), "job")))}
}
