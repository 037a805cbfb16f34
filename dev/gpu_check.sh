#!/usr/bin/env bash
# dev/gpu_check.sh: everything a GPU can check, in one command of about 6 minutes (so that a
# rerun fits in the 15 minutes of device time a session may get).
#
#   dev/gpu_check.sh [LOG_DIR]            on a GPU machine (LOG_DIR: e.g. "$OUT")
#   dev/gpu_check.sh --report LOG_DIR     the report again, from LOG_DIR's bench.txt and predict.txt (the peak
#                                         from its nvidia-smi-q.txt, or PEAK_TFLOPS)
#
# 1. preflight (about 15 s): every probe, then one screen of what it found (GPU, driver, nvcc and
#    the host compiler, cuBLASLt, NCCL, MPI, compute-sanitizer, free disk, predictions) and the plan
#    it will run within the deadline. A driver that cannot run nvcc's binaries stops the run here,
#    with one line (CUDA's minor-version compatibility: a driver of the same major release runs
#    them, an older major does not; driver_refusal); so does no nvcc. cuBLASLt and NCCL come from
#    the toolkit or the system (the Makefile's probes), else from pip's wheels (nvidia/cublas,
#    nvidia/nccl in site-packages, linked from build/cublaslt-wheel and build/nccl-wheel, which
#    outlive the run: the binaries' rpath); without cuBLASLt the build goes on without --matmul
#    cublaslt (NO_CUBLASLT=1 forces that), without MPI NCCL is said in one line and not used;
# 2. build: make -B gpu for this GPU's architecture only (GPU_ARCHS; faster), or make gpu when
#    build/gpu_check.key shows the same make arguments built it (a second run reuses the build);
#    ptxas's register reports (build/ptxas-*.txt) copied to LOG_DIR;
# 3. tests: build/test_gpu --quick, then its matmul group in full (the paper's shapes: a
#    fatal exit there cannot hide the other groups' results), build/test_gpu_fp32 --quick
#    (the GPU against the CPU reference); then compute-sanitizer's memcheck, racecheck,
#    synccheck and initcheck on test_gpu --quick --only model (SAN_GROUP), each up to SAN_S
#    seconds, summarised in sanitizer.txt (skipped with one line when it is not found);
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
# Every command has a timeout inside one deadline (DEADLINE_S, default 340 s). A
# benchmark cut off by its timeout, or not started for lack of time, is reported as
# such and is not a failure. Exit status: 0 when the preflight's required checks, the
# build and both test programs pass, no sanitizer tool reports an error, and no benchmark
# crashed; 1 otherwise.
# LOG_DIR receives, as they are written, 8 files: gpu_check.log (everything), bench.txt (the
# bench_* lines), predict.txt (the predictions), report.md (the tables), nvidia-smi-q.txt,
# ptxas-train_gpu.txt, ptxas-train_gpu_fp32.txt (registers and spills per kernel), sanitizer.txt.
# Environment: DEADLINE_S, BUILD_S, SAN_S, SAN_GROUP, JOBS, BENCH_STEPS_FP16 (default 8),
# PEAK_TFLOPS (dense FP16 TFLOP/s for a card not in the table below), GPU_ARCHS (nvcc -gencode
# flags, instead of the detected architecture), NVCC and MPICC (as for make), NO_CUBLASLT=1,
# COMPUTE_SANITIZER (its path).
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

# card_peak NAME: the card's dense FP16 tensor-core TFLOP/s with FP32 accumulation (vendor data sheets), for
# MFU; nothing for a card not in the table
card_peak() {
    case "$1" in
        *H200*) echo 989 ;;
        *H100*PCIe*) echo 756 ;;
        *H100*) echo 989 ;;
        *A100*) echo 312 ;;
        *V100*) echo 125 ;;
        *L40S*) echo 362 ;;
        *A10G*|*A10*) echo 125 ;;
        *T4*) echo 65 ;;
    esac
}

if [ "${1:-}" = "--report" ]; then
    if [ $# -ne 2 ] || [ ! -f "$2/bench.txt" ]; then
        echo "error: --report LOG_DIR: needs LOG_DIR/bench.txt (and predict.txt) from an earlier run" >&2
        exit 2
    fi
    [ -f "$2/predict.txt" ] || : > "$2/predict.txt"
    # the card the run saw, by its nvidia-smi -q, when PEAK_TFLOPS does not say
    card=$(awk -F': *' '/^ *Product Name/ { print $2; exit }' "$2/nvidia-smi-q.txt" 2> /dev/null)
    report "$2" "${PEAK_TFLOPS:-$(card_peak "$card")}"
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
DEADLINE_S=${DEADLINE_S:-340}
BUILD_S=${BUILD_S:-240}       # the build's cap (a fresh one; a reused one takes seconds)
SAN_S=${SAN_S:-25}            # each compute-sanitizer tool's cap
SAN_GROUP=${SAN_GROUP:-model}  # the test_gpu group the sanitizer runs (a training step's every kernel)
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
# driver_refusal DRIVER DRIVER_CUDA NVCC_RELEASE: why this driver cannot run what this nvcc builds, or
# nothing when it can. CUDA's compatibility rules: a driver runs binaries of its own CUDA major release
# whatever their minor (minor-version compatibility: 13.1's binaries on a 13.0 driver; only PTX of the
# newer minor would not JIT, and the build holds SASS for the detected GPU) and of every older major,
# not of a newer major; and each major release needs its minimum driver (CUDA 12: 525.60.13, 13: 580).
# DRIVER_CUDA may be empty (not in nvidia-smi's header): then the minimum alone decides.
driver_refusal() {
    local drv=$1 drv_cuda=$2 rel=$3 major=${3%%.*} min=""
    case "$major" in 12) min=525.60.13 ;; 13) min=580 ;; esac
    if [ -n "$drv_cuda" ] && [ "${drv_cuda%%.*}" -lt "$major" ]; then
        echo "driver $drv supports CUDA $drv_cuda, nvcc is CUDA $rel: needs driver ${min:-a newer one} or newer for" \
             "CUDA $major (or NVCC= a CUDA ${drv_cuda%%.*} toolkit)"
    elif [ -n "$min" ] && ! version_ge "$drv" "$min"; then
        echo "driver $drv is older than CUDA $major's minimum: needs driver $min or newer for CUDA $major" \
             "(or NVCC= an older toolkit)"
    fi
}
# The sanitizer step (3b below): each tool on build/test_gpu --quick --only SAN_GROUP, its verdict and
# first reports in LOG_DIR/sanitizer.txt.
sanitize() {
    local out=$LOG_DIR/sanitizer.txt tool t rc n t0
    if [ -z "$SANITIZER" ]; then
        echo "compute-sanitizer: not found (on PATH, beside nvcc, or COMPUTE_SANITIZER=): the sanitizer step skipped" \
            | tee "$out"
        return 0
    fi
    say "compute-sanitizer: build/test_gpu --quick --only $SAN_GROUP under each tool (up to ${SAN_S}s each)"
    "$SANITIZER" --version 2>&1 | tail -n 1 > "$out"
    for tool in memcheck racecheck synccheck initcheck; do
        t=$(left "$SAN_S")
        if [ "$t" -lt 10 ]; then
            echo "compute-sanitizer $tool: not run (the ${DEADLINE_S}s deadline)" | tee -a "$out" "$TIMEOUTS"
            continue
        fi
        t0=$(date +%s)
        timeout -k 10 "$t" "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 20 \
            build/test_gpu --quick --only "$SAN_GROUP" > "$WORK/san-$tool.txt" 2>&1
        rc=$?
        # the tool's own count; a run cut off has none, so its reports are counted
        n=$(grep -o 'ERROR SUMMARY: [0-9]*' "$WORK/san-$tool.txt" | tail -n 1 | grep -o '[0-9]*$')
        [ -z "$n" ] && n=$(grep -E '^========= [A-Z]' "$WORK/san-$tool.txt" |
                           grep -cvE 'COMPUTE-SANITIZER|SUMMARY|Target application')
        {
            echo "== $tool: exit $rc after $(( $(date +%s) - t0 ))s, $n errors"
            grep -E '^=========' "$WORK/san-$tool.txt" | grep -v COMPUTE-SANITIZER | head -n 40
        } >> "$out"
        if [ "$n" -gt 0 ] || [ "$rc" -eq 99 ]; then
            fail "compute-sanitizer $tool: $n errors (sanitizer.txt)"
        elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            echo "compute-sanitizer $tool: cut off after ${t}s, no error before" | tee -a "$TIMEOUTS"
        elif [ "$rc" -ne 0 ]; then
            echo "compute-sanitizer $tool: no error; test_gpu exit $rc under it (its checks ran without it above)"
        else
            echo "compute-sanitizer $tool: no error"
        fi
    done
}

main() {
set -o pipefail
say "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), logs in $LOG_DIR"
git log -1 --format='commit %H %s' 2>/dev/null || true

# ---- 1. preflight: every probe first (about 15 s), then one screen of what was found and the plan
say "preflight"
missing=""
for c in make timeout awk sort find df; do command -v "$c" > /dev/null || missing="$missing $c"; done
[ -n "$missing" ] && fail "preflight: missing commands:$missing"
HAVE_GPU=0 GPU_NAME="" CC_CAP="" DRIVER="" DRIVER_CUDA="" GPU_MEM=""
if ! command -v nvidia-smi > /dev/null; then
    fail "preflight: nvidia-smi not found: no NVIDIA driver on this machine"
elif ! timeout 20 nvidia-smi > "$WORK/smi.txt" 2>&1; then
    cat "$WORK/smi.txt"
    fail "preflight: nvidia-smi fails (no driver loaded, or no GPU)"
else
    HAVE_GPU=1
    timeout 20 nvidia-smi -q > "$LOG_DIR/nvidia-smi-q.txt" 2>&1 || true
    IFS=, read -r GPU_NAME DRIVER CC_CAP GPU_MEM < <(timeout 20 nvidia-smi \
        --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
    GPU_NAME=$(echo "$GPU_NAME" | xargs); DRIVER=$(echo "$DRIVER" | xargs)
    CC_CAP=$(echo "$CC_CAP" | xargs); GPU_MEM=$(echo "$GPU_MEM" | xargs)
    DRIVER_CUDA=$(grep -o 'CUDA Version: *[0-9.]*' "$WORK/smi.txt" | grep -o '[0-9.]*$' | head -n 1)
fi
NVCC=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)}
NVCC_REL=""
[ -n "$NVCC" ] && NVCC_REL=$("$NVCC" --version 2>/dev/null | grep -o 'release [0-9.]*' | grep -o '[0-9.]*$')
# A driver the toolkit cannot use: every binary would fail with cudaErrorInsufficientDriver
# (R550/R570 are common on H200 fleets; CUDA 13 needs R580). Nothing else is worth running: stop
# here, with one line saying what is needed.
need=""
if [ -z "$NVCC_REL" ]; then
    fail "preflight: no working nvcc (install the CUDA toolkit, or NVCC=/path/to/nvcc)"
elif [ -n "$DRIVER" ]; then
    need=$(driver_refusal "$DRIVER" "${DRIVER_CUDA:-}" "$NVCC_REL")
fi
if [ -n "$need" ]; then
    need="preflight: $need; nothing built or run"
    echo "$need" >> "$FAILS"
    echo "gpu_check: STOP: $need"
    return 1
fi
HOSTCXX=$(command -v g++ || command -v c++ || true)
HOSTCXX_OK=""
if [ -n "$NVCC_REL" ]; then
    printf '__global__ void k(float *x) { x[threadIdx.x] = 1.f; }\nint main() { return 0; }\n' > "$WORK/probe.cu"
    if "$NVCC" -c "$WORK/probe.cu" -o "$WORK/probe.o" > "$WORK/probe.txt" 2>&1; then HOSTCXX_OK=yes
    else
        cat "$WORK/probe.txt"
        fail "preflight: nvcc cannot compile with this host compiler" \
             "(an unsupported g++ version? NVCC=\"nvcc -ccbin g++-N\")"
    fi
fi
MPICC=${MPICC-$(command -v mpicc || true)}  # (MPICC= in the environment: no MPI, for make too)

# NCCL and cuBLASLt: where the Makefile's probes find them (the toolkit, the system), else pip's wheels
# (nvidia-nccl-cu12/13: site-packages/nvidia/nccl; nvidia-cublas-cu12/13: site-packages/nvidia/cublas),
# each linked from a directory in build/ (the binaries' rpath points there, so it outlives the run).
# train.cu uses NCCL only with MPI (one process per GPU), and cuBLASLt only for --matmul cublaslt:
# without either the build goes on, and says so. NO_CUBLASLT=1 in the environment builds without
# cuBLASLt, as on an image that has none (the dry run of dev/README.md).
MAKE_ARGS=()
site_dirs() {
    command -v python3 > /dev/null &&
        python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null
}
# wheel_link NAME LIB DEST: DEST/include -> the wheel's, DEST/lib/libLIB.so and its soname -> the wheel's
# libLIB.so.N (a wheel ships no unversioned library for the linker); prints the wheel's directory
wheel_link() {
    local sp w lib
    for sp in $(site_dirs); do
        w=$sp/nvidia/$1
        lib=$(find "$w/lib" -maxdepth 1 -name "lib$2.so.*" 2>/dev/null | sort | head -n 1)
        if [ -d "$w/include" ] && [ -n "$lib" ]; then
            mkdir -p "$3/lib"
            ln -sfn "$w/include" "$3/include"
            ln -sf "$lib" "$3/lib/lib$2.so"
            ln -sf "$lib" "$3/lib/$(basename "$lib")"
            echo "$w"
            return 0
        fi
    done
    return 1
}
make -s probe > "$WORK/probe-make.txt" 2>&1
NCCL_WHERE="" LT_WHERE="" LT_OK=0
if grep -q '^NCCL: yes' "$WORK/probe-make.txt"; then NCCL_WHERE="system (the Makefile's probe)"
elif [ -n "$MPICC" ] && w=$(wheel_link nccl nccl "$PWD/build/nccl-wheel"); then
    NCCL_WHERE="$w (pip's wheel)"; MAKE_ARGS+=("NCCL_HOME=$PWD/build/nccl-wheel")
elif [ -z "$MPICC" ]; then
    for sp in $(site_dirs); do [ -f "$sp/nvidia/nccl/include/nccl.h" ] && NCCL_WHERE=$sp/nvidia/nccl && break; done
fi
if grep -q '^cuBLASLt: yes' "$WORK/probe-make.txt"; then LT_WHERE="the toolkit's (the Makefile's probe)" LT_OK=1
elif [ "${NO_CUBLASLT:-}" != 1 ] && w=$(wheel_link cublas cublasLt "$PWD/build/cublaslt-wheel"); then
    if make -s probe CUBLASLT_HOME="$PWD/build/cublaslt-wheel" 2>/dev/null | grep -q '^cuBLASLt: yes'; then
        LT_WHERE="$w (pip's wheel)" LT_OK=1; MAKE_ARGS+=("CUBLASLT_HOME=$PWD/build/cublaslt-wheel")
    else LT_WHERE="none: pip's wheel at $w does not build (nvcc: cublasLt.h and libcublasLt)"; fi
fi
if [ -n "${GPU_ARCHS:-}" ]; then
    MAKE_ARGS+=("GPU_ARCHS=$GPU_ARCHS")
elif [ -n "$CC_CAP" ]; then
    arch=${CC_CAP/./}
    MAKE_ARGS+=("GPU_ARCHS=-gencode arch=compute_$arch,code=sm_$arch")
fi
SANITIZER=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}
if [ -z "$SANITIZER" ] && [ -n "$NVCC" ]; then
    for s in "$(dirname "$NVCC")/compute-sanitizer" "$(dirname "$NVCC")/../compute-sanitizer/compute-sanitizer"; do
        [ -x "$s" ] && SANITIZER=$s && break
    done
fi
FREE_GB=$(df -Pk . 2>/dev/null | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }')
# a fresh build needs about 1 GB (four binaries, their objects and nvcc's temporaries)
if [ -n "$FREE_GB" ] && awk -v f="$FREE_GB" 'BEGIN { exit !(f < 1) }'; then
    fail "preflight: $FREE_GB GB free on $(df -P . | awk 'NR == 2 { print $6 }'): a build needs about 1 GB"
fi
# a build of the same sources with the same make arguments is reused (a second run skips it): the key
# written after this script's build, no binary rebuilt since (a make by hand may have used other flags)
BUILD_KEY="nvcc $NVCC $NVCC_REL; make ${MAKE_ARGS[*]}; NO_CUBLASLT=${NO_CUBLASLT:-}; MPICC=$MPICC"
REUSE=0
if [ -f build/gpu_check.key ] && [ "$(cat build/gpu_check.key)" = "$BUILD_KEY" ] &&
   [ -s build/ptxas-train_gpu.txt ]; then
    REUSE=1
    for b in train_gpu train_gpu_fp32 build/test_gpu build/test_gpu_fp32; do
        [ -x "$b" ] && ! [ "$b" -nt build/gpu_check.key ] || REUSE=0  # (same tick as the key: not newer)
    done
fi

PEAK=${PEAK_TFLOPS:-$(card_peak "$GPU_NAME")}
MODEL_GPU=""
case "$GPU_NAME" in *H200*) MODEL_GPU=h200 ;; *V100*) MODEL_GPU=v100 ;; esac
PRED_SAID="none (dev/perf_model.py models the H200 and the V100)"
if [ -n "$MODEL_GPU" ] && command -v python3 > /dev/null; then
    python3 dev/perf_model.py --gpu "$MODEL_GPU" --predict > "$PRED" 2>&1 || fail "dev/perf_model.py --predict"
    PRED_SAID="$(grep -c '^predict' "$PRED") lines in predict.txt (dev/perf_model.py --gpu $MODEL_GPU --predict)"
fi

say "found"
runs=""; [ -n "$DRIVER" ] && [ -n "$NVCC_REL" ] && runs=": runs CUDA $NVCC_REL binaries"
hostcxx_said=${HOSTCXX:-none}
[ -n "$HOSTCXX" ] && hostcxx_said="$HOSTCXX ($("$HOSTCXX" --version | head -n 1))${HOSTCXX_OK:+, accepted}"
lt_none=""; [ "${NO_CUBLASLT:-}" = 1 ] && lt_none=" (NO_CUBLASLT=1)"
py_said="none: no predictions"; command -v python3 > /dev/null && py_said=$(python3 --version 2>&1)
echo "GPU:               ${GPU_NAME:-none} (compute capability ${CC_CAP:-?}, ${GPU_MEM:-? MiB})"
echo "driver:            ${DRIVER:-none}, CUDA ${DRIVER_CUDA:-?}$runs"
echo "nvcc:              ${NVCC:-none}${NVCC_REL:+ (CUDA $NVCC_REL)}; host C++ $hostcxx_said"
if [ "$LT_OK" = 1 ]; then echo "cuBLASLt:          $LT_WHERE"
else echo "cuBLASLt:          ${LT_WHERE:-none}$lt_none: built without it (its benchmarks not run)"; fi
if [ -z "$NCCL_WHERE" ]; then echo "NCCL:              not found (single-process build)"
elif [ -z "$MPICC" ]; then echo "NCCL:              $NCCL_WHERE, not used: no MPI (mpicc), so the build is single-process"
else echo "NCCL:              $NCCL_WHERE"; fi
echo "MPI:               ${MPICC:-none: the GPU build is single-process (multi-GPU needs MPI and NCCL)}"
echo "compute-sanitizer: ${SANITIZER:-not found: the sanitizer step is skipped}"
echo "free disk:         ${FREE_GB:-?} GB in $PWD"
echo "python3:           $py_said; predictions: $PRED_SAID"
echo "peak:              ${PEAK:-unknown (set PEAK_TFLOPS for MFU)} dense FP16 TFLOP/s"
echo "plan (each step capped, all within DEADLINE_S=${DEADLINE_S}s; a benchmark cut off is noted, not failed):"
if [ "$REUSE" = 1 ]; then echo "  build      make gpu: reused (build/gpu_check.key), up to ${BUILD_S}s ${MAKE_ARGS[*]}"
else echo "  build      make -B gpu, up to ${BUILD_S}s ${MAKE_ARGS[*]}"; fi
echo "  tests      test_gpu --quick (150s), test_gpu --only matmul (90s), test_gpu_fp32 --quick (120s)"
if [ -n "$SANITIZER" ]; then
    echo "  sanitizer  memcheck, racecheck, synccheck, initcheck on test_gpu --quick --only $SAN_GROUP, ${SAN_S}s each"
else echo "  sanitizer  skipped (no compute-sanitizer)"; fi
echo "  benchmarks copies, kernels (B=128, 256), steps (B=128, 256, 512; direct; 6 switch runs),"
echo "             matmul (B=128, 256, 512)"
echo "  report     $REPORT and the H200 scaling"
if [ -s "$FAILS" ] && [ "$HAVE_GPU" = 0 ]; then echo "(no GPU: the build still runs; the tests will fail)"; fi

# ---- 2. build (make works out what is stale when the key matches; -B otherwise)
say "build: make $([ "$REUSE" = 1 ] || echo "-B ")gpu ${MAKE_ARGS[*]}"
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
rm -f build/gpu_check.key
if ! run must build "$BUILD_S" make $([ "$REUSE" = 1 ] || echo -B) -j"$JOBS" gpu "${MAKE_ARGS[@]}"; then
    echo "gpu_check: the build failed; nothing else to run"
    return 1
fi
echo "$BUILD_KEY" > build/gpu_check.key
cp build/ptxas-train_gpu.txt build/ptxas-train_gpu_fp32.txt "$LOG_DIR"/ 2> /dev/null || true

# ---- 3. tests: every group without the H=4096 shapes first, then the matmul group with them (the
# FP32 build's not: its SIMT matmul there is slow and buys little)
say "tests: build/test_gpu --quick"
run must "test_gpu --quick" 150 build/test_gpu --quick
say "tests: build/test_gpu --only matmul (the paper's shapes too)"
run must "test_gpu --only matmul" 90 build/test_gpu --only matmul
say "tests: build/test_gpu_fp32 --quick"
run must test_gpu_fp32 120 build/test_gpu_fp32 --quick

# ---- 3b. compute-sanitizer: what the CPU layer cannot see (it runs a grid's blocks one after another):
# races in shared memory between a block's threads (racecheck), out-of-bounds and misaligned accesses
# (memcheck), barriers a thread misses (synccheck), reads of memory never written (initcheck). One short
# group (a training step's every kernel: the model group, --quick), each tool capped at SAN_S; what they
# say is summarised in sanitizer.txt. A tool's errors fail the check; a tool cut off by its cap does not.
sanitize

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
if [ "$LT_OK" = 1 ]; then
    run bench "bench FP16 B=256 cublaslt" 90 build/test_gpu --matmul cublaslt --bench-step 256 "$S16" | tee -a "$BENCH"
    run bench "bench FP16 B=256 all" 90 env MLSTM_SPLITK=1 MLSTM_OVERLAP=1 MLSTM_L2=1 build/test_gpu --matmul cublaslt \
        --bench-step 256 "$S16" | tee -a "$BENCH"
else
    echo "bench FP16 B=256 cublaslt, all: not run (built without cuBLASLt)" | tee -a "$TIMEOUTS"
fi

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
    if [ -s "$TIMEOUTS" ]; then echo "cut short or not run (not failures):"; sed 's/^/  /' "$TIMEOUTS"; fi
    if [ "$1" -eq 0 ]; then
        echo "gpu_check: PASS (preflight, build, test_gpu FP16 --quick and its matmul group, test_gpu_fp32 --quick," \
             "compute-sanitizer's tools that ran)" \
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
