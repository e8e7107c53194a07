#!/usr/bin/env bash
# Makes sure PgBouncer is installed, looking where
# testcluster.FindPgBouncer looks: $PGROUTED_PGBOUNCER, PATH,
# /usr/sbin/pgbouncer, /usr/local/sbin/pgbouncer, /usr/local/bin/pgbouncer.
# The tests through a connection pooler start one PgBouncer in front of each
# node of their cluster. When it is missing, this installs it with apt-get
# if it runs as root on a machine with apt-get; otherwise it prints the
# command to run and fails.
set -euo pipefail

find_pgbouncer() {
	if [ -n "${PGROUTED_PGBOUNCER:-}" ]; then
		[ -x "$PGROUTED_PGBOUNCER" ] && echo "$PGROUTED_PGBOUNCER" && return 0
		echo "PGROUTED_PGBOUNCER=$PGROUTED_PGBOUNCER is not an executable file" >&2
		return 1
	fi
	local p
	if p=$(command -v pgbouncer 2>/dev/null); then echo "$p"; return 0; fi
	for p in /usr/sbin/pgbouncer /usr/local/sbin/pgbouncer /usr/local/bin/pgbouncer; do
		if [ -x "$p" ]; then echo "$p"; return 0; fi
	done
	return 1
}

if p=$(find_pgbouncer); then
	echo "PgBouncer: $p ($("$p" --version | head -n 1))"
	exit 0
fi
[ -n "${PGROUTED_PGBOUNCER:-}" ] && exit 1

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "PgBouncer not found: installing it with: apt-get install -y pgbouncer"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y pgbouncer; then
		apt-get update
		apt-get install -y pgbouncer
	fi
	p=$(find_pgbouncer) || { echo "apt-get installed pgbouncer but it is still not found" >&2; exit 1; }
	echo "PgBouncer: $p ($("$p" --version | head -n 1))"
	exit 0
fi

cat >&2 <<'MSG'
PgBouncer is not installed. The tests through a connection pooler start one
PgBouncer in front of each node of their local cluster. Install it with:

    sudo apt-get install -y pgbouncer

(or set PGROUTED_PGBOUNCER to the path of the pgbouncer program), then run
the command again.
MSG
exit 1
