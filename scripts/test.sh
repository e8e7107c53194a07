#!/usr/bin/env bash
# Runs the whole test suite with the race detector, in a fresh temporary
# directory, then the timing-sensitive packages once more without it while
# each fuzz target is fuzzed for a short while, and fails if any of it fails
# or if any PostgreSQL process or cluster directory that the tests started
# is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

tmp=$(pgrouted_tmpdir pgrouted-test)
status=0
TMPDIR=$tmp go test -race -count=1 -timeout 15m -v ./... "$@" || status=$?
# The ORM examples are their own module (GORM, sqlx and ent stay out of the
# library's go.mod).
(cd examples && TMPDIR=$tmp go test -race -count=1 -timeout 10m -v ./... "$@") || status=$?
# otelroute is its own module too (go.opentelemetry.io stays out of the
# library's go.mod).
(cd otelroute && TMPDIR=$tmp go test -race -count=1 -timeout 10m -v ./... "$@") || status=$?

# The benchmarks are their own module too (GORM, dbresolver); make test only
# compiles and vets them (make bench runs them).
(cd bench && go vet ./...) || status=$?

# Fuzzing. The tests above run every fuzz target on its seeds only; here
# each target is also fuzzed for a bounded time, $FUZZTIME (default 12s),
# with $FUZZWORKERS workers (default 1). go test -fuzz takes one target per
# run and its pattern must match exactly one, hence '^Name$'. When fuzzing
# finds an input that makes the target fail, go test stops, fails, and
# writes the input to <package>/testdata/fuzz/<Name>/: from then on it is a
# seed that every `go test` of the package runs. Fix the bug and commit
# that file with the fix.
#
# It runs in the background, beside the full-speed pass below, which
# mostly waits on servers: one worker leaves the other CPU to that pass,
# and twice the time gives each target as many executions as two workers
# for 6s did.
fuzztime=${FUZZTIME:-12s}
fuzzworkers=${FUZZWORKERS:-1}
targets=$(grep -rH --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . |
	grep -v -e '^\./examples/' -e '^\./otelroute/' |
	sed -E 's#^(.*)/[^/]*:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' | sort || true)
#
# Go 1.26's fuzzing coordinator can fail a target with a bare "context
# deadline exceeded" when -fuzztime ends while a worker is busy, having
# found nothing and written no input (golang/go#75804, fixed in Go 1.27).
# Such a run is run once more; a target fails when it writes a failing
# input, or fails in any other way, or fails so twice.
fuzzcorpus() { ls "$1/testdata/fuzz/$2" 2>/dev/null | sort || true; }
fuzzall() {
	local fstatus=0 dir name try before after out rc
	if [ -z "$targets" ]; then
		echo "FAIL: no fuzz target found" >&2
		return 1
	fi
	while read -r dir name; do
		[ -n "$name" ] || continue
		for try in 1 2; do
			echo "fuzz: $name ($dir) for $fuzztime, $fuzzworkers worker(s)"
			before=$(fuzzcorpus "$dir" "$name")
			out=$(TMPDIR=$tmp go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel "$fuzzworkers" "$dir" 2>&1) && rc=0 || rc=$?
			echo "$out"
			[ "$rc" -eq 0 ] && break
			after=$(fuzzcorpus "$dir" "$name")
			if [ "$try" -eq 1 ] && [ "$before" = "$after" ] &&
				grep -q '^    context deadline exceeded$' <<<"$out"; then
				echo "fuzz: $name stopped with 'context deadline exceeded' and no failing input (golang/go#75804): once more"
				continue
			fi
			echo "FAIL: fuzzing $name failed; a failing input, if it found one, is kept in $dir/testdata/fuzz/$name/" >&2
			fstatus=1
			break
		done
	done <<<"$targets"
	return $fstatus
}
fuzzlog="$tmp/fuzz.log"
fuzzall >"$fuzzlog" 2>&1 &
fuzzpid=$!

# The race detector slows everything down, which hides readiness bugs: a
# test that waits too little passes under -race and fails without it. The
# packages that wait on servers, probes and failovers run once more at full
# speed.
TMPDIR=$tmp go test -count=1 -timeout 10m ./testcluster/... ./topology/ ./cmd/... . "$@" || status=$?

wait "$fuzzpid" || status=$?
cat "$fuzzlog"

if pgrouted_leftovers "$tmp"; then
	echo "ok: no PostgreSQL process and no cluster directory left behind"
else
	status=1
fi
rm -rf "$tmp"
exit $status
