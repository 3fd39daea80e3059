package store_test

import (
	"os"
	"testing"

	"github.com/persyst/persyst/collectors/store/storetest"
)

// TestMain runs the store's tests on SQLite, or on a private MariaDB server with
// PERSYST_TEST_STORE=mariadb (make test-mariadb).
func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }
