package pgrouted

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
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

// A discovered host's connections are opened only when they prove the
// server's identity (verify-full on every attempt, or channel binding) or
// send no password; otherwise the host comes refused, naming the settings
// (never the password), and nothing can dial it: neither its pool nor its
// probe. The DSN's require_auth applies unchanged.
func TestDiscoveredHostProof(t *testing.T) {
	const pw = "s3cret-pw"
	ca := caFile(t)
	for _, tc := range []struct {
		dsn     string
		refused bool
	}{
		{"host=db1.example user=app password=" + pw + " sslmode=disable", true},
		{"host=db1.example user=app password=" + pw, true}, // sslmode=prefer
		{"host=db1.example user=app password=" + pw + " sslmode=require", true},
		{"host=db1.example user=app password=" + pw + " sslmode=verify-ca sslrootcert=" + ca, true},
		{"host=db1.example user=app password=" + pw + " sslmode=require sslrootcert=" + ca, true}, // verify-ca
		{"host=db1.example user=app password=" + pw + " sslmode=verify-full sslrootcert=" + ca, false},
		{"host=db1.example user=app password=" + pw + " sslmode=require channel_binding=prefer", true},
		{"host=db1.example user=app password=" + pw + " sslmode=verify-full sslrootcert=system", false},
		{"host=db1.example user=app password=" + pw + " sslmode=require channel_binding=require", false},
		{"host=db1.example user=app password=" + pw + " sslmode=verify-full sslrootcert=system require_auth=md5", false},
		{"host=db1.example user=app sslmode=disable", false},
		{"host=db1.example user=app sslmode=prefer require_auth=!password", false},
	} {
		dsn := tc.dsn + " pgrouted_discover=true"
		c, cfg := hostsOnly(t, dsn)
		th, ok := c.discoverHost(1, topology.Member{Name: "pg-new", Host: "127.0.0.1", Port: 1})
		if !ok {
			t.Fatalf("%s: member not added", tc.dsn)
		}
		if got := th.Refused != ""; got != tc.refused {
			t.Errorf("%s: refused %v (%q), want %v", tc.dsn, got, th.Refused, tc.refused)
		}
		h := c.hosts.all()[1]
		if want := cfg.Hosts[0].ConnConfig.RequireAuth; h.pool.Config().ConnConfig.RequireAuth != want || th.Config.RequireAuth != want {
			t.Errorf("%s: require_auth %q (data), %q (probe), want the DSN's %q", tc.dsn, h.pool.Config().ConnConfig.RequireAuth, th.Config.RequireAuth, want)
		}
		if tc.refused {
			for _, part := range []string{"sslmode=verify-full", "channel_binding=require"} {
				if !strings.Contains(th.Refused, part) {
					t.Errorf("%s: refusal %q does not name %s", tc.dsn, th.Refused, part)
				}
			}
			if strings.Contains(th.Refused, pw) {
				t.Errorf("%s: the refusal holds the password", tc.dsn)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := h.pool.Ping(ctx)
			cancel()
			if err == nil || !strings.Contains(err.Error(), "discovered host refused") {
				t.Errorf("%s: the refused host's pool dialled it: %v", tc.dsn, err)
			}
			if _, err := th.Config.DialFunc(context.Background(), "tcp", "127.0.0.1:1"); err == nil {
				t.Errorf("%s: the refused host's probe configuration dials", tc.dsn)
			}
		}
		c.closePools()
	}
}

// caFile writes a self-signed CA certificate (PEM) for sslrootcert and
// returns its path.
func caFile(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The Connector's log lines go through dsn.Printable: a name, an error or
// a value that quotes one cannot break, hide or forge a line.
func TestPrintableLogger(t *testing.T) {
	var b strings.Builder
	l := printableLogger(slog.New(slog.NewJSONHandler(&b, nil)))
	l.With("host", "a\u202eb").WithGroup("g\x1b").Warn("msg \x1b[2J", "member", "m\nlevel=ERROR", "error", errors.New("e\x00\xff"),
		slog.Group("in", "name", "x\u2028y"), "n", 3)
	out := b.String()
	for _, want := range []string{`a\\u202eb`, `msg \\u001b[2J`, `m\\u000alevel=ERROR`, `e\\u0000\\xff`, `x\\u2028y`, `"n":3`, `g\\u001b`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %s lacks %s", out, want)
		}
	}
	if strings.ContainsAny(out, "\u202e\x1b\u2028") {
		t.Errorf("log holds a raw control or format character: %q", out)
	}
	if printableLogger(nil) != nil || printableLogger(l) != l {
		t.Error("printableLogger wraps nil, or wraps twice")
	}
}
