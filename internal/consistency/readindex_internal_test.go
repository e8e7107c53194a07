package consistency

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
	"go.uber.org/goleak"
)

// TestReadIndexFetchStartsAfterRead: under 32 concurrent readers, every
// read gets a position from a fetch that started after the read began (a
// logical clock orders the read's start and the fetch's), fetches never
// overlap, and they are shared: far fewer fetches than reads.
func TestReadIndexFetchStartsAfterRead(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var clock, inFlight atomic.Int64
	var overlap atomic.Bool
	ri := newReadIndex(func(ctx context.Context) (lagmeter.Watermark, error) {
		if inFlight.Add(1) > 1 {
			overlap.Store(true)
		}
		defer inFlight.Add(-1)
		started := clock.Add(1) // the fetch's start, on the clock
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		return lagmeter.Watermark{SystemID: 1, Timeline: 1, LSN: lagmeter.LSN(started)}, nil
	})
	defer ri.Close()
	const readers, each = 32, 200
	var early atomic.Int64
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				began := clock.Add(1)
				wm, err := ri.get(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if int64(wm.LSN) <= began {
					early.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := early.Load(); n != 0 {
		t.Fatalf("%d reads used a fetch that started before they began", n)
	}
	if overlap.Load() {
		t.Fatal("two fetches ran at once")
	}
	fetches, served := ri.fetches.Load(), ri.served.Load()
	t.Logf("%d reads, %d fetches (%.3f per read)", served, fetches, float64(fetches)/float64(served))
	if served != readers*each {
		t.Fatalf("served %d reads, want %d", served, readers*each)
	}
	if fetches*5 > served {
		t.Fatalf("%d fetches for %d reads: want at most one fifth", fetches, served)
	}
}

// TestReadIndexJoinsNextFetch: reads that arrive while a fetch is in
// flight do not take its answer (it may have started before them): they
// all share the one fetch that starts when it ends.
func TestReadIndexJoinsNextFetch(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	var n atomic.Int64
	ri := newReadIndex(func(ctx context.Context) (lagmeter.Watermark, error) {
		k := n.Add(1)
		if k == 1 {
			<-release
		}
		return lagmeter.Watermark{SystemID: 1, Timeline: 1, LSN: lagmeter.LSN(k)}, nil
	})
	defer ri.Close()
	defer open() // before close, even when the test fails
	first := make(chan lagmeter.Watermark, 1)
	go func() {
		wm, _ := ri.get(context.Background())
		first <- wm
	}()
	eventually(t, func() bool { return n.Load() == 1 })
	const late = 10
	got := make(chan lagmeter.Watermark, late)
	for range late {
		go func() {
			wm, _ := ri.get(context.Background())
			got <- wm
		}()
	}
	eventually(t, func() bool {
		ri.mu.Lock()
		defer ri.mu.Unlock()
		return ri.next != nil && ri.next.waiters == late
	})
	open()
	if wm := <-first; wm.LSN != 1 {
		t.Fatalf("the first read got fetch %d, want 1", wm.LSN)
	}
	for range late {
		if wm := <-got; wm.LSN != 2 {
			t.Fatalf("a read that arrived during fetch 1 got fetch %d, want 2", wm.LSN)
		}
	}
	if f := ri.fetches.Load(); f != 2 {
		t.Fatalf("%d fetches for 11 reads in two waves, want 2", f)
	}
}

// TestReadIndexErrorsAndCancel: a failed fetch fails the reads waiting for
// it (they then go where a read of unknown position goes); a read whose
// context ends stops waiting; close ends a fetch in flight.
func TestReadIndexErrorsAndCancel(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	boom := errors.New("boom")
	ri := NewReadIndex(func(ctx context.Context) (lagmeter.Watermark, error) { return lagmeter.Watermark{}, boom }, time.Minute)
	if _, err := ri.get(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("get after a failed fetch: %v", err)
	}
	if ri.failed.Load() != 1 || ri.served.Load() != 0 {
		t.Fatalf("failed %d served %d", ri.failed.Load(), ri.served.Load())
	}
	ri.Close()

	ri = newReadIndex(func(ctx context.Context) (lagmeter.Watermark, error) {
		<-ctx.Done()
		return lagmeter.Watermark{}, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := ri.get(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get with a context that ended: %v", err)
	}
	ri.Close() // ends the fetch still in flight
	if _, err := ri.get(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReadIndexOfferServesWaiters: a position offered with a send time
// after every waiter joined completes their round at once, the running
// one included, and the waiting round's fetch is never made; an offer sent
// before the latest waiter joined serves nobody in its round.
func TestReadIndexOfferServesWaiters(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	var n atomic.Int64
	ri := newReadIndex(func(ctx context.Context) (lagmeter.Watermark, error) {
		k := n.Add(1)
		if k == 1 {
			<-release
		}
		return lagmeter.Watermark{SystemID: 1, Timeline: 1, LSN: lagmeter.LSN(k)}, nil
	})
	defer ri.Close()
	defer open()
	offered := func(lsn lagmeter.LSN) lagmeter.Watermark {
		return lagmeter.Watermark{SystemID: 1, Timeline: 1, LSN: lsn}
	}

	first := make(chan lagmeter.Watermark, 1)
	go func() {
		wm, _ := ri.get(context.Background())
		first <- wm
	}()
	eventually(t, func() bool { return n.Load() == 1 })
	const late = 10
	got := make(chan lagmeter.Watermark, late)
	for range late {
		go func() {
			wm, _ := ri.get(context.Background())
			got <- wm
		}()
	}
	var lastJoin time.Time
	eventually(t, func() bool {
		ri.mu.Lock()
		defer ri.mu.Unlock()
		if ri.next != nil && ri.next.waiters == late {
			lastJoin = ri.next.lastJoin
			return true
		}
		return false
	})
	// Sent at the latest join: after the first read joined (it serves
	// it, though its fetch is still blocked), not after the latest join,
	// so not known to be after that read began: the waiting round stays.
	if !ri.Offer(offered(100), lastJoin) {
		t.Fatal("an offer sent after the first read joined did not serve it")
	}
	if wm := <-first; wm.LSN != 100 {
		t.Fatalf("the first read got %d, want the offered 100", wm.LSN)
	}
	select {
	case wm := <-got:
		t.Fatalf("a read took a position sent before it joined: %v", wm)
	default:
	}
	// Sent after every join: it serves the waiting round.
	if !ri.Offer(offered(200), Now()) {
		t.Fatal("an offer sent after every join served nobody")
	}
	for range late {
		if wm := <-got; wm.LSN != 200 {
			t.Fatalf("a waiting read got %d, want the offered 200", wm.LSN)
		}
	}
	open()
	eventually(t, func() bool {
		ri.mu.Lock()
		defer ri.mu.Unlock()
		return ri.running == nil
	})
	if f, s := ri.fetches.Load(), ri.shared.Load(); f != 1 || s != 2 {
		t.Fatalf("%d fetches, %d rounds served by offers; want 1 and 2 (the waiting round's fetch not made)", f, s)
	}
	if s := ri.served.Load(); s != late+1 {
		t.Fatalf("served %d reads, want %d", s, late+1)
	}
	// No round waits: an offer serves nobody.
	if ri.Offer(offered(300), Now()) {
		t.Fatal("an offer with no read waiting served one")
	}
}

// TestReadIndexOfferAfterReadBegan: under 32 concurrent readers and 4
// offerers (writes reading the position after their commits), on one
// logical clock, every read gets a position read after it began, by its
// own fetch or by an offer; offers replace fetches.
func TestReadIndexOfferAfterReadBegan(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var clock atomic.Int64
	tick := func() int64 { return clock.Add(1) }
	at := func(k int64) time.Time { return time.Unix(0, k) }
	ri := newReadIndex(func(ctx context.Context) (lagmeter.Watermark, error) {
		started := tick()
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		return lagmeter.Watermark{SystemID: 1, Timeline: 1, LSN: lagmeter.LSN(started)}, nil
	})
	ri.now = func() time.Time { return at(tick()) }
	defer ri.Close()
	const readers, each, offerers = 32, 200, 4
	var early atomic.Int64
	var wg, offering sync.WaitGroup
	stop := make(chan struct{})
	for range offerers {
		offering.Add(1)
		go func() {
			defer offering.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent := tick() // the position query is sent after this tick
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				ri.Offer(lagmeter.Watermark{SystemID: 1, Timeline: 1, LSN: lagmeter.LSN(sent)}, at(sent))
			}
		}()
	}
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				began := tick()
				wm, err := ri.get(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if int64(wm.LSN) <= began {
					early.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	offering.Wait()
	if n := early.Load(); n != 0 {
		t.Fatalf("%d reads used a position read before they began", n)
	}
	fetches, shared, served := ri.fetches.Load(), ri.shared.Load(), ri.served.Load()
	t.Logf("%d reads, %d fetches, %d rounds served by offers", served, fetches, shared)
	if served != readers*each {
		t.Fatalf("served %d reads, want %d", served, readers*each)
	}
	if shared == 0 {
		t.Fatal("no offer served a round")
	}
}

// get is join without started, for the tests.
func (ri *ReadIndex) get(ctx context.Context) (lagmeter.Watermark, error) {
	wm, _, err := ri.Join(ctx)
	return wm, err
}

// newReadIndex is NewReadIndex with a timeout no test reaches.
func newReadIndex(fetch Fetch) *ReadIndex { return NewReadIndex(fetch, time.Minute) }
