#!/usr/bin/env bash
# Runs TestConsistencyUnderFaults long, without the race detector: the
# global and the session checks each for at least half of $CHAOS_DURATION
# (default 10m; a whole number of s, m or h) and until they hold their
# evidence, the control until it holds its own (as in make test), under
# the random fault schedule of $CHAOS_SEED (default: a random seed, which
# the test logs). A history that fails is drawn to an HTML file in
# $PGROUTED_HISTORY_DIR (default: ./chaos-history), whose path the test
# logs. Extra arguments are go test flags. It fails when the test fails, or
# when it left PostgreSQL behind.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

duration=${CHAOS_DURATION:-10m}
case $duration in
*[0-9]s) secs=${duration%s} ;;
*[0-9]m) secs=$((${duration%m} * 60)) ;;
*[0-9]h) secs=$((${duration%h} * 3600)) ;;
*) secs=x ;;
esac
if ! [[ $secs =~ ^[0-9]+$ ]] || [ "$secs" -lt 2 ]; then
	echo "FAIL: CHAOS_DURATION=$duration: want a whole number of seconds, minutes or hours (90s, 10m, 1h), at least 2s" >&2
	exit 1
fi
export CHAOS_DURATION=$duration
export PGROUTED_HISTORY_DIR=${PGROUTED_HISTORY_DIR:-$PWD/chaos-history}

tmp=$(pgrouted_tmpdir pgrouted-chaos)
status=0
# The workload, the checks (porcupine on a long history takes a while) and
# the cluster's restores after each check.
timeout=$((secs * 2 + 900))s
TMPDIR=$tmp go test -count=1 -timeout "$timeout" -v -run '^TestConsistencyUnderFaults$' . "$@" || status=1
pgrouted_leftovers "$tmp" || status=1
rm -rf "$tmp"
exit $status
