#!/usr/bin/env bash
# The CPU trainer's speed in one run, as ratios measured side by side (dev/bench/cpu-perf.md):
#  - ./train's training step (forward, backward, clip, Adam) at H = 256, 1024, 4096: chars/s (the
#    median step after the first), GFLOP/s (3 x mlstm.h's flops_per_char per char) and its fraction
#    of the machine's large-SGEMM rate (OpenBLAS through PyTorch, 2048x4096.4096x1024) on the same
#    threads, measured just before and just after each row: the ratio uses the higher of the two
#    (a machine whose speed moves, as shared VMs' does, cannot flatter the step);
#  - the same step in PyTorch + OpenBLAS (dev/bench/bench_torch.py, its best thread setup) at H = 256, 1024, B = 32;
#  - the peak RSS of ./train at H=4096, B=128, T=256 (one step);
#  - with libopenblas-dev, dev/bench/step_vs_sgemm.c: the step against sgemm on one thread in CPU time.
#   dev/bench/bench_cpu.sh            (about 10 minutes on 2 idle cores; needs python3-torch, libopenblas0-pthread)
#   dev/bench/bench_cpu.sh --quick    (H = 256 and 1024 only, no PyTorch-free extras: about 3 minutes)
set -euo pipefail
cd "$(dirname "$0")/../.."
main() {  # all of it in one function: bash reads it whole, so editing the file mid-run is harmless
quick=0; [ "${1:-}" = --quick ] && quick=1
py=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
make -s build/train >/dev/null
sgemm() { $py dev/bench/bench_torch.py sgemm --threads "$1" | awk '/^sgemm/ { print $(NF-4) }'; }
out=$($py dev/bench/bench_torch.py sgemm --threads 1)
echo "${out%%$'\n'*}"  # which PyTorch and BLAS

# ./train's median chars/s over the steps after the first (the first touches every buffer)
train_cps() {  # H B T steps threads
    ./build/train --hidden "$1" --embed 64 --batch "$2" --seq-len "$3" --steps "$4" --threads "$5" --print-every 1000 \
        --val-every 0 --val-steps 1 --sample-len 0 --corpus-bytes 4000000 --ckpt "$tmp/b.ckpt" --log "$tmp/b.log" --overwrite >/dev/null ||
        { echo "bench_cpu: ./build/train failed at H=$1 B=$2 T=$3 on $5 threads" >&2; kill $$; }
    awk '$1 == "train" && $2 > 1 { print $NF }' "$tmp/b.log" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
fpc() { echo "3 * 2 * (5 * $1 * 64 + 5 * $1 * $1 + 256 * $1)" | bc; }  # training FLOPs per char

rows=()
configs="256 32 64 12|256 128 64 6|1024 32 64 5|1024 128 64 3"
[ $quick = 1 ] || configs="$configs|4096 64 64 2"
IFS='|' read -ra cfgs <<< "$configs"
for cfg in "${cfgs[@]}"; do
    read -r H B T steps <<< "$cfg"
    for th in 1 2; do
        echo "measuring H=$H B=$B T=$T on $th thread(s) ..." >&2
        sb=$(sgemm "$th")
        cps=$(train_cps "$H" "$B" "$T" "$steps" "$th")
        sa=$(sgemm "$th")
        ref=$(echo "if ($sb > $sa) $sb else $sa" | bc -l)
        gf=$(echo "$cps * $(fpc "$H") / 10^9" | bc -l)
        tcps=-; vs=-
        if [ "$H" -le 1024 ] && [ "$B" = 32 ]; then
            tsteps=$([ "$H" -le 256 ] && echo 6 || echo 3)
            tcps=$($py dev/bench/bench_torch.py step --hidden "$H" --batch "$B" --seq-len "$T" --threads "$th" --steps "$tsteps" | tee -a "$tmp/torch.txt" |
                   awk '/^torch H=/ { print $(NF-3) }')
            vs=$(printf '%.2fx' "$(echo "$cps / $tcps" | bc -l)")
        fi
        rows+=("$(printf '| %s | %s | %s | %s | %.0f | %.1f | %.1f / %.1f | %.2f | %s | %s |' "$H" "$B" "$T" "$th" "$cps" "$gf" \
                  "$sb" "$sa" "$(echo "$gf / $ref" | bc -l)" "$tcps" "$vs")")
    done
done

echo
echo "| H | B | T | threads | train.c chars/s | GFLOP/s | sgemm GFLOP/s before / after | step / sgemm (the higher) | PyTorch chars/s | train.c / PyTorch |"
echo "|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "PyTorch thread setups tried:"
grep -E '^  setup|^torch H=' "$tmp/torch.txt" | sed 's/^/  /'
if echo '#include <cblas.h>' | ${CC:-cc} -E -x c - >/dev/null 2>&1; then
    echo "the same on one thread in CPU time (alternating; what a machine shared with other work still gives):"
    ${CC:-cc} -O3 -march=native -ffp-contract=fast -std=c11 -D_GNU_SOURCE -fopenmp -I. dev/bench/step_vs_sgemm.c \
        -o "$tmp/svs" -lopenblas -lm
    for H in 256 1024; do "$tmp/svs" "$H" 32 64 "$([ "$H" -le 256 ] && echo 5 || echo 1)" | sed 's/^/  /'; done
fi
if [ $quick = 0 ]; then
    echo "measuring the peak RSS: one step at H=4096 B=128 T=256 on 2 threads (minutes) ..." >&2
    rss=$( { /usr/bin/time -f 'RSS %M' ./build/train --hidden 4096 --embed 64 --batch 128 --seq-len 256 --steps 1 --threads 2 \
             --val-every 0 --val-steps 1 --sample-len 0 --corpus-bytes 4000000 --ckpt "$tmp/r.ckpt" --log "$tmp/r.log" --overwrite >/dev/null; } 2>&1 |
           awk '/^RSS/ { print $2 }')
    printf 'peak RSS of ./build/train at H=4096 B=128 T=256: %.2f GiB\n' "$(echo "$rss / 1024 / 1024" | bc -l)"
fi
}
main "$@"
