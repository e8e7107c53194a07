package pgrouted

import (
	"context"
	"errors"
	"time"
)

// Route forces where statements run; see [WithRoute].
type Route uint8

const (
	// Auto lets pgrouted decide: reads in autocommit mode on an eligible
	// replica, everything else on the primary.
	Auto Route = iota
	// Primary runs every statement on the primary.
	Primary
	// Replica runs reads on an eligible replica with no fallback to the
	// primary: when no replica is eligible the statement fails with
	// [ErrNoReplica]. A write, lock, session-state statement or read-write
	// transaction forced to a replica fails with [ErrWriteOnReplica] before
	// anything is sent.
	Replica
)

// String returns "auto", "primary" or "replica".
func (r Route) String() string {
	switch r {
	case Primary:
		return "primary"
	case Replica:
		return "replica"
	}
	return "auto"
}

// Ops of a [RouteEvent] and a [Decision].
const (
	OpRead  = "read"  // a read that may run on a replica
	OpWrite = "write" // anything that must run on the primary: writes, DDL, session state, unknown statements
	OpTx    = "tx"    // a transaction, or a transaction-control statement
	OpLock  = "lock"  // a read taking row locks (FOR UPDATE, ...) or LOCK
)

// Reason says why a statement ran where it did, or could not run: the
// Reason of a [Decision], a [RouteEvent] and a [RouteError]. Its values are
// the Reason constants; it is a string, and marshals as one.
type Reason string

// Reasons of a [Decision], a [RouteEvent] and a [RouteError].
//
// The first five say why no replica could serve a read; the read then ran on
// the primary (pgrouted_fallback=primary) or failed with [ErrNoReplica].
const (
	ReasonNoReplicas      Reason = "no-replicas"       // no host is a standby
	ReasonUnhealthy       Reason = "unhealthy"         // every standby failed its last probe
	ReasonBehind          Reason = "behind"            // every healthy standby lacks the caller's writes or is over the staleness budget
	ReasonSaturated       Reason = "saturated"         // every eligible standby's pool is exhausted
	ReasonPositionUnknown Reason = "position-unknown"  // the caller's last write position is unknown: only the primary surely has it
	ReasonCatchingUp      Reason = "catching-up"       // the caller's last write is so recent that the replicas which may hold it seldom do yet (their position checks at that age mostly fail): the primary, without a check
	ReasonDeferred        Reason = "position-deferred" // the caller's last write left its position to be read when needed (no Session), and lately such reads served too few reads to be worth a statement on the primary: the primary, without reading it

	ReasonReplica        Reason = "replica"          // an eligible replica serves the read
	ReasonCheck          Reason = "replica-check"    // a replica that may hold the caller's writes serves the read after checking its replay position
	ReasonWrite          Reason = "write"            // the statement is not a read
	ReasonSessionState   Reason = "session-state"    // the statement changes session state: the connection stays on the primary
	ReasonPinned         Reason = "pinned"           // an earlier statement changed session state on this connection
	ReasonInTx           Reason = "in-tx"            // the statement runs inside a transaction
	ReasonForced         Reason = "forced"           // WithRoute or a routing comment chose the endpoint, or the read is of a migration tool's version table or the system catalogs (docs/migrations.md)
	ReasonReadOnlyTx     Reason = "read-only-tx"     // a read-only transaction runs on a replica
	ReasonSerializableRO Reason = "serializable"     // a SERIALIZABLE transaction cannot run on a hot standby
	ReasonRetry25006     Reason = "read-only-retry"  // the replica refused the statement (SQLSTATE 25006): it ran again on the primary
	ReasonWriteOnReplica Reason = "write-on-replica" // a write, lock or read-write transaction was forced to a replica
	ReasonNoPrimary      Reason = "no-primary"       // no primary was known within pgrouted_write_timeout
	ReasonReplicaFailed  Reason = "replica-failed"   // the replica's connection failed before any row: the read ran elsewhere
	ReasonPrimaryLost    Reason = "primary-lost"     // the primary stopped being one (another was confirmed, or its lease ran out) before it answered the statement, which may have run there: ErrOutcomeUnknown
	ReasonPrimaryBusy    Reason = "primary-busy"     // no replica could serve the read, and the primary ran pgrouted_primary_read_limit such reads already until the read's wait ran out: ErrPrimaryBusy, nothing was sent

	ReasonVolatileFunction Reason = "volatile-function" // the statement calls a VOLATILE user function (Decision.Function): it may write or change the session, so the primary, and the connection stays there
	ReasonUnknownFunction  Reason = "unknown-function"  // the statement calls a function the catalog does not know yet (Decision.Function): the primary, and the connection stays there
	ReasonWriteFunction    Reason = "write-function"    // the statement calls a function listed in pgrouted_write_functions (Decision.Function)
	ReasonRefused          Reason = "refused-before"    // a replica refused the same statement before (SQLSTATE 25006): the primary, and the connection stays there
	ReasonHiddenCode       Reason = "hidden-code"       // the statement runs user code its text does not show as a call, and that may write or change the session (Decision.Function names the object: an aggregate, operator, type or domain, view, table with a policy, or a function in attribute notation; docs/functions.md): the primary, and the connection stays there
)

// Sentinel errors, for errors.Is on a [*RouteError].
var (
	// ErrNoReplica: no replica could serve a read that was forced to a
	// replica or that may not fall back to the primary
	// (pgrouted_fallback=error). The RouteError's Reason says why.
	ErrNoReplica = errors.New("pgrouted: no eligible replica")
	// ErrWriteOnReplica: a statement or transaction that must run on the
	// primary was forced to a replica. Nothing was sent.
	ErrWriteOnReplica = errors.New("pgrouted: write forced to a replica")
	// ErrNoPrimary: no primary was known within pgrouted_write_timeout
	// (during a failover, or when the primary's lease ran out).
	ErrNoPrimary = errors.New("pgrouted: no primary")
	// ErrOutcomeUnknown: the statement was sent to the primary, and the
	// topology confirmed another primary (or the host's lease ran out)
	// before it answered. pgrouted stopped waiting for it: it may have run
	// there or not, which nobody can tell until that host is back. It is
	// never run again by pgrouted; an application that retries must know
	// the statement is idempotent, or check. The RouteError's Reason is
	// ReasonPrimaryLost, and it wraps the connection's error too.
	ErrOutcomeUnknown = errors.New("pgrouted: outcome unknown")
	// ErrPrimaryBusy: no replica could serve a read, and the primary was
	// running pgrouted_primary_read_limit reads that no replica could
	// serve, until the read's wait (pgrouted_replica_wait,
	// WithReplicaWait) or its context ran out. Nothing was sent: it is
	// safe to retry, later. The RouteError's Reason is ReasonPrimaryBusy.
	ErrPrimaryBusy = errors.New("pgrouted: primary busy with fallback reads")
)

// RouteError is a routing failure. The statement had no effect: it was
// sent to no server, or only to standbys, which cannot write (a read whose
// replica failed, a statement a replica refused with SQLSTATE 25006);
// except with Reason ReasonPrimaryLost ([ErrOutcomeUnknown]), where it was
// sent to a primary that stopped being one before it answered.
// [RouteError.SafeToRetry] says which, to pgconn.SafeToRetry.
type RouteError struct {
	// Op is the kind of statement: OpRead, OpWrite, OpTx or OpLock.
	Op string
	// Reason is one of the Reason constants.
	Reason Reason

	cause error // the last connection error, when there was one
}

// Error implements error.
func (e *RouteError) Error() string {
	msg := "pgrouted: " + e.Op + ": " + e.sentinel().Error()[len("pgrouted: "):] + " (" + string(e.Reason) + ")"
	if e.Reason == ReasonPrimaryLost {
		msg += ": the primary was replaced or lost its lease before it answered; the statement may have run there"
	}
	if e.cause != nil {
		msg += ": last error: " + e.cause.Error()
	}
	return msg
}

// Unwrap returns the sentinel matching Reason ([ErrWriteOnReplica],
// [ErrNoPrimary], [ErrOutcomeUnknown], [ErrPrimaryBusy], or [ErrNoReplica]) and the last connection error, if
// any, so that errors.Is and errors.As see both.
func (e *RouteError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.sentinel(), e.cause}
	}
	return []error{e.sentinel()}
}

// SafeToRetry reports whether running the statement again cannot repeat
// an effect of this attempt, for pgconn.SafeToRetry (which finds it through
// any wrapping). It is true for every Reason but ReasonPrimaryLost: the
// statement was sent to no server ([ErrNoReplica] before any replica was
// tried, [ErrWriteOnReplica], [ErrNoPrimary], [ErrPrimaryBusy]), or only to standbys, which
// cannot write: a read whose replica failed (ReasonUnhealthy with the
// replica's error) or a statement a standby refused (ReasonRetry25006), or
// a read whose primary session broke before the wait for a primary ran
// out. It is false for [ErrOutcomeUnknown] (ReasonPrimaryLost): the
// statement may have run on the old primary, whatever the connection's
// error says. True does not mean that a retry will succeed: a write forced
// to a replica fails again.
func (e *RouteError) SafeToRetry() bool {
	return e.Reason != ReasonPrimaryLost
}

func (e *RouteError) sentinel() error {
	switch e.Reason {
	case ReasonWriteOnReplica:
		return ErrWriteOnReplica
	case ReasonNoPrimary:
		return ErrNoPrimary
	case ReasonPrimaryLost:
		return ErrOutcomeUnknown
	case ReasonPrimaryBusy:
		return ErrPrimaryBusy
	}
	return ErrNoReplica
}

// Decision is where a statement runs and why.
type Decision struct {
	// Op is the kind of statement.
	Op string `json:"op"`
	// Endpoint is the name of the host that runs it (a host name from the
	// DSN or pgrouted_names), empty when it cannot run.
	Endpoint string `json:"endpoint"`
	// Primary is true when Endpoint is the primary.
	Primary bool `json:"primary"`
	// Reason says why; see the Reason constants. When a read falls back
	// to the primary, Reason says why no replica could serve it.
	Reason Reason `json:"reason"`
	// Function names the function that decided, when Reason is
	// ReasonVolatileFunction, ReasonUnknownFunction or ReasonWriteFunction,
	// as the statement writes it (without its schema).
	Function string `json:"function,omitempty"`
}

// RouteEvent is reported to Config.OnRoute after every statement that
// pgrouted ran (or failed to route).
type RouteEvent struct {
	Decision
	// Context is the statement's context: the one the application passed
	// to QueryContext, ExecContext or BeginTx (for COMMIT and ROLLBACK,
	// which take none, BeginTx's). A hook finds in it the caller's span
	// (trace.SpanFromContext, see package otelroute) and any other
	// request-scoped value. It is never nil in an event pgrouted reports;
	// a hook that also receives events built elsewhere treats nil as
	// context.Background(). It belongs to the call: a hook that stores
	// events keeps their contexts, and what those hold, alive.
	Context context.Context `json:"-"`
	// Query is the statement's text.
	Query string
	// Duration is how long the statement took until its result (or first
	// row) was available.
	Duration time.Duration
	// Err is the statement's error, if any.
	Err error
	// Retried is true when the statement ran again elsewhere after a
	// replica failed or refused it.
	Retried bool
	// Waited is how long the read waited on its replica for the replica's
	// replay to reach the caller's position (pgrouted_replica_wait,
	// WithReplicaWait), one round trip included; 0 when it did not wait.
	// A wait that timed out is counted too: the read then ran where it
	// would have without one (Reason says where and why).
	Waited time.Duration
	// WriteLost is true on the read that found the caller's last write
	// (the connector's, or its Session's) missing from the new primary's
	// history after a failover: the old primary acknowledged it, and it was
	// lost with it. From then on read-your-writes covers what survived.
	// See Stats.LostWrites.
	WriteLost bool
	// Global is true when the read needed the primary's WAL position read
	// after it began (global consistency, see WithConsistency), and asked
	// for it: it ran on a replica that had replayed that position, or on
	// the primary. GlobalWait is how long it waited for the position (one
	// primary round trip, or two when a read of it was already in flight);
	// when the position could not be read (no primary, an error), the read
	// ran where a read of unknown position runs (Reason
	// ReasonPositionUnknown).
	Global     bool
	GlobalWait time.Duration
	// Causal is true for a read under causal consistency (see
	// ConsistencyCausal) outside a transaction begun with BeginTx (which
	// records what it saw once it ends): once it ended, its scope (its Session, or the
	// Connector's relations it read) recorded an upper bound of the WAL
	// position it saw, read in its own round trip, which the scope's next
	// reads need.
	Causal bool
}

func asRouteError(err error, re **RouteError) bool { return errors.As(err, re) }
