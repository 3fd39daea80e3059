package store

// SchemaVersion is the schema version this persyst writes: the number of
// migrations. A database with a higher version is refused by Open.
const SchemaVersion = 2

// applicationID marks a SQLite file as a persyst store (PRAGMA application_id,
// "PRST"), so that `file` and Open can tell it from other databases.
const applicationID = 0x50525354

// migration is one schema version: SQL steps applied in order in one
// transaction, together with the schema_version row that records it.
type migration struct {
	description string
	steps       []string
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
}
