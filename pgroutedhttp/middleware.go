package pgroutedhttp

import (
	"math"
	"net/http"
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
// Max-Age. Set the fields before the middleware serves a request, and do
// not copy an Options after first use (it holds a counter).
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
	// until it closes.
	MaxAge time.Duration

	// Secure marks the cookie Secure on every response, not only on those
	// to requests that came over TLS: set it behind a proxy that
	// terminates TLS (the request's TLS field is then nil).
	Secure bool

	rejected atomic.Uint64
}

// DefaultOptions are the options of [Middleware]. Change its fields only
// before Middleware serves a request.
var DefaultOptions = &Options{}

// Middleware is DefaultOptions.Middleware(next): see [Options.Middleware].
func Middleware(next http.Handler) http.Handler {
	return DefaultOptions.Middleware(next)
}

// Middleware returns a handler that runs next with the user's
// [pgrouted.Session] in the request's context, restored from the request's
// token (header, else cookie; a fresh Session when there is none, or when
// it cannot be trusted), and sends the updated token back (cookie and
// header) with the response's header. See the package documentation.
func (o *Options) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, cookie := o.session(r)
		rw := &responseWriter{ResponseWriter: w, o: o, s: s, tls: r.TLS != nil, cookie: cookie}
		next.ServeHTTP(rw, r.WithContext(pgrouted.WithSession(r.Context(), s)))
		rw.sendToken()
	})
}

// Rejected is the number of tokens ignored so far by the handlers of o:
// malformed ones, and ones of another cluster, found by a read (see the
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

// session restores the Session of r's token, and returns the value of r's
// cookie ("" when it has none).
func (o *Options) session(r *http.Request) (*pgrouted.Session, string) {
	s := pgrouted.NewSession()
	s.IgnoreForeign(o.reject)
	var cookie string
	if c, err := r.Cookie(o.cookieName()); err == nil {
		cookie = c.Value
	}
	token := r.Header.Get(o.headerName())
	if token == "" {
		token = fromCookie(cookie)
	}
	if token != "" {
		if err := s.UnmarshalText([]byte(token)); err != nil {
			// s is left as it was: fresh.
			o.reject()
		}
	}
	return s, cookie
}

// cookieSemicolon is how a cookie spells the ";" of a token (a cookie's
// value cannot hold one).
const cookieSemicolon = "%3B"

func toCookie(token string) string   { return strings.ReplaceAll(token, ";", cookieSemicolon) }
func fromCookie(value string) string { return strings.ReplaceAll(value, cookieSemicolon, ";") }

// setToken puts s's token on h, the response's header: the header, and a
// cookie unless the request's cookie holds it already (one that holds
// another token, when s has none, is deleted).
func (o *Options) setToken(h http.Header, s *pgrouted.Session, requestCookie string, tls bool) {
	b, err := s.MarshalText()
	if err != nil {
		return
	}
	token := string(b)
	if token != "" {
		h.Set(o.headerName(), token)
	}
	value := toCookie(token)
	if value == requestCookie {
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
