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
// # How a connection string is parsed
//
// [Parse] reads no syntax of its own. It gives the whole string to pgx's
// [github.com/jackc/pgx/v5.ParseConfig], so PG* environment variables, the
// passfile, the service file and the TLS settings mean what they mean to
// pgx and libpq, and the string is accepted or refused exactly as pgx
// accepts or refuses it. pgx keeps every key it does not know as a
// run-time parameter; Parse lifts the pgrouted_ keys out of those, as
// pgxpool lifts its pool_ keys, so that none is sent to the server. It
// lifts pgxpool's pool_ keys too (pool_max_conns, pool_min_conns,
// pool_min_idle_conns, pool_max_conn_lifetime,
// pool_max_conn_lifetime_jitter, pool_max_conn_idle_time,
// pool_health_check_period), which set the primary's sessions
// ([Config.PrimaryMaxConns] ...), and refuses the pool_ keys pgrouted does
// not read (pool_ping_timeout), which the server would refuse. Then it
// splits pgx's one configuration into one [Host] per server: pgx lists a
// connection attempt per host, or two under sslmode=prefer and allow (with
// and without TLS, same host and port), in Host/Port/TLSConfig and
// Fallbacks; each pair stays together, as the host's own Fallbacks. So
// every host has a complete pgx configuration of its own, and
// pgrouted_names and pgrouted_weights count the hosts of the connection
// string, not pgx's attempts. The routing settings come out typed; the
// keys and their defaults are listed in the documentation of [Parse].
//
// # Defaults
//
// The defaults are constants ([DefaultMaxLag], [DefaultReplicaMaxConns],
// ...), and a zero field of a [Config] means its default, as in
// sony/gobreaker's Settings: [Parse] and [Config.SetDefaults] fill them
// in, [Config.Validate] and [Format] read a zero field as its default. So
// a Config built in code needs only its hosts. Where zero is a setting of
// its own it has a name: [LatencyWindowOff], [WriteNoWait], [LagNone].
// The defaults that shape routing most are explained where they are
// declared: a staleness budget of 30s ([DefaultMaxLag]), a pool of 10
// connections per replica ([DefaultReplicaMaxConns]), a latency window of
// 20ms that widens with the fastest replica's round trip
// ([Config.LatencyWindow]).
//
// Durations and sizes carry their unit: pgrouted_max_lag=500 is an error
// that says to write 500ms (or 500KB), not a guess. Every duration key
// takes [time.ParseDuration]'s syntax (250us, 1m30s, 1h), read by one
// parser.
//
// One consequence: a host's ConnConfig.ConnString is the connection string
// as given, pgrouted_ keys included, as a pgxpool.Config's keeps its pool_
// keys. pgx does not read it again.
//
// # Bounds
//
// Every duration, count and size has a minimum and a maximum, listed with
// the keys in the documentation of [Parse] (pgrouted_probe_interval from
// 10ms to 1h, pgrouted_replica_max_conns from 1 to 10000, waits and write
// timeouts of at most an hour, ...), and [Config.Validate] holds a Config
// built in code to the same bounds, so that NewConnector in package
// pgrouted refuses what a connection string could not say. Host names,
// socket paths, pgrouted_names and function names must be valid UTF-8
// without control, format (U+202E) or line separator characters: logs,
// metrics and terminals show them. An error quotes a value with such bytes
// as escapes (\xff, \u202e).
//
// # Formatting and redaction
//
// [Format] writes a Config back as a connection string that parses to an
// equal Config: the string it was parsed from, as given, followed by any
// routing key changed since (the last of a repeated key wins), or, for a
// Config built in code, a string written from the hosts' configurations.
// Neither reads libpq's syntax: where the appended keys join the string is
// decided by pgx reading the result back.
//
// [Config.Redacted] (and [Config.String], so fmt) never shows a password.
// A URL is shown as Format writes it, masked by pgconn's own redaction (the
// one its ParseConfigError uses, exact for a URL that parses); a
// keyword/value string, whose quotes and escapes could hide a piece of a
// password from any masking, is written afresh from pgx's parse with
// password=xxxxx. A host's password found anywhere else in the text (a host
// or a name equal to it) is masked there too. The fuzz test holds what
// both write to pgx's reading of it, and the redacted forms to the
// passwords of the input.
// [Config.Validate] holds a Config built in code to the rules Parse
// applies.
//
// Errors are a [*ParseError], which names the key at fault and never shows a
// password:
//
//	pgrouted dsn: pgrouted_max_lag (1s) must be greater than pgrouted_probe_interval (1s): ...
//	pgrouted dsn: unknown key pgrouted_max_lga (did you mean pgrouted_max_lag?)
package dsn
