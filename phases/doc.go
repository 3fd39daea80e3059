// Package phases says when and why: it splits a job's measured intervals on one node into
// phases of like behaviour, and finds the time the job lost to interference from outside
// it. Both are computed once, at the job's end, from the samples the daemon keeps.
//
// Phases follow González (clustering and sequence analysis of parallel applications,
// chapters 4–6): each interval is a point of normalised metrics (CPU busy and its
// user/system split, read and write rates and calls, file opens, memory and its growth,
// context switches, instructions per cycle and GPU use where measured); DBSCAN clusters
// them with Eps from the knee of the sorted k-distance graph, bounded so that noise
// within one behaviour never splits a job and two behaviours a decade apart are never
// merged; points left as noise join the nearest cluster; a cluster is a phase, and its
// runs of consecutive intervals are the phase's stretches.
//
// Interference follows Shah (capturing the impact of external interference, chapter 5):
// within a phase, an interval whose progress (instructions, else CPU time delivered,
// else bytes moved) falls below the phase's median by more than 4·MAD (and by at least
// 5 %) is interfered when an outside cause shows in the same interval: other work on
// the job's CPUs, or the node's I/O or memory pressure. An interval the job's own CPU
// quota throttled is the scheduler's doing, never interference; suspended intervals are
// not judged at all. The time lost is the interval's time beyond what its progress would
// have taken at the threshold rate; its sum over the job's judged time is the impact,
// classed low (< 7.5 %), medium or high (> 15 %).
package phases
