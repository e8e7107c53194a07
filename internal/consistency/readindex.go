package consistency

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file is the read index of global consistency: the primary's WAL
// position, read once for many reads, as etcd serves linearizable reads.
//
// A global read needs a position of the primary read after the read began:
// pg_current_wal_insert_lsn() read then is at or past the commit of every
// transaction acknowledged before it. One such read (a fetch) serves every
// read that began before the fetch started. So concurrent reads share
// fetches: at most one fetch is in flight; a read that arrives while none
// is starts one; a read that arrives while one is in flight (it may have
// started before the read began) waits for the next one, which starts as
// soon as the one in flight ends and serves every read that arrived
// meanwhile. However many reads run, the primary sees at most one fetch per
// fetch round trip, and a read never uses a fetch that started before it
// began.
//
// A position serves everyone after it: any read of the primary's position
// sent after a read began serves that read, not only a fetch. The positions
// pgrouted reads anyway (after a write's commit, pipelined with it; after a
// COMMIT; a probe of the primary) are offered to the index with the time
// they were sent (Offer): a round whose reads all joined before that time
// is completed with it at once, and the fetch it waited for is not made.
// Times are read from the monotonic clock (Now); a round keeps the
// time of its latest join, taken under the index's lock, and an offer sent
// at or before it serves nobody in the round.

// Fetch reads the primary's position (the end of the last record
// inserted before pg_current_wal_insert_lsn()).
type Fetch func(context.Context) (lagmeter.Watermark, error)

// ReadIndex shares the fetches of the primary's position among concurrent
// global reads. It is safe for concurrent use.
type ReadIndex struct {
	fetch   Fetch
	timeout time.Duration    // bounds a fetch
	now     func() time.Time // Now; a logical clock in tests

	mu      sync.Mutex
	running *fetchRound // the fetch in flight, nil when none
	next    *fetchRound // the fetch that starts when running ends, nil when no read waits for it
	closed  bool

	base   context.Context // cancelled by close: fetches run under it
	cancel context.CancelFunc
	wg     sync.WaitGroup // the goroutine running fetches

	fetches atomic.Uint64 // fetches started
	served  atomic.Uint64 // reads given a position
	failed  atomic.Uint64 // fetches that failed
	shared  atomic.Uint64 // rounds completed by an offered position instead of their fetch
	busy    atomic.Bool   // a round is running or waiting (running or next set; written under mu)
	waited  atomic.Uint64 // nanoseconds reads waited for their positions (AddWait)
	// last is the newest position the index was given, by a fetch or an
	// offer (Last).
	last atomic.Pointer[lagmeter.Watermark]
}

// fetchRound is one fetch and the reads waiting for it.
type fetchRound struct {
	done     chan struct{} // closed once wm and err are set (by complete)
	wm       lagmeter.Watermark
	err      error
	waiters  int       // the reads that joined it (under ReadIndex.mu)
	lastJoin time.Time // when the latest of them joined (Now, under ReadIndex.mu)
	finished bool      // done is closed (under ReadIndex.mu)
}

// complete sets r's answer and wakes its reads, unless an offer or its
// fetch did first. Called under ReadIndex.mu.
func (r *fetchRound) complete(wm lagmeter.Watermark, err error) bool {
	if r.finished {
		return false
	}
	r.finished = true
	r.wm, r.err = wm, err
	close(r.done)
	return true
}

// note records wm, a position the index was given, as Last when it is
// newer. Called under ReadIndex.mu.
func (ri *ReadIndex) note(wm lagmeter.Watermark) {
	if wm.IsZero() {
		return
	}
	if l := ri.last.Load(); l == nil || later(*l, wm) != *l {
		ri.last.Store(&wm)
	}
}

// Last is the newest position of the primary the index was given (by a
// fetch or an offer; zero: none yet): the primary had written it.
func (ri *ReadIndex) Last() lagmeter.Watermark {
	if l := ri.last.Load(); l != nil {
		return *l
	}
	return lagmeter.Watermark{}
}

// NewReadIndex returns a read index whose fetches call fetch, each
// bounded by timeout.
func NewReadIndex(fetch Fetch, timeout time.Duration) *ReadIndex {
	ctx, cancel := context.WithCancel(context.Background())
	return &ReadIndex{fetch: fetch, timeout: timeout, now: Now, base: ctx, cancel: cancel}
}

// Join returns the primary's position read by a fetch that started after
// Join was called, waiting for it (or for ctx to end), and reports whether
// the caller opened the round it waited for (started: no read waited for
// that fetch before it).
func (ri *ReadIndex) Join(ctx context.Context) (_ lagmeter.Watermark, started bool, _ error) {
	return ri.join(ctx, true)
}

// Ask is Join for a caller that is not a read served by the position (a
// token's position to vouch for): it shares the fetches the same way, and
// is not counted in Served.
func (ri *ReadIndex) Ask(ctx context.Context) (lagmeter.Watermark, error) {
	wm, _, err := ri.join(ctx, false)
	return wm, err
}

// join is Join, counting the position served when serve is true.
func (ri *ReadIndex) join(ctx context.Context, serve bool) (_ lagmeter.Watermark, started bool, _ error) {
	ri.mu.Lock()
	if ri.closed {
		ri.mu.Unlock()
		return lagmeter.Watermark{}, false, ErrClosed
	}
	r := ri.next
	switch {
	case ri.running == nil:
		// No fetch in flight: start one, now.
		r = &fetchRound{done: make(chan struct{})}
		ri.running = r
		ri.wg.Add(1)
		go ri.run(r)
		started = true
	case r == nil:
		// The fetch in flight may have started before this read began:
		// wait for the next one, which starts when it ends.
		r = &fetchRound{done: make(chan struct{})}
		ri.next = r
		started = true
	}
	r.waiters++
	r.lastJoin = ri.now()
	ri.busy.Store(true)
	ri.mu.Unlock()
	select {
	case <-r.done:
		if r.err != nil {
			return lagmeter.Watermark{}, started, r.err
		}
		if serve {
			ri.served.Add(1)
		}
		return r.wm, started, nil
	case <-ctx.Done():
		return lagmeter.Watermark{}, started, ctx.Err()
	}
}

// run runs the fetch of r, then the next one while reads wait for one.
func (ri *ReadIndex) run(r *fetchRound) {
	defer ri.wg.Done()
	for r != nil {
		ri.fetches.Add(1)
		ctx, cancel := context.WithTimeout(ri.base, ri.timeout)
		wm, err := ri.fetch(ctx)
		cancel()
		if err != nil {
			ri.failed.Add(1)
		}
		ri.mu.Lock()
		if err == nil {
			ri.note(wm)
		}
		r.complete(wm, err) // unless an offer completed it meanwhile
		r, ri.next = ri.next, nil
		ri.running = r
		ri.busy.Store(r != nil)
		ri.mu.Unlock()
	}
}

// Offer gives the index a position of the primary, wm, read by a query
// sent at sent or later (a time of Now's clock, taken before the query
// was sent): it completes the rounds whose reads all joined before sent.
// A waiting round so completed is dropped (its fetch is not made); a
// round whose fetch is in flight is completed at once, and the fetch's
// answer, when it comes, is not used. It reports whether it served a read.
func (ri *ReadIndex) Offer(wm lagmeter.Watermark, sent time.Time) bool {
	if wm.IsZero() || sent.IsZero() {
		return false
	}
	ri.mu.Lock()
	defer ri.mu.Unlock()
	ri.note(wm)
	served := false
	if r := ri.running; r != nil && r.waiters > 0 && sent.After(r.lastJoin) && r.complete(wm, nil) {
		served = true
		ri.shared.Add(1)
	}
	if r := ri.next; r != nil && sent.After(r.lastJoin) && r.complete(wm, nil) {
		ri.next = nil
		ri.busy.Store(ri.running != nil)
		served = true
		ri.shared.Add(1)
	}
	return served
}

// Waiting reports whether a global read waits for a position: when none
// does, an offer would serve nobody, and the positions of writes are not
// offered at all (a process without global reads pays nothing per write).
// A read that joins just after a false answer waits for its own fetch.
func (ri *ReadIndex) Waiting() bool { return ri != nil && ri.busy.Load() }

// Close cancels the fetch in flight and waits for it to end; a later get
// fails. A nil index (a Connector that failed before it had one) has
// nothing to close.
func (ri *ReadIndex) Close() {
	if ri == nil {
		return
	}
	ri.mu.Lock()
	ri.closed = true
	ri.mu.Unlock()
	ri.cancel()
	ri.wg.Wait()
}

// ErrClosed: the read index was closed (its Connector was).
var ErrClosed = errors.New("pgrouted: connector closed")

// Fetches counts the fetches started.
func (ri *ReadIndex) Fetches() uint64 { return ri.fetches.Load() }

// Failed counts the fetches that failed.
func (ri *ReadIndex) Failed() uint64 { return ri.failed.Load() }

// Served counts the reads given a position.
func (ri *ReadIndex) Served() uint64 { return ri.served.Load() }

// Shared counts the rounds an offered position completed instead of their
// fetch.
func (ri *ReadIndex) Shared() uint64 { return ri.shared.Load() }

// Waited is the total time reads waited for their positions (AddWait).
func (ri *ReadIndex) Waited() time.Duration { return time.Duration(ri.waited.Load()) }

// AddWait adds d, the time one read waited for its position, to Waited.
func (ri *ReadIndex) AddWait(d time.Duration) { ri.waited.Add(uint64(d)) }
