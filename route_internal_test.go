package pgrouted

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRouteErrorSafeToRetry: pgconn.SafeToRetry sees a RouteError through
// wrapping, for every Reason a RouteError is made with (plan.fallback's
// no-replica reasons, the replica path's, primaryConn's, outcomeUnknown's),
// and the RouteError decides, not the cause it wraps.
func TestRouteErrorSafeToRetry(t *testing.T) {
	// A cause pgconn calls safe (nothing sent, as pgconn's own errors say
	// it), and one it does not (a server's answer).
	var dialErr error = safeCause{}
	if !pgconn.SafeToRetry(dialErr) {
		t.Fatal("safeCause")
	}
	refused := &pgconn.PgError{Severity: "ERROR", Code: "25006", Message: "cannot execute INSERT in a read-only transaction"}
	conflict := &pgconn.PgError{Severity: "ERROR", Code: "40001", Message: "canceling statement due to conflict with recovery"}
	broken := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	for _, tc := range []struct {
		reason Reason
		op     string
		cause  error
		want   bool
	}{
		{ReasonNoReplicas, OpRead, nil, true},
		{ReasonUnhealthy, OpRead, nil, true},
		{ReasonUnhealthy, OpRead, conflict, true},
		{ReasonUnhealthy, OpRead, broken, true},
		{ReasonBehind, OpRead, nil, true},
		{ReasonSaturated, OpRead, nil, true},
		{ReasonPositionUnknown, OpRead, nil, true},
		{ReasonCatchingUp, OpRead, nil, true},
		{ReasonDeferred, OpRead, nil, true},
		{ReasonRetry25006, OpRead, refused, true},
		{ReasonWriteOnReplica, OpWrite, nil, true},
		{ReasonWriteOnReplica, OpTx, nil, true},
		{ReasonNoPrimary, OpWrite, nil, true},
		{ReasonNoPrimary, OpWrite, dialErr, true},
		{ReasonPrimaryLost, OpWrite, broken, false},
		{ReasonPrimaryLost, OpWrite, dialErr, false},
	} {
		re := &RouteError{Op: tc.op, Reason: tc.reason, cause: tc.cause}
		for _, err := range []error{
			re,
			fmt.Errorf("handler: %w", re),
			fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", re)),
			errors.Join(errors.New("other"), re),
		} {
			if got := pgconn.SafeToRetry(err); got != tc.want {
				t.Errorf("%s %s (cause %v), as %T: pgconn.SafeToRetry %v, want %v", tc.op, tc.reason, tc.cause, err, got, tc.want)
			}
		}
	}
	// outcomeUnknown, which makes the primary-lost error, over a cause
	// pgconn calls safe.
	if err := outcomeUnknown(OpWrite, broken); pgconn.SafeToRetry(fmt.Errorf("x: %w", err)) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("outcomeUnknown: %v, SafeToRetry %v", err, pgconn.SafeToRetry(err))
	}
}

// safeCause is an error that says, as pgconn's do, that nothing was sent.
type safeCause struct{}

func (safeCause) Error() string     { return "dial: connection refused" }
func (safeCause) SafeToRetry() bool { return true }
