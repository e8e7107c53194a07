package pgrouted

import (
	"context"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/topology"
)

// TestTermFollowsTheTopology: a term lasts while the snapshots name the same
// primary in the same epoch under a valid lease; another primary, a lease
// run out or no primary end it (its dial context is cancelled, and its host
// may no longer be dialled for a session), and a primary whose lease is
// valid again starts a new term, even in the same epoch.
func TestTermFollowsTheTopology(t *testing.T) {
	c := &Connector{}
	for i := 0; i < 2; i++ {
		c.hosts.add(&host{Host: dsn.Host{Name: string(rune('a' + i))}, idx: i})
	}
	now := time.Now()
	snap := func(primary int, epoch uint64, confirmed time.Time) *view {
		return newView(&topology.Snapshot{Hosts: make([]topology.HostState, 2), Primary: primary, Epoch: epoch, Confirmed: confirmed, Lease: 10 * time.Second}, c.hosts.all())
	}
	leads := func() [2]bool { return [2]bool{c.hosts.all()[0].leads.Load(), c.hosts.all()[1].leads.Load()} }

	if tm := c.moveTerm(snap(-1, 0, time.Time{}), now); tm != nil {
		t.Fatalf("a term without a primary: %+v", tm)
	}
	first := c.moveTerm(snap(0, 1, now), now)
	if first == nil || first.host.idx != 0 || first.epoch != 1 || first.ended() || leads() != [2]bool{true, false} {
		t.Fatalf("primary a in epoch 1: term %+v, leads %v", first, leads())
	}
	if tm := c.moveTerm(snap(0, 1, now.Add(time.Second)), now.Add(2*time.Second)); tm != first {
		t.Fatalf("the same primary, confirmed again: another term %+v", tm)
	}
	dctx, release := first.dialContext(context.Background())
	defer release()

	// The lease runs out: the term ends, and no other starts.
	if tm := c.moveTerm(snap(0, 1, now), now.Add(11*time.Second)); tm != nil {
		t.Fatalf("a term after the lease ran out: %+v", tm)
	}
	if !first.ended() || leads() != [2]bool{false, false} {
		t.Fatalf("after the lease ran out: ended %v, leads %v", first.ended(), leads())
	}
	select { // cancelled by context.AfterFunc, on its own goroutine
	case <-dctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the dial under the term was not cancelled when it ended")
	}
	// Confirmed again, same epoch: a new term.
	second := c.moveTerm(snap(0, 1, now.Add(12*time.Second)), now.Add(12*time.Second))
	if second == nil || second == first || second.ended() || leads() != [2]bool{true, false} {
		t.Fatalf("confirmed again: term %+v (first %p), leads %v", second, first, leads())
	}
	// Another primary in a new epoch: the term ends, b's starts.
	third := c.moveTerm(snap(1, 2, now.Add(13*time.Second)), now.Add(13*time.Second))
	if !second.ended() || third == nil || third.host.idx != 1 || third.epoch != 2 || leads() != [2]bool{false, true} {
		t.Fatalf("a new primary: old ended %v, term %+v, leads %v", second.ended(), third, leads())
	}
	// A term that ended cannot take a session, and a dial under it is
	// cancelled at once.
	if second.join(nil) {
		t.Fatal("an ended term took a session")
	}
	ctx, release2 := second.dialContext(context.Background())
	defer release2()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a dial under an ended term was not cancelled")
	}
	// No primary (a conflict): the term ends.
	if tm := c.moveTerm(snap(-1, 2, time.Time{}), now.Add(14*time.Second)); tm != nil || !third.ended() || leads() != [2]bool{false, false} {
		t.Fatalf("no primary: term %+v, old ended %v, leads %v", tm, third.ended(), leads())
	}
}
