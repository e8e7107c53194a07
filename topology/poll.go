package topology

import (
	"context"
	"time"
)

// viewResult is one answer of the provider, sent from its poller to the
// tracker.
type viewResult struct {
	view   View
	err    error
	sentAt time.Time // when Current was called: the view's lease runs from it
}

// pollProvider asks the provider for its view every Interval, and at once
// when it signals a change, until Close. It is the only caller of
// Provider.Current.
func (t *Topology) pollProvider() {
	p := t.opts.Provider
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-t.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	changes := p.Changes()
	for {
		start := time.Now()
		v, err := p.Current(ctx)
		select {
		case t.views <- viewResult{view: v, err: err, sentAt: start}:
		case <-t.done:
			return
		}
		timer := time.NewTimer(max(t.opts.Interval-time.Since(start), 0))
		select {
		case <-timer.C:
		case <-changes:
			timer.Stop()
		case <-t.askView:
			timer.Stop()
		case <-t.done:
			timer.Stop()
			return
		}
	}
}
