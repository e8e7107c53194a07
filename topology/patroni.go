package topology

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultPatroniTimeout is the per-request timeout of [Patroni] when none is
// given.
const DefaultPatroniTimeout = 2 * time.Second

// maxClusterBody bounds the /cluster answer read.
const maxClusterBody = 4 << 20

// Patroni is the [Provider] of a Patroni cluster: it asks GET /cluster on
// its endpoints in order, and the first that answers gives the view.
// Build it with [NewPatroni].
//
// What is trusted from Patroni: which member holds the leader lock (and
// whether it runs), which members run or stream, their noloadbalance tag.
// What is not: its lag figures and timelines (shown, never used for
// routing; reads need pgrouted's own replay positions), and its word alone
// for a write (the host's own probe must find it out of recovery).
type Patroni struct {
	endpoints []*url.URL // without userinfo
	auth      []*url.Userinfo
	shown     []string // redacted, for display and errors
	timeout   time.Duration
	client    *http.Client
}

// NewPatroni returns the provider of the Patroni REST endpoints (URLs such
// as http://pg-a:8008, optionally with basic-auth userinfo, which is sent
// as an Authorization header and never shown), each request bounded by
// timeout (0: [DefaultPatroniTimeout]). client, when nil, is a client of
// its own; pass one for TLS settings.
func NewPatroni(endpoints []string, timeout time.Duration, client *http.Client) (*Patroni, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("topology: patroni: no endpoint")
	}
	if timeout <= 0 {
		timeout = DefaultPatroniTimeout
	}
	if client == nil {
		client = &http.Client{}
	}
	p := &Patroni{timeout: timeout, client: client}
	for i, e := range endpoints {
		u, err := ParseEndpoint(e)
		if err != nil {
			return nil, fmt.Errorf("topology: patroni endpoint %d: %w", i+1, err)
		}
		p.auth = append(p.auth, u.User)
		p.shown = append(p.shown, u.Redacted())
		u.User = nil
		p.endpoints = append(p.endpoints, u)
	}
	return p, nil
}

// ParseEndpoint parses a Patroni REST URL: http or https, a host, no query
// or fragment. Its error never holds the URL's password.
func ParseEndpoint(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		// url's error quotes the input, password included.
		return nil, errors.New("not a URL (expected http://host:port)")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%s: scheme must be http or https", u.Redacted())
	case u.Host == "":
		return nil, fmt.Errorf("%s: no host", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("%s: must have no query or fragment", u.Redacted())
	}
	return u, nil
}

// Name implements Provider: "patroni".
func (p *Patroni) Name() string { return "patroni" }

// Changes implements Provider: Patroni is polled.
func (p *Patroni) Changes() <-chan struct{} { return nil }

// CloseIdleConnections closes the client's idle keep-alive connections to
// the endpoints; call it once the Topology that polls p is closed.
func (p *Patroni) CloseIdleConnections() { p.client.CloseIdleConnections() }

// Endpoints returns the endpoints, passwords redacted.
func (p *Patroni) Endpoints() []string { return append([]string(nil), p.shown...) }

// Current implements Provider: GET /cluster on each endpoint in order, each
// request bounded by the timeout; the first valid answer is the view. When
// none answers, the error lists each endpoint's failure.
func (p *Patroni) Current(ctx context.Context) (View, error) {
	var errs []string
	for i := range p.endpoints {
		ms, err := p.get(ctx, i)
		if err == nil {
			return View{Members: ms, Endpoint: p.shown[i]}, nil
		}
		errs = append(errs, p.shown[i]+": "+err.Error())
		if ctx.Err() != nil {
			break
		}
	}
	return View{}, errors.New("patroni: no endpoint answered: " + strings.Join(errs, "; "))
}

func (p *Patroni) get(parent context.Context, i int) ([]Member, error) {
	ctx, cancel := context.WithTimeout(parent, p.timeout)
	defer cancel()
	u := *p.endpoints[i]
	u.Path = strings.TrimSuffix(u.Path, "/") + "/cluster"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, errors.New("bad request")
	}
	req.Header.Set("Accept", "application/json")
	if a := p.auth[i]; a != nil {
		pw, _ := a.Password()
		req.SetBasicAuth(a.Username(), pw)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, p.clean(i, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxClusterBody))
	if err != nil {
		return nil, p.clean(i, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return ParseCluster(body)
}

// clean returns err's text without the endpoint's password, should a
// library ever echo it.
func (p *Patroni) clean(i int, err error) error {
	msg := err.Error()
	if a := p.auth[i]; a != nil {
		if pw, ok := a.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return errors.New(msg)
}

// clusterJSON is Patroni's GET /cluster answer (patroni/utils.py
// cluster_as_json): members sorted by name, each with name, role, state,
// api_url, host, port, timeline, tags, and lag (bytes, or "unknown") for
// the non-leaders.
type clusterJSON struct {
	Members []struct {
		Name     string          `json:"name"`
		Role     string          `json:"role"`
		State    string          `json:"state"`
		Host     string          `json:"host"`
		Port     json.Number     `json:"port"`
		Timeline json.Number     `json:"timeline"`
		Lag      json.RawMessage `json:"lag"`
		Tags     map[string]any  `json:"tags"`
	} `json:"members"`
}

// ParseCluster reads Patroni's GET /cluster JSON. A member without host is
// kept (it can never match a host); lag "unknown" or absent is -1. The
// noloadbalance tag is read as Patroni reads it: any truthy value (true, a
// non-zero number, a non-empty string).
func ParseCluster(body []byte) ([]Member, error) {
	var c clusterJSON
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("cluster JSON: %v", err)
	}
	if c.Members == nil {
		return nil, errors.New("cluster JSON: no members list")
	}
	out := make([]Member, 0, len(c.Members))
	for _, m := range c.Members {
		mb := Member{Name: m.Name, Role: m.Role, State: m.State, Host: m.Host, Lag: -1}
		if m.Port != "" {
			n, err := m.Port.Int64()
			if err != nil || n < 0 || n > 65535 {
				return nil, fmt.Errorf("cluster JSON: member %q: bad port %s", m.Name, m.Port)
			}
			mb.Port = uint16(n)
		}
		if m.Timeline != "" {
			if n, err := m.Timeline.Int64(); err == nil && n > 0 && n <= 1<<32-1 {
				mb.Timeline = uint32(n)
			}
		}
		var lag int64
		if len(m.Lag) > 0 && json.Unmarshal(m.Lag, &lag) == nil && lag >= 0 {
			mb.Lag = lag
		}
		mb.NoLoadBalance = truthy(m.Tags["noloadbalance"])
		out = append(out, mb)
	}
	return out, nil
}

// truthy is Python's bool() of a JSON value, as Patroni reads its tags.
func truthy(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v != ""
	case json.Number:
		f, err := v.Float64()
		return err == nil && f != 0
	case float64:
		return v != 0
	case nil:
		return false
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	}
	return true
}
