//go:build unix

package promcollector_test

import (
	"database/sql"
	"log"
	"net/http"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/promcollector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Export a Connector's metrics on /metrics.
func ExampleNew() {
	cfg, err := pgrouted.ParseConfig("postgres://app:secret@db1,db2,db3/app?pgrouted_names=east,west,south")
	if err != nil {
		log.Fatal(err)
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		log.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()

	prometheus.MustRegister(promcollector.New(conn))
	http.Handle("/metrics", promhttp.Handler())
	http.Handle("/debug/pgrouted", conn.TopologyHandler()) // the same, as JSON
}

// Two databases in one process: tell their metrics apart with a label.
func ExampleConstLabels() {
	var orders, users *pgrouted.Connector // from pgrouted.NewConnector
	prometheus.MustRegister(
		promcollector.New(orders, promcollector.ConstLabels(prometheus.Labels{"db": "orders"})),
		promcollector.New(users, promcollector.ConstLabels(prometheus.Labels{"db": "users"})),
	)
}
