package pgrouted

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ProbeNow asks c's topology for an immediate probe of host i (in the
// DSN's order).
func ProbeNow(c *Connector, i int) { c.top.ProbeNow(i) }

// ReplicaCacheCapacities returns the capacities of pgx's statement and
// description caches of a connection of host i's pool.
func ReplicaCacheCapacities(ctx context.Context, c *Connector, i int) (stmt, desc int, err error) {
	err = c.hosts.all()[i].pool.AcquireFunc(ctx, func(pc *pgxpool.Conn) error {
		cc := pc.Conn().Config()
		stmt, desc = cc.StatementCacheCapacity, cc.DescriptionCacheCapacity
		return nil
	})
	return stmt, desc, err
}

// PrimaryCacheCapacities returns the capacities of pgx's statement and
// description caches of the primary session of dc, a driver connection
// (from sql.Conn.Raw); false when it has none.
func PrimaryCacheCapacities(dc any) (stmt, desc int, ok bool) {
	cn, _ := dc.(*conn)
	if cn == nil || cn.primary == nil {
		return 0, 0, false
	}
	cc := cn.primary.Conn().Config()
	return cc.StatementCacheCapacity, cc.DescriptionCacheCapacity, true
}

// PoolInUse returns the number of p's connections in use: a call running,
// rows or batch results open, a transaction, an acquired connection.
func PoolInUse(p *Pool) int {
	n, _ := p.conns.counts()
	return n
}

// PoolIdle returns the number of p's idle connections.
func PoolIdle(p *Pool) int {
	_, n := p.conns.counts()
	return n
}

// FetchPosition is one read of the primary's position by c, outside the
// read index (Connector.fetchPosition).
func FetchPosition(ctx context.Context, c *Connector) error {
	_, err := c.fetchPosition(ctx)
	return err
}

// IndexPosition is one read of the primary's position by c through its
// read index, shared with concurrent ones (Connector.readPosition).
func IndexPosition(ctx context.Context, c *Connector) error {
	var g indexRead
	c.readPosition(ctx, &g)
	return g.err
}

// ProbeThenWait is what a write does when host i, the primary, failed it:
// ask for a probe of the host at once (probeNow), then wait for news of it
// (waitChange) within timeout; here the probe is recorded before the wait
// begins, as one that fails at once can be.
func ProbeThenWait(ctx context.Context, c *Connector, i int, timeout time.Duration) error {
	h := c.hosts.all()[i]
	first := c.probeNow(h)
	deadline := time.Now().Add(timeout)
	for c.view().of(h).probe.LastProbe.Equal(first) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the probe asked for was not recorded within %v", timeout)
		}
		time.Sleep(time.Millisecond)
	}
	return c.waitChange(ctx, h, c.view().snap.Epoch, first, OpWrite, deadline)
}

// SetCatalogInterval sets how often the catalog is read again when its
// fingerprint did not change, and returns what puts the old value back.
func SetCatalogInterval(d time.Duration) func() {
	old := catalogInterval
	catalogInterval = d
	return func() { catalogInterval = old }
}

// HoldCatalogLoads makes c's catalog loads wait until release is called:
// the snapshot stays the one read before.
func HoldCatalogLoads(c *Connector) (release func()) {
	ch := make(chan struct{})
	c.funcs.hold.Store(&ch)
	var once sync.Once
	return func() {
		once.Do(func() {
			c.funcs.hold.Store(nil)
			close(ch)
		})
	}
}
