// Command nethttp is a small notes service on pgrouted behind
// pgroutedhttp.Middleware: a user who writes a note through one instance
// reads it at once through any other, from a replica that holds it.
//
// Run two instances on the same cluster, write through one and read
// through the other with the cookie:
//
//	go run ./nethttp -addr :8081 -dsn 'postgres://app:secret@db1,db2,db3/app?pgrouted_replica_wait=100ms' &
//	go run ./nethttp -addr :8082 -dsn 'postgres://app:secret@db1,db2,db3/app?pgrouted_replica_wait=100ms' &
//	curl -c jar -d text=hello localhost:8081/notes      # 303 to /notes/1
//	curl -b jar localhost:8082/notes/1                  # hello
//
// The DSN may also come from $PGROUTED_DSN.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"

	_ "github.com/pgrouted/pgrouted"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("PGROUTED_DSN"), "pgrouted DSN: every host of the cluster (default $PGROUTED_DSN)")
	addr := flag.String("addr", ":8080", "address to listen on")
	flag.Parse()
	if *dsn == "" {
		fmt.Fprintln(os.Stderr, "usage: nethttp -dsn 'postgres://user:password@db1,db2,db3/app' [-addr :8080] (or set PGROUTED_DSN)")
		os.Exit(2)
	}
	db, err := sql.Open("pgrouted", *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := Migrate(context.Background(), db); err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, Handler(db)))
}
