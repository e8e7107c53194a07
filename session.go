package pgrouted

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// Session is one user's read-your-writes state: the WAL position of their
// last write. Reads made with [WithSession] need only that position on a
// replica, not every write of the process; writes made with it raise it.
//
// A Session travels between processes (a cookie, a header) as text:
// MarshalText and UnmarshalText. The text is versioned and names the
// cluster's system identifier, so a token of another cluster is refused
// clearly (an error wrapping [ErrForeignSession]) instead of being trusted.
// A Session is safe for concurrent use.
type Session struct {
	m mark
}

// NewSession returns a Session without writes.
func NewSession() *Session { return &Session{} }

// ErrForeignSession: a Session's token names another cluster (another
// system identifier) than the one the statement runs on.
var ErrForeignSession = errors.New("pgrouted: session token belongs to another cluster")

// unknownSuffix marks a token whose last write's position could not be
// read: the receiving process sends reads to the primary until its own
// primary probe, sent after it received the token, supplies a safe position.
const unknownSuffix = ";unknown"

// MarshalText implements encoding.TextMarshaler: "" for a Session without
// writes, else the watermark's text form ("v1:<system id>:<timeline>:<LSN>"),
// followed by ";unknown" when the last write's position is not known.
func (s *Session) MarshalText() ([]byte, error) {
	st := s.m.load()
	if st.wm.IsZero() && !st.unknown {
		return []byte{}, nil
	}
	var b []byte
	if !st.wm.IsZero() {
		var err error
		if b, err = st.wm.MarshalText(); err != nil {
			return nil, err
		}
	}
	if st.unknown {
		b = append(b, unknownSuffix...)
	}
	return b, nil
}

// UnmarshalText implements encoding.TextUnmarshaler. It replaces the
// Session's state with the token's, and rejects a malformed token with an
// error that says what is wrong.
func (s *Session) UnmarshalText(text []byte) error {
	st := &markState{}
	if t, ok := bytes.CutSuffix(text, []byte(unknownSuffix)); ok {
		text = t
		st.unknown, st.unknownAt = true, time.Now()
	}
	if len(text) > 0 {
		if err := st.wm.UnmarshalText(text); err != nil {
			return fmt.Errorf("pgrouted: session token: %w", err)
		}
	}
	s.m.p.Store(st)
	return nil
}
