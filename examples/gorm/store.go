package main

import (
	"context"
	"errors"

	"github.com/pgrouted/pgrouted"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// User has many posts.
type User struct {
	ID      int64
	Name    string
	Email   *string `gorm:"uniqueIndex"`
	Balance int64
	Posts   []Post `gorm:"constraint:OnDelete:CASCADE"`
}

// Post belongs to a user.
type Post struct {
	ID     int64
	UserID int64 `gorm:"index"`
	Title  string
}

// Migrate creates or updates the tables. AutoMigrate decides what to
// change from catalog reads: force them to the primary, so that it never
// plans from a replica that has not replayed a migration applied by
// another process yet.
func Migrate(ctx context.Context, db *gorm.DB) error {
	return db.WithContext(pgrouted.WithRoute(ctx, pgrouted.Primary)).AutoMigrate(&User{}, &Post{})
}

// Store is the example application on GORM's ordinary API.
type Store struct{ DB *gorm.DB }

// CreateUser inserts a user and returns its id.
func (s Store) CreateUser(ctx context.Context, name string) (int64, error) {
	u := User{Name: name}
	err := s.DB.WithContext(ctx).Create(&u).Error
	return u.ID, err
}

// AddPost appends a post to a user's association.
func (s Store) AddPost(ctx context.Context, userID int64, title string) error {
	return s.DB.WithContext(ctx).Model(&User{ID: userID}).Association("Posts").Append(&Post{Title: title})
}

// Rename updates a user's name.
func (s Store) Rename(ctx context.Context, id int64, name string) error {
	return s.DB.WithContext(ctx).Model(&User{ID: id}).Update("name", name).Error
}

// DeleteUser deletes a user with its posts.
func (s Store) DeleteUser(ctx context.Context, id int64) error {
	return s.DB.WithContext(ctx).Select(clause.Associations).Delete(&User{ID: id}).Error
}

// User reads a user and its posts, eager loaded with Preload.
func (s Store) User(ctx context.Context, id int64) (name string, posts []string, found bool, err error) {
	var u User
	err = s.DB.WithContext(ctx).Preload("Posts", func(db *gorm.DB) *gorm.DB { return db.Order("id") }).First(&u, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	for _, p := range u.Posts {
		posts = append(posts, p.Title)
	}
	return u.Name, posts, true, nil
}

// Page returns user ids in id order, limit from offset.
func (s Store) Page(ctx context.Context, offset, limit int) ([]int64, error) {
	var ids []int64
	err := s.DB.WithContext(ctx).Model(&User{}).Order("id").Offset(offset).Limit(limit).Pluck("id", &ids).Error
	return ids, err
}

// Count returns the number of users.
func (s Store) Count(ctx context.Context) (int64, error) {
	var n int64
	err := s.DB.WithContext(ctx).Model(&User{}).Count(&n).Error
	return n, err
}
