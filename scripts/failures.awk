# failures.awk reads the output of go test (with -v or without) and prints
# what each failing test said: the last lines it logged (t.Log, t.Error,
# t.Fatal: the indented lines of its output) before its "--- FAIL" line, or
# after it without -v, and any panic (a test binary's timeout included).
# scripts/test.sh prints it for every failed job after the summary, so that
# the end of a long run's output says why it failed.
#
#   awk -v max=10 -f scripts/failures.awk job.log
#
# max is how many lines are kept for each test (default 10); lines are cut
# at 400 characters.

function keep(name, line,    k) {
	if (name == "") return
	if (!(name in count)) count[name] = 0
	k = count[name] % max
	lines[name, k] = substr(line, 1, 400)
	count[name]++
}

BEGIN { if (max == "") max = 10 }

/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; after = ""; next }
/^ *--- (PASS|SKIP): / { after = ""; next }
/^ *--- FAIL: / {
	if (!($3 in failed)) { failed[$3] = 1; order[++n] = $3 }
	# Without -v, a failing test's lines follow this one.
	after = $3
	next
}
/^panic: / { panicking = 30 }
panicking > 0 { panics[++np] = substr($0, 1, 400); panicking--; next }
/^ +/ {
	if (after != "") keep(after, $0)
	else keep(cur, $0)
}

END {
	for (i = 1; i <= n; i++) {
		name = order[i]
		if (!(name in count)) continue
		print "--- " name ":"
		c = count[name]
		for (k = (c > max ? c - max : 0); k < c; k++) print lines[name, k % max]
	}
	if (np > 0) {
		print "--- panic:"
		for (i = 1; i <= np; i++) print panics[i]
	}
}
