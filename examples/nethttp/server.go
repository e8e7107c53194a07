package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/web"
	"github.com/pgrouted/pgrouted/pgroutedhttp"
)

// Schema is the example's table.
const Schema = `CREATE TABLE IF NOT EXISTS notes (id bigserial PRIMARY KEY, text text NOT NULL)`

// Migrate creates the table, on the primary.
func Migrate(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(pgrouted.WithRoute(ctx, pgrouted.Primary), Schema)
	return err
}

// Handler is the notes service. POST /notes stores the form's text and
// redirects to the note (303); GET /notes/{id} shows it. Every statement
// runs with the request's context, in which pgroutedhttp.Middleware put
// the user's Session: the INSERT raises it, the response's cookie carries
// it, and the GET that follows, on whichever instance, reads from a
// replica that has replayed the note (waiting up to pgrouted_replica_wait),
// else from the primary.
func Handler(db *sql.DB) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /notes", createNote(db))
	mux.HandleFunc("GET /notes/{id}", showNote(db))
	return pgroutedhttp.Middleware(mux)
}

// createNote stores a note. The write is done before the response's
// header goes out, so the cookie set with it carries the note's position.
func createNote(db *sql.DB) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var id int64
		err := db.QueryRowContext(r.Context(), "INSERT INTO notes (text) VALUES ($1) RETURNING id", r.FormValue("text")).Scan(&id)
		if err != nil {
			web.WriteError(w, err)
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/notes/%d", id), http.StatusSeeOther)
	}
}

// showNote shows a note.
func showNote(db *sql.DB) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var text string
		err := db.QueryRowContext(r.Context(), "SELECT text FROM notes WHERE id = $1", r.PathValue("id")).Scan(&text)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			http.NotFound(w, r)
		case err != nil:
			web.WriteError(w, err)
		default:
			fmt.Fprintln(w, text)
		}
	}
}
