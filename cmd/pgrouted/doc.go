// Command pgrouted shows pgrouted at work: a demo on a local replicated
// PostgreSQL, a local replicated PostgreSQL to try it on, and what the
// driver sees of a real cluster.
//
//	pgrouted demo [--duration 20s] [--replicas 2] [--no-color] [--json]
//	pgrouted cluster [--replicas 2]
//	pgrouted topology [--watch] [--json] [--no-color] [--timeout 10s] [DSN]
//	pgrouted explain [--json] [--timeout 10s] [DSN] QUERY
//	pgrouted help [COMMAND]
//
// demo and cluster run PostgreSQL as child processes (package testcluster)
// and need a unix system (Linux, macOS, a BSD); elsewhere they say so and
// exit 1. topology and explain run everywhere.
//
// Flags may come before or after the arguments; "--" ends them. Errors go to
// stderr. No password from a DSN is ever printed: the driver's errors and
// snapshots hold none, and the command masks the DSN's password in anything
// it writes as well.
//
// topology and explain read the DSN from the environment variable
// PGROUTED_DSN, or from stdin when the DSN argument is "-". A DSN given as
// an argument still works, with a warning on stderr: other users of the
// machine can read a process's arguments (ps, /proc/PID/cmdline), and the
// shell keeps them in its history.
//
// # demo
//
// demo starts a primary and --replicas streaming replicas from the
// PostgreSQL server binaries on this machine (package testcluster: a
// temporary directory, free loopback ports), opens them through a
// [pgrouted.Connector] with Config.OnRoute and Config.Logger hooks, and runs a
// mixed workload: writers that read each write back at once, users whose
// pgrouted.Session travels as a text token from one request to the next,
// plain reads, read-only transactions that check a write made just before,
// and read-write transactions. Over --duration it plays a story:
//
//  1. normal routing: writes on the primary, reads on the replicas;
//  2. replay paused on a replica (pg_wal_replay_pause) until its staleness
//     bound passes pgrouted_max_lag (2s) and reads leave it; then resumed;
//  3. a replica killed with SIGKILL: its circuit opens, reads go on; then
//     started again;
//  4. a failover: the primary stopped, a replica promoted, the others
//     following it; writes wait for the new primary and resume there.
//
// On a terminal the table is redrawn every second (endpoint, role, circuit,
// lag in bytes and as a time bound, probe round trip, reads, writes and
// transaction statements served), with the phase, a progress bar and the
// recent events: the driver's log lines, one per topology event, and the
// story's steps. Without a terminal, or with --no-color, it prints plain
// snapshots every 5 seconds and at each phase. With --json stdout holds only
// the final [Summary], as JSON; events go to stderr.
//
// The summary counts statements, the share of reads replicas served, the
// read-your-writes checks and the stale reads among them, errors, and the
// time writes were unavailable during the failover. An error is a failed
// statement, except a write or a transaction cut off inside a fault window
// (from the kill of a replica to 2s after it is back; from the stop of the
// primary to 2s after the first write on the new one): a server went away
// under it, and no driver can replay a write or a transaction that may have
// run, so those are counted apart, as interrupted. A failed autocommit read
// is always an error: pgrouted retries reads elsewhere.
//
// Ctrl-C stops the workload, removes the cluster and prints the summary so
// far: once the cluster is up, that is a normal end (exit status 0, unless
// the demo found stale reads or errors so far). Nothing is installed:
// without PostgreSQL the demo fails and names the command that installs it
// (make demo, from a checkout, installs it first when run as root, as make
// test does).
//
// # cluster
//
// cluster starts a primary and --replicas (default 2) streaming replicas as
// the demo does (package testcluster), prints on stdout one line,
//
//	DSN: postgres://postgres:PASSWORD@127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2/postgres?sslmode=disable&pgrouted_names=node0,node1,node2
//
// the multi-host DSN of the cluster, primary first, and on stderr its
// progress and a hint (put it in PGROUTED_DSN, then pgrouted topology),
// then keeps the cluster up until Ctrl-C or SIGTERM, when it stops every
// PostgreSQL process and removes the cluster's directory. make cluster runs it from a checkout.
//
// PASSWORD is random, made up at start for this cluster (SCRAM
// authentication): it protects nothing but this throwaway cluster, and the
// DSN line is the one place the command prints it, since that is how one
// connects. When the command runs as root, PostgreSQL runs as the postgres
// user, which must be able to enter $TMPDIR: the command checks, and says
// how to set TMPDIR otherwise. Nothing is installed: without PostgreSQL it
// fails and names the command that installs it, as the demo does. The ports
// are free ones picked at start, so the DSN changes from one run to the
// next.
//
// # topology
//
// topology starts pgrouted's probers on DSN, waits until every host answered
// its first probe (or --timeout) and prints what the driver sees, from
// [pgrouted.Connector.Topology]: the primary, its epoch and lease, and per
// host the role, circuit, timeline, replay LSN, lag, lag bound, round trip,
// sync state, reads in flight, pool and last probe error. --watch prints it
// every second until Ctrl-C; --json prints the snapshot as JSON.
//
// # explain
//
// explain prints where QUERY would run now and why,
// [pgrouted.Connector.Explain], after the first probes: as from a fresh
// process, in autocommit mode with no write before it. The query is not run.
//
// # Exit status
//
//	0    success (topology: a host answered; demo: 0 stale reads, 0 errors,
//	     writes resumed on the new primary, or stopped by Ctrl-C or SIGTERM
//	     once its cluster was up, its normal end, with 0 stale reads and 0
//	     errors so far; cluster: stopped by Ctrl-C or SIGTERM once up, its
//	     normal end, and the cluster removed)
//	1    failure: no host answered, explain's query cannot run now, the demo
//	     found a stale read or an error or could not start, the cluster
//	     could not start or be removed (PostgreSQL missing, ...)
//	2    usage error: unknown command, bad flag, missing argument, invalid DSN
//	130  demo or cluster was interrupted (Ctrl-C, SIGTERM) before its
//	     cluster was up
package main
