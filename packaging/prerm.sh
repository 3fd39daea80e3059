#!/bin/sh
# Before removal (not an upgrade): stop persyst's services. Jobs go on unmonitored.
set -e
case "$1" in
upgrade | 1) exit 0 ;; # deb: upgrade; rpm: $1 is the number of versions left
esac
if [ -d /run/systemd/system ]; then
	for u in persyst-daemon persyst-collector persyst-sync persyst-frontend persyst-web; do
		systemctl disable --now "$u.service" >/dev/null 2>&1 || true
	done
	systemctl disable --now persyst-web.socket >/dev/null 2>&1 || true
fi
exit 0
