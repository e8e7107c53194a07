package pgroutedgrpc

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/pgroutedhttp"
)

// MetadataKey is the metadata key that carries a Session's token: in a
// call's request metadata, and in its response's trailer (and a streaming
// call's header).
const MetadataKey = "pgrouted-session"

// DefaultTokenMaxAge is how long a signed token is accepted after it was
// signed when [Options].MaxAge is 0 (as in package pgroutedhttp).
const DefaultTokenMaxAge = pgroutedhttp.DefaultTokenMaxAge

// Options configures the interceptors. The zero value is ready for use:
// unsigned tokens. Set the fields before the first interceptor is built,
// and do not copy an Options after first use (it holds a counter).
type Options struct {
	// Keys sign the tokens (HMAC-SHA256): the first one signs, every one
	// verifies, so that keys rotate (put the new key first, keep the old
	// one after it for MaxAge, then drop it). Each is a secret of at least
	// 32 random bytes, the same in every service of the call chain; the
	// interceptors' constructors panic on a shorter one. With Keys, a
	// token that is not signed, whose signature does not verify with any
	// of them, or that expired is ignored and counted ([Options.Rejected]).
	// See [pgrouted.Session.MarshalSigned] for the form.
	Keys [][]byte

	// MaxAge bounds a signed token's age: one signed longer ago than MaxAge
	// (0: [DefaultTokenMaxAge]) is ignored. It does nothing without Keys.
	MaxAge time.Duration

	rejected atomic.Uint64
}

// DefaultOptions are the options of the package-level interceptors
// ([UnaryServerInterceptor] and the others). Change its fields only before
// the first of them is called.
var DefaultOptions = &Options{}

// Rejected is the number of tokens ignored so far by the interceptors of o
// and by [Options.Restore]: malformed ones; with Keys, unsigned, forged
// and expired ones; found by a read, ones of another cluster and ones
// whose position the database never wrote; and, on the client's side,
// tokens a server sent back that name another cluster than the caller's
// Session.
func (o *Options) Rejected() uint64 { return o.rejected.Load() }

func (o *Options) reject() { o.rejected.Add(1) }

// checkKeys panics when one of o.Keys cannot sign.
func (o *Options) checkKeys() {
	for i, k := range o.Keys {
		if _, err := pgrouted.NewSession().MarshalSigned(k); err != nil {
			panic(fmt.Sprintf("pgroutedgrpc: Options.Keys[%d]: %v", i, err))
		}
	}
}

func (o *Options) tokenMaxAge() time.Duration {
	if o.MaxAge > 0 {
		return o.MaxAge
	}
	return DefaultTokenMaxAge
}

// Token returns s's token, to carry to another process (a message on a
// queue, a job's arguments): its text, or with Keys, signed with the first
// key; "" for a nil Session or one without writes. [Options.Restore] reads
// it back.
func (o *Options) Token(s *pgrouted.Session) (string, error) {
	if s == nil {
		return "", nil
	}
	var b []byte
	var err error
	if len(o.Keys) > 0 {
		b, err = s.MarshalSigned(o.Keys[0])
	} else {
		b, err = s.MarshalText()
	}
	return string(b), err
}

// Restore returns a new Session restored from token, a token of
// [Options.Token] (or of the interceptors), for one request, job or
// message: a fresh Session when token is "", and when it cannot be trusted
// (malformed, or longer than [pgrouted.MaxTokenLen], refused for its
// length alone; with Keys, not signed with one of them, or expired), which
// is then counted ([Options.Rejected]). The Session ignores a token of
// another cluster ([pgrouted.Session.IgnoreForeign]), counting it too,
// instead of failing the first read with [pgrouted.ErrForeignSession].
// Restore never fails.
func (o *Options) Restore(token string) *pgrouted.Session {
	s, _ := o.restore(token)
	return s
}

// restore is Restore; it also returns the Session's text when it was
// restored from token ("" otherwise).
func (o *Options) restore(token string) (*pgrouted.Session, string) {
	s := pgrouted.NewSession()
	s.IgnoreForeign(o.reject)
	if token == "" {
		return s, ""
	}
	if len(token) > pgrouted.MaxTokenLen {
		// Refused before it is copied, verified or parsed.
		o.reject()
		return s, ""
	}
	if err := o.unmarshal(s, token); err != nil {
		// s is left as it was: fresh.
		o.reject()
		return s, ""
	}
	text, err := s.MarshalText()
	if err != nil {
		return s, ""
	}
	return s, string(text)
}

// unmarshal replaces s's state with token's: verified with o.Keys when
// there are some.
func (o *Options) unmarshal(s *pgrouted.Session, token string) error {
	if len(o.Keys) > 0 {
		return s.UnmarshalSigned([]byte(token), o.Keys, o.tokenMaxAge())
	}
	return s.UnmarshalText([]byte(token))
}

// sessionKey is the context key of the Session that the client
// interceptors send.
type sessionKey struct{}

// WithSession returns a context whose statements use s for read-your-writes
// (it calls [pgrouted.WithSession]) and whose gRPC calls, through the
// client interceptors, carry s to the server and bring the server's writes
// back into it. The server interceptors put the caller's Session in the
// handler's context this way: a handler's calls to other services carry it
// on without more code. Use WithSession where a call chain begins (a
// command, a job, an HTTP handler behind pgroutedhttp:
// WithSession(ctx, s) with the Session that pgroutedhttp restored).
func WithSession(ctx context.Context, s *pgrouted.Session) context.Context {
	return context.WithValue(pgrouted.WithSession(ctx, s), sessionKey{}, s)
}

// SessionFrom returns the Session of ctx that [WithSession] or a server
// interceptor put there; nil when there is none. A Session set with
// pgrouted.WithSession alone is not found here: it is not sent.
func SessionFrom(ctx context.Context) *pgrouted.Session {
	s, _ := ctx.Value(sessionKey{}).(*pgrouted.Session)
	return s
}

// position is a token's content: its watermark (zero: none) and whether
// its last write's position is unknown.
type position struct {
	wm      lagmeter.Watermark
	unknown bool
}

// unknownSuffix ends the text of a Session whose last write's position is
// unknown (see pgrouted.Session.MarshalText).
const unknownSuffix = ";unknown"

// parsePosition reads a Session's text (MarshalText's).
func parsePosition(text string) (position, error) {
	var p position
	t, unknown := strings.CutSuffix(text, unknownSuffix)
	p.unknown = unknown
	if t != "" {
		if err := p.wm.UnmarshalText([]byte(t)); err != nil {
			return position{}, err
		}
	}
	return p, nil
}

// text is p as a Session's text.
func (p position) text() string {
	var b []byte
	if !p.wm.IsZero() {
		b, _ = p.wm.MarshalText()
	}
	if p.unknown {
		b = append(b, unknownSuffix...)
	}
	return string(b)
}

// after reports whether w is later than v on the same cluster: a later
// timeline, or the same one and a later LSN.
func after(w, v lagmeter.Watermark) bool {
	if w.Timeline != v.Timeline {
		return w.Timeline > v.Timeline
	}
	return w.LSN > v.LSN
}

// merge returns the position that needs both cur's writes and r's: the
// later watermark, unknown when either is. ok is false when they name two
// clusters.
func merge(cur, r position) (_ position, ok bool) {
	if cur.wm.SystemID != 0 && r.wm.SystemID != 0 && cur.wm.SystemID != r.wm.SystemID {
		return cur, false
	}
	m := position{wm: cur.wm, unknown: cur.unknown || r.unknown}
	if m.wm.IsZero() || (!r.wm.IsZero() && after(r.wm, cur.wm)) {
		m.wm = r.wm
	}
	return m, true
}

// adopt merges into s the token a server sent back: afterwards s needs
// both the writes it held and the server's. A token that cannot be
// trusted, or that names another cluster than s's position, is ignored
// and counted. Nothing changes when s already holds the token's writes.
func (o *Options) adopt(s *pgrouted.Session, token string) {
	if token == "" {
		return
	}
	_, text := o.restore(token)
	if text == "" {
		return // counted by restore when it was not trusted
	}
	r, err := parsePosition(text)
	if err != nil {
		o.reject()
		return
	}
	curText, err := s.MarshalText()
	if err != nil {
		return
	}
	cur, err := parsePosition(string(curText))
	if err != nil {
		return
	}
	m, ok := merge(cur, r)
	switch {
	case !ok:
		o.reject()
	case m == cur:
		// s holds the server's writes already.
	case m == r:
		// The token as it came: signed, it is honoured as s's own writes.
		_ = o.unmarshal(s, token)
	default:
		// Both count (s's position unknown, the server's later): a
		// combination nobody signed.
		_ = s.UnmarshalText([]byte(m.text()))
	}
}
