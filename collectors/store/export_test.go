package store

import (
	"database/sql"
	"time"

	"github.com/persyst/persyst/quantile"
)

// What the tests of package store_test share with package store's: the store's
// connections (to look at and change the database behind its back), a time, and cycle
// results.

// Reader is the store's connection pool for reads.
func (s *Store) Reader() *sql.DB { return s.r.db }

// Writer is the store's connection for writes.
func (s *Store) Writer() *sql.DB { return s.w.db }

// T0 is the tests' time, and FixedNow a clock stopped at it.
var T0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func FixedNow() time.Time { return T0 }

// Result is an exact CycleResult of values, with severities 0, 0.3, 0, 0.3, ...
func Result(key string, values ...float64) CycleResult {
	sum, err := quantile.Summarize(values, quantile.DefaultQ)
	if err != nil {
		panic(err)
	}
	r := CycleResult{Key: key, Summary: sum, Devices: int64(len(values))}
	for i := range values {
		r.Severity.Add(0.3 * float64(i%2))
	}
	r.TimeShare = timeShare(r.Severity, r.Devices)
	return r
}
