package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pgrouted/pgrouted"
)

// explainCmd is `pgrouted explain [--json] [--timeout d] [DSN] QUERY`.
func explainCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("explain", "explain [--json] [--timeout 10s] [DSN] QUERY",
		`Start pgrouted's probers on DSN, wait until every host answered its first
probe (or --timeout), and print where QUERY would run now, in autocommit mode
and with no write made before it, and why: pgrouted's Connector.Explain. The
query is not run. A query that starts with "-" (a -- comment) goes after "--":
  pgrouted explain -- "-- report
  SELECT 1"

`+dsnHelp+`

Exit status: 0 when the query has somewhere to run; 1 when it could not run
now (no primary, no replica for a forced replica read, a write forced to a
replica); 2 on bad arguments or an invalid DSN.`, stderr)
	asJSON := fs.Bool("json", false, "print the decision as JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the first probes")
	pos, code, ok := parseFlags(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageError(fs, stderr, "want a DSN and a query, got %d arguments", len(pos))
	}
	query := pos[len(pos)-1]
	dsn, src, err := readDSN(pos[0], len(pos) == 2, stdin)
	if err != nil {
		return usageError(fs, stderr, "want a DSN and a query: %v (set %s, or give - before the query and write the DSN on stdin)", err, envDSN)
	}
	conn, cfg, err := openConnector(dsn)
	stdout = &redactor{w: stdout, secrets: secretsOf(dsn, cfg)}
	stderr = &redactor{w: stderr, secrets: secretsOf(dsn, cfg)}
	if src == fromArgs {
		fmt.Fprintf(stderr, "pgrouted explain: %s\n", argvWarning)
	}
	if err != nil {
		fmt.Fprintf(stderr, "pgrouted explain: %v\n", err)
		if cfg == nil {
			return exitUsage
		}
		return exitFailure
	}
	defer conn.Close()
	if _, all := waitProbed(ctx, conn, *timeout, cfg.ProbeInterval); !all {
		fmt.Fprintf(stderr, "pgrouted explain: not every host answered its first probe within %v\n", *timeout)
	}
	d, err := conn.Explain(ctx, query)
	if *asJSON {
		out := struct {
			pgrouted.Decision
			Query string `json:"query"`
			Error string `json:"error,omitempty"`
		}{Decision: d, Query: query}
		if err != nil {
			out.Error = err.Error()
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprint(stdout, renderDecision(query, d, err))
	}
	if err != nil {
		return exitFailure
	}
	return exitOK
}

// renderDecision describes a Decision for a person.
func renderDecision(query string, d pgrouted.Decision, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "query:    %s\n", truncate(oneLine(query), 200))
	fmt.Fprintf(&b, "op:       %s\n", d.Op)
	where := "nowhere"
	switch {
	case d.Endpoint != "" && d.Primary:
		where = pr(d.Endpoint) + " (the primary)"
	case d.Endpoint != "":
		where = pr(d.Endpoint) + " (a replica)"
	case d.Primary:
		where = "the primary (none known now)"
	}
	fmt.Fprintf(&b, "runs on:  %s\n", where)
	reason := string(d.Reason)
	if text, ok := reasonText[d.Reason]; ok {
		reason += ": " + text
	}
	fmt.Fprintf(&b, "reason:   %s\n", reason)
	if err != nil {
		fmt.Fprintf(&b, "error:    %v\n", err)
	}
	return b.String()
}

// reasonText explains each reason (see the Reason constants).
var reasonText = map[pgrouted.Reason]string{
	pgrouted.ReasonNoReplicas:      "no host is a replica, so the read runs on the primary",
	pgrouted.ReasonUnhealthy:       "every replica failed its last probe or has its circuit open, so the read runs on the primary",
	pgrouted.ReasonBehind:          "every healthy replica lacks this process's writes or is over the staleness budget, so the read runs on the primary",
	pgrouted.ReasonSaturated:       "every eligible replica's pool is exhausted, so the read runs on the primary",
	pgrouted.ReasonPositionUnknown: "the position of the last write is unknown; only the primary surely has it",
	pgrouted.ReasonReplica:         "an eligible replica serves the read",
	pgrouted.ReasonCheck:           "a replica that may hold this process's writes serves the read after checking its replay position",
	pgrouted.ReasonWrite:           "the statement is not a read",
	pgrouted.ReasonSessionState:    "the statement changes session state: the connection stays on the primary from then on",
	pgrouted.ReasonPinned:          "an earlier statement changed session state on this connection",
	pgrouted.ReasonInTx:            "transaction control, or a statement inside a transaction",
	pgrouted.ReasonForced:          "a routing comment chose the endpoint",
	pgrouted.ReasonReadOnlyTx:      "a read-only transaction runs on a replica",
	pgrouted.ReasonSerializableRO:  "a SERIALIZABLE transaction cannot run on a hot standby",
	pgrouted.ReasonRetry25006:      "the replica refused the statement (SQLSTATE 25006): it ran again on the primary",
	pgrouted.ReasonWriteOnReplica:  "a write, lock or read-write transaction was forced to a replica",
	pgrouted.ReasonNoPrimary:       "no primary is known now",
	pgrouted.ReasonReplicaFailed:   "the replica's connection failed before any row: the read ran elsewhere",
}
