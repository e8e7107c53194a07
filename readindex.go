package pgrouted

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

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

// fetchFunc reads the primary's position (see Connector.fetchPosition).
type fetchFunc func(context.Context) (lagmeter.Watermark, error)

// readIndex shares the fetches of the primary's position among concurrent
// global reads. It is safe for concurrent use.
type readIndex struct {
	fetch fetchFunc

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
	waited  atomic.Uint64 // nanoseconds reads waited for their positions (Connector.globalPosition)
}

// fetchRound is one fetch and the reads waiting for it.
type fetchRound struct {
	done    chan struct{} // closed once wm and err are set
	wm      lagmeter.Watermark
	err     error
	waiters int // the reads that joined it (under readIndex.mu)
}

// newReadIndex returns a read index whose fetches call fetch.
func newReadIndex(fetch fetchFunc) *readIndex {
	ctx, cancel := context.WithCancel(context.Background())
	return &readIndex{fetch: fetch, base: ctx, cancel: cancel}
}

// get returns the primary's position read by a fetch that started after
// get was called, waiting for it (or for ctx to end).
func (ri *readIndex) get(ctx context.Context) (lagmeter.Watermark, error) {
	ri.mu.Lock()
	if ri.closed {
		ri.mu.Unlock()
		return lagmeter.Watermark{}, errIndexClosed
	}
	r := ri.next
	switch {
	case ri.running == nil:
		// No fetch in flight: start one, now.
		r = &fetchRound{done: make(chan struct{})}
		ri.running = r
		ri.wg.Add(1)
		go ri.run(r)
	case r == nil:
		// The fetch in flight may have started before this read began:
		// wait for the next one, which starts when it ends.
		r = &fetchRound{done: make(chan struct{})}
		ri.next = r
	}
	r.waiters++
	ri.mu.Unlock()
	select {
	case <-r.done:
		if r.err != nil {
			return lagmeter.Watermark{}, r.err
		}
		ri.served.Add(1)
		return r.wm, nil
	case <-ctx.Done():
		return lagmeter.Watermark{}, ctx.Err()
	}
}

// run runs the fetch of r, then the next one while reads wait for one.
func (ri *readIndex) run(r *fetchRound) {
	defer ri.wg.Done()
	for r != nil {
		ri.fetches.Add(1)
		ctx, cancel := context.WithTimeout(ri.base, positionTimeout)
		r.wm, r.err = ri.fetch(ctx)
		cancel()
		if r.err != nil {
			ri.failed.Add(1)
		}
		close(r.done)
		ri.mu.Lock()
		r, ri.next = ri.next, nil
		ri.running = r
		ri.mu.Unlock()
	}
}

// close cancels the fetch in flight and waits for it to end; a later get
// fails. A nil index (a Connector that failed before it had one) has
// nothing to close.
func (ri *readIndex) close() {
	if ri == nil {
		return
	}
	ri.mu.Lock()
	ri.closed = true
	ri.mu.Unlock()
	ri.cancel()
	ri.wg.Wait()
}

// errIndexClosed: the Connector was closed.
var errIndexClosed = errors.New("pgrouted: connector closed")
