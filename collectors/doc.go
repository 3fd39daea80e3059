// Package collectors is the agent tree above the node daemons (the PerSyst thesis,
// chapters 4-5), over gRPC (collectors/pb):
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
// # Measured loads
//
// PerSyst balanced before measuring, so it charged every job the maximum: every property
// of the strategy on every device of every node (the PerSyst thesis, §5.3). persyst balances every
// cycle, so it charges what was sent. Each node's push carries, besides the records, how
// many the strategy would give if every condition held on every device
// (properties.Accumulator.MaxRecords); the collector answers the frontend's ping with,
// per job, its heaviest node-cycle since the last ping (Heartbeat.jobs); the frontend
// keeps each job's largest share so far and charges it that share of a node's worth per
// node, in thousandths (before the first report: the maximum). Shares only grow, so a
// job moves at most when it gets heavier. l_max keeps its meaning (a collector's own
// nodes at full load), so a job whose nodes send half their maximum fits twice as many
// nodes on one collector: exact quantiles, one tree node. `persyst frontend --loads max`
// restores PerSyst's behaviour.
//
// A job's route can change between cycles as loads change; its aggregation point then
// merges the parts of every holder at the job's end, so no cycle a collector received is
// left out of the digest.
package collectors
