package pgpipe

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// scriptedServer answers one client on conn as PostgreSQL would, for the
// startup and for a pipeline of two segments (a statement and its Sync,
// then the position query and its Sync): it answers the first segment
// with complete, the statement's command tag, and ReadyForQuery, then
// drops the connection before answering the second, as a server that
// committed and then went away (or a primary whose term ended and whose
// connection pgrouted closed).
func scriptedServer(t *testing.T, conn net.Conn, tag string) {
	defer conn.Close()
	be := pgproto3.NewBackend(conn, conn)
	if !acceptStartup(t, be) {
		return
	}
	for syncs := 0; syncs < 2; {
		msg, err := be.Receive()
		if err != nil {
			t.Errorf("pipeline: %v", err)
			return
		}
		if _, ok := msg.(*pgproto3.Sync); ok {
			syncs++
		}
	}
	be.Send(&pgproto3.ParseComplete{})
	be.Send(&pgproto3.BindComplete{})
	be.Send(&pgproto3.NoData{})
	be.Send(&pgproto3.CommandComplete{CommandTag: []byte(tag)})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if err := be.Flush(); err != nil {
		t.Errorf("first segment's answer: %v", err)
	}
}

// TestPositionLostAfterCommit: a write whose Sync came back (it committed)
// and whose position query then lost its connection succeeded, at a
// position nobody read. It must not fail: an application would take a
// committed write for one that did not run, or one of unknown outcome.
func TestPositionLostAfterCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		scriptedServer(t, server, "INSERT 0 1")
	}()
	defer func() { <-done }()
	cfg, err := pgx.ParseConfig("postgres://u@127.0.0.1:1/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) { return client, nil }
	pc, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())

	// What Exec does, on a statement sent as is.
	e, pe := Encoded{query: "INSERT INTO t VALUES (1)"}, fixed(nil, InsertPositionSQL)
	pl, err := startPositioned(ctx, pc, &e, &pe)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := Result(pl, nil)
	if err != nil || tag.String() != "INSERT 0 1" {
		t.Fatalf("the statement's segment: %q, %v; want INSERT 0 1 and no error", tag, err)
	}
	pos, err := finishPositioned(pl, &pe, err)
	if err != nil || pos != 0 {
		t.Fatalf("the position lost after the commit: position %v, error %v; want 0 and no error (the write committed)", pos, err)
	}
	if !pc.PgConn().IsClosed() {
		t.Fatal("the connection that lost the position answer is not closed: its next use would not replace it")
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
