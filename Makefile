# pgrouted: the two commands a newcomer needs.
#
#   make demo   a local primary with two streaming replicas, a workload
#               through pgrouted, a scripted story (a paused replica, a killed
#               one, a failover) and what pgrouted did
#   make test   the whole test suite, with -race, against real local
#               PostgreSQL clusters
#
# Both install PostgreSQL when it is missing and this runs as root with
# apt-get; otherwise they say which command to run. make test does the same
# for PgBouncer (the tests through a connection pooler).

.PHONY: demo test postgres pgbouncer vet fmt

demo: postgres
	go run ./cmd/pgrouted demo

test: postgres pgbouncer
	./scripts/test.sh

postgres:
	@./scripts/ensure-postgres.sh

pgbouncer:
	@./scripts/ensure-pgbouncer.sh

vet:
	go vet ./...
	cd examples && go vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')
