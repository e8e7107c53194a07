package pgrouted

import (
	"context"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
)

// This file holds the per-request options a context carries: the route
// forced (WithRoute), the staleness budget (WithMaxLag), the user's
// read-your-writes Session (WithSession) and the replica wait
// (WithReplicaWait) and the consistency (WithConsistency). A statement
// reads them once, into its plan: the route, and the read-your-writes
// Intent (Connector.setIntent, intent.go).
//
// They are kept together in one options value under one context key: each
// With* copies the options it finds and changes its own field, so the
// innermost setting of each option wins, as with one key per option, and
// a statement's decision reads them all with one walk up the context
// chain (optionsFrom) instead of one walk per option.

// optionsKey is the context key of a request's options.
type optionsKey struct{}

// options are the per-request options of a context.
type options struct {
	route       Route
	session     *Session
	maxLag      time.Duration
	replicaWait time.Duration
	consistency Consistency
	hasMaxLag   bool // WithMaxLag was used
	hasWait     bool // WithReplicaWait was used
}

// noOptions are the options of a context without any.
var noOptions = &options{route: Auto}

// optionsFrom returns the options of ctx; the caller must not change them.
func optionsFrom(ctx context.Context) *options {
	if o, ok := ctx.Value(optionsKey{}).(*options); ok {
		return o
	}
	return noOptions
}

// withOption returns a context with ctx's options changed by set.
func withOption(ctx context.Context, set func(*options)) context.Context {
	o := *optionsFrom(ctx)
	set(&o)
	return context.WithValue(ctx, optionsKey{}, &o)
}

// WithRoute returns a context that forces the route of the statements and
// transactions run with it. The same can be asked for one statement with a
// leading comment, /* pgrouted:primary */ or /* pgrouted:replica */. When
// the context and the comment disagree, Primary wins: it is never wrong to
// read from the primary.
func WithRoute(ctx context.Context, r Route) context.Context {
	return withOption(ctx, func(o *options) { o.route = r })
}

// WithMaxLag returns a context whose reads accept a replica only when its
// staleness is at most d (on top of pgrouted_max_lag, the smaller wins). The
// bound needs no clock synchronisation: see package lagmeter. d <= 0 accepts
// no replica: such reads run on the primary.
func WithMaxLag(ctx context.Context, d time.Duration) context.Context {
	return withOption(ctx, func(o *options) { o.maxLag, o.hasMaxLag = d, true })
}

// WithSession returns a context whose statements use s for read-your-writes:
// reads need s's writes on a replica (not the whole process's), and writes
// raise s's position (and the process's).
func WithSession(ctx context.Context, s *Session) context.Context {
	return withOption(ctx, func(o *options) { o.session = s })
}

// WithReplicaWait returns a context whose reads may wait up to d on a
// replica that has not yet replayed the caller's writes, for its replay to
// reach them, instead of running on the primary (it overrides
// pgrouted_replica_wait; d <= 0 turns the wait off). It only matters under
// session and global consistency, where reads have a position to wait for.
func WithReplicaWait(ctx context.Context, d time.Duration) context.Context {
	return withOption(ctx, func(o *options) { o.replicaWait, o.hasWait = d, true })
}

// WithConsistency returns a context whose statements use consistency c
// instead of pgrouted_consistency: ConsistencyGlobal for one request in a
// process whose default is session, ConsistencySession in one whose
// default is global, ConsistencyCausal for the requests of a user who
// must never see the data go back. A value that is none of the four
// constants is ignored. Writes made with a context selecting session,
// causal or global raise the read-your-writes positions even under an
// eventual default.
func WithConsistency(ctx context.Context, c Consistency) context.Context {
	return withOption(ctx, func(o *options) { o.consistency = c })
}

// consistencyOf is the consistency of the statements of a context with
// options o.
func (c *Connector) consistencyOf(o *options) Consistency {
	switch o.consistency {
	case ConsistencySession, ConsistencyEventual, ConsistencyGlobal, ConsistencyCausal:
		return o.consistency
	}
	return c.cfg.Consistency
}

// Consistency is what a read on a replica must see: pgrouted_consistency,
// or WithConsistency for one request.
type Consistency = dsn.Consistency

// The consistencies, for [WithConsistency].
const (
	// ConsistencySession: a read sees the writes of its Session (see
	// [WithSession]), or else of its Connector, made before it.
	ConsistencySession = dsn.ConsistencySession
	// ConsistencyEventual: a read may run on any replica inside the
	// staleness budget.
	ConsistencyEventual = dsn.ConsistencyEventual
	// ConsistencyGlobal: a read sees every transaction committed on the
	// primary before it began, by any client; a Session in the context is
	// a floor. After the read begins, the primary's WAL position is read
	// (shared among concurrent reads); the read then needs that position
	// on its replica, as a session read needs its Session's.
	ConsistencyGlobal = dsn.ConsistencyGlobal
	// ConsistencyCausal: read-your-writes, monotonic reads and
	// writes-follow-reads within the scope: the context's Session, or
	// else its Connector's reads and writes, by relation. After each
	// read, an upper bound of the WAL position it saw is read in the same
	// round trip (on a replica, the later of its receive and replay
	// positions; on the primary, its insert position), and the scope's
	// next reads need a replica that has replayed it, as they need its
	// writes. A Session's token carries it to another process. See
	// docs/consistency.md.
	ConsistencyCausal = dsn.ConsistencyCausal
)
