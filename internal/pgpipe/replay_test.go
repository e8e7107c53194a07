//go:build unix

package pgpipe_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/lagmeter"
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
			replay, sent, err := c.Start(ctx, pc, &descs, st, 0x1000000, 0, q, []driver.NamedValue{{Ordinal: 1, Value: 1}}, pgxFormats, false)
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
			_, _, err = c.Start(ctx, pc, &descs, st, 0x1000000, 0, q, []driver.NamedValue{{Ordinal: 1, Value: struct{ x int }{1}}}, pgxFormats, false)
			if !pgpipe.IsEncodeError(err) {
				t.Fatalf("an argument the statement cannot take: %v, want an encoding error", err)
			}
		}
	}
}

// TestReadBound: a read sent with SawSQL after it (QueryRead, ExecRead,
// Pending.StartRead), named or not, returns its rows as a plain query
// does, and the bound read after it is at or past the WAL insert position
// before it (on a server not in recovery, SawSQL reads the insert
// position); the connection is idle and usable after.
func TestReadBound(t *testing.T) {
	ctx := testCtx(t)
	pc, err := pgx.Connect(ctx, cluster.Primary().DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	insert := func() lagmeter.LSN {
		t.Helper()
		var text string
		if err := pc.QueryRow(ctx, pgpipe.InsertPositionSQL).Scan(&text); err != nil {
			t.Fatal(err)
		}
		lsn, err := lagmeter.ParseLSN(text)
		if err != nil {
			t.Fatal(err)
		}
		return lsn
	}
	var descs pgpipe.Descs
	args := []driver.NamedValue{{Ordinal: 1, Value: 41}}
	const q = "SELECT $1::int + 1"
	for _, st := range []*pgpipe.Stmts{nil, pgpipe.StmtsOf(pc.PgConn(), 8)} {
		for range 2 { // the second time, prepared and described
			before := insert()
			var got lagmeter.LSN
			rows, err := pgpipe.QueryRead(ctx, pc, &descs, st, q, args, pgpipe.SawSQL, func(pos lagmeter.LSN, err error) {
				if err != nil {
					t.Errorf("read: %v", err)
				}
				got = pos
			})
			if err != nil {
				t.Fatal(err)
			}
			dest := make([]driver.Value, 1)
			if err := rows.Next(dest); err != nil || dest[0] != int64(42) {
				t.Fatalf("named %v: row %v, %v", st != nil, dest[0], err)
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
			if got < before || got == 0 {
				t.Fatalf("named %v: QueryRead's bound %v, before it %v", st != nil, got, before)
			}
			before = insert()
			if _, pos, err := pgpipe.ExecRead(ctx, pc, &descs, st, q, args); err != nil || pos < before {
				t.Fatalf("named %v: ExecRead's bound %v, %v; before it %v", st != nil, pos, err, before)
			}
			before = insert()
			var p pgpipe.Pending
			if err := p.StartRead(ctx, pc, &descs, st, q, args, true); err != nil {
				t.Fatal(err)
			}
			for p.RR.NextRow() {
			}
			_, rerr := p.RR.Close()
			if pos, sent, err := p.Finish(rerr); err != nil || !sent || pos < before {
				t.Fatalf("named %v: StartRead's bound %v, %v, %v; before it %v", st != nil, pos, sent, err, before)
			}
		}
	}
}
