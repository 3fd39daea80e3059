// Package storetest opens stores for tests: a fresh database in a temporary directory,
// or on a private MariaDB server (EnvStore), closed when the test ends.
package storetest

import (
	"context"
	"testing"

	"github.com/persyst/persyst/collectors/store"
)

// Open opens a fresh store with opts (Target); it is closed at the test's end.
func Open(tb testing.TB, opts store.Options) *store.Store {
	tb.Helper()
	s, err := store.Open(context.Background(), Target(tb), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
