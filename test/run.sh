#!/usr/bin/env bash
# Runs each test program given on the command line, prints its output, and adds
# up the per-program "name: N passed, N failed" lines. A program that crashes or
# exits non-zero without a summary counts as one failure. The last line is the total.
set -u
passed=0; failed=0
for t in "$@"; do
    echo "== $t"
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E '^[A-Za-z0-9_]+: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')
        passed=$((passed + p)); failed=$((failed + f))
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); echo "FAIL  $t exited $rc"; fi
    else
        failed=$((failed + 1)); echo "FAIL  $t exited $rc without a summary line"
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
