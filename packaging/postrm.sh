#!/bin/sh
# After removal: systemd forgets the units. State (/var/lib/persyst*) and configuration
# are kept unless the package is purged.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
	rm -rf /var/lib/persyst /var/lib/persyst-collector /var/lib/persyst-sync /var/lib/persyst-frontend
fi
exit 0
