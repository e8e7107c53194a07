#!/usr/bin/env bash
# Makes sure Patroni and etcd are installed, looking where
# testcluster.StartPatroni looks: PATH, then /usr/bin, /usr/sbin and
# /usr/local/bin. The integration tests of the Patroni topology provider run
# a real Patroni cluster (one etcd, three Patroni members) from them.
# When they are missing, it installs them with apt-get if it runs as root on
# a machine with apt-get; otherwise it prints the command to run and fails.
set -euo pipefail

find_prog() {
	local p
	if p=$(command -v "$1" 2>/dev/null); then echo "$p"; return 0; fi
	for d in /usr/bin /usr/sbin /usr/local/bin; do
		if [ -x "$d/$1" ] && [ ! -d "$d/$1" ]; then echo "$d/$1"; return 0; fi
	done
	return 1
}

have_all() { find_prog patroni >/dev/null && find_prog etcd >/dev/null; }

report() {
	echo "Patroni: $(find_prog patroni) ($("$(find_prog patroni)" --version 2>&1 | head -n 1)); etcd: $(find_prog etcd) ($("$(find_prog etcd)" --version 2>&1 | head -n 1))"
}

if have_all; then
	report
	exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "Patroni or etcd not found: installing them with: apt-get install -y patroni etcd-server"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y patroni etcd-server; then
		apt-get update
		apt-get install -y patroni etcd-server
	fi
	have_all || { echo "apt-get installed patroni and etcd-server but the patroni or etcd program is still not found" >&2; exit 1; }
	report
	exit 0
fi

cat >&2 <<'MSG'
Patroni and etcd (the programs patroni and etcd) are not installed.
The tests of the Patroni topology provider run a real Patroni cluster from them.
Install them with:

    sudo apt-get install -y patroni etcd-server

then run the command again.
MSG
exit 1
