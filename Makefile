# pgrouted: the two commands a newcomer needs.
#
#   make test   the whole test suite, with -race, against real local
#               PostgreSQL clusters (installs PostgreSQL when it is missing
#               and this runs as root with apt-get; otherwise says how)

.PHONY: test postgres vet fmt

test: postgres
	./scripts/test.sh

postgres:
	@./scripts/ensure-postgres.sh

vet:
	go vet ./...
	cd examples && go vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')
