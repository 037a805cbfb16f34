#!/usr/bin/env bash
# BF16 against FP32 on make run's configuration: ./train and ./train --bf16, seeds 1 to 4, one after
# another, then every log packed into dev/precision/logs.tar.xz and dev/RESULTS.md's block rewritten
# (report.py). Each run takes about a minute on 2 cores; a run already finished in WORK is kept.
#   dev/precision/runs.sh [WORK]        (WORK: where the run directories go; default a new temporary one)
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-$(mktemp -d)}
make train > /dev/null
for seed in 1 2 3 4; do
    for precision in fp32 bf16; do
        out=$work/${precision}_seed$seed
        flag=(); [ "$precision" = bf16 ] && flag=(--bf16)
        if ! grep -q '^val 800 ' "$out/train.log" 2> /dev/null; then
            nice -n 10 ./train --seed "$seed" "${flag[@]}" --out "$out" --overwrite > "$out.stdout" 2>&1
        fi
    done
done
dev/precision/report.py --pack "$work"
dev/precision/report.py --write
