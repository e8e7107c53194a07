#!/usr/bin/env bash
# Makes sure the PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup,
# postgres) are installed, looking where testcluster.FindBinDir looks:
# $PGROUTED_PG_BIN, PATH, `pg_config --bindir`, /usr/lib/postgresql/*/bin.
# When they are missing, it installs them with apt-get if it runs as root on
# a machine with apt-get; otherwise it prints the command to run and fails.
set -euo pipefail

has_bins() {
	local d=$1
	[ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/pg_basebackup" ] && [ -x "$d/postgres" ]
}

find_bins() {
	if [ -n "${PGROUTED_PG_BIN:-}" ]; then
		has_bins "$PGROUTED_PG_BIN" && echo "$PGROUTED_PG_BIN" && return 0
		echo "PGROUTED_PG_BIN=$PGROUTED_PG_BIN does not hold initdb, pg_ctl, pg_basebackup and postgres" >&2
		return 1
	fi
	local d
	if d=$(command -v initdb 2>/dev/null) && has_bins "$(dirname "$d")"; then dirname "$d"; return 0; fi
	if d=$(pg_config --bindir 2>/dev/null) && has_bins "$d"; then echo "$d"; return 0; fi
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -V -r); do
		if has_bins "$d"; then echo "$d"; return 0; fi
	done
	return 1
}

if dir=$(find_bins); then
	echo "PostgreSQL server binaries: $dir ($("$dir/postgres" --version))"
	exit 0
fi
[ -n "${PGROUTED_PG_BIN:-}" ] && exit 1

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "PostgreSQL server binaries not found: installing them with: apt-get install -y postgresql"
	# Only the binaries are needed: do not create and start a default cluster.
	mkdir -p /etc/postgresql-common/createcluster.d
	echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/pgrouted.conf
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y postgresql; then
		apt-get update
		apt-get install -y postgresql
	fi
	dir=$(find_bins) || { echo "apt-get installed postgresql but its server binaries are still not found" >&2; exit 1; }
	echo "PostgreSQL server binaries: $dir ($("$dir/postgres" --version))"
	exit 0
fi

cat >&2 <<'MSG'
PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup, postgres) are not installed.
The tests and the demo start a real local primary with streaming replicas from them.
Install them with:

    sudo apt-get install -y postgresql

(or set PGROUTED_PG_BIN to the directory that holds initdb), then run the command again.
MSG
exit 1
