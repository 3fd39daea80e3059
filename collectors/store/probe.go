package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/persyst/persyst/collectors/store/target"
)

// probeTimeout bounds ProbeStore's connecting to a MariaDB (its queries: ctx).
const probeTimeout = 10 * time.Second

// Probe is what a look at a store finds, without changing it.
type Probe struct {
	// Server is the database's engine and version ("SQLite 3.50.4", "MariaDB 10.11.14").
	Server string
	// Schema is its schema version (0: none yet, the frontend makes it), Jobs its jobs.
	Schema int
	Jobs   int64
}

// ProbeStore looks at the store at to (a SQLite file or a mysql:// target) as `persyst
// check` does: whether it answers, its schema and how many jobs it holds. Unlike Open
// it creates nothing and migrates nothing: a file must exist, and is read only.
func ProbeStore(ctx context.Context, to string) (Probe, error) {
	var db *sql.DB
	p := Probe{Server: "SQLite "}
	version := `SELECT sqlite_version()`
	if target.IsMySQL(to) {
		t, err := target.ParseMySQL(to)
		if err != nil {
			return p, fmt.Errorf("store: %w", err)
		}
		cfg, err := mysqlConfig(t, probeTimeout)
		if err != nil {
			return p, err
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return p, fmt.Errorf("store: %s: %w", t, err)
		}
		db, version = sql.OpenDB(conn), `SELECT VERSION()`
	} else {
		if _, err := os.Stat(to); err != nil {
			return p, fmt.Errorf("store: %w", err)
		}
		var err error
		if db, err = sql.Open("sqlite", "file:"+to+"?"+url.Values{"mode": {"ro"}, "_query_only": {"1"}}.Encode()); err != nil {
			return p, fmt.Errorf("store: %s: %w", to, err)
		}
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var v string
	if err := db.QueryRowContext(ctx, version).Scan(&v); err != nil {
		return p, fmt.Errorf("store: %s: %w", target.Describe(to), err)
	}
	p.Server += v
	if target.IsMySQL(to) {
		p.Server = "MySQL " + v
		if i := strings.Index(v, "-MariaDB"); i >= 0 {
			p.Server = "MariaDB " + v[:i]
		}
	}
	// A database without persyst's tables yet (a new MariaDB database, which the
	// frontend fills at its start) has schema 0 and no jobs.
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&p.Schema); err != nil {
		if !noTable(err) {
			return p, fmt.Errorf("store: %s: %w", target.Describe(to), err)
		}
		return p, nil
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM jobs`).Scan(&p.Jobs); err != nil && !noTable(err) {
		return p, fmt.Errorf("store: %s: %w", target.Describe(to), err)
	}
	return p, nil
}

// noTable says whether err is a database's "no such table".
func noTable(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1146 // ER_NO_SUCH_TABLE
	}
	return err != nil && strings.Contains(err.Error(), "no such table")
}
