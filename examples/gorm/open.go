package main

import (
	"context"
	"database/sql"

	"github.com/pgrouted/pgrouted"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// Open opens GORM on a primary and its replicas: the one line is
// DriverName "pgrouted" in GORM's postgres dialector. Importing
// github.com/pgrouted/pgrouted (for its side effect alone:
// import _ "github.com/pgrouted/pgrouted") registers the driver.
func Open(dsn string) (*gorm.DB, error) {
	return gorm.Open(postgres.New(postgres.Config{DriverName: "pgrouted", DSN: dsn}), &gorm.Config{})
}

// OpenConnector opens GORM on a pgrouted Connector and keeps its handle:
// Stats, Topology, TopologyHandler and the metrics collectors need it,
// and a *gorm.DB opened with DriverName cannot reach it.
func OpenConnector(dsn string) (*gorm.DB, *pgrouted.Connector, error) {
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	c, err := pgrouted.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	sqlDB := sql.OpenDB(c) // closing it closes the Connector
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{})
	if err != nil {
		sqlDB.Close()
		return nil, nil, err
	}
	return db, c, nil
}

// OpenWithHooks opens GORM on a pgrouted Connector, for what a DSN cannot
// carry: an OnRoute hook that sees where every statement ran. Keep the
// Connector: Explain, Topology and Stats describe the routing.
func OpenWithHooks(dsn string, onRoute func(pgrouted.RouteEvent), opts ...gorm.Option) (*gorm.DB, *pgrouted.Connector, error) {
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	cfg.OnRoute = onRoute
	connector, err := pgrouted.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	sqlDB := sql.OpenDB(connector) // closing it closes the Connector
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), opts...)
	if err != nil {
		sqlDB.Close()
		return nil, nil, err
	}
	return db, connector, nil
}

// ReadFromPrimary reads a user from the primary, whatever the replicas
// hold: the context carries the route through GORM to the driver.
func ReadFromPrimary(ctx context.Context, db *gorm.DB, id int64) (User, error) {
	var u User
	err := db.WithContext(pgrouted.WithRoute(ctx, pgrouted.Primary)).First(&u, id).Error
	return u, err
}
