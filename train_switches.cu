// train_switches.cu: the GPU trainer's run-time switches (doc/gpu.md, "The run-time switches"), each
// off by default and each a change that one binary measures on and off (dev/gpu_check.sh): split-K
// (MLSTM_SPLITK), cuBLASLt's matmuls (--matmul cublaslt), W_mh persisting in L2 (MLSTM_L2) and the
// weight gradients beside the backward loop (MLSTM_OVERLAP). Part of train.cu, not a program of its
// own: train.cu includes it at its end, after the types and launchers it uses, and its main path
// calls what is here through the declarations in its block "The run-time switches' code", each
// call only with its switch on. In train.cu's WMMA kernel stay switch warp64's 64x64 warps and the
// bounded grid of switch overlap (template parameters) and split-K's store of raw partial sums.

#ifdef USE_CUBLASLT
#include <cublasLt.h>
#define GPU_CUBLASLT 1
#else
#define GPU_CUBLASLT 0  // --matmul cublaslt is refused at start-up (switches_of)
#endif

// ----------------------------------------------------------------------------
// The switches of a run (train.cu's Switches), for model_create and model_precision: from the
// environment (1 on, 0 or unset off) and the run's --matmul.
static int env_switch(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v || !strcmp(v, "0")) return 0;
    if (!strcmp(v, "1")) return 1;
    fprintf(stderr, "error: %s=%s: expected 0 or 1\n", name, v);
    exit(2);
}
static Switches switches_of(const Options *o) {
    Switches s;
    s.splitk = env_switch("MLSTM_SPLITK");
    s.overlap = env_switch("MLSTM_OVERLAP");
    s.l2 = env_switch("MLSTM_L2");
    s.warp64 = env_switch("MLSTM_WARP64");
    s.cublaslt = o->matmul == MATMUL_CUBLASLT;
    if (s.cublaslt && !GPU_CUBLASLT)
        fail("--matmul cublaslt: this build has no cuBLASLt (cublasLt.h and libcublasLt were not found: make probe "
             "says where it looked); --matmul wmma needs none");
    return s;
}

// ----------------------------------------------------------------------------
// Split-K (switch splitk): a product whose blocks do not fill the SMs (fewer than 2 of the
// 128x128 tile's or 4 of the 64x64's per SM: the per-step products at small B, the weight
// gradients with few output blocks, dW_out, dW_x, dW_mx, K = B*T) splits K in 2, 4 or 8 parts of
// at least the seam's split_min_k (SPLIT_MIN_K, train.cu): a block walks K / splits, so a
// latency-bound chain of K/32 slabs is that many times shorter, and matmul_plan's 90% rule counts
// blocks x splits. The partials are added in a fixed order (splitk_reduce_kernel): the result
// does not depend on timing, and differs from the unsplit one only by the order of an FP32 sum.
#define SPLIT_MAX 8
static int split_factor(long blocks, int K, long cap, int min_k) {
    int s = 1;
    while (s < SPLIT_MAX && blocks * 2 * s <= cap && K % (WMMA_K_MULTIPLE * 2 * s) == 0 && K / (2 * s) >= min_k)
        s *= 2;
    return s;
}

// Split-K's workspace: each launch stream has its own (the overlapped weight gradients run beside
// the loop's products). Split products fill at most 2 (4) blocks per SM of the 128x128 (64x64)
// tile, so 2 x SMs x 128 x 128 partial sums bound it.
static size_t splitk_ws_floats(int sms) { return (size_t)2 * sms * TILE_BIG * TILE_BIG; }

// out = the epilogue of the sum of the splits, added in order z = 0, 1, ... (deterministic).
__global__ void splitk_reduce_kernel(const float *partial, int splits, int M, int N, Epilogue e) {
    const size_t n = (size_t)M * N;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float acc = partial[i];
        for (int z = 1; z < splits; z++) acc += partial[(size_t)z * n + i];
        epilogue_store(e, (int)(i / N), (int)(i % N), acc);
    }
}
// The partial sums' buffer of a product split in `splits` (the stream's workspace), counted in the seam.
static float *splitk_partials(const Launch *L, int splits, int M, int N, int K) {
    if (!L->splitk_ws || (size_t)splits * M * N > L->splitk_ws_n) {
        fprintf(stderr, "error: split-K of %d x %d x %d in %d needs %zu floats of workspace, %zu given\n", M, N, K,
                splits, (size_t)splits * M * N, L->splitk_ws_n);
        exit(1);
    }
    L->seam->splitk++;
    return L->splitk_ws;
}
static void splitk_reduce(const Launch *L, const float *partial, int splits, int M, int N, const Epilogue &e) {
    int blocks = ceil_div((long)M * N, BLOCK_THREADS);
    blocks = blocks < 8 * L->sms ? blocks : 8 * L->sms;
    splitk_reduce_kernel<<<blocks, BLOCK_THREADS, 0, L->stream>>>(partial, splits, M, N, e);
    launchCheck();
}

// ----------------------------------------------------------------------------
// cuBLASLt (--matmul cublaslt, switch cublaslt): on sm_90 its kernels use wgmma and TMA, which
// the hand-written WMMA kernel (mma.sync) cannot reach. The product goes straight into the output
// wherever cuBLASLt can finish the epilogue itself: the scale as alpha, accumulation as beta with
// C = D, a bias as its bias epilogue, whose bias has D's type (cublasLt.h,
// CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE; the exceptions are IMMA and FP8 kernels), so only with an
// FP32 output for the FP32 master bias. Every other epilogue (the mLSTM ones of the per-step
// products; a bias on an FP16 output, which no product of the step has) is epilogue_store, the
// hand-written kernel's own code, as a pointwise kernel over the product in an FP32 scratch of at
// most B x H. Row-major C = A.B is column-major C^T = B^T A^T.
//
// A plan (descriptors, layouts, the heuristic's algorithm) is made once per key and kept, as many
// as the shapes need. cuBLASLt assumes 256-byte aligned operands unless the preferences say
// otherwise, and the per-step operands (rows t B .. t B + B of a (T,B,H) tensor) are 256-byte
// aligned only when B H % 128 == 0; so the key holds each operand's alignment, read from its
// pointer, which the plan states as the heuristic's minimum. Switch overlap's weight gradients
// plan for the SMs they may use (Launch.lt_sm_target). Each Model keeps its own plans (LtPlans).
// A shape the heuristic refuses runs on the hand-written kernel (matmul), so one odd shape cannot
// end a run that --matmul cublaslt would otherwise finish.
#if GPU_CUBLASLT
static void lt_check(cublasStatus_t st, const char *file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "error: cuBLASLt status %d at %s:%d\n", (int)st, file, line);
    fprintf(stderr, "HINT: --matmul wmma (the hand-written kernel) needs no cuBLASLt\n");
    exit(1);
}
#define ltCheck(x) lt_check((x), __FILE__, __LINE__)

typedef struct {
    int layout, M, N, K, out_f32, bias;
    uint32_t align[5];  // bytes: cuBLASLt's A, B, C, D (our B, A, the output twice) and the bias (0: none)
    int sm_target;      // CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET (0: every SM)
    size_t workspace;
} LtKey;  // made by lt_key (padding zeroed: keys are compared as bytes)
typedef struct LtPlan {
    LtKey key;
    int refused;  // cuBLASLt has no algorithm for it: the product runs on the hand-written kernel
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    struct LtPlan *next;
} LtPlan;
struct LtPlans {
    cublasLtHandle_t handle;  // made with the first plan
    LtPlan *plans;            // every plan made, newest first
    int n;
};
static void lt_plan_destroy(LtPlan *p) {
    ltCheck(cublasLtMatrixLayoutDestroy(p->a));
    ltCheck(cublasLtMatrixLayoutDestroy(p->b));
    ltCheck(cublasLtMatrixLayoutDestroy(p->d));
    ltCheck(cublasLtMatmulDescDestroy(p->desc));
}
static void lt_plans_free(LtPlans *lt) {
    while (lt->plans) {
        LtPlan *p = lt->plans;
        lt->plans = p->next;
        if (!p->refused) lt_plan_destroy(p);
        free(p);
    }
    if (lt->handle) ltCheck(cublasLtDestroy(lt->handle));
    memset(lt, 0, sizeof *lt);
}

// The largest power of two up to 256 that divides the address: the alignment cuBLASLt may assume.
static uint32_t lt_alignment(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a /= 2;
    return a;
}
static LtKey lt_key(const Launch *L, int layout, int M, int N, int K, const void *A, const void *B, const void *D,
                    int out_f32, const float *bias) {
    LtKey k;
    memset(&k, 0, sizeof k);
    k.layout = layout; k.M = M; k.N = N; k.K = K; k.out_f32 = out_f32; k.bias = bias != NULL;
    k.align[0] = lt_alignment(B);
    k.align[1] = lt_alignment(A);
    k.align[2] = k.align[3] = lt_alignment(D);
    k.align[4] = bias ? lt_alignment(bias) : 0;
    k.sm_target = L->lt_sm_target;
    k.workspace = L->lt_ws_n;
    return k;
}
// A shape cuBLASLt refuses (its heuristic's CUBLAS_STATUS_NOT_SUPPORTED, no algorithm, or one
// whose state is not success) runs on the hand-written kernel: one line says so per shape and
// layout in the process (every model and plan key of that shape stays quiet after it).
typedef struct LtRefused {
    int layout, M, N, K;
    struct LtRefused *next;
} LtRefused;
static void lt_say_refused(const LtKey *k, cublasStatus_t st, int found, cublasStatus_t state) {
    static LtRefused *said;
    for (const LtRefused *r = said; r; r = r->next)
        if (r->layout == k->layout && r->M == k->M && r->N == k->N && r->K == k->K) return;
    LtRefused *r = (LtRefused *)mallocCheck(sizeof(LtRefused));
    *r = (LtRefused){k->layout, k->M, k->N, k->K, said};
    said = r;
    if (rank == 0)
        fprintf(stderr, "note: cuBLASLt refuses %d x %d x %d (layout %d, alignments %u %u %u bytes; heuristic status "
                "%d, %d found, state %d): it runs on the hand-written kernel\n", k->M, k->N, k->K, k->layout,
                k->align[0], k->align[1], k->align[3], (int)st, found, (int)state);
}
// The plan of key k (made on first use and kept); its refused flag says cuBLASLt has none.
static const LtPlan *lt_plan(LtPlans *lt, const LtKey *k, const float *bias) {
    for (const LtPlan *p = lt->plans; p; p = p->next)
        if (!memcmp(&p->key, k, sizeof *k)) return p;
    if (!lt->handle) ltCheck(cublasLtCreate(&lt->handle));
    LtPlan *p = (LtPlan *)mallocCheck(sizeof(LtPlan));
    p->key = *k;
    const int M = k->M, N = k->N, K = k->K;
    const bool acol = k->layout == MM_TN, bcol = k->layout == MM_NT;
    const cudaDataType_t t = GPU_FP16 ? CUDA_R_16F : CUDA_R_32F, dt = k->out_f32 ? CUDA_R_32F : t;
    ltCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t op_b = bcol ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = acol ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
    ltCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
    ltCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
    if (k->bias) {
        uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
        int32_t bt = CUDA_R_32F;  // the FP32 master bias, one per column of C (per row of C^T); D is FP32 too
        ltCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        ltCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        // the heuristic reads the bias pointer's alignment from it (the pointer is set again per call)
        ltCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    if (k->sm_target) {
        int32_t sms = k->sm_target;
        ltCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof sms));
    }
    // stored as column-major: our B (K,N) row-major is N x K, (N,K) is K x N; our A likewise; C^T is N x M
    ltCheck(cublasLtMatrixLayoutCreate(&p->a, t, bcol ? K : N, bcol ? N : K, bcol ? K : N));
    ltCheck(cublasLtMatrixLayoutCreate(&p->b, t, acol ? M : K, acol ? K : M, acol ? M : K));
    ltCheck(cublasLtMatrixLayoutCreate(&p->d, dt, N, M, N));
    cublasLtMatmulPreference_t pref;
    ltCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = k->workspace;
    ltCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t min_align[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        ltCheck(cublasLtMatmulPreferenceSetAttribute(pref, min_align[i], &k->align[i], sizeof k->align[i]));
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt->handle, p->desc, p->a, p->b, p->d, p->d, pref, 1, &r, &found);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) ltCheck(st);
    ltCheck(cublasLtMatmulPreferenceDestroy(pref));
    p->refused = st != CUBLAS_STATUS_SUCCESS || found < 1 || r.state != CUBLAS_STATUS_SUCCESS;
    if (p->refused) {
        lt_plan_destroy(p);
        lt_say_refused(k, st, found, r.state);
    } else {
        p->algo = r.algo;
    }
    p->next = lt->plans;
    lt->plans = p;
    lt->n++;
    return p;
}
// A matmul epilogue as a pointwise pass over a product already in C (M,N) FP32: the epilogues
// cuBLASLt cannot finish.
__global__ void epilogue_kernel(const float *C, int M, int N, Epilogue e) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)M * N) epilogue_store(e, (int)(i / N), (int)(i % N), C[i]);
}

// Whether cuBLASLt ran the product (false: it has no algorithm for the shape; the caller runs it).
static bool matmul_lt(const Launch *L, int layout, int M, int N, int K, const floatX *A, const floatX *B,
                      const Epilogue &e) {
    const bool lt_finishes = e.kind == EPI_PLAIN && (!e.bias || e.outf);  // (the bias in D's type)
    if (!lt_finishes && (!L->lt_scratch || (size_t)M * N > L->lt_scratch_n)) {
        fprintf(stderr, "error: cuBLASLt: the epilogue of %d x %d needs %zu floats of scratch, %zu given\n", M, N,
                (size_t)M * N, L->lt_scratch_n);
        exit(1);
    }
    void *D = !lt_finishes ? (void *)L->lt_scratch : e.outf ? (void *)e.outf : (void *)e.outx;
    const float *bias = lt_finishes ? e.bias : NULL;
    const LtKey k = lt_key(L, layout, M, N, K, A, B, D, !lt_finishes || e.outf != NULL, bias);
    const LtPlan *p = lt_plan(L->lt, &k, bias);
    if (p->refused) return false;
    if (bias)  // the pointer of this call (the plan may have been made for another)
        ltCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const float alpha = lt_finishes ? e.scale : 1.f, beta = lt_finishes && e.accumulate ? 1.f : 0.f;
    ltCheck(cublasLtMatmul(L->lt->handle, p->desc, &alpha, B, p->a, A, p->b, &beta, D, p->d, D, p->d, &p->algo,
                           L->lt_ws, L->lt_ws_n, L->stream));
    L->seam->cublaslt++;
    if (!lt_finishes) {
        epilogue_kernel<<<ceil_div((long)M * N, BLOCK_THREADS), BLOCK_THREADS, 0, L->stream>>>(L->lt_scratch, M, N, e);
        launchCheck();
    }
    return true;
}
#else
struct LtPlans {
    int n;  // (no plans: without cuBLASLt the switch cannot be on)
};
static void lt_plans_free(LtPlans *lt) { memset(lt, 0, sizeof *lt); }
static bool matmul_lt(const Launch *, int, int, int, int, const floatX *, const floatX *, const Epilogue &) {
    return false;
}
#endif
static LtPlans *lt_plans_new(void) {
    LtPlans *lt = (LtPlans *)mallocCheck(sizeof(LtPlans));
    memset(lt, 0, sizeof *lt);
    return lt;
}

// ----------------------------------------------------------------------------
// Switch l2: W_mh, 33.5 MB in FP16 at H = 4096, persisting in L2 (an H200 may set aside 37.5 MB
// of its 50), so the per-step products mh and dh read it from L2 instead of from DRAM after W_h's
// 134 MB stream has evicted it. A window on the model's main stream: the launches on it, and the
// kernel nodes captured from it, carry it. Without persisting L2 (before sm_80) the switch does
// nothing. The share of the window that persists (hitRatio) is what the driver set aside, read
// back: CUDA does not promise the set-aside asked for (a driver sets L2 aside in units of its own,
// and may give less), and a window larger than its set-aside would evict its own lines.
static void l2_window(Model *md, const cudaDeviceProp *prop) {
    size_t persist = (size_t)prop->persistingL2CacheMaxSize, max_win = (size_t)prop->accessPolicyMaxWindowSize;
    if (!persist || !max_win) {
        if (rank == 0) fprintf(stderr, "note: MLSTM_L2=1: this GPU has no persisting L2 (sm_80+); ignored\n");
        return;
    }
    size_t bytes = (size_t)md->cfg.H * md->cfg.H * sizeof(floatX), win = bytes < max_win ? bytes : max_win;
    cudaStreamAttrValue a;
    memset(&a, 0, sizeof a);
    a.accessPolicyWindow.base_ptr = (void *)md->W[WN_MH];
    a.accessPolicyWindow.num_bytes = win;
    cudaCheck(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, win < persist ? win : persist));
    size_t granted = 0;
    cudaCheck(cudaDeviceGetLimit(&granted, cudaLimitPersistingL2CacheSize));
    a.accessPolicyWindow.hitRatio = win <= granted ? 1.f : (float)granted / win;  // the share that persists
    a.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    a.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    cudaCheck(cudaStreamSetAttribute(md->launch.stream, cudaStreamAttributeAccessPolicyWindow, &a));
}

// ----------------------------------------------------------------------------
// Switch overlap: the chain of the backward loop leaves the tensor cores mostly idle at small B,
// and dW_h = dz^T m and dW_mh = dmh^T h_{t-1} need only the rows of finished steps. So the loop
// runs in OVERLAP_CHUNKS chunks of T / OVERLAP_CHUNKS steps; after each, an event forks the
// model's second stream, which adds the two products over the chunk's B T / OVERLAP_CHUNKS rows
// into dW_h and dW_mh (the first chunk writes them, the later ones add, in chunk order on the one
// stream: a fixed order), while the main stream goes on with the next chunk. After the loop the
// main stream waits for the second (the join). Inside the capture of the backward graph this is
// the graph's fork and join; the direct path runs it on the two streams the same way. The second
// stream has the lowest priority, and the chunks that run beside the loop have a bounded grid
// (Launch.grid_bound): the hand-written kernel one block an SM (the 128x128 tile takes half an
// SM's registers, so the loop's blocks still find room on every SM), cuBLASLt planned for
// 1 / OVERLAP_LT_SM_DIVISOR of the SMs (its sm_90 kernels take a whole SM a block). The last chunk
// starts when the loop has ended and takes the whole GPU.
#define OVERLAP_LT_SM_DIVISOR 2
static int overlap_chunks(const Model *md) {
    return md->launch.sw.overlap && md->T % OVERLAP_CHUNKS == 0 ? OVERLAP_CHUNKS : 1;
}
// The launch context of chunk j's weight gradients: the model's, on its second stream with that
// stream's own workspaces, and beside the loop (every chunk but the last) a bounded grid.
static Launch wgrad_launch(const Model *md, int j) {
    Launch L = md->launch;
    L.stream = md->stream2;
    L.splitk_ws = md->splitk_ws2;
    L.lt_ws = md->lt_ws2;
    L.lt_scratch = NULL;  // (a weight gradient's FP32 output: cuBLASLt finishes its epilogue itself)
    L.lt_scratch_n = 0;
    if (j < overlap_chunks(md) - 1) {
        L.grid_bound = L.sms;
        L.lt_sm_target = L.sms > OVERLAP_LT_SM_DIVISOR ? L.sms / OVERLAP_LT_SM_DIVISOR : 1;
    }
    return L;
}
static void wgrad_chunk(Model *md, int j, int t0, int steps) {
    const int H = md->cfg.H, B = md->B, N = B * md->T, rows = B * steps;
    const size_t o = (size_t)t0 * B * H;
    const Launch L = wgrad_launch(md, j);
    cudaCheck(cudaEventRecord(md->ev_chunk[j], md->launch.stream));  // the chunk's dz, dmh are written
    cudaCheck(cudaStreamWaitEvent(L.stream, md->ev_chunk[j], 0));
    Epilogue e = epi_grad(md->dW[WN_H], H, N);
    e.accumulate = j > 0;
    matmul(&L, MM_TN, 4 * H, H, rows, md->dz + 4 * o, md->mt + o, e);  // dW_h += dz^T m / N over the chunk
    e = epi_grad(md->dW[WN_MH], H, N);
    e.accumulate = j > 0;
    matmul(&L, MM_TN, H, H, rows, md->dmh + o, md->hs + o, e);  // dW_mh += dmh^T h_{t-1} / N over the chunk
}
// The join: after the loop the main stream waits for the second.
static void overlap_join(Model *md) {
    cudaCheck(cudaEventRecord(md->ev_join, md->stream2));
    cudaCheck(cudaStreamWaitEvent(md->launch.stream, md->ev_join, 0));
}
