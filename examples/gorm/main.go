// Command gorm shows pgrouted under GORM: writes and GORM's transactions
// go to the primary, reads to a replica that already holds them.
//
//	go run ./gorm -dsn 'postgres://app:secret@db1,db2,db3/app?pgrouted_names=db1,db2,db3'
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
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("PGROUTED_DSN"), "pgrouted DSN: every host of the cluster (default $PGROUTED_DSN)")
	flag.Parse()
	if *dsn == "" {
		fmt.Fprintln(os.Stderr, "usage: gorm -dsn 'postgres://user:password@db1,db2,db3/app' (or set PGROUTED_DSN)")
		os.Exit(2)
	}
	if err := run(context.Background(), *dsn, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run migrates, creates a user with a post and reads it back, printing
// where each statement ran.
func run(ctx context.Context, dsn string, out io.Writer) error {
	db, _, err := OpenWithHooks(dsn, func(e pgrouted.RouteEvent) {
		fmt.Fprintf(out, "%-5s on %s (%s): %s\n", e.Op, e.Endpoint, e.Reason, e.Query)
	}, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	defer sqlDB.Close()

	if err := Migrate(ctx, db); err != nil {
		return err
	}
	u := User{Name: "ada", Posts: []Post{{Title: "notes on the analytical engine"}}}
	if err := db.WithContext(ctx).Create(&u).Error; err != nil {
		return err
	}
	var got User
	if err := db.WithContext(ctx).Preload("Posts").First(&got, u.ID).Error; err != nil {
		return err
	}
	if _, err := ReadFromPrimary(ctx, db, u.ID); err != nil {
		return err
	}
	fmt.Fprintf(out, "read back %s with %d post(s)\n", got.Name, len(got.Posts))
	return nil
}
