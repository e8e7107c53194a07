package main

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/sqlc/db"
)

// The *pgrouted.Pool is what sqlc's generated code takes: its DBTX.
var _ db.DBTX = (*pgrouted.Pool)(nil)

// Store is the example application on sqlc's generated code, run on a
// pgrouted.Pool: writes go to the primary, reads to a replica that holds
// them.
type Store struct {
	Pool *pgrouted.Pool
	Q    *db.Queries
}

// NewStore returns a Store on p.
func NewStore(p *pgrouted.Pool) Store { return Store{Pool: p, Q: db.New(p)} }

// CreateUser inserts a user and returns its id.
func (s Store) CreateUser(ctx context.Context, name string) (int64, error) {
	return s.Q.CreateUser(ctx, name)
}

// AddPost inserts a post of a user.
func (s Store) AddPost(ctx context.Context, userID int64, title string) error {
	return s.Q.AddPost(ctx, db.AddPostParams{UserID: userID, Title: title})
}

// Rename updates a user's name.
func (s Store) Rename(ctx context.Context, id int64, name string) error {
	return s.Q.RenameUser(ctx, db.RenameUserParams{ID: id, Name: name})
}

// DeleteUser deletes a user; its posts go with it (ON DELETE CASCADE).
func (s Store) DeleteUser(ctx context.Context, id int64) error {
	return s.Q.DeleteUser(ctx, id)
}

// User reads a user and its posts' titles, in two reads.
func (s Store) User(ctx context.Context, id int64) (name string, posts []string, found bool, err error) {
	u, err := s.Q.GetUser(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	posts, err = s.Q.PostTitles(ctx, id)
	return u.Name, posts, true, err
}

// Page returns user ids in id order, limit from offset.
func (s Store) Page(ctx context.Context, offset, limit int) ([]int64, error) {
	return s.Q.PageUsers(ctx, db.PageUsersParams{Limit: int32(limit), Offset: int32(offset)})
}

// Count returns the number of users.
func (s Store) Count(ctx context.Context) (int64, error) {
	return s.Q.CountUsers(ctx)
}

// Transfer moves amount from one user's balance to another's in one
// transaction, on the primary.
func (s Store) Transfer(ctx context.Context, from, to, amount int64) error {
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // pgx.ErrTxClosed after Commit: harmless
	q := s.Q.WithTx(tx)
	if err := q.AddBalance(ctx, db.AddBalanceParams{ID: from, Balance: -amount}); err != nil {
		return err
	}
	if err := q.AddBalance(ctx, db.AddBalanceParams{ID: to, Balance: amount}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Balances reads two users' balances in one read-only transaction: one
// snapshot, on a replica.
func (s Store) Balances(ctx context.Context, a, b int64) (int64, int64, error) {
	tx, err := s.Pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback(ctx)
	q := s.Q.WithTx(tx)
	ua, err := q.GetUser(ctx, a)
	if err != nil {
		return 0, 0, err
	}
	ub, err := q.GetUser(ctx, b)
	if err != nil {
		return 0, 0, err
	}
	return ua.Balance, ub.Balance, tx.Commit(ctx)
}
