# failures.awk — the output of each failed test of a `go test -v` log, last: side by side,
# tests' lines interleave under "=== NAME" headings, and a CI excerpt shows a log's end.
# For each test that failed and has no failed subtest, its last lines (KEEP, default 40).
# Usage: awk -f scripts/failures.awk build/test-integration.log
BEGIN { if (KEEP == "") KEEP = 40 }
/^=== (RUN|PAUSE|CONT|NAME) / { cur = $3; next }
/^ *--- (FAIL|PASS|SKIP): / {
	if ($2 == "FAIL:") { failed[$3] = 1; order[++nfailed] = $3 }
	next
}
/^(ok|FAIL|PASS)([ \t]|$)/ { cur = ""; next }
cur != "" { n[cur]++; line[cur, n[cur] % KEEP] = $0 }
END {
	for (i = 1; i <= nfailed; i++) {
		name = order[i]; leaf = 1
		for (other in failed) {
			if (index(other, name "/") == 1) { leaf = 0; break }
		}
		if (!leaf) continue
		print "== why " name " failed (its last lines)"
		first = n[name] - KEEP + 1
		if (first < 1) first = 1
		for (k = first; k <= n[name]; k++) print line[name, k % KEEP]
	}
}
