package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go, no cgo)

	"github.com/persyst/persyst/collectors/store/target"
)

// ErrNotFound is returned when a job or its report is not in the store.
var ErrNotFound = errors.New("not found")

// ErrSchemaTooNew is returned by Open for a database written by a newer
// persyst (its schema version is above SchemaVersion).
var ErrSchemaTooNew = errors.New("database schema is newer than this persyst")

// ErrNotStore is returned by Open for a SQLite file that is not a persyst
// store (another application's id, or tables but no schema_version).
var ErrNotStore = errors.New("not a persyst database")

// Options configure Open. The zero value is ready to use.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection or process before failing with SQLITE_BUSY (default 5 s).
	BusyTimeout time.Duration
	// ReadConns is the number of connections serving reads (default 4).
	// Writes always go through one connection.
	ReadConns int
	// Now stamps the updated_ts columns (default time.Now).
	Now func() time.Time
	// Later, for a MariaDB target, opens a store whose database does not answer yet
	// (down, unreachable, refusing the user): Open returns it, Pending says why it is
	// not open, and its uses fail until one finds the database answering, trying at
	// most once per RetryEvery (default 10 s). A service that must start without its
	// database (the frontend) takes it; commands take the error. SQLite files open at
	// once, or not at all.
	Later      bool
	RetryEvery time.Duration
	// Cluster is the cluster this store's writer writes for: the cluster of the jobs
	// that PutCycle, and PutJob or PutReport without a Job.Cluster, write ("": a
	// cluster without a name). Readers see every cluster's jobs.
	Cluster string
}

// Store is a persyst database. It is safe for concurrent use. Writes are
// serialized through one connection (SQLite has one writer at a time anyway;
// serializing in Go avoids SQLITE_BUSY between the store's own connections);
// reads use a pool and, in WAL mode, do not wait for writers. Other processes
// may open the same file: their writes wait up to Options.BusyTimeout.
type Store struct {
	path string
	w    *pool // one connection, write transactions are BEGIN IMMEDIATE
	r    *pool // read-only connections
	// readConns is how many r has (Options.ReadConns).
	readConns int
	now       func() time.Time
	// cluster is Options.Cluster.
	cluster string
	codec   *codec
}

// Open opens the database at to (a file path), creating it if needed, and brings its
// schema to SchemaVersion. The database uses WAL journaling, synchronous =
// NORMAL (durable against process crashes; a power loss may lose the last
// transactions, never corrupt the file), foreign keys and a busy timeout.
//
// A target mysql://... is a MariaDB (or MySQL) database instead (target.ParseMySQL): the
// same tables, read and written the same way.
func Open(ctx context.Context, to string, opts Options) (*Store, error) {
	if target.IsMySQL(to) {
		return openMySQL(ctx, to, opts.withDefaults())
	}
	return open(ctx, to, opts, migrations, rollAll)
}

func (o Options) withDefaults() Options {
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.ReadConns <= 0 {
		o.ReadConns = 4
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RetryEvery <= 0 {
		o.RetryEvery = 10 * time.Second
	}
	return o
}

func open(ctx context.Context, path string, opts Options, migs []migration, final func(context.Context, *txn) error) (*Store, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("store: %q: need a file path (no URI, no '?' or '#')", path)
	}
	opts = opts.withDefaults()
	// Job results are private: the database (and its -wal and -shm files, which SQLite
	// gives the database's mode) is root's alone, in a 0700 directory when it makes one.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	f.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	busy := strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)
	wq := url.Values{
		"_busy_timeout": {busy},
		"_journal_mode": {"WAL"},
		"_synchronous":  {"NORMAL"},
		"_foreign_keys": {"1"},
		"_txlock":       {"immediate"},
	}
	wdb, err := sql.Open("sqlite", path+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	w := newPool(wdb, sqlite{})
	if err := migrate(ctx, w, migs, final, opts.Now); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	rq := url.Values{
		"_busy_timeout": {busy},
		"_foreign_keys": {"1"},
		"_query_only":   {"1"},
	}
	rdb, err := sql.Open("sqlite", path+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(opts.ReadConns)
	rdb.SetMaxIdleConns(opts.ReadConns)
	r := newPool(rdb, sqlite{})
	c, err := newCodec()
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	return &Store{path: path, w: w, r: r, readConns: opts.ReadConns, now: opts.Now, cluster: opts.Cluster, codec: c}, nil
}

// Close closes the database. The WAL is checkpointed by SQLite when the last
// connection closes.
func (s *Store) Close() error {
	s.codec.close()
	return errors.Join(s.r.Close(), s.w.Close())
}

// migrate brings the database to len(migs). Each migration runs in its own
// IMMEDIATE transaction that re-reads the version, so two processes opening
// a fresh file at once apply each migration once. final (if set) runs in the
// newest migration's transaction, after it.
func migrate(ctx context.Context, db *pool, migs []migration, final func(context.Context, *txn) error, now func() time.Time) error {
	var cur int
	err := inTx(ctx, db, func(tx *txn) error {
		var app int64
		if err := tx.QueryRowContext(ctx, `PRAGMA application_id`).Scan(&app); err != nil {
			return err
		}
		if app != 0 && app != applicationID {
			return fmt.Errorf("%w: application_id is %#x, not persyst's %#x", ErrNotStore, app, applicationID)
		}
		var tables, versioned int
		if err := tx.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE name = 'schema_version')
			FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`).Scan(&tables, &versioned); err != nil {
			return err
		}
		if tables > 0 && versioned == 0 {
			return fmt.Errorf("%w: it has other tables and no schema_version table", ErrNotStore)
		}
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
				version     INTEGER PRIMARY KEY,
				applied_ts  INTEGER NOT NULL,
				description TEXT NOT NULL
			) STRICT`); err != nil {
			return err
		}
		var err error
		cur, err = version(ctx, tx)
		return err
	})
	if err != nil {
		return err
	}
	if cur > len(migs) {
		return fmt.Errorf("%w: it has schema version %d, this persyst knows versions up to %d; use a newer persyst", ErrSchemaTooNew, cur, len(migs))
	}
	for v := cur + 1; v <= len(migs); v++ {
		m := migs[v-1]
		err := inTx(ctx, db, func(tx *txn) error {
			got, err := version(ctx, tx)
			switch {
			case err != nil:
				return err
			case got >= v:
				return nil // applied by another process meanwhile
			case got != v-1:
				return fmt.Errorf("schema version %d, expected %d", got, v-1)
			}
			for i, step := range m.steps {
				if _, err := tx.ExecContext(ctx, step); err != nil {
					return fmt.Errorf("step %d: %w", i+1, err)
				}
			}
			if m.after != nil {
				if err := m.after(ctx, tx); err != nil {
					return err
				}
			}
			if final != nil && v == len(migs) {
				if err := final(ctx, tx); err != nil {
					return err
				}
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO schema_version (version, applied_ts, description) VALUES (?, ?, ?)`,
				v, now().Unix(), m.description)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration to schema version %d (%s): %w", v, m.description, err)
		}
	}
	return nil
}

func version(ctx context.Context, tx *txn) (int, error) {
	var v int
	err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&v)
	return v, err
}

// Version returns the database's schema version.
func (a Admin) Version(ctx context.Context) (int, error) {
	s := a.s
	var v int
	err := s.r.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&v)
	return v, err
}

// inTx runs f in a transaction (BEGIN IMMEDIATE on the write pool), committing
// if f returns nil and rolling back otherwise.
func inTx(ctx context.Context, db *pool, f func(*txn) error) error {
	tx, err := db.BeginTx(ctx)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	return tx.Commit()
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// size returns the database's size in bytes (the dialect's size).
func size(ctx context.Context, s *Store) (int64, error) {
	n, _, err := s.w.d.size(ctx, s.w)
	return n, err
}

// vacuum gives the database's free space back to the file system.
func vacuum(ctx context.Context, s *Store) error { return s.w.d.compact(ctx, s.w) }
