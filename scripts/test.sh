#!/usr/bin/env bash
# Runs the whole test suite with the race detector, in a fresh temporary
# directory, then the timing-sensitive packages once more without it while
# each fuzz target is fuzzed for a short while, and fails if any of it fails
# or if any PostgreSQL process or cluster directory that the tests started
# is left behind. Extra arguments are go test flags, given to every go test
# of the two passes (with a -run of them, the root package runs unsharded:
# it would replace shard 1's).
#
# Most of the suite's time is tests waiting on servers, probes and
# failovers, not CPU, so each pass runs as a few jobs side by side (see
# "Jobs" below), each with its output in a file of its own; when a pass's
# jobs have all ended, their outputs are printed one after the other, each
# between lines that name it, then a summary of the jobs.
#
# The root package is the longest: its tests run one after the other on one
# shared cluster (many break and restore it), about 400 s with -race. It
# runs as two shards, two go test processes, each with its own cluster
# (testcluster picks free ports and a new directory, and starts again on
# other ports when another process took one first): shard 1 runs the tests
# named in $shard1 below (-run), shard 2 every other one (-skip on the same
# pattern), so a new test runs in shard 2 and every test in exactly one.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

# The root package's shard 1: its longest tests, about half of the
# package's time (the "--- PASS: TestX (12.3s)" lines of a -v run); shard 2
# runs the rest. When shard 1 ends much earlier or later than shard 2 (see
# the summary), move a long test from one to the other; a test listed here
# must exist (checked below).
shard1=(
	TestOrdinaryRoleFailover TestGlobalThroughFailover TestPatroni
	TestFrozenPrimary TestDeferredWriteAcrossFailover TestRoutingTable
	TestLostWriteIsReported TestWatermarkAcrossFailoverWithoutHistory
	TestCheckedReadAllocations
)
shard1re="^($(
	IFS='|'
	echo "${shard1[*]}"
))\$"
for name in "${shard1[@]}"; do
	if ! grep -q "^func $name(t \*testing.T)" ./*_test.go; then
		echo "FAIL: scripts/test.sh: shard 1 lists $name, which is no test of the root package" >&2
		exit 1
	fi
done

# shards PASS GOTEST ARG... starts the root package's two shards as jobs
# (see below): GOTEST with -run, and with -skip, on shard 1's pattern, then
# the script's arguments ARG...; or one job, GOTEST with ARG... alone, when
# ARG... holds a -run, which would replace shard 1's.
shards() {
	local pass=$1 gotest=$2 a
	shift 2
	for a in "$@"; do
		case $a in
		-run | -run=* | --run | --run=*)
			start "$pass: root package" "$gotest" . "$@"
			return
			;;
		esac
	done
	start "$pass: root package, shard 1 (-run)" "$gotest" -run "$shard1re" . "$@"
	start "$pass: root package, shard 2 (-skip)" "$gotest" -skip "$shard1re" . "$@"
}

tmp=$(pgrouted_tmpdir pgrouted-test)
status=0

# Jobs. start NAME COMMAND... runs COMMAND in the background, its output and
# errors to a file of its own; finish waits for every job started since its
# last call, prints each one's output between two lines that name it, and
# adds a line for each to the summary: its status, how long it took, and
# the CPU time of the go commands and test binaries it ran (not of the
# PostgreSQL servers they started, which are not their children by then).
# A job that fails fails the script.
jobnames=() jobpids=() joblogs=() summary=()
start() {
	local name=$1 log
	shift
	log="$tmp/job-$((${#summary[@]} + ${#jobnames[@]})).log"
	(
		began=$(date +%s)
		"$@" >"$log" 2>&1 && rc=0 || rc=$?
		echo "$rc $(($(date +%s) - began))" >"$log.end"
		# times' second line: the children's user and system time (not
		# through a pipe: a subshell's children are not these).
		times >>"$log.end"
		exit "$rc"
	) &
	jobnames+=("$name") jobpids+=($!) joblogs+=("$log")
	echo "started: $name"
}
finish() {
	local i rc secs cpu result
	for i in "${!jobpids[@]}"; do
		wait "${jobpids[i]}" || true
		read -r rc secs <"${joblogs[i]}.end" || rc=1 secs=?
		cpu=$(sed -E -n '3s/^([0-9]+)m([0-9.]+)s ([0-9]+)m([0-9.]+)s$/\1 \2 \3 \4/p' "${joblogs[i]}.end" |
			awk '{printf "%.0f", $1 * 60 + $2 + $3 * 60 + $4}')
		if [ "$rc" -eq 0 ]; then result=ok; else result=FAIL status=1; fi
		echo "======== ${jobnames[i]}: output"
		cat "${joblogs[i]}"
		echo "======== ${jobnames[i]}: $result in ${secs}s"
		summary+=("$result	${secs}s	cpu ${cpu}s	${jobnames[i]}")
	done
	jobnames=() jobpids=() joblogs=()
}

# Pass 1, with the race detector: the root package's two shards, and every
# other package, then the two other modules, one after the other in a third
# job (together shorter than a shard).
root=github.com/pgrouted/pgrouted
others=$(go list ./... | grep -vx "$root")
racetest() { TMPDIR=$tmp go test -race -count=1 -timeout 15m -v "$@"; }
rest() {
	local rc=0
	# shellcheck disable=SC2086
	racetest $others "$@" || rc=1
	# The ORM examples are their own module (GORM, sqlx and ent stay out
	# of the library's go.mod).
	(cd examples && racetest ./... "$@") || rc=1
	# otelroute is its own module too (go.opentelemetry.io stays out of
	# the library's go.mod).
	(cd otelroute && racetest ./... "$@") || rc=1
	# The benchmarks are their own module too (GORM, dbresolver); make
	# test only compiles and vets them (make bench runs them).
	(cd bench && go vet ./...) || rc=1
	return $rc
}
start "race: other packages, examples, otelroute; bench vetted" rest "$@"
# The two shards link the same test binary: compile it once first (the
# build cache keeps what they link), not twice side by side.
go test -race -c -o "$tmp/root-race.test" . && rm -f "$tmp/root-race.test" || status=1
shards race racetest "$@"
finish

# Pass 2. The race detector slows everything down, which hides readiness
# bugs: a test that waits too little passes under -race and fails without
# it. The packages that wait on servers, probes and failovers run once more
# at full speed, the root package in the same two shards.
#
# Beside them, fuzzing. The tests above run every fuzz target on its seeds
# only; here each target is also fuzzed for a bounded time, $FUZZTIME
# (default 12s), with $FUZZWORKERS workers (default 1). go test -fuzz takes
# one target per run and its pattern must match exactly one, hence
# '^Name$'. When fuzzing finds an input that makes the target fail, go test
# stops, fails, and writes the input to <package>/testdata/fuzz/<Name>/:
# from then on it is a seed that every `go test` of the package runs. Fix
# the bug and commit that file with the fix. The other jobs mostly wait on
# servers: one worker leaves the other CPU to them, and twice the time gives
# each target as many executions as two workers for 6s did.
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
fulltest() { TMPDIR=$tmp go test -count=1 -timeout 10m "$@"; }
start "no race: testcluster, topology, cmd" fulltest ./testcluster/... ./topology/ ./cmd/... "$@"
start "fuzzing, $fuzztime a target" fuzzall
go test -c -o "$tmp/root.test" . && rm -f "$tmp/root.test" || status=1
shards "no race" fulltest "$@"
finish

echo "======== summary"
printf '%s\n' "${summary[@]}"
if pgrouted_leftovers "$tmp"; then
	echo "ok: no PostgreSQL process and no cluster directory left behind"
else
	status=1
fi
rm -rf "$tmp"
exit $status
