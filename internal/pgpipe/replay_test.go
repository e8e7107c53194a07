//go:build unix

package pgpipe_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgrouted/pgrouted/internal/pgpipe"
)

// TestCheckedBehindSkipsTheRead: a server that is not replaying (the
// test's primary: no replay position) fails the check, so the server
// skips the read pipelined after it: Start says ErrBehind with no
// position, and the connection is idle and usable at once, the named
// check included. An argument the statement cannot take fails before
// anything is sent.
func TestCheckedBehindSkipsTheRead(t *testing.T) {
	ctx := testCtx(t)
	pc, err := pgx.Connect(ctx, cluster.Primary().DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, "CREATE TEMP TABLE checked_t (id int PRIMARY KEY, n int DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	var descs pgpipe.Descs
	for _, st := range []*pgpipe.Stmts{nil, pgpipe.StmtsOf(pc.PgConn(), 8)} {
		for _, pgxFormats := range []bool{false, true} {
			// The read would write if it ran: the server must skip it.
			const q = "INSERT INTO checked_t (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET n = checked_t.n + 1 RETURNING n"
			var c pgpipe.Checked
			replay, sent, err := c.Start(ctx, pc, &descs, st, 0x1000000, 0, q, []driver.NamedValue{{Ordinal: 1, Value: 1}}, pgxFormats)
			if !errors.Is(err, pgpipe.ErrBehind) || replay != 0 || sent.IsZero() {
				t.Fatalf("named %v, pgx formats %v: Start = %v, %v, %v; want ErrBehind, no position", st != nil, pgxFormats, replay, sent, err)
			}
			if c.RR != nil {
				t.Fatal("a reader after a failed check")
			}
			var n int
			if err := pc.QueryRow(ctx, "SELECT count(*) FROM checked_t").Scan(&n); err != nil || n != 0 {
				t.Fatalf("after the check: %d rows, %v; want the read skipped and the connection usable", n, err)
			}
			_, _, err = c.Start(ctx, pc, &descs, st, 0x1000000, 0, q, []driver.NamedValue{{Ordinal: 1, Value: struct{ x int }{1}}}, pgxFormats)
			if !pgpipe.IsEncodeError(err) {
				t.Fatalf("an argument the statement cannot take: %v, want an encoding error", err)
			}
		}
	}
}
