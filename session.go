package pgrouted

import (
	"errors"
	"fmt"
	"time"

	"github.com/pgrouted/pgrouted/internal/consistency"
)

// Session is one user's read-your-writes state: the WAL position of their
// last write. Reads made with [WithSession] need only that position on a
// replica, not every write of the process; writes made with it raise it.
//
// A Session travels between processes (a cookie, a header) as text:
// MarshalText and UnmarshalText, or signed: MarshalSigned and
// UnmarshalSigned. The text is versioned and names the
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

// MaxTokenLen is the longest token, signed or not, that
// [Session.UnmarshalText] and [Session.UnmarshalSigned] read: a longer one
// is refused for its length before any decoding or HMAC, so that a huge
// token (a 1 MiB cookie) costs no more than a legitimate one. A token
// carries one position, so the longest one this version writes is 54
// bytes, 121 signed ("s1.", a 19-digit issue time, the token, a 43-byte
// MAC); 256 leaves twice that. Carriers (package pgroutedhttp, module
// pgroutedgrpc) refuse a longer token before they copy or unescape it, and
// count it as they count a forged one.
const MaxTokenLen = consistency.MaxTokenLen

// ErrForeignSession: a Session's token names another cluster (another
// system identifier) than the one the statement runs on.
var ErrForeignSession = errors.New("pgrouted: session token belongs to another cluster")

// IgnoreForeign makes s, restored from a token that a client could have
// altered (a cookie, a header), treat a token of another cluster as no
// token: a statement that finds s's position on another system identifier
// than its cluster's starts s afresh, as [NewSession] would, instead of
// failing with [ErrForeignSession], and calls dropped (when not nil) once
// for the token it dropped, as it does for a token found forged (see
// [Session.UnmarshalText]); both count in Stats.ForgedTokens. Call it
// before s is used.
func (s *Session) IgnoreForeign(dropped func()) {
	s.s.IgnoreForeign(dropped)
}

// MarshalText implements encoding.TextMarshaler: "" for a Session without
// writes, else the watermark's text form ("v1:<system id>:<timeline>:<LSN>"),
// followed by ";unknown" when the last write's position is not known.
func (s *Session) MarshalText() ([]byte, error) {
	return consistency.AppendToken([]byte{}, s.s.Every().Load())
}

// UnmarshalText implements encoding.TextUnmarshaler. It replaces the
// Session's state with the token's, and rejects a malformed token with an
// error that says what is wrong (one longer than [MaxTokenLen] for its
// length alone, before it is read).
//
// Nothing vouches for such a token: its position is trusted only as far
// as the primary has shown it. A read whose token the newest position of
// the primary this process knows does not show written (past it, on a
// later timeline, or while it knows none) asks the primary for its
// position (one query shared by the reads that wait for it); not written
// by that either, or naming another cluster, the token is forged: the
// read runs as one without a token would, the Session forgets it, and it
// is counted (Stats.ForgedTokens, and the callback of
// [Session.IgnoreForeign], which a token of another cluster needs: without
// it such a token fails the read with [ErrForeignSession]). A wait
// on a replica that misses such a position changes nothing for other
// reads, and after a failover such a token is never reported lost
// (Stats.LostWrites, RouteEvent.WriteLost, the log): only the Session's
// own writes, and signed tokens ([Session.UnmarshalSigned]), are.
func (s *Session) UnmarshalText(text []byte) error {
	return s.restore(text, consistency.Unsigned)
}

// restore replaces the Session's state with the token text's, which
// origin vouches for.
func (s *Session) restore(text []byte, origin consistency.Origin) error {
	wm, unknown, err := consistency.ParseToken(text)
	if err != nil {
		return fmt.Errorf("pgrouted: session token: %w", err)
	}
	s.s.Restore(wm, unknown, origin, consistency.Now())
	return nil
}

// ErrTokenSignature: a token given to [Session.UnmarshalSigned] is not
// signed, its signature does not verify with any of the keys, or it
// expired. The errors wrap it with the reason.
var ErrTokenSignature = consistency.ErrSignature

// MarshalSigned returns the Session's token signed with key, for a carrier
// a client could alter (a cookie, a header, a message). The signed form is
//
//	s1.<issued>.<token>.<mac>
//
// where token is MarshalText's, issued the time of signing in seconds
// since the Unix epoch, and mac the HMAC-SHA256 (keyed with key) of
// everything before the last ".", in unpadded base64url. It is "" for a
// Session without writes. key must be at least 32 bytes (random; a secret
// of the processes that verify); a shorter one is an error.
//
// It signs what the Session holds: one restored with UnmarshalText from a
// token nothing vouched for passes that token's position on, signed.
func (s *Session) MarshalSigned(key []byte) ([]byte, error) {
	token, err := s.MarshalText()
	if err != nil {
		return nil, err
	}
	return consistency.Sign(token, key, time.Now())
}

// UnmarshalSigned replaces the Session's state with that of text, a token
// of MarshalSigned signed with one of keys (the first one signs, each
// verifies: a new key first, the old ones after it, rotates them) and
// issued at most maxAge ago (0: any time; up to a minute in the future,
// for clocks that differ). An unsigned, forged or expired token, one
// signed with another key, or one longer than [MaxTokenLen] (refused
// before any decoding or HMAC) is an error wrapping [ErrTokenSignature]
// and leaves the Session as it was; a key shorter than 32 bytes is an
// error. The signature is compared in constant time. "" restores a
// Session without writes.
//
// A signed token's position was written (the processes that hold the key
// issue it after a write): it is honoured as the Session's own writes
// are, a loss in a failover included.
func (s *Session) UnmarshalSigned(text []byte, keys [][]byte, maxAge time.Duration) error {
	token, err := consistency.Verify(text, keys, maxAge, time.Now())
	if err != nil {
		return err
	}
	return s.restore(token, consistency.Signed)
}
