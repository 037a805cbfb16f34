#!/usr/bin/env bash
# Mixed precision against FP32, three experiments (dev/RESULTS.md, "Mixed precision"); each packs its logs into its
# archive and rewrites the pages' blocks (report.py) once every run has finished.
#   dev/precision/runs.sh bf16 [WORK]   make run's configuration: ./train and ./train --bf16, seeds 1 to 4, one after
#                                       another (about a minute a run on 2 cores); into logs.tar.xz
#   dev/precision/runs.sh fp16 [WORK]   the small configuration below: ./train, ./train --bf16 and the FP16 GPU
#                                       trainer on the CUDA-on-CPU layer (build/cudacpu/train_gpu, several minutes a
#                                       run), seeds $SEEDS (default 1 to 8), two processes at a time; into
#                                       logs_fp16.tar.xz
#   dev/precision/runs.sh gpu [WORK]    on a machine with an NVIDIA GPU: make run's configuration with train_gpu (FP16)
#                                       and train_gpu_fp32, seeds 1 to 8, one after another (seconds a run), built
#                                       for that GPU alone; into logs_gpu.tar.xz (copy it back to the repository)
# WORK: where the run directories go (default a new temporary one). A run whose log reaches its last validation is
# kept; an interrupted run continues from its latest.ckpt with --resume (written every 50 steps; resuming is
# bit-exact), or starts again when it has none. Every run is nice 19 and a fixed number of steps, so the processes
# may be paused (SIGSTOP/SIGCONT) at any time.
set -euo pipefail
cd "$(dirname "$0")/../.."
experiment=${1:-}
work=${2:-$(mktemp -d)}
mkdir -p "$work"

case $experiment in
bf16)
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
    dev/precision/report.py --pack bf16 "$work"
    ;;
fp16)
    # The CUDA-on-CPU layer runs every GPU thread on the CPU, about 250x slower than ./train here: make run's
    # configuration would take hours a run, so this one is small (H = 64, 16 x 32 characters a step, 600 steps,
    # 0.77 of an epoch of 400 kB of the built-in corpus; validation on its first 16 batches of the 10 kB val text).
    # The base lr 0.032 (legw's peak 0.0226 at batch 16) was chosen before any FP16 run from a pilot of ./train
    # (seeds 1 and 2, base lr 0.002 to 0.064 by factors of 2): the larger, the lower the final bpc in 600 steps;
    # 0.032 is one step below the largest tried, so the comparison is not made at the edge of stability.
    make train build/cudacpu/train_gpu > /dev/null
    steps=600
    config="--hidden 64 --batch 16 --seq-len 32 --steps $steps --lr 0.032 --corpus-bytes 400000
            --val-every 100 --val-steps 16 --sample-len 0 --threads 1"  # (words: no value holds a space)
    one() {  # one run: PRECISION_seedN
        local name=$1 out=$work/$1 seed=${1#*_seed} trainer=./train flag=()
        case $name in fp16_*) trainer=build/cudacpu/train_gpu ;; bf16_*) flag=(--bf16) ;; esac
        if grep -q "^val $steps " "$out/train.log" 2> /dev/null; then return 0; fi
        if [ -f "$out/latest.ckpt" ]; then
            echo "resuming $name"
            nice -n 19 $trainer --resume "$out" --val-every 100 --sample-len 0 --threads 1 --ckpt-every 50 \
                >> "$out.stdout" 2>&1
        else
            echo "starting $name"
            nice -n 19 $trainer $config --seed "$seed" "${flag[@]}" --ckpt-every 50 --out "$out" --overwrite \
                > "$out.stdout" 2>&1
        fi
        grep -q "^val $steps " "$out/train.log" ||
            { echo "error: $name did not finish (see $out.stdout)" >&2; return 1; }
    }
    export -f one; export work steps config
    # the slow FP16 runs first, two at a time, seeds in order; then the FP32 and BF16 runs (seconds each)
    seeds=${SEEDS:-1 2 3 4 5 6 7 8}
    names=(); for seed in $seeds; do names+=(fp16_seed$seed); done
    for seed in $seeds; do names+=(fp32_seed$seed bf16_seed$seed); done
    printf '%s\n' "${names[@]}" | xargs -P 2 -I{} bash -c 'one {}'
    dev/precision/report.py --pack fp16 "$work"
    ;;
gpu)
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
    make -j"$(nproc)" train_gpu train_gpu_fp32 GPU_ARCHS="-gencode arch=compute_$cap,code=sm_$cap" > /dev/null
    for seed in 1 2 3 4 5 6 7 8; do
        for precision in fp16 fp32; do
            out=$work/${precision}_seed$seed trainer=./train_gpu
            [ "$precision" = fp32 ] && trainer=./train_gpu_fp32
            if ! grep -q '^val 800 ' "$out/train.log" 2> /dev/null; then
                $trainer --seed "$seed" --out "$out" --overwrite > "$out.stdout" 2>&1
            fi
        done
    done
    dev/precision/report.py --pack gpu "$work"
    ;;
*)
    echo "usage: dev/precision/runs.sh bf16|fp16|gpu [WORK]" >&2
    exit 2
    ;;
esac
dev/precision/report.py --write
