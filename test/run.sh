#!/usr/bin/env bash
# Runs each test program given on the command line, prints its output, and adds
# up the per-program "name: N passed, N failed[, N skipped]" lines. A program that
# crashes or exits non-zero without a summary counts as one failure; each program's time
# follows its output (what makes CI slow shows in its log). Every FAIL line is repeated
# just before the total, so the end of a long log says what failed. The last line
# is the total, with ", N skipped" when some part could not run on this machine.
# The programs after --side-by-side run as many at a time as the machine has cores
# (TEST_JOBS overrides), their outputs printed in the order given: for programs of one
# thread that time nothing (the CUDA layer's). The others run one by one.
set -u
passed=0; failed=0; skipped=0; fail_lines=""
jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $jobs in ''|*[!0-9]*|0*) echo "error: TEST_JOBS=$jobs: expected a whole number from 1"; exit 2 ;; esac
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# PROGRAM EXIT_STATUS SECONDS, with the program's output on stdin: prints it and adds it up
account() {
    local t=$1 rc=$2 secs=$3 out line p f s mine
    out=$(cat)
    printf '%s\n' "$out"
    echo "-- $t: $secs s"
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
}

# PROGRAM OUTPUT_FILE: runs it, its exit status and seconds in OUTPUT_FILE.rc
run_into() {
    local start=$SECONDS rc
    "$1" > "$2" 2>&1; rc=$?
    echo "$rc $((SECONDS - start))" > "$2.rc"
}

side_by_side() {  # the programs, $jobs at a time; each accounted in the order given
    local i=0 t rc secs
    [ $# -gt 0 ] || return 0
    echo "== side by side, $jobs at a time: $*"
    for t in "$@"; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
        run_into "$t" "$tmp/$i" &
        i=$((i + 1))
    done
    wait
    i=0
    for t in "$@"; do
        echo "== $t"
        read -r rc secs < "$tmp/$i.rc" || { rc=1; secs=0; }
        account "$t" "$rc" "$secs" < "$tmp/$i"
        i=$((i + 1))
    done
}

group=()
for t in "$@"; do
    if [ "$t" = --side-by-side ]; then side=1; continue; fi
    if [ "${side:-0}" = 1 ]; then group+=("$t"); continue; fi
    echo "== $t"
    run_into "$t" "$tmp/one"
    read -r rc secs < "$tmp/one.rc"
    account "$t" "$rc" "$secs" < "$tmp/one"
done
side_by_side "${group[@]}"
if [ -n "$fail_lines" ]; then echo "== what failed"; printf '%s' "$fail_lines"; fi
if [ "$skipped" -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"
else echo "$passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
