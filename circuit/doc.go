// Package circuit is the per-endpoint circuit breaker that takes a failing
// replica out of rotation and backs off the probes of it until it answers
// again.
//
// Nothing here does I/O, starts a goroutine or sleeps: the caller feeds a
// [Breaker] results and asks it questions, and the clock is injected
// ([Config].Now), so tests never sleep.
//
// # States
//
// A [Breaker] is [Closed] or [Open]. It is fed by two sources:
//
//   - probes, the topology prober's health checks: [Breaker.ReportProbe];
//   - the data path, queries on connections to the endpoint:
//     [Breaker.ReportFailure] when a connection failed, was refused or
//     broke, [Breaker.ReportSuccess] when a query got its answer.
//
// While closed, failures from both sources count together: [Config].Failures
// consecutive ones (default [DefaultFailures], pgrouted_circuit_failures)
// open the circuit, and any success resets the count. While open, the data
// path sends the endpoint nothing ([Breaker.Allow] is false), so data-path
// reports that still arrive come from requests routed before it opened:
// they change nothing. One successful probe closes it.
//
// There is no half-open state: the probe is the trial request, so no
// application query is risked on an endpoint that just failed.
//
// # What counts as a failure
//
// Only a failure that says the endpoint is unusable: a connection that
// cannot be established, is refused, times out or breaks. An error the
// server sends about the statement (a syntax error, a unique violation, a
// statement timeout) is not one, and neither is a standby's cancellation
// for a recovery conflict (SQLSTATE 40001, "conflict with recovery"): the
// read is retried elsewhere and the endpoint stays in rotation. [Classify]
// sorts the errors it can tell apart with the standard library alone; the
// caller decides the rest.
//
// # Probe backoff
//
// The prober asks [Breaker.ProbeBackoff] how long to wait before the next
// probe: [Config].Interval while closed; while open, Interval after the
// opening, doubled by every failed probe, capped at [Config].MaxBackoff
// (default [DefaultMaxBackoff], pgrouted_circuit_max_backoff). With the
// defaults: 1s, 2s, 4s, 8s, 16s, 30s, 30s… An optional [Config].Jitter
// shortens each open wait by a random fraction drawn from an injectable
// [Config].Rand. Data-path reports never change the backoff.
//
// # Concurrency and cost
//
// [Breaker.Allow], [Breaker.State] and [Breaker.ProbeBackoff] are one atomic
// load each, lock- and allocation-free, for the routing hot path.
// [Breaker.ReportSuccess] on a healthy endpoint is one atomic load too.
// Failures and probe results take a mutex for a few instructions.
//
// # Observing
//
// [Breaker.Snapshot] returns a JSON-friendly [Snapshot] (state, consecutive
// failures, times opened, last change, current backoff, counters), and
// [Config].OnChange is called once per state change with a [Change], in
// order and with no lock held, so the driver can log "circuit opened" and
// "circuit closed" once each.
package circuit
