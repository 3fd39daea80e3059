// Package store is the collector tree's storage: a SQLite database (pure Go
// driver modernc.org/sqlite, no cgo) holding, per job, the property
// aggregates of every cycle and the job's digest: properties are stored, not raw
// counters (the PerSyst thesis, §7.4.3).
//
// # Use
//
//	s, err := store.Open(ctx, "/var/lib/persyst/persyst.db", store.Options{})
//	rs, err := store.Summarize(cycleRecords, quantile.DefaultQ) // a cycle of the whole job
//	err = s.PutCycle(ctx, jobID, cycleTS, rs)                  // one transaction, upsert
//	err = s.PutJob(ctx, store.Job{ID: jobID, User: "alice", End: end})
//	err = s.Keep(ctx, facts, report)                            // the report with the job map's facts
//	r, err := s.Report(ctx, jobID)                              // the newest job of the id; ErrNotFound if absent
//	series, err := s.Cycles(ctx, jobID, "io_wait")              // one property over time
//	site, err := s.Rollups().Site(ctx, store.SiteFilter{From: from, To: to}) // the site's figures, from the roll-ups
//	p, err := s.Admin().Prune(ctx, time.Now(), retention)         // retention in tiers
//
// A collector holding a whole job calls Summarize on each cycle's records
// (exact type-7 quantiles, quantile.Summarize) and PutCycle. Where a job is
// split over collectors, the parent merges their sketches
// (quantile.MergeSketches) and stores the merged Summary with the merged
// Severity (counts add) and Devices (counts add) the same way.
//
// # Database
//
// Open creates the file if needed and sets, on every connection: WAL
// journaling (readers never wait for the writer, and `persyst report` can
// read while a collector writes), synchronous = NORMAL (no fsync per commit;
// a crash of the process loses nothing, a power loss may lose the last
// commits but never corrupts the file), foreign keys on (deleting a job
// deletes its rows), and a busy timeout (Options.BusyTimeout, default 5 s)
// for locks held by other processes. Writes go through one connection with
// BEGIN IMMEDIATE transactions, so the store's own writers queue in Go and
// never fail with SQLITE_BUSY; reads use a pool of query-only connections.
// The file must be a path (no ":memory:": the two pools must share it).
//
// # Schema (version 3)
//
// Migrations are an ordered list of SQL steps in the binary (schema.go), with an
// optional Go step in the same transaction. schema_version (version, applied_ts,
// description) has one row per applied migration; the database's version is the largest.
// Open applies the missing migrations, each in its own transaction together with its
// schema_version row, so a failing migration changes nothing and leaves the version as it
// was. A database of a newer version is refused (ErrSchemaTooNew, naming both versions);
// a SQLite file of another application is refused (ErrNotStore: PRAGMA application_id is
// "PRST", 0x50525354). All tables are STRICT; times are Unix seconds (INTEGER).
//
//	jobs: one row per job, keyed by (cluster, job_id, start_ts) (unique)
//	  key         INTEGER PRIMARY KEY   the store's own key (Key): what other tables refer to
//	  cluster     TEXT NOT NULL         Options.Cluster of the writer ("": unnamed)
//	  job_id      INTEGER               Slurm job id, 1..2³²-1
//	  start_ts    INTEGER               Slurm's start; NULL: not known yet
//	  end_ts      INTEGER               NULL: running or unknown
//	  user, account, partition, qos, state (end state), nodes   TEXT
//	  nnodes, cpus, gpus, req_mem_mb, time_limit_s              INTEGER
//	  samples     INTEGER NOT NULL      cycle timestamps stored (kept by PutCycle)
//	  updated_ts  INTEGER NOT NULL      last write of the row, its cycles or report
//	  day, cpu_h, cpu_used_h, cpu_meas_h, gpu_h, gpu_used_h, gpu_meas_h
//	                                    the figures the job added to the roll-ups (NULL: none)
//	  seconds, findings, top_key, top_name, top_share, top_severity
//	                                    the report's summary, for job lists
//	  energy_kwh  REAL                  the report's energy (NULL: not measured)
//
//	cycles: one row per job, cycle timestamp and property; WITHOUT ROWID
//	  job         INTEGER → jobs.key ON DELETE CASCADE
//	  ts          INTEGER               the cycle timestamp (epoch-aligned)
//	  key         TEXT                  property key ("io_wait", "memory_bw:memory_bound")
//	  count       INTEGER               finite values (devices with a value)
//	  nonfinite   INTEGER               NaN/±Inf values skipped
//	  sum, min, max, mean  REAL         NULL for NaN (an empty population)
//	  quantiles   TEXT                  JSON array of the q+1 type-7 quantiles
//	  sev0 … sev4 INTEGER               quantile.Severity's bins: 0, (0,¼], (¼,½], (½,¾], (¾,1]
//	  sev_invalid INTEGER               severities outside [0, 1] or NaN
//	  devices     INTEGER               the domain's devices in the cycle: TimeShare's base
//	  time_share  REAL                  (severities > 0) / devices
//	  PRIMARY KEY (job, ts, key)
//
//	reports: the digest of a job, for `persyst report` and the job's page
//	  job         INTEGER PRIMARY KEY → jobs.key ON DELETE CASCADE
//	  schema      INTEGER               the Report JSON's schema (digest.SchemaVersion)
//	  codec       TEXT                  'zstd' (compressed JSON) or 'json' (before schema 3)
//	  report      BLOB                  digest.Report (docs/digest.md)
//	  updated_ts  INTEGER
//
//	job_findings: the hours each finding of a job held (its top jobs per finding)
//	  job, finding, day, cpu_h, gpu_h; PRIMARY KEY (job, finding)
//
//	usage_daily: per day × cluster × account × user × partition × QOS
//	  jobs, cpu_h, cpu_used_h, cpu_meas_h, gpu_h, gpu_used_h, gpu_meas_h, the memory and
//	  time limits requested and left unused, energy_kwh and energy_jobs (the jobs whose
//	  energy was measured); usage_site_daily: the same per day × cluster
//	findings_daily: the same, per finding: jobs, cpu_h, gpu_h
//	findings_site_daily, finding_users_daily: per day × cluster (× user) × finding
//	findings_by_daily: per dim (account, user, partition, QOS) × day × cluster × its
//	  value × finding: a group's findings without the other groups' combinations
//	finding_names: finding → its name
//
//	episodes: site-wide I/O episodes, per cluster (cluster, from_ts, to_ts, jobs, stalled, peak)
//
//	notices: what a running job's user was told (the daemons' notices), per job and
//	reason, kept up to date by its batch host: node, since_ts, told_ts, seen_ts (the
//	latest interval it held), until_ts (when it stopped holding; NULL: it held at
//	seen_ts); PRIMARY KEY (job, reason), job → jobs.key ON DELETE CASCADE
//
// A job is found by its cluster, id and start (resolve): Slurm reuses job ids (they wrap
// at MaxJobId, and restart at FirstJobId when slurmctld loses its state), and several
// clusters' frontends may write one view, so an id alone names nothing. A report or
// facts with a start find the row with that start (within two minutes: Slurm's start and
// the measurement's), or adopt the id's row whose cycles came before any start was known;
// a cycle, which carries no start, goes to the newest row of its id unless that job ended
// an hour before the cycle or was last seen a week before (then it is a new job).
//
// Roll-ups: every kept report adds its job's figures (figuresOf) to usage_daily and,
// per finding, findings_daily, on the day the job ended; a replaced report or changed
// facts take the old figures out first (unroll, roll), so the roll-ups always sum the
// stored reports exactly, and the site's figures read days, not jobs. Pruning jobs keeps
// their figures in the roll-ups, which have a retention of their own (Retention).
//
// Choices:
//
//   - Quantiles as one JSON array, not q+1 columns: q is configurable
//     (deciles by default, percentiles or any q up to quantile.MaxQ), and a
//     Summary with another q must fit the same row; the values are the
//     shortest decimals that parse back to the same float64 (round trip
//     exact), null for NaN (an empty population). SQL reads them directly
//     (json_extract(quantiles, '$[5]') is the median of deciles) and the
//     sqlite3 shell shows them. The cost, measured on the synthetic job below:
//     300 B per row against 188 B with a little-endian float64 BLOB and 212 B
//     with 7-digit JSON; the reduction is above 99 % either way, so
//     readability and exactness won. A separate quantiles table (one row per
//     quantile) would repeat the key columns q+1 times.
//   - WITHOUT ROWID with the primary key (job_id, ts, key): a rowid table
//     needs a second index for the upsert key and measured 10 % larger (331 B
//     per row). Rows of one job are contiguous, cycles arrive in ts order and
//     go to the end of the job's range. Cycles(job, key) scans the job's rows
//     (60 cycles × 40 properties: 2,400 rows; a week at 60 s: 400,000, about
//     0.1 s) rather than keep a second index of the same size.
//   - sum is kept next to mean so that aggregates of parts merge exactly
//     (quantile.MergeEstimate needs Count and Sum); devices next to
//     time_share so that shares of parts merge exactly too.
//   - Admin.Prune deletes by tier (Retention: cycles, jobs, roll-ups) by end_ts,
//     or by updated_ts for a job whose end was never recorded, in short
//     transactions; freed pages are reused, the file does not shrink.
//
// # Data reduction (§7.4.3)
//
// TestReduction and BenchmarkReduction store a synthetic job of 64 nodes × 32
// CPUs × 20 properties × 60 cycles (fixed-seed lognormal values, 5 % idle
// devices, 35 % with a severity > 0) three ways and compare the database
// sizes after VACUUM (page_count × page_size):
//
//	raw records (job, ts, key, device as text, value, severity)  2,457,600 rows  136.9 MB  55.7 B/record
//	compact raw records (key and device as integer ids)           2,457,600 rows   80.4 MB  32.7 B/record
//	PutCycle's rows (deciles) and the job row                         1,200 rows  376.8 kB   297 B/row
//	                                                              (an empty database: 20.5 kB)
//
// Reduction: 99.72 % against the raw records, 99.53 % against the compact
// ones (PerSyst reports 99.06 % for SuperMUC's 142 concurrent jobs). It grows
// with the job: a row per property and cycle whatever the number of devices.
// A job of 8 nodes × 32 CPUs over 10 cycles still gets 95.6 % against the
// compact raw records.
//
// Cost (AMD EPYC, one core): Summarize of one cycle of that job (40,960
// records, 20 properties) 4.2 ms; PutCycle of its 20 results 0.5 ms.
package store
