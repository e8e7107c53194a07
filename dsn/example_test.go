package dsn_test

import (
	"fmt"

	"github.com/pgrouted/pgrouted/dsn"
)

func ExampleParse() {
	cfg, err := dsn.Parse("postgres://app:secret@db1:5432,db2:5433,[::1]:5434/app?sslmode=disable" +
		"&pgrouted_max_lag=2s&pgrouted_names=east,west,local")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range cfg.Hosts {
		fmt.Println(h.Name, h.Addr, h.ConnConfig.Database)
	}
	if d, ok := cfg.MaxLag.Time(); ok {
		fmt.Println("max lag:", d)
	}
	fmt.Println(cfg)
	// Output:
	// east db1:5432 app
	// west db2:5433 app
	// local [::1]:5434 app
	// max lag: 2s
	// postgres://app:xxxxx@db1:5432,db2:5433,[::1]:5434/app?sslmode=disable&pgrouted_max_lag=2s&pgrouted_names=east,west,local
}

func ExampleParse_error() {
	_, err := dsn.Parse("host=db1,db2 password=secret pgrouted_max_lga=2s")
	fmt.Println(err)

	_, err = dsn.Parse("host=db1,db2 password=secret pgrouted_max_lag=1s")
	fmt.Println(err)
	// Output:
	// pgrouted dsn: unknown key pgrouted_max_lga (did you mean pgrouted_max_lag?)
	// pgrouted dsn: pgrouted_max_lag (1s) must be greater than pgrouted_probe_interval (1s): a replica's lag is only known to within one probe interval
}

func ExampleFormat() {
	cfg, err := dsn.Parse("host=db1,db2 user=app sslmode=disable pgrouted_select=nearest pgrouted_lease=10s")
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.ProbeInterval = cfg.ProbeInterval / 2
	cfg.SelectPolicy = dsn.SelectRandom
	// The string as given, then the keys changed since: the last one wins.
	fmt.Println(dsn.Format(cfg))
	// Output:
	// host=db1,db2 user=app sslmode=disable pgrouted_select=nearest pgrouted_lease=10s pgrouted_probe_interval=500ms pgrouted_select=random
}

func ExampleParse_durations() {
	// Every duration key reads time.ParseDuration's syntax, and the forms
	// before it (500ms, 1.5s, 2m).
	cfg, err := dsn.Parse("host=db1,db2 sslmode=disable pgrouted_probe_interval=1m30s" +
		" pgrouted_max_lag=1h pgrouted_lease=2h pgrouted_latency_window=250us pgrouted_replica_wait=1.5s")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.ProbeInterval, cfg.MaxLag, cfg.Lease, cfg.LatencyWindow, cfg.ReplicaWait)

	_, err = dsn.Parse("host=db1 pgrouted_probe_interval=250")
	fmt.Println(err)
	_, err = dsn.Parse("host=db1 pgrouted_probe_interval=2h")
	fmt.Println(err)
	// Output:
	// 1m30s 1h 2h0m0s 250µs 1.5s
	// pgrouted dsn: pgrouted_probe_interval (250) has no unit: add one, e.g. 250ms
	// pgrouted dsn: pgrouted_probe_interval (2h) must be at most 1h
}
