// harness/gpu_harness.cu: the GPU trainer's harness, its code: the seam (its defaults, its event hook,
// the WMMA pipeline depths the matmul benchmark times), the process's GPU (device, shared-memory
// opt-ins, NCCL), the warning for shapes off the tensor cores, and the backend contract's copies
// between host and device and its model_free. What the trainer needs around the paper's step and is
// not in it; a first reading of train.cu skips it. Part of train.cu, not a program of its own:
// train.cu includes it at its end, after the types and launchers it uses (harness/gpu_harness.cuh
// holds the harness's types, which train.cu includes first), and calls it through declarations.

// ----------------------------------------------------------------------------
// The seam (harness/gpu_harness.cuh): the knobs at the trainer's values, the event hook, the WMMA depths.
static Seam seam_defaults(void) {
    Seam s;
    memset(&s, 0, sizeof s);
    s.split_min_k = SPLIT_MIN_K;
#if GPU_FP16
    s.wmma_stages = WMMA_STAGES;
#endif
    return s;
}
// The seam's event hook: event i of a time step (test_gpu's bench_kernels times each kernel so).
static void seam_mark(const Launch *L, int i) {
    if (L->seam->step_events) cudaCheck(cudaEventRecord(L->seam->step_events[i], L->stream));
}
#if GPU_FP16
// A WMMA product at the pipeline depth the seam says: WMMA_STAGES, the trainer's, or 2 or 4 (the matmul
// benchmark's, which time the latency the per-step products are bound by) where the device offers
// them (Gpu.wmma_depth_ok, set by matmul_setup).
template <int BM, int BN, int WM, int WN, bool ACOL, bool BCOL>
static void matmul_wmma(const Launch *L, const half *A, const half *B, int M, int N, int K, const Epilogue &e,
                        int splits, float *partial) {
    const int stages = L->seam->wmma_stages;
    if (stages == 2) matmul_wmma_at<BM, BN, WM, WN, ACOL, BCOL, 2>(L, A, B, M, N, K, e, splits, partial);
    else if (stages == 4) matmul_wmma_at<BM, BN, WM, WN, ACOL, BCOL, 4>(L, A, B, M, N, K, e, splits, partial);
    else matmul_wmma_at<BM, BN, WM, WN, ACOL, BCOL, WMMA_STAGES>(L, A, B, M, N, K, e, splits, partial);
}
#endif

// ----------------------------------------------------------------------------
// The process's GPU (Gpu, harness/gpu_harness.cuh).

// More than 48 KB of dynamic shared memory needs an opt-in per kernel: given here, for
// every WMMA tile matmul() dispatches to (a tile missing here fails its first launch),
// once, before any CUDA graph capture (a kernel's attributes are not set inside one).
static void matmul_setup(Gpu *g) {
    const size_t smem_optin = g->prop.sharedMemPerBlockOptin;
#if GPU_FP16
    static_assert(TILE_BIG == 128 && TILE_SMALL == 64, "matmul_wmma_setup_depth names the tiles");
    g->wmma_depth_ok[WMMA_STAGES] = matmul_wmma_setup_depth<WMMA_STAGES>(smem_optin);
    if (!g->wmma_depth_ok[WMMA_STAGES]) {
        fprintf(stderr, "error: the WMMA matmul needs %d bytes of shared memory per block; this GPU allows %zu\n",
                WmmaTile<TILE_BIG, TILE_BIG, 64, 32, AS_IS, TRANSPOSED>::SMEM, smem_optin);
        exit(1);
    }
    const bool cp_async = g->prop.major >= 8;  // WMMA_DEPTH_BUILT
    g->wmma_depth_ok[2] = cp_async && matmul_wmma_setup_depth<2>(smem_optin);
    g->wmma_depth_ok[4] = cp_async && matmul_wmma_setup_depth<4>(smem_optin);
#else
    (void)smem_optin;
#endif
}

static const Gpu *gpu_setup(void) {
    static Gpu g;
    static int ready;
    if (ready) return &g;
    int ndev = 0;
    cudaCheck(cudaGetDeviceCount(&ndev));
    if (ndev < 1) {
        fprintf(stderr, "error: no CUDA device\nHINT: the CPU trainer is ./train\n");
        exit(1);
    }
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!lr) lr = getenv("MPI_LOCALRANKID");
    if (!lr) lr = getenv("SLURM_LOCALID");
    int dev = (lr ? atoi(lr) : rank) % ndev;
    cudaCheck(cudaSetDevice(dev));
    cudaCheck(cudaGetDeviceProperties(&g.prop, dev));
    cudaCheck(cudaDeviceGetStreamPriorityRange(&g.priority_least, &g.priority_greatest));
    matmul_setup(&g);
#if GPU_NCCL
    if (world > 1) {  // rank 0 makes the id, MPI carries it to the others (doc/design.md, "Distributed")
        ncclUniqueId id;
        if (rank == 0) ncclCheck(ncclGetUniqueId(&id));
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        ncclCheck(ncclCommInitRank(&g.comm, world, id, rank));
    }
#endif
    if (rank == 0)
        printf("GPU: %s (sm_%d%d, %d SMs, %.0f GiB) x %d ranks\n", g.prop.name, g.prop.major, g.prop.minor,
               g.prop.multiProcessorCount, g.prop.totalGlobalMem / 1073741824.0, world);
    ready = 1;
    return &g;
}

// ----------------------------------------------------------------------------
// Every matmul of one training step of train.cu's forward() and backward(), V = 256.
typedef struct {
    const char *what;
    int layout, M, N, K;
} Shape;
static int step_shapes(Shape *s, int H, int D, int B, int T) {
    const int V = 256, N = B * T;
    const Shape t[] = {
        {"zx", MM_NT, N, 4 * H, D},   {"mx", MM_NT, N, H, D},       {"mh", MM_NT, B, H, H},
        {"z", MM_NT, B, 4 * H, H},    {"logits", MM_NT, N, V, H},   {"dW_out", MM_TN, V, H, N},
        {"dhs", MM_NN, N, H, V},      {"dm", MM_NN, B, H, 4 * H},   {"dh", MM_NN, B, H, H},
        {"dW_h", MM_TN, 4 * H, H, N}, {"dW_x", MM_TN, 4 * H, D, N}, {"dW_mx", MM_TN, H, D, N},
        {"dW_mh", MM_TN, H, H, N},    {"dxe", MM_NN, N, D, 4 * H},  {"dxe2", MM_NN, N, D, H}};
    memcpy(s, t, sizeof t);
    return (int)(sizeof t / sizeof t[0]);
}
#define MAX_SHAPES 16

// The FP16 build runs a matmul on tensor cores only when its shape is a tile multiple;
// any other shape silently runs on the SIMT kernel, several times slower. Says so
// (to out), naming the products and the flags that fix it; returns how many drop.
static int warn_simt_shapes(const Launch *L, int H, int D, int B, int T, FILE *out) {
    if (!GPU_FP16) return 0;
    Shape s[MAX_SHAPES];
    int n = step_shapes(s, H, D, B, T), slow = 0;
    char names[256] = "";
    for (int i = 0; i < n; i++)
        if (matmul_plan(L, s[i].M, s[i].N, s[i].K, NULL, NULL) == MM_SIMT) {
            size_t k = strlen(names);
            snprintf(names + k, sizeof names - k, "%s%s", slow++ ? ", " : "", s[i].what);
        }
    if (slow)
        fprintf(out, "warning: %d of the %d matmuls of a step (%s) are not multiples of the tensor-core tile "
                     "and run on the slower SIMT kernel\nHINT: --batch, --hidden and --embed multiples of %d, and "
                     "--batch x --seq-len a multiple of %d\n",
                slow, n, names, TILE_SMALL, TILE_SMALL);
    return slow;
}

// ----------------------------------------------------------------------------
// The backend contract's copies between host and device (train.h), and model_free.

// Host views: the FP32 master weights and Adam moments, and the carried state. The
// device is the truth between steps; each call copies them back (for checkpoints,
// sampling and validation, not every step).
static Mlstm *model_host(Model *md) {
    const size_t n = md->np * sizeof(float);
    const cudaStream_t st = md->launch.stream;
    cudaCheck(cudaMemcpyAsync(md->host.params, md->params, n, cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaMemcpyAsync(md->host.adam_m, md->adam_m, n, cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaMemcpyAsync(md->host.adam_v, md->adam_v, n, cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaStreamSynchronize(st));
    return &md->host;
}
static void model_state(Model *md, real **h, real **c) {
    const size_t n = sizeof(float) * md->B * md->cfg.H;
    const cudaStream_t st = md->launch.stream;
    cudaCheck(cudaMemcpyAsync(md->host_h, md->train_h, n, cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaMemcpyAsync(md->host_c, md->train_c, n, cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaStreamSynchronize(st));
    *h = md->host_h;
    *c = md->host_c;
}

static void model_loaded(Model *md) {  // the host copies are the truth: push them to the device
    const size_t n = md->np * sizeof(float), s = sizeof(float) * md->B * md->cfg.H;
    const cudaStream_t st = md->launch.stream;
    cudaCheck(cudaMemcpyAsync(md->params, md->host.params, n, cudaMemcpyHostToDevice, st));
    cudaCheck(cudaMemcpyAsync(md->adam_m, md->host.adam_m, n, cudaMemcpyHostToDevice, st));
    cudaCheck(cudaMemcpyAsync(md->adam_v, md->host.adam_v, n, cudaMemcpyHostToDevice, st));
    cudaCheck(cudaMemcpyAsync(md->train_h, md->host_h, s, cudaMemcpyHostToDevice, st));
    cudaCheck(cudaMemcpyAsync(md->train_c, md->host_c, s, cudaMemcpyHostToDevice, st));
    fp16_weights_from_masters(md);
}

// (From pageable host memory a cudaMemcpyAsync returns once the bytes are staged, so
// the caller may reuse its buffers at once.)
static void upload_batch(Model *md, const uint8_t *in, const uint8_t *tg, const uint8_t *rs) {
    const size_t n = (size_t)md->B * md->T;
    const cudaStream_t st = md->launch.stream;
    cudaCheck(cudaMemcpyAsync(md->tok, in, n, cudaMemcpyHostToDevice, st));
    cudaCheck(cudaMemcpyAsync(md->tok + n, tg, n, cudaMemcpyHostToDevice, st));
    if (rs) cudaCheck(cudaMemcpyAsync(md->tok + 2 * n, rs, n, cudaMemcpyHostToDevice, st));
    else cudaCheck(cudaMemsetAsync(md->tok + 2 * n, 0, n, st));
}

static void model_free(Model *md) {
    cudaCheck(cudaStreamSynchronize(md->launch.stream));
    cudaCheck(cudaStreamSynchronize(md->stream2));
    if (md->launch.sw.l2) cudaCheck(cudaCtxResetPersistingL2Cache());  // its window's lines back to normal
    cudaCheck(cudaFree(md->pbase));
    cudaCheck(cudaFree(md->abase));
    mlstm_free(&md->host);
    free(md->host_h);
    free(md->host_c);
    if (md->fwd_graph) cudaCheck(cudaGraphExecDestroy(md->fwd_graph));
    if (md->bwd_graph) cudaCheck(cudaGraphExecDestroy(md->bwd_graph));
    for (int j = 0; j < OVERLAP_CHUNKS; j++) cudaCheck(cudaEventDestroy(md->ev_chunk[j]));
    cudaCheck(cudaEventDestroy(md->ev_join));
    lt_plans_free(md->lt);
    free(md->lt);
    cudaCheck(cudaStreamDestroy(md->launch.stream));
    cudaCheck(cudaStreamDestroy(md->stream2));
    free(md);
}
