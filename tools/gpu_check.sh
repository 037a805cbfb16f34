#!/usr/bin/env bash
# tools/gpu_check.sh: everything a GPU can check, in one command, in under 8 minutes.
#
#   tools/gpu_check.sh [LOG_DIR]
#
# 1. nvidia-smi; 2. build (finds NCCL in the system, the CUDA directory or a Python
# package such as site-packages/nvidia/nccl; builds without it if there is none);
# 3. test_gpu in the FP16 and the FP32 build (GPU vs the CPU reference); 4. a
# benchmark table: the full training step at H=4096 D=64 T=256, B = 128, 256, 512,
# FP16 and FP32 (chars/s, TFLOP/s with doc/design.md's count 3 * 2(5HD + 5H^2 + VH) per
# char, MFU against the card's dense FP16 rate), and the hand-written matmul vs
# cuBLAS on every shape of the model. Every GPU command has a timeout; benchmarks
# are capped by step counts. Exit status: 0 only if the build and both test runs pass.
# The log is copied into LOG_DIR (if given) however the script ends.
#
# Environment: PEAK_TFLOPS (the card's dense FP16 TFLOP/s, if not in the table
# below), BENCH_STEPS_FP16 (default 8), BENCH_STEPS_FP32 (default 3), JOBS,
# DEADLINE_S (default 470: every command's timeout is cut to what is left of it).
set -u
cd "$(dirname "$0")/.."
LOG_DIR=${1:-}
WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)
LOG=$WORK/gpu_check.log
T_START=$(date +%s)
DEADLINE_S=${DEADLINE_S:-470}
FAILS=$WORK/failures  # a file, so that failures inside pipelines (subshells) count too
: > "$FAILS"
say() { printf '\n==== %s  (%ds)\n' "$*" $(( $(date +%s) - T_START )); }
fail() { echo "$1" >> "$FAILS"; echo "FAILED: $1"; }
# tmo CAP: a timeout of at most CAP seconds that still ends before the deadline (0: no time left)
tmo() {
    local left=$(( DEADLINE_S - ($(date +%s) - T_START) ))
    [ "$left" -lt 0 ] && left=0
    echo $(( left < $1 ? left : $1 ))
}
# run NAME CAP CMD...: CMD under the timeout, recorded as a failure if it fails or is cut off
run() {
    local name=$1 cap=$2 t rc
    shift 2
    t=$(tmo "$cap")
    if [ "$t" -lt 5 ]; then fail "$name (no time left before the ${DEADLINE_S}s deadline)"; return 1; fi
    timeout "$t" "$@"
    rc=$?
    [ $rc -eq 124 ] && echo "$name: timed out after $t s"
    [ $rc -ne 0 ] && { fail "$name (exit $rc)"; return 1; }
    return 0
}

main() {
set -o pipefail

say "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
git log -1 --format='commit %H %s' 2>/dev/null || true
if ! command -v nvidia-smi > /dev/null; then echo "nvidia-smi not found: is this a GPU machine?"; fi
HAVE_GPU=1
timeout 30 nvidia-smi || { fail "nvidia-smi"; HAVE_GPU=0; }
GPU_NAME=$(timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
echo "GPU: ${GPU_NAME:-unknown}"

# ---- NCCL: system locations first (the Makefile probe finds those), then Python packages
say "locating NCCL"
NVCC_BIN=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
echo "nvcc: ${NVCC_BIN:-none} ($( [ -n "$NVCC_BIN" ] && "$NVCC_BIN" --version | tail -n 1))"
MAKE_ARGS=()
NCCL_WHERE=""
if make -s probe 2>/dev/null | grep -q '^NCCL: yes'; then
    NCCL_WHERE="system (nccl.h and libnccl found by the Makefile probe)"
else
    for py in python3 python; do
        command -v $py > /dev/null || continue
        for sp in $($py -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
            n=$sp/nvidia/nccl
            if [ -f "$n/include/nccl.h" ] && ls "$n"/lib/libnccl.so* > /dev/null 2>&1; then
                # pip's wheel ships libnccl.so.2 only: give the linker a libnccl.so beside the headers
                lib=$(ls "$n"/lib/libnccl.so* | head -n 1)
                mkdir -p "$WORK/nccl/lib"
                ln -sf "$n/include" "$WORK/nccl/include"
                ln -sf "$lib" "$WORK/nccl/lib/libnccl.so"
                ln -sf "$lib" "$WORK/nccl/lib/libnccl.so.2"
                NCCL_WHERE=$n
                MAKE_ARGS+=("NCCL_HOME=$WORK/nccl")
                break 2
            fi
        done
    done
fi
echo "NCCL: ${NCCL_WHERE:-not found; building single-process (no multi-GPU)}"

# ---- build
say "build: make -B gpu ${MAKE_ARGS[*]}  (-B: the flags may differ from an earlier build)"
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
if ! run build 300 make -B -j"$JOBS" gpu "${MAKE_ARGS[@]}"; then
    echo "gpu_check: build failed; nothing else to run"
    exit 1
fi

# ---- tests
for b in test_gpu test_gpu_fp32; do
    say "tests: build/$b"
    run "$b" 200 "build/$b"
done

# ---- benchmarks
if [ "$HAVE_GPU" = 0 ]; then echo "gpu_check: FAIL: no GPU (nvidia-smi failed); no benchmarks"; exit 1; fi
PEAK=${PEAK_TFLOPS:-}
if [ -z "$PEAK" ]; then
    case "$GPU_NAME" in  # dense FP16 tensor-core TFLOP/s with FP32 accumulation, from the vendor's data sheets
        *H200*) PEAK=989 ;;
        *H100*PCIe*) PEAK=756 ;;
        *H100*) PEAK=989 ;;
        *A100*) PEAK=312 ;;
        *V100*) PEAK=125 ;;
        *L40S*) PEAK=362 ;;
        *A10G*|*A10*) PEAK=125 ;;
        *T4*) PEAK=65 ;;
        *) PEAK="" ;;
    esac
fi
echo "peak dense FP16: ${PEAK:-unknown (set PEAK_TFLOPS for MFU)} TFLOP/s"
S16=${BENCH_STEPS_FP16:-8}
S32=${BENCH_STEPS_FP32:-3}
BENCH=$WORK/bench.txt
: > "$BENCH"
say "benchmark: full training step, H=4096 D=64 T=256 ($S16 FP16 / $S32 FP32 timed steps after one warm-up)"
for B in 128 256 512; do
    run "bench FP16 B=$B" 120 build/test_gpu --bench-step $B "$S16" | tee -a "$BENCH"
    run "bench FP32 B=$B" 150 build/test_gpu_fp32 --bench-step $B "$S32" | tee -a "$BENCH"
done
run "bench FP16 cuBLAS B=256" 120 build/test_gpu --cublas --bench-step 256 "$S16" | tee -a "$BENCH"
say "benchmark: hand-written matmul vs cuBLAS on the model's shapes (FP16, 5 repetitions)"
for B in 128 256 512; do
    echo "-- B=$B T=256 H=4096 D=64"
    run "bench matmul B=$B" 90 build/test_gpu --bench-matmul $B | tee -a "$BENCH"
done

say "results"
awk -v peak="$PEAK" '
    /^bench_step/ {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        mfu = peak != "" ? sprintf("%5.1f%%", 100 * v["tflops"] / peak) : "  n/a"
        printf "| %-4s | %-6s | B=%-3s | %12.0f chars/s | %7.2f TFLOP/s | MFU %s | skipped %s |\n", v["precision"], v["matmul"], v["B"], v["chars_per_s"], v["tflops"], mfu, v["skipped"]
        cps[v["precision"] "/" v["matmul"] "/" v["B"]] = v["chars_per_s"]; tf[v["precision"] "/" v["matmul"] "/" v["B"]] = v["tflops"]
    }
    /^bench_matmul/ { n++; r = $0; sub(/.*ours\/cuBLAS */, "", r); sub(/%.*/, "", r); if (r + 0 < 80) slow++ }
    END {
        printf "\nmatmul: %d shapes, %d below 80%% of cuBLAS (goal: none)\n", n, slow
        f16 = cps["FP16/ours/256"]; f32 = cps["FP32/ours/256"]
        if (f16 > 0 && f32 > 0) printf "FP16 / FP32 at B=256: %.2fx (goal: 4.2x, the paper on a V100)\n", f16 / f32
        if (peak != "" && tf["FP16/ours/256"] > 0) printf "FP16 MFU at B=256: %.1f%% (goal: 40%%)\n", 100 * tf["FP16/ours/256"] / peak
        if (f16 > 0) {
            chars = 40e9 * 3  # the paper run: 40 GB of text, 3 epochs
            printf "projected paper run (40 GB x 3 epochs) at B=256 per GPU, assuming linear scaling (all-reduce hidden, no loss of throughput per GPU):\n"
            printf "  8 GPUs: %.1f hours   128 GPUs: %.1f hours\n", chars / (8 * f16) / 3600, chars / (128 * f16) / 3600
        }
    }' "$BENCH"

say "summary"
if [ ! -s "$FAILS" ]; then
    echo "gpu_check: PASS (build, test_gpu FP16 and FP32, benchmarks) in $(( $(date +%s) - T_START )) s"
    exit 0
fi
echo "gpu_check: FAIL: $(paste -sd ';' "$FAILS")"
exit 1
}

main 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
if [ -n "$LOG_DIR" ]; then
    mkdir -p "$LOG_DIR" && cp "$LOG" "$LOG_DIR/gpu_check.log" && echo "log copied to $LOG_DIR/gpu_check.log"
fi
exit "$rc"
