package accounting

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Coordinators reads who coordinates which accounts from Slurm's accounting: each
// user's accounts, those they were made coordinator of (sacctmgr add coordinator) and
// every sub-account below them, as Slurm grants a coordinator the accounts below theirs.
func Coordinators(ctx context.Context, run Runner) (map[string][]string, error) {
	coords, err := run(ctx, "sacctmgr", "-n", "-P", "show", "account", "withcoord", "format=Account,Coordinators")
	if err != nil {
		return nil, fmt.Errorf("coordinators: %w", err)
	}
	tree, err := run(ctx, "sacctmgr", "-n", "-P", "show", "association", "format=Account,ParentName,User")
	if err != nil {
		return nil, fmt.Errorf("accounts' parents: %w", err)
	}
	return parseCoordinators(coords, tree)
}

// parseCoordinators reads sacctmgr's "Account|Coordinators" lines (coordinators
// comma-separated) and "Account|ParentName|User" lines (an account's own association
// has no user), and gives each coordinator their accounts and the accounts below them.
func parseCoordinators(coords, tree []byte) (map[string][]string, error) {
	children := map[string][]string{}
	for i, line := range lines(tree) {
		f := strings.Split(line, "|")
		if len(f) != 3 {
			return nil, fmt.Errorf("sacctmgr show association, line %d: %q: want Account|ParentName|User", i+1, line)
		}
		if acct, parent, user := f[0], f[1], f[2]; user == "" && parent != "" && acct != parent {
			if !slices.Contains(children[parent], acct) {
				children[parent] = append(children[parent], acct)
			}
		}
	}
	out := map[string][]string{}
	for i, line := range lines(coords) {
		acct, users, ok := strings.Cut(line, "|")
		if !ok || strings.Contains(users, "|") {
			return nil, fmt.Errorf("sacctmgr show account withcoord, line %d: %q: want Account|Coordinators", i+1, line)
		}
		for _, u := range strings.Split(users, ",") {
			if u = strings.TrimSpace(u); u != "" {
				out[u] = below(acct, children, out[u])
			}
		}
	}
	for u := range out {
		slices.Sort(out[u])
		out[u] = slices.Compact(out[u])
	}
	return out, nil
}

// below adds acct and every account under it to have (a cycle in the tree, which Slurm
// does not allow, ends the walk).
func below(acct string, children map[string][]string, have []string) []string {
	todo := []string{acct}
	for len(todo) > 0 {
		a := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if slices.Contains(have, a) {
			continue
		}
		have = append(have, a)
		todo = append(todo, children[a]...)
	}
	return have
}

// lines are a command's non-empty output lines.
func lines(b []byte) []string {
	var out []string
	for _, l := range bytes.Split(b, []byte("\n")) {
		if s := strings.TrimSpace(string(l)); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// CoordinatorCache keeps what Coordinators read for a while (TTL), so that a web view
// asks sacctmgr at most once per TTL; a failed read is kept as failed as long (and
// answers no accounts: a coordinator then sees their own jobs only).
type CoordinatorCache struct {
	run Runner
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	at     time.Time
	byUser map[string][]string
	err    error
}

// NewCoordinatorCache returns a cache of Coordinators read with run; ttl 0 is 5 minutes,
// now nil is time.Now.
func NewCoordinatorCache(run Runner, ttl time.Duration, now func() time.Time) *CoordinatorCache {
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	if now == nil {
		now = time.Now
	}
	return &CoordinatorCache{run: run, ttl: ttl, now: now}
}

// Accounts returns the accounts user coordinates, and the error of the read that the
// answer comes from (nil accounts then).
func (c *CoordinatorCache) Accounts(ctx context.Context, user string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || c.now().Sub(c.at) >= c.ttl {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c.byUser, c.err = Coordinators(ctx, c.run)
		cancel()
		c.at = c.now()
	}
	return slices.Clone(c.byUser[user]), c.err
}
