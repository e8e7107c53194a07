package pgrouted

import (
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/topology"
)

// hostsOnly returns a Connector on dsn with its hosts (their pools open no
// connection until asked) and nothing else: no topology, no catalog.
func hostsOnly(t *testing.T, dsn string) (*Connector, *Config) {
	t.Helper()
	cfg, err := ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c := &Connector{cfg: *cfg}
	for i, h := range cfg.Hosts {
		hs, err := newHost(i, h, &cfg.Config, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.hosts.add(hs)
	}
	return c, cfg
}

// A discovered host takes the DSN's settings from its first TCP host, its
// TLS settings unchanged: verify-full checks the DSN's host name, never the
// one the provider gave.
func TestDiscoveredHostSettings(t *testing.T) {
	c, cfg := hostsOnly(t, "host=/tmp,db1.example,db2.example port=5432,5433,5434 user=app dbname=shop sslmode=verify-full sslrootcert=system pgrouted_discover=true")
	defer c.closePools()
	th, ok := c.discoverHost(3, topology.Member{Name: "pg-new", Host: "db9.example", Port: 6000})
	if !ok {
		t.Fatal("member not added")
	}
	got := th.Config
	if got.Host != "db9.example" || got.Port != 6000 || got.User != "app" || got.Database != "shop" {
		t.Fatalf("discovered host at %s:%d as %s on %s", got.Host, got.Port, got.User, got.Database)
	}
	if got.TLSConfig == nil || got.TLSConfig.ServerName != "db1.example" || got.TLSConfig.InsecureSkipVerify {
		t.Fatalf("TLS %+v: want verify-full against the DSN's db1.example", got.TLSConfig)
	}
	for _, fb := range got.Fallbacks {
		if fb.Host != "db9.example" || fb.TLSConfig != nil && fb.TLSConfig.ServerName != "db1.example" {
			t.Fatalf("fallback %s with TLS server name %q", fb.Host, fb.TLSConfig.ServerName)
		}
	}
	if tmpl := cfg.Hosts[1].ConnConfig.TLSConfig; tmpl.ServerName != "db1.example" {
		t.Fatalf("the template's TLS changed: server name %q", tmpl.ServerName)
	}
	h := c.hosts.all()[3]
	if th.Name != "pg-new" || h.Name != "pg-new" || !h.discovered || h.Addr != "db9.example:6000" || h.Weight != dsn.DefaultWeight {
		t.Fatalf("host %+v (topology name %q)", h.Host, th.Name)
	}
	// A name already taken, or the wrong index, is not reused.
	if th, ok := c.discoverHost(4, topology.Member{Name: "PG-NEW", Host: "db8.example", Port: 6000}); !ok || th.Name != "db8.example:6000" {
		t.Fatalf("second member named %q (added %v), want its address", th.Name, ok)
	}
	if _, ok := c.discoverHost(9, topology.Member{Name: "x", Host: "db7.example", Port: 6000}); ok {
		t.Fatal("a member added at an index out of step with the host table")
	}
}

// A probe's connection gives up after DefaultConnectTimeout when the DSN
// has no connect_timeout, as a data connection does, and after the DSN's
// connect_timeout when it has one; the hosts' configurations stay as
// parsed.
func TestProbeConnectTimeout(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		want time.Duration
	}{
		{"host=db1.example,db2.example user=app", DefaultConnectTimeout},
		{"host=db1.example,db2.example user=app connect_timeout=2", 2 * time.Second},
	} {
		c, cfg := hostsOnly(t, tc.dsn)
		for i, h := range cfg.Hosts {
			hs := c.hosts.all()[i]
			before := h.ConnConfig.ConnectTimeout
			if got := c.topologyHost(hs, &h.ConnConfig.Config).Config.ConnectTimeout; got != tc.want {
				t.Errorf("%s: host %s: probes connect with a timeout of %v, want %v", tc.dsn, h.Name, got, tc.want)
			}
			if h.ConnConfig.ConnectTimeout != before {
				t.Errorf("%s: host %s: its configuration's connect timeout changed to %v", tc.dsn, h.Name, h.ConnConfig.ConnectTimeout)
			}
		}
		c.closePools()
	}
}

// A discovered host's connections, data and probe alike, give the DSN's
// password only through SCRAM: require_auth=scram-sha-256 whatever the
// DSN's require_auth; without a password, the DSN's require_auth stays.
func TestDiscoveredHostAuth(t *testing.T) {
	for _, tc := range []struct {
		dsn, want string
	}{
		{"host=db1.example user=app password=secret sslmode=disable pgrouted_discover=true", "scram-sha-256"},
		{"host=db1.example user=app password=secret sslmode=disable require_auth=password,md5 pgrouted_discover=true", "scram-sha-256"},
		{"host=db1.example user=app sslmode=disable pgrouted_discover=true", ""},
		{"host=db1.example user=app sslmode=disable require_auth=!password pgrouted_discover=true", "!password"},
	} {
		c, cfg := hostsOnly(t, tc.dsn)
		th, ok := c.discoverHost(1, topology.Member{Name: "pg-new", Host: "db9.example", Port: 6000})
		if !ok {
			t.Fatalf("%s: member not added", tc.dsn)
		}
		h := c.hosts.all()[1]
		if got := h.pool.Config().ConnConfig.RequireAuth; got != tc.want {
			t.Errorf("%s: data connections' require_auth %q, want %q", tc.dsn, got, tc.want)
		}
		if got := th.Config.RequireAuth; got != tc.want {
			t.Errorf("%s: probe's require_auth %q, want %q", tc.dsn, got, tc.want)
		}
		if got, was := cfg.Hosts[0].ConnConfig.RequireAuth, c.hosts.all()[0].pool.Config().ConnConfig.RequireAuth; got != was || (tc.want == "scram-sha-256" && got == tc.want) {
			t.Errorf("%s: the DSN's host's require_auth became %q", tc.dsn, got)
		}
		c.closePools()
	}
}
