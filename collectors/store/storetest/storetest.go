// Package storetest opens stores for tests: a fresh database in a temporary directory,
// closed when the test ends.
package storetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/persyst/persyst/collectors/store"
)

// Open opens a fresh store with opts in a temporary directory of tb's; it is closed at
// the test's end.
func Open(tb testing.TB, opts store.Options) *store.Store {
	tb.Helper()
	s, err := store.Open(context.Background(), filepath.Join(tb.TempDir(), "persyst.db"), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
