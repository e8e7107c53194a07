package circuit

import "fmt"

// State is the state of a [Breaker]. Its zero value is [Closed]. It
// marshals as text ("closed", "open"), so JSON shows the name.
type State uint32

const (
	// Closed: the endpoint takes traffic; failures are counted.
	Closed State = iota
	// Open: the endpoint is out of rotation until a probe succeeds.
	Open
)

// String returns "closed" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	}
	return fmt.Sprintf("State(%d)", uint32(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s State) MarshalText() ([]byte, error) {
	switch s {
	case Closed, Open:
		return []byte(s.String()), nil
	}
	return nil, fmt.Errorf("circuit: invalid state %d", uint32(s))
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *State) UnmarshalText(text []byte) error {
	switch string(text) {
	case "closed":
		*s = Closed
	case "open":
		*s = Open
	default:
		return fmt.Errorf("circuit: invalid state %q (want closed or open)", text)
	}
	return nil
}

// Source says where a reported result came from.
type Source uint8

const (
	// Probe: the topology prober's health check of the endpoint.
	Probe Source = iota + 1
	// Data: the data path, a connection to the endpoint used for a query.
	Data
)

// String returns "probe" or "data".
func (s Source) String() string {
	switch s {
	case Probe:
		return "probe"
	case Data:
		return "data"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s Source) MarshalText() ([]byte, error) {
	switch s {
	case Probe, Data:
		return []byte(s.String()), nil
	}
	return nil, fmt.Errorf("circuit: invalid source %d", uint8(s))
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Source) UnmarshalText(text []byte) error {
	switch string(text) {
	case "probe":
		*s = Probe
	case "data":
		*s = Data
	default:
		return fmt.Errorf("circuit: invalid source %q (want probe or data)", text)
	}
	return nil
}
