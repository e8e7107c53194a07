// Package web is what an HTTP application adds around pgrouted: the answer
// a handler gives for each of pgrouted's errors, and a user's
// read-your-writes Session carried from one instance of the application to
// the next in a cookie. The README quotes it; its tests run it against a
// real primary with two replicas.
package web

import (
	"encoding/base64"
	"errors"
	"net/http"

	"github.com/pgrouted/pgrouted"
)

// WriteError answers a request whose database call failed with err.
func WriteError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, pgrouted.ErrNoPrimary):
		// No primary within pgrouted_write_timeout: nothing ran; retry.
		w.Header().Set("Retry-After", "2")
		http.Error(w, "database failing over; retry", http.StatusServiceUnavailable)
	case errors.Is(err, pgrouted.ErrNoReplica):
		// A read forced to a replica (or pgrouted_fallback=error) found
		// none fresh enough: nothing ran; retry, or read from the primary.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "no replica fresh enough; retry", http.StatusServiceUnavailable)
	case errors.Is(err, pgrouted.ErrOutcomeUnknown):
		// The primary was replaced before it answered: the write may have
		// committed. Never resend it blindly: check first, or send an
		// idempotency key.
		http.Error(w, "outcome unknown; check before retrying", http.StatusGatewayTimeout)
	default:
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}

// SessionCookie is the cookie that carries a user's Session.
const SessionCookie = "pgrouted_session"

// LoadSession returns the user's Session from the request's cookie, or a
// new one. Run the request's statements with pgrouted.WithSession(ctx, s):
// its reads then need on a replica the writes this user made through any
// instance, not only this one's.
func LoadSession(r *http.Request) *pgrouted.Session {
	s := pgrouted.NewSession()
	if c, err := r.Cookie(SessionCookie); err == nil {
		if tok, err := base64.RawURLEncoding.DecodeString(c.Value); err == nil {
			_ = s.UnmarshalText(tok) // a bad token leaves s new
		}
	}
	return s
}

// SaveSession sets the cookie, after the handler's writes and before its
// body. The token is base64: its ";unknown" suffix is not a valid cookie
// value as it is.
func SaveSession(w http.ResponseWriter, s *pgrouted.Session) error {
	tok, err := s.MarshalText()
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: base64.RawURLEncoding.EncodeToString(tok),
		Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	return nil
}
