#!/usr/bin/env bash
# mariadb.sh — a private MariaDB server for the site store's benchmarks.
#
#   bench/mariadb.sh start DIR [--buffer-pool 2G]
#       makes a server's data in DIR (once), starts Debian's mariadbd on it with its own
#       socket and no network, as a site would run it for persyst (InnoDB's defaults, a
#       commit on disk when it returns; a buffer pool of 2 GiB and a redo log of 1 GiB,
#       as a server that takes bulk writes is tuned), makes the database persyst, and
#       prints the store's target: mysql://root@localhost/persyst?socket=DIR/mysqld.sock
#   bench/mariadb.sh stop DIR
#       stops it (the data stays in DIR; rm -r DIR removes it).
#
# Then, e.g.: build/persyst db copy --db site1m.db --to "$target"; bench/site.sh --query
# --db "$target"; bench/site.sh --fill 20000 --db "$target" (docs/performance.md).
set -euo pipefail
cmd=${1:-} dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,15p' "$0" >&2; exit 2; }
pool=2G
[ "${3:-}" = --buffer-pool ] && pool=${4:?--buffer-pool SIZE}
sock=$dir/mysqld.sock pid=$dir/mariadbd.pid
case $cmd in
start)
	command -v mariadbd >/dev/null || PATH=$PATH:/usr/sbin
	command -v mariadbd >/dev/null || { echo "mariadb.sh: no mariadbd (apt-get install mariadb-server)" >&2; exit 1; }
	mkdir -p "$dir"
	if [ ! -d "$dir/data/mysql" ]; then
		mariadb-install-db --no-defaults --user=root --datadir="$dir/data" --auth-root-authentication-method=normal \
			--skip-test-db --skip-name-resolve >"$dir/install.log" 2>&1 || { cat "$dir/install.log" >&2; exit 1; }
	fi
	setsid mariadbd --no-defaults --user=root --datadir="$dir/data" --socket="$sock" --skip-networking \
		--skip-name-resolve --pid-file="$pid" --log-error="$dir/error.log" --character-set-server=utf8mb4 \
		--innodb-buffer-pool-size="$pool" --innodb-log-file-size=1G </dev/null >/dev/null 2>&1 &
	for _ in $(seq 300); do
		mariadb --no-defaults -S "$sock" -u root -e 'SELECT 1' >/dev/null 2>&1 && break
		sleep 0.1
	done
	mariadb --no-defaults -S "$sock" -u root -e 'CREATE DATABASE IF NOT EXISTS persyst CHARACTER SET utf8mb4' ||
		{ tail -20 "$dir/error.log" >&2; exit 1; }
	echo "mysql://root@localhost/persyst?socket=$sock"
	;;
stop)
	[ -f "$pid" ] || { echo "mariadb.sh: no server in $dir" >&2; exit 1; }
	p=$(cat "$pid")
	kill "$p"
	for _ in $(seq 300); do kill -0 "$p" 2>/dev/null || exit 0; sleep 0.1; done
	echo "mariadb.sh: mariadbd $p did not stop within 30 s" >&2
	exit 1
	;;
*) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
