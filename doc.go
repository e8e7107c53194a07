// Package pgrouted is a database/sql driver for a PostgreSQL primary with
// streaming read replicas.
//
// An application opens it like any other driver:
//
//	import _ "github.com/pgrouted/pgrouted"
//
//	db, err := sql.Open("pgrouted",
//		"postgres://app:secret@db1:5432,db2:5432,db3:5432/app?pgrouted_max_lag=2s")
//
// and from then on, with no other change to the application or its ORM:
//
//   - transactions, writes, locks and anything that changes session state run
//     on the primary;
//   - reads in autocommit mode run on a replica, but only on one that already
//     holds the caller's own writes (an LSN watermark) and is inside the
//     staleness budget;
//   - a failing replica is taken out by a circuit breaker and the read goes
//     elsewhere;
//   - which host is the primary is discovered and re-discovered by probing
//     pg_is_in_recovery() on every host, so a failover is followed.
//
// The driver is built on pgx v5. The package testcluster starts a real
// primary with streaming replicas from local PostgreSQL binaries, for the
// project's own tests and for users' integration tests.
package pgrouted
