package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/persyst/persyst/collectors/store/target"
	"github.com/persyst/persyst/internal/secret"
)

// mysqlSessionMode is every session's sql_mode: double-quoted names, || and an UPDATE's
// assignments (each reads the row as it was) as in SQLite, and errors, not silent
// truncation, for a value that does not fit. SIMULTANEOUS_ASSIGNMENT is MariaDB's
// (10.3.5 on): the store is for MariaDB, which Debian ships for slurmdbd.
const mysqlSessionMode = "ANSI_QUOTES,PIPES_AS_CONCAT,SIMULTANEOUS_ASSIGNMENT,STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ENGINE_SUBSTITUTION"

// mysqlConfig is the driver's configuration for t.
func mysqlConfig(t target.MySQL, timeout time.Duration) (*mysql.Config, error) {
	c := mysql.NewConfig()
	c.User, c.Net, c.Addr, c.DBName = t.User, t.Net, t.Addr, t.Database
	if t.PasswordFile != "" {
		pw, err := secret.Read(t.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		c.Passwd = pw
	}
	// Connecting waits timeout; a query as long as its context lets it.
	c.Timeout = timeout
	c.ClientFoundRows = true // an upsert that changes nothing still counts its row
	// The driver's own log (a broken idle connection it replaced) would go to stderr
	// unasked; what fails reaches the store's caller as an error.
	c.Logger = mysql.Logger(discard{})
	c.Params = map[string]string{"sql_mode": "'" + mysqlSessionMode + "'", "time_zone": "'+00:00'"}
	switch {
	case t.TLSCA != "":
		pem, err := os.ReadFile(t.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("store: tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("store: tls-ca %s: no PEM certificate in it", t.TLSCA)
		}
		host, _, _ := net.SplitHostPort(t.Addr)
		c.TLS = &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}
	case t.TLS != "":
		c.TLSConfig = t.TLS
	}
	return c, nil
}

// discard is a driver logger that drops what it is given.
type discard struct{}

func (discard) Print(...any) {}

// openMySQL opens the MariaDB (or MySQL) database target names and brings its schema to
// SchemaVersion. With opts.Later, a database that does not answer yet is opened at the
// store's first use that finds it answering (opener); a database that is not persyst's,
// or of a newer schema, is refused at once all the same.
func openMySQL(ctx context.Context, to string, opts Options) (*Store, error) {
	t, err := target.ParseMySQL(to)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	cfg, err := mysqlConfig(t, opts.BusyTimeout)
	if err != nil {
		return nil, err
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", t, err)
	}
	c, err := newCodec()
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	d := &mysqlDialect{}
	wdb, rdb := sql.OpenDB(conn), sql.OpenDB(conn)
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	rdb.SetMaxOpenConns(opts.ReadConns)
	rdb.SetMaxIdleConns(opts.ReadConns)
	for _, db := range []*sql.DB{wdb, rdb} {
		db.SetConnMaxLifetime(time.Hour)
	}
	mig := newPool(wdb, d) // the migration's own, not waiting for the opener it runs in
	o := &opener{every: opts.RetryEvery, now: opts.Now, run: func(ctx context.Context) error {
		if err := wdb.PingContext(ctx); err != nil {
			return fmt.Errorf("store: %s: %w", t, err)
		}
		if err := migrateMySQL(ctx, mig, opts.Now); err != nil {
			return fmt.Errorf("store: %s: %w", t, err)
		}
		return nil
	}}
	s := &Store{path: t.String(), w: newPool(wdb, d), r: newPool(rdb, d), readConns: opts.ReadConns, now: opts.Now, cluster: opts.Cluster, codec: c}
	s.w.opened, s.r.opened = o, o
	if err := o.ready(ctx); err != nil && (!opts.Later || errors.Is(err, ErrNotStore) || errors.Is(err, ErrSchemaTooNew)) {
		s.Close()
		return nil, err
	}
	return s, nil
}

// migrateMySQL brings a MariaDB database to SchemaVersion: an empty one to the newest
// schema at once (mysqlSchema), one of an older version through the migrations' MariaDB
// steps. MariaDB commits each DDL statement on its own, so the migrations run under an
// advisory lock (two frontends starting at once apply each once) and every step may be
// run again after one that stopped half-way.
func migrateMySQL(ctx context.Context, w *pool, now func() time.Time) error {
	var got sql.NullInt64
	if err := w.db.QueryRowContext(ctx, `SELECT GET_LOCK('persyst_migrate', 60)`).Scan(&got); err != nil || got.Int64 != 1 {
		return errors.Join(errors.New("another persyst holds the migration lock for over a minute"), err)
	}
	defer w.db.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK('persyst_migrate')`)
	var tables, versioned int
	if err := w.db.QueryRowContext(ctx, `SELECT count(*), count(CASE WHEN table_name = 'schema_version' THEN 1 END)
		FROM information_schema.tables WHERE table_schema = DATABASE()`).Scan(&tables, &versioned); err != nil {
		return err
	}
	if tables > 0 && versioned == 0 {
		return fmt.Errorf("%w: it has other tables and no schema_version table", ErrNotStore)
	}
	var cur int
	if versioned > 0 {
		if err := w.db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&cur); err != nil {
			return err
		}
	}
	switch {
	case cur > len(migrations):
		return fmt.Errorf("%w: it has schema version %d, this persyst knows versions up to %d; use a newer persyst", ErrSchemaTooNew, cur, len(migrations))
	case cur == 0:
		for i, step := range mysqlSchema {
			if _, err := w.db.ExecContext(ctx, step); err != nil {
				return fmt.Errorf("schema step %d: %w", i+1, err)
			}
		}
		return inTx(ctx, w, func(tx *txn) error {
			for v := 1; v <= len(migrations); v++ {
				if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, applied_ts, description) VALUES (?, ?, ?)`,
					v, now().Unix(), migrations[v-1].description); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for v := cur + 1; v <= len(migrations); v++ {
		m := migrations[v-1]
		if v <= mysqlBaseline || m.mysql == nil {
			return fmt.Errorf("migration to schema version %d (%s) has no MariaDB steps", v, m.description)
		}
		for i, step := range m.mysql {
			if _, err := w.db.ExecContext(ctx, step); err != nil {
				return fmt.Errorf("migration to schema version %d (%s): step %d: %w", v, m.description, i+1, err)
			}
		}
		err := inTx(ctx, w, func(tx *txn) error {
			if m.after != nil {
				if err := m.after(ctx, tx); err != nil {
					return err
				}
			}
			if v == len(migrations) {
				if err := rollAll(ctx, tx); err != nil {
					return err
				}
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, applied_ts, description) VALUES (?, ?, ?)`,
				v, now().Unix(), m.description)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration to schema version %d (%s): %w", v, m.description, err)
		}
	}
	return nil
}

// txOptions: READ COMMITTED, not InnoDB's REPEATABLE READ: the store's transactions
// read what they write (a job's row, its figures) and need no snapshot of the rest, and
// REPEATABLE READ's gap locks would make frontends of several clusters wait on each
// other's inserts.
func (*mysqlDialect) txOptions() *sql.TxOptions {
	return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
}

// tableBytes are each table's bytes, data and indexes.
func (*mysqlDialect) tableBytes(ctx context.Context, p *pool) (map[string]int64, error) {
	out := map[string]int64{}
	return out, scanPairs(ctx, p, `SELECT table_name, data_length + index_length FROM information_schema.tables
		WHERE table_schema = DATABASE()`, out)
}

// mysqlBaseline is the schema version MariaDB stores began at: the versions before have
// a history that is SQLite's alone. A later migration has MariaDB steps of its own, which
// bring a database mysqlSchema made at an earlier version up to date.
const mysqlBaseline = 6

// The names a site gives (clusters, accounts, users, partitions, QOS, findings) are
// VARCHARs in MariaDB, where SQLite's TEXT has no length: a key's columns must fit
// InnoDB's 3072 bytes at 4 bytes a character. Slurm's own limits are below these.
const (
	mysqlName     = "VARCHAR(64)"  // a cluster, user, QOS, property or finding key
	mysqlLongName = "VARCHAR(128)" // an account or partition (Slurm lists several partitions)
	mysqlTable    = ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin"
)

// mysqlSchema makes the newest schema version (SchemaVersion) in an empty MariaDB
// database at once: the same
// tables, columns, keys and indexes as SQLite's migrations make (TestSchemasAgree).
// Where they differ, and why: INTEGER is BIGINT and REAL DOUBLE; names are VARCHARs
// (above); reports are LONGBLOB; SQLite's indexes on coalesce(end_ts, updated_ts) are, in
// MariaDB (whose indexes take columns only), indexes on a generated column ended_ts of
// that value; STRICT and WITHOUT ROWID have no MariaDB form (InnoDB keeps a table in its
// primary key's order anyway).
var mysqlSchema = []string{
	`CREATE TABLE IF NOT EXISTS schema_version (
		version     BIGINT PRIMARY KEY,
		applied_ts  BIGINT NOT NULL,
		description TEXT NOT NULL` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS jobs (
		"key"          BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
		cluster        ` + mysqlName + ` NOT NULL DEFAULT '',
		job_id         BIGINT NOT NULL CHECK (job_id BETWEEN 1 AND 4294967295),
		start_ts       BIGINT,
		end_ts         BIGINT,
		user           ` + mysqlName + `,
		account        ` + mysqlLongName + `,
		"partition"    ` + mysqlLongName + `,
		qos            ` + mysqlName + `,
		state          VARCHAR(64),
		nodes          TEXT,
		nnodes         BIGINT,
		cpus           BIGINT,
		gpus           BIGINT,
		req_mem_mb     BIGINT,
		time_limit_s   BIGINT,
		samples        BIGINT NOT NULL DEFAULT 0,
		updated_ts     BIGINT NOT NULL,
		day            BIGINT,
		cpu_h          DOUBLE,
		cpu_used_h     DOUBLE,
		cpu_meas_h     DOUBLE,
		gpu_h          DOUBLE,
		gpu_used_h     DOUBLE,
		gpu_meas_h     DOUBLE,
		seconds        DOUBLE,
		findings       BIGINT,
		top_key        ` + mysqlName + `,
		top_name       TEXT,
		top_share      DOUBLE,
		top_severity   DOUBLE,
		name           TEXT,
		mem_peak_share DOUBLE,
		ended_ts       BIGINT AS (coalesce(end_ts, updated_ts)) PERSISTENT,
		energy_kwh     DOUBLE,
		UNIQUE KEY jobs_identity (cluster, job_id, start_ts),
		KEY jobs_id (job_id),
		KEY jobs_ended (ended_ts),
		KEY jobs_user (user, ended_ts),
		KEY jobs_account (account, ended_ts)` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS cycles (
		job         BIGINT NOT NULL,
		ts          BIGINT NOT NULL,
		"key"       ` + mysqlName + ` NOT NULL,
		count       BIGINT NOT NULL,
		nonfinite   BIGINT NOT NULL,
		sum         DOUBLE,
		min         DOUBLE,
		max         DOUBLE,
		mean        DOUBLE,
		quantiles   TEXT NOT NULL CHECK (json_valid(quantiles)),
		sev0        BIGINT NOT NULL,
		sev1        BIGINT NOT NULL,
		sev2        BIGINT NOT NULL,
		sev3        BIGINT NOT NULL,
		sev4        BIGINT NOT NULL,
		sev_invalid BIGINT NOT NULL,
		devices     BIGINT NOT NULL,
		time_share  DOUBLE NOT NULL,
		PRIMARY KEY (job, ts, "key"),
		FOREIGN KEY (job) REFERENCES jobs ("key") ON DELETE CASCADE` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS reports (
		job        BIGINT PRIMARY KEY,
		"schema"   BIGINT NOT NULL,
		codec      VARCHAR(8) NOT NULL CHECK (codec IN ('json', 'zstd')),
		report     LONGBLOB NOT NULL,
		updated_ts BIGINT NOT NULL,
		FOREIGN KEY (job) REFERENCES jobs ("key") ON DELETE CASCADE` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS episodes (
		cluster ` + mysqlName + ` NOT NULL,
		from_ts BIGINT NOT NULL,
		to_ts   BIGINT NOT NULL CHECK (to_ts >= from_ts),
		jobs    BIGINT NOT NULL,
		stalled BIGINT NOT NULL,
		peak    DOUBLE NOT NULL,
		PRIMARY KEY (cluster, from_ts)` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS job_findings (
		job     BIGINT NOT NULL,
		finding ` + mysqlName + ` NOT NULL,
		day     BIGINT NOT NULL,
		cpu_h   DOUBLE NOT NULL,
		gpu_h   DOUBLE NOT NULL,
		PRIMARY KEY (job, finding),
		KEY job_findings_cost (finding, cpu_h),
		FOREIGN KEY (job) REFERENCES jobs ("key") ON DELETE CASCADE` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS usage_daily (
		day                BIGINT NOT NULL,
		cluster            ` + mysqlName + ` NOT NULL,
		account            ` + mysqlLongName + ` NOT NULL,
		user               ` + mysqlName + ` NOT NULL,
		"partition"        ` + mysqlLongName + ` NOT NULL,
		qos                ` + mysqlName + ` NOT NULL,
		jobs               BIGINT NOT NULL,
		cpu_h              DOUBLE NOT NULL,
		cpu_used_h         DOUBLE NOT NULL,
		cpu_meas_h         DOUBLE NOT NULL,
		gpu_h              DOUBLE NOT NULL,
		gpu_used_h         DOUBLE NOT NULL,
		gpu_meas_h         DOUBLE NOT NULL,
		mem_gbh            DOUBLE NOT NULL DEFAULT 0,
		mem_unused_gbh     DOUBLE NOT NULL DEFAULT 0,
		mem_meas_gbh       DOUBLE NOT NULL DEFAULT 0,
		limit_cpu_h        DOUBLE NOT NULL DEFAULT 0,
		limit_unused_cpu_h DOUBLE NOT NULL DEFAULT 0,
		energy_kwh         DOUBLE NOT NULL DEFAULT 0,
		energy_jobs        BIGINT NOT NULL DEFAULT 0,
		PRIMARY KEY (day, cluster, account, user, "partition", qos),
		KEY usage_daily_account (account, day),
		KEY usage_daily_user (user, day)` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS findings_daily (
		day         BIGINT NOT NULL,
		cluster     ` + mysqlName + ` NOT NULL,
		account     ` + mysqlLongName + ` NOT NULL,
		user        ` + mysqlName + ` NOT NULL,
		"partition" ` + mysqlLongName + ` NOT NULL,
		qos         ` + mysqlName + ` NOT NULL,
		finding     ` + mysqlName + ` NOT NULL,
		jobs        BIGINT NOT NULL,
		cpu_h       DOUBLE NOT NULL,
		gpu_h       DOUBLE NOT NULL,
		PRIMARY KEY (day, cluster, account, user, "partition", qos, finding),
		KEY findings_daily_finding (finding, day),
		KEY findings_daily_account (account, finding, day),
		KEY findings_daily_user (user, finding, day)` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS findings_site_daily (
		day     BIGINT NOT NULL,
		cluster ` + mysqlName + ` NOT NULL,
		finding ` + mysqlName + ` NOT NULL,
		jobs    BIGINT NOT NULL,
		cpu_h   DOUBLE NOT NULL,
		gpu_h   DOUBLE NOT NULL,
		PRIMARY KEY (day, cluster, finding)` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS finding_users_daily (
		finding ` + mysqlName + ` NOT NULL,
		day     BIGINT NOT NULL,
		cluster ` + mysqlName + ` NOT NULL,
		user    ` + mysqlName + ` NOT NULL,
		jobs    BIGINT NOT NULL,
		cpu_h   DOUBLE NOT NULL,
		gpu_h   DOUBLE NOT NULL,
		PRIMARY KEY (finding, day, cluster, user),
		KEY finding_users_daily_user (user, day)` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS finding_names (
		finding ` + mysqlName + ` PRIMARY KEY,
		name    TEXT NOT NULL` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS usage_site_daily (
		day                BIGINT NOT NULL,
		cluster            ` + mysqlName + ` NOT NULL,
		jobs               BIGINT NOT NULL,
		cpu_h              DOUBLE NOT NULL,
		cpu_used_h         DOUBLE NOT NULL,
		cpu_meas_h         DOUBLE NOT NULL,
		gpu_h              DOUBLE NOT NULL,
		gpu_used_h         DOUBLE NOT NULL,
		gpu_meas_h         DOUBLE NOT NULL,
		mem_gbh            DOUBLE NOT NULL,
		mem_unused_gbh     DOUBLE NOT NULL,
		mem_meas_gbh       DOUBLE NOT NULL,
		limit_cpu_h        DOUBLE NOT NULL,
		limit_unused_cpu_h DOUBLE NOT NULL,
		energy_kwh         DOUBLE NOT NULL DEFAULT 0,
		energy_jobs        BIGINT NOT NULL DEFAULT 0,
		PRIMARY KEY (day, cluster)` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS mails_sent (
		period    VARCHAR(160) NOT NULL,
		kind      VARCHAR(200) NOT NULL,
		recipient VARCHAR(255) NOT NULL,
		sent_ts   BIGINT NOT NULL,
		PRIMARY KEY (period, kind, recipient)` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS notices (
		job      BIGINT NOT NULL,
		reason   VARCHAR(64) NOT NULL,
		node     ` + mysqlName + ` NOT NULL,
		since_ts BIGINT NOT NULL,
		told_ts  BIGINT NOT NULL,
		seen_ts  BIGINT NOT NULL,
		until_ts BIGINT,
		PRIMARY KEY (job, reason),
		KEY notices_seen (seen_ts),
		FOREIGN KEY (job) REFERENCES jobs ("key") ON DELETE CASCADE` + mysqlTable,
	`CREATE TABLE IF NOT EXISTS findings_by_daily (
		dim     VARCHAR(16) NOT NULL CHECK (dim IN ('account', 'user', 'partition', 'qos')),
		day     BIGINT NOT NULL,
		cluster ` + mysqlName + ` NOT NULL,
		value   ` + mysqlLongName + ` NOT NULL,
		finding ` + mysqlName + ` NOT NULL,
		jobs    BIGINT NOT NULL,
		cpu_h   DOUBLE NOT NULL,
		gpu_h   DOUBLE NOT NULL,
		PRIMARY KEY (dim, day, cluster, value, finding)` + mysqlTable,
}

// size is the database's bytes (its tables' data and indexes) and the free bytes in them.
func (*mysqlDialect) size(ctx context.Context, p *pool) (int64, int64, error) {
	var total, free int64
	if err := p.opened.ready(ctx); err != nil {
		return 0, 0, err
	}
	err := p.db.QueryRowContext(ctx, `SELECT coalesce(sum(data_length + index_length), 0), coalesce(sum(data_free), 0)
		FROM information_schema.tables WHERE table_schema = DATABASE()`).Scan(&total, &free)
	return total, free, err
}

// damage is what CHECK TABLE finds wrong (InnoDB keeps the foreign keys itself).
func (*mysqlDialect) damage(ctx context.Context, p *pool) ([]string, error) {
	if err := p.opened.ready(ctx); err != nil {
		return nil, err
	}
	rows, err := p.db.QueryContext(ctx, `CHECK TABLE `+strings.Join(tables, ", "))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var table, op, typ, msg string
		if err := rows.Scan(&table, &op, &typ, &msg); err != nil {
			return nil, err
		}
		if strings.EqualFold(typ, "error") || strings.EqualFold(typ, "status") && !strings.EqualFold(msg, "OK") {
			problems = append(problems, "integrity: "+table+": "+msg)
		}
	}
	return problems, rows.Err()
}

// compact rebuilds the tables (OPTIMIZE TABLE: InnoDB recreates each), giving free
// space back where innodb_file_per_table keeps a file per table (the default).
func (*mysqlDialect) compact(ctx context.Context, p *pool) error {
	if err := p.opened.ready(ctx); err != nil {
		return err
	}
	rows, err := p.db.QueryContext(ctx, `OPTIMIZE TABLE `+strings.Join(tables, ", "))
	if err != nil {
		return err
	}
	return errors.Join(rows.Close(), rows.Err())
}
