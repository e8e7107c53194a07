# pgrouted: the two commands a newcomer needs.
#
#   make demo   a local primary with two streaming replicas, a workload
#               through pgrouted, a scripted story (a paused replica, a killed
#               one, a failover) and what pgrouted did
#   make test   the whole test suite, with -race, against real local
#               PostgreSQL clusters
#   make bench  pgrouted against pgx, GORM's dbresolver and a pin after
#               write, on a local cluster (under 10 minutes); writes
#               bench/RESULTS.md
#
# All three install PostgreSQL when it is missing and this runs as root with
# apt-get; otherwise they say which command to run. `make test` does the same
# for Patroni and etcd (apt-get install -y patroni etcd-server).

.PHONY: demo test postgres patroni vet fmt bench

demo: postgres
	go run ./cmd/pgrouted demo

test: postgres patroni
	./scripts/test.sh

bench: postgres
	./bench/run.sh

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
	cd bench && go vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# PgBouncer, for the tests through a connection pooler: make test installs
# it when missing (as root with apt-get), otherwise prints the command.
.PHONY: pgbouncer
test: pgbouncer

pgbouncer:
	@./scripts/ensure-pgbouncer.sh
