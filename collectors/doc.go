// Package collectors is the agent tree above the node daemons (seed 000 chapters 4-5,
// DESIGN.md §5-6), over gRPC (collectors/pb):
//
//   - Collector (`persyst collector`) receives the property records of the jobs routed
//     to it and stores, per job, cycle and property, the exact summary over every device
//     it received (collectors/store, SQLite). For a job it holds whole (the thesis's
//     medium jobs) the quantiles are exact; it also keeps the job-wide view for the
//     job's digest. For a big job whose aggregation point is another agent it forwards
//     its summary of each cycle, with a DDSketch per property, there (PushPartial),
//     in the background with bounded retries.
//   - Sync (`persyst sync`) is the aggregation point of big jobs whose collectors meet
//     below it: it merges the collectors' cycle summaries (MergeCycle: counts, sums,
//     extremes and severities exact, quantiles from merged sketches within 1 %, or
//     PerSyst's estimation for parts without a sketch) and stores them, and at the
//     job's end merges the collectors' job-wide parts for the batch host.
//   - Frontend (`persyst frontend`) pings collectors and sync agents every cycle,
//     balances the running jobs (balance.Balance) over the live collectors, names each
//     job's aggregation point (its collector, the sync agent where its collectors meet,
//     or itself when they meet only at the top or that sync agent is down) and the
//     collectors that held it over its life, and pushes every node its routes. It
//     merges the jobs aggregated at the top like a sync agent.
//
// A job's route can change between cycles as loads change; its aggregation point then
// merges the parts of every holder at the job's end, so no cycle a collector received is
// left out of the digest.
package collectors
