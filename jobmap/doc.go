// Package jobmap is persyst's view of the cluster's jobs: which nodes and cores each job
// holds (for balancing, Map.Running) and each job's facts (user, name, array ids, and
// the exact files Slurm writes its stdout and stderr to, for the digest; Map.Job).
//
// Sources, in order:
//   - slurmrestd, through a client generated with oapi-codegen from the spec the installed
//     slurmrestd serves at /openapi/v3 (jobmap/v0038: openapi.json as served, overlay.yaml
//     correcting where 22.05's responses differ from its own spec; `make generate`).
//     rest_auth/local on a unix socket, or JWT (X-SLURM-USER-NAME/-TOKEN) over TCP.
//     APIVersion names the data parser in one place; v0.0.40+ goes beside v0038.
//   - Slurm's commands when slurmrestd is not configured or fails (logged once, and once
//     when it answers again): `scontrol --json show job` (23.02+), `squeue --json` (the
//     same v0.0.38 schema, parsed with the generated types), `scontrol show job -o -d`.
//
// A job Slurm no longer knows is ErrNoJob: a normal result, not a failure.
//
// Hostlists (hostlist.go) and output file patterns (pattern.go) are written here; the
// comments at the top of those files say which libraries were looked at and why none
// fits, and exactly which Slurm rules are implemented (checked against the files a real
// Slurm 22.05 wrote: testdata/ and the integration tests).
package jobmap
