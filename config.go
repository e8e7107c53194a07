package pgrouted

import (
	"context"
	"log/slog"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/topology"
)

// Config is a parsed pgrouted DSN plus the hooks a DSN cannot carry. Build
// one with [ParseConfig], change it, and pass it to [NewConnector].
// Printing a Config never shows a password.
type Config struct {
	// Config holds the hosts, each with its pgx configuration, and every
	// pgrouted_ routing setting (see package dsn for each field).
	dsn.Config

	// OnRoute, when set, is called after every statement with where it ran
	// and why, and the statement's context (RouteEvent.Context: the
	// caller's span is there). It runs on the statement's goroutine after
	// the statement returned its result: keep it fast. A panic in it is recovered and
	// logged; it never breaks the statement.
	OnRoute func(RouteEvent)

	// OnStart, when set, is called as each statement starts (a query, an
	// exec, BEGIN, COMMIT, ROLLBACK, a batch, a copy), on its goroutine,
	// before it is routed or anything is sent, with its context and text.
	// The function it returns, when not nil, is called once when the
	// statement ends, with the statement's RouteEvent: for a query (or a
	// batch of the pgx-native API) when the caller closes its rows (or
	// results), with Duration up to then and Err the rows' error; for
	// anything else, or a statement that failed, right after OnRoute. A
	// span that is open while the statement runs starts in OnStart and
	// ends in that function (package otelroute). Both run on the
	// statement's path: keep them fast. A panic in either is recovered and
	// logged. With neither OnStart nor OnRoute set, pgrouted reads no
	// clock and allocates nothing for them.
	OnStart func(ctx context.Context, query string) func(RouteEvent)

	// Logger, when set, receives one structured line for each topology
	// event (primary changed or lost, conflicting primaries, host up or
	// down, circuit opened or closed), and none per statement.
	//
	// Behind a connection pooler it also receives, once, that a host is
	// behind one, and that a connection pinned session state on one
	// (txpooler.go).
	Logger *slog.Logger

	// Select, when set, chooses the replica of a read among two or more
	// eligible ones, instead of the pgrouted_select policy (which is
	// Config.SelectPolicy): it returns the Name of one of candidates.
	// When it returns another name, the policy chooses. It runs on the
	// statement's goroutine for every such read: keep it fast.
	Select func(ctx context.Context, candidates []Candidate) string

	// Provider, when set, is the application's or an orchestrator's
	// authority on which host leads and which hosts serve (see
	// [topology.Provider]; [topology.Manual] is a small one to drive from
	// code), under the same rules as pgrouted_topology=patroni: a write
	// goes to a host only when the provider names it leader and the
	// host's own probe finds it out of recovery, both inside
	// pgrouted_lease; two leaders mean no primary. It cannot be combined
	// with pgrouted_topology=patroni, which builds a provider of its own.
	Provider topology.Provider
}

// Candidate is an eligible replica offered to Config.Select.
type Candidate struct {
	Name     string
	Weight   int           // from pgrouted_weights
	Inflight int64         // reads running on it through this connector
	RTT      time.Duration // probe round trip EWMA; 0 when unknown
	ByteLag  uint64        // WAL bytes behind the primary's last probe
	// ByteLagKnown is false when ByteLag is unknown.
	ByteLagKnown bool
}

// Clone returns a deep copy of c, its hooks included (OnRoute, OnStart, Logger,
// Select, Provider: the same functions and values, which a copy shares).
// It shadows the embedded dsn.Config's Clone, which copies only the parsed
// DSN. A nil c clones to nil.
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	cp := *c
	cp.Config = *c.Config.Clone()
	return &cp
}

// ParseConfig parses a DSN: any connection string pgx accepts (URL or
// keyword/value, several hosts), plus the pgrouted_ keys listed in package
// dsn. Errors never contain the password.
func ParseConfig(connString string) (*Config, error) {
	c, err := dsn.Parse(connString)
	if err != nil {
		return nil, err
	}
	return &Config{Config: *c}, nil
}

// DefaultConnectTimeout bounds the opening of a data connection, and of a
// probe's connection, when the DSN has no connect_timeout.
var DefaultConnectTimeout = 5 * time.Second
