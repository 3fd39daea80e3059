package store

import (
	"context"
	"database/sql"
	"sync"
)

// dialect is how one kind of database takes the store's SQL (SQLite's): as it is, or
// rewritten (mysqlRewrite).
type dialect interface {
	rewrite(q string) (rewritten, error)
	// txOptions are a transaction's options (nil: the database's own).
	txOptions() *sql.TxOptions
	// size is the database's bytes, and those free in it for later writes.
	size(ctx context.Context, p *pool) (total, free int64, err error)
	// tableBytes are each table's bytes with its indexes, where the database tells them.
	tableBytes(ctx context.Context, p *pool) (map[string]int64, error)
	// damage is what the database's own checks find wrong (nothing: sound).
	damage(ctx context.Context, p *pool) ([]string, error)
	// compact gives the database's free space back to the file system.
	compact(ctx context.Context, p *pool) error
}

// rewritten is a query as the database takes it: its text and, for each '?' in it, the
// index of the argument it takes (nil: the arguments in their order).
type rewritten struct {
	text  string
	order []int
	// finite: the database stores no infinite numbers (MariaDB's DOUBLE).
	finite bool
}

// maxRewrites bounds mysql's cache: the store's queries are a few dozen texts, and
// those built per call (a site filter's IN list) vary with their lists.
const maxRewrites = 512

// mysqlDialect takes the store's SQL rewritten for MariaDB and MySQL (mysqlRewrite),
// each text rewritten once; its catalog is MariaDB's (mariadb.go).
type mysqlDialect struct {
	mu    sync.Mutex
	cache map[string]rewritten
}

func (d *mysqlDialect) rewrite(q string) (rewritten, error) {
	d.mu.Lock()
	r, ok := d.cache[q]
	d.mu.Unlock()
	if ok {
		return r, nil
	}
	r, err := mysqlRewrite(q)
	if err != nil {
		return rewritten{}, err
	}
	d.mu.Lock()
	if d.cache == nil || len(d.cache) >= maxRewrites {
		d.cache = map[string]rewritten{}
	}
	d.cache[q] = r
	d.mu.Unlock()
	return r, nil
}

// querier is what a connection pool and a transaction both run queries with.
type querier interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// rewriting runs the store's SQL on a querier, as its dialect rewrites it.
type rewriting struct {
	q querier
	d dialect
}

func (r rewriting) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	text, a, err := prepared(r.d, q, args)
	if err != nil {
		return nil, err
	}
	return r.q.ExecContext(ctx, text, a...)
}

func (r rewriting) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	text, a, err := prepared(r.d, q, args)
	if err != nil {
		return nil, err
	}
	return r.q.QueryContext(ctx, text, a...)
}

func (r rewriting) QueryRowContext(ctx context.Context, q string, args ...any) *row {
	text, a, err := prepared(r.d, q, args)
	if err != nil {
		return &row{err: err}
	}
	return &row{r: r.q.QueryRowContext(ctx, text, a...)}
}

// pool is one of the store's connection pools: what it is given is the store's SQL,
// which its dialect rewrites.
type pool struct {
	rewriting
	db *sql.DB
	// opened, where not nil, opens the database before the pool's first use (a MariaDB
	// that did not answer when the store was opened: Options.Later).
	opened *opener
}

func newPool(db *sql.DB, d dialect) *pool { return &pool{rewriting: rewriting{q: db, d: d}, db: db} }

func (p *pool) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if err := p.opened.ready(ctx); err != nil {
		return nil, err
	}
	return p.rewriting.ExecContext(ctx, q, args...)
}

func (p *pool) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := p.opened.ready(ctx); err != nil {
		return nil, err
	}
	return p.rewriting.QueryContext(ctx, q, args...)
}

func (p *pool) QueryRowContext(ctx context.Context, q string, args ...any) *row {
	if err := p.opened.ready(ctx); err != nil {
		return &row{err: err}
	}
	return p.rewriting.QueryRowContext(ctx, q, args...)
}

// BeginTx begins a transaction with the dialect's options (SQLite's writer: BEGIN
// IMMEDIATE, set on its connections).
func (p *pool) BeginTx(ctx context.Context) (*txn, error) {
	if err := p.opened.ready(ctx); err != nil {
		return nil, err
	}
	tx, err := p.db.BeginTx(ctx, p.d.txOptions())
	if err != nil {
		return nil, err
	}
	return &txn{rewriting: rewriting{q: tx, d: p.d}, tx: tx}, nil
}

func (p *pool) Close() error { return p.db.Close() }

// txn is a transaction on a pool.
type txn struct {
	rewriting
	tx *sql.Tx
}

// PrepareContext prepares q for several executions in the transaction.
func (t *txn) PrepareContext(ctx context.Context, q string) (*stmt, error) {
	r, err := t.d.rewrite(q)
	if err != nil {
		return nil, err
	}
	st, err := t.tx.PrepareContext(ctx, r.text)
	if err != nil {
		return nil, err
	}
	return &stmt{st: st, r: r}, nil
}

func (t *txn) Commit() error   { return t.tx.Commit() }
func (t *txn) Rollback() error { return t.tx.Rollback() }

// stmt is a prepared statement of a transaction.
type stmt struct {
	st *sql.Stmt
	r  rewritten // its text's argument order
}

func (s *stmt) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	a, err := s.r.args(args)
	if err != nil {
		return nil, err
	}
	return s.st.ExecContext(ctx, a...)
}

func (s *stmt) Close() error { return s.st.Close() }

// row is one row's result, or the error that kept the query from running.
type row struct {
	r   *sql.Row
	err error
}

func (r *row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return r.r.Scan(dest...)
}

func (r *row) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.r.Err()
}

// prepared is q and args as d's database takes them.
func prepared(d dialect, q string, args []any) (string, []any, error) {
	r, err := d.rewrite(q)
	if err != nil {
		return "", nil, err
	}
	a, err := r.args(args)
	return r.text, a, err
}
