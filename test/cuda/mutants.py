#!/usr/bin/env python3
"""test/cuda/mutants.py: proves the CPU layer's tests bite. Each mutant is one
injected defect in a copy of the tree (the working tree is never touched); the copy
builds the named tests and runs them; a mutant is caught when a test fails or the
layer reports it. Prints the table of doc/gpu.md. Not part of `make test` (about
15 minutes on 2 cores).

    test/cuda/mutants.py [NAME...]      all mutants, or the named ones
"""
import concurrent.futures, os, re, shutil, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FP16, SM75, FP32, CUDACPU, HALF = ("build/cudacpu/test_gpu.lockstep", "build/cudacpu/test_gpu_sm75.reverse",
                                  "build/cudacpu/test_gpu_fp32.lockstep", "build/cudacpu/test_cudacpu", "build/cudacpu/test_half")
SAN16 = "build-san/cudacpu/test_gpu.lockstep"

# name, file, original text, mutated text, tests to run
MUTANTS = [
    ("cp.async wait depth off by one", "train.cu",
     "copy_wait<STAGES - 2>();  // slab kt has landed", "copy_wait<STAGES - 1>();  // slab kt has landed", [FP16, SM75]),
    ("no __syncthreads in the WMMA k-loop", "train.cu",
     "        __syncthreads();          // ... for every thread", "", [FP16, SM75]),
    ("no __syncwarp after store_matrix_sync", "train.cu",
     "            wmma::store_matrix_sync(cs, acc[i][j], 16, wmma::mem_row_major);\n            __syncwarp();",
     "            wmma::store_matrix_sync(cs, acc[i][j], 16, wmma::mem_row_major);", [FP16, SM75]),
    ("shared-memory padding 4 halves (misaligned rows)", "train.cu",
     "BK = 32, PAD = 8,", "BK = 32, PAD = 4,", [FP16, SM75]),
    ("SIMT tile loads without its row bound", "train.cu",
     "As[kk][mm] = m < M && k < K ?", "As[kk][mm] = k < K ?", [FP32, SAN16]),
    ("SIMT tile stores without its row bound", "train.cu",
     "if (r < M && c < N) epilogue_store", "if (c < N) epilogue_store", [FP32, SAN16]),
    ("shuffle reduction over 16 lanes", "train.cu",
     "for (int o = 16; o > 0; o /= 2) { R w = __shfl_xor_sync", "for (int o = 8; o > 0; o /= 2) { R w = __shfl_xor_sync", [FP32, SM75]),
    ("no barrier before a block reduction reuses its buffer", "train.cu",
     "    __syncthreads();  // buf may still be read by a previous call\n", "", [FP32, SM75]),
    ("overflow check before the all-reduce", "train.c",
     "        model_allreduce(md);\n        loss = dist_sum1(loss) / world;\n        // 5-7: overflow check on the reduced gradients, then skip, or unscale + clip + Adam\n        int overflow = model_overflow(md, o.fp16);",
     "        int overflow = model_overflow(md, o.fp16);\n        model_allreduce(md);\n        loss = dist_sum1(loss) / world;", [CUDACPU]),
    ("overflow limit INFINITY again (the bug fixed here)", "train.cu",
     "fp16 ? 65504.f : FLT_MAX, &bad)", "fp16 ? 65504.f : INFINITY, &bad)", [FP32]),
    ("weight-gradient epilogue ignores the reset mask", "train.cu",
     "if (e.mask && e.mask[(size_t)r * e.mask_stride]) acc = 0.f;", "", [FP16, FP32]),
    ("float->half truncates instead of rounding to even", "test/cuda/cuda_fp16.h",
     "r += rem > 0x1000u || (rem == 0x1000u && (r & 1));", "", [HALF]),
]

def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f]

def run_mutant(m):
    name, path, old, new, tests = m
    d = tempfile.mkdtemp(prefix="mutant_")
    try:
        for f in tracked_files():
            os.makedirs(os.path.join(d, os.path.dirname(f)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, f), os.path.join(d, f))
        src = open(os.path.join(d, path)).read()
        if src.count(old) != 1:
            return name, path, [("-", "the original text is not found exactly once: update mutants.py")]
        open(os.path.join(d, path), "w").write(src.replace(old, new))
        rows = []
        for t in tests:
            san = t.startswith("build-san")
            b = subprocess.run(["make"] + (["SAN=1"] if san else []) + [t], cwd=d, capture_output=True, text=True)
            if b.returncode:
                err = next((l for l in b.stderr.splitlines() if "error" in l), b.stderr.strip()[-200:])
                rows.append((t, "build fails: " + err.strip()))
                continue
            t0 = time.time()
            try:
                r = subprocess.run([os.path.join(d, t)], cwd=d, capture_output=True, text=True, timeout=1200)
                out = r.stdout + r.stderr
            except subprocess.TimeoutExpired as e:
                out = (e.stdout or b"").decode(errors="replace") + "\nTIMEOUT"
            summary = re.findall(r"^\w+: (\d+) passed, (\d+) failed$", out, re.M)
            report = next((l for l in out.splitlines() if l.startswith("cudacpu: error") or "AddressSanitizer" in l or
                           "runtime error" in l), None)
            fails = [l for l in out.splitlines() if l.startswith("FAIL")]
            if report:
                what = "layer/sanitizer report: " + report[:160]
            elif fails:
                what = "%d checks fail, first: %s" % (len(fails), fails[0][6:150])
            elif not summary:
                what = "no summary (crashed): " + out.strip().splitlines()[-1][:150] if out.strip() else "no output"
            else:
                what = "NOT CAUGHT (%s passed)" % summary[-1][0]
            rows.append((t, "%s [%.0f s]" % (what, time.time() - t0)))
        return name, path, rows
    finally:
        shutil.rmtree(d, ignore_errors=True)

def main():
    want = sys.argv[1:]
    todo = [m for m in MUTANTS if not want or any(w in m[0] for w in want)]
    jobs = int(os.environ.get("JOBS", "2"))
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        for name, path, rows in ex.map(run_mutant, todo):
            for t, what in rows:
                print("| %s (%s) | %s | %s |" % (name, path, os.path.basename(t), what.replace("|", "/")), flush=True)

if __name__ == "__main__":
    main()
