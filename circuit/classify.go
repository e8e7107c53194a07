package circuit

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
)

// Verdict is what [Classify] makes of a data-path error.
type Verdict uint8

const (
	// NotFailure: the error says nothing against the endpoint; do not
	// report it.
	NotFailure Verdict = iota
	// Failure: the endpoint is unusable; report it with
	// [Breaker.ReportFailure].
	Failure
	// Unknown: the standard library alone cannot tell; the caller decides
	// (for example with pgconn), and when in doubt does not report.
	Unknown
)

// String returns "not-failure", "failure" or "unknown".
func (v Verdict) String() string {
	switch v {
	case NotFailure:
		return "not-failure"
	case Failure:
		return "failure"
	case Unknown:
		return "unknown"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Classify sorts an error from using a connection to an endpoint, with
// only what the standard library can see. ctx is the context the failed
// operation ran under, or nil.
//
// In this order:
//   - nil: [NotFailure];
//   - ctx done, or the error is context.Canceled: [NotFailure], the caller
//     gave up;
//   - an error in the chain has a SQLSTATE (a method SQLState() string, as
//     pgconn's *PgError has): the server answered. [Failure] for class 08
//     (connection exception), 57P01 admin_shutdown, 57P02 crash_shutdown,
//     57P03 cannot_connect_now (starting up, or in recovery without hot
//     standby) and 53300 too_many_connections; [NotFailure] for every other
//     code: a syntax error, a unique violation, a statement timeout, a
//     standby's recovery conflict (40001, or 57P04 for a dropped database),
//     an authentication failure (the same everywhere; the probes, with the
//     same credentials, open the circuit if it persists). Note that 57P01
//     is also what pg_terminate_backend gives;
//   - net.ErrClosed or driver.ErrBadConn: [Unknown], a connection that is
//     bad or was closed locally says nothing about which side broke it;
//   - a net.Error (a refused or reset connection, a dial or I/O timeout,
//     a DNS failure), a connection errno (ECONNREFUSED, ECONNRESET,
//     ECONNABORTED, EHOSTUNREACH, ENETUNREACH, ETIMEDOUT, EPIPE),
//     io.ErrUnexpectedEOF, io.EOF wrapped in another error (the server
//     closed the connection), or context.DeadlineExceeded while ctx is not
//     done (a timeout set below the caller, such as a connect timeout):
//     [Failure];
//   - a bare io.EOF: [NotFailure], it is the end of rows, not an error;
//   - anything else: [Unknown].
func Classify(ctx context.Context, err error) Verdict {
	if err == nil {
		return NotFailure
	}
	if ctx != nil && ctx.Err() != nil {
		return NotFailure
	}
	if errors.Is(err, context.Canceled) {
		return NotFailure
	}
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		return classifySQLState(coded.SQLState())
	}
	if errors.Is(err, net.ErrClosed) || errors.Is(err, driver.ErrBadConn) {
		return Unknown
	}
	if err == io.EOF {
		return NotFailure
	}
	var netErr net.Error
	switch {
	case errors.As(err, &netErr),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.ETIMEDOUT),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, io.EOF),
		errors.Is(err, context.DeadlineExceeded):
		return Failure
	}
	return Unknown
}

func classifySQLState(code string) Verdict {
	if len(code) == 5 && code[:2] == "08" {
		return Failure
	}
	switch code {
	case "57P01", "57P02", "57P03", "53300":
		return Failure
	}
	return NotFailure
}
