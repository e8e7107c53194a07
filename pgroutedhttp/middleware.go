package pgroutedhttp

import (
	"fmt"
	"math"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted"
)

// DefaultCookieName and DefaultHeaderName are the names of the cookie and
// of the header that carry the token when [Options] names none.
const (
	DefaultCookieName = "pgrouted_session"
	DefaultHeaderName = "Pgrouted-Session"
)

// Options configures the middleware. The zero value is ready for use:
// cookie pgrouted_session, header Pgrouted-Session, a cookie without
// Max-Age, unsigned tokens. Set the fields before the middleware is built
// ([Options.Middleware]), and do not copy an Options after first use (it
// holds a counter).
type Options struct {
	// CookieName is the cookie's name; "" means [DefaultCookieName].
	CookieName string

	// HeaderName is the name of the request and response header; "" means
	// [DefaultHeaderName]. A request's header, when present, takes
	// precedence over its cookie.
	HeaderName string

	// MaxAge is the cookie's lifetime after the response that sets it (the
	// response to a request that wrote, or whose token changed), rounded up
	// to whole seconds. 0 means no Max-Age: the browser keeps the cookie
	// until it closes. With Keys, it also bounds a token's age: a token
	// signed longer ago than MaxAge (0: [DefaultTokenMaxAge]) is ignored.
	MaxAge time.Duration

	// Keys sign the tokens (HMAC-SHA256): the first one signs, every one
	// verifies, so that keys rotate (put the new key first, keep the old
	// one after it for MaxAge, then drop it). Each is a secret of at
	// least 32 random bytes, the same in every instance; Middleware
	// panics on a shorter one. With Keys, a token that is not signed,
	// whose signature does not verify with any of them, or that expired is
	// ignored and counted ([Options.Rejected]), as one longer than
	// [pgrouted.MaxTokenLen] is (before any HMAC: its cost stays that of a
	// legitimate token). See the package documentation, and
	// [pgrouted.Session.MarshalSigned] for the form.
	Keys [][]byte

	// Secure marks the cookie Secure on every response, not only on those
	// to requests that came over TLS: set it behind a proxy that
	// terminates TLS (the request's TLS field is then nil).
	Secure bool

	rejected atomic.Uint64
}

// DefaultOptions are the options of [Middleware]. Change its fields only
// before Middleware is called.
var DefaultOptions = &Options{}

// DefaultTokenMaxAge is how long a signed token is accepted after it was
// signed when [Options].MaxAge is 0. A token matters only until every
// replica has replayed its position: far longer than that.
const DefaultTokenMaxAge = 24 * time.Hour

// Middleware is DefaultOptions.Middleware(next): see [Options.Middleware].
func Middleware(next http.Handler) http.Handler {
	return DefaultOptions.Middleware(next)
}

// Middleware returns a handler that runs next with the user's
// [pgrouted.Session] in the request's context, restored from the request's
// token (header, else cookie; a fresh Session when there is none, or when
// it cannot be trusted), and sends the updated token back (cookie and
// header) with the response's header. See the package documentation.
// It panics when one of o.Keys is shorter than 32 bytes.
func (o *Options) Middleware(next http.Handler) http.Handler {
	for i, k := range o.Keys {
		if _, err := pgrouted.NewSession().MarshalSigned(k); err != nil {
			panic(fmt.Sprintf("pgroutedhttp: Options.Keys[%d]: %v", i, err))
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, in := o.session(r)
		rw := &responseWriter{ResponseWriter: w, o: o, s: s, tls: r.TLS != nil, in: in}
		next.ServeHTTP(rw, r.WithContext(pgrouted.WithSession(r.Context(), s)))
		rw.sendToken()
	})
}

// Rejected is the number of tokens ignored so far by the handlers of o:
// malformed ones, and those longer than [pgrouted.MaxTokenLen]; with Keys,
// unsigned, forged and expired ones; found by a read, ones of another
// cluster and ones whose position the database never wrote (see the
// package documentation).
func (o *Options) Rejected() uint64 { return o.rejected.Load() }

func (o *Options) reject() { o.rejected.Add(1) }

func (o *Options) cookieName() string {
	if o.CookieName != "" {
		return o.CookieName
	}
	return DefaultCookieName
}

func (o *Options) headerName() string {
	if o.HeaderName != "" {
		return o.HeaderName
	}
	return DefaultHeaderName
}

// received is what a request brought: its cookie's value ("" when it has
// none), and the token the Session was restored from with the Session's
// text then (both "" when none was restored).
type received struct {
	cookie      string
	token, text string
}

// session restores the Session of r's token, and returns it with what r
// brought.
func (o *Options) session(r *http.Request) (*pgrouted.Session, received) {
	s := pgrouted.NewSession()
	s.IgnoreForeign(o.reject)
	var in received
	if raw := rawCookie(r, o.cookieName()); len(raw) > pgrouted.MaxTokenLen {
		// Refused below for its length; r.Cookie would check its every byte.
		in.cookie = raw
	} else if c, err := r.Cookie(o.cookieName()); err == nil {
		in.cookie = c.Value
	}
	token, cookie := r.Header.Get(o.headerName()), false
	if token == "" {
		token, cookie = in.cookie, true
	}
	if token == "" {
		return s, in
	}
	if len(token) > pgrouted.MaxTokenLen {
		// Refused before it is unescaped, verified or parsed: a huge token
		// costs what a legitimate one does.
		o.reject()
		return s, in
	}
	if cookie {
		token = fromCookie(token)
	}
	var err error
	if len(o.Keys) > 0 {
		err = s.UnmarshalSigned([]byte(token), o.Keys, o.tokenMaxAge())
	} else {
		err = s.UnmarshalText([]byte(token))
	}
	if err != nil {
		// s is left as it was: fresh.
		o.reject()
		return s, in
	}
	if text, err := s.MarshalText(); err == nil {
		in.token, in.text = token, string(text)
	}
	return s, in
}

// rawCookie is the value of r's first cookie named name, as r.Cookie finds
// it but neither checked nor unquoted ("" when there is none): enough to
// tell its length, which r.Cookie's check of every byte of the value (5 ns
// a byte) would cost a huge cookie before it is refused for it.
func rawCookie(r *http.Request, name string) string {
	for _, line := range r.Header["Cookie"] {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			n, v, _ := strings.Cut(textproto.TrimString(part), "=")
			if textproto.TrimString(n) == name {
				return v
			}
		}
	}
	return ""
}

func (o *Options) tokenMaxAge() time.Duration {
	if o.MaxAge > 0 {
		return o.MaxAge
	}
	return DefaultTokenMaxAge
}

// marshal returns s's token: its text, or with Keys, signed with the
// first key; the request's own token (in) when s has not changed since it
// was restored from it (it is not signed again: a cookie that does not
// change is not sent again, and an unchanged position keeps its age).
func (o *Options) marshal(s *pgrouted.Session, in received) (string, error) {
	text, err := s.MarshalText()
	if err != nil || len(o.Keys) == 0 {
		return string(text), err
	}
	if in.token != "" && string(text) == in.text {
		return in.token, nil
	}
	b, err := s.MarshalSigned(o.Keys[0])
	return string(b), err
}

// cookieSemicolon is how a cookie spells the ";" of a token (a cookie's
// value cannot hold one).
const cookieSemicolon = "%3B"

func toCookie(token string) string   { return strings.ReplaceAll(token, ";", cookieSemicolon) }
func fromCookie(value string) string { return strings.ReplaceAll(value, cookieSemicolon, ";") }

// setToken puts s's token on h, the response's header: the header, and a
// cookie unless the request's cookie holds it already (one that holds
// another token, when s has none, is deleted). in is what the request
// brought.
func (o *Options) setToken(h http.Header, s *pgrouted.Session, in received, tls bool) {
	token, err := o.marshal(s, in)
	if err != nil {
		return
	}
	if token != "" {
		h.Set(o.headerName(), token)
	}
	value := toCookie(token)
	if value == in.cookie {
		return
	}
	c := &http.Cookie{
		Name:     o.cookieName(),
		Value:    value,
		Path:     "/",
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
		Secure:   tls || o.Secure,
	}
	switch {
	case token == "":
		c.MaxAge = -1
	case o.MaxAge > 0:
		c.MaxAge = int(min(math.Ceil(o.MaxAge.Seconds()), math.MaxInt32))
	}
	if v := c.String(); v != "" {
		h.Add("Set-Cookie", v)
	}
}
