package web_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/web"
)

// TestWriteError: each sentinel, wrapped as pgrouted returns it and once
// more by the application, gets its answer.
func TestWriteError(t *testing.T) {
	for _, tc := range []struct {
		err        error
		code       int
		retryAfter string
	}{
		{&pgrouted.RouteError{Op: pgrouted.OpWrite, Reason: pgrouted.ReasonNoPrimary}, http.StatusServiceUnavailable, "2"},
		{&pgrouted.RouteError{Op: pgrouted.OpRead, Reason: pgrouted.ReasonBehind}, http.StatusServiceUnavailable, "1"},
		{&pgrouted.RouteError{Op: pgrouted.OpWrite, Reason: pgrouted.ReasonPrimaryLost}, http.StatusGatewayTimeout, ""},
		{errors.New("syntax error"), http.StatusInternalServerError, ""},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("create note: %w", tc.err)} {
			rec := httptest.NewRecorder()
			web.WriteError(rec, err)
			if rec.Code != tc.code || rec.Header().Get("Retry-After") != tc.retryAfter {
				t.Errorf("%v: %d, Retry-After %q; want %d, %q", err, rec.Code, rec.Header().Get("Retry-After"), tc.code, tc.retryAfter)
			}
		}
	}
}
