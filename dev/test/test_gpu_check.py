#!/usr/bin/env python3
"""test_gpu_check.py: dev/gpu_check.sh's bookkeeping, without a GPU. The script runs in a
scratch copy of the tools with stand-ins for nvidia-smi, nvcc, make and the test programs
on PATH, so what is checked is the script's own logic:
  1. a benchmark cut off by the deadline is reported as timed out, the ones after it as not
     run, and neither is a failure (exit 0): a slow benchmark cannot take the tests' results with it;
  2. a benchmark that crashes, or a failing test program, is a failure (exit 1);
  3. a driver of an older CUDA major release than nvcc's, or below the major's minimum, stops the run
     first, with one line, before any build or test; one of the same major and an older minor runs
     (CUDA's minor-version compatibility; driver_refusal);
  4. the logs are in LOG_DIR, written as the run goes (8 files: nvidia-smi -q, ptxas's reports and
     the sanitizer's summary too); the report says what was not exercised (NCCL with two ranks, the
     GPU_DEBUG build);
  5. test_gpu runs --quick first, then its matmul group in full; then compute-sanitizer's four tools
     on a short group: a tool's error fails the run, a missing compute-sanitizer is one line;
  6. NCCL and cuBLASLt from pip's wheels: linked from build/nccl-wheel and build/cublaslt-wheel, which
     outlive the run (the binaries' rpath); NCCL without mpicc said in one line (single-process) and
     not linked; no cuBLASLt anywhere: the build goes on without it, its benchmarks not run;
  7. the paper's run on H200 nodes from the measured step: dev/scaling.py's H200 tables alone;
  8. the preflight prints what it found and the plan before the build; the default deadline is within
     6 minutes; a second run with the same make arguments reuses the build (make without -B);
  9. each committed run under dev/gpu_runs: --report makes its report.md again byte for byte, dev/RESULTS.md's
     GPU tables are that report's, and the test programs' summaries its README states are in its log.
Ends with 'test_gpu_check: N passed, N failed'."""
import lzma
import os
import shutil
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test"))  # (harness.py)
sys.path.insert(0, os.path.join(ROOT, "dev"))
import perf_model  # noqa: E402  (the predictions the report puts beside the measurements)
from harness import check, summary  # noqa: E402


def script(path, text):
    with open(path, "w") as f:
        f.write("#!/usr/bin/env bash\n" + text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


# The stand-ins. The test program prints bench lines in test_gpu.cu's formats; FAKE
# (environment) picks the misbehaviour: slow512 (B=512 sleeps past the deadline),
# crash (--bench-matmul 256 exits 3), failtest (the test run fails).
FAKE_TEST = r'''
echo "$0 $*" >> "$FAKE_BIN/../test_calls"
case "$1" in
  --bench-step)
    [ "$2" = 512 ] && [ "$FAKE" = slow512 ] && exec sleep 60
    p=FP16; case "$0" in *fp32) p=FP32 ;; esac
    m=ours; c=$(( $2 * 256 * 10 )); [ "${MLSTM_NO_GRAPH:-0}" = 1 ] && m=ours-direct && c=$(( $2 * 256 * 8 ))
    v=as-is; [ "${MLSTM_SPLITK:-0}" = 1 ] && v=splitk && c=$(( $2 * 256 * 12 )); [ "${MLSTM_L2:-0}" = 1 ] && v=l2
    [ "${MLSTM_OVERLAP:-0}" = 1 ] && v=overlap; [ "${MLSTM_WARP64:-0}" = 1 ] && v=warp64
    [ "${MLSTM_SPLITK:-0}${MLSTM_OVERLAP:-0}${MLSTM_L2:-0}${MLSTM_WARP64:-0}" = 1111 ] && v=all-wmma
    echo "bench_step precision=$p matmul=$m variant=$v B=$2 T=256 H=4096 steps=$3 seconds=1.000 chars_per_s=$c tflops=1.00 skipped=0" ;;
  --matmul)
    v=cublaslt; [ "${MLSTM_SPLITK:-0}${MLSTM_OVERLAP:-0}${MLSTM_L2:-0}" = 111 ] && v=all
    echo "bench_step precision=FP16 matmul=cublaslt variant=$v B=$4 T=256 H=4096 steps=$5 seconds=1.000 chars_per_s=$(( $4 * 256 * 25 )) tflops=2.50 skipped=0" ;;
  --bench-matmul)
    [ "$2" = 256 ] && [ "$FAKE" = crash ] && exit 3
    for st in 3 2 4; do
      echo "bench_matmul dm         NN dY.W   M=$2    N=4096   K=16384  wmma64  stages=$st | ours    0.200 ms    85.9 TFLOP/s | cuBLASLt    0.100 ms   171.8 TFLOP/s | ours/cuBLASLt  50.0%"
    done ;;
  --bench-kernels)
    echo "bench_kernel precision=FP16 B=$2 T=256 H=4096 what=dm plan=wmma64 us=300.00" ;;
  --bench-copy)
    echo "bench_copy what=dram bytes=1073741824 reps=200 us=500.00 gbs=4295"
    echo "bench_copy what=l2_slope bytes=7864320 reps=200 us=2.50 gbs=6291" ;;
  *)
    [ "$FAKE" = failtest ] && { echo "test_gpu: 0 passed, 1 failed"; exit 1; }
    echo "test_gpu: 5 passed, 0 failed" ;;
esac
'''
FAKE_MAKE = r'''
echo "$*" >> "$FAKE_BIN/../make_calls"
if [ "$1" = -s ] && [ "$2" = probe ]; then
  echo "NCCL: no"
  case "$*" in *CUBLASLT_HOME=*) echo "cuBLASLt: yes" ;; *) echo "cuBLASLt: ${FAKE_LT:-yes}" ;; esac
  exit 0
fi
mkdir -p build
cp "$FAKE_BIN/test_prog" build/test_gpu && cp "$FAKE_BIN/test_prog" build/test_gpu_fp32
cp "$FAKE_BIN/test_prog" train_gpu && cp "$FAKE_BIN/test_prog" train_gpu_fp32
echo "ptxas info    : Used 122 registers" > build/ptxas-train_gpu.txt
echo "ptxas info    : Used 64 registers" > build/ptxas-train_gpu_fp32.txt
echo "GPU build: (stand-in) $*"
'''
FAKE_SMI = r'''
case "$*" in
  *name,driver_version,compute_cap,memory.total*) echo "NVIDIA H200, ${FAKE_DRIVER:-580.159.04}, 9.0, 143771 MiB" ;;
  *name*) echo "NVIDIA H200" ;;
  *driver_version*) echo "${FAKE_DRIVER:-580.159.04}" ;;
  *compute_cap*) echo "9.0" ;;
  -q) echo "==============NVSMI LOG==============" ;;
  *) echo "| NVIDIA-SMI ${FAKE_DRIVER:-580.159.04}   Driver Version: ${FAKE_DRIVER:-580.159.04}   CUDA Version: ${FAKE_DRIVER_CUDA:-13.0} |" ;;
esac
'''
FAKE_NVCC = r'''
if [ "$1" = --version ]; then echo "Cuda compilation tools, release ${FAKE_NVCC_REL:-13.0}, V13.0.48"; exit 0; fi
for a in "$@"; do case "$prev" in -o) : > "$a" ;; esac; prev=$a; done
'''
# compute-sanitizer: no error, or (FAKE=racy) one race under racecheck, exit 99 (--error-exitcode)
FAKE_SANITIZER = r'''
echo "$*" >> "$FAKE_BIN/../sanitizer_calls"
[ "$1" = --version ] && { echo "Copyright (c) 2020-2025 NVIDIA Corporation"; echo "Version 2025.3.0"; exit 0; }
echo "========= COMPUTE-SANITIZER"
if [ "$FAKE" = racy ] && [ "$2" = racecheck ]; then
  echo "========= Error: Race reported between Write access at matmul_wmma_kernel+0x1a0"
  echo "=========     and Read access at matmul_wmma_kernel+0x2c0 [128 hazards]"
  echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"
  echo "========= ERROR SUMMARY: 1 error"; exit 99
fi
echo "========= ERROR SUMMARY: 0 errors"
'''


def run_check(tmp, fake, deadline, extra_env=None):
    repo = os.path.join(tmp, "repo")
    log = os.path.join(tmp, "out-" + fake)
    env = dict(os.environ, PATH=os.path.join(tmp, "bin") + ":" + os.environ["PATH"], FAKE=fake,
               FAKE_BIN=os.path.join(tmp, "bin"), DEADLINE_S=str(deadline), NVCC=os.path.join(tmp, "bin", "nvcc"),
               BENCH_STEPS_FP16="2", BENCH_STEPS_FP32="1")
    if deadline is None:
        env.pop("DEADLINE_S")
    for k in ("GPU_ARCHS", "COMPUTE_SANITIZER", "NO_CUBLASLT", "SAN_GROUP", "SAN_S", "BUILD_S"):
        env.pop(k, None)
    env.pop("PEAK_TFLOPS", None)
    env.update(extra_env or {})
    r = subprocess.run(["bash", os.path.join(repo, "dev", "gpu_check.sh"), log], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=120)
    return r, log


with tempfile.TemporaryDirectory() as tmp:
    os.makedirs(os.path.join(tmp, "repo", "dev"))
    os.makedirs(os.path.join(tmp, "bin"))
    for t in ("gpu_check.sh", "perf_model.py", "scaling.py"):
        shutil.copy(os.path.join(ROOT, "dev", t), os.path.join(tmp, "repo", "dev", t))
    for f in ("train.cu", "train_switches.cu"):  # (perf_model.py reads their constants)
        shutil.copy(os.path.join(ROOT, f), os.path.join(tmp, "repo", f))
    script(os.path.join(tmp, "bin", "test_prog"), FAKE_TEST)
    script(os.path.join(tmp, "bin", "make"), FAKE_MAKE)
    script(os.path.join(tmp, "bin", "nvidia-smi"), FAKE_SMI)
    script(os.path.join(tmp, "bin", "nvcc"), FAKE_NVCC)
    script(os.path.join(tmp, "bin", "compute-sanitizer"), FAKE_SANITIZER)

    # 1. B=512 runs past the deadline: timed out, later benchmarks not run, exit 0
    r, log = run_check(tmp, "slow512", 20)
    out = r.stdout
    check(r.returncode == 0 and "gpu_check: PASS" in out, "benchmark past the deadline: exit 0, PASS (exit %d)" % r.returncode)
    check("bench FP16 B=512: timed out after" in out and "cut short or not run (not failures)" in out,
          "the timed-out benchmark is reported as timed out")
    check("bench matmul B=128: not run" in out and "FAILED" not in out, "later benchmarks: not run, not failed")
    g = perf_model.GPUS["h200"]
    p128 = perf_model.summarize(perf_model.step_kernels(g, 128), 128, 256, g)["t_ms"]
    row = "| FP16 | ours | as-is | 128 | 327680 | 100.0 | %.1f |" % p128
    check(row in out, "the report puts the B=128 step beside its prediction: %s" % row)
    files = sorted(os.listdir(log)) if os.path.isdir(log) else []
    check(files == ["bench.txt", "gpu_check.log", "nvidia-smi-q.txt", "predict.txt", "ptxas-train_gpu.txt",
                    "ptxas-train_gpu_fp32.txt", "report.md", "sanitizer.txt"],
          "LOG_DIR holds %s (at most 8 come back from a GPU run)" % files)
    with open(os.path.join(log, "gpu_check.log")) as f:
        check("gpu_check: PASS" in f.read(), "gpu_check.log ends with the summary")
    check("GPU_ARCHS=-gencode arch=compute_90,code=sm_90" in out, "builds for the detected architecture only")

    # 2. a crashing benchmark, a failing test: exit 1, named
    if os.path.exists(os.path.join(tmp, "test_calls")):
        os.remove(os.path.join(tmp, "test_calls"))
    r, log = run_check(tmp, "crash", 300)
    check(r.returncode == 1 and "bench matmul B=256 (exit 3)" in r.stdout, "a crashing benchmark is a failure (exit %d)" % r.returncode)
    # the run is trimmed to about 6 minutes: no FP32 step runs, test_gpu_fp32 --quick
    calls = open(os.path.join(tmp, "test_calls")).read()
    check("| FP16 | cublaslt | cublaslt | 256 |" in r.stdout and "Not measured: the FP32 SIMT and cuBLASLt-FP32 step runs" in r.stdout
          and "test_gpu_fp32 --quick" in calls and "test_gpu_fp32 --bench-step" not in calls
          and "test_gpu_fp32 --matmul" not in calls,
          "the other benchmarks still run and are reported; no FP32 step runs, test_gpu_fp32 --quick")
    runs = [ln.split(" ", 1)[1] for ln in calls.splitlines() if ln.split(" ", 1)[0].endswith("build/test_gpu")]
    check(runs[:2] == ["--quick", "--only matmul"],
          "test_gpu runs --quick first, then its matmul group in full (the paper's shapes): %s" % runs[:2])
    check("| DRAM (a copy between 1 GiB buffers; model: hbm_gbs x mem_eff) | 4295 | 4320 | 0.99 |" in r.stdout
          and "| L2 (two copies within L2, their difference; model: l2_gbs, range 5500-10000) | 6291 | 7500 | 0.84 |"
          in r.stdout, "the report sets the measured DRAM and L2 bandwidths beside the model's constants")
    check("| 128 | dm | wmma64 | 300.0 |" in r.stdout and "| 256 | dm | wmma64 | 300.0 |" in r.stdout
          and "| dm 128 x 4096 x 16384 | 0.200 | 0.200 | 0.200 |" in r.stdout,
          "the kernels of a time step (B=128, 256) and the per-step products at three depths are reported")
    # each switch on at B=256, against the as-is run; the stand-in's split-K runs at 12/10 of the rate
    psplit = next(float(ln.split("step_ms=")[1].split()[0]) for ln in open(os.path.join(log, "predict.txt"))
                  if ln.startswith("predict_variant") and " B=256 " in ln and "variant=splitk " in ln)
    p256 = perf_model.summarize(perf_model.step_kernels(g, 256), 256, 256, g)["t_ms"]
    check("| splitk | 100.0 | 83.3 | 0.83 | %.2f |" % (round(psplit, 2) / round(p256, 2)) in r.stdout
          and "| l2 | 100.0 | 100.0 | 1.00 |" in r.stdout and "| warp64 | 100.0 | 100.0 | 1.00 |" in r.stdout and "| cublaslt (cublaslt) | 100.0 | 40.0 | 0.40 |" in r.stdout
          and "| all (cublaslt) | 100.0 | 40.0 | 0.40 |" in r.stdout and "| all-wmma | 100.0 | 83.3 | 0.83 |" in r.stdout,
          "each switch on at B=256 beside off, measured and predicted")
    # the stand-in runs the direct launches (MLSTM_NO_GRAPH=1) at 8/10 of the graphs' rate
    check("| FP16 | ours-direct | as-is | 128 |" in r.stdout
          and "CUDA graphs / direct launches of the time loops, FP16 B=128 (chars/s): 1.25" in r.stdout,
          "the step without graphs is timed and set against the graphs (1.25)")
    # the paper's run on H200 nodes from the measured step: scaling.py's H200 tables alone (--predictions),
    # not its paper check (DGX-1V), which dev/scaling.md shows
    head = "The paper's run on H200 nodes from the measured B=256 step (%.3f ms)" % (1000 * 256 * 256 / (256 * 256 * 10))
    after = r.stdout.split(head, 1)[1].splitlines()[1:] if head in r.stdout else []
    check(after[:1] and after[0].startswith("DGX H200 (8 H200") and not any("DGX-1V" in ln or "vs paper" in ln
                                                                         for ln in after),
          "the report's H200 scaling: scaling.py's H200 tables alone (%s)" % (after[:1] or "no such section"))
    r, log = run_check(tmp, "failtest", 300)
    check(r.returncode == 1 and "test_gpu --quick (exit 1)" in r.stdout, "a failing test program fails the check")

    with open(os.path.join(log, "report.md")) as f:
        rep = f.read()
    check("NCCL (two ranks): not exercised" in rep and "duplicate-device" in rep
          and "GPU_DEBUG build (every launch waited for and checked, no graphs): not built or run" in rep,
          "the report says NCCL (two ranks) and the GPU_DEBUG build were not exercised")

    # 3. a driver older than the toolkit (R550/R570 under CUDA 13): one line saying what is needed,
    # then nothing: no build, no test program, no benchmark
    for drv, drv_cuda in (("550.54.15", "12.4"), ("570.86.10", "12.8")):
        for f in ("make_calls", "test_calls"):
            if os.path.exists(os.path.join(tmp, f)):
                os.remove(os.path.join(tmp, f))
        r, log = run_check(tmp, "none", 300, dict(FAKE_DRIVER=drv, FAKE_DRIVER_CUDA=drv_cuda))
        stops = [ln for ln in r.stdout.splitlines() if ln.startswith("gpu_check: STOP:")]
        want = "driver %s supports CUDA %s, nvcc is CUDA 13.0: needs driver 580 or newer" % (drv, drv_cuda)
        check(r.returncode == 1 and len(stops) == 1 and want in stops[0],
              "driver %s (CUDA %s) under nvcc 13.0: exit %d, one STOP line: %s" % (drv, drv_cuda, r.returncode, stops))
        ran = [f for f in ("make_calls", "test_calls") if os.path.exists(os.path.join(tmp, f))]
        check(not ran and "==== build" not in r.stdout and "==== tests" not in r.stdout,
              "driver %s: it stops before the build: no make, no test program (%s)" % (drv, ran or "none ran"))

    # minor-version compatibility: a driver of nvcc's major release and an older minor runs its binaries
    # (13.1's on a 13.0 driver; 12.8's on R550, CUDA 12.4); an older major, or below the major's minimum,
    # does not (11.8's R520 under nvcc 12.4)
    for drv, drv_cuda, rel, runs in (("580.65.06", "13.0", "13.1", True), ("550.54.15", "12.4", "12.8", True),
                                      ("520.61.05", "11.8", "12.4", False), ("580.65.06", "13.0", "12.8", True)):
        r, log = run_check(tmp, "none", 300, dict(FAKE_DRIVER=drv, FAKE_DRIVER_CUDA=drv_cuda, FAKE_NVCC_REL=rel))
        stops = [ln for ln in r.stdout.splitlines() if ln.startswith("gpu_check: STOP:")]
        if runs:
            check(r.returncode == 0 and not stops and "runs CUDA %s binaries" % rel in r.stdout,
                  "driver %s (CUDA %s) under nvcc %s: runs (exit %d)" % (drv, drv_cuda, rel, r.returncode))
        else:
            check(r.returncode == 1 and len(stops) == 1 and "needs driver 525.60.13 or newer for CUDA 12" in stops[0],
                  "driver %s (CUDA %s) under nvcc %s: one STOP line: %s" % (drv, drv_cuda, rel, stops))

    # no cuBLASLt (no wheel either): the build goes on without it, one line says so, the two cuBLASLt
    # step benchmarks are not run (not failed)
    for f in ("make_calls", "test_calls"):
        if os.path.exists(os.path.join(tmp, f)):
            os.remove(os.path.join(tmp, f))
    r, log = run_check(tmp, "none", 300, dict(FAKE_LT="no"))
    calls = open(os.path.join(tmp, "test_calls")).read()
    lt_line = [ln for ln in r.stdout.splitlines() if ln.startswith("cuBLASLt:")]
    check(r.returncode == 0 and lt_line and "none: built without it" in lt_line[0]
          and "bench FP16 B=256 cublaslt, all: not run (built without cuBLASLt)" in r.stdout
          and "--matmul cublaslt" not in calls and "test_gpu --quick" in calls,
          "no cuBLASLt: built and tested without it, its benchmarks not run (exit %d): %s" % (r.returncode, lt_line))

    # compute-sanitizer: four tools on test_gpu --quick --only model; a race fails the run and is shown
    if os.path.exists(os.path.join(tmp, "sanitizer_calls")):
        os.remove(os.path.join(tmp, "sanitizer_calls"))
    r, log = run_check(tmp, "racy", 300)
    calls = [ln for ln in open(os.path.join(tmp, "sanitizer_calls")).read().splitlines() if "--tool" in ln]
    tools = [ln.split()[1] for ln in calls]
    with open(os.path.join(log, "sanitizer.txt")) as f:
        san = f.read()
    check(tools == ["memcheck", "racecheck", "synccheck", "initcheck"]
          and all(ln.endswith("build/test_gpu --quick --only model") for ln in calls),
          "compute-sanitizer runs its four tools on test_gpu --quick --only model: %s" % tools)
    check(r.returncode == 1 and "compute-sanitizer racecheck: 1 errors (sanitizer.txt)" in r.stdout
          and "== racecheck: exit 99" in san and "Race reported between Write access" in san
          and "== memcheck: exit 0 after" in san and "compute-sanitizer memcheck: no error" in r.stdout,
          "a race under racecheck fails the run; sanitizer.txt holds each tool's verdict and the race (exit %d)"
          % r.returncode)
    san_bin = os.path.join(tmp, "bin", "compute-sanitizer")
    os.rename(san_bin, san_bin + ".hidden")
    r, log = run_check(tmp, "none", 300)
    os.rename(san_bin + ".hidden", san_bin)
    with open(os.path.join(log, "sanitizer.txt")) as f:
        san = f.read()
    check(r.returncode == 0 and "compute-sanitizer: not found" in san and "compute-sanitizer: not found" in r.stdout,
          "no compute-sanitizer: one line says the step is skipped, in the log and sanitizer.txt (exit %d)"
          % r.returncode)

    # the preflight: what it found and the plan, before the build; the default deadline within 6 minutes;
    # a second run with the same make arguments reuses the build
    if os.path.exists(os.path.join(tmp, "make_calls")):
        os.remove(os.path.join(tmp, "make_calls"))
    if os.path.exists(os.path.join(tmp, "repo", "build", "gpu_check.key")):
        os.remove(os.path.join(tmp, "repo", "build", "gpu_check.key"))
    r1, _ = run_check(tmp, "none", None)
    r2, _ = run_check(tmp, "none", None)
    builds = [ln for ln in open(os.path.join(tmp, "make_calls")).read().splitlines() if " gpu" in ln]
    found = r1.stdout.split("==== found", 1)[1].split("==== build", 1)[0] if "==== found" in r1.stdout else ""
    keys = ("GPU:", "driver:", "nvcc:", "cuBLASLt:", "NCCL:", "MPI:", "compute-sanitizer:", "free disk:", "plan ")
    check(found and all(("\n" + k) in found for k in keys) and len(found.splitlines()) <= 24,
          "the preflight prints, before the build and in one screen, %s" % ", ".join(k.strip(": ") for k in keys))
    check("DEADLINE_S=340s" in r1.stdout, "the default deadline leaves the report and summary inside 6 minutes")
    check(len(builds) == 2 and builds[0].startswith("-B ") and not builds[1].startswith("-B ")
          and "make gpu: reused (build/gpu_check.key)" in r2.stdout,
          "a second run reuses the build (make gpu, not make -B gpu): %s" % builds)

    # cuBLASLt only as pip's wheel (nvidia-cublas-cu12/13): linked from build/cublaslt-wheel
    ver = "python%d.%d" % sys.version_info[:2]
    ltw = os.path.join(tmp, "userbase", "lib", ver, "site-packages", "nvidia", "cublas")
    os.makedirs(os.path.join(ltw, "include"))
    os.makedirs(os.path.join(ltw, "lib"))
    open(os.path.join(ltw, "include", "cublasLt.h"), "w").close()
    open(os.path.join(ltw, "lib", "libcublasLt.so.13"), "w").close()
    if os.path.exists(os.path.join(tmp, "make_calls")):
        os.remove(os.path.join(tmp, "make_calls"))
    r, log = run_check(tmp, "none", 300, dict(FAKE_LT="no", PYTHONUSERBASE=os.path.join(tmp, "userbase")))
    made = open(os.path.join(tmp, "make_calls")).read()
    d = os.path.join(tmp, "repo", "build", "cublaslt-wheel")
    lt_line = [ln for ln in r.stdout.splitlines() if ln.startswith("cuBLASLt:")]
    check(r.returncode == 0 and "CUBLASLT_HOME=%s" % d in made.splitlines()[-1]
          and os.path.realpath(os.path.join(d, "lib", "libcublasLt.so")) == os.path.realpath(
              os.path.join(ltw, "lib", "libcublasLt.so.13"))
          and os.path.realpath(os.path.join(d, "include")) == os.path.realpath(os.path.join(ltw, "include"))
          and lt_line == ["cuBLASLt:          %s (pip's wheel)" % ltw],
          "cuBLASLt from pip's wheel: linked from build/cublaslt-wheel, the build made with CUBLASLT_HOME: %s"
          % lt_line)

    # NCCL only as pip's wheel (nvidia-nccl-cu13), found through the user site-packages
    wheel = os.path.join(tmp, "userbase", "lib", ver, "site-packages", "nvidia", "nccl")
    os.makedirs(os.path.join(wheel, "include"))
    os.makedirs(os.path.join(wheel, "lib"))
    open(os.path.join(wheel, "include", "nccl.h"), "w").close()
    open(os.path.join(wheel, "lib", "libnccl.so.2"), "w").close()
    script(os.path.join(tmp, "bin", "mpicc"), "exit 0\n")
    for mpi in (False, True):
        if os.path.exists(os.path.join(tmp, "make_calls")):
            os.remove(os.path.join(tmp, "make_calls"))
        env = dict(PYTHONUSERBASE=os.path.join(tmp, "userbase"))
        if not mpi:
            env["MPICC"] = ""
        r, log = run_check(tmp, "none", 300, env)
        made = open(os.path.join(tmp, "make_calls")).read()
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("NCCL:")]
        link = os.path.join(tmp, "repo", "build", "nccl-wheel", "lib", "libnccl.so.2")
        if mpi:
            check(r.returncode == 0 and "NCCL_HOME=%s" % os.path.join(tmp, "repo", "build", "nccl-wheel") in made
                  and os.path.islink(link) and os.path.realpath(link) == os.path.realpath(
                      os.path.join(wheel, "lib", "libnccl.so.2")),
                  "NCCL's wheel with mpicc: linked from build/nccl-wheel, which is still there after the run "
                  "(the binaries' rpath): %s" % line)
        else:
            said = "NCCL:              %s, not used: no MPI (mpicc), so the build is single-process" % wheel
            check(r.returncode == 0 and line == [said] and "NCCL_HOME" not in made,
                  "NCCL's wheel without mpicc: one line says the build is single-process, NCCL not linked: %s" % line)

    # 9. each committed run (dev/gpu_runs/*): --report makes its report.md again byte for byte (the peak from its
    # nvidia-smi -q), RESULTS.md's GPU tables are that report's sections, and each test program's summary its
    # README states is in its log
    with open(os.path.join(ROOT, "dev", "RESULTS.md")) as f:
        results = f.read()
    runs_dir = os.path.join(ROOT, "dev", "gpu_runs")
    for name in sorted(os.listdir(runs_dir)):
        run = os.path.join(runs_dir, name)
        r = subprocess.run(["bash", os.path.join(ROOT, "dev", "gpu_check.sh"), "--report", run],
                           capture_output=True, text=True, env=dict(os.environ, PEAK_TFLOPS=""))
        with open(os.path.join(run, "report.md")) as f:
            committed = f.read()
        check(r.returncode == 0 and r.stdout == committed,
              "gpu_runs/%s: gpu_check.sh --report makes report.md again, byte for byte" % name)
        for block, first, after in (("training step", "### Training step", "### The switches"),
                                    ("fp16 over fp32", "### FP16 / FP32", "### Not exercised")):
            begin = "<!-- generated by dev/gpu_check.sh --report dev/gpu_runs/%s: %s -->\n" % (name, block)
            i, j = results.find(begin), results.find("\n<!-- end of %s -->" % block)
            want = committed[committed.find(first):committed.find(after)].rstrip("\n")
            check(i >= 0 and j > i and results[i + len(begin):j] == want and want,
                  "RESULTS.md's %s block is gpu_runs/%s/report.md's" % (block, name))
        with open(os.path.join(run, "README.md")) as f:
            said = [ln.strip() for ln in f if ln.startswith("    test_gpu: ")]
        with lzma.open(os.path.join(run, "gpu_check.log.xz"), "rt") as f:
            log = f.read().splitlines()
        check(said and all(ln in log for ln in said), "gpu_runs/%s: the README's %s are in the log" % (name, said))

    # 4. bad arguments
    r = subprocess.run(["bash", os.path.join(ROOT, "dev", "gpu_check.sh"), "a", "b"], capture_output=True, text=True)
    check(r.returncode == 2 and "too many arguments" in r.stderr, "two LOG_DIRs: exit 2")

summary("test_gpu_check")
