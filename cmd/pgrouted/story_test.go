//go:build unix

package main

import (
	"context"
	"testing"
	"time"
)

// TestStoryKeepsPhaseLengths: an action that runs past the next phase's
// time moves the rest of the story, its end included, so that the later
// phases keep their length (on a slow machine the phase after a failover
// still shows writes on the new primary).
func TestStoryKeepsPhaseLengths(t *testing.T) {
	const d = time.Second
	overrun := 700 * time.Millisecond
	s := &story{cur: -1, notes: map[string]string{}}
	var endedTwo, startedLast time.Time
	s.phases = []phase{
		{at: 0, title: "one"},
		{at: 0.5, title: "two", action: func(ctx context.Context) error {
			time.Sleep(overrun) // planned: 0.3 s until the next phase
			endedTwo = time.Now()
			return nil
		}},
		{at: 0.8, title: "three", action: func(ctx context.Context) error {
			startedLast = time.Now()
			return nil
		}},
	}
	start := time.Now()
	if err := s.run(context.Background(), start, d, newEventLog(nil), func() {}); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	// Phase two's action ended at 0.5 s + 0.7 s: phase three starts then
	// (not at 0.8 s) and lasts its 0.2 s.
	if got, want := startedLast.Sub(start), d/2+overrun; got < want {
		t.Fatalf("the last phase started %v after the start, before phase two's action ended (%v)", got, want)
	}
	// The last phase runs from the end of phase two's action (the story
	// reads the clock after it, startedLast a moment later still): its
	// 0.2 s count from there, which the end not moving with the slip (the
	// story ending at 1 s) would cut to nothing.
	if got, want := ended.Sub(endedTwo), d/5; got < want {
		t.Fatalf("the last phase lasted %v from the end of phase two's action, want its 0.2 of the duration (%v): the end did not move with it", got, want)
	}
	if got := s.summaries(); len(got) != 3 || got[1].TookMs < float64(overrun.Milliseconds()) {
		t.Fatalf("phases: %+v", got)
	}
}
