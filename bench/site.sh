#!/usr/bin/env bash
# site.sh — persyst's site side at scale.
#
#   bench/site.sh NODES CYCLES [--cpus C] [--cycle 2s] [--per-collector 500] [--restart frontend|collector]
#                 [--hostile H]
#       a site in a box: NODES simulated nodes (sitesim live: the node daemons' own uplink
#       code, each with its TLS identity, running jobs of 1 to 64 nodes that start and end
#       as the cycles go, each sending every cycle C CPUs × 6 CPU properties + 12 node
#       properties of records, and its final report from the batch host at the end) against
#       real persyst collectors (one per --per-collector nodes) and a real frontend with
#       its database, TreeAuth=tls as deployed, the jobs served by a fake slurmrestd;
#       a 60 s cycle played every --cycle. Two thirds of the way the web view and persyst
#       report are asked as in --query, while the site runs (after the run, with
#       --restart); after CYCLES cycles the nodes stop and the tree drains. --restart
#       kills the frontend or the first collector half-way (SIGKILL) and starts it again
#       a cycle later. --hostile adds H hostile nodes (sitesim hostile, with the site's own
#       certificates) that push malformed and oversized records, records under another
#       node's name or of a job not theirs, forged final reports, and reconnect in storms
#       or connect without authentication, all through the run. The collectors' metrics
#       (refusals by reason, the delay from a cycle's read to its summary stored) are read
#       at the end. Its last line:
#       site: nodes=… cycles=… jobs=… records=… job_cycles_lost=… reports_lost=…
#       late=… store_delay_p50_s=… store_delay_p95_s=… frontend_cpu_s_per_cycle=…
#       frontend_rss_mb=… collector_cpu_s_per_cycle_max=… collector_rss_mb_max=…
#       sim_cpu_s_per_cycle=… db_bytes_per_job=… site_p95_ms=… jobs_p95_ms=… job_p95_ms=…
#       report_p95_ms=… [hostile_sent=… hostile_refused=… hostile_taken=… hostile_stored=…]
#   bench/site.sh --fill JOBS --db PATH [--days D] [--seed S]
#       stores JOBS finished jobs of the last D days (default 7) into the database at PATH
#       (created if absent; several clusters whose job ids meet, every end state, accounts,
#       users, partitions, CPU and GPU jobs of 1 to 256 nodes, array tasks, findings of
#       every kind: sitesim.Fill), fast, and exits. Its last line:
#       fill: jobs=… seconds=… jobs_per_s=… db_bytes=… db_bytes_per_job=… …
#   bench/site.sh --query --db PATH [--n N]
#       serves PATH with the real web view (persyst web --all on a unix socket, as root)
#       and asks each page N times (default 20): the site page over 7 days and over a
#       year, a quarter by user, an account's users over a year, a quarter's accounts as
#       CSV, the job list unfiltered and with each filter (user, finding, age, nodes, job
#       id), a job's page, and `persyst report --db`. Its last line:
#       query: jobs=… site_p50_ms=… site_p95_ms=… site365_p95_ms=…
#       site_quarter_user_p95_ms=… site_account_p95_ms=… site_csv_p95_ms=… jobs_p95_ms=…
#       jobs_user_p95_ms=… jobs_finding_p95_ms=… jobs_since_p95_ms=… jobs_nodes_p95_ms=…
#       jobs_id_p95_ms=… job_p50_ms=… job_p95_ms=… report_p50_ms=… report_p95_ms=…
#       web_rss_mb=…
#
# Needs build/persyst (make build); builds build/persyst-sitesim. Times are wall-clock per
# request over the unix socket (curl), the report's with the process's start.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="" db="" jobs="" days=7 seed=1 n=20
nodes="" cycles="" cpus=16 cycle=2s per_collector=500 restart="" hostile=0
while [ $# -gt 0 ]; do
	case $1 in
	[0-9]*) if [ -z "$nodes" ]; then nodes=$1; else cycles=$1; fi; mode=${mode:-live} ;;
	--cpus) cpus=$2; shift ;;
	--cycle) cycle=$2; shift ;;
	--per-collector) per_collector=$2; shift ;;
	--restart) restart=$2; shift
		case $restart in frontend | collector) ;; *) echo "site.sh: --restart frontend or collector" >&2; exit 2 ;; esac ;;
	--hostile) hostile=$2; shift ;;
	--fill) mode=fill jobs=$2; shift ;;
	--query) mode=query ;;
	--db) db=$2; shift ;;
	--days) days=$2; shift ;;
	--seed) seed=$2; shift ;;
	--n) n=$2; shift ;;
	*) echo "site.sh: unknown argument $1 (see the head of bench/site.sh)" >&2; exit 2 ;;
	esac
	shift
done
[ -n "$mode" ] && { [ -n "$db" ] || [ "$mode" = live ]; } || { sed -n '2,40p' "$0" >&2; exit 2; }
[ "$mode" != live ] || [ -n "$cycles" ] || { echo "site.sh: NODES CYCLES" >&2; exit 2; }
[ -x build/persyst ] || { echo "site.sh: build/persyst is missing: run make build" >&2; exit 1; }
[ -n "${SITE_NOBUILD:-}" ] || go build -o build/persyst-sitesim ./bench/sitesim

if [ "$mode" = fill ]; then
	exec build/persyst-sitesim fill -db "$db" -jobs "$jobs" -days "$days" -seed "$seed"
fi

command -v curl >/dev/null || { echo "site.sh: curl is missing (scripts/deps.sh installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
web_pid=""
pids=()
cleanup() {
	[ -n "$web_pid" ] && kill "$web_pid" 2>/dev/null && wait "$web_pid" 2>/dev/null
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	[ -n "${SITE_KEEP:-}" ] && { echo "site.sh: kept $tmp" >&2; return; }
	rm -rf "$tmp"
}
trap cleanup EXIT
HZ=$(getconf CLK_TCK)
ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
hwm_mb() { awk '$1 == "VmHWM:" {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

if [ "$mode" = live ]; then
	secs=$(awk -v c="$cycle" 'BEGIN {sub(/s$/, "", c); print c}')
	ncol=$(( (nodes + per_collector - 1) / per_collector ))
	ulimit -n "$(ulimit -Hn)" # a socket per node, and its connections
	# A process plays at most per_sim nodes: each needs its listener, the frontend's
	# connection and one or two to collectors (about 4 open files), and a process may
	# have `ulimit -Hn`.
	per_sim=$(( ($(ulimit -n) - 1000) / 4 ))
	nsim=$(( (nodes + per_sim - 1) / per_sim ))
	per_sim=$(( (nodes + nsim - 1) / nsim ))
	build/persyst-sitesim certs -dir "$tmp/certs" -nodes "$nodes" -collectors "$ncol" -hostile "$hostile"
	conf=$tmp/persyst.conf
	cat >"$conf" <<-CONF
		TreeAuth=tls
		TLSCert=$tmp/certs/%n.crt
		TLSKey=$tmp/certs/%n.key
		TLSCA=$tmp/certs/frontend-ca.crt
		SlurmRestd=unix:$tmp/restd.sock
		ClusterName=sim
		CycleSeconds=${secs%.*}
	CONF
	cols=""
	for i in $(seq "$ncol"); do cols+="${cols:+,}c$i=127.0.0.1:$((17000 + i))"; done
	build/persyst-sitesim slurm -restd "$tmp/restd.sock" -cluster sim 2>"$tmp/slurm.log" &
	slurm_pid=$!
	pids+=("$slurm_pid")
	for _ in $(seq 100); do [ -S "$tmp/restd.sock" ] && break; sleep 0.1; done
	sims=() stats=()
	for p in $(seq 0 $((nsim - 1))); do
		first=$((p * per_sim))
		count=$(( nodes - first < per_sim ? nodes - first : per_sim ))
		build/persyst-sitesim live -nodes "$count" -first "$first" -job-base $(( (p + 1) * 1000000 )) -cpus "$cpus" -cycle "$cycle" \
			-port-base 20000 -collector 127.0.0.1:17001 -certs "$tmp/certs" -slurm "$tmp/restd.sock" \
			-addrs "$tmp/addrs.$p" -stats "$tmp/stats.$p.json" 2>"$tmp/sim.$p.log" &
		sims+=("$!") stats+=("$tmp/stats.$p.json")
		pids+=("$!")
	done
	for _ in $(seq 100); do [ "$(cat "$tmp"/addrs.* 2>/dev/null | wc -l)" -ge "$nodes" ] && break; sleep 0.1; done
	cat "$tmp"/addrs.* >"$tmp/addrs"
	# start_collector I, start_frontend: the agents as an admin starts them (logs appended:
	# a restarted agent's follow its first life's).
	start_collector() {
		# Each its own metrics address (read at the end), in a persyst.conf of its own.
		[ -f "$conf.c$1" ] || { cat "$conf"; echo "CollectorMetricsAddr=127.0.0.1:$((18000 + $1))"; } >"$conf.c$1"
		build/persyst collector --name "c$1" --listen "127.0.0.1:$((17000 + $1))" --db "$tmp/c$1.db" --config "$conf.c$1" 2>>"$tmp/c$1.log" &
		col_pids[$1 - 1]=$!
		pids+=("$!")
	}
	start_frontend() {
		build/persyst frontend --config "$conf" --collectors "$cols" --nodes "s[00001-$(printf %05d "$nodes")]" \
			--node-addrs "@$tmp/addrs" --listen 127.0.0.1:16999 --db "$tmp/front.db" --cycle "$cycle" 2>>"$tmp/frontend.log" &
		fe=$!
		pids+=("$fe")
	}
	col_pids=()
	for i in $(seq "$ncol"); do start_collector "$i"; done
	start_frontend
	sleep "$(awk -v s="$secs" 'BEGIN {print 3 * s}')" # the first routes, the nodes' first jobs
	hostile_pid="" hostile_stats=""
	if [ "$hostile" -gt 0 ]; then
		# They name the first jobs of the first sim process (running, or ended lately).
		hostile_stats=$tmp/hostile.json
		build/persyst-sitesim hostile -nodes "$hostile" -collector 127.0.0.1:17001 -frontend 127.0.0.1:16999 -certs "$tmp/certs" \
			-victim s00001 -jobs 1000001-1000100 -cycle "$cycle" -stats "$hostile_stats" 2>"$tmp/hostile.log" &
		hostile_pid=$!
		pids+=("$hostile_pid")
	fi
	t0=$EPOCHREALTIME fe0=$(ticks "$fe") sim0=0
	for p in "${sims[@]}"; do sim0=$((sim0 + $(ticks "$p"))); done
	col0=()
	for p in "${col_pids[@]}"; do col0+=("$(ticks "$p")"); done
	if [ -n "$restart" ]; then
		# Half-way, an agent is killed (SIGKILL: no goodbye), and started again a cycle
		# later; the CPU figures then leave its first life out.
		sleep "$(awk -v s="$secs" -v c="$cycles" 'BEGIN {print s * int(c / 2)}')"
		case $restart in
		frontend) victim=$fe ;;
		collector) victim=${col_pids[0]} ;;
		esac
		kill -KILL "$victim"
		wait "$victim" 2>/dev/null || true
		sleep "$secs"
		case $restart in
		frontend) start_frontend; fe0=0 ;;
		collector) start_collector 1; col0[0]=0 ;;
		esac
		sleep "$(awk -v s="$secs" -v c="$cycles" 'BEGIN {print s * (c - int(c / 2) - 1)}')"
	else
		# The web view and persyst report are asked while the site runs, from two thirds
		# of the way (the database has finished jobs by then).
		( sleep "$(awk -v s="$secs" -v c="$cycles" 'BEGIN {print s * int(c * 2 / 3)}')"
		  SITE_NOBUILD=1 "$0" --query --db "$tmp/front.db" --n "$n" >"$tmp/query.live" 2>&1 || true ) &
		query_pid=$!
		sleep "$(awk -v s="$secs" -v c="$cycles" 'BEGIN {print s * c}')"
	fi
	t1=$EPOCHREALTIME fe1=$(ticks "$fe") sim1=0
	for p in "${sims[@]}"; do sim1=$((sim1 + $(ticks "$p"))); done
	played=$(awk -v a="$t0" -v b="$t1" -v s="$secs" 'BEGIN {printf "%.1f", (b - a) / s}')
	col_max=0 col_rss=0
	for i in "${!col_pids[@]}"; do
		c=$(( $(ticks "${col_pids[$i]}") - col0[i] ))
		[ "$c" -gt "$col_max" ] && col_max=$c
		r=$(hwm_mb "${col_pids[$i]}")
		[ "$r" -gt "$col_rss" ] && col_rss=$r
	done
	fe_rss=$(hwm_mb "$fe")
	if [ -n "$hostile_pid" ]; then
		kill -TERM "$hostile_pid"
		wait "$hostile_pid" || { cat "$tmp/hostile.log" >&2; echo "site.sh: the hostile nodes failed" >&2; exit 1; }
	fi
	for p in "${sims[@]}"; do kill -TERM "$p"; done # they stop their cycles, drain for 3 more, exit
	for p in "${sims[@]}"; do wait "$p" || true; done
	sleep "$(awk -v s="$secs" 'BEGIN {print 2 * s}')" # the collectors store the last cycles
	urls=()
	for i in $(seq "$ncol"); do urls+=("http://127.0.0.1:$((18000 + i))/metrics"); done
	scraped=$(build/persyst-sitesim scrape "${urls[@]}")
	echo "$scraped"
	for p in "$fe" "${col_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "$fe" "${col_pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=("$slurm_pid") # the fake Slurm goes at the end (cleanup)
	counted=$(build/persyst-sitesim count -stats "$(IFS=,; echo "${stats[*]}")" ${hostile_stats:+-hostile "$hostile_stats"} "$tmp"/c*.db "$tmp/front.db")
	echo "$counted"
	kv() { sed -n "s/.*[ :]$1=\([0-9]*\).*/\1/p" <<<"$2"; }
	jobs_ended=$(jq -s 'map(.JobsEnded) | add' "${stats[@]}")
	records=$(jq -s 'map(.Records) | add' "${stats[@]}")
	db="$tmp/front.db"
	dbb=$(stat -c %s "$db")
	queried=live
	[ -n "${query_pid:-}" ] && wait "$query_pid"
	query=$(tail -1 "$tmp/query.live" 2>/dev/null || true)
	if [ "${query#query:}" = "$query" ]; then
		queried=after # a restart run, or no finished job yet two thirds of the way
		query=$(SITE_NOBUILD=1 "$0" --query --db "$db" --n "$n" | tail -1)
	fi
	q() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$query"; }
	sv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
	hostile_figures=""
	if [ -n "$hostile_pid" ]; then
		hostile_figures=" hostile=$hostile"
		for k in hostile_sent hostile_refused hostile_taken hostile_stored; do hostile_figures+=" $k=$(kv $k "$counted")"; done
		hostile_figures+=" tree_refused_handshake=$(sv tree_refused_handshake "$scraped") tree_refused_storm=$(sv tree_refused_storm "$scraped")"
		hostile_figures+=" tree_refused_call=$(sv tree_refused_call "$scraped")"
	fi
	echo "site: nodes=$nodes sim_processes=$nsim${restart:+ restarted=$restart} cycles=$played jobs=$jobs_ended records=$records" \
		"job_cycles_lost=$(kv job_cycles_lost "$counted") reports_lost=$(( $(kv reports_sent "$counted") - $(kv reports_kept "$counted") ))" \
		"late=$(sv refused_late "$scraped") store_delay_p50_s=$(sv store_delay_p50_s "$scraped") store_delay_p95_s=$(sv store_delay_p95_s "$scraped")" \
		"frontend_cpu_s_per_cycle=$(awk -v t=$((fe1 - fe0)) -v h="$HZ" -v c="$played" 'BEGIN {printf "%.3f", t / h / c}') frontend_rss_mb=$fe_rss" \
		"collector_cpu_s_per_cycle_max=$(awk -v t="$col_max" -v h="$HZ" -v c="$played" 'BEGIN {printf "%.3f", t / h / c}') collector_rss_mb_max=$col_rss" \
		"sim_cpu_s_per_cycle=$(awk -v t=$((sim1 - sim0)) -v h="$HZ" -v c="$played" 'BEGIN {printf "%.3f", t / h / c}')" \
		"db_bytes_per_job=$(( dbb / (jobs_ended > 0 ? jobs_ended : 1) ))" \
		"queried=$queried site_p95_ms=$(q site_p95_ms) jobs_p95_ms=$(q jobs_p95_ms) job_p95_ms=$(q job_p95_ms) report_p95_ms=$(q report_p95_ms)$hostile_figures"
	exit 0
fi
sock=$tmp/web.sock
build/persyst web --all --db "$db" --listen "unix:$sock" --config /dev/null 2>"$tmp/web.log" &
web_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$tmp/web.log" >&2; echo "site.sh: persyst web did not start" >&2; exit 1; }

# ms URL: one request's wall time in ms; fails on a status other than 200.
ms() {
	local out
	out=$(curl -sS --unix-socket "$sock" -o "$tmp/page" -w '%{http_code} %{time_total}' "http://web$1")
	[ "${out%% *}" = 200 ] || { echo "site.sh: $1: HTTP ${out%% *}" >&2; head -c 500 "$tmp/page" >&2; exit 1; }
	awk -v t="${out#* }" 'BEGIN {printf "%.1f\n", t * 1000}'
}
# pct P FILE: the P-th percentile (nearest rank) of the numbers in FILE.
pct() { sort -n "$2" | awk -v p="$1" '{v[NR] = $1} END {i = int(NR * p / 100 + 0.999999); if (i < 1) i = 1; print v[i]}'; }
# series NAME URL...: time the URLs, round-robin, n requests in all, into $tmp/NAME.
series() {
	local name=$1 i=0
	shift
	local urls=("$@")
	: >"$tmp/$name"
	while [ $i -lt "$n" ]; do
		ms "${urls[$((i % ${#urls[@]}))]}" >>"$tmp/$name"
		i=$((i + 1))
	done
}

ms / >/dev/null # warm the page cache as a running view would be
grep -o 'data-job="[0-9]*" data-user="[^"]*" data-finding="[^"]*" data-key="[0-9]*"' "$tmp/page" >"$tmp/listed" || true
[ -s "$tmp/listed" ] || { echo "site.sh: the database lists no jobs" >&2; exit 1; }
mapfile -t ids < <(sed 's/data-job="\([0-9]*\)".*data-key="\([0-9]*\)"/\1?key=\2/' "$tmp/listed" | shuf -n "$n" --random-source=<(yes))
user=$(sed -n 's/.*data-user="\([^"]*\)".*/\1/p' "$tmp/listed" | awk 'NR == 1')
account=$(grep -o 'data-account="[^"]*"' "$tmp/page" | sed 's/data-account="\([^"]*\)"/\1/' | awk 'NR == 1')
finding=$(sed -n 's/.*data-finding="\([^"]\+\)".*/\1/p' "$tmp/listed" | awk 'NR == 1')
job_urls=() report_ids=()
for x in "${ids[@]}"; do job_urls+=("/job/$x"); report_ids+=("${x%%\?*}"); done

series site "/site?days=7"
series site365 "/site?days=365"
series site_quarter_user "/site?period=quarter&by=user"
series site_account "/site?period=365d&account=$account&by=user"
series site_csv "/site?period=quarter&format=csv&table=groups"
series jobs "/"
series jobs_user "/?user=$user"
series jobs_finding "/?finding=${finding:-idle_cores}"
series jobs_since "/?since=1d"
series jobs_nodes "/?min_nodes=8"
series jobs_id "/?job=${report_ids[0]}"
series job "${job_urls[@]}"
: >"$tmp/report"
for id in "${report_ids[@]}"; do
	t0=$EPOCHREALTIME
	build/persyst report --db "$db" "$id" >/dev/null
	t1=$EPOCHREALTIME
	awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", (b - a) * 1000}' >>"$tmp/report"
done
rss=$(awk '$1 == "VmHWM:" {printf "%.0f", $2 / 1024}' "/proc/$web_pid/status")
jobs_stored=$(build/persyst db stats --db "$db" | sed -n 's/^jobs: \([0-9]*\),.*/\1/p')
echo "query: jobs=$jobs_stored n=$n site_p50_ms=$(pct 50 "$tmp/site") site_p95_ms=$(pct 95 "$tmp/site")" \
	"site365_p95_ms=$(pct 95 "$tmp/site365") site_quarter_user_p95_ms=$(pct 95 "$tmp/site_quarter_user")" \
	"site_account_p95_ms=$(pct 95 "$tmp/site_account") site_csv_p95_ms=$(pct 95 "$tmp/site_csv") jobs_p95_ms=$(pct 95 "$tmp/jobs") jobs_user_p95_ms=$(pct 95 "$tmp/jobs_user")" \
	"jobs_finding_p95_ms=$(pct 95 "$tmp/jobs_finding") jobs_since_p95_ms=$(pct 95 "$tmp/jobs_since")" \
	"jobs_nodes_p95_ms=$(pct 95 "$tmp/jobs_nodes") jobs_id_p95_ms=$(pct 95 "$tmp/jobs_id")" \
	"job_p50_ms=$(pct 50 "$tmp/job") job_p95_ms=$(pct 95 "$tmp/job") report_p50_ms=$(pct 50 "$tmp/report")" \
	"report_p95_ms=$(pct 95 "$tmp/report") web_rss_mb=$rss"
