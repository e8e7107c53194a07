package pgroutedgrpc_test

import (
	"context"
	"net"
	"testing"

	"github.com/pgrouted/pgrouted/pgroutedgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The tests' gRPC service is written by hand (no protoc): every message
// is a google.protobuf.StringValue, which grpc's default codec encodes.

// serviceName is the tests' service.
const serviceName = "pgroutedgrpc.test.Service"

// fullMethod is the full name of the service's method name.
func fullMethod(name string) string { return "/" + serviceName + "/" + name }

// unaryFunc is a unary method: a string in, a string out.
type unaryFunc func(ctx context.Context, in string) (string, error)

// service is a set of methods, unary and streaming, to register on a
// server.
type service struct {
	unary   map[string]unaryFunc
	streams []grpc.StreamDesc
}

// desc is the service's descriptor.
func (sv *service) desc() *grpc.ServiceDesc {
	d := &grpc.ServiceDesc{ServiceName: serviceName, HandlerType: (*any)(nil), Streams: sv.streams}
	for name, f := range sv.unary {
		d.Methods = append(d.Methods, grpc.MethodDesc{MethodName: name, Handler: unaryHandler(name, f)})
	}
	return d
}

// unaryHandler is grpc's handler of the unary method f, through the
// server's interceptors.
func unaryHandler(name string, f unaryFunc) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			out, err := f(ctx, req.(*wrapperspb.StringValue).GetValue())
			if err != nil {
				return nil, err
			}
			return wrapperspb.String(out), nil
		}
		if icpt == nil {
			return h(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod(name)}, h)
	}
}

// call calls the unary method name on cc.
func call(ctx context.Context, cc grpc.ClientConnInterface, name, in string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, fullMethod(name), wrapperspb.String(in), out, opts...); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}

// serverOptions are the server options of the interceptors of o.
func serverOptions(o *pgroutedgrpc.Options) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(o.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(o.StreamServerInterceptor()),
	}
}

// dialOptions are the dial options of the interceptors of o (none when o
// is nil), over an insecure connection.
func dialOptions(o *pgroutedgrpc.Options) []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if o != nil {
		opts = append(opts,
			grpc.WithChainUnaryInterceptor(o.UnaryClientInterceptor()),
			grpc.WithChainStreamInterceptor(o.StreamClientInterceptor()))
	}
	return opts
}

// serve serves sv on ln with opts until the test ends.
func serve(t testing.TB, ln net.Listener, sv *service, opts ...grpc.ServerOption) {
	t.Helper()
	srv := grpc.NewServer(opts...)
	srv.RegisterService(sv.desc(), struct{}{})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
}
