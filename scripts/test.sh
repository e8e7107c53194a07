#!/usr/bin/env bash
# Runs the whole test suite with the race detector, in a fresh temporary
# directory, and fails if any PostgreSQL process or cluster directory that
# the tests started is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pgrouted-test.XXXXXX")
# PostgreSQL runs as an unprivileged user when the tests run as root: it must
# reach its directories inside.
chmod 1777 "$tmp"
status=0
TMPDIR=$tmp go test -race -count=1 -timeout 15m -v ./... "$@" || status=$?
# The ORM examples are their own module (GORM, sqlx and ent stay out of the
# library's go.mod).
(cd examples && TMPDIR=$tmp go test -race -count=1 -timeout 10m -v ./... "$@") || status=$?

left=""
for d in "$tmp"/pgrouted-testcluster-*; do
	[ -e "$d" ] && left="$left $d"
done
procs=$(pgrep -af -- "$tmp/" 2>/dev/null | grep -v pgrep || true)
if [ -n "$left" ] || [ -n "$procs" ]; then
	echo "FAIL: the tests left PostgreSQL behind:" >&2
	[ -n "$left" ] && echo "  directories:$left" >&2
	[ -n "$procs" ] && echo "$procs" | sed 's/^/  process: /' >&2
	status=1
else
	echo "ok: no PostgreSQL process and no cluster directory left behind"
fi
rm -rf "$tmp"
exit $status
