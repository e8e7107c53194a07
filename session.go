package pgrouted

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// Session is one user's read-your-writes state: the WAL position of their
// last write. Reads made with [WithSession] need only that position on a
// replica, not every write of the process; writes made with it raise it.
//
// A Session travels between processes (a cookie, a header) as text:
// MarshalText and UnmarshalText. The text is versioned and names the
// cluster's system identifier, so a token of another cluster is refused
// clearly (an error wrapping [ErrForeignSession]) instead of being trusted;
// a Session restored from a token its holder could have altered can forget
// such a token instead ([Session.IgnoreForeign]).
// A Session is safe for concurrent use.
type Session struct {
	s consistency.Scopes
}

// NewSession returns a Session without writes.
func NewSession() *Session { return &Session{} }

// ErrForeignSession: a Session's token names another cluster (another
// system identifier) than the one the statement runs on.
var ErrForeignSession = errors.New("pgrouted: session token belongs to another cluster")

// IgnoreForeign makes s, restored from a token that a client could have
// altered (a cookie, a header), treat a token of another cluster as no
// token: a statement that finds s's position on another system identifier
// than its cluster's starts s afresh, as [NewSession] would, instead of
// failing with [ErrForeignSession], and calls dropped (when not nil) once
// for the token it dropped. Call it before s is used.
func (s *Session) IgnoreForeign(dropped func()) {
	s.s.IgnoreForeign(dropped)
}

// unknownSuffix marks a token whose last write's position could not be
// read: the receiving process sends reads to the primary until its own
// primary probe, sent after it received the token, supplies a safe position.
const unknownSuffix = ";unknown"

// MarshalText implements encoding.TextMarshaler: "" for a Session without
// writes, else the watermark's text form ("v1:<system id>:<timeline>:<LSN>"),
// followed by ";unknown" when the last write's position is not known.
func (s *Session) MarshalText() ([]byte, error) {
	st := s.s.Every().Load()
	if st.Empty() {
		return []byte{}, nil
	}
	var b []byte
	if wm := st.Watermark(); !wm.IsZero() {
		var err error
		if b, err = wm.MarshalText(); err != nil {
			return nil, err
		}
	}
	if st.Unknown() {
		b = append(b, unknownSuffix...)
	}
	return b, nil
}

// UnmarshalText implements encoding.TextUnmarshaler. It replaces the
// Session's state with the token's, and rejects a malformed token with an
// error that says what is wrong.
func (s *Session) UnmarshalText(text []byte) error {
	var wm lagmeter.Watermark
	t, unknown := bytes.CutSuffix(text, []byte(unknownSuffix))
	if len(t) > 0 {
		if err := wm.UnmarshalText(t); err != nil {
			return fmt.Errorf("pgrouted: session token: %w", err)
		}
	}
	s.s.Restore(wm, unknown, consistency.Now())
	return nil
}
