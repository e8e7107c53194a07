package pgroutedgrpc

import (
	"context"

	"github.com/pgrouted/pgrouted"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// UnaryClientInterceptor is DefaultOptions.UnaryClientInterceptor(): see
// [Options.UnaryClientInterceptor].
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return DefaultOptions.UnaryClientInterceptor()
}

// StreamClientInterceptor is DefaultOptions.StreamClientInterceptor(): see
// [Options.StreamClientInterceptor].
func StreamClientInterceptor() grpc.StreamClientInterceptor {
	return DefaultOptions.StreamClientInterceptor()
}

// UnaryClientInterceptor returns an interceptor that sends the Session of
// a call's context ([SessionFrom]: the one a server interceptor or
// [WithSession] put there) in the request metadata [MetadataKey], and
// merges the token the server sends back (in the trailer) into it, so that
// the caller's later reads need the server's writes too. A call whose
// context holds no Session goes as it is. A token sent back that cannot be
// trusted, or that names another cluster than the Session's, is ignored
// and counted ([Options.Rejected]); the call's outcome is the server's.
// It panics when one of o.Keys is shorter than 32 bytes.
func (o *Options) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	o.checkKeys()
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		s := SessionFrom(ctx)
		if s == nil {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		var trailer metadata.MD
		opts = append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))
		err := invoker(o.outgoing(ctx, s), method, req, reply, cc, opts...)
		o.adopt(s, first(trailer.Get(MetadataKey)))
		return err
	}
}

// StreamClientInterceptor returns an interceptor that sends the Session of
// a stream's context as [Options.UnaryClientInterceptor] does, and merges
// the tokens the server sends back into it: the header's, when the
// stream's first message arrives (or when the caller asks for the header),
// and the trailer's, when the stream ends (RecvMsg returns an error,
// io.EOF included, or the one response of a call that is not
// server-streaming). A stream the caller abandons before its end brings
// back only the header's. It panics when one of o.Keys is shorter than 32
// bytes.
func (o *Options) StreamClientInterceptor() grpc.StreamClientInterceptor {
	o.checkKeys()
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s := SessionFrom(ctx)
		if s == nil {
			return streamer(ctx, desc, cc, method, opts...)
		}
		cs, err := streamer(o.outgoing(ctx, s), desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &clientStream{ClientStream: cs, o: o, s: s, serverStreams: desc.ServerStreams}, nil
	}
}

// outgoing returns ctx with s's token in its outgoing metadata (in place
// of any the metadata held); ctx itself when s has no writes.
func (o *Options) outgoing(ctx context.Context, s *pgrouted.Session) context.Context {
	token, err := o.Token(s)
	if err != nil || token == "" {
		return ctx
	}
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok || len(md.Get(MetadataKey)) == 0 {
		return metadata.AppendToOutgoingContext(ctx, MetadataKey, token)
	}
	md.Set(MetadataKey, token)
	return metadata.NewOutgoingContext(ctx, md)
}

// clientStream merges the tokens of a stream's header and trailer into
// the Session. RecvMsg is called from one goroutine at a time
// (grpc.ClientStream's rule); Header may be called beside it: merging the
// same token twice changes nothing.
type clientStream struct {
	grpc.ClientStream
	o             *Options
	s             *pgrouted.Session
	serverStreams bool
	gotHeader     bool // RecvMsg merged the header's token
}

// Header implements grpc.ClientStream: the server's header, whose token it
// merges into the Session.
func (w *clientStream) Header() (metadata.MD, error) {
	md, err := w.ClientStream.Header()
	if err == nil {
		w.o.adopt(w.s, first(md.Get(MetadataKey)))
	}
	return md, err
}

// RecvMsg implements grpc.ClientStream. After the first message it merges
// the header's token; at the stream's end, the trailer's.
func (w *clientStream) RecvMsg(m any) error {
	err := w.ClientStream.RecvMsg(m)
	switch {
	case err != nil || !w.serverStreams:
		// The stream ended: its trailer is there (for a call that is not
		// server-streaming, RecvMsg read it after the one response).
		w.o.adopt(w.s, first(w.ClientStream.Trailer().Get(MetadataKey)))
	case !w.gotHeader:
		// A message arrived: the header has, and asking for it does not
		// block.
		w.gotHeader = true
		if md, herr := w.ClientStream.Header(); herr == nil {
			w.o.adopt(w.s, first(md.Get(MetadataKey)))
		}
	}
	return err
}
