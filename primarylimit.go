package pgrouted

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

// This file is the limit on fallback reads (pgrouted_primary_read_limit):
// the most reads the primary runs at once for replicas that cannot serve
// them. When replicas fall behind the staleness budget (a lag storm), every
// read would otherwise fall back to the primary at once, just when it is
// busiest: the limit keeps the primary's share of such reads bounded.
//
// A fallback read is an autocommit read planned for a replica that runs on
// the primary because no replica could serve it: the reasons no-replicas,
// unhealthy, behind, saturated, position-unknown, catching-up,
// position-deferred and replica-failed. Reads sent to the primary for
// anything else (a forced route, a pin, a transaction, a function the
// catalog sends there, a statement a replica refused) do not count and are
// never held back: the limit is about the replicas' load landing on the
// primary, not about what the primary must run anyway. Read-only
// transactions and Prepare's describe are not limited either.
//
// A fallback read takes a slot for its run on the primary, until its
// result (or its first row) is available; it gives it back then. Past the
// limit it waits, within its replica wait (pgrouted_replica_wait,
// WithReplicaWait; less what it waited on a replica already) and its
// context, for a slot or for a replica able to serve it (planned again
// every quarter of a probe interval); then it fails with a *RouteError of
// reason primary-busy ([ErrPrimaryBusy]), which is safe to retry: nothing
// was sent. A read is never served by a replica beyond its staleness
// budget: a replica it moves to is planned with the same rules.

// primaryReads counts a Connector's fallback reads running on the
// primary, against the limit.
type primaryReads struct {
	limit int64 // 0: no limit
	n     atomic.Int64

	// waiting counts the reads waiting for a slot; freed is closed (and
	// replaced) when a slot is given back while some wait.
	waiting atomic.Int64
	mu      sync.Mutex
	freed   chan struct{}

	waits atomic.Uint64 // reads that waited for a slot or a replica
	peak  atomic.Int64  // the most fallback reads seen at once on the primary
}

// take takes a slot and reports whether there was one.
func (l *primaryReads) take() bool {
	for {
		n := l.n.Load()
		if n >= l.limit {
			return false
		}
		if l.n.CompareAndSwap(n, n+1) {
			if p := l.peak.Load(); n+1 > p {
				l.peak.CompareAndSwap(p, n+1)
			}
			return true
		}
	}
}

// give gives a slot back, waking the reads that wait for one.
func (l *primaryReads) give() {
	l.n.Add(-1)
	if l.waiting.Load() == 0 {
		return
	}
	l.mu.Lock()
	if l.freed != nil {
		close(l.freed)
		l.freed = nil
	}
	l.mu.Unlock()
}

// freedCh is the channel closed when the next slot is given back.
func (l *primaryReads) freedCh() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.freed == nil {
		l.freed = make(chan struct{})
	}
	return l.freed
}

// isFallback reports whether p is a fallback read: an autocommit read
// planned for a replica that the primary runs because no replica could.
func (p *plan) isFallback() bool {
	if p.op != OpRead || !p.primary {
		return false
	}
	switch p.reason {
	case ReasonNoReplicas, ReasonUnhealthy, ReasonBehind, ReasonSaturated, ReasonPositionUnknown,
		ReasonCatchingUp, ReasonDeferred, ReasonReplicaFailed:
		return true
	}
	return false
}

// limitedOnPrimary runs cl, a fallback read (p.isFallback), on the primary
// within pgrouted_primary_read_limit: at once when a slot is free; else it
// waits for one, or for a replica that can serve it (which then runs it),
// within the read's wait budget (less waited, what it waited on replicas
// already); then fails with ReasonPrimaryBusy. Its outcome joins the
// paths' that ran it.
func (cn *conn) limitedOnPrimary(ctx context.Context, p *plan, r *sqlclass.Result, cl *call, waited time.Duration) (o outcome, _ error) {
	l := &cn.c.reads
	if l.take() {
		defer l.give()
		return cn.runOnPrimary(ctx, p, r, cl)
	}
	budget := p.in.Wait - waited
	if budget <= 0 {
		p.reason = ReasonPrimaryBusy
		return o, &RouteError{Op: p.op, Reason: ReasonPrimaryBusy}
	}
	l.waits.Add(1)
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	deadline := time.NewTimer(budget)
	defer deadline.Stop()
	every := max(cn.c.cfg.ProbeInterval/4, time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		freed := l.freedCh()
		if l.take() {
			defer l.give()
			next, err := cn.runOnPrimary(ctx, p, r, cl)
			return o.then(next), err
		}
		select {
		case <-freed:
			continue
		case <-tick.C:
			// A replica may serve it now.
			ro, done, err := cn.replicaNow(ctx, p, cl)
			o = o.then(ro)
			switch {
			case done:
				return o, err
			case !p.isFallback():
				// The replica refused it (it writes): the primary runs it.
				next, err := cn.runOnPrimary(ctx, p, r, cl)
				return o.then(next), err
			}
		case <-deadline.C:
			p.reason = ReasonPrimaryBusy
			return o, &RouteError{Op: p.op, Reason: ReasonPrimaryBusy}
		case <-ctx.Done():
			p.reason = ReasonPrimaryBusy
			return o, &RouteError{Op: p.op, Reason: ReasonPrimaryBusy, cause: ctx.Err()}
		}
	}
}

// replicaNow runs cl, a fallback read waiting for the primary (planned p),
// on a replica when one can serve it now: p becomes that plan, and done
// and the outcome are onReplicas'. When none can, p stays as it was.
func (cn *conn) replicaNow(ctx context.Context, p *plan, cl *call) (_ outcome, done bool, _ error) {
	q := *p
	q.primary, q.replica, q.err, q.reason = false, target{}, nil, ""
	cn.c.planReplica(ctx, &q, true)
	if q.primary || q.err != nil {
		return outcome{}, false, nil
	}
	*p = q
	return cn.onReplicas(ctx, p, cl)
}
