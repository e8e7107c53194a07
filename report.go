package pgrouted

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/pgrouted/pgrouted/topology"
)

// This file is what the Connector tells the application: the RouteEvent of
// every statement (Config.OnRoute, counted for Stats), and the topology's
// and circuits' events (Config.Logger).

// began is the start of a statement's RouteEvent.Duration: the clock is
// read only when there is an OnRoute to hand it to.
func (c *Connector) began() time.Time {
	if c.cfg.OnRoute == nil {
		return time.Time{}
	}
	return time.Now()
}

// report counts a statement planned p, which ran as cl records (or failed
// with err, began at began), and hands its RouteEvent to Config.OnRoute. It
// is the one place a RouteEvent is built; nothing reads one to decide.
func (c *Connector) report(ctx context.Context, p *plan, cl *call, began time.Time, err error) {
	c.count(p, cl, err)
	if c.cfg.OnRoute == nil {
		return
	}
	ev := RouteEvent{
		Decision:   Decision{Op: p.op, Primary: cl.primary, Reason: p.reason, Function: p.fn},
		Context:    ctx,
		Query:      cl.query,
		Duration:   time.Since(began),
		Err:        err,
		Retried:    cl.retried || cl.reruns > 0,
		Waited:     cl.waited,
		WriteLost:  p.writeLost,
		Global:     p.global.used,
		GlobalWait: p.global.wait,
	}
	if cl.ran != nil {
		ev.Endpoint = cl.ran.Name
	}
	defer func() {
		if r := recover(); r != nil && c.cfg.Logger != nil {
			c.cfg.Logger.Error("pgrouted: OnRoute panicked", "panic", fmt.Sprint(r))
		}
	}()
	c.cfg.OnRoute(ev)
}

// watch follows the topology's events until Close and logs each one.
func (c *Connector) watch(events <-chan topology.Event) {
	defer close(c.logDone)
	for e := range events {
		if e.Kind == topology.EventPrimaryChanged {
			// A new primary may be a server with another catalog.
			c.funcs.invalidate()
		}
		if c.cfg.Logger == nil {
			continue
		}
		if e.Kind == topology.EventPrivilegeMissing {
			c.logMissingPrivilege(e) // privileges.go
			continue
		}
		attrs := []any{"event", e.Kind.String()}
		switch e.Kind {
		case topology.EventPrimaryChanged, topology.EventPrimaryLost, topology.EventConflict:
			attrs = append(attrs, "epoch", e.Epoch)
		}
		if e.Host != "" {
			attrs = append(attrs, "host", e.Host)
		}
		if e.Previous != "" {
			attrs = append(attrs, "previous", e.Previous)
		}
		if e.Err != "" {
			attrs = append(attrs, "error", e.Err)
		}
		level := slog.LevelInfo
		if e.Kind == topology.EventConflict || e.Kind == topology.EventPrimaryLost || e.Kind == topology.EventHostDown {
			level = slog.LevelWarn
		}
		c.cfg.Logger.Log(context.Background(), level, "pgrouted: topology", attrs...)
	}
}

func (c *Connector) logInfo(msg string, args ...any) {
	if c.cfg.Logger != nil {
		c.cfg.Logger.Info(msg, args...)
	}
}

func (c *Connector) logWarn(msg string, args ...any) {
	if c.cfg.Logger != nil {
		c.cfg.Logger.Warn(msg, args...)
	}
}
