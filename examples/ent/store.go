package main

import (
	"context"

	"github.com/pgrouted/pgrouted"

	"github.com/pgrouted/pgrouted/examples/ent/entdb"
	"github.com/pgrouted/pgrouted/examples/ent/entdb/post"
	"github.com/pgrouted/pgrouted/examples/ent/entdb/user"
)

// Migrate creates or updates the tables. ent plans the migration from
// catalog reads: force them to the primary, so that it never plans from a
// replica that has not replayed a migration applied by another process
// yet.
func Migrate(ctx context.Context, client *entdb.Client) error {
	return client.Schema.Create(pgrouted.WithRoute(ctx, pgrouted.Primary))
}

// Store is the example application on ent's generated client.
type Store struct{ Client *entdb.Client }

// CreateUser inserts a user and returns its id.
func (s Store) CreateUser(ctx context.Context, name string) (int64, error) {
	u, err := s.Client.User.Create().SetName(name).Save(ctx)
	if err != nil {
		return 0, err
	}
	return int64(u.ID), nil
}

// AddPost creates a post on a user's posts edge.
func (s Store) AddPost(ctx context.Context, userID int64, title string) error {
	return s.Client.Post.Create().SetTitle(title).SetAuthorID(int(userID)).Exec(ctx)
}

// Rename updates a user's name.
func (s Store) Rename(ctx context.Context, id int64, name string) error {
	return s.Client.User.UpdateOneID(int(id)).SetName(name).Exec(ctx)
}

// DeleteUser deletes a user; its posts go with it (ON DELETE CASCADE).
func (s Store) DeleteUser(ctx context.Context, id int64) error {
	return s.Client.User.DeleteOneID(int(id)).Exec(ctx)
}

// User reads a user with its posts, eager loaded with WithPosts.
func (s Store) User(ctx context.Context, id int64) (name string, posts []string, found bool, err error) {
	u, err := s.Client.User.Query().
		Where(user.ID(int(id))).
		WithPosts(func(q *entdb.PostQuery) { q.Order(post.ByID()) }).
		Only(ctx)
	if entdb.IsNotFound(err) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	for _, p := range u.Edges.Posts {
		posts = append(posts, p.Title)
	}
	return u.Name, posts, true, nil
}

// Page returns user ids in id order, limit from offset.
func (s Store) Page(ctx context.Context, offset, limit int) ([]int64, error) {
	ids, err := s.Client.User.Query().Order(user.ByID()).Offset(offset).Limit(limit).IDs(ctx)
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out, err
}

// Count returns the number of users.
func (s Store) Count(ctx context.Context) (int64, error) {
	n, err := s.Client.User.Query().Count(ctx)
	return int64(n), err
}
