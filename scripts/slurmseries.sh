#!/bin/sh
# slurmseries.sh [next]: the Slurm series (major.minor, "24.11") of the Slurm headers the
# SPANK plugin is built with (SLURM_VERSION_NUMBER in slurm_version.h; SLURM_INCLUDE, default
# /usr/include): slurmd loads a SPANK plugin only of its own series. With "next", the
# series after it as a version bound ("24.12": every 24.11.x is below it).
set -eu
h=${SLURM_INCLUDE:-/usr/include}/slurm/slurm_version.h
n=$(sed -n 's/^#define[[:space:]]*SLURM_VERSION_NUMBER[[:space:]]*\(0x[0-9a-fA-F]*\).*/\1/p' "$h" 2>/dev/null || true)
[ -n "$n" ] || { echo "slurmseries.sh: no SLURM_VERSION_NUMBER in $h (install Slurm's headers: libslurm-dev, or slurm-devel)" >&2; exit 1; }
major=$(( (n >> 16) & 255 )) minor=$(( (n >> 8) & 255 ))
[ "${1:-}" = next ] && minor=$((minor + 1))
printf '%d.%02d\n' "$major" "$minor"
