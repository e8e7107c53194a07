#!/usr/bin/env bash
# Static checks of every module of the repository (the library and the
# modules beside it): go mod tidy -diff, staticcheck and govulncheck. Runs
# every check of every module, then fails if any failed, naming them.
# Arguments choose the checks (tidy, staticcheck, govulncheck; none: all):
# make lint runs them all; make test runs staticcheck in one lane and the
# other two in another (scripts/test.sh), so CI does too.
#
# staticcheck and govulncheck are pinned by the `tool` lines of
# tools/go.mod, a module of its own so that they never become requirements
# of a pgrouted user; each runs in a module's directory as
#   go tool -modfile=<repository>/tools/go.mod staticcheck ./...
# (the tool is built from tools/go.mod, once, into the build cache; the
# packages it checks are the module's own, from its go.mod).
#
# govulncheck reads the Go vulnerability database from a directory, not
# from the network: the OSV entries (data/osv/GO-*.json) of the module
# golang.org/x/vulndb at $vulndb_version, which the go command downloads
# from the module proxy (25 MB, checked against the checksum database and
# $vulndb_sum) into the module cache. govulncheck -db file://DIR takes a
# directory of OSV entries and indexes it itself. To take newer advisories,
# set vulndb_version to a newer version of golang.org/x/vulndb and
# vulndb_sum to its h1: hash (go mod download -json prints both).
#
# The standard library a program gets is that of the Go that builds it,
# which no go.mod of a library chooses; govulncheck reports the standard
# library's advisories for the Go version it is told (GOVERSION in its
# environment, which golang.org/x/vuln's scan reads before asking
# `go env GOVERSION`). When the go command here is older than
# $vulncheck_go (go1.27.3), it is told $vulncheck_go, so that what it
# judges is pgrouted's code and its modules' requirements on a current Go;
# the code is loaded by the go command here (running it under that
# toolchain instead downloaded it, 76 MB, and compiled the standard library
# once more for it: two minutes of a fresh clone's CI). On go1.26.8,
# net/http, crypto/tls, crypto/x509, net/textproto and os have advisories
# fixed in go1.26.9 and go1.26.10: build programs with a current Go.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

modules=(. promcollector otelroute pgroutedgrpc examples bench)
vulndb_version=v0.0.0-20261105234957-e22db6528018
vulndb_sum=h1:mfngRv0Yoh0VApsXKEN82CjD99kl7mtparN3bs3JnqI=
vulncheck_go=go1.27.3

checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(tidy staticcheck govulncheck)
for c in "${checks[@]}"; do
	case $c in
	tidy | staticcheck | govulncheck) ;;
	*)
		echo "lint: unknown check $c (tidy, staticcheck, govulncheck)" >&2
		exit 2
		;;
	esac
done
# wants CHECK reports whether CHECK was chosen.
wants() { [[ " ${checks[*]} " == *" $1 "* ]]; }

failed=()
# check WHAT COMMAND... runs COMMAND, says how long it took (and its CPU
# time), and records WHAT as failed when it fails.
check() {
	local what=$1 rc TIMEFORMAT
	shift
	echo "lint: $what"
	TIMEFORMAT="lint: $what: %0Rs, cpu %0Us user %0Ss system"
	time { "$@" && rc=0 || rc=$?; }
	if [ "$rc" -ne 0 ]; then
		echo "FAIL: $what" >&2
		failed+=("$what")
	fi
}

# go mod tidy -diff prints what go mod tidy would change and fails when it
# would change anything.
if wants tidy; then
	for m in "${modules[@]}" tools; do
		check "go mod tidy -diff ($m)" go -C "$m" mod tidy -diff
	done
fi

# inmod DIR COMMAND... runs COMMAND in the module at DIR.
inmod() { (cd "$1" && shift && "$@"); }
if wants staticcheck; then
	for m in "${modules[@]}"; do
		check "staticcheck ($m)" inmod "$m" go tool -modfile="$repo/tools/go.mod" staticcheck ./...
	done
fi

vulndb() {
	local json dir sum
	json=$(go mod download -json "golang.org/x/vulndb@$vulndb_version") || return 1
	dir=$(sed -n -E 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p' <<<"$json")
	sum=$(sed -n -E 's/^[[:space:]]*"Sum": "(.*)",?$/\1/p' <<<"$json")
	if [ "$sum" != "$vulndb_sum" ]; then
		echo "golang.org/x/vulndb@$vulndb_version: sum $sum, want $vulndb_sum" >&2
		return 1
	fi
	[ -d "$dir/data/osv" ] || {
		echo "golang.org/x/vulndb@$vulndb_version has no data/osv" >&2
		return 1
	}
	echo "$dir/data/osv"
}
if ! wants govulncheck; then
	:
elif db=$(vulndb); then
	have=$(go env GOVERSION)
	vulngo=()
	if [ "$(printf '%s\n' "$vulncheck_go" "$have" | sort -V | head -n 1)" != "$vulncheck_go" ]; then
		vulngo=(env "GOVERSION=$vulncheck_go")
	fi
	for m in "${modules[@]}"; do
		check "govulncheck ($m)" inmod "$m" "${vulngo[@]}" go tool -modfile="$repo/tools/go.mod" govulncheck -db "file://$db" ./...
	done
else
	echo "FAIL: govulncheck: no vulnerability database" >&2
	failed+=("govulncheck: no vulnerability database")
fi

if [ ${#failed[@]} -gt 0 ]; then
	echo "lint: failed:" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "lint: ok (${checks[*]}, ${#modules[@]} modules)"
