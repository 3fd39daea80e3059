#!/bin/sh
# After install or upgrade: the agent tree's user, the runtime directory, the units.
# No service is enabled or started: which roles a machine has is the admin's choice
# (docs/admin.md).
set -e
if command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers persyst.conf >/dev/null || true
elif ! getent passwd persyst >/dev/null; then
	useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin persyst || true
fi
if command -v systemd-tmpfiles >/dev/null 2>&1; then
	systemd-tmpfiles --create persyst.conf >/dev/null 2>&1 || true
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	# An upgrade restarts the services that run (state files are kept: docs/admin.md).
	for u in persyst-daemon persyst-collector persyst-sync persyst-frontend persyst-web; do
		systemctl try-restart "$u.service" >/dev/null 2>&1 || true
	done
fi
exit 0
