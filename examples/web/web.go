// Package web is the answer an HTTP handler gives for each of pgrouted's
// errors. The README quotes it, and the notes service in examples/nethttp
// uses it. (A user's read-your-writes Session is carried from one instance
// to the next by package pgroutedhttp: see examples/nethttp.)
package web

import (
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
