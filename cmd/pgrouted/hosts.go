package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/dsn"
)

// roleCell says what a host is now, as the connector sees it: the primary
// it sends writes to, a replica, or down. A host that stopped answering
// keeps its last role in the snapshot; here it is "down".
func roleCell(h pgrouted.HostInfo, top pgrouted.Snapshot) cell {
	switch {
	case top.Primary != "" && h.Name == top.Primary:
		return cell{"primary", green}
	case !h.Healthy && h.LastError == "" && h.Role == "unknown":
		return cell{"probing", dim}
	case !h.Healthy && h.Role == "primary":
		return cell{"down (was primary)", red}
	case !h.Healthy:
		return cell{"down", red}
	case h.Role == "primary":
		// Out of recovery, but not the primary the connector trusts: its
		// lease ran out, or two hosts claim to be primary.
		return cell{"primary (not trusted)", yellow}
	case h.Role == "standby":
		return cell{"replica", ""}
	}
	return cell{h.Role, dim}
}

func circuitCell(h pgrouted.HostInfo) cell {
	if h.Circuit == "open" {
		return cell{"open", red}
	}
	return cell{h.Circuit, ""}
}

// lagCells are a standby's byte lag and staleness bound; the bound is
// yellow when it is over maxLag (0: no budget), that is when reads that
// need a fresh replica leave it.
func lagCells(h pgrouted.HostInfo, maxLag time.Duration) (bytes, bound cell) {
	bytes, bound = cell{"-", dim}, cell{"-", dim}
	if h.ByteLag != nil {
		bytes = cell{formatBytes(*h.ByteLag), ""}
	}
	if h.LagBound != nil {
		bound = cell{formatDuration(*h.LagBound), ""}
		if maxLag > 0 && *h.LagBound > maxLag {
			bound.color = yellow
		}
	}
	return bytes, bound
}

func rttCell(h pgrouted.HostInfo) cell {
	if h.RTT <= 0 {
		return cell{"-", dim}
	}
	return cell{formatDuration(h.RTT), ""}
}

// behind reports whether a standby's staleness bound is over maxLag.
func behind(h pgrouted.HostInfo, maxLag time.Duration) bool {
	return maxLag > 0 && h.Healthy && h.Role == "standby" && h.LagBound != nil && *h.LagBound > maxLag
}

// topologyTable is the table of `pgrouted topology`: every field of each
// host.
func topologyTable(top pgrouted.Snapshot, maxLag time.Duration) *table {
	t := &table{
		header: []string{"HOST", "ADDRESS", "ROLE", "CIRCUIT", "TIMELINE", "REPLAY LSN", "LAG", "LAG BOUND", "RTT", "SYNC", "READS NOW", "POOL"},
		right:  map[int]bool{4: true, 6: true, 7: true, 8: true, 10: true},
	}
	for _, h := range top.Hosts {
		lb, lt := lagCells(h, maxLag)
		tl := cell{"-", dim}
		if h.Timeline > 0 {
			tl = cell{fmt.Sprint(h.Timeline), ""}
		}
		replay := cell{"-", dim}
		if h.ReplayLSN != "" {
			replay = cell{h.ReplayLSN, ""}
		}
		sync := cell{"-", dim}
		if h.SyncState != "" {
			sync = cell{h.SyncState, ""}
		}
		pool := fmt.Sprintf("%d/%d/%d", h.Pool.AcquiredConns, h.Pool.TotalConns, h.Pool.MaxConns)
		t.rows = append(t.rows, []cell{
			{pr(h.Name), bold}, {pr(h.Address), ""}, roleCell(h, top), circuitCell(h), tl, replay, lb, lt,
			rttCell(h), sync, {fmt.Sprint(h.InflightReads), ""}, {pool, ""},
		})
	}
	return t
}

// pr is how the command prints a host or member name, or a text that may
// quote one: through dsn.Printable, as the library's logs and topology do.
func pr(s string) string { return dsn.Printable(s) }

// probeErrors lists the hosts whose last probe failed, with the error, one
// line each.
func probeErrors(top pgrouted.Snapshot, color bool) string {
	var b strings.Builder
	for _, h := range top.Hosts {
		if h.LastError != "" {
			line := fmt.Sprintf("%s: %s", pr(h.Name), pr(oneLine(h.LastError)))
			if color {
				line = paint(red, line)
			}
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// providerLine is the line under the header when a topology provider
// decides: its name, the endpoint that answered, the leader it names and
// its timeline, its lease, and its last error; "" without a provider.
func providerLine(top pgrouted.Snapshot) string {
	p := top.Provider
	if p == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "provider: %s", pr(p.Name))
	if p.Endpoint != "" {
		fmt.Fprintf(&b, " via %s", pr(p.Endpoint))
	}
	switch {
	case p.Conflict:
		b.WriteString(" (two running leaders: no primary")
	case p.Leader != "":
		fmt.Fprintf(&b, " (leader %s", pr(p.Leader))
		if p.LeaderTimeline != 0 {
			fmt.Fprintf(&b, ", timeline %d", p.LeaderTimeline)
		}
	case p.UnknownLeader != "":
		fmt.Fprintf(&b, " (leader %s is not a known host", pr(p.UnknownLeader))
	default:
		b.WriteString(" (no leader")
	}
	if p.LeaseRemaining > 0 {
		fmt.Fprintf(&b, ", lease %s", formatDuration(p.LeaseRemaining))
	} else {
		b.WriteString(", lease expired")
	}
	b.WriteString(")")
	var noReads []string
	for _, h := range top.Hosts {
		if h.NoReads && h.Name != top.Primary {
			noReads = append(noReads, pr(h.Name))
		}
	}
	if len(noReads) > 0 {
		fmt.Fprintf(&b, "; no reads on %s", strings.Join(noReads, ", "))
	}
	if p.LastError != "" {
		fmt.Fprintf(&b, "; last error: %s", pr(oneLine(p.LastError)))
	}
	if p.BadMember != "" {
		fmt.Fprintf(&b, "; refused from its answer: %s", pr(oneLine(p.BadMember)))
	}
	return b.String()
}

// topologyHeader is the line above the table: the primary, its epoch and
// lease, and conflicts.
func topologyHeader(top pgrouted.Snapshot) string {
	var b strings.Builder
	if top.Primary == "" {
		b.WriteString("primary: none")
	} else {
		fmt.Fprintf(&b, "primary: %s", pr(top.Primary))
	}
	fmt.Fprintf(&b, " (epoch %d", top.Epoch)
	if top.LeaseRemaining > 0 {
		fmt.Fprintf(&b, ", lease %s", formatDuration(top.LeaseRemaining))
	}
	b.WriteString(")")
	if top.ConflictingPrimaries > 0 {
		fmt.Fprintf(&b, "; conflicting primaries seen %d times", top.ConflictingPrimaries)
	}
	return b.String()
}

// openConnector parses dsn and starts a Connector on it. A parse error is
// the caller's to report as a usage error (exitUsage); the error never
// holds the password.
func openConnector(dsn string) (*pgrouted.Connector, *pgrouted.Config, error) {
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		return nil, cfg, err
	}
	return conn, cfg, nil
}

// probed reports whether every host of top was probed once: it answered
// (its role is known) or its probe failed (LastError).
func probed(top pgrouted.Snapshot) bool {
	for _, h := range top.Hosts {
		if h.Role == "unknown" && h.LastError == "" {
			return false
		}
	}
	return len(top.Hosts) > 0
}

// waitProbed waits until every host was probed once, or timeout, or ctx
// ends; it returns the last snapshot and whether every host was probed.
// When a host answered as primary it waits for its lease too: the
// standbys' lag needs the primary's position. When some host's probe
// failed, it gives the probes a few more intervals (a busy host may just
// have been slow to answer the first one) before it shows that host down,
// or settles for no primary.
func waitProbed(ctx context.Context, conn *pgrouted.Connector, timeout, interval time.Duration) (pgrouted.Snapshot, bool) {
	deadline := time.Now().Add(timeout)
	var failedSince time.Time
	for {
		top := conn.Topology()
		if probed(top) {
			switch {
			case top.Primary != "" && !anyFailed(top):
				return top, true
			case top.Primary != "" && failedSince.IsZero():
				failedSince = time.Now()
			case top.Primary != "" && time.Since(failedSince) >= 3*interval:
				return top, true // a host that stays down is shown down
			case top.Primary != "":
			case primaryUp(top):
			case !anyFailed(top):
				return top, true // every host answered: none is a primary
			case failedSince.IsZero():
				failedSince = time.Now()
			case time.Since(failedSince) >= 3*interval:
				return top, true
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return top, probed(top)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// anyFailed reports whether some host's last probe failed.
func anyFailed(top pgrouted.Snapshot) bool {
	for _, h := range top.Hosts {
		if !h.Healthy {
			return true
		}
	}
	return false
}

// primaryUp reports whether a host answered its last probe as a primary.
func primaryUp(top pgrouted.Snapshot) bool {
	for _, h := range top.Hosts {
		if h.Healthy && h.Role == "primary" {
			return true
		}
	}
	return false
}

// maxLagOf is cfg's time budget, 0 when it has none (or a byte budget).
func maxLagOf(cfg *pgrouted.Config) time.Duration {
	if cfg == nil {
		return 0
	}
	if d, ok := cfg.MaxLag.Time(); ok {
		return d
	}
	return 0
}

// secretsOf returns the passwords a DSN holds or leads to (PGPASSWORD, a
// passfile), so that the output can be scrubbed of them whatever happens.
// cfg may be nil when the DSN did not parse.
func secretsOf(dsn string, cfg *pgrouted.Config) []string {
	var out []string
	add := func(s string) {
		// Very short "passwords" would garble the output when masked.
		if len(s) >= 3 {
			out = append(out, s)
		}
	}
	if cfg != nil {
		for _, h := range cfg.Hosts {
			if h.ConnConfig != nil {
				add(h.ConnConfig.Password)
			}
		}
		// Patroni URLs may carry basic-auth passwords.
		for _, e := range cfg.PatroniEndpoints {
			if u, err := url.Parse(e); err == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok {
					add(pw)
				}
			}
		}
	}
	if m := urlPassword.FindStringSubmatch(dsn); m != nil {
		add(m[1])
		if u, err := url.PathUnescape(m[1]); err == nil {
			add(u)
		}
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		v := m[1]
		if strings.HasPrefix(v, "'") && strings.HasSuffix(v, "'") && len(v) >= 2 {
			v = strings.ReplaceAll(v[1:len(v)-1], `\'`, `'`)
		}
		add(v)
	}
	return out
}

var (
	urlPassword = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://[^:@/?#]*:([^@]*)@`)
	kvPassword  = regexp.MustCompile(`(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)
)

// redactor writes through to w with every secret masked.
type redactor struct {
	w       io.Writer
	secrets []string
}

func (r *redactor) Write(p []byte) (int, error) {
	s := string(p)
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "xxxxx")
	}
	if _, err := io.WriteString(r.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}
