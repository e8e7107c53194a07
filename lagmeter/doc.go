// Package lagmeter decides, without any I/O, whether a replica is fresh
// enough to serve a read: WAL position arithmetic, a history of the
// primary's position, byte lag, a staleness bound that needs no clock
// synchronisation, budgets, and read-your-writes watermarks.
//
// Nothing here talks to a database or reads the clock: the caller (the
// topology tracker and the driver) feeds it probe results and passes now to
// every decision, so tests never sleep.
//
// # Positions
//
// An [LSN] is a byte offset into the WAL, parsed from and printed as
// PostgreSQL's "16/B374D848"; 0 (0/0) means unknown everywhere in this
// package. [ByteLag] is the WAL a replica lacks to reach a primary position.
//
// # The primary's history and the staleness bound
//
// A [History] keeps the last [DefaultCapacity] (or [NewHistory]'s capacity)
// [Sample]s of the primary: the local send time of a probe and the
// pg_current_wal_insert_lsn() it read. [History.StalenessBound] turns a
// replica's replay position R into an upper bound on its staleness:
//
//	find the newest sample with LSN <= R;  staleness now <= now - its send time
//
// Why it holds: every commit acknowledged before the probe was sent was
// inserted before the probe read the insert position, so its commit record
// ends at or before the sample's LSN; a replica that replayed past that LSN
// shows all of those commits, and whatever it lacks was acknowledged after
// the send time. Both times are readings of the same local monotonic clock,
// so no clock is compared across machines. The bound only grows while no
// newer sample qualifies: when the primary's probes stop, a gate built on it
// closes by itself.
//
// An idle primary's position does not move, so samples repeat the same LSN
// and a caught-up replica (R equal to it) qualifies on the newest one: its
// bound stays about one probe interval for as long as probes continue. One
// trap: when the last record ends exactly at a page boundary (always the
// case after pg_switch_wal()), pg_current_wal_insert_lsn() points past the
// next page's header while the replica reports the boundary. [History]
// converts every sample with [WALLayout.RecordEnd] for the cluster's
// [WALLayout], given in its [Origin]; with the zero (unknown) layout it does
// not, which is safe but leaves such a replica ineligible until the next
// write.
//
// A second proof needs no position. The insert position also counts WAL
// that PostgreSQL has not flushed and will not until the next commit or
// its background writer's next standby snapshot (up to 15 s later): the
// records of an open transaction, or of a transaction without an ID that
// rolled back after writing hint bits or pruning a page. No standby can
// replay it, so on an otherwise idle primary no replica reaches the newest
// samples, and a history started then has no older one. [Sample].Xmax,
// the primary's snapshot xmax read after the send time, is above the ID
// of every transaction acknowledged before it; a replica whose snapshot
// xmin ([Position].Xmin) is at or above it has replayed all of their
// commits, so [History.Lag] bounds its staleness by now minus that send
// time too, whatever its position: the newest sample whose Xmax the xmin
// reached (found by binary search, since Xmax never goes back; a sample
// that read none carries the last one known, with that sample's send
// time).
//
// The conservative cases, all of which yield "no bound": replay position 0,
// an empty history, and a replica behind every sample kept. A bounded
// history forgets old samples, which can only make a replica unknown, never
// wrongly fresh; choose a capacity above the largest time budget divided by
// the probe interval. Samples must come in send-time order with
// non-decreasing positions from one primary: [History.Append] refuses the
// others, and the caller must [History.Reset] the history when the primary
// changes (another host, a new timeline, another system), because positions
// of different WAL histories do not compare.
//
// # Budgets and eligibility
//
// [History.Lag] measures a replica's [Position] into a [Lag] (bytes behind
// the newest sample, time bound), after checking that the replica follows
// the history's primary (same system identifier and timeline, as far as
// the [Origin] knows them). A [Budget] limits time, bytes or both; zero
// means no limit, and [Budget.Min] combines the connector's budget with a
// per-request one. [Budget.Allows] and [History.Check], the per-read check,
// answer with a [Reason]: [ReasonBehind] when a limited measure is known to
// exceed its limit, [ReasonPositionUnknown] when it is not known. Unknown
// (never probed, probe failed, replay 0, promoted out of recovery, another
// timeline) is never eligible while any budget is set.
//
// # Read-your-writes
//
// A [Watermark] is (system identifier, timeline, LSN): the position a
// replica must have replayed to show a session's writes.
// [Watermark.ReachedBy] compares it with a replica's [Position], across
// timelines only when the caller knows where the replica's history left the
// watermark's timeline, and reports a write that is not in that history
// ([ReasonDiverged]) so the driver can say so instead of waiting forever.
// Its text form, "v1:<system id>:<timeline>:<LSN>" in upper-case hexadecimal
// ([Watermark.MarshalText]), is versioned, strictly validated and has one
// spelling per value, for session tokens carried in cookies or headers.
//
// # Concurrency
//
// A [History] has one writer (the topology tracker) and many readers (the
// routing hot path). Readers load one atomic pointer to an immutable state
// and binary-search it: no lock, no retry, no allocation
// ([History.StalenessBound], [History.Lag] and [History.Check] allocate
// nothing). Writers are serialised by a mutex. Every other type is a value.
package lagmeter
