# The summary of one run of a suite's test binary (-test.v output), for
# scripts/orm-suites.sh: the counts, then each failing top-level test,
# "known" with the reason scripts/orm-suites/known-failures gives, or "NEW",
# with the first lines it logged (or its first failing subtest's). A binary
# that did not end with PASS or FAIL (a panic, a timeout) is NEW too. In a
# comparison run (-v compare=1: plain pgx) nothing is NEW.
#
#   awk -v suite=gorm -v label=extended -v secs=67 -v known=FILE [-v compare=1] -f summary.awk LOG

BEGIN {
	while ((getline line < known) > 0) {
		if (line ~ /^#/ || line !~ /[^ \t]/) continue
		n = split(line, f, /[ \t]+/)
		if (f[1] != suite) continue
		reason = line
		sub(/^[^ \t]+[ \t]+[^ \t]+[ \t]+/, "", reason)
		why[f[2]] = reason
	}
}

/^=== (RUN|CONT|NAME) / { cur = $3; next }
/^=== PAUSE / { next }

/^ *--- (PASS|FAIL|SKIP): / {
	top = ($0 ~ /^---/)
	res = $2; sub(/:$/, "", res)
	name = $3
	all[res]++
	if (top) tops[res]++
	if (res == "FAIL") {
		if (top) failed[++nfailed] = name
		else {
			parent = name; sub(/\/.*/, "", parent)
			if (!(parent in firstsub) && nlines[name] > 0) firstsub[parent] = name
		}
	}
	cur = ""
	next
}

/^(PASS|FAIL)$/ { ended = 1; next }
/^panic: / { panicked = 1 }

# What the current test logged: t.Log/t.Error lines and their
# continuations (indented), its first 6.
cur != "" && /^[ \t]+[^ \t]/ {
	if (nlines[cur] < 6) text[cur, ++nlines[cur]] = $0
}

END {
	total = tops["PASS"] + tops["FAIL"] + tops["SKIP"]
	totall = all["PASS"] + all["FAIL"] + all["SKIP"]
	printf "%s (%s): %d of %d top-level tests passed or skipped (%d passed, %d failed, %d skipped); with subtests %d of %d (%d passed, %d failed, %d skipped); %d s\n",
		suite, label, tops["PASS"] + tops["SKIP"], total, tops["PASS"] + 0, tops["FAIL"] + 0, tops["SKIP"] + 0,
		all["PASS"] + all["SKIP"], totall, all["PASS"] + 0, all["FAIL"] + 0, all["SKIP"] + 0, secs
	for (i = 1; i <= nfailed; i++) {
		t = failed[i]
		if (t in why) printf "orm-suites: known %s %s (%s)\n    why: %s\n", suite, t, label, why[t]
		else if (compare) printf "orm-suites: failure %s %s (%s, a comparison run)\n", suite, t, label
		else printf "orm-suites: NEW failure %s %s (%s)\n", suite, t, label
		src = t
		if (nlines[t] == 0 && (t in firstsub)) src = firstsub[t]
		if (src != t) printf "    %s:\n", src
		for (j = 1; j <= nlines[src]; j++) printf "    %s\n", substr(text[src, j], 1, 200)
	}
	if (!ended || panicked)
		printf "orm-suites: %s%s (%s): the test binary did not finish (a panic, a timeout or a failure to start): see its log\n",
			compare ? "" : "NEW ", suite, label
}
