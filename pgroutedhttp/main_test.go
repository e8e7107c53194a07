//go:build unix

package pgroutedhttp_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/internal/testhelp"
	"github.com/pgrouted/pgrouted/pgroutedhttp"
	"github.com/pgrouted/pgrouted/testcluster"
)

// cluster is this package's primary with two streaming replicas, started
// once. Every standby applies each commit applyDelay after it was made
// (recovery_min_apply_delay), so a read sent to a replica right after a
// write misses it unless it waits.
var cluster *testcluster.Cluster

const applyDelay = 20 * time.Millisecond

// serveEnv, when set, makes the test binary serve the test application on
// the DSN it holds instead of running tests (see serveHelper).
const serveEnv = "PGROUTEDHTTP_TEST_SERVE_DSN"

func TestMain(m *testing.M) {
	if dsn := os.Getenv(serveEnv); dsn != "" {
		os.Exit(serveHelper(dsn))
	}
	testcluster.Main(m, testcluster.Options{
		Replicas: 2,
		Conf:     []string{fmt.Sprintf("recovery_min_apply_delay = '%dms'", applyDelay.Milliseconds())},
		Logf:     testhelp.Logf,
	}, func(c *testcluster.Cluster) { cluster = c })
}

// testCtx is a context for one test: it ends after 3 minutes or with the test.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	return testhelp.Context(t, 3*time.Minute)
}

// appDSN is the DSN of the test application: reads wait up to 100ms on a
// replica for the user's position.
func appDSN() string {
	return cluster.DSN() + "&pgrouted_replica_wait=100ms&pgrouted_probe_interval=100ms"
}

// app is a small service on pgrouted behind pgroutedhttp: POST /items
// inserts a row and answers its id; GET /items/{id} answers whether the
// row was found and whether the server that read it was a replica, from
// the read itself; GET /rejected answers the middleware's count of
// rejected tokens.
type app struct {
	db   *sql.DB
	conn *pgrouted.Connector
	opts *pgroutedhttp.Options
}

// readResult is GET /items/{id}'s answer.
type readResult struct {
	Found   bool   `json:"found"`
	Replica bool   `json:"replica"`
	Reason  string `json:"reason"` // the read's RouteEvent.Reason, for failure messages
}

// routeReason is a context key: a *string the application's OnRoute
// fills with the Reason of the request's statement.
type routeReason struct{}

func openApp(dsn string) (*app, error) {
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.OnRoute = func(e pgrouted.RouteEvent) {
		if p, ok := e.Context.Value(routeReason{}).(*string); ok {
			*p = string(e.Reason)
		}
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return &app{db: sql.OpenDB(conn), conn: conn, opts: &pgroutedhttp.Options{}}, nil
}

func (a *app) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /items", func(w http.ResponseWriter, r *http.Request) {
		var id int64
		if err := a.db.QueryRowContext(r.Context(), "INSERT INTO items (v) VALUES ('x') RETURNING id").Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, id)
	})
	// A write made after the header went out: the token cannot carry it.
	mux.HandleFunc("POST /late", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		if _, err := a.db.ExecContext(r.Context(), "INSERT INTO items (v) VALUES ('late')"); err != nil {
			fmt.Fprint(w, err)
		}
	})
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		var res readResult
		var v sql.NullString
		ctx := context.WithValue(r.Context(), routeReason{}, &res.Reason)
		err := a.db.QueryRowContext(ctx, "SELECT (SELECT v FROM items WHERE id = $1), pg_is_in_recovery()",
			r.PathValue("id")).Scan(&v, &res.Replica)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		res.Found = v.Valid
		json.NewEncoder(w).Encode(res)
	})
	mux.HandleFunc("GET /rejected", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, a.opts.Rejected())
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		if err := a.ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	return a.opts.Middleware(mux)
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

// serveHelper is the second process of TestTwoProcesses: the application
// on its own Connector, on a loopback port it prints on stdout, until its
// stdin closes.
func serveHelper(dsn string) int {
	a, err := openApp(dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer a.db.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	srv := &http.Server{Handler: a.handler()}
	go srv.Serve(ln)
	fmt.Println(ln.Addr().String())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	return 0
}

// startHelper runs the test binary as serveHelper on dsn and returns its
// base URL; the process ends with the test.
func startHelper(t *testing.T, dsn string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), serveEnv+"="+dsn)
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
	return "http://" + strings.TrimSpace(line)
}

// startApp serves the application in this process and returns it and its
// base URL.
func startApp(t *testing.T) (*app, string) {
	t.Helper()
	a, err := openApp(appDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.db.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: a.handler()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return a, "http://" + ln.Addr().String()
}

// waitReady polls base's /ready for up to 60s.
func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/ready")
		var body []byte
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 60s: %v %s", base, err, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// post inserts a row through base with client c, sending header (when not
// empty) as the token, and returns its id and the response's token header.
func post(t *testing.T, c *http.Client, base string, header string) (int64, string) {
	t.Helper()
	id, token, err := tryPost(c, base, header)
	if err != nil {
		t.Fatal(err)
	}
	return id, token
}

func tryPost(c *http.Client, base string, header string) (int64, string, error) {
	req, err := http.NewRequest("POST", base+"/items", nil)
	if err != nil {
		return 0, "", err
	}
	if header != "" {
		req.Header.Set(pgroutedhttp.DefaultHeaderName, header)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return 0, "", fmt.Errorf("POST /items: %s %s", resp.Status, body)
	}
	id, err := strconv.ParseInt(string(body), 10, 64)
	return id, resp.Header.Get(pgroutedhttp.DefaultHeaderName), err
}

// get reads row id through base with client c, sending header (when not
// empty) as the token, and fails the test on anything but a normal answer.
func get(t *testing.T, c *http.Client, base string, id int64, header string) readResult {
	t.Helper()
	res, err := tryGet(c, base, id, header, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func tryGet(c *http.Client, base string, id int64, header string, cookie *http.Cookie) (readResult, error) {
	var res readResult
	req, err := http.NewRequest("GET", fmt.Sprintf("%s/items/%d", base, id), nil)
	if err != nil {
		return res, err
	}
	if header != "" {
		req.Header.Set(pgroutedhttp.DefaultHeaderName, header)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := c.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return res, fmt.Errorf("GET /items/%d with token %q: %s %s", id, header, resp.Status, body)
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return res, fmt.Errorf("GET /items/%d: %w: %s", id, err, body)
	}
	return res, nil
}

// rejected reads base's count of rejected tokens.
func rejected(t *testing.T, base string) uint64 {
	t.Helper()
	resp, err := http.Get(base + "/rejected")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	n, err := strconv.ParseUint(string(body), 10, 64)
	if err != nil {
		t.Fatal(errors.Join(err, fmt.Errorf("GET /rejected: %s", body)))
	}
	return n
}
