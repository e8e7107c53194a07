package dsn

import (
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// The bounds of every duration, count and size key: one place, read by the
// checks of [Parse] and [Config.Validate], and stated in the table of
// [Parse] and in package pgrouted's documentation (docs/routing.md). A
// bound keeps a typo or a hostile connection string from turning pgrouted
// against the cluster or itself: probes back to back against every host
// (pgrouted_probe_interval=0.000001ms), an open circuit probed without
// pause, waits of centuries, pools of two billion connections. Each is
// far from any setting that makes sense, so that none stands in the way
// of a real deployment. Minimums and maximums are inclusive.
const (
	// minProbeInterval is the shortest pgrouted_probe_interval: a probe
	// is a connection's round trip to every host (and a request to
	// Patroni), so 10ms already means 100 queries a second per host per
	// process. It is also the shortest circuit backoff.
	minProbeInterval = 10 * time.Millisecond
	// maxProbeInterval is the longest pgrouted_probe_interval: beyond an
	// hour, roles and lag are not followed at all.
	maxProbeInterval = time.Hour

	// maxLagTime is the longest time budget of pgrouted_max_lag (the
	// shortest is pgrouted_probe_interval, exclusive). Three maximal probe
	// intervals, the default budget at that interval, fit under it; a
	// longer budget is pgrouted_max_lag=none in all but name.
	maxLagTime = 24 * time.Hour
	// minLagBytes and maxLagBytes bound a byte budget of pgrouted_max_lag.
	minLagBytes = 1
	maxLagBytes = 1024 * gib

	// minLatencyWindow and maxLatencyWindow bound pgrouted_latency_window
	// (or off): below 100µs no two round trips differ, above 10s every
	// replica is inside.
	minLatencyWindow = 100 * time.Microsecond
	maxLatencyWindow = 10 * time.Second

	// minWait is the shortest non-zero pgrouted_pin_after_write,
	// pgrouted_write_timeout and pgrouted_replica_wait (0 turns each off),
	// and maxWait their longest: a statement does not wait more than an
	// hour.
	minWait = time.Millisecond
	maxWait = time.Hour

	// maxLease is the longest pgrouted_lease (the shortest is
	// pgrouted_probe_interval, exclusive): two maximal probe intervals.
	maxLease = 2 * time.Hour

	// maxReplicaMaxConns is the largest pgrouted_replica_max_conns: far
	// beyond any PostgreSQL max_connections that serves.
	maxReplicaMaxConns = 10_000

	// minConnLifetime and maxConnLifetime bound a pool's connection
	// lifetime and idle time (pgrouted_replica_max_conn_lifetime,
	// pgrouted_replica_max_conn_idle_time and their pool_ twins), and
	// maxConnLifetime its lifetime jitter: below a second a pool opens a
	// connection for nearly every statement, beyond a day none is ever
	// renewed.
	minConnLifetime = time.Second
	maxConnLifetime = 24 * time.Hour

	// minHealthCheckPeriod and maxHealthCheckPeriod bound the time between
	// two health checks of a pool's idle connections
	// (pgrouted_replica_health_check_period, pool_health_check_period).
	minHealthCheckPeriod = 100 * time.Millisecond
	maxHealthCheckPeriod = time.Hour

	// maxCircuitFailures is the largest pgrouted_circuit_failures.
	maxCircuitFailures = 1000

	// maxCircuitMaxBackoff is the longest pgrouted_circuit_max_backoff
	// (the shortest is pgrouted_probe_interval).
	maxCircuitMaxBackoff = time.Hour

	// minPatroniTimeout and maxPatroniTimeout bound
	// pgrouted_patroni_timeout (also less than pgrouted_lease).
	minPatroniTimeout = 10 * time.Millisecond
	maxPatroniTimeout = time.Minute
)

// MaxWeight is the largest [Host.Weight] (pgrouted_weights); the smallest
// is 1.
const MaxWeight = 1_000_000

// durationBounds are the bounds of a duration key; zero, when not "",
// tells what 0 means for a key where 0 is a setting of its own.
type durationBounds struct {
	min, max time.Duration
	zero     string
}

// rule returns the rule d breaks, or "".
func (b durationBounds) rule(d time.Duration) string {
	switch {
	case d < 0:
		return "must not be negative"
	case d == 0 && b.zero != "":
		return ""
	case d == 0:
		return "must be greater than 0"
	case d < b.min:
		return "must be at least " + formatDuration(b.min) + b.orZero()
	case d > b.max:
		return "must be at most " + formatDuration(b.max)
	}
	return ""
}

func (b durationBounds) orZero() string {
	if b.zero == "" {
		return ""
	}
	return " (or 0: " + b.zero + ")"
}

// countRule returns the rule a whole number n from min to max breaks, or "".
func countRule(n, min, max int64) string {
	switch {
	case n < min:
		return fmt.Sprintf("must be at least %d", min)
	case n > max:
		return fmt.Sprintf("must be at most %d", max)
	}
	return ""
}

// MaxNameLen is the longest host or member name, in bytes, that
// [CheckName] accepts.
const MaxNameLen = 255

// CheckName returns what makes s unfit for a host or member name that
// logs, metrics and terminals show: empty, longer than [MaxNameLen] bytes,
// a byte that is not UTF-8, or a control, format or line or paragraph
// separator character (with its position); "" when it is fit. pgrouted
// checks with it the names in pgrouted_names and those a topology
// provider reports.
func CheckName(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case len(s) > MaxNameLen:
		return fmt.Sprintf("it is %d bytes long, more than %d", len(s), MaxNameLen)
	}
	return badText(s)
}

// badText returns what makes s unfit for a name that logs, metrics and
// terminals show: a byte that is not UTF-8, or a control, format
// (U+202E RIGHT-TO-LEFT OVERRIDE, U+200B ZERO WIDTH SPACE) or line or
// paragraph separator character, with its position (a 1-based byte
// offset); "" when there is none.
func badText(s string) string {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			return fmt.Sprintf("byte %d (\\x%02x) is not UTF-8", i+1, s[i])
		case unicode.Is(unicode.Cc, r):
			return fmt.Sprintf("byte %d is %U, a control character", i+1, r)
		case unicode.Is(unicode.Cf, r):
			return fmt.Sprintf("byte %d is %U, a format character", i+1, r)
		case unicode.In(r, unicode.Zl, unicode.Zp):
			return fmt.Sprintf("byte %d is %U, a line or paragraph separator", i+1, r)
		}
		i += n
	}
	return ""
}

// Printable returns s with every byte that is not UTF-8 written \xHH and
// every character that [CheckName] refuses written \uHHHH (\UHHHHHHHH
// beyond U+FFFF), so that a text cannot reorder, hide or break what a
// terminal, a log line or a metric label shows around it. A text without
// such a byte or character is returned as it is, without allocating.
//
// It is the one function through which pgrouted prints a host or member
// name, and the text that quotes one: a [ParseError]'s message, the
// Connector's log lines, its Topology, `pgrouted topology` and the
// Prometheus collector's labels.
func Printable(s string) string {
	if badText(s) == "" {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b = fmt.Appendf(b, `\x%02x`, s[i])
		case unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) && r > 0xffff:
			b = fmt.Appendf(b, `\U%08x`, r)
		case unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp):
			b = fmt.Appendf(b, `\u%04x`, r)
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}
