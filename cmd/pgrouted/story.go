//go:build unix

package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pgrouted/pgrouted/testcluster"
)

// phase is one step of the demo's story. It starts at fraction at of the
// demo's duration (or when the step before it is done, if later) with
// action, and is shown as title and what until the next one.
type phase struct {
	at     float64
	title  string
	what   string
	action func(ctx context.Context) error
}

// story is the scripted sequence of faults, and what the live view shows
// of it.
type story struct {
	phases []phase

	mu    sync.Mutex
	cur   int               // index of the current phase, -1 before the first
	done  []PhaseSummary    // the phases started
	notes map[string]string // per host: what the demo did to it
}

// storyNodes are the parts the nodes play.
type storyNodes struct {
	primary  *testcluster.Node // the first primary, stopped in the failover
	paused   *testcluster.Node // its replay is paused, then resumed
	killed   *testcluster.Node // killed, then started again
	promoted *testcluster.Node // becomes the primary
	follow   []*testcluster.Node
}

func castOf(c *testcluster.Cluster) storyNodes {
	r := c.Replicas()
	n := storyNodes{primary: c.Primary(), paused: r[0], killed: r[len(r)-1], promoted: r[0]}
	n.follow = r[1:]
	return n
}

// newStory writes the script: normal routing; replay paused on a replica
// until it is over maxLag and excluded, then resumed; a replica killed and
// started again; a failover.
func newStory(d *demo, n storyNodes, maxLag time.Duration) *story {
	s := &story{cur: -1, notes: map[string]string{}}
	w := d.work
	var killWin, foWin int
	s.phases = []phase{
		{
			at:    0,
			title: "normal routing",
			what: fmt.Sprintf("writes and transactions on the primary %s; reads on the replicas that hold each writer's last write",
				n.primary.Name()),
		},
		{
			at:    0.15,
			title: "replay paused on " + n.paused.Name(),
			what: fmt.Sprintf("%s still receives WAL but applies none: once its lag bound passes pgrouted_max_lag=%v, reads leave it",
				n.paused.Name(), maxLag),
			action: func(ctx context.Context) error {
				s.note(n.paused.Name(), "replay paused")
				return n.paused.PauseReplay(ctx)
			},
		},
		{
			at:    0.33,
			title: "replay resumed on " + n.paused.Name(),
			what:  n.paused.Name() + " catches up in a moment and serves reads again",
			action: func(ctx context.Context) error {
				err := n.paused.ResumeReplay(ctx)
				s.note(n.paused.Name(), "")
				return err
			},
		},
		{
			at:    0.42,
			title: n.killed.Name() + " killed",
			what: n.killed.Name() + " got SIGKILL: its circuit opens after 2 failed probes; reads go on elsewhere, " +
				"retried when they were on it (read-only transactions on it are cut)",
			action: func(ctx context.Context) error {
				killWin = w.openWindow(n.killed.Name() + " killed")
				s.note(n.killed.Name(), "killed")
				return n.killed.Kill(ctx)
			},
		},
		{
			at:    0.55,
			title: n.killed.Name() + " started again",
			what:  "crash recovery, then a successful probe closes its circuit and it serves reads again",
			action: func(ctx context.Context) error {
				s.note(n.killed.Name(), "starting: crash recovery")
				if err := n.killed.Start(ctx); err != nil {
					return err
				}
				s.note(n.killed.Name(), "restarted")
				w.closeWindow(killWin, 2*time.Second)
				// What the phase shows (its circuit closed, reads on it
				// again) before the failover begins: a slow machine's
				// crash recovery leaves the probes less time.
				if !d.serving(ctx, n.killed.Name(), servingWait) {
					s.note(n.killed.Name(), "restarted, not serving yet")
				}
				return ctx.Err()
			},
		},
		{
			at:    0.65,
			title: "failover",
			what: fmt.Sprintf("%s stopped, %s promoted, the other replicas follow it: writes wait for the new primary, then resume there",
				n.primary.Name(), n.promoted.Name()),
			action: func(ctx context.Context) error {
				s.note(n.killed.Name(), "")
				f := &w.fo
				f.mu.Lock()
				f.to = n.promoted.Name()
				f.stoppedAt = time.Now()
				f.onFirst = func() {
					d.events.note("demo", "first write on the new primary %s", n.promoted.Name())
					w.closeWindow(foWin, 2*time.Second)
				}
				f.mu.Unlock()
				foWin = w.openWindow("failover")
				s.note(n.primary.Name(), "stopping")
				if err := n.primary.Stop(ctx); err != nil {
					return err
				}
				s.note(n.primary.Name(), "stopped")
				if err := n.promoted.Promote(ctx); err != nil {
					return err
				}
				s.note(n.promoted.Name(), "promoted")
				for _, f := range n.follow {
					if err := f.Follow(ctx, n.promoted); err != nil {
						return err
					}
					s.note(f.Name(), "follows "+n.promoted.Name())
				}
				return nil
			},
		},
		{
			at:    0.8,
			title: "after the failover",
			what: fmt.Sprintf("%s is the primary; the old primary %s stays down; reads on the replicas that follow %s",
				n.promoted.Name(), n.primary.Name(), n.promoted.Name()),
			action: func(ctx context.Context) error {
				// What the phase shows (writes on the new primary)
				// before the story ends: on a slow machine the
				// failover's steps can take the time the phase had.
				w.fo.waitFirst(ctx, servingWait)
				return ctx.Err()
			},
		},
	}
	return s
}

func (s *story) note(host, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if text == "" {
		delete(s.notes, host)
	} else {
		s.notes[host] = text
	}
}

// current returns the current phase's number (1-based, 0 before the
// first), title and text, and the notes per host.
func (s *story) current() (int, phase, map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	notes := make(map[string]string, len(s.notes))
	for k, v := range s.notes {
		notes[k] = v
	}
	if s.cur < 0 {
		return 0, phase{title: "starting"}, notes
	}
	return s.cur + 1, s.phases[s.cur], notes
}

// summaries returns the phases started so far.
func (s *story) summaries() []PhaseSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]PhaseSummary(nil), s.done...)
}

// run plays the story from start over duration, and returns when it is
// over (nil), when ctx ends (its error) or when an action fails. changed
// is called at each phase start. An action that runs past the next
// phase's time (a slow machine's server start, promotion or wait) moves
// the rest of the story, its end included, by as much: every later phase
// keeps its length.
func (s *story) run(ctx context.Context, start time.Time, duration time.Duration, events *eventLog, changed func()) error {
	var slip time.Duration
	at := func(f float64) time.Time { return start.Add(time.Duration(f*float64(duration)) + slip) }
	for i, p := range s.phases {
		if err := sleepUntil(ctx, at(p.at)); err != nil {
			return err
		}
		began := time.Now()
		s.mu.Lock()
		s.cur = i
		s.done = append(s.done, PhaseSummary{Title: p.title, StartMs: ms(began.Sub(start))})
		s.mu.Unlock()
		events.note("demo", "phase %d/%d: %s", i+1, len(s.phases), p.title)
		changed()
		if p.action != nil {
			if err := p.action(ctx); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("phase %q: %w", p.title, err)
			}
		}
		s.mu.Lock()
		s.done[len(s.done)-1].TookMs = ms(time.Since(began))
		s.mu.Unlock()
		next := 1.0
		if i+1 < len(s.phases) {
			next = s.phases[i+1].at
		}
		if late := time.Since(at(next)); late > 0 {
			slip += late
		}
	}
	return sleepUntil(ctx, at(1))
}

// servingWait bounds how long the story waits for a host started again
// to serve reads (demo.serving).
const servingWait = 15 * time.Second

// serving reports whether the connector sees host name healthy with its
// circuit closed, waiting for it at most limit.
func (d *demo) serving(ctx context.Context, name string, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); ; {
		for _, h := range d.conn.Topology().Hosts {
			if h.Name == name && h.Healthy && h.Circuit == "closed" {
				return true
			}
		}
		if time.Now().After(deadline) || sleepUntil(ctx, time.Now().Add(50*time.Millisecond)) != nil {
			return false
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
