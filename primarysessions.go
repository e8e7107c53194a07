package pgrouted

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/dsn"
)

// This file is the primary's sessions as one pool: pgxpool's pool_ keys
// (dsn.Config.PrimaryMaxConns and the fields after it) hold for every
// session a connection opens on the primary, whichever face opened it: a
// database/sql connection (conn) or a Pool's. Each connection keeps its
// session (primary.go); primarySessions is the one owner of the rules
// about how many, how old and how long idle, and of the goroutine that
// checks the idle ones.
//
// A connection is parked while nobody uses it: from the moment it is put
// back (IsValid, which database/sql and a Pool call then) until it is taken
// again (ResetSession, which they call then) or closed. While it is
// parked, its session fields (primary, host, epoch, term, born, expires)
// belong to primarySessions, under mu: a statement that needs a session
// when pool_max_conns are open may take its session over (reclaim: the
// session moves to the statement's connection, which saves a connect and
// never has more sessions open than the cap, not even while one closes;
// the parked connection stays and opens a new one when it needs it), and
// the health check may close it. A session with session state (the connection is
// pinned) or inside a transaction is never reclaimed nor closed for
// idleness: past its lifetime its connection is dropped instead
// (IsValid false, ResetSession driver.ErrBadConn), as database/sql's
// SetConnMaxLifetime drops a connection.

// primarySessions counts and checks a Connector's primary sessions.
type primarySessions struct {
	c *Connector

	// The settings (dsn.Config.Primary*); 0 is none or no cap.
	max, min, minIdle        int32
	lifetime, jitter, idle   time.Duration
	period                   time.Duration
	maintain                 bool // the health check runs (a setting asks for it)
	ctx                      context.Context
	cancel                   context.CancelFunc
	kick                     chan struct{} // a check now (a Pool to keep warm)
	done                     sync.WaitGroup
	acquires, acquireNanos   atomic.Int64 // every time a statement got its session
	emptyAcquires, emptyWait atomic.Int64 // the ones that had to open one, and how long that took

	// idleFree counts the parked connections holding a session when
	// nothing is maintained (!maintain): then parking is only this count,
	// no lock and no list (see park).
	idleFree atomic.Int32

	mu           sync.Mutex
	open         int32         // sessions open or being opened: the slots taken
	constructing int32         // sessions being opened
	parked       *conn         // the parked connections, a list through parkNext
	waiting      int           // statements waiting for a slot
	freed        chan struct{} // closed (and replaced) when a slot may be had
	// keep, set by a Pool, keeps a connection the health check opened a
	// session on idle in the Pool; false: it was not kept.
	keep func(*conn) bool
	// The figures counted under mu (info).
	canceled, newConns, lifetimeCloses, idleCloses int64
}

// init sets ps up from the Connector's configuration.
func (ps *primarySessions) init(c *Connector) {
	cfg := &c.cfg.Config
	ps.c = c
	ps.max, ps.min, ps.minIdle = cfg.PrimaryMaxConns, cfg.PrimaryMinConns, cfg.PrimaryMinIdleConns
	ps.lifetime, ps.jitter, ps.idle = cfg.PrimaryMaxConnLifetime, cfg.PrimaryMaxConnLifetimeJitter, cfg.PrimaryMaxConnIdleTime
	ps.period = cfg.PrimaryHealthCheckPeriod
	// Any pool_ key away from its default asks for the check; without
	// one, the primary's sessions are as they were before the keys.
	ps.maintain = ps.max > 0 || ps.lifetime > 0 || ps.idle > 0 || ps.min > 0 || ps.minIdle > 0 ||
		ps.jitter > 0 || ps.period != dsn.DefaultHealthCheckPeriod
	ps.freed = make(chan struct{})
	ps.kick = make(chan struct{}, 1)
}

// start starts the health check when a setting asks for one.
func (ps *primarySessions) start() {
	if !ps.maintain {
		return
	}
	ps.ctx, ps.cancel = context.WithCancel(context.Background())
	ps.done.Add(1)
	go ps.run()
}

// stop stops the health check and waits for it.
func (ps *primarySessions) stop() {
	if ps.cancel != nil {
		ps.cancel()
		ps.done.Wait()
	}
}

// keepIn makes the health check keep the sessions it opens in the
// connections keep takes (a Pool's idle ones), and checks now.
func (ps *primarySessions) keepIn(keep func(*conn) bool) {
	ps.mu.Lock()
	ps.keep = keep
	ps.mu.Unlock()
	select {
	case ps.kick <- struct{}{}:
	default:
	}
}

// run checks the idle sessions every period until stop.
func (ps *primarySessions) run() {
	defer ps.done.Done()
	t := time.NewTicker(ps.period)
	defer t.Stop()
	for {
		ps.check()
		select {
		case <-ps.ctx.Done():
			return
		case <-t.C:
		case <-ps.kick:
		}
	}
}

// errPrimaryFull is the error of a statement that found pool_max_conns
// primary sessions open, none of them reclaimable, until its wait ended.
// Nothing was sent: pgconn.SafeToRetry says so.
type errPrimaryFull struct {
	max  int32
	wait time.Duration
}

func (e *errPrimaryFull) Error() string {
	wait := "pgrouted_write_timeout=0: no wait"
	if e.wait > 0 {
		wait = "pgrouted_write_timeout, " + e.wait.String()
	}
	return fmt.Sprintf("pgrouted: all %d primary sessions are in use (pool_max_conns=%d) and none was free within the wait (%s): the idle ones hold session state or a transaction", e.max, e.max, wait)
}

// SafeToRetry reports that nothing was sent.
func (e *errPrimaryFull) SafeToRetry() bool { return true }

// acquire gets cn a session under pool_max_conns, for the term t: a free
// slot for the session cn is about to open (then it reports false, and the
// caller reports the outcome with opened or notOpened); or, when none is
// free, the session of a parked connection that holds no session state,
// which moves to cn, slot and all (then it reports true: cn holds a
// session); else it waits for either until ctx ends or deadline. A parked
// connection's session that broke, or whose term ended, is closed instead
// and its slot passes to cn. A warming connection (the health check's)
// neither waits nor takes a session.
func (ps *primarySessions) acquire(ctx context.Context, cn *conn, t *term, deadline time.Time) (took bool, _ error) {
	ps.mu.Lock()
	for {
		if ps.max == 0 || ps.open < ps.max {
			ps.open++
			ps.constructing++
			ps.mu.Unlock()
			return false, nil
		}
		if cn.warming {
			ps.mu.Unlock()
			return false, errNoRoom
		}
		if v := ps.reclaimableLocked(); v != nil {
			if !v.sessionGone() && v.term == t {
				cn.primary, cn.host, cn.epoch, cn.term = v.primary, v.host, v.epoch, v.term
				cn.born, cn.expires = v.born, v.expires
				v.detachLocked()
				ps.mu.Unlock()
				return true, nil
			}
			sc, vt := v.detachLocked()
			ps.constructing++ // the slot passes to cn
			ps.mu.Unlock()
			closeSession(sc, vt)
			return false, nil
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			ps.mu.Unlock()
			return false, &errPrimaryFull{max: ps.max, wait: ps.c.cfg.WriteTimeout}
		}
		freed := ps.freed
		ps.waiting++
		ps.mu.Unlock()
		timer := time.NewTimer(wait)
		var err error
		select {
		case <-freed:
		case <-timer.C:
		case <-ctx.Done():
			err = ctx.Err()
		}
		timer.Stop()
		ps.mu.Lock()
		ps.waiting--
		if err != nil {
			ps.canceled++
			ps.mu.Unlock()
			return false, err
		}
	}
}

// errNoRoom: the health check found no slot for a session to keep warm.
var errNoRoom = errors.New("pgrouted: no room for another primary session")

// reclaimableLocked returns the parked connection whose session a
// statement may take over, the longest idle first: one with no session
// state and no transaction, or whose session broke (its connection is
// then dropped: bad); nil for none.
func (ps *primarySessions) reclaimableLocked() *conn {
	var best *conn
	for cn := ps.parked; cn != nil; cn = cn.parkNext {
		if cn.primary == nil {
			continue
		}
		if cn.sessionGone() {
			cn.bad = cn.bad || cn.holdsState()
			return cn
		}
		if cn.pinned || cn.bad || cn.inSQLTx() {
			continue
		}
		if best == nil || cn.idleSince.Before(best.idleSince) {
			best = cn
		}
	}
	return best
}

// signalLocked wakes the statements waiting for a slot.
func (ps *primarySessions) signalLocked() {
	if ps.waiting > 0 {
		close(ps.freed)
		ps.freed = make(chan struct{})
	}
}

// opened records that cn opened its session, with the slot acquire gave
// it, after waiting d for both.
func (ps *primarySessions) opened(cn *conn, d time.Duration) {
	now := time.Now()
	cn.born, cn.expires = now, time.Time{}
	if ps.lifetime > 0 {
		life := ps.lifetime
		if ps.jitter > 0 {
			life += rand.N(ps.jitter + 1)
		}
		cn.expires = now.Add(life)
	}
	ps.mu.Lock()
	ps.constructing--
	ps.newConns++
	ps.mu.Unlock()
	if !cn.warming {
		ps.gotSession(d, true)
	}
}

// notOpened gives back the slot acquire gave for a session that did not
// open.
func (ps *primarySessions) notOpened() {
	ps.mu.Lock()
	ps.constructing--
	ps.open--
	ps.signalLocked()
	ps.mu.Unlock()
}

// closed gives back the slot of a session closed by its connection.
func (ps *primarySessions) closed() {
	ps.mu.Lock()
	ps.open--
	ps.signalLocked()
	ps.mu.Unlock()
}

// gotSession counts a statement's getting its session, opened (empty)
// or kept, in d.
func (ps *primarySessions) gotSession(d time.Duration, empty bool) {
	ps.acquires.Add(1)
	if !empty {
		return
	}
	ps.acquireNanos.Add(int64(d))
	ps.emptyAcquires.Add(1)
	ps.emptyWait.Add(int64(d))
}

// expiredAt reports whether cn's session is past its lifetime at now.
func (cn *conn) expiredAt(now time.Time) bool {
	return cn.primary != nil && !cn.expires.IsZero() && now.After(cn.expires)
}

// sessionGone reports whether cn's session broke, or belongs to a term
// that ended (whose end closed its network connection, unseen by pgx
// until the session is used).
func (cn *conn) sessionGone() bool {
	return cn.primary.Conn().IsClosed() || (cn.term != nil && cn.term.ended())
}

// holdsState reports whether cn's session holds what a new one would not:
// session state, or a transaction.
func (cn *conn) holdsState() bool {
	return cn.pinned || cn.tx != nil || cn.inSQLTx()
}

// park records that cn is put back, unused, by its pool. It reports false
// when cn must not be kept: its session, past its lifetime, holds session
// state. An expired session without is closed, and cn kept.
func (ps *primarySessions) park(cn *conn) bool {
	if !ps.maintain {
		// No cap, no age, no check: nothing takes a parked session
		// or closes it, so parking is only counted, for Stat; every
		// statement passes here, and pays no Connector-wide lock.
		if !cn.parked {
			cn.parked, cn.parkedIdle = true, cn.primary != nil
			if cn.parkedIdle {
				ps.idleFree.Add(1)
			}
		}
		return true
	}
	now := time.Now()
	var sc *stdlib.Conn
	var t *term
	ps.mu.Lock()
	if cn.parked {
		ps.mu.Unlock()
		return true
	}
	if cn.expiredAt(now) {
		if cn.holdsState() {
			ps.lifetimeCloses++
			ps.mu.Unlock()
			return false
		}
		sc, t = cn.detachLocked()
		ps.lifetimeCloses++
		ps.open--
		ps.signalLocked()
	}
	cn.parked, cn.idleSince = true, now
	cn.parkPrev, cn.parkNext = nil, ps.parked
	if ps.parked != nil {
		ps.parked.parkPrev = cn
	}
	ps.parked = cn
	if cn.primary != nil && !cn.holdsState() {
		ps.signalLocked() // a waiting statement may reclaim it
	}
	ps.mu.Unlock()
	closeSession(sc, t)
	return true
}

// unpark records that cn is taken from its pool again. It reports false
// when cn must be dropped: the health check closed its session, which held
// session state, or that session is past its lifetime. An expired session
// without session state is closed, and cn kept.
func (ps *primarySessions) unpark(cn *conn) bool {
	if !ps.maintain {
		ps.unparkFree(cn)
		return !cn.bad
	}
	var sc *stdlib.Conn
	var t *term
	ps.mu.Lock()
	ps.unlinkLocked(cn)
	ok := !cn.bad
	if ok && cn.expiredAt(time.Now()) {
		if cn.holdsState() {
			ps.lifetimeCloses++
			cn.bad, ok = true, false
		} else {
			sc, t = cn.detachLocked()
			ps.lifetimeCloses++
			ps.open--
			ps.signalLocked()
		}
	}
	ps.mu.Unlock()
	closeSession(sc, t)
	return ok
}

// used makes sure cn, in use, is not parked. Its pool takes it again with
// ResetSession, which unparks it, but for one case: database/sql hands
// out a connection it never used without ResetSession, and one such may
// have been put back (and parked) by a request whose context ended as it
// was handed the connection. Only the connection's user parks and unparks
// it, so its own read of parked needs no lock.
func (cn *conn) used() {
	if cn.parked {
		cn.c.prim.unpark(cn)
	}
}

// unparkFree is unpark when nothing is maintained (see park).
func (ps *primarySessions) unparkFree(cn *conn) {
	if cn.parkedIdle {
		ps.idleFree.Add(-1)
	}
	cn.parked, cn.parkedIdle = false, false
}

// forget records that cn is being closed: it is no longer parked.
func (ps *primarySessions) forget(cn *conn) {
	if !ps.maintain {
		ps.unparkFree(cn)
		return
	}
	ps.mu.Lock()
	ps.unlinkLocked(cn)
	ps.mu.Unlock()
}

func (ps *primarySessions) unlinkLocked(cn *conn) {
	if !cn.parked {
		return
	}
	if cn.parkPrev != nil {
		cn.parkPrev.parkNext = cn.parkNext
	} else {
		ps.parked = cn.parkNext
	}
	if cn.parkNext != nil {
		cn.parkNext.parkPrev = cn.parkPrev
	}
	cn.parked, cn.parkPrev, cn.parkNext = false, nil, nil
}

// detachLocked takes cn's session from it, to be closed by the caller
// (closeSession) without mu; its slot stays taken for the caller to give
// back or pass on.
func (cn *conn) detachLocked() (*stdlib.Conn, *term) {
	sc, t := cn.primary, cn.term
	cn.primary, cn.term, cn.descs = nil, nil, nil
	cn.born, cn.expires = time.Time{}, time.Time{}
	return sc, t
}

// closeSession closes sc, a primary session opened under t.
func closeSession(sc *stdlib.Conn, t *term) {
	if sc == nil {
		return
	}
	if t != nil {
		t.leave(sc)
	}
	sc.Close()
}

// check is one health check: it closes the parked connections' broken
// sessions, the expired ones and the ones idle too long (while more than
// min are open), then opens the sessions min and minIdle ask for.
func (ps *primarySessions) check() {
	type closing struct {
		sc *stdlib.Conn
		t  *term
	}
	var out []closing
	now := time.Now()
	ps.mu.Lock()
	for cn := ps.parked; cn != nil; cn = cn.parkNext {
		if cn.primary == nil {
			continue
		}
		held := cn.holdsState()
		switch {
		case cn.sessionGone():
		case cn.expiredAt(now):
			ps.lifetimeCloses++
		case ps.idle > 0 && !held && now.Sub(cn.idleSince) > ps.idle && ps.open > ps.min:
			ps.idleCloses++
		default:
			continue
		}
		if held {
			cn.bad = true // its session state is gone: ResetSession drops it
		}
		sc, t := cn.detachLocked()
		out = append(out, closing{sc, t})
		ps.open--
	}
	if len(out) > 0 {
		ps.signalLocked()
	}
	ps.mu.Unlock()
	for _, s := range out {
		closeSession(s.sc, s.t)
	}
	ps.warm()
}

// warm opens sessions until min are open and minIdle idle, as room allows:
// each goes to a parked connection without one, else to the Pool (keep).
func (ps *primarySessions) warm() {
	for ps.ctx.Err() == nil {
		ps.mu.Lock()
		_, idle := ps.countsLocked()
		need := ps.open < ps.min || idle < ps.minIdle
		room := ps.max == 0 || ps.open < ps.max
		home := ps.keep != nil
		for cn := ps.parked; cn != nil && !home; cn = cn.parkNext {
			home = cn.primary == nil && !cn.bad && !cn.pinned
		}
		ps.mu.Unlock()
		if !home {
			// database/sql keeps no idle connection without a session
			// to give one to.
			return
		}
		if !need || !room || ps.c.liveTerm() == nil || !ps.warmOne() {
			// No primary now: the statements that need one ask the
			// probes for it; the health check does not.
			return
		}
	}
}

// warmOne opens one session, within a health check period, and hands it
// to a parked connection without one or to the Pool. It reports whether
// one was kept.
func (ps *primarySessions) warmOne() bool {
	ctx, cancel := context.WithTimeout(ps.ctx, ps.period)
	defer cancel()
	w := &conn{c: ps.c, warming: true}
	if _, err := w.primaryConn(ctx, OpWrite); err != nil {
		w.closePrimary()
		return false
	}
	w.warming = false
	ps.mu.Lock()
	for cn := ps.parked; cn != nil; cn = cn.parkNext {
		if cn.primary != nil || cn.bad || cn.pinned {
			continue
		}
		cn.primary, cn.host, cn.epoch, cn.term = w.primary, w.host, w.epoch, w.term
		cn.born, cn.expires = w.born, w.expires
		w.primary, w.term = nil, nil
		ps.mu.Unlock()
		return true
	}
	keep := ps.keep
	ps.mu.Unlock()
	if keep != nil && keep(w) {
		return true
	}
	w.Close()
	return false
}

// countsLocked returns the sessions held by connections in use and by
// parked ones.
func (ps *primarySessions) countsLocked() (acquired, idle int32) {
	idle = ps.idleFree.Load() // 0 when maintained
	for cn := ps.parked; cn != nil; cn = cn.parkNext {
		if cn.primary != nil {
			idle++
		}
	}
	return ps.open - ps.constructing - idle, idle
}

// info returns the primary sessions' figures, as pgxpool.Stat's.
func (ps *primarySessions) info() PoolInfo {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	acquired, idle := ps.countsLocked()
	return PoolInfo{
		AcquireCount:            ps.acquires.Load(),
		AcquireDuration:         time.Duration(ps.acquireNanos.Load()),
		AcquiredConns:           acquired,
		CanceledAcquireCount:    ps.canceled,
		ConstructingConns:       ps.constructing,
		EmptyAcquireCount:       ps.emptyAcquires.Load(),
		EmptyAcquireWaitTime:    time.Duration(ps.emptyWait.Load()),
		IdleConns:               idle,
		MaxConns:                ps.max,
		TotalConns:              ps.open,
		NewConnsCount:           ps.newConns,
		MaxLifetimeDestroyCount: ps.lifetimeCloses,
		MaxIdleDestroyCount:     ps.idleCloses,
	}
}
