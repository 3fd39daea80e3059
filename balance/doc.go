// Package balance decides, once per measurement cycle, where every job's
// performance data goes in the agent tree: PerSyst's job balancing
// (thesis §5.3, Algorithms 1–3), the agent tree it works on, tree distance,
// and a simulator for synthetic clusters. It is pure and deterministic: no
// I/O except reading tree descriptions from an io.Reader, no global mutable
// state, no goroutines; the same input gives the same routes.
//
// # Agent tree
//
// A Tree has a frontend (root SyncAgent) → sync agents (any number of
// middle layers, possibly none) → collectors → node agents (leaves, one per
// compute node, named by host name). Build it from
//
//   - Slurm's topology.conf (ParseTopologyConf, topology/tree syntax): leaf
//     switches become collectors, upper switches sync agents, the top switch
//     the frontend (a frontend named "frontend" is added above several top
//     switches, or above a lone leaf switch);
//   - persyst's explicit description (ParseTreeSpec), one agent per line:
//     "Frontend=fe Syncs=s[1-2]", "Sync=s1 Collectors=c[1-2]",
//     "Collector=c1 Nodes=n[001-043]";
//   - FlatTree for a cluster without topology: consecutive nodes in groups
//     of about l_max worth, the groups under sync agents.
//
// Hostlists are expanded with jobmap.ExpandHostlist. Validation: every
// node under exactly one collector, every agent under at most one parent,
// no cycles, no unknown references, no switch with both nodes and switches;
// parse errors name the line.
//
// # Tree distance
//
// The distance of two agents is the larger of their edge counts up to the
// root of the smallest subtree holding both, i.e. max(depth(a), depth(b)) −
// depth(lca(a, b)) (Figure 5.2: 13–15 is 2, 12–15 is 1, 15–30 is 3). The
// lowest common ancestor uses binary lifting over parent pointers: O(n log h)
// to build (n agents, h the tree height, ≤ 5 in practice) and O(log h) per
// query, ~15 ns on a 100,000-node tree.
//
// # Balancing (Algorithms 1–3)
//
// The load of a job is l_j = nodes × properties per node (Config.LoadPerNode,
// per job overridable); l_max is what one collector takes (Config.LMax,
// default: the largest collector's own nodes × load per node). Balance
//
//  1. sorts the jobs by load, biggest first, ties by job id (numerically if
//     both ids are decimal) — the order is total, so the result does not
//     depend on the input order;
//  2. leaves one-node jobs at their node agent (local, exact; the thesis's
//     storage sanity check that may send them up anyway is not modelled);
//  3. gives every other job n_c = ⌈l_j/l_max⌉ collectors (clamped to the
//     number of collectors). Each is found with FindBestCollector among the
//     collectors not yet chosen for the job: those with the minimum assigned
//     load, then the least total tree distance to the job's still unassigned
//     nodes (eq. 5.9), then the lowest index in tree order. The chosen
//     collector first takes its own children that belong to the job while
//     its load stays ≤ l_max;
//  4. places the rest of the job (nodes whose own collector was not chosen
//     or was full) on the chosen collectors: least loaded first, ties by tree
//     distance to the node, then the order of choice. The thesis calls
//     FindBestCollector(C', A_j) here, i.e. ties by the distance to the whole
//     job; ties by the node's own distance keep data closer to its source
//     and differ only in ties.
//
// The route of a job lists, for each of its nodes, the agent it sends to,
// and the aggregation point: the node itself (local), the collector if one
// collector holds the whole job (exact quantiles), otherwise the lowest
// common ancestor of its collectors — a sync agent or the frontend — which
// merges with quantile estimation. Collectors that were chosen but got none
// of the job's load are not part of the route.
//
// # Decision: load above l_max (Algorithm 2, lines 22–25)
//
// The thesis notes that placing "the rest of the load" can push a
// collector above l_max, and mentions a variant that acquires further
// collectors instead. Both are implemented (Config.Overflow):
//
//   - OverflowAllow, the default, is the algorithm as printed. Because
//     FindBestCollector picks a least-loaded collector, when the job does not
//     fit there it fits nowhere whole: the choice is "exact but over l_max"
//     or "split". We keep jobs exact — exactness is the point of balancing
//     and l_max is a planning figure, not a hard limit — so every job with
//     l_j ≤ l_max is aggregated exactly on one collector. Statistics count
//     the jobs that left a collector above l_max (JobsOverLMax) and the
//     collectors that ended above it.
//   - OverflowSpill acquires another collector with FindBestCollector when
//     every chosen collector would go above l_max, as long as some collector
//     still has room; with unit loads no collector then exceeds l_max unless
//     all of them are full, at the price of splitting such jobs.
//
// A single node whose load alone exceeds l_max still has to go somewhere; it
// is placed like the rest (the only way a collector exceeds l_max under
// OverflowSpill besides a full cluster).
//
// # Statistics
//
// Exact share by jobs is (local + one-collector jobs) / jobs, the measure of
// Table 7.5 (91% on SuperMUC: 85% at collectors + 6.04% at node agents); the
// share weighted by load is reported too. Tree nodes used per cycle follow
// Table 7.6 ("the number of nodes where the performance data of a job was
// being sent was added for all jobs"), counting inner agents only (node
// agents are the sources):
//
//   - balanced: 0 for a local job, 1 for an exact job, and for a split job
//     its collectors plus every agent on their paths up to and including
//     the merging agent;
//   - established topology: every inner agent that is an ancestor of one of
//     the job's nodes, frontend included (3 for a one-node job on a
//     frontend/sync/collector tree).
//
// With Table 7.5's job counts these definitions reproduce the order of
// magnitude of 217.59 (0 for 11.2 local jobs, 1 for 157.5 exact jobs, ~3–5
// for 16.6 split jobs).
//
// # Complexity
//
// For J jobs, C collectors, height h and A_j the nodes of job j: sorting
// O(J log J); per job O(|A_j|·h) to build per-subtree depth histograms of
// the job's unassigned nodes, then each FindBestCollector call costs O(C)
// to find the minimum load plus O(h²) per tied candidate, since the total
// distance from a collector to all the job's nodes is read from the
// histograms of its h ancestors instead of |A_j| distance queries; the rest
// costs O(n_c·log h) per node. Worst case O(J·n_c·C·h²); in practice the
// SuperMUC shape (9,216 nodes, 216 collectors, ~170 jobs) balances in ~3 ms
// and 100,000 nodes, 2,000 collectors, 20,000 jobs in ~0.2 s. The thesis
// states O(n² log n) for n agents.
//
// # Simulator
//
// Simulate builds an evenly split tree, starts and ends jobs over warm-up
// and measured cycles (seeded math/rand; Slurm-like or island-only
// placement), balances each measured cycle, and averages the Statistics;
// only the Balance call is timed. SuperMUC returns the thesis's production
// shape and documents its job mix; SimResult.WriteText prints the numbers
// next to the thesis's (91% exact; 217.59 vs 905.81 tree nodes).
//
// With the SuperMUC preset (seed 1) the exact share is 92.5% (seeds 1–5:
// 89.6–93.1%), tree nodes used 285 balanced vs 752 up the topology. Under
// either overflow policy the exact share equals the share of jobs with
// l_j ≤ l_max whenever collectors have room, so it is set by the job mix:
// with Table 7.5's 9% of jobs above one collector it cannot reach 95%
// unless l_max grows (95.6% with l_max = 128 nodes' worth, 3 collectors'
// children). The balanced count exceeds the thesis's 217.59 because our big
// jobs (up to 2,048 nodes, needed to keep ~70% of the machine busy) need
// many collectors each, while the thesis's figures imply ~3.6 tree nodes per
// split job; the count up the topology depends on how the scheduler spreads
// jobs over collectors (752 with island placement, 640 with Slurm tree
// placement, vs 905.81).
//
// # Measured loads in the simulator
//
// The thesis charged every job its maximum because it balanced before measuring; persyst's
// frontend charges the share of the maximum a job's nodes actually sent (package
// collectors, "Measured loads"). SimConfig.MinLoadShare/MaxLoadShare model that: each job
// draws a share, charged per node in thousandths of a node's worth, l_max unchanged. The
// one SuperMUC figure for it is §7.4.3's week with threshold-based property selection:
// 2,346,044 of 4,027,187 records, 58.3% (ThesisLoadShare). With the SuperMUC preset:
//
//	persyst balance simulate --load-share max       92.5% exact, 284.7 tree nodes
//	persyst balance simulate --load-share thesis    93.3% exact, 236.9 tree nodes
//	persyst balance simulate --load-share 0.165-1   94.5% exact, 237.7 tree nodes
//
// (the last spreads the shares uniformly with the same 58.3% mean; seeds 1–5 with
// "thesis": 91.5–93.6%). Every job of up to
// 43/share nodes now fits one collector, but the mix's 2% of jobs above 512 nodes and most
// of its 7% of 44–512-node jobs still do not, so the 95% is not reached under
// either model; there are no per-job SuperMUC figures to choose between them, and we did
// not tune the model to the target.
package balance
