#!/usr/bin/env bash
# dev/gpu_check.sh: everything a GPU can check, in one command of about 6 minutes (so that a
# rerun fits in the 15 minutes of device time a session may get).
#
#   dev/gpu_check.sh [LOG_DIR]            on a GPU machine (LOG_DIR: e.g. "$OUT")
#   dev/gpu_check.sh --report LOG_DIR     the report again, from LOG_DIR's bench.txt and predict.txt
#
# 1. preflight: prints and checks what the build and the run need: nvidia-smi and the
#    GPU (nvidia-smi -q kept in LOG_DIR), the driver against nvcc's CUDA release (CUDA 13
#    needs a 580 or newer driver; an older one stops the run here, with one line saying so:
#    every binary would fail), a host compiler nvcc accepts, cuBLASLt (cublasLt.h and
#    libcublasLt, which train.cu links: without them the run stops here too), python3 (for
#    the predictions), mpicc and NCCL (for more than one GPU; optional: NCCL without MPI is
#    said in one line and not used, the build is single-process);
# 2. build: make -B gpu for this GPU's architecture only (GPU_ARCHS; faster), with NCCL
#    from the system, the CUDA directory or pip's site-packages/nvidia/nccl if present (its
#    libnccl linked from build/nccl-wheel, which outlives the run); ptxas's register reports
#    (build/ptxas-*.txt) copied to LOG_DIR;
# 3. tests: build/test_gpu --quick, then its matmul group in full (the paper's shapes: a
#    fatal exit there cannot hide the other groups' results), build/test_gpu_fp32 --quick
#    (the GPU against the CPU reference);
# 4. benchmarks: the DRAM and the L2 bandwidth by device copies (the model's constants); FP16:
#    each kernel of one forward and one backward time step timed by events
#    (B = 128, 256); the training step at H=4096 D=64 T=256, B = 128, 256, 512, at B=128
#    also without CUDA graphs, at B=256 with each run-time switch of train.cu on (doc/gpu.md,
#    dev/gpu-perf.md; --matmul cublaslt is one); the hand-written matmul against
#    cuBLASLt on every shape of the model, the per-step products at 2, 3 and 4 cp.async
#    stages. (The FP32 SIMT and cuBLASLt-FP32 step runs are left out: they buy little and
#    cost a minute.)
# 5. report: per run chars/s, TFLOP/s and MFU beside the prediction of dev/perf_model.py
#    (dev/gpu-perf.md), its range and their ratio; each switch on against off, measured and
#    predicted; per kernel of a time step and per matmul shape measured vs predicted, the
#    latency per slab in flight from the depths; the paper's run on H200 nodes from the
#    measured step (dev/scaling.py); what the run does not exercise (NCCL with two ranks,
#    the GPU_DEBUG build).
#
# Every command has a timeout inside one deadline (DEADLINE_S, default 420 s). A
# benchmark cut off by its timeout, or not started for lack of time, is reported as
# such and is not a failure. Exit status: 0 when the preflight's required checks, the
# build and both test programs pass (and no benchmark crashed); 1 otherwise.
# LOG_DIR receives, as they are written, 7 files: gpu_check.log (everything), bench.txt (the
# bench_* lines), predict.txt (the predictions), report.md (the tables), nvidia-smi-q.txt, and
# ptxas-train_gpu.txt, ptxas-train_gpu_fp32.txt (registers and spills per kernel).
#
# Environment: DEADLINE_S, JOBS, BENCH_STEPS_FP16 (default 8), PEAK_TFLOPS (dense FP16
# TFLOP/s for a card not in the table below), GPU_ARCHS (nvcc -gencode flags, instead of
# the detected architecture), NVCC (as for make).
set -u
cd "$(dirname "$0")/.." || exit 1

# ---------------------------------------------------------------------------
# The report: reads LOG_DIR/bench.txt and LOG_DIR/predict.txt, prints markdown tables.
report() {
    local dir=$1 peak=${2:-}
    awk -v peak="$peak" '
    function kv(line, arr,   i, n, f, p) {  # key=value fields of a line into arr
        n = split(line, f, /[ \t]+/)
        for (i = 1; i <= n; i++) { p = index(f[i], "="); if (p > 1) arr[substr(f[i], 1, p - 1)] = substr(f[i], p + 1) }
    }
    function ratio(a, b) { return (a > 0 && b > 0) ? sprintf("%.2f", a / b) : "n/a" }
    function fmt(x, f) { return x != "" ? sprintf(f, x) : "n/a" }
    { file = FILENAME == ARGV[1] ? 1 : 2 }
    file == 1 && /^predict_step/ {
        delete v; kv($0, v); k = v["precision"] "/" v["B"]
        pstep[k] = v["step_ms"]; pmfu[k] = v["mfu"]; pfast[k] = v["fast_ms"]; pslow[k] = v["slow_ms"]; next
    }
    file == 1 && /^predict_bandwidth/ {
        delete v; kv($0, v); pdram = v["dram_gbs"]; pl2 = v["l2_gbs"]; pl2f = v["l2_fast"]; pl2s = v["l2_slow"]; next
    }
    file == 2 && /^bench_copy/ { delete v; kv($0, v); copy[v["what"]] = v["gbs"]; next }
    file == 1 && /^predict_variant/ { delete v; kv($0, v); pvar[v["variant"] "/" v["B"]] = v["step_ms"]; next }
    file == 1 && /^predict_kernel/ { delete v; kv($0, v); pk[v["what"] "/" v["B"]] = v["us"]; pkb[v["what"] "/" v["B"]] = v["bound"]; next }
    file == 1 && /^predict_matmul/ {
        delete v; kv($0, v); k = v["what"] "/" v["M"] "/" v["N"] "/" v["K"] "/" (v["stages"] != "" ? v["stages"] : 3)
        pmm[k] = v["ms"]; pplan[k] = v["plan"]; pbound[k] = v["bound"]; next
    }
    file == 2 && /^bench_step/ {
        delete v; kv($0, v)
        var = v["variant"] != "" ? v["variant"] : "as-is"
        key = v["precision"] "/" v["matmul"] "/" v["B"] "/" var
        ms = v["chars_per_s"] > 0 ? 1000 * v["B"] * v["T"] / v["chars_per_s"] : 0
        cps[key] = v["chars_per_s"]; sms[key] = ms; nrun++
        pkey = v["precision"] "/" v["B"]
        pred = ""
        if (v["matmul"] == "ours" && var == "as-is" && (pkey in pstep)) pred = pstep[pkey]
        else if (v["precision"] == "FP16" && v["matmul"] == "ours-direct" && (("direct/" v["B"]) in pvar)) pred = pvar["direct/" v["B"]]
        else if (v["precision"] == "FP16" && ((var "/" v["B"]) in pvar)) pred = pvar[var "/" v["B"]]
        rng = (pred != "" && var == "as-is" && v["matmul"] == "ours") ? sprintf("%.0f-%.0f", pfast[pkey], pslow[pkey]) : "-"
        mfu = peak != "" ? sprintf("%.1f%%", 100 * v["tflops"] / peak) : "n/a"
        pm = (rng != "-") ? sprintf("%.1f%%", 100 * pmfu[pkey]) : "n/a"
        runs[nrun] = sprintf("| %s | %s | %s | %s | %.0f | %.1f | %s | %s | %s | %.1f | %s | %s | %s |", v["precision"], v["matmul"],
            var, v["B"], v["chars_per_s"], ms, fmt(pred, "%.1f"), rng, pred != "" ? ratio(ms, pred) : "n/a", v["tflops"], mfu, pm,
            v["skipped"])
        next
    }
    file == 2 && /^bench_kernel/ {
        delete v; kv($0, v); nk++
        k = v["what"] "/" v["B"]
        kern[nk] = sprintf("| %s | %s | %s | %.1f | %s | %s | %s |", v["B"], v["what"], v["plan"], v["us"], fmt(pk[k], "%.1f"),
            (k in pk) ? ratio(v["us"], pk[k]) : "n/a", (k in pkb) ? pkb[k] : "n/a")
        next
    }
    file == 2 && /^bench_matmul/ {
        what = $2; M = ""; N = ""; K = ""; plan = ""; ours = ""; cub = ""; st = 3
        for (i = 3; i <= NF; i++) {
            if ($i ~ /^M=/) M = substr($i, 3); else if ($i ~ /^N=/) N = substr($i, 3); else if ($i ~ /^K=/) K = substr($i, 3)
            else if ($i ~ /^stages=/) st = substr($i, 8)
            else if ($i ~ /^(simt|wmma64|wmma128)$/ && plan == "") plan = $i
            else if ($i == "ours" && ours == "") ours = $(i + 1)
            else if ($i == "cuBLASLt" && cub == "") cub = $(i + 1)
        }
        if (st == 1) st = 3  # the SIMT kernel: one depth, keyed as the default
        key = what "/" M "/" N "/" K "/" st
        pred = (key in pmm) ? pmm[key] : ""
        line = sprintf("| %s | %s x %s x %s | %s | %s | %s | %s | %s | %s | %s | %s |", what, M, N, K, plan,
            (key in pplan) ? pplan[key] : "n/a", (key in pbound) ? pbound[key] : "n/a", ours, fmt(pred, "%.4f"), ratio(ours, pred),
            cub, ratio(cub, ours))
        if (st == 3) { nmm++; mm[nmm] = line; if (ours > 0 && cub > 0 && cub / ours < 0.8) slow++ }
        # the per-step products at every depth: the time per slab in flight, measured, ns
        dkey = what "/" M "/" N "/" K
        if (!(dkey in dseen)) { dseen[dkey] = 1; nd++; dname[nd] = dkey }
        dms[dkey "/" st] = ours; dpred[dkey "/" st] = pred
        next
    }
    END {
        print "### Training step (H=4096, D=64, T=256)\n"
        print "| precision | matmul | switches | B | chars/s | step ms | predicted ms | predicted range | measured/predicted | TFLOP/s | MFU | predicted MFU | skipped |"
        print "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
        for (i = 1; i <= nrun; i++) print runs[i]
        if (nrun == 0) print "| (no bench_step results) | | | | | | | | | | | | |"
        print "\nTFLOP/s counts the model FLOPs, 3 x 2(5HD + 5H^2 + VH) per character; MFU is over the dense FP16 peak (" (peak != "" ? peak " TFLOP/s" : "unknown") ")."
        print "The predicted range moves the uncertain constants together (perf_model.py --range)."
        print "\n### The switches at B=256 (FP16, hand-written matmul unless named), measured and predicted\n"
        print "| switch | step ms off | step ms on | on/off | predicted on/off |"
        print "|---|--:|--:|--:|--:|"
        off = sms["FP16/ours/256/as-is"]; poff = pvar_off = pstep["FP16/256"]; nsw = 0
        for (key in sms) {
            split(key, kk, "/")
            if (kk[1] != "FP16" || kk[3] != 256 || kk[4] == "as-is") continue
            nsw++
            printf "| %s%s | %s | %.1f | %s | %s |\n", kk[4], kk[2] == "ours" ? "" : " (" kk[2] ")", fmt(off, "%.1f"), sms[key],
                ratio(sms[key], off), ((kk[4] "/256") in pvar) ? ratio(pvar[kk[4] "/256"], poff) : "n/a"
        }
        if (nsw == 0) print "| (no switch runs) | | | | |"
        print "\n### Bandwidths: device copies (bench_copy) against the constants of perf_model.py\n"
        print "| what | measured GB/s | perf_model.py GB/s | measured/model |"
        print "|---|--:|--:|--:|"
        printf "| DRAM (a copy between 1 GiB buffers; model: hbm_gbs x mem_eff) | %s | %s | %s |\n", fmt(copy["dram"], "%.0f"),
            fmt(pdram, "%.0f"), ratio(copy["dram"], pdram)
        printf "| L2 (two copies within L2, their difference; model: l2_gbs, range %s-%s) | %s | %s | %s |\n",
            fmt(pl2s, "%.0f"), fmt(pl2f, "%.0f"), fmt(copy["l2_slope"], "%.0f"), fmt(pl2, "%.0f"), ratio(copy["l2_slope"], pl2)
        print "\n### Kernels of one time step, timed by events (bench_kernel) against perf_model.py (predict_kernel)\n"
        print "| B | kernel | tile | measured us | predicted us | measured/predicted | predicted bound |"
        print "|--:|---|---|--:|--:|--:|---|"
        for (i = 1; i <= nk; i++) print kern[i]
        if (nk == 0) print "| (no bench_kernel results) | | | | | | |"
        print "\n### Matmul per model shape (FP16, FP32 output; 5 repetitions; 3 cp.async stages)\n"
        print "| shape | M x N x K | tile | predicted tile | predicted bound | ours ms | predicted ms | measured/predicted | cuBLASLt ms | cuBLASLt/ours |"
        print "|---|---|---|---|---|--:|--:|--:|--:|--:|"
        for (i = 1; i <= nmm; i++) print mm[i]
        if (nmm == 0) print "| (no bench_matmul results) | | | | | | | | | |"
        printf "\n%d shapes, %d below 80%% of cuBLASLt (goal: none)\n", nmm, slow
        print "\n### The per-step products at 2, 3 and 4 cp.async stages\n"
        print "Latency-bound, a block needs slabs x latency / (stages - 1): the last column is that latency, from the"
        print "measurement (ms x (stages - 1) / (K / 32)); perf_model.py assumes lat_ns = 600 (DRAM) or 300 (L2)."
        print "\n| shape | ms at 2 | 3 | 4 | predicted at 2 | 3 | 4 | ns per slab in flight at 2 / 3 / 4 |"
        print "|---|--:|--:|--:|--:|--:|--:|---|"
        nrow = 0
        for (i = 1; i <= nd; i++) {
            d = dname[i]
            if (!((d "/2") in dms)) continue
            split(d, dd, "/"); slabs = dd[4] / 32; nrow++
            printf "| %s %s x %s x %s | %s | %s | %s | %s | %s | %s | %s / %s / %s |\n", dd[1], dd[2], dd[3], dd[4], dms[d "/2"], dms[d "/3"],
                dms[d "/4"], dpred[d "/2"], dpred[d "/3"], dpred[d "/4"], fmt(dms[d "/2"] * 1e6 / slabs, "%.0f"),
                fmt(dms[d "/3"] * 2e6 / slabs, "%.0f"), fmt(dms[d "/4"] * 3e6 / slabs, "%.0f")
        }
        if (nrow == 0) print "| (no runs at other depths) | | | | | | | |"
        f16 = cps["FP16/ours/256/as-is"]; f32 = cps["FP32/ours/256/as-is"]; c16 = cps["FP16/cublaslt/256/cublaslt"]; c32 = cps["FP32/cublaslt/256/cublaslt"]
        print "\n### FP16 / FP32 at B=256 (chars/s ratios)\n"
        if (f32 == "" && c32 == "") {
            print "Not measured: the FP32 SIMT and cuBLASLt-FP32 step runs are left out so the run fits in about 6 minutes"
            print "(build/test_gpu_fp32 --bench-step 256 3, and with --matmul cublaslt under NVIDIA_TF32_OVERRIDE=0, measure them)."
        } else {
            printf "- ours FP16 / ours FP32 (hand-written SIMT FP32 matmul): %s\n", ratio(f16, f32)
            printf "- ours FP16 / cuBLASLt FP32 (TF32 off: the comparison behind the 4.2x of the papers): %s\n", ratio(f16, c32)
            printf "- cuBLASLt FP16 / cuBLASLt FP32 (TF32 off): %s\n", ratio(c16, c32)
        }
        if (f16 > 0) printf "\nmeasured FP16 step at B=256: %.1f ms\n", 1000 * 256 * 256 / f16
        printf "\n- CUDA graphs / direct launches of the time loops, FP16 B=128 (chars/s): %s (perf_model.py: %s)\n",
            ratio(cps["FP16/ours/128/as-is"], cps["FP16/ours-direct/128/as-is"]), ratio(pvar["direct/128"], pstep["FP16/128"])
        print "\n### Not exercised by this run\n"
        print "- NCCL (two ranks): not exercised. gpu_check.sh runs one process; two ranks on one GPU fail the"
        print "  duplicate-device check of NCCL. On two GPUs: mpirun -np 2 ./train_gpu against -np 1 with twice --batch (what"
        print "  build/cudacpu/test_cudacpu checks on the CPU layer)."
        print "- The GPU_DEBUG build (every launch waited for and checked, no graphs): not built or run. By hand:"
        print "  make -B gpu GPU_DEBUG=1 && build/test_gpu --quick."
    }' "$dir/predict.txt" "$dir/bench.txt"
}

if [ "${1:-}" = "--report" ]; then
    if [ $# -ne 2 ] || [ ! -f "$2/bench.txt" ]; then
        echo "error: --report LOG_DIR: needs LOG_DIR/bench.txt (and predict.txt) from an earlier run" >&2
        exit 2
    fi
    [ -f "$2/predict.txt" ] || : > "$2/predict.txt"
    report "$2" "${PEAK_TFLOPS:-}"
    exit 0
fi
case "${1:-}" in -*) echo "error: unknown option $1 (usage: dev/gpu_check.sh [LOG_DIR] | --report LOG_DIR)" >&2; exit 2 ;; esac
if [ $# -gt 1 ]; then echo "error: too many arguments (usage: dev/gpu_check.sh [LOG_DIR])" >&2; exit 2; fi

LOG_DIR=${1:-}
if [ -z "$LOG_DIR" ]; then LOG_DIR=$(mktemp -d /tmp/gpu_check.XXXXXX) || exit 1; fi
if ! mkdir -p "$LOG_DIR" || [ ! -w "$LOG_DIR" ]; then echo "error: LOG_DIR $LOG_DIR: cannot create or write it" >&2; exit 2; fi
LOG=$LOG_DIR/gpu_check.log
BENCH=$LOG_DIR/bench.txt
PRED=$LOG_DIR/predict.txt
REPORT=$LOG_DIR/report.md
WORK=$(mktemp -d /tmp/gpu_check_work.XXXXXX) || exit 1
trap 'rm -rf "$WORK"' EXIT
FAILS=$WORK/failures    # files, so that results inside pipelines (subshells) count too
TIMEOUTS=$WORK/timeouts
: > "$FAILS"; : > "$TIMEOUTS"; : > "$BENCH"; : > "$PRED"
T_START=$(date +%s)
DEADLINE_S=${DEADLINE_S:-420}
# The trainer re-executes itself to set OMP_WAIT_POLICY when it is unset (mlstm.h);
# test_gpu runs the trainer's main, so set the policy here and skip that.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

say() { printf '\n==== %s  (%ds)\n' "$*" $(( $(date +%s) - T_START )); }
fail() { echo "$1" >> "$FAILS"; echo "FAILED: $1"; }
# left CAP: seconds a command may take: at most CAP, and ending before the deadline
left() {
    local l=$(( DEADLINE_S - ($(date +%s) - T_START) ))
    [ "$l" -lt 0 ] && l=0
    echo $(( l < $1 ? l : $1 ))
}
# run KIND NAME CAP CMD...: CMD under a timeout. KIND "must": a failure or a timeout
# fails the check. KIND "bench": a timeout (or no time left) is only noted; a crash fails.
run() {
    local kind=$1 name=$2 cap=$3 t rc
    shift 3
    t=$(left "$cap")
    if [ "$t" -lt 10 ]; then
        if [ "$kind" = must ]; then fail "$name (not run: the ${DEADLINE_S}s deadline)"
        else echo "$name: not run (the ${DEADLINE_S}s deadline)" | tee -a "$TIMEOUTS"; fi
        return 1
    fi
    timeout -k 10 "$t" "$@"
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        if [ "$kind" = must ]; then fail "$name (timed out after ${t}s)"
        else echo "$name: timed out after ${t}s" | tee -a "$TIMEOUTS"; fi
        return 1
    fi
    [ "$rc" -ne 0 ] && { fail "$name (exit $rc)"; return 1; }
    return 0
}
# version_ge A B: A >= B for dotted versions
version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" = "$2" ]; }

main() {
set -o pipefail
say "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), logs in $LOG_DIR"
git log -1 --format='commit %H %s' 2>/dev/null || true

# ---- 1. preflight
say "preflight"
missing=""
for c in make timeout awk sort find; do command -v "$c" > /dev/null || missing="$missing $c"; done
[ -n "$missing" ] && fail "preflight: missing commands:$missing"
HAVE_GPU=0 GPU_NAME="" CC_CAP="" DRIVER="" DRIVER_CUDA=""
if command -v nvidia-smi > /dev/null; then
    if timeout 30 nvidia-smi; then
        HAVE_GPU=1
        timeout 30 nvidia-smi -q > "$LOG_DIR/nvidia-smi-q.txt" 2>&1 || true
        GPU_NAME=$(timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
        DRIVER=$(timeout 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
        CC_CAP=$(timeout 30 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1)
        DRIVER_CUDA=$(timeout 30 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: *[0-9.]*' | grep -o '[0-9.]*$' | head -n 1)
    else
        fail "preflight: nvidia-smi fails (no driver loaded, or no GPU)"
    fi
else
    fail "preflight: nvidia-smi not found: no NVIDIA driver on this machine"
fi
NVCC=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)}
NVCC_REL=""
[ -n "$NVCC" ] && NVCC_REL=$("$NVCC" --version 2>/dev/null | grep -o 'release [0-9.]*' | grep -o '[0-9.]*$')
echo "GPU:      ${GPU_NAME:-none} (compute capability ${CC_CAP:-?})"
echo "driver:   ${DRIVER:-none}, supports CUDA ${DRIVER_CUDA:-?}"
echo "nvcc:     ${NVCC:-none}${NVCC_REL:+ (CUDA $NVCC_REL)}"
# A driver older than the toolkit needs: every binary would fail with cudaErrorInsufficientDriver
# (R550/R570 are common on H200 fleets; CUDA 13 needs R580). Nothing else is worth running: stop
# here, with one line saying what is needed.
need=""
if [ -n "$NVCC_REL" ] && [ -n "$DRIVER_CUDA" ] && ! version_ge "$DRIVER_CUDA" "$NVCC_REL"; then
    need="driver $DRIVER supports CUDA $DRIVER_CUDA, nvcc is CUDA $NVCC_REL"
elif [ -n "$NVCC_REL" ] && [ -n "$DRIVER" ] && version_ge "$NVCC_REL" 13.0 && ! version_ge "$DRIVER" 580; then
    need="driver $DRIVER is older than CUDA 13's minimum"
fi
if [ -z "$NVCC_REL" ]; then
    fail "preflight: no working nvcc (install the CUDA toolkit, or NVCC=/path/to/nvcc)"
elif [ -n "$need" ]; then
    need="preflight: $need: needs driver 580 or newer for CUDA 13 (or NVCC= a CUDA ${DRIVER_CUDA:-12} toolkit); nothing built or run"
    echo "$need" >> "$FAILS"
    echo "gpu_check: STOP: $need"
    return 1
else
    [ -n "$DRIVER" ] && echo "driver:   ok for CUDA $NVCC_REL"
fi
HOSTCXX=$(command -v g++ || command -v c++ || true)
echo "host C++: ${HOSTCXX:-none} ($( [ -n "$HOSTCXX" ] && "$HOSTCXX" --version | head -n 1))"
if [ -n "$NVCC_REL" ]; then
    printf '__global__ void k(float *x) { x[threadIdx.x] = 1.f; }\nint main() { return 0; }\n' > "$WORK/probe.cu"
    if "$NVCC" -c "$WORK/probe.cu" -o "$WORK/probe.o" > "$WORK/probe.txt" 2>&1; then
        echo "host C++: nvcc accepts it"
    else
        cat "$WORK/probe.txt"
        fail "preflight: nvcc cannot compile with this host compiler (an unsupported g++ version? NVCC=\"nvcc -ccbin g++-N\")"
    fi
fi
# cuBLASLt: train.cu links it (--matmul cublaslt); without cublasLt.h or libcublasLt the build
# fails, so the run stops here, with one line saying what is missing
if [ -n "$NVCC_REL" ]; then
    printf '#include <cublasLt.h>\nint main() { cublasLtHandle_t h; return cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS; }\n' \
        > "$WORK/lt.cu"
    if "$NVCC" "$WORK/lt.cu" -lcublasLt -o "$WORK/lt" > "$WORK/lt.txt" 2>&1; then
        echo "cuBLASLt: cublasLt.h and libcublasLt found by nvcc"
    else
        head -n 5 "$WORK/lt.txt"
        need="preflight: cuBLASLt not found by nvcc (cublasLt.h and libcublasLt, the toolkit's cuBLAS: train.cu links it)"
        echo "$need" >> "$FAILS"
        echo "gpu_check: STOP: $need; nothing built or run"
        return 1
    fi
fi
if command -v python3 > /dev/null; then echo "python3:  $(python3 --version 2>&1) (predictions)"
else echo "python3:  none: no predictions beside the measurements"; fi
MPICC=${MPICC-$(command -v mpicc || true)}  # (MPICC= in the environment: no MPI, for make too)
echo "mpicc:    ${MPICC:-none: the GPU build is single-process (multi-GPU needs MPI and NCCL)}"

# NCCL: system locations first (the Makefile probe finds those), then pip's wheel. train.cu uses
# NCCL only with MPI (one process per GPU), so without mpicc it is said in one line and left out.
MAKE_ARGS=()
NCCL_WHERE=""
if make -s probe 2>/dev/null | grep -q '^NCCL: yes'; then
    NCCL_WHERE="system (nccl.h and libnccl found by the Makefile probe)"
elif command -v python3 > /dev/null; then
    for sp in $(python3 -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
        n=$sp/nvidia/nccl
        if [ -f "$n/include/nccl.h" ] && ls "$n"/lib/libnccl.so* > /dev/null 2>&1; then
            NCCL_WHERE=$n
            [ -n "$MPICC" ] || break
            # pip's wheel ships libnccl.so.2 only: a libnccl.so for the linker, beside the headers, in build/
            # (the binaries' rpath points there, so it must outlive this run: not in $WORK)
            lib=$(find "$n/lib" -name 'libnccl.so*' | sort | head -n 1)
            d=$PWD/build/nccl-wheel
            mkdir -p "$d/lib"
            ln -sfn "$n/include" "$d/include"
            ln -sf "$lib" "$d/lib/libnccl.so"
            ln -sf "$lib" "$d/lib/libnccl.so.2"
            MAKE_ARGS+=("NCCL_HOME=$d")
            break
        fi
    done
fi
if [ -z "$NCCL_WHERE" ]; then echo "NCCL:     not found (single-process build)"
elif [ -z "$MPICC" ]; then echo "NCCL:     $NCCL_WHERE, not used: no MPI (mpicc), so the build is single-process"
else echo "NCCL:     $NCCL_WHERE"; fi
if [ -n "${GPU_ARCHS:-}" ]; then
    MAKE_ARGS+=("GPU_ARCHS=$GPU_ARCHS")
elif [ -n "$CC_CAP" ]; then
    arch=${CC_CAP/./}
    MAKE_ARGS+=("GPU_ARCHS=-gencode arch=compute_$arch,code=sm_$arch")
fi

# The card's dense FP16 tensor-core TFLOP/s with FP32 accumulation (vendor data sheets), for MFU
PEAK=${PEAK_TFLOPS:-}
MODEL_GPU=""
case "$GPU_NAME" in
    *H200*) PEAK=${PEAK:-989}; MODEL_GPU=h200 ;;
    *H100*PCIe*) PEAK=${PEAK:-756} ;;
    *H100*) PEAK=${PEAK:-989} ;;
    *A100*) PEAK=${PEAK:-312} ;;
    *V100*) PEAK=${PEAK:-125}; MODEL_GPU=v100 ;;
    *L40S*) PEAK=${PEAK:-362} ;;
    *A10G*|*A10*) PEAK=${PEAK:-125} ;;
    *T4*) PEAK=${PEAK:-65} ;;
esac
echo "peak:     ${PEAK:-unknown (set PEAK_TFLOPS for MFU)} dense FP16 TFLOP/s"
if [ -n "$MODEL_GPU" ] && command -v python3 > /dev/null; then
    python3 dev/perf_model.py --gpu "$MODEL_GPU" --predict > "$PRED" 2>&1 || fail "dev/perf_model.py --predict"
    echo "predictions: python3 dev/perf_model.py --gpu $MODEL_GPU --predict ($(grep -c '^predict' "$PRED") lines in predict.txt)"
else
    echo "predictions: none (dev/perf_model.py models the H200 and the V100)"
fi
if [ -s "$FAILS" ] && [ "$HAVE_GPU" = 0 ]; then echo "(no GPU: the build still runs; the tests will fail)"; fi

# ---- 2. build
say "build: make -B gpu ${MAKE_ARGS[*]}"
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
if ! run must build 300 make -B -j"$JOBS" gpu "${MAKE_ARGS[@]}"; then
    echo "gpu_check: the build failed; nothing else to run"
    return 1
fi
cp build/ptxas-train_gpu.txt build/ptxas-train_gpu_fp32.txt "$LOG_DIR"/ 2> /dev/null || true

# ---- 3. tests: every group without the H=4096 shapes first, then the matmul group with them (the
# FP32 build's not: its SIMT matmul there is slow and buys little)
say "tests: build/test_gpu --quick"
run must "test_gpu --quick" 150 build/test_gpu --quick
say "tests: build/test_gpu --only matmul (the paper's shapes too)"
run must "test_gpu --only matmul" 90 build/test_gpu --only matmul
say "tests: build/test_gpu_fp32 --quick"
run must test_gpu_fp32 120 build/test_gpu_fp32 --quick

# ---- 4. benchmarks
if [ "$HAVE_GPU" = 0 ]; then
    fail "no GPU: no benchmarks"
    return 1
fi
S16=${BENCH_STEPS_FP16:-8}
say "benchmark: the DRAM and the L2 bandwidth, by device copies (perf_model.py's hbm_gbs x mem_eff and l2_gbs)"
run bench "bench copy" 30 build/test_gpu --bench-copy | tee -a "$BENCH"
say "benchmark: each kernel of one forward and one backward time step, timed by events (FP16)"
for B in 128 256; do
    run bench "bench kernels B=$B" 60 build/test_gpu --bench-kernels "$B" | tee -a "$BENCH"
done
say "benchmark: training step, H=4096 D=64 T=256, FP16 ($S16 timed steps after a warm-up)"
for B in 128 256 512; do
    run bench "bench FP16 B=$B" 90 build/test_gpu --bench-step "$B" "$S16" | tee -a "$BENCH"
done
say "benchmark: the same at B=128 with the time loops launched one by one (MLSTM_NO_GRAPH=1), against the graphs"
run bench "bench FP16 B=128 direct" 90 env MLSTM_NO_GRAPH=1 build/test_gpu --bench-step 128 "$S16" | tee -a "$BENCH"
say "benchmark: hand-written matmul vs cuBLASLt on the model's shapes (FP16; the per-step ones at 2, 3, 4 stages)"
for B in 128 256 512; do
    run bench "bench matmul B=$B" 90 build/test_gpu --bench-matmul "$B" | tee -a "$BENCH"
done
# the run-time switches of train.cu (doc/gpu.md, dev/gpu-perf.md), each on alone and all together, at B=256;
# the as-is run above is the off side
say "benchmark: the switches of train.cu at B=256, each on (the as-is run above is off)"
for sw in MLSTM_SPLITK MLSTM_OVERLAP MLSTM_L2 MLSTM_WARP64; do
    run bench "bench FP16 B=256 $sw=1" 90 env "$sw=1" build/test_gpu --bench-step 256 "$S16" | tee -a "$BENCH"
done
run bench "bench FP16 B=256 all-wmma" 90 env MLSTM_SPLITK=1 MLSTM_OVERLAP=1 MLSTM_L2=1 MLSTM_WARP64=1 \
    build/test_gpu --bench-step 256 "$S16" \
    | tee -a "$BENCH"
run bench "bench FP16 B=256 cublaslt" 90 build/test_gpu --matmul cublaslt --bench-step 256 "$S16" | tee -a "$BENCH"
run bench "bench FP16 B=256 all" 90 env MLSTM_SPLITK=1 MLSTM_OVERLAP=1 MLSTM_L2=1 build/test_gpu --matmul cublaslt \
    --bench-step 256 "$S16" | tee -a "$BENCH"

# ---- 5. report
say "report"
report "$LOG_DIR" "$PEAK" | tee "$REPORT"
f16=$(awk '/^bench_step/ && / precision=FP16 / && / matmul=ours / && / B=256 / && (!/ variant=/ || / variant=as-is /) { for (i = 1; i <= NF; i++) if ($i ~ /^chars_per_s=/) print substr($i, 13) }' "$BENCH" | tail -n 1)
if [ "$MODEL_GPU" = h200 ] && [ -n "$f16" ] && command -v python3 > /dev/null; then
    ms=$(awk -v c="$f16" 'BEGIN { if (c > 0) printf "%.3f", 1000 * 256 * 256 / c }')
    if [ -n "$ms" ]; then
        echo
        echo "The paper's run on H200 nodes from the measured B=256 step ($ms ms), 256 sequences per GPU:"
        python3 dev/scaling.py --predictions --cluster h200 --batch-policy per-gpu --step-ms-h200 "$ms" | tee -a "$REPORT"
    fi
fi
return 0
}

summary() {
    say "summary"
    if [ -s "$TIMEOUTS" ]; then echo "benchmarks cut short (not failures):"; sed 's/^/  /' "$TIMEOUTS"; fi
    if [ "$1" -eq 0 ]; then
        echo "gpu_check: PASS (preflight, build, test_gpu FP16 --quick and its matmul group, test_gpu_fp32 --quick)" \
             "in $(( $(date +%s) - T_START )) s; logs in $LOG_DIR"
    else
        echo "gpu_check: FAIL: $(paste -sd ';' "$FAILS")"
        echo "logs in $LOG_DIR"
    fi
}

main 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
[ -s "$FAILS" ] && rc=1
summary "$rc" 2>&1 | tee -a "$LOG"
exit "$rc"
