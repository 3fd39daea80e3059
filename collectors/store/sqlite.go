package store

import (
	"context"
	"database/sql"
	"fmt"
)

// sqlite takes the store's SQL as it is; its catalog is SQLite's pragmas.
type sqlite struct{}

func (sqlite) rewrite(q string) (rewritten, error) { return rewritten{text: q}, nil }

// txOptions: the writer's connections begin IMMEDIATE (their _txlock), the readers'
// read a snapshot.
func (sqlite) txOptions() *sql.TxOptions { return nil }

// size is page_count × page_size (in WAL mode with the committed pages still in the
// WAL; after a vacuum, the size of the file as a fresh copy) and the free pages.
func (sqlite) size(ctx context.Context, p *pool) (int64, int64, error) {
	var pages, free, pageSize int64
	for q, dst := range map[string]*int64{`PRAGMA page_count`: &pages, `PRAGMA freelist_count`: &free, `PRAGMA page_size`: &pageSize} {
		if err := p.db.QueryRowContext(ctx, q).Scan(dst); err != nil {
			return 0, 0, err
		}
	}
	return pages * pageSize, free * pageSize, nil
}

// tableBytes: dbstat names each b-tree; a table's and its indexes' pages are summed
// under it. Where SQLite was built without dbstat, none.
func (sqlite) tableBytes(ctx context.Context, p *pool) (map[string]int64, error) {
	out := map[string]int64{}
	rows, err := p.db.QueryContext(ctx, `SELECT coalesce(m.tbl_name, d.name), sum(d.pgsize) FROM dbstat d
		LEFT JOIN sqlite_schema m ON m.name = d.name GROUP BY 1`)
	if err != nil {
		return out, nil
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var b int64
		if rows.Scan(&name, &b) == nil {
			out[name] += b
		}
	}
	return out, nil
}

// damage: SQLite's integrity and foreign-key checks.
func (sqlite) damage(ctx context.Context, p *pool) ([]string, error) {
	var problems []string
	rows, err := p.db.QueryContext(ctx, `PRAGMA integrity_check`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var msg string
		if err := rows.Scan(&msg); err != nil {
			rows.Close()
			return nil, err
		}
		if msg != "ok" {
			problems = append(problems, "integrity: "+msg)
		}
	}
	rows.Close()
	rows, err = p.db.QueryContext(ctx, `PRAGMA foreign_key_check`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var table, parent string
		var rowid sql.NullInt64
		var fk int
		if err := rows.Scan(&table, &rowid, &parent, &fk); err != nil {
			return nil, err
		}
		problems = append(problems, fmt.Sprintf("foreign key: a row of %s refers to a missing %s row", table, parent))
	}
	return problems, rows.Err()
}

// compact rebuilds the database compactly and truncates the WAL.
func (sqlite) compact(ctx context.Context, p *pool) error {
	if _, err := p.db.ExecContext(ctx, `VACUUM`); err != nil {
		return err
	}
	_, err := p.db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	return err
}
