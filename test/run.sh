#!/usr/bin/env bash
# Runs each test program given on the command line, prints its output, and adds
# up the per-program "name: N passed, N failed[, N skipped]" lines. A program that
# crashes or exits non-zero without a summary counts as one failure; each program's time
# follows its output (what makes CI slow shows in its log). Every FAIL line is repeated
# just before the total, so the end of a long log says what failed. The last line
# is the total, with ", N skipped" when some part could not run on this machine.
set -u
passed=0; failed=0; skipped=0; fail_lines=""
for t in "$@"; do
    echo "== $t"
    start=$SECONDS
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    echo "-- $t: $((SECONDS - start)) s"
    summary='^[A-Za-z0-9_]+: [0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$'
    line=$(printf '%s\n' "$out" | grep -E "$summary" | tail -n 1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
        s=$(echo "$line" | sed -E -n 's/.* ([0-9]+) skipped$/\1/p')
        passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + ${s:-0}))
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            failed=$((failed + 1)); out=$(printf '%s\nFAIL  %s exited %s' "$out" "$t" "$rc"); echo "FAIL  $t exited $rc"
        fi
    else
        failed=$((failed + 1)); out=$(printf '%s\nFAIL  %s exited %s without a summary line' "$out" "$t" "$rc")
        echo "FAIL  $t exited $rc without a summary line"
    fi
    mine=$(printf '%s\n' "$out" | grep -E '^FAIL' | sed "s|^|[$t] |")
    [ -z "$mine" ] || fail_lines="$fail_lines$mine"$'\n'
done
if [ -n "$fail_lines" ]; then echo "== what failed"; printf '%s' "$fail_lines"; fi
if [ "$skipped" -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"
else echo "$passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
