#!/bin/sh
# pkgversion.sh VERSION: a package version (starting with a digit, no '-') from persyst's
# version: v1.2.3 -> 1.2.3, v1.2.3-4-gabc123 -> 1.2.3.4.gabc123, an untagged commit
# abc123 -> 0.0.0~git.abc123 (sorts before any release), dev -> 0.0.0~dev.
v=$1
case "$v" in
v[0-9]*.[0-9]*) v=${v#v} ;;
[0-9]*.[0-9]*) ;;
*) v=0.0.0~$( [ "$v" = dev ] && echo dev || echo "git.$v") ;;
esac
echo "$v" | tr -- '-' '.'
