// Package collectors will hold the agent tree above the node daemons: collectors with
// exact per-job quantiles, the frontend/sync role and storage (issue 6).
//
// Implemented so far: collectors/store, the SQLite storage of per-job, per-cycle
// property aggregates (exact quantiles, severity distribution, time share) and job
// digests, with versioned schema migrations and retention. Collectors and the
// frontend are not implemented yet.
package collectors
