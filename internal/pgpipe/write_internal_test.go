package pgpipe

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// answerCommitThenDrop answers, on be, a pipeline of two segments (a
// statement and its Sync, then the position query and its Sync) as a
// server that committed and then went away (or a primary whose term ended
// and whose connection pgrouted closed): the first segment with complete,
// the statement's command tag, and ReadyForQuery; the second not at all
// (scriptedConn drops the connection once it returns).
func answerCommitThenDrop(t *testing.T, be *pgproto3.Backend, tag string) {
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
	pc := scriptedConn(t, ctx, func(be *pgproto3.Backend) { answerCommitThenDrop(t, be, "INSERT 0 1") })

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
