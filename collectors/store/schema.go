package store

import (
	"context"
)

// SchemaVersion is the schema version this persyst writes: the number of
// migrations. A database with a higher version is refused by Open.
const SchemaVersion = 8

// applicationID marks a SQLite file as a persyst store (PRAGMA application_id,
// "PRST"), so that `file` and Open can tell it from other databases.
const applicationID = 0x50525354

// migration is one schema version: SQL steps applied in order in one
// transaction, together with the schema_version row that records it.
type migration struct {
	description string
	steps       []string
	// after, if set, runs in the migration's transaction after its steps: what SQL
	// alone cannot do (reading reports into figures). It is today's code: it may touch
	// only what its own and the earlier migrations made. Jobs whose reports are in no
	// roll-up yet are rolled up once, after the newest migration (rollAll), with the
	// newest figures.
	after func(ctx context.Context, tx *txn) error
	// mysql are the migration's steps on MariaDB, for the versions after mysqlBaseline
	// (mysqlSchema makes those before at once).
	mysql []string
}

// migrations is the schema history; migrations[i] brings a database from
// version i to version i+1. Append only: never edit a released step, add a new
// migration instead. A step runs inside a transaction with foreign keys on, so
// a step that rebuilds a table must not rely on PRAGMA foreign_keys=OFF (which
// is a no-op inside a transaction); use the "create new, copy, drop old,
// rename" sequence with a foreign_key_check step at the end.
var migrations = []migration{
	{
		description: "jobs, cycles and reports",
		steps: []string{
			`CREATE TABLE jobs (
				job_id     INTEGER PRIMARY KEY CHECK (job_id BETWEEN 1 AND 4294967295),
				cluster    TEXT,
				user       TEXT,
				nodes      TEXT,
				nnodes     INTEGER,
				cpus       INTEGER,
				start_ts   INTEGER,
				end_ts     INTEGER,
				samples    INTEGER NOT NULL DEFAULT 0,
				updated_ts INTEGER NOT NULL
			) STRICT`,
			`CREATE TABLE cycles (
				job_id      INTEGER NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
				ts          INTEGER NOT NULL,
				key         TEXT NOT NULL,
				count       INTEGER NOT NULL,
				nonfinite   INTEGER NOT NULL,
				sum         REAL,
				min         REAL,
				max         REAL,
				mean        REAL,
				quantiles   TEXT NOT NULL CHECK (json_type(quantiles) = 'array'),
				sev0        INTEGER NOT NULL,
				sev1        INTEGER NOT NULL,
				sev2        INTEGER NOT NULL,
				sev3        INTEGER NOT NULL,
				sev4        INTEGER NOT NULL,
				sev_invalid INTEGER NOT NULL,
				devices     INTEGER NOT NULL,
				time_share  REAL NOT NULL,
				PRIMARY KEY (job_id, ts, key)
			) STRICT, WITHOUT ROWID`,
			`CREATE TABLE reports (
				job_id     INTEGER PRIMARY KEY REFERENCES jobs (job_id) ON DELETE CASCADE,
				schema     INTEGER NOT NULL,
				report     TEXT NOT NULL,
				updated_ts INTEGER NOT NULL
			) STRICT`,
			`PRAGMA application_id = 1347572564`, // applicationID
		},
	},
	{
		description: "site-wide I/O episodes",
		steps: []string{
			`CREATE TABLE episodes (
				from_ts INTEGER PRIMARY KEY,
				to_ts   INTEGER NOT NULL CHECK (to_ts >= from_ts),
				jobs    INTEGER NOT NULL,
				stalled INTEGER NOT NULL,
				peak    REAL NOT NULL
			) STRICT`,
		},
	},
	{
		// Jobs keyed by (cluster, job id, start): a reused id or a second cluster's job is
		// a new row, never an overwrite. The store's own key (jobs.key) is what cycles,
		// reports and job_findings refer to; a migrated job's key is its old job id, so
		// the copy keeps every reference. The job's figures (day, hours allocated and
		// used) are kept on its row as they were rolled up, so that a replaced report or
		// changed facts take exactly their old contribution out of the roll-ups.
		description: "jobs keyed by cluster, id and start; the site's facts and daily roll-ups",
		steps: []string{
			`CREATE TABLE jobs_new (
				key          INTEGER PRIMARY KEY,
				cluster      TEXT NOT NULL DEFAULT '',
				job_id       INTEGER NOT NULL CHECK (job_id BETWEEN 1 AND 4294967295),
				start_ts     INTEGER,
				end_ts       INTEGER,
				user         TEXT,
				account      TEXT,
				partition    TEXT,
				qos          TEXT,
				state        TEXT,
				nodes        TEXT,
				nnodes       INTEGER,
				cpus         INTEGER,
				gpus         INTEGER,
				req_mem_mb   INTEGER,
				time_limit_s INTEGER,
				samples      INTEGER NOT NULL DEFAULT 0,
				updated_ts   INTEGER NOT NULL,
				day          INTEGER,
				cpu_h        REAL,
				cpu_used_h   REAL,
				cpu_meas_h   REAL,
				gpu_h        REAL,
				gpu_used_h   REAL,
				gpu_meas_h   REAL,
				seconds      REAL,
				findings     INTEGER,
				top_key      TEXT,
				top_name     TEXT,
				top_share    REAL,
				top_severity REAL
			) STRICT`,
			`INSERT INTO jobs_new (key, cluster, job_id, start_ts, end_ts, user, nodes, nnodes, cpus, samples, updated_ts)
				SELECT job_id, coalesce(cluster, ''), job_id, start_ts, end_ts, user, nodes, nnodes, cpus, samples, updated_ts FROM jobs`,
			`CREATE TABLE cycles_new (
				job         INTEGER NOT NULL REFERENCES jobs_new (key) ON DELETE CASCADE,
				ts          INTEGER NOT NULL,
				key         TEXT NOT NULL,
				count       INTEGER NOT NULL,
				nonfinite   INTEGER NOT NULL,
				sum         REAL,
				min         REAL,
				max         REAL,
				mean        REAL,
				quantiles   TEXT NOT NULL CHECK (json_type(quantiles) = 'array'),
				sev0        INTEGER NOT NULL,
				sev1        INTEGER NOT NULL,
				sev2        INTEGER NOT NULL,
				sev3        INTEGER NOT NULL,
				sev4        INTEGER NOT NULL,
				sev_invalid INTEGER NOT NULL,
				devices     INTEGER NOT NULL,
				time_share  REAL NOT NULL,
				PRIMARY KEY (job, ts, key)
			) STRICT, WITHOUT ROWID`,
			`INSERT INTO cycles_new SELECT * FROM cycles`,
			`CREATE TABLE reports_new (
				job        INTEGER PRIMARY KEY REFERENCES jobs_new (key) ON DELETE CASCADE,
				schema     INTEGER NOT NULL,
				codec      TEXT NOT NULL CHECK (codec IN ('json', 'zstd')),
				report     BLOB NOT NULL,
				updated_ts INTEGER NOT NULL
			) STRICT`,
			`INSERT INTO reports_new SELECT job_id, schema, 'json', CAST(report AS BLOB), updated_ts FROM reports`,
			`DROP TABLE cycles`,
			`DROP TABLE reports`,
			`DROP TABLE jobs`,
			`ALTER TABLE jobs_new RENAME TO jobs`,
			`ALTER TABLE cycles_new RENAME TO cycles`,
			`ALTER TABLE reports_new RENAME TO reports`,
			`CREATE UNIQUE INDEX jobs_identity ON jobs (cluster, job_id, start_ts)`,
			`CREATE INDEX jobs_id ON jobs (job_id)`,
			`CREATE INDEX jobs_ended ON jobs (coalesce(end_ts, updated_ts))`,
			`CREATE INDEX jobs_user ON jobs (user, coalesce(end_ts, updated_ts))`,
			`CREATE TABLE job_findings (
				job     INTEGER NOT NULL REFERENCES jobs (key) ON DELETE CASCADE,
				finding TEXT NOT NULL,
				day     INTEGER NOT NULL,
				cpu_h   REAL NOT NULL,
				gpu_h   REAL NOT NULL,
				PRIMARY KEY (job, finding)
			) STRICT, WITHOUT ROWID`,
			`CREATE INDEX job_findings_cost ON job_findings (finding, cpu_h)`,
			`CREATE TABLE usage_daily (
				day        INTEGER NOT NULL,
				cluster    TEXT NOT NULL,
				account    TEXT NOT NULL,
				user       TEXT NOT NULL,
				partition  TEXT NOT NULL,
				qos        TEXT NOT NULL,
				jobs       INTEGER NOT NULL,
				cpu_h      REAL NOT NULL,
				cpu_used_h REAL NOT NULL,
				cpu_meas_h REAL NOT NULL,
				gpu_h      REAL NOT NULL,
				gpu_used_h REAL NOT NULL,
				gpu_meas_h REAL NOT NULL,
				PRIMARY KEY (day, cluster, account, user, partition, qos)
			) STRICT, WITHOUT ROWID`,
			`CREATE TABLE findings_daily (
				day       INTEGER NOT NULL,
				cluster   TEXT NOT NULL,
				account   TEXT NOT NULL,
				user      TEXT NOT NULL,
				partition TEXT NOT NULL,
				qos       TEXT NOT NULL,
				finding   TEXT NOT NULL,
				jobs      INTEGER NOT NULL,
				cpu_h     REAL NOT NULL,
				gpu_h     REAL NOT NULL,
				PRIMARY KEY (day, cluster, account, user, partition, qos, finding)
			) STRICT, WITHOUT ROWID`,
			`CREATE INDEX findings_daily_finding ON findings_daily (finding, day)`,
			// Coarser roll-ups of the same figures, for the site's page: a finding's
			// total per day and cluster, and its users'.
			`CREATE TABLE findings_site_daily (
				day     INTEGER NOT NULL,
				cluster TEXT NOT NULL,
				finding TEXT NOT NULL,
				jobs    INTEGER NOT NULL,
				cpu_h   REAL NOT NULL,
				gpu_h   REAL NOT NULL,
				PRIMARY KEY (day, cluster, finding)
			) STRICT, WITHOUT ROWID`,
			`CREATE TABLE finding_users_daily (
				finding TEXT NOT NULL,
				day     INTEGER NOT NULL,
				cluster TEXT NOT NULL,
				user    TEXT NOT NULL,
				jobs    INTEGER NOT NULL,
				cpu_h   REAL NOT NULL,
				gpu_h   REAL NOT NULL,
				PRIMARY KEY (finding, day, cluster, user)
			) STRICT, WITHOUT ROWID`,
			`CREATE INDEX finding_users_daily_user ON finding_users_daily (user, day)`,
			`CREATE TABLE finding_names (
				finding TEXT PRIMARY KEY,
				name    TEXT NOT NULL
			) STRICT, WITHOUT ROWID`,
		},
		// The reports are rolled up after the newest migration (rollAll).
	},
	{
		// What jobs requested and left unused, for the admin's view: memory (GiB-hours
		// requested, and unused where the job's peak was measured) and the time limit
		// (CPU-hours of it requested, and left unused when the job ended before it), and
		// the job's name. The roll-ups compute them from the job's row (wasteColumns), so
		// changed facts move them as they move the hours; mem_peak_share is the report's
		// (memory_unused: the peak against the request).
		description: "memory and time limit requested and unused; job names",
		steps: []string{
			`ALTER TABLE jobs ADD COLUMN name TEXT`,
			`ALTER TABLE jobs ADD COLUMN mem_peak_share REAL`,
			`ALTER TABLE usage_daily ADD COLUMN mem_gbh REAL NOT NULL DEFAULT 0`,
			`ALTER TABLE usage_daily ADD COLUMN mem_unused_gbh REAL NOT NULL DEFAULT 0`,
			`ALTER TABLE usage_daily ADD COLUMN mem_meas_gbh REAL NOT NULL DEFAULT 0`,
			`ALTER TABLE usage_daily ADD COLUMN limit_cpu_h REAL NOT NULL DEFAULT 0`,
			`ALTER TABLE usage_daily ADD COLUMN limit_unused_cpu_h REAL NOT NULL DEFAULT 0`,
			`CREATE INDEX jobs_account ON jobs (account, coalesce(end_ts, updated_ts))`,
			// The site's figures per day and cluster (the site's totals and trend read a
			// row per day), and usage_daily by account and by user (theirs).
			`CREATE TABLE usage_site_daily (
				day                INTEGER NOT NULL,
				cluster            TEXT NOT NULL,
				jobs               INTEGER NOT NULL,
				cpu_h              REAL NOT NULL,
				cpu_used_h         REAL NOT NULL,
				cpu_meas_h         REAL NOT NULL,
				gpu_h              REAL NOT NULL,
				gpu_used_h         REAL NOT NULL,
				gpu_meas_h         REAL NOT NULL,
				mem_gbh            REAL NOT NULL,
				mem_unused_gbh     REAL NOT NULL,
				mem_meas_gbh       REAL NOT NULL,
				limit_cpu_h        REAL NOT NULL,
				limit_unused_cpu_h REAL NOT NULL,
				PRIMARY KEY (day, cluster)
			) STRICT, WITHOUT ROWID`,
			`CREATE INDEX usage_daily_account ON usage_daily (account, day)`,
			`CREATE INDEX usage_daily_user ON usage_daily (user, day)`,
			// The efficiency reports mailed: one per period, kind and recipient, ever.
			`CREATE TABLE mails_sent (
				period    TEXT NOT NULL,
				kind      TEXT NOT NULL,
				recipient TEXT NOT NULL,
				sent_ts   INTEGER NOT NULL,
				PRIMARY KEY (period, kind, recipient)
			) STRICT, WITHOUT ROWID`,
		},
		after: rollWaste,
	},
	{
		// What running jobs' users were told (the daemons' notices): a row per job and
		// reason, kept up to date by the job's batch host while the reason holds, so that
		// the site's view lists the running jobs that hold what they do not use. It goes
		// with its job.
		description: "notices told to running jobs",
		steps: []string{
			`CREATE TABLE notices (
				job      INTEGER NOT NULL REFERENCES jobs (key) ON DELETE CASCADE,
				reason   TEXT NOT NULL,
				node     TEXT NOT NULL,
				since_ts INTEGER NOT NULL,
				told_ts  INTEGER NOT NULL,
				seen_ts  INTEGER NOT NULL,
				until_ts INTEGER,
				PRIMARY KEY (job, reason)
			) STRICT, WITHOUT ROWID`,
			`CREATE INDEX notices_seen ON notices (seen_ts)`,
		},
	},
	{
		// The findings per day, cluster and one group (account, user, partition or QOS):
		// each group's costliest finding on the site's page reads its dimension's rows,
		// not every combination findings_daily keeps (at a million jobs a week, about as
		// many rows as the jobs' findings). And findings_daily by account and by user,
		// for a page narrowed to one, or to what a user may see.
		description: "findings per day by account, user, partition and QOS",
		steps: append(findingsByFill(), []string{
			`CREATE INDEX findings_daily_account ON findings_daily (account, finding, day)`,
			`CREATE INDEX findings_daily_user ON findings_daily (user, finding, day)`,
		}...),
	},
	{
		// Each cluster's frontend finds its own site-wide episodes: in a store several
		// clusters share, one cluster's episode must not overwrite another's that began
		// in the same second. The episodes from before are the unnamed cluster's. On
		// MariaDB, the mails' keys hold what they are made of: "account:" and an account
		// name (up to 128), a period and a cluster's name.
		description: "site-wide I/O episodes per cluster",
		steps: []string{
			`CREATE TABLE episodes_by_cluster (
				cluster TEXT NOT NULL,
				from_ts INTEGER NOT NULL,
				to_ts   INTEGER NOT NULL CHECK (to_ts >= from_ts),
				jobs    INTEGER NOT NULL,
				stalled INTEGER NOT NULL,
				peak    REAL NOT NULL,
				PRIMARY KEY (cluster, from_ts)
			) STRICT, WITHOUT ROWID`,
			`INSERT INTO episodes_by_cluster (cluster, from_ts, to_ts, jobs, stalled, peak)
				SELECT '', from_ts, to_ts, jobs, stalled, peak FROM episodes`,
			`DROP TABLE episodes`,
			`ALTER TABLE episodes_by_cluster RENAME TO episodes`,
		},
		mysql: []string{
			`ALTER TABLE episodes ADD COLUMN IF NOT EXISTS cluster ` + mysqlName + ` NOT NULL DEFAULT '' FIRST`,
			`ALTER TABLE episodes DROP PRIMARY KEY, ADD PRIMARY KEY (cluster, from_ts)`,
			`ALTER TABLE episodes ALTER COLUMN cluster DROP DEFAULT`,
			`ALTER TABLE mails_sent MODIFY period VARCHAR(160) NOT NULL, MODIFY kind VARCHAR(200) NOT NULL`,
		},
	},
	{
		// Version 8: a job's energy (its report's, kWh; NULL: not measured) and its sums in
		// the roll-ups, with the jobs whose energy was measured. The reports of before
		// have none.
		description: "energy per job and in the roll-ups",
		steps: []string{
			`ALTER TABLE jobs ADD COLUMN energy_kwh REAL`,
			`ALTER TABLE usage_daily ADD COLUMN energy_kwh REAL NOT NULL DEFAULT 0`,
			`ALTER TABLE usage_daily ADD COLUMN energy_jobs INTEGER NOT NULL DEFAULT 0`,
			`ALTER TABLE usage_site_daily ADD COLUMN energy_kwh REAL NOT NULL DEFAULT 0`,
			`ALTER TABLE usage_site_daily ADD COLUMN energy_jobs INTEGER NOT NULL DEFAULT 0`,
		},
		mysql: []string{
			`ALTER TABLE jobs ADD COLUMN IF NOT EXISTS energy_kwh DOUBLE`,
			`ALTER TABLE usage_daily ADD COLUMN IF NOT EXISTS energy_kwh DOUBLE NOT NULL DEFAULT 0,
				ADD COLUMN IF NOT EXISTS energy_jobs BIGINT NOT NULL DEFAULT 0`,
			`ALTER TABLE usage_site_daily ADD COLUMN IF NOT EXISTS energy_kwh DOUBLE NOT NULL DEFAULT 0,
				ADD COLUMN IF NOT EXISTS energy_jobs BIGINT NOT NULL DEFAULT 0`,
		},
	},
}

// findingsByFill are the steps that make findings_by_daily from findings_daily (a
// released migration's: its dimensions are its own, not rollBy's).
func findingsByFill() []string {
	steps := []string{`CREATE TABLE findings_by_daily (
		dim     TEXT NOT NULL CHECK (dim IN ('account', 'user', 'partition', 'qos')),
		day     INTEGER NOT NULL,
		cluster TEXT NOT NULL,
		value   TEXT NOT NULL,
		finding TEXT NOT NULL,
		jobs    INTEGER NOT NULL,
		cpu_h   REAL NOT NULL,
		gpu_h   REAL NOT NULL,
		PRIMARY KEY (dim, day, cluster, value, finding)
	) STRICT, WITHOUT ROWID`}
	for _, d := range []string{"account", "user", "partition", "qos"} {
		steps = append(steps, `INSERT INTO findings_by_daily (dim, day, cluster, value, finding, jobs, cpu_h, gpu_h)
			SELECT '`+d+`', day, cluster, `+d+`, finding, sum(jobs), sum(cpu_h), sum(gpu_h) FROM findings_daily
			GROUP BY day, cluster, `+d+`, finding`)
	}
	return steps
}
