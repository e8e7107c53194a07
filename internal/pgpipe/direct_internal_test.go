package pgpipe

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// scriptedConn connects pgx to a scripted server: serve runs on the
// server's side of the connection after the startup, with the backend.
func scriptedConn(t *testing.T, ctx context.Context, serve func(be *pgproto3.Backend)) *pgx.Conn {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer server.Close()
		be := pgproto3.NewBackend(server, server)
		if !acceptStartup(t, be) {
			return
		}
		serve(be)
	}()
	t.Cleanup(func() { <-done })
	cfg, err := pgx.ParseConfig("postgres://u@127.0.0.1:1/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) { return client, nil }
	pc, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close(context.Background()) })
	return pc
}

// receiveSyncs reads messages up to the n-th Sync; it returns the messages'
// types and false when the client went away first.
func receiveSyncs(be *pgproto3.Backend, n int) ([]string, bool) {
	var got []string
	for syncs := 0; syncs < n; {
		msg, err := be.Receive()
		if err != nil {
			return got, false
		}
		switch msg.(type) {
		case *pgproto3.Sync:
			syncs++
			got = append(got, "Sync")
		case *pgproto3.Parse:
			got = append(got, "Parse")
		case *pgproto3.Bind:
			got = append(got, "Bind")
		case *pgproto3.Execute:
			got = append(got, "Execute")
		case *pgproto3.Describe:
			got = append(got, "Describe")
		default:
			got = append(got, "other")
		}
	}
	return got, true
}

// answerStatement answers the statement's segment: it committed.
func answerStatement(be *pgproto3.Backend, tag string) error {
	be.Send(&pgproto3.ParseComplete{})
	be.Send(&pgproto3.BindComplete{})
	be.Send(&pgproto3.NoData{})
	be.Send(&pgproto3.CommandComplete{CommandTag: []byte(tag)})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	return be.Flush()
}

// TestDirectPositionRead: the write sent without a pipeline sends the
// statement and the position query in one round trip, each with its
// Sync, reads the position past a notice, and leaves the connection idle
// and usable by pgx.
func TestDirectPositionRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent := make(chan []string, 1)
	pc := scriptedConn(t, ctx, func(be *pgproto3.Backend) {
		got, ok := receiveSyncs(be, 2)
		sent <- got
		if !ok {
			return
		}
		if answerStatement(be, "INSERT 0 1") != nil {
			return
		}
		be.Send(&pgproto3.ParseComplete{})
		be.Send(&pgproto3.BindComplete{})
		be.Send(&pgproto3.NoticeResponse{Severity: "NOTICE", Code: "00000", Message: "hello"})
		be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("pg_current_wal_insert_lsn"), DataTypeOID: 25, DataTypeSize: -1}}})
		be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte("16/B374D848")}})
		be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
		be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		if be.Flush() != nil {
			return
		}
		// pgx's next statement, on the same connection.
		if msg, err := be.Receive(); err != nil {
			return
		} else if _, ok := msg.(*pgproto3.Query); !ok {
			t.Errorf("after the write, pgx sent %T; want a Query", msg)
			return
		}
		be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SET")})
		be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		be.Flush()
	})
	e, pe := Encoded{query: "INSERT INTO t VALUES (1)"}, fixed(nil, InsertPositionSQL)
	if !direct(ctx, pc.PgConn(), &e, &pe) {
		t.Fatal("an unnamed statement on an idle connection is not sent directly")
	}
	tag, pos, err := execDirect(ctx, pc.PgConn(), new(scratch), &e, &pe)
	if err != nil || tag.String() != "INSERT 0 1" {
		t.Fatalf("execDirect: %q, %v; want INSERT 0 1 and no error", tag, err)
	}
	want, _ := lagmeter.ParseLSN("16/B374D848")
	if pos != want {
		t.Errorf("position %v, want %v", pos, want)
	}
	if got := <-sent; len(got) != 10 || got[4] != "Sync" || got[9] != "Sync" {
		t.Errorf("sent %v; want the statement's Parse, Bind, Describe, Execute, Sync, then the position query's", got)
	}
	if pc.PgConn().IsBusy() || pc.PgConn().IsClosed() || pc.PgConn().TxStatus() != 'I' {
		t.Fatalf("after the write: busy %v, closed %v, status %c; want an idle connection", pc.PgConn().IsBusy(), pc.PgConn().IsClosed(), pc.PgConn().TxStatus())
	}
	if _, err := pc.Exec(ctx, "SET x = 1", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("pgx's next statement on the connection: %v", err)
	}
}

// TestDirectPositionLostAfterCommit: TestPositionLostAfterCommit without
// a pipeline: the write committed, its position is unknown, and the
// connection is closed.
func TestDirectPositionLostAfterCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc := scriptedConn(t, ctx, func(be *pgproto3.Backend) {
		if _, ok := receiveSyncs(be, 2); ok {
			answerStatement(be, "INSERT 0 1")
		}
	})
	e, pe := Encoded{query: "INSERT INTO t VALUES (1)"}, fixed(nil, InsertPositionSQL)
	tag, pos, err := execDirect(ctx, pc.PgConn(), new(scratch), &e, &pe)
	if err != nil || tag.String() != "INSERT 0 1" || pos != 0 {
		t.Fatalf("execDirect: %q, position %v, %v; want INSERT 0 1, 0 and no error (the write committed)", tag, pos, err)
	}
	if !pc.PgConn().IsClosed() {
		t.Fatal("the connection that lost the position answer is not closed: its next use would not replace it")
	}
}

// TestDirectPositionCanceled: a caller's context that ends while the
// position's answer is awaited (a primary that stalls after the commit)
// ends the wait: the write committed, at an unknown position, and the
// connection, left in the middle of an answer, is closed.
func TestDirectPositionCanceled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release := make(chan struct{})
	pc := scriptedConn(t, ctx, func(be *pgproto3.Backend) {
		if _, ok := receiveSyncs(be, 2); ok && answerStatement(be, "INSERT 0 1") == nil {
			<-release // stalls until the client went away
		}
	})
	defer close(release)
	wctx, wcancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, wcancel)
	e, pe := Encoded{query: "INSERT INTO t VALUES (1)"}, fixed(nil, InsertPositionSQL)
	tag, pos, err := execDirect(wctx, pc.PgConn(), new(scratch), &e, &pe)
	if err != nil || tag.String() != "INSERT 0 1" || pos != 0 {
		t.Fatalf("execDirect: %q, position %v, %v; want INSERT 0 1, 0 and no error (the write committed)", tag, pos, err)
	}
	if !pc.PgConn().IsClosed() {
		t.Fatal("the connection left in the middle of the position's answer is not closed")
	}
}

// TestDirectNothingSentAfterCancel: when pgconn gives up before it flushes
// (the context ended after direct looked), the statement queued in the
// frontend is never sent: the connection is closed without a byte of it.
func TestDirectNothingSentAfterCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent := make(chan []string, 1)
	pc := scriptedConn(t, ctx, func(be *pgproto3.Backend) {
		got, _ := receiveSyncs(be, 1)
		sent <- got
	})
	done, dcancel := context.WithCancel(ctx)
	dcancel()
	e, pe := Encoded{query: "INSERT INTO t VALUES (1)"}, fixed(nil, InsertPositionSQL)
	_, err := startDirect(done, pc.PgConn(), new(scratch), &e, &pe)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("startDirect with a context that ended: %v; want context.Canceled", err)
	}
	if !pc.PgConn().IsClosed() {
		t.Fatal("the connection holding the unsent statement is not closed")
	}
	if got := <-sent; len(got) != 0 {
		t.Fatalf("the server received %v; want nothing", got)
	}
}

func TestParseLSN(t *testing.T) {
	for _, s := range []string{"0/0", "16/B374D848", "FFFFFFFF/FFFFFFFF", "a/b"} {
		want, err := lagmeter.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := parseLSN([]byte(s)); !ok || got != want {
			t.Errorf("parseLSN(%q) = %v, %v; want %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "/", "1/", "/1", "1/2/3", "123456789/1", "1/123456789", "g/1", " 1/2"} {
		if _, ok := parseLSN([]byte(s)); ok {
			t.Errorf("parseLSN(%q) accepted", s)
		}
	}
}

// acceptStartup answers a client's startup on be as a PostgreSQL 15 server
// that needs no password would, up to its first ReadyForQuery; false (the
// test marked failed) when the client does not get that far.
func acceptStartup(t *testing.T, be *pgproto3.Backend) bool {
	if _, err := be.ReceiveStartupMessage(); err != nil {
		t.Errorf("startup: %v", err)
		return false
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "15.0"})
	be.Send(&pgproto3.ParameterStatus{Name: "client_encoding", Value: "UTF8"})
	be.Send(&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "on"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 2}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if err := be.Flush(); err != nil {
		t.Errorf("startup answer: %v", err)
		return false
	}
	return true
}
