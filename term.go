package pgrouted

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// This file is the primary's term: the time during which the topology
// names one host the primary of one epoch under a valid lease. Primary
// sessions open under the current term. When it ends (the topology
// confirms another primary, or none: a conflict, or the lease ran out
// because the host stopped answering), a dial to its host is abandoned and
// the network connection under each of its sessions is closed: nothing
// waits on a primary that is no longer one, however long it takes to
// answer or to time out (a frozen server, a partition), and the statements
// in flight on it end with ErrOutcomeUnknown (primaryrun.go).

// term is one primary's term.
type term struct {
	host  *host  // the primary
	epoch uint64 // the topology epoch it was confirmed in

	ctx  context.Context // cancelled when the term ends: dials to host run under it
	stop context.CancelFunc
	over atomic.Bool // the term ended

	mu       sync.Mutex
	sessions map[*stdlib.Conn]struct{} // the primary sessions open under it
}

// ended reports whether the term is over.
func (t *term) ended() bool { return t.over.Load() }

// join adds a primary session just opened under the term. It returns
// false, and the session must not be used, when the term already ended.
func (t *term) join(sc *stdlib.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended() {
		return false
	}
	if t.sessions == nil {
		t.sessions = make(map[*stdlib.Conn]struct{})
	}
	t.sessions[sc] = struct{}{}
	return true
}

// leave removes a session that is being closed.
func (t *term) leave(sc *stdlib.Conn) {
	t.mu.Lock()
	delete(t.sessions, sc)
	t.mu.Unlock()
}

// finish ends the term: a dial under it is abandoned, and the network
// connection under each of its sessions is closed, without a goodbye (the
// host may not answer; a polite close would wait for it). A statement
// waiting there fails at once; pgx then finds its connection closed.
func (t *term) finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over.Swap(true) {
		return
	}
	t.stop()
	for sc := range t.sessions {
		sc.Conn().PgConn().Conn().Close()
	}
	t.sessions = nil
}

// dialContext returns a context for opening a session under the term:
// cancelled when ctx is, or when the term ends.
func (t *term) dialContext(ctx context.Context) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(t.ctx, cancel)
	return dctx, func() {
		unhook()
		cancel()
	}
}

// terms is the Connector's current term.
type terms struct {
	cur atomic.Pointer[term] // nil: no primary now
	mu  sync.Mutex           // serialises the changes of cur
}

// liveTerm returns the current primary's term, or nil while there is no
// primary with a valid lease. It ends the previous term when the topology
// moved on (another host or epoch, or no primary), and starts a new one.
func (hs *hostSet) liveTerm() *term {
	v := hs.view()
	now := time.Now()
	t := hs.terms.cur.Load()
	if t != nil && !t.ended() && v.isPrimary(t.host) && t.epoch == v.snap.Epoch && v.snap.LeaseValid(now) {
		return t
	}
	hs.terms.mu.Lock()
	defer hs.terms.mu.Unlock()
	// Under the lock, the newest snapshot: changes follow the topology's
	// order, whichever goroutine makes them.
	return hs.moveTerm(hs.view(), time.Now())
}

// moveTerm makes the current term v's at now, under terms.mu: it ends the
// current one when v names another primary or epoch, or none valid at now,
// and starts one for v's primary when there is none.
func (hs *hostSet) moveTerm(v *view, now time.Time) *term {
	t := hs.terms.cur.Load()
	valid := v.snap.LeaseValid(now)
	if t != nil && (t.ended() || !v.isPrimary(t.host) || t.epoch != v.snap.Epoch || !valid) {
		t.host.leads.Store(false)
		t.finish()
		hs.terms.cur.Store(nil)
		t = nil
	}
	if t == nil && valid {
		ctx, stop := context.WithCancel(context.Background())
		t = &term{host: v.primary.host, epoch: v.snap.Epoch, ctx: ctx, stop: stop}
		t.host.leads.Store(true)
		hs.terms.cur.Store(t)
	}
	return t
}

// followTerms ends each term as soon as a snapshot shows the topology moved
// on, whether or not a statement is running, until stop is closed. The
// tracker publishes a snapshot after every probe and re-evaluates leases on
// a tick, so this also sees a lease run out. Each snapshot's probe of the
// primary read its position: it is offered to the read index
// (position.go), where global reads may wait for one.
func (c *Connector) followTerms(stop <-chan struct{}) {
	for {
		changed := c.top.Changed()
		c.liveTerm()
		c.offerProbe(c.view())
		select {
		case <-changed:
		case <-stop:
			return
		}
	}
}

// errNotPrimary refuses a dial to a host that is not the primary of the
// current term (host.leads): the cancel request pgx sends after a statement
// was interrupted would wait for a host that does not answer.
var errNotPrimary = errors.New("pgrouted: no longer the primary")
