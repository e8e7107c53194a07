package pgrouted

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/topology"
)

// This file is what the Connector tells the application: the RouteEvent of
// every statement (Config.OnRoute, counted for Stats), and the topology's
// and circuits' events (Config.Logger).

// started is a statement's start: the start of its RouteEvent.Duration,
// and what Config.OnStart asked to be told when it ends.
type started struct {
	at  time.Time        // zero when no hook reads it
	end func(RouteEvent) // from Config.OnStart; nil: none
}

// began starts a statement of ctx and query: the clock is read only when
// there is a hook to hand it to, and Config.OnStart, if set, is called
// now, before anything is routed or sent. Without hooks it costs nothing.
func (c *Connector) began(ctx context.Context, query string) started {
	if c.cfg.OnRoute == nil && c.cfg.OnStart == nil {
		return started{}
	}
	s := started{at: time.Now()}
	if c.cfg.OnStart != nil {
		s.end = c.onStart(ctx, query)
	}
	return s
}

// onStart calls Config.OnStart, recovering a panic (logged, as OnRoute's).
func (c *Connector) onStart(ctx context.Context, query string) (end func(RouteEvent)) {
	defer func() {
		if r := recover(); r != nil {
			end = nil
			if c.cfg.Logger != nil {
				c.cfg.Logger.Error("pgrouted: OnStart panicked", "panic", fmt.Sprint(r))
			}
		}
	}()
	return c.cfg.OnStart(ctx, query)
}

// report counts a statement cl planned p, whose route's outcome was o (and
// error err; it began at began), and hands its RouteEvent to Config.OnRoute,
// and to the end function Config.OnStart returned: now, or when the
// statement's open results (rows, batch results) are closed (endOnClose).
// It is the one place a RouteEvent is built; nothing reads one to decide.
func (c *Connector) report(ctx context.Context, p *plan, cl *call, o outcome, began started, err error) {
	c.count(p, o, err)
	if c.cfg.OnRoute == nil && began.end == nil {
		return
	}
	ev := RouteEvent{
		Decision:   Decision{Op: p.op, Primary: o.primary, Reason: p.reason, Function: p.fn},
		Context:    ctx,
		Query:      cl.query,
		Duration:   time.Since(began.at),
		Err:        err,
		Retried:    o.retried || o.reruns > 0,
		Waited:     o.waited,
		WriteLost:  p.writeLost,
		Global:     p.global.used,
		GlobalWait: p.global.wait,
		Causal:     cl.saw != nil,
	}
	if o.ran != nil {
		ev.Endpoint = o.ran.Name
	}
	if c.cfg.OnRoute != nil {
		c.onRoute(ev)
	}
	if began.end != nil {
		c.endOnClose(cl, began, ev, err)
	}
}

// onRoute calls Config.OnRoute with ev, recovering a panic (logged).
func (c *Connector) onRoute(ev RouteEvent) {
	defer func() {
		if r := recover(); r != nil && c.log != nil {
			c.log.Error("pgrouted: OnRoute panicked", "panic", fmt.Sprint(r))
		}
	}()
	c.cfg.OnRoute(ev)
}

// endOnClose calls s.end, OnStart's end function, with ev: once the
// statement's open results are closed when it left some (a query's rows,
// a batch's results), with Duration up to then and Err the results' error;
// now otherwise.
func (c *Connector) endOnClose(cl *call, s started, ev RouteEvent, err error) {
	if err == nil {
		if cl.ex.whenClosed(cl, func(rerr error) {
			ev.Duration, ev.Err = time.Since(s.at), rerr
			c.callEnd(s.end, ev)
		}) {
			return
		}
	}
	c.callEnd(s.end, ev)
}

// callEnd calls end, an OnStart end function, with ev, recovering a panic.
func (c *Connector) callEnd(end func(RouteEvent), ev RouteEvent) {
	defer func() {
		if r := recover(); r != nil && c.cfg.Logger != nil {
			c.cfg.Logger.Error("pgrouted: OnStart's end function panicked", "panic", fmt.Sprint(r))
		}
	}()
	end(ev)
}

// watch follows the topology's events until Close and logs each one.
func (c *Connector) watch(events <-chan topology.Event) {
	defer close(c.logDone)
	for e := range events {
		if e.Kind == topology.EventPrimaryChanged {
			// A new primary may be a server with another catalog.
			c.funcs.invalidate()
		}
		if c.log == nil {
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
		c.log.Log(context.Background(), level, "pgrouted: topology", attrs...)
	}
}

func (c *Connector) logInfo(msg string, args ...any) {
	if c.log != nil {
		c.log.Info(msg, args...)
	}
}

func (c *Connector) logWarn(msg string, args ...any) {
	if c.log != nil {
		c.log.Warn(msg, args...)
	}
}

// printableLogger returns l with every line it writes made printable: its
// message and every string, error and Stringer value of its attributes go
// through dsn.Printable, the one function through which pgrouted prints a
// host or member name (and the errors and reasons that quote one). A
// byte or character that could break, hide or reorder a log line is
// written as an escape. nil stays nil.
func printableLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return nil
	}
	if _, ok := l.Handler().(printableHandler); ok {
		return l
	}
	return slog.New(printableHandler{l.Handler()})
}

// printableHandler is the slog.Handler of printableLogger.
type printableHandler struct{ next slog.Handler }

// Enabled implements slog.Handler.
func (h printableHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle implements slog.Handler.
func (h printableHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, dsn.Printable(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(printableAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (h printableHandler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = printableAttr(a)
	}
	return printableHandler{h.next.WithAttrs(clean)}
}

// WithGroup implements slog.Handler.
func (h printableHandler) WithGroup(name string) slog.Handler {
	return printableHandler{h.next.WithGroup(dsn.Printable(name))}
}

// printableAttr returns a with its key and value made printable (groups
// too).
func printableAttr(a slog.Attr) slog.Attr {
	a.Key = dsn.Printable(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(dsn.Printable(v.String()))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]slog.Attr, len(g))
		for i, ga := range g {
			clean[i] = printableAttr(ga)
		}
		a.Value = slog.GroupValue(clean...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			a.Value = slog.StringValue(dsn.Printable(x.Error()))
		case fmt.Stringer:
			a.Value = slog.StringValue(dsn.Printable(x.String()))
		default:
			a.Value = v
		}
	default:
		a.Value = v
	}
	return a
}
