package circuit

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// pgError stands in for *pgconn.PgError: all Classify needs is SQLState.
type pgError struct{ code, msg string }

func (e *pgError) Error() string    { return "ERROR: " + e.msg + " (SQLSTATE " + e.code + ")" }
func (e *pgError) SQLState() string { return e.code }

// connectError stands in for *pgconn.ConnectError: a wrapper.
type connectError struct{ err error }

func (e *connectError) Error() string { return "failed to connect: " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

func TestClassify(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()
	live := context.Background()

	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	closed := &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}

	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want Verdict
	}{
		{"nil", live, nil, NotFailure},
		{"nil ctx", nil, refused, Failure},

		// The caller gave up: nothing is blamed, whatever the error.
		{"ctx canceled", canceled, refused, NotFailure},
		{"ctx past its deadline", expired, &connectError{context.DeadlineExceeded}, NotFailure},
		{"context.Canceled", live, fmt.Errorf("query: %w", context.Canceled), NotFailure},

		// The server answered about the statement.
		{"syntax error", live, &pgError{"42601", "syntax error at or near \"SELEC\""}, NotFailure},
		{"unique violation", live, &pgError{"23505", "duplicate key value violates unique constraint"}, NotFailure},
		{"recovery conflict", live, fmt.Errorf("read: %w", &pgError{"40001", "canceling statement due to conflict with recovery"}), NotFailure},
		{"recovery conflict, database dropped", live, &pgError{"57P04", "terminating connection due to conflict with recovery"}, NotFailure},
		{"statement timeout", live, &pgError{"57014", "canceling statement due to statement timeout"}, NotFailure},
		{"read-only transaction", live, &pgError{"25006", "cannot execute INSERT in a read-only transaction"}, NotFailure},
		{"authentication", live, &connectError{&pgError{"28P01", "password authentication failed"}}, NotFailure},
		{"disk full", live, &pgError{"53100", "could not extend file"}, NotFailure},

		// The server says it is unusable.
		{"connection failure", live, &pgError{"08006", "connection failure"}, Failure},
		{"protocol violation", live, &pgError{"08P01", "protocol violation"}, Failure},
		{"admin shutdown", live, &pgError{"57P01", "terminating connection due to administrator command"}, Failure},
		{"crash shutdown", live, &pgError{"57P02", "terminating connection because of crash of another server process"}, Failure},
		{"starting up", live, &connectError{&pgError{"57P03", "the database system is starting up"}}, Failure},
		{"too many connections", live, &connectError{&pgError{"53300", "sorry, too many clients already"}}, Failure},
		{"short code", live, &pgError{"08", "?"}, NotFailure},

		// The network says it is unusable.
		{"refused", live, &connectError{refused}, Failure},
		{"reset", live, fmt.Errorf("receive: %w", syscall.ECONNRESET), Failure},
		{"aborted", live, syscall.ECONNABORTED, Failure},
		{"host unreachable", live, syscall.EHOSTUNREACH, Failure},
		{"network unreachable", live, syscall.ENETUNREACH, Failure},
		{"timed out", live, syscall.ETIMEDOUT, Failure},
		{"broken pipe", live, fmt.Errorf("send: %w", syscall.EPIPE), Failure},
		{"dial timeout", live, &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}, Failure},
		{"i/o deadline", live, os.ErrDeadlineExceeded, Failure},
		{"dns", live, &net.DNSError{Err: "no such host", Name: "db9", IsNotFound: true}, Failure},
		{"connect timeout below the caller", live, &connectError{fmt.Errorf("timeout: %w", context.DeadlineExceeded)}, Failure},
		{"unexpected EOF", live, io.ErrUnexpectedEOF, Failure},
		{"server closed the connection", live, fmt.Errorf("receive message failed: %w", io.EOF), Failure},

		// End of rows.
		{"bare io.EOF", live, io.EOF, NotFailure},

		// Cannot tell.
		{"closed locally", live, closed, Unknown},
		{"bad conn", live, driver.ErrBadConn, Unknown},
		{"bad conn wrapped", live, fmt.Errorf("x: %w", driver.ErrBadConn), Unknown},
		{"other", live, errors.New("tls: failed to verify certificate"), Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.ctx, tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// A real refused connection: a port that was just listened on and closed.
func TestClassifyRealRefusal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		conn.Close()
		t.Fatalf("%s accepted a connection after its listener closed", addr)
	}
	if got := Classify(context.Background(), err); got != Failure {
		t.Fatalf("Classify(%v) = %v, want failure", err, got)
	}
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[Verdict]string{NotFailure: "not-failure", Failure: "failure", Unknown: "unknown", 9: "Verdict(9)"} {
		if got := v.String(); got != want {
			t.Errorf("%d: %q, want %q", v, got, want)
		}
	}
}
