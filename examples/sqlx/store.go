package main

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"
)

// migrations are applied in order, each once, in a transaction.
var migrations = []string{
	`CREATE TABLE users (
		id bigserial PRIMARY KEY,
		name text NOT NULL,
		email text UNIQUE,
		balance bigint NOT NULL DEFAULT 0
	)`,
	`CREATE TABLE posts (
		id bigserial PRIMARY KEY,
		user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
		title text NOT NULL
	)`,
	`CREATE INDEX posts_user_id ON posts (user_id)`,
}

// Migrate applies the migrations not applied yet, recording each in
// schema_migrations, all in one transaction on the primary.
func Migrate(ctx context.Context, db *sqlx.DB) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS schema_migrations (version int PRIMARY KEY)"); err != nil {
		return err
	}
	var applied int
	if err := tx.GetContext(ctx, &applied, "SELECT coalesce(max(version), 0) FROM schema_migrations"); err != nil {
		return err
	}
	for v := applied + 1; v <= len(migrations); v++ {
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind("INSERT INTO schema_migrations (version) VALUES (?)"), v); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// User is a row of users.
type User struct {
	ID      int64          `db:"id"`
	Name    string         `db:"name"`
	Email   sql.NullString `db:"email"`
	Balance int64          `db:"balance"`
}

// Post is a row of posts.
type Post struct {
	ID     int64  `db:"id"`
	UserID int64  `db:"user_id"`
	Title  string `db:"title"`
}

// Store is the example application on sqlx.
type Store struct{ DB *sqlx.DB }

// CreateUser inserts a user and returns its id.
func (s Store) CreateUser(ctx context.Context, name string) (int64, error) {
	var id int64
	err := s.DB.GetContext(ctx, &id, s.DB.Rebind("INSERT INTO users (name) VALUES (?) RETURNING id"), name)
	return id, err
}

// AddPost inserts a post, with named parameters.
func (s Store) AddPost(ctx context.Context, userID int64, title string) error {
	_, err := s.DB.NamedExecContext(ctx, "INSERT INTO posts (user_id, title) VALUES (:user_id, :title)", Post{UserID: userID, Title: title})
	return err
}

// Rename updates a user's name.
func (s Store) Rename(ctx context.Context, id int64, name string) error {
	_, err := s.DB.ExecContext(ctx, s.DB.Rebind("UPDATE users SET name = ? WHERE id = ?"), name, id)
	return err
}

// DeleteUser deletes a user; its posts go with it (ON DELETE CASCADE).
func (s Store) DeleteUser(ctx context.Context, id int64) error {
	_, err := s.DB.ExecContext(ctx, s.DB.Rebind("DELETE FROM users WHERE id = ?"), id)
	return err
}

// User reads a user and its posts.
func (s Store) User(ctx context.Context, id int64) (name string, posts []string, found bool, err error) {
	var u User
	err = s.DB.GetContext(ctx, &u, s.DB.Rebind("SELECT * FROM users WHERE id = ?"), id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	err = s.DB.SelectContext(ctx, &posts, s.DB.Rebind("SELECT title FROM posts WHERE user_id = ? ORDER BY id"), id)
	return u.Name, posts, true, err
}

// Page returns user ids in id order, limit from offset.
func (s Store) Page(ctx context.Context, offset, limit int) ([]int64, error) {
	var ids []int64
	err := s.DB.SelectContext(ctx, &ids, s.DB.Rebind("SELECT id FROM users ORDER BY id LIMIT ? OFFSET ?"), limit, offset)
	return ids, err
}

// Count returns the number of users.
func (s Store) Count(ctx context.Context) (int64, error) {
	var n int64
	err := s.DB.GetContext(ctx, &n, "SELECT count(*) FROM users")
	return n, err
}

// PostsOf loads the posts of many users in one read (eager loading with
// sqlx.In), by user id.
func (s Store) PostsOf(ctx context.Context, userIDs []int64) (map[int64][]Post, error) {
	query, args, err := sqlx.In("SELECT * FROM posts WHERE user_id IN (?) ORDER BY id", userIDs)
	if err != nil {
		return nil, err
	}
	var posts []Post
	if err := s.DB.SelectContext(ctx, &posts, s.DB.Rebind(query), args...); err != nil {
		return nil, err
	}
	by := map[int64][]Post{}
	for _, p := range posts {
		by[p.UserID] = append(by[p.UserID], p)
	}
	return by, nil
}
