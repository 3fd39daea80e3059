// Package jobmap is persyst's view of the cluster's jobs: which nodes and cores each job
// holds (for balancing, Map.Running) and each job's facts (user, name, array ids, and
// the exact files Slurm writes its stdout and stderr to, for the digest; Map.Job).
//
// Sources, in order:
//   - slurmrestd, through clients generated with oapi-codegen: jobmap/v0042 (Slurm 24.11
//     to 26.05; the spec 24.11's slurmrestd --generate-openapi-spec writes) and
//     jobmap/v0038 (22.05; the spec it serves at /openapi/v3, with overlay.yaml correcting
//     where its responses differ from its spec); `make generate`. Each data parser is an
//     adapter behind one interface (dataParser: its requests and its mapping to Job;
//     v0042.go, v0038.go). The server's /openapi/v3 says which it serves, asked once
//     (RestSource.API). rest_auth/local on a unix socket, or JWT (X-SLURM-USER-NAME/-TOKEN)
//     over TCP.
//   - Slurm's commands when slurmrestd is not configured or fails (logged once, and once
//     when it answers again), by the release `scontrol --version` names, which chooses the
//     adapter (commandsParser): `scontrol --json=v0.0.42 show job` from 24.11, `squeue
//     --json` on 22.05, `scontrol show job -o -d` otherwise or when the JSON cannot be
//     read (cli.go, scontrol.go). What each release changes is a feature of slurmver.
//
// A job Slurm no longer knows is ErrNoJob: a normal result, not a failure.
//
// Hostlists (hostlist.go) and output file patterns (pattern.go) are written here; the
// comments at the top of those files say which libraries were looked at and why none
// fits, and exactly which Slurm rules are implemented (checked against the files a real
// Slurm 22.05 wrote: testdata/ and the integration tests).
package jobmap
