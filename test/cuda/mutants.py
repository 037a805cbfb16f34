#!/usr/bin/env python3
"""test/cuda/mutants.py: proves the CPU layer's tests bite. Each mutant is one
injected defect in a copy of the tree (the working tree is never touched); the copy
builds the named tests and runs them; a mutant is caught when a test fails or the
layer reports it. Prints the table of doc/gpu.md. Not part of `make test` (about
20 minutes on 2 cores; each run stops at its first failed check).

    test/cuda/mutants.py [NAME...]      all mutants, or the named ones
"""
import concurrent.futures, os, re, shutil, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FP16, SM75, FP32, CUDACPU, HALF = ("build/cudacpu/test_gpu.lockstep", "build/cudacpu/test_gpu_sm75.reverse",
                                  "build/cudacpu/test_gpu_fp32.lockstep", "build/cudacpu/test_cudacpu", "build/cudacpu/test_half")
DEBUG = "build/cudacpu/test_gpu_debug.lockstep"
SAN16 = "build-san/cudacpu/test_gpu.lockstep"
SWITCHES = ["--only", "switches"]  # test_gpu's checks of the run-time switches alone (a mutant there is caught sooner)
MATMUL, PRECISION, MODEL = ["--only", "matmul"], ["--only", "precision"], ["--only", "model"]

# name, file, original text, mutated text, tests to run[, arguments for them (a group of checks)]
MUTANTS = [
    ("cp.async wait depth off by one", "train.cu",
     "copy_wait<STAGES - 2>();  // slab kt has landed", "copy_wait<STAGES - 1>();  // slab kt has landed", [FP16]),
    ("no __syncthreads in the WMMA k-loop", "train.cu",
     "        __syncthreads();          // ... for every thread, and slab kt-1 is no longer being read\n", "", [FP16, SM75]),
    ("no __syncwarp after store_matrix_sync", "train.cu",
     "            wmma::store_matrix_sync(staged, acc[i][j], FRAG, wmma::mem_row_major);\n            __syncwarp();",
     "            wmma::store_matrix_sync(staged, acc[i][j], FRAG, wmma::mem_row_major);", [FP16, SM75]),
    ("every A fragment multiplied by the first B fragment only", "train.cu",
     "wmma::mma_sync(acc[i][j], a, b[j], acc[i][j]);", "wmma::mma_sync(acc[i][j], a, b[0], acc[i][j]);", [FP16, SM75]),
    ("shared-memory padding 4 halves (misaligned rows)", "train.cu",
     "BK = 32, PAD = 8,", "BK = 32, PAD = 4,", [FP16, SM75]),
    ("SIMT tile loads without its row bound", "train.cu",
     "As[kk][mm] = m < M && k < K ?", "As[kk][mm] = k < K ?", [FP32, SAN16]),
    ("SIMT tile stores without its row bound", "train.cu",
     "if (r < M && c < N) epilogue_store", "if (c < N) epilogue_store", [FP32]),
    ("shuffle reduction over 16 lanes", "train.cu",
     "    for (int o = WARP_SIZE / 2; o > 0; o /= 2) {\n        R w = __shfl_xor_sync",
     "    for (int o = WARP_SIZE / 4; o > 0; o /= 2) {\n        R w = __shfl_xor_sync", [FP32]),
    ("no barrier before a block reduction reuses its buffer", "train.cu",
     "    __syncthreads();  // buf may still be read by a previous call\n", "", [FP32, SM75]),
    ("overflow check before the all-reduce", "train.h",
     "    model_allreduce(r->md);\n    s.loss = dist_sum1(s.loss) / world;\n    // 5-7: overflow check on the reduced gradients, then skip, or unscale + clip + Adam\n    GradientCheck check = model_check(r->md);",
     "    GradientCheck check = model_check(r->md);\n    model_allreduce(r->md);\n    s.loss = dist_sum1(s.loss) / world;", [CUDACPU]),
    ("overflow limit INFINITY again (the bug fixed here)", "train.cu",
     "flag |= !(fabsf(v) <= FLT_MAX);", "flag |= !(fabsf(v) <= INFINITY);", [FP32]),
    ("the GPU's Adam ignores the gradient factor (1/S times the clip's)", "train.cu",
     "grads[i] * grad_factor, a);", "grads[i], a);", [FP32]),
    ("the FP16 weight copies not made again after Adam", "train.cu",
     "             adam_step(a, applied));\n    fp16_weights_from_masters(md);", "             adam_step(a, applied));",
     [FP16]),
    ("b_out's gradient without the mean's 1/N", "train.cu",
     "colsum(L, g->t[P_BOUT], md->colpart, md->dlogits, N, V, 1.f / N);",
     "colsum(L, g->t[P_BOUT], md->colpart, md->dlogits, N, V, 1.f);", [FP16]),
    ("the trainer's loss scaler not capped at FP16's 2^15 (starts at 2^16)", "harness/train_harness.h",
     "    loss_scaler_cap(&r->scaler, r->precision.max_loss_scale);  // a resumed",
     "    loss_scaler_cap(&r->scaler, INFINITY);  // a resumed", [FP16]),
    ("the GPU backend's contract gives the loop no cap on the loss scale", "train.cu",
     "    p.max_loss_scale = FP16_MAX_LOSS_SCALE;", "    p.max_loss_scale = INFINITY;", [FP16], ["--only", "cap,resume"]),
    ("split-K's fixed-order sum leaves out the last split (switch splitk)", "train_switches.cu",
     "for (int z = 1; z < splits; z++) acc +=", "for (int z = 1; z < splits - 1; z++) acc +=", [FP16], SWITCHES),
    ("split-K blocks all store into split 0's partial sums (switch splitk)", "train.cu",
     "float *tile = partial + ((size_t)blockIdx.z * M + m0", "float *tile = partial + ((size_t)m0", [FP16], SWITCHES),
    ("split-K partial sums stored without the warp's column offset (switch splitk)", "train.cu",
     "* N + n0 + wn * WN;\n        #pragma unroll", "* N + n0;\n        #pragma unroll", [FP16], SWITCHES),
    ("split-K blocks all walk the first K / splits (switch splitk)", "train.cu",
     "kb = blockIdx.z * KT * BK;", "kb = 0 * KT * BK;", [FP16], SWITCHES),
    ("the L2 window on W_h instead of W_mh (switch l2)", "train_switches.cu",
     "a.accessPolicyWindow.base_ptr = (void *)md->W[WN_MH];", "a.accessPolicyWindow.base_ptr = (void *)md->W[WN_H];",
     [FP16], SWITCHES),
    ("a model with switch l2 never given its L2 window", "train.cu",
     "    if (L->sw.l2) l2_window(md, &gpu->prop);\n", "", [FP16], SWITCHES),
    ("switch l2 never reads the loss it moved after backward", "train.cu",
     "    return md->launch.sw.l2 ? mean_loss(md) : loss;", "    return loss;", [FP16], SWITCHES),
    ("a chunk's weight gradients wait for the chunk before it, not for their own (switch overlap)", "train_switches.cu",
     "cudaStreamWaitEvent(L.stream, md->ev_chunk[j], 0)", "cudaStreamWaitEvent(L.stream, md->ev_chunk[j > 0 ? j - 1 : 0], 0)",
     [SM75], SWITCHES),
    ("the second stream never joined back (switch overlap)", "train_switches.cu",
     "    cudaCheck(cudaStreamWaitEvent(md->launch.stream, md->ev_join, 0));\n", "", [FP16], SWITCHES),
    ("the overlapped weight gradients share the main stream's split-K workspace (switch overlap)", "train_switches.cu",
     "    L.splitk_ws = md->splitk_ws2;\n", "", [FP16], SWITCHES),
    ("every chunk overwrites dW_h instead of adding to it (switch overlap)", "train_switches.cu",
     "    Epilogue e = epi_grad(md->dW[WN_H], H, N);\n    e.accumulate = j > 0;",
     "    Epilogue e = epi_grad(md->dW[WN_H], H, N);\n    e.accumulate = 0;", [FP16], SWITCHES),
    ("the layer replays a graph's forked nodes in capture order under reverse too", "test/cuda/cudacpu.cpp",
     "                if (g->nodes[r].forked) { n = r; break; }", "                if (false) { n = r; break; }", [CUDACPU]),
    ("no shared-memory opt-in for the 64x64-warp NN tile (switch warp64)", "train.cu",
     "           matmul_wmma_setup<T, T, 64, 64, AS_IS, AS_IS, STAGES_>(optin) &\n", "", [FP16], ["--only", "matmul"]),
    ("cuBLASLt without its bias epilogue (switch cublaslt)", "train_switches.cu",
     "    if (k->bias) {\n        uint32_t epi = CUBLASLT_EPILOGUE_BIAS;",
     "    if (false) {\n        uint32_t epi = CUBLASLT_EPILOGUE_BIAS;", [FP16], SWITCHES),
    ("cuBLASLt's mLSTM epilogue kernel not run (switch cublaslt)", "train_switches.cu",
     "    if (!lt_finishes) {\n        epilogue_kernel<<<", "    if (false) {\n        epilogue_kernel<<<", [FP16], SWITCHES),
    ("cuBLASLt ignores the epilogue's scale, the mean's 1/N (switch cublaslt)", "train_switches.cu",
     "const float alpha = lt_finishes ? e.scale : 1.f", "const float alpha = 1.f", [FP32], SWITCHES),
    ("matmul epilogue ignores reset rows (mh, dm)", "train.cu",
     "if (e.reset_rows && e.reset_rows[(size_t)r * e.reset_stride]) acc = 0.f;", "", [FP16]),
    ("no cudaFuncSetAttribute for the 128x128 tile's 55.5 KB of shared memory", "train.cu",
     "    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, P::SMEM));\n", "", [FP16]),
    ("the capturing call does not launch its graph (a capture records, it does not run)", "train.cu",
     "    }\n    cudaCheck(cudaGraphLaunch(*graph, st));", "    } else\n        cudaCheck(cudaGraphLaunch(*graph, st));", [FP32]),
    ("CUDA graphs left on in the debug build", "harness/gpu_harness.cuh", "#define GPU_GRAPHS 0", "#define GPU_GRAPHS 1", [DEBUG]),
    ("the layer runs a captured launch at once instead of recording it", "test/cuda/cudacpu.cpp",
     "    if (!s || s->capture == cudaStreamCaptureStatusNone) return op();", "    if (true) return op();", [CUDACPU, FP32]),
    ("cuBLASLt keeps a fixed table of 64 plans", "train_switches.cu",
     "    if (!lt->handle) ltCheck(cublasLtCreate(&lt->handle));\n    LtPlan *p = (LtPlan *)mallocCheck(sizeof(LtPlan));",
     "    if (lt->n == 64) { fprintf(stderr, \"error: cuBLASLt: more than 64 matmul shapes\\n\"); exit(1); }\n"
     "    if (!lt->handle) ltCheck(cublasLtCreate(&lt->handle));\n    LtPlan *p = (LtPlan *)mallocCheck(sizeof(LtPlan));",
     [FP16], MATMUL),
    ("cuBLASLt given the FP32 bias with an FP16 output (switch cublaslt)", "train_switches.cu",
     "const bool lt_finishes = e.kind == EPI_PLAIN && (!e.bias || e.outf);", "const bool lt_finishes = e.kind == EPI_PLAIN;",
     [FP16], MATMUL),
    ("cuBLASLt told nothing of the operands' alignment (switch cublaslt)", "train_switches.cu",
     "    for (int i = 0; i < 4; i++)\n        ltCheck(cublasLtMatmulPreferenceSetAttribute(pref, min_align[i]",
     "    for (int i = 0; i < 0; i++)\n        ltCheck(cublasLtMatmulPreferenceSetAttribute(pref, min_align[i]", [FP16], SWITCHES),
    ("cuBLASLt beside the backward loop planned for every SM (switch overlap)", "train_switches.cu",
     "    k.sm_target = L->lt_sm_target;", "    k.sm_target = 0;", [FP16], SWITCHES),
    ("the backward's gates rounded to FP16", "train.cu",
     "    cell_forward(g, 1, cp, &hn);  // the gates, into g\n",
     "    cell_forward(g, 1, cp, &hn);  // the gates, into g\n    for (int q = 0; q < 4; q++) g[q] = tof(tox(g[q]));\n",
     [FP16], PRECISION),
    ("the weight-gradient stream at the main stream's priority (switch overlap)", "train.cu",
     "cudaStreamCreateWithPriority(&md->stream2, cudaStreamDefault, gpu->priority_least)",
     "cudaStreamCreateWithPriority(&md->stream2, cudaStreamDefault, gpu->priority_greatest)", [FP16], SWITCHES),
    ("the graphs instantiated without their nodes' priorities (switch overlap)", "train.cu",
     "cudaGraphInstantiate(graph, g, cudaGraphInstantiateFlagUseNodePriority)", "cudaGraphInstantiate(graph, g, 0)",
     [FP16], SWITCHES),
    ("the last chunk of weight gradients on the bounded grid too (switch overlap)", "train_switches.cu",
     "    if (j < overlap_chunks(md) - 1) {\n        L.grid_bound", "    if (j < overlap_chunks(md)) {\n        L.grid_bound",
     [FP16], SWITCHES),
    ("the products planned for a fixed number of SMs, not their context's", "train.cu",
     "split = splits && L->sw.splitk, sms = L->sms,", "split = splits && L->sw.splitk, sms = 132,", [FP16], SWITCHES),
    ("no barrier between the tiles a bounded grid's block walks (switch overlap)", "train.cu",
     "            __syncthreads();  // the next tile's slabs overwrite the shared memory this one's epilogue staged in\n",
     "", [FP16, SM75], MATMUL),
    ("a bounded grid's blocks walk every second tile (switch overlap)", "train.cu",
     "tile += gridDim.x) {", "tile += 2 * gridDim.x) {", [FP16], MATMUL),
    ("z_t = m_t W_h^T without e_t W_x^T + b (the in-place sum overwrites)", "train.cu",
     "    Epilogue e = epi_f32(out, ld);\n    e.accumulate = 1;\n    return e;", "    Epilogue e = epi_f32(out, ld);\n    return e;",
     [FP32], MODEL),
    ("colsum's 64 chunks whatever the shape", "train.cu",
     "    if (chunks < COLSUM_MIN_CHUNKS) chunks = COLSUM_MIN_CHUNKS;", "    chunks = COLSUM_MIN_CHUNKS;", [FP32], MODEL),
    ("the layer takes a graph of two priorities without the node-priority flag", "test/cuda/cudacpu.cpp",
     "    if (!(flags & cudaGraphInstantiateFlagUseNodePriority))\n", "    if (false)\n", [CUDACPU]),
    ("the layer's cuBLASLt takes an FP32 bias with an FP16 output", "test/cuda/cublasLt.h",
     "(d->bias_type == dd->type || (int)d->bias_type == -1)", "(d->bias_type == dd->type || d->bias_type == CUDA_R_32F)",
     [CUDACPU]),
    ("the layer's cuBLASLt takes any alignment", "test/cuda/cublasLt.h",
     "            cudacpu::lt_aligned_to(ptrs[i]) < algo->data[2 + i]) {", "            false) {", [CUDACPU]),
    ("the layer sets aside exactly the persisting L2 asked for", "test/cuda/cudacpu.cpp",
     "    persisting_limit = (value + L2_SET_ASIDE_UNIT - 1) / L2_SET_ASIDE_UNIT * L2_SET_ASIDE_UNIT;",
     "    persisting_limit = value;", [CUDACPU]),
    ("float->half truncates instead of rounding to even", "test/cuda/cuda_fp16.h",
     "r += rem > 0x1000u || (rem == 0x1000u && (r & 1));", "", [HALF]),
]

def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f]

def run_mutant(m):
    name, path, old, new, tests = m[:5]
    args = m[5] if len(m) > 5 else []
    d = tempfile.mkdtemp(prefix="mutant_")
    try:
        for f in tracked_files():
            os.makedirs(os.path.join(d, os.path.dirname(f)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, f), os.path.join(d, f))
        src = open(os.path.join(d, path)).read()
        if src.count(old) != 1:
            return name, path, [("-", "the original text is not found exactly once: update mutants.py")]
        open(os.path.join(d, path), "w").write(src.replace(old, new))
        if not path.startswith("test/cuda/"):  # the layer itself is unchanged: reuse its built objects
            for b in ("build", "build-san"):
                for f in ("cudapp", "layer_750.o", "layer_800.o"):
                    if os.path.exists(os.path.join(ROOT, b, "cudacpu", f)):
                        os.makedirs(os.path.join(d, b, "cudacpu"), exist_ok=True)
                        shutil.copy(os.path.join(ROOT, b, "cudacpu", f), os.path.join(d, b, "cudacpu", f))
        rows = []
        for t in tests:
            san = t.startswith("build-san")
            b = subprocess.run(["make"] + (["SAN=1"] if san else []) + [t], cwd=d, capture_output=True, text=True)
            if b.returncode:
                err = next((l for l in b.stderr.splitlines() if "error" in l), b.stderr.strip()[-200:])
                rows.append((t, "build fails: " + err.strip()))
                continue
            t0 = time.time()
            # read the output as it comes and stop at the first failed check or report
            p = subprocess.Popen([os.path.join(d, t)] + args, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 errors="replace", start_new_session=True)
            what, summary, last, quoted = None, None, "", False
            for line in p.stdout:
                line = line.rstrip("\n")
                last = line or last
                # an EXPECT_EXIT check quotes the stderr it provoked, over several lines: not a report
                if re.match(r"^(ok|FAIL) .*stderr \"", line):
                    quoted = True
                if quoted:
                    quoted = '" (want "' not in line
                    if not line.startswith("FAIL"):
                        continue
                # test_cudacpu provokes the layer's reports on purpose: only its failed checks count
                selftest = t.endswith("test_cudacpu")
                if not selftest and (line.startswith("cudacpu: error") or "AddressSanitizer" in line or "runtime error" in line
                                     or line.startswith("error: CUDA") or line.startswith("error: cuBLASLt")):
                    what = "report: " + line[:170]
                elif line.startswith("FAIL"):
                    what = "check fails: " + line[6:170]
                elif re.match(r"^\w+: \d+ passed, \d+ failed$", line):
                    summary = line
                if what or time.time() - t0 > 1800:
                    break
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()
            if not what:
                what = "NOT CAUGHT (%s)" % summary if summary else "crashed without a report: " + last[:150]
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
