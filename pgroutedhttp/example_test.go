//go:build unix

package pgroutedhttp_test

import (
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"time"

	_ "github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/pgroutedhttp"
)

// Every statement runs with the request's context: the reads need the
// user's last write, the writes raise it, and the cookie carries it to
// the next request, whichever instance serves it.
func ExampleMiddleware() {
	db, err := sql.Open("pgrouted", "postgres://app:secret@db1,db2,db3/app?pgrouted_replica_wait=100ms")
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /notes", func(w http.ResponseWriter, r *http.Request) {
		var id int64
		if err := db.QueryRowContext(r.Context(), "INSERT INTO notes (text) VALUES ($1) RETURNING id", r.FormValue("text")).Scan(&id); err != nil {
			http.Error(w, "cannot store the note", http.StatusInternalServerError)
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/notes/%d", id), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /notes/{id}", func(w http.ResponseWriter, r *http.Request) {
		var text string
		if err := db.QueryRowContext(r.Context(), "SELECT text FROM notes WHERE id = $1", r.PathValue("id")).Scan(&text); err != nil {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, text)
	})
	log.Fatal(http.ListenAndServe(":8080", pgroutedhttp.Middleware(mux)))
}

// Options name the cookie and the header, and bound the cookie's life;
// Rejected counts the tokens that could not be trusted.
func ExampleOptions() {
	opts := &pgroutedhttp.Options{CookieName: "rw", HeaderName: "X-Read-Your-Writes", MaxAge: time.Hour}
	handler := opts.Middleware(http.NotFoundHandler())
	go func() {
		for range time.Tick(time.Minute) {
			log.Printf("tokens rejected: %d", opts.Rejected())
		}
	}()
	log.Fatal(http.ListenAndServe(":8080", handler))
}
