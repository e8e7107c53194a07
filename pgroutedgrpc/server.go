package pgroutedgrpc

import (
	"context"

	"github.com/pgrouted/pgrouted"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// UnaryServerInterceptor is DefaultOptions.UnaryServerInterceptor(): see
// [Options.UnaryServerInterceptor].
func UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return DefaultOptions.UnaryServerInterceptor()
}

// StreamServerInterceptor is DefaultOptions.StreamServerInterceptor(): see
// [Options.StreamServerInterceptor].
func StreamServerInterceptor() grpc.StreamServerInterceptor {
	return DefaultOptions.StreamServerInterceptor()
}

// UnaryServerInterceptor returns an interceptor that runs each unary
// handler with the caller's [pgrouted.Session] in its context
// ([WithSession]), restored from the request metadata [MetadataKey] (a
// fresh Session when there is none, or when it cannot be trusted: never an
// error to the caller), and, when the handler's writes moved the Session,
// sends its token back in the response's trailer. It panics when one of
// o.Keys is shorter than 32 bytes.
func (o *Options) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	o.checkKeys()
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		s, in := o.incoming(ctx)
		resp, err := handler(WithSession(ctx, s), req)
		if md := o.moved(s, in); md != nil {
			_ = grpc.SetTrailer(ctx, md)
		}
		return resp, err
	}
}

// StreamServerInterceptor returns an interceptor that runs each streaming
// handler with the caller's [pgrouted.Session] in its stream's context, as
// [Options.UnaryServerInterceptor] does, and sends the Session's token back
// when the handler's writes moved it: in the response's header when it
// goes out (the handler's SendHeader, or its first message), for the
// writes made before it, and in the trailer, for all of them. It panics
// when one of o.Keys is shorter than 32 bytes.
func (o *Options) StreamServerInterceptor() grpc.StreamServerInterceptor {
	o.checkKeys()
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		s, in := o.incoming(ss.Context())
		w := &serverStream{ServerStream: ss, ctx: WithSession(ss.Context(), s), o: o, in: in}
		err := handler(srv, w)
		if md := o.moved(s, in); md != nil {
			ss.SetTrailer(md)
		}
		return err
	}
}

// incoming restores the Session of the request metadata of ctx; in is its
// text then ("" when it was not restored).
func (o *Options) incoming(ctx context.Context) (s *pgrouted.Session, in string) {
	return o.restore(first(metadata.ValueFromIncomingContext(ctx, MetadataKey)))
}

// moved returns the metadata that carries s's token when s moved since it
// was restored (its text then: in); nil when it did not, or has no
// writes.
func (o *Options) moved(s *pgrouted.Session, in string) metadata.MD {
	text, err := s.MarshalText()
	if err != nil || len(text) == 0 || string(text) == in {
		return nil
	}
	token, err := o.Token(s)
	if err != nil || token == "" {
		return nil
	}
	return metadata.Pairs(MetadataKey, token)
}

// first is the first of a metadata key's values; "" when it has none.
func first(values []string) string {
	if len(values) == 0 {
		return ""
	}
	return values[0]
}

// serverStream is a handler's stream: its context holds the Session, and
// the header it sends carries the Session's token when the Session moved.
// A handler calls SendHeader and SendMsg from one goroutine at a time
// (grpc.ServerStream's rule), so headerSent needs no lock.
type serverStream struct {
	grpc.ServerStream
	ctx        context.Context
	o          *Options
	in         string // the Session's text when it was restored
	headerSent bool
}

// Context implements grpc.ServerStream: the stream's context with the
// Session.
func (w *serverStream) Context() context.Context { return w.ctx }

// SendHeader implements grpc.ServerStream: md, and the token when the
// Session moved.
func (w *serverStream) SendHeader(md metadata.MD) error {
	if !w.headerSent {
		w.headerSent = true
		if t := w.o.moved(SessionFrom(w.ctx), w.in); t != nil {
			md = metadata.Join(md, t)
		}
	}
	return w.ServerStream.SendHeader(md)
}

// SendMsg implements grpc.ServerStream. The first message sends the
// header, with the token when the Session moved.
func (w *serverStream) SendMsg(m any) error {
	if !w.headerSent {
		w.headerSent = true
		if t := w.o.moved(SessionFrom(w.ctx), w.in); t != nil {
			_ = w.ServerStream.SetHeader(t)
		}
	}
	return w.ServerStream.SendMsg(m)
}
