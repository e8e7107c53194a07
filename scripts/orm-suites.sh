#!/usr/bin/env bash
# Usage: GORM_DIR=... SQLX_DIR=... BUN_DIR=... scripts/orm-suites.sh [gorm|sqlx|bun...]
#
# Runs GORM's, sqlx's and bun's own test suites with pgrouted as their
# database/sql driver, against a local primary and two streaming replicas
# (`pgrouted cluster --replicas 2`, started here and stopped at the end),
# one suite after the other, and prints for each run how many tests passed,
# failed and were skipped, and what the failing ones said. Not part of
# `make test`: it needs the suites' sources, checkouts given by
#
#   GORM_DIR  a checkout of github.com/go-gorm/gorm (its tests/ module)
#   SQLX_DIR  a checkout of github.com/jmoiron/sqlx
#   BUN_DIR   a checkout of github.com/uptrace/bun (its internal/dbtest module)
#
# (the arguments choose suites; by default every suite whose directory is
# set). A checkout is never modified: each is copied into the output
# directory, patched there (scripts/orm-suites/*.patch: the suite opens the
# driver "pgrouted" when told to, nothing else of its tests changes), given
# `replace github.com/pgrouted/pgrouted => <this checkout>` and `go mod tidy`
# (the go command fetches missing modules from its proxy), and run there.
#
# The runs:
#   gorm  twice: pgx's default exec mode (extended protocol, statements
#         cached) and default_query_exec_mode=simple_protocol in the DSN, the
#         two modes of GORM's PreferSimpleProtocol (which GORM ignores when it
#         opens a DriverName: the mode then comes from the DSN);
#   sqlx  $SQLX_RUNS times (default 5), each a new process;
#   bun   once, testEachDB's databases narrowed to "pgrouted".
# With ORM_SUITES_COMPARE=1, each run again with pgx's database/sql driver
# straight to the primary (gorm: GORM's own pgx; sqlx and bun: "pgx", pgx
# v5's stdlib), to tell the suite's own failures from pgrouted's.
#
# Other settings: ORM_SUITES_OUT, the output directory (default a new
# ${TMPDIR:-/tmp}/pgrouted-orm-suites.XXXXXX: the copies, the test binaries,
# one log per run, kept); ORM_SUITES_DSN, a running cluster's pgrouted DSN
# (primary first) to use instead of starting one; ORM_SUITES_TESTFLAGS, more
# flags for the test binaries (-test.run=TestName); ORM_SUITES_RACE=1, build
# with -race (cgo: slower, compiles SQLite's C code); GORM_PG_DRIVER_VERSION,
# the gorm.io/driver/postgres the GORM suite builds with (default v1.6.3, the
# one docs/compatibility.md lists; empty: the suite's own go.mod).
#
# Each run through pgrouted also says how many transactions each node ran in
# the suite's database (pg_stat_database, each server's own): a replica's are
# the reads pgrouted sent it. scripts/orm-suites/known-failures lists the
# tests that fail whatever the driver, with why. Exit status: 0 when every
# test that failed through pgrouted is listed there, 1 when another failed
# or a run through pgrouted did not finish, 2 on a usage error.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
here=$repo/scripts/orm-suites
. "$repo/scripts/lib.sh"

# Where to get the suites, and the commits they were last run at (as
# docs/testing.md says).
declare -A url=(
	[gorm]=https://github.com/go-gorm/gorm
	[sqlx]=https://github.com/jmoiron/sqlx
	[bun]=https://github.com/uptrace/bun
)
declare -A pin=(
	[gorm]=1d6ce995  # v1.31.2
	[sqlx]=41dac16   # v1.4.0 and 2 commits
	[bun]=0e5e8682   # after v1.2.18
)
declare -A dirvar=([gorm]=GORM_DIR [sqlx]=SQLX_DIR [bun]=BUN_DIR)

suites=("$@")
if [ ${#suites[@]} -eq 0 ]; then
	for s in gorm sqlx bun; do
		v=${dirvar[$s]}
		[ -n "${!v:-}" ] && suites+=("$s")
	done
fi
usage() {
	echo "orm-suites: $*" >&2
	echo "Get the suites' sources with, for example:" >&2
	for s in gorm sqlx bun; do
		echo "  git clone ${url[$s]} /tmp/orm/$s && git -C /tmp/orm/$s checkout ${pin[$s]}" >&2
	done
	echo "then: GORM_DIR=/tmp/orm/gorm SQLX_DIR=/tmp/orm/sqlx BUN_DIR=/tmp/orm/bun scripts/orm-suites.sh" >&2
	exit 2
}
[ ${#suites[@]} -gt 0 ] || usage "no suite: set GORM_DIR, SQLX_DIR or BUN_DIR to a checkout"
for s in "${suites[@]}"; do
	[ -n "${dirvar[$s]:-}" ] || usage "unknown suite $s (gorm, sqlx or bun)"
	v=${dirvar[$s]}
	d=${!v:-}
	[ -n "$d" ] || usage "$s: set $v to a checkout of ${url[$s]}"
	case $s in
	gorm) f=tests/tests_test.go ;;
	sqlx) f=sqlx_test.go ;;
	bun) f=internal/dbtest/db_test.go ;;
	esac
	[ -f "$d/$f" ] || usage "$s: $v=$d holds no $f: not a checkout of ${url[$s]}"
done
command -v patch >/dev/null || { echo "orm-suites: needs patch (apt-get install -y patch)" >&2; exit 2; }

psql=$(command -v psql || ls -d /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -t/ -k5 -V -r | head -1 || true)
[ -n "$psql" ] || { echo "orm-suites: needs psql (apt-get install -y postgresql-client)" >&2; exit 2; }

out=${ORM_SUITES_OUT:-}
if [ -z "$out" ]; then
	out=$(mktemp -d "${TMPDIR:-/tmp}/pgrouted-orm-suites.XXXXXX")
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
echo "orm-suites: output in $out"

cgo=0 race=()
if [ "${ORM_SUITES_RACE:-}" = 1 ]; then
	cgo=1 race=(-race)
fi

# The cluster: pgrouted's own command, its DSN read from its first line.
dsn=${ORM_SUITES_DSN:-}
cluster_pid="" cluster_tmp=""
stop_cluster() {
	if [ -n "$cluster_pid" ]; then
		kill -TERM "$cluster_pid" 2>/dev/null || true
		wait "$cluster_pid" 2>/dev/null || true
		cluster_pid=""
		pgrouted_leftovers "$cluster_tmp" || true
		rm -rf "$cluster_tmp"
	fi
}
trap stop_cluster EXIT
trap 'exit 130' INT TERM
if [ -z "$dsn" ]; then
	"$repo/scripts/ensure-postgres.sh"
	(cd "$repo" && go build -o "$out/pgrouted" ./cmd/pgrouted)
	cluster_tmp=$(pgrouted_tmpdir pgrouted-orm-cluster)
	TMPDIR=$cluster_tmp "$out/pgrouted" cluster --replicas 2 >"$out/cluster.out" 2>"$out/cluster.log" &
	cluster_pid=$!
	for _ in $(seq 300); do
		dsn=$(sed -n 's/^DSN: //p' "$out/cluster.out")
		[ -n "$dsn" ] && break
		kill -0 "$cluster_pid" 2>/dev/null || break
		sleep 1
	done
	if [ -z "$dsn" ]; then
		echo "orm-suites: the cluster did not start:" >&2
		cat "$out/cluster.log" >&2
		exit 1
	fi
	sed -n 's/^\(PostgreSQL .* are up\).*/orm-suites: \1/p' "$out/cluster.log"
fi

# withdb DSN NAME: DSN on the database NAME. primary DSN: the first host
# only, without pgrouted's parameters (for psql and the plain pgx runs).
withdb() { sed -E "s#^([^?]*/)[^/?]*(\\?|\$)#\\1$2\\2#" <<<"$1"; }
primary() {
	sed -E 's#@([^,/]+)[^/]*/#@\1/#; s#([?&])pgrouted_[a-z_]+=[^&]*&?#\1#g; s#[?&]$##' <<<"$1"
}
# freshdb NAME: an empty database NAME on the primary.
freshdb() {
	"$psql" -X -q -v ON_ERROR_STOP=1 "$(primary "$dsn")" -c "SET client_min_messages = warning" \
		-c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1"
}
# bynode NAME: how many transactions each node ran in the database NAME
# since freshdb made it (pg_stat_database, each server's own: a replica's
# are the reads pgrouted sent it), for example "node0 2210, node1 850, ...".
bynode() {
	local hostpart names i=0 line="" n h
	hostpart=$(sed -E 's#^[^@]*@([^/]*)/.*#\1#' <<<"$dsn")
	names=$(sed -nE 's#.*[?&]pgrouted_names=([^&]*).*#\1#p' <<<"$dsn")
	IFS=, read -ra hosts <<<"$hostpart"
	IFS=, read -ra nodes <<<"$names"
	for h in "${hosts[@]}"; do
		n=$("$psql" -X -A -t "$(sed -E "s#@[^/]*/#@$h/#" <<<"$(primary "$dsn")")" \
			-c "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$1'" 2>/dev/null || echo "?")
		line+="${line:+, }${nodes[$i]:-host$i} ${n:-0}"
		i=$((i + 1))
	done
	echo "$line"
}

# prepare SUITE MODDIR: copies the checkout into $out/SUITE, patches it,
# points its module MODDIR at this checkout of pgrouted, and compiles its
# test binary, $out/SUITE.test.
prepare() {
	local s=$1 mod=$2 v=${dirvar[$1]} w=$out/$1
	rm -rf "$w"
	mkdir -p "$w"
	tar -C "${!v}" --exclude=.git -cf - . | tar -C "$w" -xf -
	if ! patch -d "$w" -p1 --batch --forward --silent <"$here/$s.patch"; then
		echo "orm-suites: $here/$s.patch does not apply to ${!v} (tested at ${pin[$s]}): see its hunks" >&2
		return 1
	fi
	(
		cd "$w/$mod"
		go mod edit -require=github.com/pgrouted/pgrouted@v0.0.0-00010101000000-000000000000 \
			-replace=github.com/pgrouted/pgrouted="$repo"
		if [ "$s" = gorm ] && [ -n "${GORM_PG_DRIVER_VERSION-v1.6.3}" ]; then
			go get "gorm.io/driver/postgres@${GORM_PG_DRIVER_VERSION-v1.6.3}"
		fi
		go mod tidy
		CGO_ENABLED=$cgo go test "${race[@]}" -c -o "$out/$s.test" .
	)
}

status=0
summary=""
# run SUITE LABEL MODDIR ENV...: runs the suite's test binary in MODDIR with
# ENV, its verbose output in $out/SUITE-LABEL.log, and adds a summary.
run() {
	local s=$1 label=$2 mod=$3 log=$out/$1-$2.log cmp=0
	shift 3
	case $label in *pgx-primary) cmp=1 ;; esac
	echo "orm-suites: $s ($label)..."
	local start=$SECONDS
	(cd "$out/$s/$mod" && env "$@" "$out/$s.test" -test.v -test.count=1 -test.timeout=30m "${extra[@]}") >"$log" 2>&1 || true
	local res
	res=$(awk -v suite="$s" -v label="$label" -v secs=$((SECONDS - start)) -v known="$here/known-failures" -v compare=$cmp -f "$here/summary.awk" "$log")
	case $label in
	*pgx-primary) ;;
	*)
		local first=${res%%$'\n'*}
		res="$first"$'\n'"  transactions by node: $(bynode "$s")${res#"$first"}"
		;;
	esac
	echo "$res"
	summary+="$res"$'\n'
	if grep -q 'did not finish' <<<"$res"; then
		tail -5 "$log" | sed 's/^/    | /'
	fi
	if grep -q '^orm-suites: NEW' <<<"$res"; then
		status=1
	fi
	return 0
}

compare=${ORM_SUITES_COMPARE:-}
read -ra extra <<<"${ORM_SUITES_TESTFLAGS:-}"
for s in "${suites[@]}"; do
	case $s in
	gorm)
		echo "orm-suites: preparing gorm (compiling its tests: a minute or two)..."
		prepare gorm tests || { status=1; continue; }
		for mode in extended simple; do
			freshdb gorm
			d=$(withdb "$dsn" gorm)"&TimeZone=Asia/Shanghai"
			[ $mode = simple ] && d+="&default_query_exec_mode=simple_protocol"
			run gorm "$mode" tests GORM_DIALECT=postgres DEBUG=false GORM_PG_DRIVER=pgrouted GORM_DSN="$d"
			if [ -n "$compare" ]; then
				freshdb gorm
				ext=1
				[ $mode = simple ] && ext=
				run gorm "$mode-pgx-primary" tests GORM_DIALECT=postgres DEBUG=false GORM_PG_EXTENDED=$ext \
					GORM_DSN="$(primary "$(withdb "$dsn" gorm)")&TimeZone=Asia/Shanghai"
			fi
		done
		;;
	sqlx)
		echo "orm-suites: preparing sqlx..."
		prepare sqlx . || { status=1; continue; }
		for i in $(seq "${SQLX_RUNS:-5}"); do
			freshdb sqlx
			run sqlx "run$i" . SQLX_POSTGRES_DRIVER=pgrouted SQLX_POSTGRES_DSN="$(withdb "$dsn" sqlx)" \
				SQLX_MYSQL_DSN=skip SQLX_SQLITE_DSN=skip
		done
		if [ -n "$compare" ]; then
			freshdb sqlx
			run sqlx pgx-primary . SQLX_POSTGRES_DRIVER=pgx SQLX_POSTGRES_DSN="$(primary "$(withdb "$dsn" sqlx)")" \
				SQLX_MYSQL_DSN=skip SQLX_SQLITE_DSN=skip
		fi
		;;
	bun)
		echo "orm-suites: preparing bun (compiling its tests: a minute or two)..."
		prepare bun internal/dbtest || { status=1; continue; }
		# Its query snapshots are named by database: pgrouted's are pgx's.
		for f in "$out"/bun/internal/dbtest/testdata/snapshots/*-pgx-*; do
			cp "$f" "${f/-pgx-/-pgrouted-}"
		done
		freshdb bun
		# PG: the tests that open bun's own pgdriver (pg(t)), not through
		# testEachDB, run on the primary.
		run bun pgrouted internal/dbtest TZ= BUN_DBS=pgrouted PGROUTED_DSN="$(withdb "$dsn" bun)" \
			PG="$(primary "$(withdb "$dsn" bun)")"
		if [ -n "$compare" ]; then
			freshdb bun
			run bun pgx-primary internal/dbtest TZ= BUN_DBS=pgx PG="$(primary "$(withdb "$dsn" bun)")"
		fi
		;;
	esac
done

echo
echo "orm-suites: summary (logs in $out)"
printf '%s' "$summary" | grep -v '^    ' || true
exit $status
