#!/usr/bin/env bash
# Generation speed of build/generate at H = 256, 1024, 4096 (D = 64) on 1 and 2 threads.
# Each size gets a checkpoint of one training step at batch 1 (the weights' values do
# not change the speed), then `generate --length N` runs REPS times per setting. Prints
# the range of wall-clock chars/s over the repeats, and chars per CPU-second of the
# whole process (all threads), which on shared cores shows what an idle core gives.
#
#   dev/bench/bench_generate.sh [DIR [REPS]]   checkpoints in DIR (default /tmp/mlstm_bench_generate, 1.1 GB), REPS 3
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-/tmp/mlstm_bench_generate}
reps=${2:-3}
mkdir -p "$dir"
make -s build/train build/generate >&2
echo "| H | threads | chars/s (wall, $reps runs) | chars per CPU-second |"
echo "|---|---|---|---|"
for H in 256 1024 4096; do
    ck="$dir/h$H/latest.ckpt"
    [ -f "$ck" ] || build/train --hidden "$H" --batch 1 --seq-len 8 --corpus-bytes 20000 --steps 1 --val-every 0 \
        --val-steps 1 --sample-len 0 --out "$dir/h$H" > /dev/null
    n=$((H == 256 ? 4000 : H == 1024 ? 500 : 60))
    for t in 1 2; do
        walls=() cpus=()
        for _ in $(seq "$reps"); do
            build/generate "$ck" --length "$n" --threads "$t" 2> "$dir/err" > /dev/null
            # "N characters (prompt and generated) in W s, C CPU-s: R chars/s, T threads"
            read -r chars cpu rate < <(awk '/chars\/s/ { print $1, $9, $11 }' "$dir/err")
            walls+=("$rate")
            cpus+=("$(awk -v n="$chars" -v c="$cpu" 'BEGIN { printf "%.0f", (c > 0 ? n / c : 0) }')")
        done
        range() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.0f-%.0f", lo, hi }'; }
        echo "| $H | $t | $(range "${walls[@]}") | $(range "${cpus[@]}") |"
    done
done
