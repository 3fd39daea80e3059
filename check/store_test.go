package check

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/hostfs"
)

// TestCheckStore: the site's store is checked where this host reads it (its SQLite
// file, or its MariaDB password file, is here), and only named elsewhere.
func TestCheckStore(t *testing.T) {
	root := t.TempDir()
	const db = "/var/lib/persyst-frontend/frontend.db"
	s, err := store.Open(context.Background(), filepath.Join(root, db), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutJob(context.Background(), store.Job{ID: 5, Start: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.WriteFile(filepath.Join(root, "broken.db"), []byte("not a database, but long enough to be read as one's header......."), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, siteStore, want string }{
		{"the frontend's file", db, "ok: the site's store " + db + " answers: SQLite 3."},
		{"its jobs", db, fmt.Sprintf("schema %d, 1 job", store.SchemaVersion)},
		{"no file here (a compute node)", "/var/lib/other/site.db", "info: the site's store /var/lib/other/site.db is kept on the frontend's host, not here"},
		{"a file that is no database", "/broken.db", "FAIL: the site's store /broken.db: "},
		{"MariaDB without its password file here", "mysql://persyst@db1/persyst?password-file=/etc/persyst/site-db.pass",
			"info: the site's store mysql://persyst@db1:3306/persyst is kept on the frontend's host, not here (/etc/persyst/site-db.pass: no such file)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := config.Defaults()
			conf.SiteStore = tc.siteStore
			n := &Node{o: Options{Config: conf, Timeout: 5 * time.Second}, h: hostfs.New(root)}
			var got []string
			for _, r := range checkStore(context.Background(), n) {
				got = append(got, strings.ToLower(r.Status.String())+": "+r.Detail)
			}
			if !strings.Contains(strings.Join(got, "\n"), strings.Replace(tc.want, "FAIL:", "fail:", 1)) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
