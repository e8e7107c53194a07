package topology

import (
	"context"
	"errors"
	"slices"
	"sync"
)

// Manual is a [Provider] driven by code: an orchestrator, an application
// that knows its cluster, or a test. Its view is what was last set; every
// change is published on Changes. The zero value is not usable: build it
// with [NewManual].
type Manual struct {
	mu      sync.Mutex
	members []Member
	down    error
	changes chan struct{}
}

// NewManual returns a Manual provider with no member (so no primary).
func NewManual() *Manual {
	return &Manual{changes: make(chan struct{}, 1)}
}

// Name implements Provider: "manual".
func (m *Manual) Name() string { return "manual" }

// Changes implements Provider.
func (m *Manual) Changes() <-chan struct{} { return m.changes }

// Current implements Provider: the members last set, or the error of
// [Manual.SetUnavailable].
func (m *Manual) Current(context.Context) (View, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down != nil {
		return View{}, m.down
	}
	return View{Members: slices.Clone(m.members), Endpoint: "manual"}, nil
}

// SetMembers replaces the whole view. A member that should serve needs
// State [StateRunning] or [StateStreaming]; the primary needs Role
// [MemberLeader] as well.
func (m *Manual) SetMembers(members []Member) {
	m.mu.Lock()
	m.members = slices.Clone(members)
	m.mu.Unlock()
	m.notify()
}

// SetPrimary names the member at host:port the running leader: it is added
// when absent, and any other leader becomes a running replica.
func (m *Manual) SetPrimary(host string, port uint16) {
	m.mu.Lock()
	found := false
	for i := range m.members {
		mb := &m.members[i]
		switch {
		case mb.matches(host, port):
			mb.Role, mb.State, found = MemberLeader, StateRunning, true
		case mb.IsLeader():
			mb.Role = MemberReplica
		}
	}
	if !found {
		m.members = append(m.members, Member{Name: host, Host: host, Port: port, Role: MemberLeader, State: StateRunning, Lag: -1})
	}
	m.mu.Unlock()
	m.notify()
}

// ClearPrimary leaves the view without leader: every leader becomes a
// replica. Writes wait for the next SetPrimary (up to
// pgrouted_write_timeout).
func (m *Manual) ClearPrimary() {
	m.mu.Lock()
	for i := range m.members {
		if m.members[i].IsLeader() {
			m.members[i].Role = MemberReplica
		}
	}
	m.mu.Unlock()
	m.notify()
}

// SetUnavailable makes Current fail with err (nil: answer again), as a
// provider that cannot be reached: its lease is not refreshed.
func (m *Manual) SetUnavailable(err error) {
	if err != nil && err.Error() == "" {
		err = errors.New("manual provider unavailable")
	}
	m.mu.Lock()
	m.down = err
	m.mu.Unlock()
	m.notify()
}

func (m *Manual) notify() {
	select {
	case m.changes <- struct{}{}:
	default:
	}
}
