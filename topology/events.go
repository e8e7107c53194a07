package topology

import "time"

// EventKind says what changed.
type EventKind uint8

const (
	// EventHostUp: a host answered a probe after failing (or at its first
	// probe).
	EventHostUp EventKind = iota + 1
	// EventHostDown: a host's probe failed after succeeding (or at its
	// first probe).
	EventHostDown
	// EventPrimaryChanged: a host became the primary; Previous names the
	// one before, if any. Epoch is the new epoch when the host differs
	// from the last primary.
	EventPrimaryChanged
	// EventPrimaryLost: no host is primary any more (failover in progress,
	// lease expired, or conflict).
	EventPrimaryLost
	// EventConflict: two or more hosts are out of recovery and no timeline
	// is strictly highest among them: there is no primary (fail closed).
	EventConflict
	// EventHostAdded: a member the provider reports became a host
	// (Options.Discover).
	EventHostAdded
	// EventHostRemoved: a discovered host left the provider's view; it is
	// no longer probed.
	EventHostRemoved
	// EventPrivilegeMissing: the probing role lacks Privilege (a grant,
	// such as [GrantReadFile]); Err says what is lost without it. Sent once
	// per grant and Topology, naming the first host that showed it.
	EventPrivilegeMissing
)

// String names the kind.
func (k EventKind) String() string {
	switch k {
	case EventHostUp:
		return "host-up"
	case EventHostDown:
		return "host-down"
	case EventPrimaryChanged:
		return "primary-changed"
	case EventPrimaryLost:
		return "primary-lost"
	case EventConflict:
		return "primary-conflict"
	case EventHostAdded:
		return "host-added"
	case EventHostRemoved:
		return "host-removed"
	case EventPrivilegeMissing:
		return "privilege-missing"
	}
	return "unknown"
}

// Event is one change in the topology.
type Event struct {
	Kind     EventKind
	Host     string // the host concerned, if any
	Previous string // the previous primary, for primary events
	Epoch    uint64
	Err      string // the probe error, for EventHostDown; the effect, for EventPrivilegeMissing
	// Privilege is the missing grant, for EventPrivilegeMissing.
	Privilege string
	Time      time.Time
}

type subscription struct {
	ch chan Event
}

// Events returns the subscription New made under Options.EventBuffer,
// before any probe: it misses no event. It is nil when EventBuffer was 0.
// Close closes it.
func (t *Topology) Events() <-chan Event { return t.events }

// Subscribe returns a channel of events, buffered with room for buffer of
// them, and a function that cancels the subscription and closes the channel.
// Events that find the channel full are dropped (and counted by
// [Topology.Dropped]): the tracker never waits for a subscriber. Close
// closes every subscription's channel.
func (t *Topology) Subscribe(buffer int) (<-chan Event, func()) {
	s := &subscription{ch: make(chan Event, max(buffer, 1))}
	t.subMu.Lock()
	select {
	case <-t.done:
		close(s.ch)
	default:
		t.subs[s] = struct{}{}
	}
	t.subMu.Unlock()
	return s.ch, func() {
		t.subMu.Lock()
		defer t.subMu.Unlock()
		if _, ok := t.subs[s]; ok {
			delete(t.subs, s)
			close(s.ch)
		}
	}
}

func (tr *tracker) emit(e Event) {
	e.Time = time.Now()
	t := tr.t
	t.subMu.Lock()
	defer t.subMu.Unlock()
	for s := range t.subs {
		select {
		case s.ch <- e:
		default:
			t.dropped.Add(1)
		}
	}
}
