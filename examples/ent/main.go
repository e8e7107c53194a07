// Command ent shows pgrouted under ent: writes and transactions go to the
// primary, reads to a replica that already holds them.
//
//	go run ./ent -dsn 'postgres://app:secret@db1,db2,db3/app?pgrouted_names=db1,db2,db3'
//
// The DSN may also come from $PGROUTED_DSN.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/pgrouted/pgrouted"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("PGROUTED_DSN"), "pgrouted DSN: every host of the cluster (default $PGROUTED_DSN)")
	flag.Parse()
	if *dsn == "" {
		fmt.Fprintln(os.Stderr, "usage: ent -dsn 'postgres://user:password@db1,db2,db3/app' (or set PGROUTED_DSN)")
		os.Exit(2)
	}
	if err := run(context.Background(), *dsn, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run migrates, creates a user with a post and reads it back, printing
// where each statement ran.
func run(ctx context.Context, dsn string, out io.Writer) error {
	client, _, err := OpenWithHooks(dsn, func(e pgrouted.RouteEvent) {
		fmt.Fprintf(out, "%-5s on %s (%s): %s\n", e.Op, e.Endpoint, e.Reason, e.Query)
	})
	if err != nil {
		return err
	}
	defer client.Close()

	if err := Migrate(ctx, client); err != nil {
		return err
	}
	s := Store{Client: client}
	id, err := s.CreateUser(ctx, "ada")
	if err != nil {
		return err
	}
	if err := s.AddPost(ctx, id, "notes on the analytical engine"); err != nil {
		return err
	}
	name, posts, _, err := s.User(ctx, id)
	if err != nil {
		return err
	}
	if _, err := ReadFromPrimary(ctx, client, int(id)); err != nil {
		return err
	}
	fmt.Fprintf(out, "read back %s with %d post(s)\n", name, len(posts))
	return nil
}
