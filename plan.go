package pgrouted

import (
	"context"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/topology"
)

// plan is the routing decision for one statement.
type plan struct {
	op      string
	class   sqlclass.Class
	primary bool   // run on the primary (its host is resolved at execution)
	host    int    // the replica, when !primary
	reason  string // see the Reason constants
	forced  Route
	err     error // a RouteError: the statement cannot run
}

func opOf(c sqlclass.Class) string {
	switch c {
	case sqlclass.Read:
		return OpRead
	case sqlclass.Lock:
		return OpLock
	case sqlclass.Tx:
		return OpTx
	}
	return OpWrite
}

// plan decides where a statement of classification r runs. onPrimary is
// true when the connection must stay on the primary (session state, or a
// transaction opened with SQL). advance moves the round-robin position;
// Explain does not.
func (c *Connector) plan(ctx context.Context, r sqlclass.Result, onPrimary, advance bool) plan {
	route := routeFrom(ctx)
	switch r.Hint {
	case sqlclass.HintPrimary:
		route = Primary
	case sqlclass.HintReplica:
		if route != Primary {
			route = Replica
		}
	}
	p := plan{op: opOf(r.Class), class: r.Class, forced: route, host: -1}
	if r.Class != sqlclass.Read {
		if route == Replica {
			p.err = &RouteError{Op: p.op, Reason: ReasonWriteOnReplica}
			return p
		}
		p.primary = true
		switch r.Class {
		case sqlclass.Session:
			p.reason = ReasonSessionState
		case sqlclass.Tx:
			p.reason = ReasonInTx
		default:
			p.reason = ReasonWrite
		}
		return p
	}
	switch {
	case route == Primary:
		p.primary, p.reason = true, ReasonForced
		return p
	case onPrimary && route != Replica:
		p.primary, p.reason = true, ReasonPinned
		return p
	}
	host, reason := c.pickReplica(c.top.Snapshot(), advance, -1)
	if host >= 0 {
		p.host, p.reason = host, ReasonReplica
		if route == Replica {
			p.reason = ReasonForced
		}
		return p
	}
	if route == Replica || c.cfg.Fallback == dsn.FallbackError {
		p.err = &RouteError{Op: p.op, Reason: reason}
		return p
	}
	p.primary, p.reason = true, reason
	return p
}

// decision describes a plan for Explain and RouteEvent.
func (p *plan) decision(c *Connector) Decision {
	d := Decision{Op: p.op, Primary: p.primary, Reason: p.reason}
	if p.err != nil {
		return d
	}
	s := c.top.Snapshot()
	switch {
	case !p.primary:
		d.Endpoint = s.Hosts[p.host].Name
	case s.Primary >= 0:
		d.Endpoint = s.Hosts[s.Primary].Name
	}
	return d
}

// maxStackCandidates bounds the candidates kept on the stack.
const maxStackCandidates = 32

// pickReplica chooses an eligible replica, skipping host skip (-1: none).
// It returns -1 and the reason when there is none.
func (c *Connector) pickReplica(s *topology.Snapshot, advance bool, skip int) (int, string) {
	var buf [maxStackCandidates]int
	cand := buf[:0]
	wm, known := c.watermark(s)
	standbys, healthy := 0, 0
	now := time.Now()
	for i := range s.Hosts {
		h := &s.Hosts[i]
		if h.Role != topology.RoleStandby || i == s.Primary {
			continue
		}
		standbys++
		if !h.Healthy || i == skip {
			continue
		}
		healthy++
		if !known || (wm != 0 && h.ReplayLSN < wm) || !c.withinLag(s, h, now) {
			continue
		}
		cand = append(cand, i)
	}
	if len(cand) == 0 {
		switch {
		case standbys == 0:
			return -1, ReasonNoReplicas
		case healthy == 0:
			return -1, ReasonUnhealthy
		case !known:
			return -1, ReasonPositionUnknown
		}
		return -1, ReasonBehind
	}
	var k uint64
	if advance {
		k = c.rr.Add(1) - 1
	} else {
		k = c.rr.Load()
	}
	return cand[k%uint64(len(cand))], ""
}

// withinLag applies pgrouted_max_lag to a standby. A byte budget compares
// the primary's last probed insert position with the standby's replay
// position. A time budget uses the newest primary probe whose position the
// standby has replayed: the standby holds every commit acknowledged before
// that probe was sent, so its staleness is at most the time since. With
// only the latest primary sample known here, a standby that has not
// replayed it is treated as too stale: conservative, never optimistic.
// Unknown positions are never within a budget.
func (c *Connector) withinLag(s *topology.Snapshot, h *topology.HostState, now time.Time) bool {
	budget := c.cfg.MaxLag
	if budget.IsNone() {
		return true
	}
	if s.Primary < 0 || h.ReplayLSN == 0 {
		return false
	}
	p := &s.Hosts[s.Primary]
	if p.InsertLSN == 0 {
		return false
	}
	if n, ok := budget.Bytes(); ok {
		return int64(p.InsertLSN.Sub(h.ReplayLSN)) <= n
	}
	d, _ := budget.Time()
	return h.ReplayLSN >= p.InsertLSN && now.Sub(p.LastSuccess) <= d
}
