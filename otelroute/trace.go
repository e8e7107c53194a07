package otelroute

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and meters.
const ScopeName = "github.com/pgrouted/pgrouted/otelroute"

// The attributes pgrouted adds beside the semantic conventions' own.
const (
	// AttrEndpoint is the host's name (from pgrouted_names, else
	// host:port), as in RouteEvent.Endpoint and the metrics.
	AttrEndpoint = attribute.Key("pgrouted.endpoint")
	// AttrRole is "primary" or "replica": the role of the host that ran
	// the statement.
	AttrRole = attribute.Key("pgrouted.role")
	// AttrOp is the kind of statement: read, write, tx, lock.
	AttrOp = attribute.Key("pgrouted.op")
	// AttrReason is why it ran there (a pgrouted.Reason… constant); for a
	// read on the primary, why no replica could serve it; for a statement
	// that could not be routed, the RouteError's reason.
	AttrReason = attribute.Key("pgrouted.reason")
	// AttrRetried is true when the statement ran again elsewhere after a
	// replica failed or refused it (SQLSTATE 25006).
	AttrRetried = attribute.Key("pgrouted.retried")
	// AttrReplicaWait is set on a read that waited on its replica for the
	// replica's replay to reach the caller's position
	// (RouteEvent.Waited, pgrouted_replica_wait): how long, in seconds.
	AttrReplicaWait = attribute.Key("pgrouted.replica_wait")
	// AttrGlobal is set, true, on a read that needed the primary's WAL
	// position read after it began (global consistency,
	// RouteEvent.Global), and AttrGlobalWait on it to how long it waited
	// for that position (RouteEvent.GlobalWait), in seconds.
	AttrGlobal     = attribute.Key("pgrouted.global")
	AttrGlobalWait = attribute.Key("pgrouted.global_wait")
	// AttrCausal is set, true, on a read under causal consistency that
	// recorded an upper bound of what it saw for its scope's next reads
	// (RouteEvent.Causal).
	AttrCausal = attribute.Key("pgrouted.causal")
	// AttrWriteLost is set, true, on the read that found the caller's last
	// write lost in a failover (RouteEvent.WriteLost).
	AttrWriteLost = attribute.Key("pgrouted.write_lost")
	// AttrFunction names the function that sent the statement to the
	// primary (RouteEvent.Function), when one did.
	AttrFunction = attribute.Key("pgrouted.function")
)

// Roles, the values of [AttrRole].
const (
	RolePrimary = "primary"
	RoleReplica = "replica"
)

// SpanMode says where [Instrument]'s hook puts a statement's route.
type SpanMode int

const (
	// SpanAuto (the default) adds the attributes to the context's span
	// when it is a CLIENT span, the span a database/sql wrapper (otelsql
	// and the like) starts for the statement, and otherwise starts a span
	// of its own for the statement (SpanPerStatement). It tells the span's
	// kind with the method SpanKind() that the OpenTelemetry SDK's spans
	// have; with another implementation, say which you want. COMMIT and
	// ROLLBACK, which database/sql runs without a context, carry BeginTx's,
	// whose wrapper span has ended: they add nothing to it.
	SpanAuto SpanMode = iota
	// SpanAnnotate only adds the attributes to the context's span, if it
	// records. Choose it when a wrapper's span is there; without one, the
	// span in the context is the request's, and the attributes of its
	// last statement would overwrite the others'.
	SpanAnnotate
	// SpanPerStatement starts a CLIENT span for every statement, a child
	// of the context's span, when the statement starts, before it is
	// routed and sent (Config.OnStart), and ends it when the statement
	// ends: when its rows are closed, for a query; with its error as its
	// status when it failed. It is named by the statement's
	// db.query.summary ("SELECT orders"), or "postgresql" when it has none,
	// as the semantic conventions name database spans.
	SpanPerStatement
)

// Option configures [Instrument] and [RegisterMetrics].
type Option func(*options)

type options struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	spans     SpanMode
	queryText bool
	noMetrics bool
}

func newOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.tp == nil {
		o.tp = otel.GetTracerProvider()
	}
	if o.mp == nil {
		o.mp = otel.GetMeterProvider()
	}
	return o
}

// WithTracerProvider sets the TracerProvider of the spans started per
// statement; the default is the global one (otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tp = tp }
}

// WithMeterProvider sets the MeterProvider of the metrics; the default is
// the global one (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.mp = mp }
}

// WithSpans sets where the route goes: [SpanAuto] (the default),
// [SpanAnnotate] or [SpanPerStatement].
func WithSpans(m SpanMode) Option {
	return func(o *options) { o.spans = m }
}

// WithQueryText records the statement's text (db.query.text) on the spans
// that the hook starts (SpanPerStatement), from their start. It is off by default: a
// statement with literals may carry secrets (ALTER ROLE … PASSWORD).
func WithQueryText() Option {
	return func(o *options) { o.queryText = true }
}

// WithoutDurationMetric leaves out the db.client.operation.duration
// histogram that [Instrument]'s hook records for every statement.
func WithoutDurationMetric() Option {
	return func(o *options) { o.noMetrics = true }
}

// Instrument sets cfg.OnStart to a hook that opens each statement's span
// as the statement starts and ends it when the statement ends (its rows
// closed), with where it ran and why, and cfg.OnRoute to one that records
// its duration in the db.client.operation.duration histogram (and, when
// the span is a wrapper's, puts the route on it). An OnStart or OnRoute
// already set in cfg runs first. Call it before [pgrouted.NewConnector]:
// the hook knows the servers' addresses from cfg's hosts (a host the
// topology provider discovers later is described by its name, host:port).
func Instrument(cfg *pgrouted.Config, opts ...Option) error {
	h, err := newHook(cfg, newOptions(opts))
	if err != nil {
		return err
	}
	cfg.OnRoute = h.onRoute
	if h.spans != SpanAnnotate {
		cfg.OnStart = h.onStart
	}
	return nil
}

// hook is Instrument's OnRoute.
type hook struct {
	spans     SpanMode
	queryText bool
	tracer    trace.Tracer
	duration  metric.Float64Histogram // nil: WithoutDurationMetric
	next      func(pgrouted.RouteEvent)
	nextStart func(context.Context, string) func(pgrouted.RouteEvent)
	namespace []attribute.KeyValue // db.namespace when every host has the same database

	hosts  map[string]*server // by endpoint name, from the Config
	mu     sync.RWMutex
	extra  map[string]*server       // endpoints the Config did not name
	routes map[routeKey]*routeAttrs // made once per kind of route
}

// server is what the attributes say of one endpoint.
type server struct {
	attrs []attribute.KeyValue // server.address, server.port, db.namespace, pgrouted.endpoint
}

// routeKey is what a statement's attributes depend on, but its text and
// error.
type routeKey struct {
	endpoint, op, reason, errType, function, operation string
	primary, retried, writeLost                        bool
}

// routeAttrs are the attributes of one routeKey.
type routeAttrs struct {
	span   []attribute.KeyValue  // read-only: the SDK copies them
	metric []metric.RecordOption // the duration histogram's set, as Record takes it
}

// maxRoutes bounds the cache of routeAttrs (kinds of route are few: hosts ×
// ops × reasons, a few error codes and function names).
const maxRoutes = 4096

// durationBuckets are the semantic conventions' advice for
// db.client.operation.duration.
var durationBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

func newHook(cfg *pgrouted.Config, o options) (*hook, error) {
	h := &hook{
		spans:     o.spans,
		queryText: o.queryText,
		tracer:    o.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		next:      cfg.OnRoute,
		nextStart: cfg.OnStart,
		hosts:     map[string]*server{},
		extra:     map[string]*server{},
		routes:    map[routeKey]*routeAttrs{},
	}
	for _, hc := range cfg.Hosts {
		s := &server{}
		if cc := hc.ConnConfig; cc != nil {
			s.attrs = append(s.attrs, semconv.ServerAddress(cc.Host), semconv.ServerPort(int(cc.Port)))
			if cc.Database != "" {
				s.attrs = append(s.attrs, semconv.DBNamespace(cc.Database))
			}
		} else {
			s.attrs = addrAttrs(hc.Addr)
		}
		s.attrs = append(s.attrs, AttrEndpoint.String(hc.Name))
		h.hosts[hc.Name] = s
	}
	db := ""
	for i, hc := range cfg.Hosts {
		d := ""
		if hc.ConnConfig != nil {
			d = hc.ConnConfig.Database
		}
		if i == 0 {
			db = d
		} else if d != db {
			db = ""
			break
		}
	}
	if db != "" {
		h.namespace = []attribute.KeyValue{semconv.DBNamespace(db)}
	}
	if !o.noMetrics {
		d, err := o.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL)).Float64Histogram(
			"db.client.operation.duration",
			metric.WithDescription("Duration of database client operations: each statement pgrouted ran, until its result (or first row)."),
			metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(durationBuckets...),
		)
		if err != nil {
			return nil, err
		}
		h.duration = d
	}
	return h, nil
}

// addrAttrs describes an endpoint the Config does not name by its address,
// host:port or a unix socket's path.
func addrAttrs(addr string) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return []attribute.KeyValue{semconv.ServerAddress(addr)}
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return []attribute.KeyValue{semconv.ServerAddress(host)}
	}
	return []attribute.KeyValue{semconv.ServerAddress(host), semconv.ServerPort(p)}
}

// server returns the attributes of the endpoint named name.
func (h *hook) server(name string) *server {
	if s := h.hosts[name]; s != nil {
		return s
	}
	h.mu.RLock()
	s := h.extra[name]
	h.mu.RUnlock()
	if s != nil {
		return s
	}
	s = &server{attrs: append(addrAttrs(name), AttrEndpoint.String(name))}
	h.mu.Lock()
	h.extra[name] = s
	h.mu.Unlock()
	return s
}

// kinded is the SDK's way to tell a span's kind (sdktrace.ReadOnlySpan).
type kinded interface{ SpanKind() trace.SpanKind }

// ownSpan reports whether the hook starts a span of its own for a
// statement of ctx, rather than annotating the context's.
func (h *hook) ownSpan(ctx context.Context) bool {
	switch h.spans {
	case SpanPerStatement:
		return true
	case SpanAuto:
		// A wrapper's span, even ended (COMMIT and ROLLBACK carry the
		// context of BEGIN), means the wrapper traces the statement.
		kd, ok := trace.SpanFromContext(ctx).(kinded)
		return !ok || kd.SpanKind() != trace.SpanKindClient
	}
	return false
}

// onStart is Config.OnStart: it opens the statement's span, a CLIENT
// child of the context's, with the attributes the conventions ask for at
// its creation that are known before the statement is routed
// (db.system.name, db.namespace, db.operation.name, db.query.summary; the
// server's come with the route), and returns what ends it.
func (h *hook) onStart(ctx context.Context, query string) func(pgrouted.RouteEvent) {
	var next func(pgrouted.RouteEvent)
	if h.nextStart != nil {
		next = h.nextStart(ctx, query)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if !h.ownSpan(ctx) {
		return next
	}
	op, summary := summarize(query)
	name := summary
	if name == "" {
		name = "postgresql"
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, semconv.DBSystemNamePostgreSQL)
	attrs = append(attrs, h.namespace...)
	if op != "" {
		attrs = append(attrs, semconv.DBOperationName(op))
	}
	if summary != "" {
		attrs = append(attrs, semconv.DBQuerySummary(summary))
	}
	if h.queryText {
		attrs = append(attrs, semconv.DBQueryText(query))
	}
	_, span := h.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return func(ev pgrouted.RouteEvent) {
		if next != nil {
			next(ev)
		}
		h.end(span, ev)
	}
}

// end ends a statement's span with its route (ev).
func (h *hook) end(span trace.Span, ev pgrouted.RouteEvent) {
	if span.IsRecording() {
		k := h.key(ev)
		ra := h.route(k)
		span.SetAttributes(ra.span...)
		if ev.Waited > 0 {
			span.SetAttributes(AttrReplicaWait.Float64(ev.Waited.Seconds()))
		}
		if ev.Global {
			span.SetAttributes(AttrGlobal.Bool(true), AttrGlobalWait.Float64(ev.GlobalWait.Seconds()))
		}
		if ev.Causal {
			span.SetAttributes(AttrCausal.Bool(true))
		}
		if ev.Err != nil {
			var pe *pgconn.PgError
			if errors.As(ev.Err, &pe) {
				span.SetAttributes(semconv.ErrorTypeKey.String(k.errType), semconv.DBResponseStatusCode(pe.Code))
			} else {
				span.SetAttributes(semconv.ErrorTypeKey.String(k.errType))
			}
			span.SetStatus(codes.Error, ev.Err.Error())
		}
	}
	span.End()
}

// key is the routeKey of ev.
func (h *hook) key(ev pgrouted.RouteEvent) routeKey {
	k := routeKey{endpoint: ev.Endpoint, op: ev.Op, reason: string(ev.Reason), function: ev.Function,
		primary: ev.Primary, retried: ev.Retried, writeLost: ev.WriteLost}
	k.operation, _ = operationOf(ev.Query)
	if ev.Err != nil {
		k.errType = errorType(ev.Err)
		var re *pgrouted.RouteError
		if k.reason == "" && errors.As(ev.Err, &re) {
			k.reason = string(re.Reason)
		}
	}
	return k
}

// onRoute is Config.OnRoute: the duration histogram, and the route on a
// wrapper's span (the hook's own spans get it when they end).
func (h *hook) onRoute(ev pgrouted.RouteEvent) {
	if h.next != nil {
		h.next(ev)
	}
	ctx := ev.Context
	if ctx == nil {
		ctx = context.Background()
	}
	own := h.ownSpan(ctx)
	if own && h.duration == nil {
		return
	}
	ra := h.route(h.key(ev))
	if span := trace.SpanFromContext(ctx); !own && span.IsRecording() {
		span.SetAttributes(ra.span...)
		if ev.Waited > 0 {
			span.SetAttributes(AttrReplicaWait.Float64(ev.Waited.Seconds()))
		}
		if ev.Global {
			span.SetAttributes(AttrGlobal.Bool(true), AttrGlobalWait.Float64(ev.GlobalWait.Seconds()))
		}
		if ev.Causal {
			span.SetAttributes(AttrCausal.Bool(true))
		}
	}
	if h.duration != nil {
		h.duration.Record(ctx, ev.Duration.Seconds(), ra.metric...)
	}
}

// route returns the attributes of k, made once.
func (h *hook) route(k routeKey) *routeAttrs {
	h.mu.RLock()
	ra := h.routes[k]
	h.mu.RUnlock()
	if ra != nil {
		return ra
	}
	var srv *server
	if k.endpoint != "" {
		srv = h.server(k.endpoint)
	}
	common := []attribute.KeyValue{semconv.DBSystemNamePostgreSQL, AttrOp.String(k.op), AttrReason.String(k.reason)}
	if k.operation != "" {
		common = append(common, semconv.DBOperationName(k.operation))
	}
	if srv != nil {
		common = append(common, srv.attrs...)
		common = append(common, AttrRole.String(role(k.primary)))
	}
	m := slices.Clone(common)
	if k.errType != "" {
		m = append(m, semconv.ErrorTypeKey.String(k.errType))
	}
	sp := append(common, AttrRetried.Bool(k.retried))
	if k.writeLost {
		sp = append(sp, AttrWriteLost.Bool(true))
	}
	if k.function != "" {
		sp = append(sp, AttrFunction.String(k.function))
	}
	ra = &routeAttrs{span: slices.Clip(sp), metric: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(m...))}}
	h.mu.Lock()
	if len(h.routes) < maxRoutes {
		h.routes[k] = ra
	}
	h.mu.Unlock()
	return ra
}

func role(primary bool) string {
	if primary {
		return RolePrimary
	}
	return RoleReplica
}

// errorType is error.type: a PostgreSQL error's SQLSTATE (as the semantic
// conventions for SQL ask), else the error's type.
func errorType(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return semconv.ErrorType(err).Value.AsString()
}
