# shellcheck shell=bash
# What the scripts that start PostgreSQL clusters share (scripts/test.sh,
# scripts/test-versions.sh, bench/run.sh). Sourced, not run:
#
#   . "$(dirname "$0")/lib.sh"

# pgrouted_tmpdir NAME prints the path of a new directory
# ${TMPDIR:-/tmp}/NAME.XXXXXX for the clusters of a run (the caller sets
# TMPDIR to it for go test). PostgreSQL runs as an unprivileged user when
# this runs as root: it must reach its directories inside, hence mode 1777.
pgrouted_tmpdir() {
	local dir
	# One list: its status is the function's, which the caller's set -e
	# sees (a command substitution does not inherit set -e).
	dir=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") && chmod 1777 "$dir" && echo "$dir"
}

# pgrouted_leftovers DIR fails, and says on stderr what is left, when a
# PostgreSQL cluster directory (testcluster's pgrouted-testcluster-*) or a
# process started from one is left in DIR, a directory of
# pgrouted_tmpdir's after the tests that used it ended.
pgrouted_leftovers() {
	local tmp=$1 left="" d procs
	for d in "$tmp"/pgrouted-testcluster-*; do
		[ -e "$d" ] && left="$left $d"
	done
	procs=$(pgrep -af -- "$tmp/" 2>/dev/null | grep -v pgrep || true)
	if [ -n "$left" ] || [ -n "$procs" ]; then
		echo "FAIL: the tests left PostgreSQL behind:" >&2
		[ -n "$left" ] && echo "  directories:$left" >&2
		[ -n "$procs" ] && echo "$procs" | sed 's/^/  process: /' >&2
		return 1
	fi
	return 0
}
