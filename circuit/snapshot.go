package circuit

import "time"

// Snapshot is what a [Breaker] has seen, for a topology snapshot and for
// metrics. It marshals to JSON with camelCase keys; durations are
// nanoseconds, as time.Duration marshals.
type Snapshot struct {
	// Name is the breaker's name (its endpoint).
	Name string `json:"name"`
	// State is "closed" or "open" in JSON.
	State State `json:"state"`
	// Failures is the number of consecutive failures counted: probes and
	// data path while closed, failed probes only while open. A success
	// while closed, or the probe that closes it, resets it.
	Failures int `json:"failures"`
	// FailedProbes is the number of consecutive failed probes since the
	// circuit opened, the exponent of the backoff; 0 while closed.
	FailedProbes int `json:"failedProbes"`
	// Opened is how many times the circuit has opened.
	Opened uint64 `json:"opened"`
	// LastChange is when the state last changed; zero (and left out of
	// JSON) if it never did.
	LastChange time.Time `json:"lastChange,omitzero"`
	// Backoff is the wait before the next probe, as
	// [Breaker.ProbeBackoff] returns it.
	Backoff time.Duration `json:"backoff"`
	// ProbeFailures and DataFailures are the failures ever reported by
	// each source, whether they counted or not.
	ProbeFailures uint64 `json:"probeFailures"`
	DataFailures  uint64 `json:"dataFailures"`
	// IgnoredWhileOpen is the number of data-path reports (failures and
	// successes) that arrived while the circuit was open, from requests
	// routed before it opened; they change nothing.
	IgnoredWhileOpen uint64 `json:"ignoredWhileOpen"`
}

// Snapshot returns a copy of the breaker's state and counters, taken under
// the breaker's mutex (only IgnoredWhileOpen may run ahead of the rest). It
// is not meant for the routing hot path.
func (b *Breaker) Snapshot() Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Snapshot{
		Name:             b.name,
		State:            State(b.state.Load()),
		Failures:         int(b.fails.Load()),
		FailedProbes:     b.failedProbes,
		Opened:           b.opened,
		LastChange:       b.lastChange,
		Backoff:          time.Duration(b.backoff.Load()),
		ProbeFailures:    b.probeFailures,
		DataFailures:     b.dataFailures,
		IgnoredWhileOpen: b.ignored.Load(),
	}
}
