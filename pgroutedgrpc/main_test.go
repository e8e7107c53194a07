package pgroutedgrpc_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/pgroutedgrpc"
	"github.com/pgrouted/pgrouted/testcluster"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// cluster is this package's primary with two streaming replicas, started
// once (the tests of the interceptors alone need none, and do not use it).
var cluster *testcluster.Cluster

// Environment of the test binary run again as service B (serveHelper):
// the DSN it serves on, and its signing key (hexadecimal; none when
// empty).
const (
	serveEnv = "PGROUTEDGRPC_TEST_SERVE_DSN"
	keyEnv   = "PGROUTEDGRPC_TEST_KEY"
)

func TestMain(m *testing.M) {
	if dsn := os.Getenv(serveEnv); dsn != "" {
		os.Exit(serveHelper(dsn))
	}
	testcluster.Main(m, testcluster.Options{
		Replicas: 2,
		Logf:     func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	}, func(c *testcluster.Cluster) { cluster = c })
}

// testCtx is a context for one test: it ends after 3 minutes or with the
// test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// appDSN is the DSN of the services: reads wait up to 100ms on a replica
// for their Session's position.
func appDSN() string {
	return cluster.DSN() + "&pgrouted_replica_wait=100ms&pgrouted_probe_interval=100ms"
}

// app is a service on pgrouted behind the interceptors. Both services of
// the tests run it: A (in the test's process) with connections to its
// peer B (the test binary run again); B without. Its methods (unary
// unless said):
//
//   - Insert: inserts a row, answers its id.
//   - Read id: answers "found" or "missing", and "replica" or "primary"
//     (where the read ran, from the read itself).
//   - WriteThenPeerRead mode: inserts a row, has the peer read it and
//     answers the peer's answer; mode "session" calls the peer through
//     the client interceptors, "plain" without them.
//   - PeerWriteThenRead mode: has the peer insert a row, reads it and
//     answers as Read.
//   - WriteThenPeerStream mode: inserts two rows and has the peer read
//     them in one stream (ReadStream); answers the peer's answers,
//     joined with ",".
//   - ReadStream (server-streaming) "id id ...": one Read answer each.
//   - Counts: "reads onReplica rejected": the service's reads of items
//     so far (counted by Config.OnRoute) and its tokens rejected.
//   - Ready: an error unless a read goes to a replica and every standby
//     has answered a probe.
type app struct {
	db         *sql.DB
	conn       *pgrouted.Connector
	opts       *pgroutedgrpc.Options
	peer       *grpc.ClientConn // with the client interceptors (A only)
	plainPeer  *grpc.ClientConn // without them (A only)
	reads      atomic.Int64     // reads of items, by OnRoute
	onReplicas atomic.Int64     // of which on a replica
}

func openApp(dsn string, keys [][]byte) (*app, error) {
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	a := &app{opts: &pgroutedgrpc.Options{Keys: keys}}
	cfg.OnRoute = func(ev pgrouted.RouteEvent) {
		if ev.Op == pgrouted.OpRead && strings.Contains(ev.Query, "items") {
			a.reads.Add(1)
			if !ev.Primary {
				a.onReplicas.Add(1)
			}
		}
	}
	a.conn, err = pgrouted.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	a.db = sql.OpenDB(a.conn)
	return a, nil
}

// connectPeer opens A's connections to B at addr.
func (a *app) connectPeer(addr string) error {
	var err error
	if a.peer, err = grpc.NewClient(addr, dialOptions(a.opts)...); err != nil {
		return err
	}
	a.plainPeer, err = grpc.NewClient(addr, dialOptions(nil)...)
	return err
}

func (a *app) close() {
	for _, cc := range []*grpc.ClientConn{a.peer, a.plainPeer} {
		if cc != nil {
			cc.Close()
		}
	}
	a.db.Close()
}

func (a *app) peerOf(mode string) (*grpc.ClientConn, error) {
	switch mode {
	case "session":
		return a.peer, nil
	case "plain":
		return a.plainPeer, nil
	}
	return nil, fmt.Errorf("mode %q", mode)
}

func (a *app) insert(ctx context.Context) (string, error) {
	var id int64
	err := a.db.QueryRowContext(ctx, "INSERT INTO items (v) VALUES ('x') RETURNING id").Scan(&id)
	return strconv.FormatInt(id, 10), err
}

func (a *app) read(ctx context.Context, id string) (string, error) {
	var v sql.NullString
	var replica bool
	err := a.db.QueryRowContext(ctx, "SELECT (SELECT v FROM items WHERE id = $1), pg_is_in_recovery()", id).Scan(&v, &replica)
	if err != nil {
		return "", err
	}
	res := "missing"
	if v.Valid {
		res = "found"
	}
	if replica {
		return res + " replica", nil
	}
	return res + " primary", nil
}

// readStreamDesc is ReadStream's descriptor, client side.
var readStreamDesc = grpc.StreamDesc{StreamName: "ReadStream", ServerStreams: true}

func (a *app) service() *service {
	sv := &service{unary: map[string]unaryFunc{
		"Insert": func(ctx context.Context, _ string) (string, error) { return a.insert(ctx) },
		"Read":   a.read,
		"WriteThenPeerRead": func(ctx context.Context, mode string) (string, error) {
			peer, err := a.peerOf(mode)
			if err != nil {
				return "", err
			}
			id, err := a.insert(ctx)
			if err != nil {
				return "", err
			}
			return call(ctx, peer, "Read", id)
		},
		"PeerWriteThenRead": func(ctx context.Context, mode string) (string, error) {
			peer, err := a.peerOf(mode)
			if err != nil {
				return "", err
			}
			id, err := call(ctx, peer, "Insert", "")
			if err != nil {
				return "", err
			}
			return a.read(ctx, id)
		},
		"WriteThenPeerStream": func(ctx context.Context, mode string) (string, error) {
			peer, err := a.peerOf(mode)
			if err != nil {
				return "", err
			}
			var ids []string
			for range 2 {
				id, err := a.insert(ctx)
				if err != nil {
					return "", err
				}
				ids = append(ids, id)
			}
			cs, err := peer.NewStream(ctx, &readStreamDesc, fullMethod("ReadStream"))
			if err != nil {
				return "", err
			}
			if err := cs.SendMsg(wrapperspb.String(strings.Join(ids, " "))); err != nil {
				return "", err
			}
			if err := cs.CloseSend(); err != nil {
				return "", err
			}
			var res []string
			for {
				m := new(wrapperspb.StringValue)
				err := cs.RecvMsg(m)
				if err == io.EOF {
					return strings.Join(res, ","), nil
				}
				if err != nil {
					return "", err
				}
				res = append(res, m.GetValue())
			}
		},
		"Counts": func(context.Context, string) (string, error) {
			return fmt.Sprintf("%d %d %d", a.reads.Load(), a.onReplicas.Load(), a.opts.Rejected()), nil
		},
		"Ready": func(context.Context, string) (string, error) { return "", a.ready() },
	}}
	sv.streams = []grpc.StreamDesc{{StreamName: "ReadStream", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		for _, id := range strings.Fields(in.GetValue()) {
			res, err := a.read(ss.Context(), id)
			if err != nil {
				return err
			}
			if err := ss.SendMsg(wrapperspb.String(res)); err != nil {
				return err
			}
		}
		return nil
	}}}
	return sv
}

// ready says whether a plain read goes to a replica and every standby has
// answered a probe.
func (a *app) ready() error {
	d, err := a.conn.Explain(context.Background(), "SELECT 1")
	if err != nil {
		return err
	}
	if d.Primary || d.Reason != pgrouted.ReasonReplica {
		return fmt.Errorf("a read goes to %s (%s)", d.Endpoint, d.Reason)
	}
	top := a.conn.Topology()
	for _, h := range top.Hosts {
		if h.Name != top.Primary && (h.Role != "standby" || !h.Healthy || h.Circuit != "closed" || h.ReplayLSN == "") {
			return fmt.Errorf("standby %s not ready: %+v", h.Name, h)
		}
	}
	return nil
}

// listen serves a on a loopback port until stop is called.
func (a *app) listen() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := grpc.NewServer(serverOptions(a.opts)...)
	srv.RegisterService(a.service().desc(), struct{}{})
	go srv.Serve(ln)
	return ln.Addr().String(), srv.Stop, nil
}

// serveHelper is service B: the test binary run again (startHelper), on
// its own Connector, on a loopback port it prints on stdout, until its
// stdin closes.
func serveHelper(dsn string) int {
	keys, err := keysOf(os.Getenv(keyEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	a, err := openApp(dsn, keys)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer a.close()
	addr, stop, err := a.listen()
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	fmt.Println(addr)
	io.Copy(io.Discard, os.Stdin)
	stop()
	return 0
}

// keysOf is the signing keys of keyEnv's value.
func keysOf(v string) ([][]byte, error) {
	if v == "" {
		return nil, nil
	}
	k, err := hex.DecodeString(v)
	if err != nil {
		return nil, err
	}
	return [][]byte{k}, nil
}

// startHelper runs service B with keys and returns its address; the
// process ends with the test.
func startHelper(t *testing.T, keys [][]byte) string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), serveEnv+"="+appDSN())
	if len(keys) > 0 {
		cmd.Env = append(cmd.Env, keyEnv+"="+hex.EncodeToString(keys[0]))
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("helper process: %v", err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("helper process did not end within 30s of its stdin's close")
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper process: no address: %v", err)
	}
	return strings.TrimSpace(line)
}

// startApp serves service A, with peer B at peerAddr, in this process and
// returns a connection to it without the interceptors (the call chain
// begins at A).
func startApp(t *testing.T, keys [][]byte, peerAddr string) *grpc.ClientConn {
	t.Helper()
	a, err := openApp(appDSN(), keys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	if err := a.connectPeer(peerAddr); err != nil {
		t.Fatal(err)
	}
	addr, stop, err := a.listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return dial(t, addr)
}

// dial connects to addr without the interceptors.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, dialOptions(nil)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// waitReady calls cc's Ready for up to 60s.
func waitReady(t *testing.T, ctx context.Context, cc *grpc.ClientConn) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := call(ctx, cc, "Ready", "")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 60s: %v", cc.Target(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counts is a service's Counts.
type counts struct{ reads, onReplicas, rejected int64 }

func countsOf(t *testing.T, ctx context.Context, cc *grpc.ClientConn) counts {
	t.Helper()
	out, err := call(ctx, cc, "Counts", "")
	if err != nil {
		t.Fatal(err)
	}
	var c counts
	if _, err := fmt.Sscan(out, &c.reads, &c.onReplicas, &c.rejected); err != nil {
		t.Fatal(errors.Join(err, fmt.Errorf("Counts: %q", out)))
	}
	return c
}

// createItems creates the table (empty) and waits until the replicas have
// it.
func createItems(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, q := range []string{"DROP TABLE IF EXISTS items", "CREATE TABLE items (id bigserial PRIMARY KEY, v text)"} {
		if err := cluster.Primary().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
}

// lagReplicas delays each replica's replication link by d until the test
// ends.
func lagReplicas(t *testing.T, d time.Duration) {
	t.Helper()
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Latency(d); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := r.ReplicationFault().Latency(0); err != nil {
				t.Errorf("replica %s: %v", r.Name(), err)
			}
		})
	}
}
