// Package dsn parses and formats pgrouted connection strings: a connection
// string that pgx accepts, naming the primary and the replicas of one
// cluster, plus keys prefixed pgrouted_ that configure routing.
//
// Both forms work, with several hosts, per-host or shared ports, IPv6 and
// unix socket directories:
//
//	postgres://app:secret@db1:5432,db2:5433,[::1]:5434/app?sslmode=verify-full&pgrouted_max_lag=2s
//	host=db1,db2,/var/run/postgresql port=5432 dbname=app pgrouted_select=nearest
//
// [Parse] takes every pgrouted_ key out, lets pgx parse the rest (so PG*
// environment variables, the passfile, the service file and the TLS
// settings mean what they mean to pgx and libpq), and returns a [Config]:
// one [Host] per server, each with a complete pgx configuration of its own,
// and the routing settings, typed, with defaults from package-level
// variables such as [DefaultProbeInterval]. The keys and their defaults are
// listed in the documentation of [Parse].
//
// [Format] writes a Config back as a connection string that parses to an
// equal Config; [Config.Redacted] (and [Config.String]) does the same with
// every password masked. [Config.Validate] holds a Config built in code to
// the rules Parse applies.
//
// Errors are a [*ParseError], which names the key at fault and never shows a
// password:
//
//	pgrouted dsn: pgrouted_max_lag (1s) must be greater than pgrouted_probe_interval (1s): ...
//	pgrouted dsn: unknown key pgrouted_max_lga (did you mean pgrouted_max_lag?)
package dsn
