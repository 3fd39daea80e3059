package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver, for the server's own set-up
)

// EnvStore chooses the database the tests' stores are in: "" or "sqlite" (a file in a
// temporary directory), "mariadb" (a database of its own on a private MariaDB server
// that Main starts: `make test-mariadb`).
const EnvStore = "PERSYST_TEST_STORE"

// server is the private MariaDB server Main started (nil: none).
var server atomic.Pointer[mariaDB]

// mariaDB is a MariaDB server of the tests': its own data directory and socket in a
// temporary directory, no network, root without a password over the socket.
type mariaDB struct {
	dir, socket string
	cmd         *exec.Cmd
	done        chan struct{} // closed when cmd has ended
	root        *sql.DB
	n           atomic.Int64 // databases made
}

// Main runs a package's tests (from its TestMain), with a private MariaDB server when
// EnvStore is mariadb; it returns the exit code. Nothing is left running after it.
func Main(m *testing.M) int {
	switch v := os.Getenv(EnvStore); v {
	case "", "sqlite":
		return m.Run()
	case "mariadb":
	default:
		fmt.Fprintf(os.Stderr, "storetest: %s=%q: want sqlite or mariadb\n", EnvStore, v)
		return 2
	}
	db, err := startMariaDB()
	if err != nil {
		fmt.Fprintf(os.Stderr, "storetest: %s=mariadb: %v\n", EnvStore, err)
		return 1
	}
	server.Store(db)
	code := m.Run()
	server.Store(nil)
	if err := db.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "storetest: stopping MariaDB: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// MariaDB says whether the tests' stores are on MariaDB.
func MariaDB() bool { return server.Load() != nil }

// Jobs is how many jobs a test that fills a site stores: n on SQLite, a third of it
// (at least 300) on MariaDB. A job costs MariaDB's tests about 7 ms (a round trip per
// statement, against SQLite's call in process): the sums and orderings those tests check
// hold as well for a thousand jobs, and make test runs them once per MariaDB version.
func Jobs(n int) int {
	if !MariaDB() {
		return n
	}
	return max(n/3, min(n, 300))
}

// Target is where a test's fresh store goes: a new database on the tests' MariaDB
// server (dropped at the test's end), or a file in a temporary directory of tb's.
func Target(tb testing.TB) string {
	tb.Helper()
	db := server.Load()
	if db == nil {
		return filepath.Join(tb.TempDir(), "persyst.db")
	}
	name := fmt.Sprintf("t%d", db.n.Add(1))
	to := db.database(tb, name)
	tb.Cleanup(func() { db.root.Exec("DROP DATABASE IF EXISTS " + name) })
	return to
}

// database makes the database name and returns its target (root over the socket).
func (db *mariaDB) database(tb testing.TB, name string) string {
	tb.Helper()
	if _, err := db.root.Exec("CREATE DATABASE " + name); err != nil {
		tb.Fatalf("storetest: %v", err)
	}
	return "mysql://root@localhost/" + name + "?socket=" + db.socket
}

// Server is a private MariaDB server of one test's own (an integration test's: several
// clusters' frontends writing into one database), stopped and removed at its end.
type Server struct{ db *mariaDB }

// NewServer starts a server for tb.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	db, err := startMariaDB()
	if err != nil {
		tb.Fatalf("storetest: %v", err)
	}
	tb.Cleanup(func() {
		if err := db.stop(); err != nil {
			tb.Errorf("storetest: stopping MariaDB: %v", err)
		}
	})
	return &Server{db: db}
}

// Database makes a database on the server and returns its target.
func (s *Server) Database(tb testing.TB, name string) string { return s.db.database(tb, name) }

// Halt stops the server, its data kept; Start starts it again (an outage between them).
func (s *Server) Halt(tb testing.TB) {
	tb.Helper()
	if err := s.db.halt(); err != nil {
		tb.Fatal(err)
	}
}

// Start starts a halted server again on its data.
func (s *Server) Start(tb testing.TB) {
	tb.Helper()
	if err := s.db.start(); err != nil {
		tb.Fatal(err)
	}
}

// Root runs statements on the tests' MariaDB server as its root (users, grants).
func Root(tb testing.TB, stmts ...string) {
	tb.Helper()
	db := server.Load()
	if db == nil {
		tb.Fatal("storetest: no MariaDB server (run with " + EnvStore + "=mariadb)")
	}
	for _, s := range stmts {
		if _, err := db.root.Exec(s); err != nil {
			tb.Fatalf("storetest: %s: %v", s, err)
		}
	}
}

// Socket is the tests' MariaDB server's socket ("" without one).
func Socket() string {
	if db := server.Load(); db != nil {
		return db.socket
	}
	return ""
}

// Stop stops the tests' MariaDB server for d and starts it again on the same data (an
// outage); without one the test fails.
func Stop(tb testing.TB, d time.Duration) {
	tb.Helper()
	db := server.Load()
	if db == nil {
		tb.Fatal("storetest: no MariaDB server")
	}
	if err := db.halt(); err != nil {
		tb.Fatal(err)
	}
	time.Sleep(d)
	if err := db.start(); err != nil {
		tb.Fatal(err)
	}
}

// mariadbd is the server's program; Debian's mariadb-server installs it.
func mariadbd() (string, error) {
	for _, p := range []string{"mariadbd", "/usr/sbin/mariadbd", "mysqld", "/usr/sbin/mysqld"} {
		if path, err := exec.LookPath(p); err == nil {
			return path, nil
		}
	}
	return "", errors.New("no mariadbd (Debian's mariadb-server; scripts/deps.sh installs it)")
}

func startMariaDB() (*mariaDB, error) {
	if _, err := mariadbd(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "persyst-mariadb-")
	if err != nil {
		return nil, err
	}
	db := &mariaDB{dir: dir, socket: filepath.Join(dir, "mysqld.sock")}
	install := exec.Command("mariadb-install-db", append(db.userArgs(), "--no-defaults", "--datadir="+filepath.Join(dir, "data"),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve")...)
	if out, err := install.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	if err := db.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return db, nil
}

// userArgs: as root, mariadbd runs as root only when told so (the data directory is
// root's, in a private temporary directory).
func (db *mariaDB) userArgs() []string {
	if os.Geteuid() == 0 {
		return []string{"--user=root"}
	}
	return nil
}

// start starts mariadbd on db's data and waits until it answers (30 s at most).
// mariadbd gets SIGKILL should the tests' process die first (a test's timeout): the
// parent-death signal is the starting thread's, so that thread is kept, locked, until
// mariadbd ends.
func (db *mariaDB) start() error {
	bin, err := mariadbd()
	if err != nil {
		return err
	}
	db.cmd = exec.Command(bin, append([]string{"--no-defaults"}, append(db.userArgs(),
		"--datadir="+filepath.Join(db.dir, "data"), "--socket="+db.socket, "--skip-networking", "--skip-name-resolve",
		"--pid-file="+filepath.Join(db.dir, "mariadbd.pid"), "--log-error="+filepath.Join(db.dir, "error.log"),
		"--character-set-server=utf8mb4", "--innodb-buffer-pool-size=128M", "--innodb-flush-log-at-trx-commit=0",
		"--innodb-doublewrite=0", "--innodb-buffer-pool-load-at-startup=0", "--innodb-buffer-pool-dump-at-shutdown=0")...)...)
	db.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	db.done = make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		err := db.cmd.Start()
		started <- err
		if err == nil {
			db.cmd.Wait()
		}
		close(db.done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("mariadbd: %w", err)
	}
	root, err := sql.Open("mysql", "root@unix("+db.socket+")/")
	if err != nil {
		db.halt()
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = root.PingContext(ctx)
		cancel()
		if err == nil {
			db.root = root
			return nil
		}
		select {
		case <-db.done:
			root.Close()
			return fmt.Errorf("mariadbd exited (%v); its log:\n%s", db.cmd.ProcessState, db.log())
		default:
		}
		if time.Now().After(deadline) {
			root.Close()
			db.halt()
			return fmt.Errorf("mariadbd did not answer within 30 s (%v); its log:\n%s", err, db.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// halt stops mariadbd (SIGTERM, then SIGKILL after 30 s) and waits for it.
func (db *mariaDB) halt() error {
	if db.root != nil {
		db.root.Close()
		db.root = nil
	}
	if db.done == nil {
		return nil
	}
	db.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-db.done:
		return nil
	case <-time.After(30 * time.Second):
	}
	db.cmd.Process.Kill()
	<-db.done
	return errors.New("mariadbd did not stop on SIGTERM within 30 s")
}

func (db *mariaDB) stop() error {
	err := db.halt()
	return errors.Join(err, os.RemoveAll(db.dir))
}

// log is the end of the server's error log.
func (db *mariaDB) log() string {
	b, _ := os.ReadFile(filepath.Join(db.dir, "error.log"))
	s := string(b)
	if i := strings.LastIndex(s[:max(0, len(s)-4000)], "\n"); i >= 0 {
		s = s[i+1:]
	}
	return s
}
