// harness/gpu_harness.cuh: the GPU trainer's harness, the part train.cu's code must see first: the
// error checks every CUDA and NCCL call goes through, the seam the tests and benchmarks steer and
// watch the launches by, and the process's GPU. What keeps the trainer checkable and is not in the
// papers; a first reading of train.cu skips it. Part of train.cu, not a header of its own: train.cu
// includes it after the CUDA headers and its GPU_FP16 and GPU_NCCL, and includes the harness's code,
// harness/gpu_harness.cu, at its end.

// ----------------------------------------------------------------------------
// Error checks: file, line and a hint.

static void cuda_check(cudaError_t e, const char *file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "error: CUDA: %s at %s:%d\n", cudaGetErrorString(e), file, line);
    if (e == cudaErrorMemoryAllocation) fprintf(stderr, "HINT: use a smaller --batch, --seq-len or --hidden\n");
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
        fprintf(stderr, "HINT: no usable GPU here; the CPU trainer is ./train\n");
    exit(1);
}
#define cudaCheck(x) cuda_check((x), __FILE__, __LINE__)
#ifdef GPU_DEBUG
// The debug build (make gpu GPU_DEBUG=1): each launch is waited for, so a fault in a
// kernel (an illegal address, a trap) is reported with the function that launched
// it, not by a later call that happens to see the error. CUDA graphs are off in it:
// waiting inside a capture is illegal.
static void launch_check_sync(const char *launcher, const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return;
    fprintf(stderr, "error: CUDA: %s in the kernel launched by %s at %s:%d\n", cudaGetErrorString(e), launcher, file,
            line);
    exit(1);
}
#define launchCheck() launch_check_sync(__func__, __FILE__, __LINE__)
#define GPU_GRAPHS 0
#else
#define launchCheck() cudaCheck(cudaGetLastError())
#define GPU_GRAPHS 1
#endif
#if GPU_NCCL
static void nccl_check(ncclResult_t r, const char *file, int line) {
    if (r == ncclSuccess) return;
    fprintf(stderr, "error: NCCL: %s at %s:%d\n", ncclGetErrorString(r), file, line);
    fprintf(stderr, "HINT: NCCL_DEBUG=INFO says more\n");
    exit(1);
}
#define ncclCheck(x) nccl_check((x), __FILE__, __LINE__)
#endif

// ----------------------------------------------------------------------------
// The Seam, which every launch context carries (Launch.seam), is the one place where the tests and
// benchmarks (test/test_gpu.cu) steer and watch the launches: knobs that the trainer leaves at their
// defaults (seam_defaults), an event hook for timing each kernel of a time step (seam_mark), and counts
// of the paths the products took, which the trainer never reads.
typedef struct {
    int split_min_k;           // split-K's least depth per split: SPLIT_MIN_K (tests lower it to split small shapes)
    int wmma_stages;           // the WMMA pipeline depth: WMMA_STAGES (the matmul benchmark also times 2 and 4)
    cudaEvent_t *step_events;  // NULL; else an event recorded before each kernel of a time step and after the last
    long splitk;               // products launched split (switch splitk)
    long cublaslt;             // products launched through cuBLASLt (switch cublaslt)
    long bounded;              // products launched under a grid bound or an SM target (switch overlap)
    long walking;              // products whose blocks walk several tiles (the bounded grid's kernel)
    long wmma128[2];           // 128x128 products as 8 warps of 64x32, as 4 of 64x64 (switch warp64)
} Seam;

// ----------------------------------------------------------------------------
// The process's GPU, one per process: the local rank's (mpirun sets OMPI_COMM_WORLD_LOCAL_RANK).
// gpu_setup sets it up once, on the first call, and only reads it after: the device, its
// properties and stream priorities, the WMMA kernels' shared-memory opt-ins, and with several
// ranks the NCCL communicator. The Models copy from it what their launches need.
typedef struct {
    cudaDeviceProp prop;
    int priority_least, priority_greatest;  // stream priorities (numerically greatest <= least)
    int wmma_depth_ok[5];   // [stages]: the opt-ins of every WMMA tile at that pipeline depth were given
#if GPU_NCCL
    ncclComm_t comm;        // world > 1 only
#endif
} Gpu;
static const Gpu *gpu_setup(void);  // the process's GPU, set up on the first call
