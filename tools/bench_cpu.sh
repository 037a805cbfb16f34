#!/usr/bin/env bash
# train.c against the same model in PyTorch (tools/bench_torch.py) on the same
# threads: chars/s and GFLOP/s of the whole training step at D=64, B=32, T=64.
#   tools/bench_cpu.sh [threads]        (default 2; needs Debian's python3-torch)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
make -s train
printf '| H | train.c chars/s | train.c GFLOP/s | PyTorch chars/s | PyTorch GFLOP/s | ratio |\n|---|---|---|---|---|---|\n'
for H in 256 1024; do
    steps=$([ "$H" -le 256 ] && echo 60 || echo 15)
    c=$(./train --hidden "$H" --embed 64 --batch 32 --seq-len 64 --threads "$threads" --steps "$steps" \
        --print-every "$steps" --val-every 0 --val-steps 1 --sample-len 0 --corpus-bytes 2000000 \
        --overwrite --ckpt /tmp/bench_cpu.ckpt --log /tmp/bench_cpu.log | grep -E "^step +$steps/")
    c_cps=$(echo "$c" | sed -E 's/.*\| ([0-9]+) chars\/s.*/\1/'); c_gf=$(echo "$c" | sed -E 's/.*\| ([0-9.]+) GFLOP\/s.*/\1/')
    t=$(/usr/bin/python3 tools/bench_torch.py --hidden "$H" --threads "$threads" --steps "$([ "$H" -le 256 ] && echo 10 || echo 4)")
    t_cps=$(echo "$t" | sed -E 's/.*: ([0-9]+) chars\/s.*/\1/'); t_gf=$(echo "$t" | sed -E 's/.*, ([0-9.]+) GFLOP\/s/\1/')
    printf '| %s | %s | %s | %s | %s | %.1fx |\n' "$H" "$c_cps" "$c_gf" "$t_cps" "$t_gf" "$(echo "$c_cps / $t_cps" | bc -l)"
done
rm -f /tmp/bench_cpu.ckpt /tmp/bench_cpu.log
