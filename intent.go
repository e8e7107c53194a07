package pgrouted

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file is what a read needs of read-your-writes: the Connector's
// share of the state (readYourWrites), a statement's Intent resolved from
// its context (setIntent), and what a read's eligibility depends on beyond
// the topology (readCtx): the marks it needs, settled against the view of
// the primary, a Session's token vouched for (vouch, dropForeign).
// internal/consistency owns the state and every rule that moves it.

// readYourWrites is a Connector's share of read-your-writes: the state of
// the writes through it (a Session has its own) and the records its reads
// share.
type readYourWrites struct {
	writes consistency.Scopes
	// level is pgrouted_consistency's (setIntent).
	level consistency.Level
	// explore counts the reads that found no replica worth checking
	// (worthChecking); deferredUse is what the reads of deferred positions
	// served; index shares the reads of the primary's position among
	// global reads (and deferred ones).
	explore     consistency.Explore
	deferredUse consistency.DeferredUse
	index       *consistency.ReadIndex
	// loggedTimeline is the last timeline for which a possible loss of
	// writes was logged (reportLoss).
	loggedTimeline atomic.Uint32
	// lost is the positions of the last lost writes reported (reportLoss).
	lost lostSet
	// forged counts the Sessions' tokens whose position the primary never
	// wrote (vouch, dropForeign): Stats.ForgedTokens.
	forged atomic.Uint64
	// scope is what reads without a Session paid for the writes of the
	// whole process (noteProcessScope).
	scope processScope
}

// processScope counts the reads without a Session (reads) and those of
// them that ran on the primary, or waited, for lack of the Connector's
// writes (blocked); warned is set once the log said so.
type processScope struct {
	reads, blocked atomic.Uint64
	lastReads      atomic.Uint64 // reads at the last look (processScopeWindow)
	lastBlocked    atomic.Uint64
	warned         atomic.Bool
}

// processScopeWindow is how many reads without a Session the share of
// blocked ones is judged over.
const processScopeWindow = 1000

// noteProcessScope counts a read without a Session under session
// consistency, planned p, whose route's outcome was o: blocked when it ran on the primary
// for lack of a position (behind, catching up, a position deferred or
// unknown), or waited on its replica. When, over a window of such reads,
// more than half were blocked, the log says once why the replicas sit idle
// and what to do.
func (c *Connector) noteProcessScope(p *plan, o outcome) {
	sc := &c.rw.scope
	blocked := o.waited > 0
	if o.primary {
		switch p.reason {
		case ReasonBehind, ReasonCatchingUp, ReasonDeferred, ReasonPositionUnknown:
			blocked = true
		}
	}
	if blocked {
		sc.blocked.Add(1)
	}
	n := sc.reads.Add(1)
	if n%processScopeWindow != 0 || sc.warned.Load() {
		return
	}
	b := sc.blocked.Load()
	dr, db := n-sc.lastReads.Swap(n), b-sc.lastBlocked.Swap(b)
	if 2*db > dr && sc.warned.CompareAndSwap(false, true) {
		c.logWarn("pgrouted: most reads without a Session ran on the primary, or waited, because the replicas lacked this process's latest writes to what they read (writes of any request): give each request or user a Session of its own (pgrouted.WithSession; pgroutedhttp.Middleware; pgroutedgrpc's interceptors), so that a read needs its own writes only",
			"reads", dr, "onPrimaryOrWaited", db)
	}
}

// setIntent resolves in place the read-your-writes intent of a statement
// whose context has options o: once per statement (or transaction), in its
// plan.
func (c *Connector) setIntent(in *consistency.Intent, o *options) {
	in.Level, in.Scopes, in.Wait, in.Session = c.rw.level, &c.rw.writes, c.cfg.ReplicaWait, false
	if o.consistency != "" {
		in.Level = levelOf(c.consistencyOf(o))
	}
	in.Tracks = c.rw.level != consistency.Eventual || in.Level != consistency.Eventual
	if o.session != nil {
		in.Scopes, in.Session = &o.session.s, true
	}
	if o.hasWait {
		in.Wait = max(o.replicaWait, 0)
	}
	in.MaxLag, in.HasMaxLag = o.maxLag, o.hasMaxLag
}

// levelOf is consistency's level of a pgrouted_consistency value.
func levelOf(c Consistency) consistency.Level {
	switch c {
	case ConsistencyEventual:
		return consistency.Eventual
	case ConsistencyGlobal:
		return consistency.Global
	case ConsistencyCausal:
		return consistency.Causal
	}
	return consistency.Session
}

// readCtx is what the eligibility of a read depends on beyond the topology.
type readCtx struct {
	ctx    context.Context
	level  consistency.Level  // the plan's Intent's (not a pointer to it: the plan stays on its caller's stack)
	wait   time.Duration      // and its replica wait
	read   consistency.Read   // the marks of in.Scopes the read needs
	st     *consistency.State // the read's state: their combination
	budget lagmeter.Budget
	now    time.Time
	forced bool // forced to a replica: a saturated one still serves
	lost   bool // the caller's last write was found lost in a failover
}

// readCtx fills rc, a zero readCtx, with what the eligibility of a read
// of the relations reads with intent in (forced to a replica: forced)
// depends on in view v. With commit false (Explain) it changes nothing:
// what it learns about the caller's position stays local, and in is
// marked a dry run (nothing the plan takes needs giving back). With commit
// true a Session's position restored from a token is vouched for first
// (vouch).
func (c *Connector) readCtx(rc *readCtx, ctx context.Context, in *consistency.Intent, reads *sqlclass.Scope, forced bool, v *view, commit bool) error {
	rc.ctx, rc.level, rc.wait, rc.budget, rc.now, rc.forced = ctx, in.Level, in.Wait, c.budget, consistency.Now(), forced
	in.DryRun = !commit
	if in.HasMaxLag {
		d := in.MaxLag
		if d <= 0 {
			d = -1
		}
		rc.budget = rc.budget.Min(lagmeter.Budget{MaxTime: d})
	}
	rc.read.Begin(in.Scopes, reads.Named, reads.Keys[:reads.N])
	if in.Session {
		if every := rc.read.Every(); !every.Watermark().IsZero() {
			if sys := v.systemID(); sys != 0 && every.Watermark().SystemID != sys {
				if err := c.dropForeign(in, every, sys, commit); err != nil {
					return err
				}
				if !commit {
					rc.st = rc.read.Blank()
					return nil
				}
			}
		}
		if every := rc.read.Every(); commit && every.Origin() != consistency.Local {
			if err := c.vouch(ctx, v, in, every); err != nil {
				return err
			}
		}
	}
	rc.st, rc.lost = rc.read.Settle(v.primaryState(), rc.now, commit)
	c.reportLoss(rc.read.Effect())
	return nil
}

// vouch checks the position of every, the state of the writes of in's
// Session restored from a token, against the primary, by one rule
// (consistency.Unwritten): a position the primary had not written when it
// was seen (past its position on its history, on a later timeline, on
// another system) is forged. Unwritten by the newest position of the
// primary this process knows (knownPosition), or when it knows none yet
// (no probe of the primary has read one: a process just started, a probe
// failing under load), it asks the primary for its position (the read
// index's shared fetch: a flood of such tokens costs one query per fetch
// round trip, not one per read); unwritten by that answer too, the token
// is forged: the read plans as one without a token (Scopes.DropForged, or
// dropForeign for another system), and it counts once
// (Stats.ForgedTokens, and the Session's IgnoreForeign callback). A token
// written after the read began cannot be past a position read after that,
// nor on a later timeline. When the position cannot be had (no primary, a
// failover under way), the token stays: it costs only its own reads (they
// go to the primary), and changes nothing shared (a wait that misses it,
// noted only for positions the primary reached: waited; a failover never
// reports an unsigned one lost: Mark.Settle). The error is dropForeign's.
func (c *Connector) vouch(ctx context.Context, v *view, in *consistency.Intent, every *consistency.State) error {
	w := every.Watermark()
	if known := c.knownPosition(v); w.IsZero() || (!known.IsZero() && !consistency.Unwritten(w, known)) {
		return nil
	}
	pos, err := c.rw.index.Ask(ctx)
	if err != nil || !consistency.Unwritten(w, pos) {
		return nil
	}
	if pos.SystemID != w.SystemID {
		return c.dropForeign(in, every, pos.SystemID, true)
	}
	if in.Scopes.DropForged(every) {
		c.rw.forged.Add(1)
	}
	return nil
}

// dropForeign forgets every, the state of the writes of in's Session,
// which names another system than sys, the cluster's (when commit is
// true; for Explain the read plans without it and nothing changes), and
// counts a token once as vouch counts a forged one (Stats.ForgedTokens,
// the IgnoreForeign callback): the primary never wrote its position. A
// Session that does not ignore foreign tokens (IgnoreForeign) is an error
// wrapping ErrForeignSession instead.
func (c *Connector) dropForeign(in *consistency.Intent, every *consistency.State, sys uint64, commit bool) error {
	ok, dropped := in.Scopes.DropForeign(every, sys, commit)
	if !ok {
		return fmt.Errorf("%w: the token names system %d, this cluster is %d", ErrForeignSession, every.Watermark().SystemID, sys)
	}
	if dropped && every.Origin() != consistency.Local {
		c.rw.forged.Add(1)
	}
	return nil
}

// knownPosition is the newest position of the primary this process knows
// the primary wrote: its last probe's in v, the last write through this
// Connector's, the read index's last. A position on its history at or
// before it was written (consistency.Reached).
func (c *Connector) knownPosition(v *view) lagmeter.Watermark {
	p, _ := v.primaryState().Position()
	return consistency.Later(p, c.rw.writes.Every().Load().Watermark(), c.rw.index.Last())
}
