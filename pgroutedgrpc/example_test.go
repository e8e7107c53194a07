package pgroutedgrpc_test

import (
	"context"
	"database/sql"
	"log"
	"net"
	"time"

	_ "github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/pgroutedgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Both sides of a service that calls another: its handlers run their
// statements, and their calls to the other service, with the handler's
// context.
func Example() {
	db, err := sql.Open("pgrouted", "postgres://app:secret@db1,db2,db3/app?pgrouted_replica_wait=100ms")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	inventory, err := grpc.NewClient("inventory:9090",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(pgroutedgrpc.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(pgroutedgrpc.StreamClientInterceptor()))
	if err != nil {
		log.Fatal(err)
	}
	defer inventory.Close()
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(pgroutedgrpc.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(pgroutedgrpc.StreamServerInterceptor()))
	// Register the services here; a handler writes with its ctx
	// (db.ExecContext(ctx, ...)) and then calls inventory with the same
	// ctx: the inventory service's reads see the write.
	ln, err := net.Listen("tcp", ":9090")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.Serve(ln))
}

// Message is a queue's message that carries its producer's position.
type Message struct {
	Order   int64
	Session string
}

// One Session per message: the producer marshals its Session's token
// into the message after its write committed; the consumer restores it,
// so that its reads see the producer's write, and its calls carry it on.
func ExampleOptions_Restore() {
	opts := &pgroutedgrpc.Options{Keys: [][]byte{[]byte("a secret of at least 32 random bytes!")}, MaxAge: time.Hour}

	produce := func(ctx context.Context, order int64) Message {
		token, err := opts.Token(pgroutedgrpc.SessionFrom(ctx))
		if err != nil {
			log.Print(err) // the message goes without a position
		}
		return Message{Order: order, Session: token}
	}
	consume := func(ctx context.Context, db *sql.DB, m Message) error {
		ctx = pgroutedgrpc.WithSession(ctx, opts.Restore(m.Session))
		_, err := db.ExecContext(ctx, "UPDATE orders SET shipped = now() WHERE id = $1", m.Order)
		return err
	}
	_, _ = produce, consume
}
