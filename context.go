package pgrouted

import (
	"context"
	"time"
)

// This file holds the per-request options a context carries: the route
// forced (WithRoute), the staleness budget (WithMaxLag), the user's
// read-your-writes Session (WithSession) and the replica wait
// (WithReplicaWait), each with the reader the routing code uses.

type routeKey struct{}

// WithRoute returns a context that forces the route of the statements and
// transactions run with it. The same can be asked for one statement with a
// leading comment, /* pgrouted:primary */ or /* pgrouted:replica */. When
// the context and the comment disagree, Primary wins: it is never wrong to
// read from the primary.
func WithRoute(ctx context.Context, r Route) context.Context {
	return context.WithValue(ctx, routeKey{}, r)
}

func routeFrom(ctx context.Context) Route {
	if r, ok := ctx.Value(routeKey{}).(Route); ok {
		return r
	}
	return Auto
}

type maxLagKey struct{}

// WithMaxLag returns a context whose reads accept a replica only when its
// staleness is at most d (on top of pgrouted_max_lag, the smaller wins). The
// bound needs no clock synchronisation: see package lagmeter. d <= 0 accepts
// no replica: such reads run on the primary.
func WithMaxLag(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, maxLagKey{}, d)
}

// maxLagFrom is WithMaxLag's budget in ctx, if any.
func maxLagFrom(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(maxLagKey{}).(time.Duration)
	return d, ok
}

type sessionKey struct{}

// WithSession returns a context whose statements use s for read-your-writes:
// reads need s's writes on a replica (not the whole process's), and writes
// raise s's position (and the process's).
func WithSession(ctx context.Context, s *Session) context.Context {
	return context.WithValue(ctx, sessionKey{}, s)
}

func sessionFrom(ctx context.Context) *Session {
	s, _ := ctx.Value(sessionKey{}).(*Session)
	return s
}

type replicaWaitKey struct{}

// WithReplicaWait returns a context whose reads may wait up to d on a
// replica that has not yet replayed the caller's writes, for its replay to
// reach them, instead of running on the primary (it overrides
// pgrouted_replica_wait; d <= 0 turns the wait off). It only matters under
// session consistency, where reads have a position to wait for.
func WithReplicaWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, replicaWaitKey{}, d)
}

// replicaWait is the wait of a read in ctx: WithReplicaWait's, else
// pgrouted_replica_wait's.
func (c *Connector) replicaWait(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(replicaWaitKey{}).(time.Duration); ok {
		return max(d, 0)
	}
	return c.cfg.ReplicaWait
}
