package main

import (
	"context"
	"database/sql"
	"errors"
)

// Schema is the example's tables: users with posts.
const Schema = `
CREATE TABLE IF NOT EXISTS users (
	id bigserial PRIMARY KEY,
	name text NOT NULL,
	email text UNIQUE,
	balance bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS posts (
	id bigserial PRIMARY KEY,
	user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	title text NOT NULL
);`

// Store is the example application on plain database/sql.
type Store struct{ DB *sql.DB }

// CreateUser inserts a user and returns its id.
func (s Store) CreateUser(ctx context.Context, name string) (int64, error) {
	var id int64
	err := s.DB.QueryRowContext(ctx, "INSERT INTO users (name) VALUES ($1) RETURNING id", name).Scan(&id)
	return id, err
}

// AddPost inserts a post of a user.
func (s Store) AddPost(ctx context.Context, userID int64, title string) error {
	_, err := s.DB.ExecContext(ctx, "INSERT INTO posts (user_id, title) VALUES ($1, $2)", userID, title)
	return err
}

// Rename updates a user's name.
func (s Store) Rename(ctx context.Context, id int64, name string) error {
	_, err := s.DB.ExecContext(ctx, "UPDATE users SET name = $1 WHERE id = $2", name, id)
	return err
}

// DeleteUser deletes a user; its posts go with it (ON DELETE CASCADE).
func (s Store) DeleteUser(ctx context.Context, id int64) error {
	_, err := s.DB.ExecContext(ctx, "DELETE FROM users WHERE id = $1", id)
	return err
}

// User reads a user and its posts' titles, in two reads.
func (s Store) User(ctx context.Context, id int64) (name string, posts []string, found bool, err error) {
	err = s.DB.QueryRowContext(ctx, "SELECT name FROM users WHERE id = $1", id).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	rows, err := s.DB.QueryContext(ctx, "SELECT title FROM posts WHERE user_id = $1 ORDER BY id", id)
	if err != nil {
		return "", nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var title string
		if err := rows.Scan(&title); err != nil {
			return "", nil, false, err
		}
		posts = append(posts, title)
	}
	return name, posts, true, rows.Err()
}

// Page returns user ids in id order, limit from offset.
func (s Store) Page(ctx context.Context, offset, limit int) ([]int64, error) {
	rows, err := s.DB.QueryContext(ctx, "SELECT id FROM users ORDER BY id LIMIT $1 OFFSET $2", limit, offset)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// Count returns the number of users.
func (s Store) Count(ctx context.Context) (int64, error) {
	var n int64
	err := s.DB.QueryRowContext(ctx, "SELECT count(*) FROM users").Scan(&n)
	return n, err
}
