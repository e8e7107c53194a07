// Package migrations runs two schema migration tools, goose and
// golang-migrate, on a *sql.DB opened through pgrouted: each is handed the
// handle the application uses, as it would be handed one opened with pgx's
// stdlib.
//
// A migration tool reads its version table (goose_db_version,
// schema_migrations) to decide which migrations to apply. pgrouted sends
// those reads to the primary whatever the replicas' lag, as it does for
// every read of the system catalogs (information_schema, pg_catalog), so
// that a tool started in a fresh process, which has no read-your-writes
// position yet, never applies a migration twice or skips one because a
// replica had not replayed the last ones (see docs/migrations.md).
//
// The tests run both tools from fresh connectors while the replicas'
// replay is paused, on a real primary with two streaming replicas.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"io/fs"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/pressly/goose/v3"
)

// gooseFiles and migrateFiles are the migrations, in each tool's layout:
// the first creates a log table and every one inserts its version into it,
// so a migration applied twice leaves two rows.
var (
	//go:embed goose/*.sql
	gooseFiles embed.FS
	//go:embed migrate/*.sql
	migrateFiles embed.FS
)

// GooseUp applies goose's migrations up to version (all of them when
// version is 0) on db, through goose's Provider.
func GooseUp(ctx context.Context, db *sql.DB, version int64) error {
	fsys, err := fs.Sub(gooseFiles, "goose")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys)
	if err != nil {
		return err
	}
	if version == 0 {
		_, err = p.Up(ctx)
	} else {
		_, err = p.UpTo(ctx, version)
	}
	return err
}

// GooseUpLegacy does what GooseUp does through goose's package-level API
// (goose.UpTo), which is not safe for concurrent use.
func GooseUpLegacy(ctx context.Context, db *sql.DB, version int64) error {
	goose.SetBaseFS(gooseFiles)
	defer goose.SetBaseFS(nil)
	if err := goose.SetDialect("postgres"); err != nil {
		return err
	}
	if version == 0 {
		return goose.UpContext(ctx, db, "goose")
	}
	return goose.UpToContext(ctx, db, "goose", version)
}

// MigrateUp applies golang-migrate's migrations up to version (all of
// them when version is 0) on db, through its pgx/v5 database driver. The
// driver holds one connection of db until db is closed: golang-migrate's
// Close would close db itself.
func MigrateUp(db *sql.DB, version uint) error {
	drv, err := migratepgx.WithInstance(db, &migratepgx.Config{})
	if err != nil {
		return err
	}
	src, err := iofs.New(migrateFiles, "migrate")
	if err != nil {
		return err
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		return err
	}
	if version == 0 {
		err = m.Up()
	} else {
		err = m.Migrate(version)
	}
	if errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	return err
}
