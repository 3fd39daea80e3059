package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// One INSERT of Copy writes copyBatch rows at most (MariaDB takes 65,535 placeholders a
// statement: a cycles row has 18), and copyBytes of text and reports (MariaDB's packets
// are 16 MiB at most by default; a report is some tens of KB).
const (
	copyBatch = 500
	copyBytes = 4 << 20
)

// Copy copies every row of a SQLite store into an empty store (MariaDB, or another
// SQLite file), table by table, the jobs first: `persyst db copy`, to move a site's
// store to MariaDB. Both must be at SchemaVersion (Open brings them there). The copy keeps
// every job's key, so cycles, reports, findings and notices keep theirs; the roll-ups are
// copied as they are, not summed again. It returns the rows copied per table, each
// checked against the source's count. Nothing should write either store meanwhile (stop
// the frontend): the rows written during the copy may be missed.
func Copy(ctx context.Context, from, to *Store) (map[string]int64, error) {
	if _, ok := from.r.d.(sqlite); !ok {
		return nil, fmt.Errorf("store: copy from %s: only a SQLite store is copied (its rows read as SQLite types)", from.path)
	}
	var jobs int64
	if err := to.r.QueryRowContext(ctx, `SELECT count(*) FROM jobs`).Scan(&jobs); err != nil {
		return nil, fmt.Errorf("store: copy to %s: %w", to.path, err)
	}
	if jobs > 0 {
		return nil, fmt.Errorf("store: copy to %s: it has %d jobs already; copy into an empty database", to.path, jobs)
	}
	copied := map[string]int64{}
	for _, t := range tables {
		if t == "schema_version" {
			continue // each store's own, at the same version
		}
		n, err := copyTable(ctx, from, to, t)
		if err != nil {
			return copied, fmt.Errorf("store: copy %s to %s: table %s: %w", from.path, to.path, t, err)
		}
		var want, got int64
		if err := from.r.QueryRowContext(ctx, `SELECT count(*) FROM `+t).Scan(&want); err != nil {
			return copied, err
		}
		if err := to.r.QueryRowContext(ctx, `SELECT count(*) FROM `+t).Scan(&got); err != nil {
			return copied, err
		}
		if n != want || got != want {
			return copied, fmt.Errorf("store: copy to %s: table %s: %d rows in the source, %d copied, %d there (was the source written meanwhile?)", to.path, t, want, n, got)
		}
		copied[t] = n
	}
	return copied, nil
}

// copyTable copies table t's rows, copyBatch a statement, each batch a transaction.
func copyTable(ctx context.Context, from, to *Store, t string) (int64, error) {
	rows, err := from.r.QueryContext(ctx, `SELECT * FROM `+t)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	var batch []any
	var n, size int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		k := len(batch) / len(cols)
		row := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")"
		q := `INSERT INTO ` + t + ` (` + strings.Join(cols, ", ") + `) VALUES ` + strings.TrimSuffix(strings.Repeat(row+", ", k), ", ")
		err := inTx(ctx, to.w, func(tx *txn) error {
			_, err := tx.ExecContext(ctx, q, batch...)
			return err
		})
		batch, n, size = batch[:0], n+int64(k), 0
		return err
	}
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		batch = append(batch, vals...)
		for _, v := range vals {
			switch v := v.(type) {
			case []byte:
				size += int64(len(v))
			case string:
				size += int64(len(v))
			}
		}
		if len(batch) >= copyBatch*len(cols) || size >= copyBytes {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, errors.Join(flush())
}
