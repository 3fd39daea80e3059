// Package collectors will hold the agent tree above the node daemons: collectors with
// exact per-job quantiles, the frontend/sync role and storage (issue 6). Nothing is
// implemented here yet.
package collectors
