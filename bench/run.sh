#!/usr/bin/env bash
# make bench: runs every benchmark of the bench module against a local
# testcluster and writes bench/RESULTS.md.
#
#   1. the Go benchmarks (overhead_test.go), BENCH_COUNT rounds, their
#      output filtered to the lines benchstat reads (testcluster logs
#      between them would confuse it), compared with benchstat;
#   2. the workloads (package workload) with go run ./cmd/workload, which
#      writes RESULTS.md with the benchstat table in it.
#
# Environment: BENCH_COUNT (default 6), BENCH_TIME (default 1s, per run of
# a Go benchmark), BENCH_DURATION (default 5s, per workload run),
# BENCH_NOTE (a line on the conditions, quoted in RESULTS.md), BENCH_RUN (a
# regexp of the workloads to run, default all), BENCH_OUT (default
# RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")"
. ../scripts/lib.sh

count=${BENCH_COUNT:-6}
benchtime=${BENCH_TIME:-1s}
duration=${BENCH_DURATION:-5s}
# The version of benchstat run when it is not installed (go run fetches it
# through the module proxy).
benchstat_version=v0.0.0-20260908200009-22c9c6c9d4da

tmp=$(pgrouted_tmpdir pgrouted-bench)
trap 'rm -rf "$tmp"' EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
started=$(date +%s)
echo "bench: Go benchmarks, $count rounds, -benchtime $benchtime" >&2
# Rounds of -count 1 rather than one -count N: every benchmark is measured
# once per round, so that a change of load on the machine spreads over all
# of them instead of falling on one.
TMPDIR=$tmp go test -c -o "$tmp/bench.test" .
: >"$tmp/bench.txt"
for round in $(seq "$count"); do
	(cd "$tmp" && TMPDIR=$tmp ./bench.test -test.run '^$' -test.bench . -test.benchmem -test.benchtime "$benchtime" -test.timeout 10m) >"$tmp/bench.log" 2>&1 || {
		cat "$tmp/bench.log" >&2
		exit 1
	}
	if [ "$round" = 1 ]; then
		grep -E '^(goos|goarch|pkg|cpu)' "$tmp/bench.log" >>"$tmp/bench.txt"
	fi
	grep -E '^Benchmark' "$tmp/bench.log" >>"$tmp/bench.txt"
	echo "bench: round $round of $count done" >&2
done

if command -v benchstat >/dev/null; then
	benchstat=(benchstat)
elif [ -x "$(go env GOPATH)/bin/benchstat" ]; then
	benchstat=("$(go env GOPATH)/bin/benchstat")
else
	benchstat=(go run "golang.org/x/perf/cmd/benchstat@$benchstat_version")
fi
"${benchstat[@]}" -col /driver "$tmp/bench.txt" >"$tmp/benchstat.txt"

echo "bench: workloads, $duration per run" >&2
TMPDIR=$tmp go run ./cmd/workload -out "${BENCH_OUT:-RESULTS.md}" -run "${BENCH_RUN:-.}" -benchstat "$tmp/benchstat.txt" -raw "$tmp/bench.txt" \
	-duration "$duration" -command "make bench" -since "$started" \
	-note "load average (1, 5, 15 min) before the Go benchmarks: $load_before.${BENCH_NOTE:+ $BENCH_NOTE}"
echo "bench: wrote ${BENCH_OUT:-bench/RESULTS.md} in $(($(date +%s) - started)) s" >&2
