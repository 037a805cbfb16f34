// train.cu: the GPU trainer. The GPU backend of train.h's contract, one GPU per
// process: a hand-written tensor-core matmul, fused mLSTM cell kernels, FP16
// weights and activations with FP32 master weights, Adam and dynamic loss scaling,
// NCCL all-reduce across processes started by mpirun; and main. Options, data, the
// loop, the log and the checkpoint files are train.h's, the same as the CPU
// trainer's, so a run can move between the CPU and the GPU trainer.
//
//   make gpu && ./train_gpu --hidden 4096 --batch 128 --seq-len 256
//   mpirun -np 8 ./train_gpu ...            one process per GPU, NCCL all-reduce
//
// Which tensors are FP16 and why that loses nothing that matters, loss scaling (Micikevicius et al.
// 2018; Puri et al. 2018 use it with a dynamic S, each prediction's gradient times S, the mean's 1/N in
// FP32) and the cap on S from FP16's range: doc/gpu.md, "Precision".
//
// Two files are part of this one and a first reading skips both. train_switches.cu, included at the
// end, holds the run-time switches (doc/gpu.md, "The run-time switches"; all off by default): --matmul
// cublaslt (cuBLASLt's matmuls; a flag of harness/run.h's table only this trainer takes), and in the
// environment MLSTM_SPLITK=1, MLSTM_OVERLAP=1, MLSTM_L2=1, MLSTM_WARP64=1, MLSTM_NO_GRAPH=1.
// harness/gpu_harness.cuh (its types, included below) and harness/gpu_harness.cu (its code, at the
// end) hold the harness: the error checks, the tests' seam, the process's GPU, the host copies.
// Build-time switches: -DPRECISION_FP32 (everything FP32, the comparison of the
// paper's 4.2x), -DUSE_NCCL (multi-process), -DUSE_MPI (as train.c), -DUSE_CUBLASLT (--matmul
// cublaslt; the Makefile sets it where cuBLASLt builds), -DGPU_DEBUG (every launch waited for and
// checked, no CUDA graphs: make gpu GPU_DEBUG=1).
#define OMPI_SKIP_MPICXX 1  // mpi.h's C++ bindings: not used, and they warn under nvcc
#define MPICH_SKIP_MPICXX 1
#ifdef PRECISION_FP32
#define GPU_FP16 0
#else
#define GPU_FP16 1
#define FP16_MAX 65504.0                 // FP16's largest finite value
#define MAX_ABS_DLOGIT 1.0               // |softmax - onehot| <= 1
// S's cap: dlogits = (softmax - onehot) * S stays finite, and S a power of two (scaling by S and 1/S is exact);
// model_precision hands it to train.h's loop, which caps its scaler there (start, growth and resume)
#define FP16_MAX_LOSS_SCALE 32768.0      // 2^15: the largest power of two S with S * MAX_ABS_DLOGIT <= FP16_MAX
static_assert(FP16_MAX_LOSS_SCALE * MAX_ABS_DLOGIT <= FP16_MAX && 2 * FP16_MAX_LOSS_SCALE * MAX_ABS_DLOGIT > FP16_MAX,
              "the loss-scale cap is the largest power of two that keeps dlogits finite");
#endif
#include "train.h"  // defines: train_main, the model_* contract, Options, and via it mlstm.h, data.h, schedule.h
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <type_traits>
#if defined(USE_NCCL) && defined(USE_MPI)
#include <nccl.h>
#define GPU_NCCL 1
#else
#define GPU_NCCL 0
#endif

#if GPU_FP16
typedef half floatX;  // storage type of weights and activations
#else
typedef float floatX;
#endif
static __host__ __device__ inline float tof(floatX x) { return (float)x; }
static __host__ __device__ inline floatX tox(float x) { return (floatX)x; }
#include "harness/gpu_harness.cuh"  // cudaCheck, launchCheck, ncclCheck; the tests' Seam; the process's Gpu

static int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

// ----------------------------------------------------------------------------
// The run-time switches (doc/gpu.md, "The run-time switches"), each a change that one binary
// measures on and off (dev/gpu_check.sh) and test_gpu --only switches checks against mlstm.h on
// the CPU layer. Read by model_create (switches_of), from the environment and the run's --matmul;
// graph capture bakes them into the graphs, so they belong to a Model. Their code is
// train_switches.cu, which the main path calls through the declarations below the matmul layouts.
typedef struct {
    int splitk;    // MLSTM_SPLITK: products with few blocks split K, partials added in a fixed order
    int overlap;   // MLSTM_OVERLAP: dW_h, dW_mh of finished chunks of time steps on a second stream
    int l2;        // MLSTM_L2: W_mh persisting in L2 for the time loops; the loss read after backward
    int cublaslt;  // --matmul cublaslt: cuBLASLt's matmuls, the epilogues apart
    int warp64;    // MLSTM_WARP64: the 128x128 tile as 4 warps of 64x64 (half the fragment reads per mma)
} Switches;
// ----------------------------------------------------------------------------
// The launch context. Every launcher of this file takes one: the stream its work goes to, the
// switches, the SMs its products are planned for, the stream's own workspaces and the cuBLASLt
// plans. A Model owns its context (model_create) and passes it down, so two models (training
// and validation) share no stream, workspace, plan or setting; switch overlap's weight
// gradients run in a copy of it on the model's second stream, with a bounded grid beside the
// backward loop (wgrad_chunk). No launch reads a global: the process's GPU (gpu_setup) is set
// once, and a Model copies what its launches need from it. The tests and benchmarks steer and watch
// the launches through the context's Seam (harness/gpu_harness.cuh).
typedef struct LtPlans LtPlans;  // cuBLASLt's handle and plans (train_switches.cu)
typedef struct {
    cudaStream_t stream;
    int sms;                  // the SMs the products are planned for: the device's (a test may plan for fewer)
    Switches sw;
    float *splitk_ws;         // split-K's partial sums on this stream (switch splitk), splitk_ws_n floats
    size_t splitk_ws_n;
    void *lt_ws;              // cuBLASLt's workspace on this stream (switch cublaslt), lt_ws_n bytes
    size_t lt_ws_n;
    float *lt_scratch;        // a product before its mLSTM epilogue (switch cublaslt), lt_scratch_n floats
    size_t lt_scratch_n;
    LtPlans *lt;              // (switch cublaslt)
    int grid_bound;           // at most this many blocks a product (0: no bound): switch overlap, beside the loop
    int lt_sm_target;         // cuBLASLt plans for this many SMs (0: all of them): the same
    Seam *seam;               // the tests' knobs and counts (harness/gpu_harness.cuh)
} Launch;

// Launch shapes. Pointwise kernels run BLOCK_THREADS threads a block; the row
// kernels (weight norm) give each row one warp, WARPS_PER_BLOCK rows a block.
#define WARP_SIZE 32
#define BLOCK_THREADS 256
#define WARPS_PER_BLOCK (BLOCK_THREADS / WARP_SIZE)
#define ALL_LANES 0xffffffffu  // shuffle mask: every lane of the warp takes part

// ----------------------------------------------------------------------------
// Matmul epilogue: what becomes of one FP32 accumulator acc = (A.B)[r,c] on its way out.
// A product is either written plainly or finishes the mLSTM equation it is part of
// (mlstm.h's mlstm_forward and mlstm_backward), in the same pass, so the per-step chain
// makes no extra trip through memory. The equation's operands are (rows, ld) like the output.
typedef enum {
    EPI_PLAIN,       // out = scale * acc + bias[c], or out += that (accumulate: z_t = (W_x e_t + b) + W_h m_t)
    EPI_MT_PRODUCT,  // acc = W_mh h_{t-1}: mh = acc (kept for backward), m_t = mx * mh
    EPI_DM_SPLIT,    // acc = dm = dz W_h: dm flows into both factors of m_t, dmx = dm * mh, dmh = dm * mx
} EpilogueKind;

typedef struct {
    EpilogueKind kind;
    int ld;                      // columns of the output and of every operand
    float *outf;                 // the output (out, m_t or dmx) in FP32 ...
    floatX *outx;                // ... or in the storage type (exactly one of the two)
    float scale;                 // EPI_PLAIN: 1, or the mean's 1/N for FP32 gradients
    const float *bias;           // EPI_PLAIN: NULL or (ld,)
    int accumulate;              // EPI_PLAIN: add to the output
    const uint8_t *reset_rows;   // m_t, dm: rows r with reset_rows[r * reset_stride] had h_{t-1} = 0
    int reset_stride;
    const floatX *mx, *mh;       // m_t's factors W_mx e_t and W_mh h_{t-1}
    floatX *mh_out, *dmh_out;    // mh (EPI_MT_PRODUCT), dmh (EPI_DM_SPLIT)
} Epilogue;

static __device__ inline void epilogue_store(const Epilogue &e, int r, int c, float acc) {
    size_t i = (size_t)r * e.ld + c;
    if (e.reset_rows && e.reset_rows[(size_t)r * e.reset_stride]) acc = 0.f;
    switch (e.kind) {
    case EPI_MT_PRODUCT:
        e.mh_out[i] = tox(acc);
        e.outx[i] = tox(tof(e.mx[i]) * acc);
        return;
    case EPI_DM_SPLIT:
        e.dmh_out[i] = tox(acc * tof(e.mx[i]));
        e.outx[i] = tox(acc * tof(e.mh[i]));
        return;
    case EPI_PLAIN:
        acc *= e.scale;
        if (e.bias) acc += e.bias[c];
        if (e.outf) e.outf[i] = e.accumulate ? e.outf[i] + acc : acc;
        else e.outx[i] = tox(e.accumulate ? tof(e.outx[i]) + acc : acc);
        return;
    }
}

// The three layouts of the model (row-major, as mlstm.h):
//   MM_NT  out (N,O) = in (N,K) . W (O,K)^T      forward, x W^T
//   MM_NN  out (N,K) = dOut (N,O) . W (O,K)      input gradient, dY W
//   MM_TN  out (O,K) = dOut (N,O)^T . in (N,K)   weight gradient, over all T*B rows
// In GEMM terms C (M,N) = A (M,K) . B (K,N) where A is stored transposed (ACOL) for
// TN and B is stored transposed (BCOL) for NT; all leading dimensions are dense.
enum { MM_NT, MM_NN, MM_TN };
// how an operand is stored, the kernels' ACOL and BCOL: as the GEMM reads it, or transposed
constexpr bool AS_IS = false, TRANSPOSED = true;

// ----------------------------------------------------------------------------
// The run-time switches' code, in train_switches.cu (included at the end of this file): what the
// main path calls, each call only with its switch on.
static Switches switches_of(const Options *o);  // the run's --matmul and MLSTM_* environment
// switch cublaslt: the product by cuBLASLt, through e; false where it has no algorithm for the shape
static bool matmul_lt(const Launch *L, int layout, int M, int N, int K, const floatX *A, const floatX *B,
                      const Epilogue &e);
#define LT_WORKSPACE_BYTES (32u << 20)  // cuBLASLt's workspace, one a stream
static LtPlans *lt_plans_new(void);     // a model's plans (none made yet); lt_plans_free frees what they hold
static void lt_plans_free(LtPlans *lt);
// switch splitk: into how many parts K splits (1: none), the partial sums' workspace of a stream, the
// buffer a split product's partials go to, and their sum in a fixed order through the epilogue
static int split_factor(long blocks, int K, long cap, int min_k);
static size_t splitk_ws_floats(int sms);
static float *splitk_partials(const Launch *L, int splits, int M, int N, int K);
static void splitk_reduce(const Launch *L, const float *partial, int splits, int M, int N, const Epilogue &e);
// switch l2: W_mh persisting in L2 for the launches on the model's main stream
static void l2_window(Model *md, const cudaDeviceProp *prop);
// switch overlap: the backward loop's chunks (1 without it); chunk j's dW_h and dW_mh on the model's
// second stream, beside the loop; the second stream joined back to the main one after it
static int overlap_chunks(const Model *md);
static void wgrad_chunk(Model *md, int j, int t0, int steps);
static void overlap_join(Model *md);

// ----------------------------------------------------------------------------
// The harness's code, in harness/gpu_harness.cu (included at the end of this file): what the main path
// calls. The seam's knobs at the trainer's values, and its event i of a time step (Seam.step_events).
static Seam seam_defaults(void);
static void seam_mark(const Launch *L, int i);
// a warning (to out) naming the products of a step whose shapes run on the SIMT kernel; returns how many
static int warn_simt_shapes(const Launch *L, int H, int D, int B, int T, FILE *out);
// a batch's inputs, targets and resets (NULL: none) to the device
static void upload_batch(Model *md, const uint8_t *in, const uint8_t *tg, const uint8_t *rs);

// ----------------------------------------------------------------------------
// The tensor-core matmul (FP16 build): WMMA 16x16x16 FP16 fragments, FP32
// accumulators. A block computes a BM x BN tile of C with (BM/WM) x (BN/WN) warps
// of WM x WN each, stepping through K in slabs of BK = 32 held in shared memory in
// their global layout (row or column major, + 8 halves of padding against bank
// conflicts), STAGES deep. On sm_80+ slabs arrive by cp.async while the previous
// slab is multiplied; before that the same code copies synchronously (sm_70/75).
// Needs M % BM == N % BN == K % 32 == 0 and 16-byte aligned operands; the
// dispatcher sends anything else to the SIMT kernel below.

#if GPU_FP16
using namespace nvcuda;

static __device__ inline void copy16(void *smem, const void *gmem) {
#if __CUDA_ARCH__ >= 800
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#else
    *(uint4 *)smem = *(const uint4 *)gmem;
#endif
}
static __device__ inline void copy_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> static __device__ inline void copy_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

#define FRAG 16                  // WMMA fragments are FRAG x FRAG x FRAG
#define FRAG_ELEMS (FRAG * FRAG)  // one accumulator fragment, staged in shared memory by the epilogue
#define HALVES_PER_COPY 8         // 16 bytes, one cp.async
// STAGES: slabs in shared memory, STAGES - 1 of them in flight while one is multiplied. 3 in
// training; the matmul benchmark also times 2 and 4 (the Seam's wmma_stages), which measures the
// latency the per-step products are bound by.
#define WMMA_STAGES 3
template <int BM, int BN, int WM, int WN, bool ACOL, bool BCOL, int STAGES_ = WMMA_STAGES> struct WmmaTile {
    static constexpr int BK = 32, PAD = 8, STAGES = STAGES_;
    static constexpr int THREADS = (BM / WM) * (BN / WN) * WARP_SIZE;  // one warp per WM x WN
    static constexpr int A_ROWS = ACOL ? BK : BM, A_COLS = ACOL ? BM : BK;  // a slab as stored
    static constexpr int B_ROWS = BCOL ? BN : BK, B_COLS = BCOL ? BK : BN;
    static constexpr int A_SIZE = A_ROWS * (A_COLS + PAD), B_SIZE = B_ROWS * (B_COLS + PAD);  // halves
    static constexpr int SMEM = STAGES * (A_SIZE + B_SIZE) * 2;  // bytes; reused by the epilogue
    static_assert(SMEM >= THREADS / WARP_SIZE * FRAG_ELEMS * 4, "epilogue staging must fit");
};

// One BK-slab (k0 .. k0+BK) of the A and B tiles into shared memory, 16 bytes a copy.
template <typename P, bool ACOL, bool BCOL>
static __device__ inline void load_slab(half *as, half *bs, const half *A, const half *B, int lda, int ldb, int m0,
                                        int n0, int k0) {
    const half *ag = ACOL ? A + (size_t)k0 * lda + m0 : A + (size_t)m0 * lda + k0;
    const half *bg = BCOL ? B + (size_t)n0 * ldb + k0 : B + (size_t)k0 * ldb + n0;
    constexpr int H8 = HALVES_PER_COPY;
    static_assert(P::A_ROWS * P::A_COLS % (H8 * P::THREADS) == 0, "A slab: whole copies per thread");
    static_assert(P::B_ROWS * P::B_COLS % (H8 * P::THREADS) == 0, "B slab: whole copies per thread");
    #pragma unroll
    for (int it = 0; it < P::A_ROWS * P::A_COLS / (H8 * P::THREADS); it++) {
        int i = threadIdx.x + it * P::THREADS;
        int r = i / (P::A_COLS / H8), c = i % (P::A_COLS / H8) * H8;
        copy16(as + r * (P::A_COLS + P::PAD) + c, ag + (size_t)r * lda + c);
    }
    #pragma unroll
    for (int it = 0; it < P::B_ROWS * P::B_COLS / (H8 * P::THREADS); it++) {
        int i = threadIdx.x + it * P::THREADS;
        int r = i / (P::B_COLS / H8), c = i % (P::B_COLS / H8) * H8;
        copy16(bs + r * (P::B_COLS + P::PAD) + c, bg + (size_t)r * ldb + c);
    }
}

// The block's tile of C at rows m0.., columns n0... Split-K (switch splitk): gridDim.z splits of K,
// block z walks K / gridDim.z from z K / gridDim.z and writes its raw product to partial[z] (M,N)
// FP32 straight from its fragments (no staging: 32-byte aligned, as N % 64 == 0 makes every
// fragment's corner); splitk_reduce_kernel adds them and applies the epilogue. Without it
// (gridDim.z 1, partial NULL) the epilogue is applied here.
template <int BM, int BN, int WM, int WN, bool ACOL, bool BCOL, int STAGES_>
static __device__ inline void wmma_block_tile(const half *A, const half *B, int M, int N, int K, const Epilogue &e,
                                              float *partial, int m0, int n0) {
    typedef WmmaTile<BM, BN, WM, WN, ACOL, BCOL, STAGES_> P;
    typedef typename std::conditional<ACOL, wmma::col_major, wmma::row_major>::type LayoutA;
    typedef typename std::conditional<BCOL, wmma::col_major, wmma::row_major>::type LayoutB;
    constexpr int BK = P::BK, STAGES = P::STAGES, FM = WM / FRAG, FN = WN / FRAG;
    extern __shared__ __align__(128) unsigned char smem[];
    half *As = (half *)smem, *Bs = As + STAGES * P::A_SIZE;
    const int lda = ACOL ? M : K, ldb = BCOL ? K : N;
    const int warp = threadIdx.x / WARP_SIZE, wm = warp / (BN / WN), wn = warp % (BN / WN);

    wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float> acc[FM][FN];
    for (int i = 0; i < FM; i++)
        for (int j = 0; j < FN; j++) wmma::fill_fragment(acc[i][j], 0.f);
    const int KT = K / gridDim.z / BK, kb = blockIdx.z * KT * BK;  // this block's slabs, and where they start
    for (int s = 0; s < STAGES - 1; s++) {  // prologue; empty groups keep the wait count uniform
        if (s < KT)
            load_slab<P, ACOL, BCOL>(As + s * P::A_SIZE, Bs + s * P::B_SIZE, A, B, lda, ldb, m0, n0, kb + s * BK);
        copy_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        copy_wait<STAGES - 2>();  // slab kt has landed ...
        __syncthreads();          // ... for every thread, and slab kt-1 is no longer being read
        if (kt + STAGES - 1 < KT) {
            int st = (kt + STAGES - 1) % STAGES;
            int k0 = kb + (kt + STAGES - 1) * BK;
            load_slab<P, ACOL, BCOL>(As + st * P::A_SIZE, Bs + st * P::B_SIZE, A, B, lda, ldb, m0, n0, k0);
        }
        copy_commit();
        const half *as = As + (kt % STAGES) * P::A_SIZE, *bs = Bs + (kt % STAGES) * P::B_SIZE;
        #pragma unroll
        for (int kk = 0; kk < BK; kk += FRAG) {
            // the B fragments of this k16 step, then one A fragment at a time: a warp holds FN + 1
            // fragments besides its accumulators, not FM + FN (the 64x64 warp's 128 accumulator
            // registers leave little else under the 168 that 3 blocks per SM allow)
            wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, half, LayoutB> b[FN];
            #pragma unroll
            for (int j = 0; j < FN; j++) {
                int n = wn * WN + j * FRAG;
                if (BCOL) wmma::load_matrix_sync(b[j], bs + n * (BK + P::PAD) + kk, BK + P::PAD);
                else wmma::load_matrix_sync(b[j], bs + kk * (BN + P::PAD) + n, BN + P::PAD);
            }
            #pragma unroll
            for (int i = 0; i < FM; i++) {
                wmma::fragment<wmma::matrix_a, FRAG, FRAG, FRAG, half, LayoutA> a;
                int m = wm * WM + i * FRAG;
                if (ACOL) wmma::load_matrix_sync(a, as + kk * (BM + P::PAD) + m, BM + P::PAD);
                else wmma::load_matrix_sync(a, as + m * (BK + P::PAD) + kk, BK + P::PAD);
                #pragma unroll
                for (int j = 0; j < FN; j++) wmma::mma_sync(acc[i][j], a, b[j], acc[i][j]);
            }
        }
    }
    copy_wait<0>();  // (only empty groups are left)
    if (partial) {  // a split: the raw partial sums, stored straight from the fragments
        float *tile = partial + ((size_t)blockIdx.z * M + m0 + wm * WM) * N + n0 + wn * WN;
        #pragma unroll
        for (int i = 0; i < FM; i++)
            #pragma unroll
            for (int j = 0; j < FN; j++)
                wmma::store_matrix_sync(tile + (size_t)i * FRAG * N + j * FRAG, acc[i][j], N, wmma::mem_row_major);
        return;
    }
    // the epilogue needs each accumulator's row and column, which a fragment does not expose: each
    // warp stages one FRAG x FRAG fragment at a time in shared memory (the slabs' space, now free)
    // and writes it through the epilogue, a row of FRAG columns per half-warp
    __syncthreads();
    float *staged = (float *)smem + warp * FRAG_ELEMS;
    const int lane = threadIdx.x % WARP_SIZE;
    #pragma unroll
    for (int i = 0; i < FM; i++)
        #pragma unroll
        for (int j = 0; j < FN; j++) {
            wmma::store_matrix_sync(staged, acc[i][j], FRAG, wmma::mem_row_major);
            __syncwarp();
            for (int q = lane; q < FRAG_ELEMS; q += WARP_SIZE)
                epilogue_store(e, m0 + wm * WM + i * FRAG + q / FRAG, n0 + wn * WN + j * FRAG + q % FRAG, staged[q]);
            __syncwarp();
        }
}
// Before sm_80 there is no cp.async, so the benchmark's other depths (2 and 4 slabs, which time
// its latency) are not built there, and matmul_setup does not offer them (sm_75's 2-deep 64x64
// tile would spill).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define WMMA_DEPTH_BUILT(stages) ((stages) == WMMA_STAGES)
#else
#define WMMA_DEPTH_BUILT(stages) true
#endif
// The 64x64 tile states the 7 blocks per SM its shared memory allows on sm_90 (without it ptxas
// gives sm_80's NN layout 72 registers and a spill); the 128x128 tiles leave ptxas its own choice (0:
// none), which is 2 blocks of 8 warps or 3 of 4 without spills, where asking for 3 spills. Block (x, y)
// computes tile (y, x). WALK: a bounded grid (Launch.grid_bound: switch overlap's weight gradients beside
// the backward loop), gridDim.x blocks that walk the tiles in turn, gridDim.x apart; its own kernel,
// so the loop costs the others no registers, and with registers for 2 blocks an SM (a block of the
// 8-warp tile takes at most half an SM's: the loop's blocks keep room beside it).
template <int BM, int BN, int WM, int WN, bool ACOL, bool BCOL, int STAGES_, bool WALK>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * WARP_SIZE, WALK ? 2 : BM == 64 ? 7 : 0)
matmul_wmma_kernel(const half *A, const half *B, int M, int N, int K, Epilogue e, float *partial) {
    if constexpr (!WMMA_DEPTH_BUILT(STAGES_)) {
        __trap();
    } else if constexpr (WALK) {
        const int tiles_n = N / BN, tiles = tiles_n * (M / BM);
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            wmma_block_tile<BM, BN, WM, WN, ACOL, BCOL, STAGES_>(A, B, M, N, K, e, partial, tile / tiles_n * BM,
                                                                 tile % tiles_n * BN);
            __syncthreads();  // the next tile's slabs overwrite the shared memory this one's epilogue staged in
        }
    } else {
        wmma_block_tile<BM, BN, WM, WN, ACOL, BCOL, STAGES_>(A, B, M, N, K, e, partial, blockIdx.y * BM,
                                                             blockIdx.x * BN);
    }
}

// The launch of one tile's kernel at one pipeline depth; a bounded grid for the weight gradients'
// layout (TN) at the trainer's depth: per split at most grid_bound / splits blocks.
template <int BM, int BN, int WM, int WN, bool ACOL, bool BCOL, int STAGES_>
static void matmul_wmma_at(const Launch *L, const half *A, const half *B, int M, int N, int K, const Epilogue &e,
                           int splits, float *partial) {
    typedef WmmaTile<BM, BN, WM, WN, ACOL, BCOL, STAGES_> P;
    if constexpr (ACOL && !BCOL && STAGES_ == WMMA_STAGES) {
        const int per_split = L->grid_bound > splits ? L->grid_bound / splits : 1;
        if (L->grid_bound && (long)(N / BN) * (M / BM) > per_split) {
            auto walk = matmul_wmma_kernel<BM, BN, WM, WN, ACOL, BCOL, STAGES_, true>;
            walk<<<dim3(per_split, 1, splits), P::THREADS, P::SMEM, L->stream>>>(A, B, M, N, K, e, partial);
            launchCheck();
            L->seam->walking++;
            return;
        }
    }
    auto kernel = matmul_wmma_kernel<BM, BN, WM, WN, ACOL, BCOL, STAGES_, false>;
    kernel<<<dim3(N / BN, M / BM, splits), P::THREADS, P::SMEM, L->stream>>>(A, B, M, N, K, e, partial);
    launchCheck();
}
// matmul_wmma_at at the pipeline depth the seam says: WMMA_STAGES in training (harness/gpu_harness.cu)
template <int BM, int BN, int WM, int WN, bool ACOL, bool BCOL>
static void matmul_wmma(const Launch *L, const half *A, const half *B, int M, int N, int K, const Epilogue &e,
                        int splits, float *partial);
// More than 48 KB of dynamic shared memory needs an opt-in per kernel (matmul_setup). Returns 0
// when the device has too little shared memory for it (the 4-deep 128x128 tile on sm_75).
template <int BM, int BN, int WM, int WN, bool ACOL, bool BCOL, int STAGES_, bool WALK = false>
static int matmul_wmma_setup(size_t optin) {
    typedef WmmaTile<BM, BN, WM, WN, ACOL, BCOL, STAGES_> P;
    if ((size_t)P::SMEM > optin) return 0;
    auto kernel = matmul_wmma_kernel<BM, BN, WM, WN, ACOL, BCOL, STAGES_, WALK>;
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, P::SMEM));
    return 1;
}
template <int STAGES_> static int matmul_wmma_setup_depth(size_t optin) {
    const int T = 128, S = 64;  // TILE_BIG, TILE_SMALL (below)
    if constexpr (STAGES_ == WMMA_STAGES)  // the bounded grid's kernels (matmul_wmma_at)
        if (!(matmul_wmma_setup<T, T, 64, 32, TRANSPOSED, AS_IS, STAGES_, true>(optin) &
              matmul_wmma_setup<T, T, 64, 64, TRANSPOSED, AS_IS, STAGES_, true>(optin) &
              matmul_wmma_setup<S, S, 32, 32, TRANSPOSED, AS_IS, STAGES_, true>(optin)))
            return 0;
    return matmul_wmma_setup<T, T, 64, 32, AS_IS, TRANSPOSED, STAGES_>(optin) &
           matmul_wmma_setup<T, T, 64, 32, AS_IS, AS_IS, STAGES_>(optin) &
           matmul_wmma_setup<T, T, 64, 32, TRANSPOSED, AS_IS, STAGES_>(optin) &
           matmul_wmma_setup<T, T, 64, 64, AS_IS, TRANSPOSED, STAGES_>(optin) &  // switch warp64
           matmul_wmma_setup<T, T, 64, 64, AS_IS, AS_IS, STAGES_>(optin) &
           matmul_wmma_setup<T, T, 64, 64, TRANSPOSED, AS_IS, STAGES_>(optin) &
           matmul_wmma_setup<S, S, 32, 32, AS_IS, TRANSPOSED, STAGES_>(optin) &
           matmul_wmma_setup<S, S, 32, 32, AS_IS, AS_IS, STAGES_>(optin) &
           matmul_wmma_setup<S, S, 32, 32, TRANSPOSED, AS_IS, STAGES_>(optin);
}
#endif

// ----------------------------------------------------------------------------
// The SIMT matmul: any shape and alignment (bounds-checked), FP32 FMAs. The FP32
// build's matmul, and the FP16 build's path for shapes that are not tile multiples.
// A block computes a SIMT_TILE x SIMT_TILE tile, each of its SIMT_THREADS threads a
// 4x4 patch; BK = 16.
#define SIMT_TILE 64
#define SIMT_THREADS ((SIMT_TILE / 4) * (SIMT_TILE / 4))

template <bool ACOL, bool BCOL>
__global__ void __launch_bounds__(SIMT_THREADS)
matmul_simt_kernel(const floatX *A, const floatX *B, int M, int N, int K, Epilogue e) {
    constexpr int TS = SIMT_TILE, BK = 16;
    __shared__ __align__(16) float As[BK][TS + 4], Bs[BK][TS + 4];  // As[k][m], Bs[k][n]
    const int tx = threadIdx.x % (TS / 4), ty = threadIdx.x / (TS / 4), m0 = blockIdx.y * TS, n0 = blockIdx.x * TS;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        // reads run along each operand's contiguous dimension
        for (int i = threadIdx.x; i < BK * TS; i += SIMT_THREADS) {
            int kk = ACOL ? i / TS : i % BK, mm = ACOL ? i % TS : i / BK, m = m0 + mm, k = k0 + kk;
            As[kk][mm] = m < M && k < K ? tof(ACOL ? A[(size_t)k * M + m] : A[(size_t)m * K + k]) : 0.f;
            int kb = BCOL ? i % BK : i / TS, nn = BCOL ? i / BK : i % TS, n = n0 + nn, kn = k0 + kb;
            Bs[kb][nn] = n < N && kn < K ? tof(BCOL ? B[(size_t)n * K + kn] : B[(size_t)kn * N + n]) : 0.f;
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float4 a = *(const float4 *)&As[kk][ty * 4], b = *(const float4 *)&Bs[kk][tx * 4];
            float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
            #pragma unroll
            for (int i = 0; i < 4; i++)
                #pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int r = m0 + ty * 4 + i, c = n0 + tx * 4 + j;
            if (r < M && c < N) epilogue_store(e, r, c, acc[i][j]);
        }
}

template <bool ACOL, bool BCOL>
static void matmul_simt(const Launch *L, const floatX *A, const floatX *B, int M, int N, int K, const Epilogue &e) {
    dim3 grid(ceil_div(N, SIMT_TILE), ceil_div(M, SIMT_TILE));
    matmul_simt_kernel<ACOL, BCOL><<<grid, SIMT_THREADS, 0, L->stream>>>(A, B, M, N, K, e);
    launchCheck();
}

// Which kernel runs a shape (FP16 build): a TILE_BIG square tile where its blocks
// fill at least TILE_BIG_MIN_FILL = 90% of one wave on the SMs, else TILE_SMALL (the per-step matmuls
// have only B rows), else SIMT. K must be a multiple of the WMMA slab (32), operands
// 16-byte aligned. 90%, not 100%: at B=512 the per-step W_mh products give 128 big
// blocks for an H200's 132 SMs, and the big tile reads each weight slab half as
// often as four waves of small ones would (dev/gpu-perf.md). With switch splitk the rule
// counts blocks x splits (split_factor, train_switches.cu).
enum { MM_SIMT, MM_WMMA64, MM_WMMA128 };
#define TILE_BIG 128
#define TILE_SMALL 64
#define TILE_BIG_MIN_FILL 90  // percent of a wave
#define WMMA_K_MULTIPLE 32
#define SPLIT_MIN_K 512  // split-K's least depth a split, 16 slabs: its prologue and epilogue stay small beside them
// The kernel a product runs on; *splits (when not NULL) gets the split-K factor (1 without the switch).
static int matmul_plan(const Launch *L, int M, int N, int K, const void *A, const void *B, int *splits = NULL) {
    if (splits) *splits = 1;
    if (!GPU_FP16 || K % WMMA_K_MULTIPLE || ((uintptr_t)A | (uintptr_t)B) % 16) return MM_SIMT;
    const int split = splits && L->sw.splitk, sms = L->sms, min_k = L->seam->split_min_k;
    if (M % TILE_BIG == 0 && N % TILE_BIG == 0) {
        long big_blocks = (long)(M / TILE_BIG) * (N / TILE_BIG);
        int splits_big = split ? split_factor(big_blocks, K, 2L * sms, min_k) : 1;
        if (big_blocks * splits_big * 100 >= (long)sms * TILE_BIG_MIN_FILL) {
            if (splits) *splits = splits_big;
            return MM_WMMA128;
        }
    }
    if (M % TILE_SMALL == 0 && N % TILE_SMALL == 0) {
        if (split) *splits = split_factor((long)(M / TILE_SMALL) * (N / TILE_SMALL), K, 4L * sms, min_k);
        return MM_WMMA64;
    }
    return MM_SIMT;
}

// C (M,N) = A . B through the epilogue e, for the layouts above; M, N, K are the rows, columns and
// depth of the product, the order every matmul of the project takes (mlstm.h, "Matmuls").
static void matmul(const Launch *L, int layout, int M, int N, int K, const floatX *A, const floatX *B,
                   const Epilogue &e) {
    L->seam->bounded += L->grid_bound > 0 || L->lt_sm_target > 0;
    if (L->sw.cublaslt && matmul_lt(L, layout, M, N, K, A, B, e)) return;  // switch cublaslt (train_switches.cu)
    int splits;
    int plan = matmul_plan(L, M, N, K, A, B, &splits);
    // switch splitk (train_switches.cu; the FP32 build never splits: its SIMT kernel has no split-K)
    float *partial = splits > 1 ? splitk_partials(L, splits, M, N, K) : NULL;
    if (plan == MM_WMMA128) L->seam->wmma128[L->sw.warp64]++;
#if GPU_FP16
    if (plan == MM_WMMA128 && L->sw.warp64) {  // 4 warps of 64 x 64 (switch warp64)
        const int T = TILE_BIG;
        if (layout == MM_NT) matmul_wmma<T, T, 64, 64, AS_IS, TRANSPOSED>(L, A, B, M, N, K, e, splits, partial);
        else if (layout == MM_NN) matmul_wmma<T, T, 64, 64, AS_IS, AS_IS>(L, A, B, M, N, K, e, splits, partial);
        else matmul_wmma<T, T, 64, 64, TRANSPOSED, AS_IS>(L, A, B, M, N, K, e, splits, partial);
    } else if (plan == MM_WMMA128) {  // 8 warps of 64 x 32
        const int T = TILE_BIG;
        if (layout == MM_NT) matmul_wmma<T, T, 64, 32, AS_IS, TRANSPOSED>(L, A, B, M, N, K, e, splits, partial);
        else if (layout == MM_NN) matmul_wmma<T, T, 64, 32, AS_IS, AS_IS>(L, A, B, M, N, K, e, splits, partial);
        else matmul_wmma<T, T, 64, 32, TRANSPOSED, AS_IS>(L, A, B, M, N, K, e, splits, partial);
    } else if (plan == MM_WMMA64) {  // 4 warps of 32 x 32
        const int T = TILE_SMALL;
        if (layout == MM_NT) matmul_wmma<T, T, 32, 32, AS_IS, TRANSPOSED>(L, A, B, M, N, K, e, splits, partial);
        else if (layout == MM_NN) matmul_wmma<T, T, 32, 32, AS_IS, AS_IS>(L, A, B, M, N, K, e, splits, partial);
        else matmul_wmma<T, T, 32, 32, TRANSPOSED, AS_IS>(L, A, B, M, N, K, e, splits, partial);
    }
#endif
    if (partial) splitk_reduce(L, partial, splits, M, N, e);  // the splits' sum, through e
    if (plan != MM_SIMT) return;
    if (layout == MM_NT) matmul_simt<AS_IS, TRANSPOSED>(L, A, B, M, N, K, e);
    else if (layout == MM_NN) matmul_simt<AS_IS, AS_IS>(L, A, B, M, N, K, e);
    else matmul_simt<TRANSPOSED, AS_IS>(L, A, B, M, N, K, e);
}

// Epilogues by role. The plain ones write the product in FP32 or the storage type.
static Epilogue epi_plain(float *outf, floatX *outx, int ld) {
    Epilogue e;
    memset(&e, 0, sizeof e);
    e.kind = EPI_PLAIN;
    e.scale = 1.f;
    e.outf = outf;
    e.outx = outx;
    e.ld = ld;
    return e;
}
static Epilogue epi_f32(float *out, int ld) { return epi_plain(out, NULL, ld); }
static Epilogue epi_x(floatX *out, int ld) { return epi_plain(NULL, out, ld); }
// A weight gradient, FP32: the product sums N predictions' loss-scaled gradients;
// times 1/N it is S * d(mean loss)/dW, what the contract returns.
static Epilogue epi_grad(float *out, int ld, int N) {
    Epilogue e = epi_f32(out, ld);
    e.scale = 1.f / (float)N;
    return e;
}
// m_t (forward, step t), all (B,H): the product is W_mh h_{t-1}; rows reset before
// step t (reset_t[b * T]) see h_{t-1} = 0.
static Epilogue epi_mt_product(floatX *mt, floatX *mh, const floatX *mx, const uint8_t *reset_t, int T, int H) {
    Epilogue e = epi_x(mt, H);
    e.kind = EPI_MT_PRODUCT;
    e.mh_out = mh;
    e.mx = mx;
    e.reset_rows = reset_t;
    e.reset_stride = T;
    return e;
}
// out += the product, FP32: z_t = (W_x e_t + b) + W_h m_t in place (forward, step t, (B,4H)).
static Epilogue epi_add_f32(float *out, int ld) {
    Epilogue e = epi_f32(out, ld);
    e.accumulate = 1;
    return e;
}
// dmx, dmh (backward, step t), (B,H): the product is dm = dz W_h; zero in reset rows,
// where h_{t-1} was the constant 0 (and mh was 0).
static Epilogue epi_dm_split(floatX *dmx, floatX *dmh, const floatX *mh, const floatX *mx, const uint8_t *reset_t,
                             int T, int H) {
    Epilogue e = epi_x(dmx, H);
    e.kind = EPI_DM_SPLIT;
    e.dmh_out = dmh;
    e.mh = mh;
    e.mx = mx;
    e.reset_rows = reset_t;
    e.reset_stride = T;
    return e;
}

// ----------------------------------------------------------------------------
// Reductions shared by the kernels below: fixed trees, so results are the same
// bits on every run (bit-exact resume needs that; no atomics anywhere).

struct SumOp {
    template <typename R> __device__ R operator()(R a, R b) const { return a + b; }
};
struct MaxOp {
    template <typename R> __device__ R operator()(R a, R b) const { return b > a ? b : a; }
};
// Every thread of the block gets op over the block's values: a shuffle tree in each
// warp, then the warps' results in order.
template <typename R, typename Op> static __device__ R block_reduce(R v, Op op) {
    __shared__ R buf[WARP_SIZE];
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) {
        R w = __shfl_xor_sync(ALL_LANES, v, o);
        v = op(v, w);
    }
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, nw = (blockDim.x + WARP_SIZE - 1) / WARP_SIZE;
    __syncthreads();  // buf may still be read by a previous call
    if (lane == 0) buf[warp] = v;
    __syncthreads();
    v = buf[0];
    for (int w = 1; w < nw; w++) v = op(v, buf[w]);
    return v;
}
template <typename R> static __device__ R block_sum(R v) { return block_reduce(v, SumOp()); }
template <typename R> static __device__ R block_max(R v) { return block_reduce(v, MaxOp()); }

// ----------------------------------------------------------------------------
// Weight norm (doc/design.md, "The model"), one warp per row, FP32: W = g V / ||V||
// into the storage-type copy and the row norms for backward; without weight norm
// (g NULL) a plain copy. The row's sums here, the rest in mlstm.h's weightnorm_scale
// and weightnorm_dv, the same code as the CPU's.

__global__ void weightnorm_forward_kernel(floatX *W, float *norms, const float *Vd, const float *g, int rows,
                                          int cols) {
    int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    if (row >= rows) return;
    const float *v = Vd + (size_t)row * cols;
    float n2 = 0.f;
    for (int k = lane; k < cols; k += WARP_SIZE) n2 += v[k] * v[k];
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) n2 += __shfl_xor_sync(ALL_LANES, n2, o);
    float n = sqrtf(n2);
    float s = g ? weightnorm_scale(g[row], n) : 1.f;
    if (g && lane == 0) norms[row] = n;
    for (int k = lane; k < cols; k += WARP_SIZE) W[(size_t)row * cols + k] = tox(s * v[k]);
}
static void weightnorm_forward_gpu(const Launch *L, floatX *W, float *norms, const float *Vd, const float *g, int rows,
                                   int cols) {
    int blocks = ceil_div(rows, WARPS_PER_BLOCK);
    weightnorm_forward_kernel<<<blocks, BLOCK_THREADS, 0, L->stream>>>(W, norms, Vd, g, rows, cols);
    launchCheck();
}

// dg = dW.V / ||V||,  dV = (g / ||V||) (dW - dg V / ||V||), per row (mlstm.h's weightnorm_backward)
__global__ void weightnorm_backward_kernel(float *dV, float *dg, const float *dW, const float *Vd, const float *g,
                                           const float *norms, int rows, int cols) {
    int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    if (row >= rows) return;
    const float *v = Vd + (size_t)row * cols, *dw = dW + (size_t)row * cols;
    float dot = 0.f;
    for (int k = lane; k < cols; k += WARP_SIZE) dot += dw[k] * v[k];
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) dot += __shfl_xor_sync(ALL_LANES, dot, o);
    float n = norms[row];
    float dgj = dot / n;
    float s = weightnorm_scale(g[row], n);
    if (lane == 0) dg[row] = dgj;
    for (int k = lane; k < cols; k += WARP_SIZE) dV[(size_t)row * cols + k] = weightnorm_dv(s, dw[k], dgj, v[k], n);
}
static void weightnorm_backward_gpu(const Launch *L, float *dV, float *dg, const float *dW, const float *Vd,
                                    const float *g, const float *norms, int rows, int cols) {
    int blocks = ceil_div(rows, WARPS_PER_BLOCK);
    weightnorm_backward_kernel<<<blocks, BLOCK_THREADS, 0, L->stream>>>(dV, dg, dW, Vd, g, norms, rows, cols);
    launchCheck();
}

// ----------------------------------------------------------------------------
// Embedding. Tokens arrive as (B,T) bytes; activations are time-major (T,B,...).

// xe[t,b,:] = E[in[b,t],:]   (N,D), from the FP32 master copy of E
__global__ void embed_forward_kernel(floatX *xe, const float *E, const uint8_t *in, int B, int T, int D) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * D) return;
    int d = (int)(i % D), n = (int)(i / D), t = n / B, b = n % B;
    xe[i] = tox(E[(size_t)in[b * T + t] * D + d]);
}
static void embed_forward(const Launch *L, floatX *xe, const float *E, const uint8_t *in, int B, int T, int D) {
    embed_forward_kernel<<<ceil_div((long)B * T * D, BLOCK_THREADS), BLOCK_THREADS, 0, L->stream>>>(xe, E, in, B, T, D);
    launchCheck();
}

// dE[v,:] = sum of dxe[n,:] over the positions n whose input is v. Deterministic and
// sort-free: one block per byte value; its EMB x EMB threads own (column, position
// residue mod EMB) pairs, scan every position in a fixed order, and add their EMB
// partial sums in a fixed order. The scan re-reads the (small) token array per value.
#define EMB 32
__global__ void embed_backward_kernel(float *dE, const float *dxe, const uint8_t *in, int B, int T, int D) {
    __shared__ float part[EMB][EMB + 1];  // + 1: no bank conflicts on the column reads
    const int v = blockIdx.x, x = threadIdx.x, y = threadIdx.y, N = B * T;
    for (int d0 = 0; d0 < D; d0 += EMB) {
        int d = d0 + x;
        float s = 0.f;
        for (int n = y; n < N; n += EMB)
            if (in[(n % B) * T + n / B] == v && d < D) s += dxe[(size_t)n * D + d];
        part[y][x] = s;
        __syncthreads();
        if (y == 0 && d < D) {
            float tot = 0.f;
            for (int k = 0; k < EMB; k++) tot += part[k][x];
            dE[(size_t)v * D + d] = tot;
        }
        __syncthreads();
    }
}
static void embed_backward(const Launch *L, float *dE, const float *dxe, const uint8_t *in, int B, int T, int D,
                           int V) {
    embed_backward_kernel<<<V, dim3(EMB, EMB), 0, L->stream>>>(dE, dxe, in, B, T, D);
    launchCheck();
}

// ----------------------------------------------------------------------------
// The mLSTM cell, one thread per (row b, unit j) of one time step. The math is
// mlstm.h's cell_forward / cell_backward (HOSTDEV), applied to the four gates of
// the unit gathered into registers (stride 1).

// z_t (B,4H) FP32 pre-activations -> c (B,H) FP32, h (B,H); the gates stay in registers
__global__ void cell_forward_kernel(floatX *h, float *c, const float *z, const float *c_prev, const uint8_t *rs, int t,
                                    int T, int B, int H) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * H) return;
    int b = i / H, j = i % H;
    const float *zr = z + (size_t)b * 4 * H + j;
    float g[4] = {zr[0], zr[H], zr[2 * H], zr[3 * H]}, hn;
    c[i] = cell_forward(g, 1, rs[b * T + t] ? 0.f : c_prev[i], &hn);  // a reset row starts from c = 0
    h[i] = tox(hn);
}
static void cell_forward_step(const Launch *L, floatX *h, float *c, const float *z, const float *c_prev,
                              const uint8_t *rs, int t, int T, int B, int H) {
    int blocks = ceil_div((long)B * H, BLOCK_THREADS);
    cell_forward_kernel<<<blocks, BLOCK_THREADS, 0, L->stream>>>(h, c, z, c_prev, rs, t, T, B, H);
    launchCheck();
}

// dh (B,H) FP32 from step t+1 plus dhs[t] from the output layer; dc (B,H) FP32 in
// place: from step t+1 in, into step t-1 out (zero across a reset); dz (B,4H). The
// gates come from z_t, through the forward's own cell_forward: the same bits, and 1 - g
// and 1 - u^2 as FP32 has them (a forget gate near 1 keeps its gradient).
__global__ void cell_backward_kernel(floatX *dz, float *dc, const float *dh, const floatX *dhs, const float *z,
                                     const float *c_prev, const float *c, const uint8_t *rs, int t, int T, int B,
                                     int H) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * H) return;
    int b = i / H, j = i % H, reset = rs[b * T + t];
    const float *zr = z + (size_t)b * 4 * H + j;
    float g[4] = {zr[0], zr[H], zr[2 * H], zr[3 * H]}, d[4], hn;
    const float cp = reset ? 0.f : c_prev[i];
    cell_forward(g, 1, cp, &hn);  // the gates, into g
    float dcp = cell_backward(g, 1, cp, c[i], dh[i] + tof(dhs[i]), dc[i], d);
    dc[i] = reset ? 0.f : dcp;
    floatX *dr = dz + (size_t)b * 4 * H + j;
    for (int q = 0; q < 4; q++) dr[q * H] = tox(d[q]);
}
static void cell_backward_step(const Launch *L, floatX *dz, float *dc, const float *dh, const floatX *dhs,
                               const float *z, const float *c_prev, const float *c, const uint8_t *rs, int t, int T,
                               int B, int H) {
    int blocks = ceil_div((long)B * H, BLOCK_THREADS);
    cell_backward_kernel<<<blocks, BLOCK_THREADS, 0, L->stream>>>(dz, dc, dh, dhs, z, c_prev, c, rs, t, T, B, H);
    launchCheck();
}

// ----------------------------------------------------------------------------
// Softmax + cross-entropy, fused, FP32, one block per row n = (t,b) of the logits:
// loss[n] = logsumexp - logit[target]; with dlogits, (softmax - onehot) * S, the
// gradient of prediction n's own loss, loss-scaled (the mean's 1/N comes later, in
// FP32: doc/gpu.md, "Precision").

__global__ void softmax_xent_kernel(floatX *dlogits, float *losses, const float *logits, const uint8_t *tg,
                                    int B, int T, int V, float s) {
    const int n = blockIdx.x, y = tg[(n % B) * T + n / B];
    const float *x = logits + (size_t)n * V;
    float mx = -INFINITY, sum = 0.f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, x[v]);
    mx = block_max(mx);
    for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(x[v] - mx);
    sum = block_sum(sum);
    if (threadIdx.x == 0) losses[n] = mx + logf(sum) - x[y];
    if (dlogits)
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            dlogits[(size_t)n * V + v] = tox((expf(x[v] - mx) / sum - (v == y ? 1.f : 0.f)) * s);
}
static void softmax_xent_gpu(const Launch *L, floatX *dlogits, float *losses, const float *logits, const uint8_t *tg,
                         int B, int T, int V, float s) {
    softmax_xent_kernel<<<B * T, BLOCK_THREADS, 0, L->stream>>>(dlogits, losses, logits, tg, B, T, V, s);
    launchCheck();
}

// out[c] = scale * sum over rows of x[r,c] (bias gradients; scale = 1/N): fixed chunks of rows,
// then the chunks added in order. The chunks are at least COLSUM_MIN_CHUNKS and as many as give
// COLSUM_THREADS threads in all, so a narrow tensor keeps the SMs busy: b_out's V = 256 columns over
// B T = 65536 rows are 1024 chunks of 64 rows, not 64 blocks each of whose threads adds 1024 rows in
// turn. The count depends on the shape alone: the order of the sums, and so the bits, do not depend
// on the GPU.
#define COLSUM_MIN_CHUNKS 64
#define COLSUM_THREADS (1 << 18)
static int colsum_chunks(int rows, int cols) {
    int chunks = COLSUM_THREADS / (ceil_div(cols, BLOCK_THREADS) * BLOCK_THREADS);
    if (chunks < COLSUM_MIN_CHUNKS) chunks = COLSUM_MIN_CHUNKS;
    return chunks < rows ? chunks : rows > 1 ? rows : 1;
}
// The partial sums' buffer for any number of rows: chunks x cols <= max(COLSUM_THREADS, COLSUM_MIN_CHUNKS cols).
static size_t colsum_part_floats(int cols) {
    size_t by_min = (size_t)COLSUM_MIN_CHUNKS * cols;
    return by_min > COLSUM_THREADS ? by_min : COLSUM_THREADS;
}
__global__ void colsum_partial_kernel(float *part, const floatX *x, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, per = (rows + gridDim.y - 1) / gridDim.y;
    if (c >= cols) return;
    int r0 = blockIdx.y * per, r1 = min(rows, r0 + per);
    float s = 0.f;
    for (int r = r0; r < r1; r++) s += tof(x[(size_t)r * cols + c]);
    part[(size_t)blockIdx.y * cols + c] = s;
}
__global__ void colsum_finish_kernel(float *out, const float *part, int chunks, int cols, float scale) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.f;
    for (int k = 0; k < chunks; k++) s += part[(size_t)k * cols + c];
    out[c] = s * scale;
}
static void colsum(const Launch *L, float *out, float *part /*colsum_part_floats(cols)*/, const floatX *x, int rows,
                   int cols, float scale) {
    const int chunks = colsum_chunks(rows, cols), col_blocks = ceil_div(cols, BLOCK_THREADS);
    colsum_partial_kernel<<<dim3(col_blocks, chunks), BLOCK_THREADS, 0, L->stream>>>(part, x, rows, cols);
    launchCheck();
    colsum_finish_kernel<<<col_blocks, BLOCK_THREADS, 0, L->stream>>>(out, part, chunks, cols, scale);
    launchCheck();
}

// Sums in double over RED_BLOCKS blocks, whose partials the host adds in order: the loss
// (sum of values) and the gradient check (sum of squares, and whether any value is inf/NaN).
#define RED_BLOCKS 256
enum SumOf { SUM_OF_VALUES, SUM_OF_SQUARES };
template <SumOf what> __global__ void sum_kernel(double *part, int *nonfinite, const float *x, size_t n) {
    double s = 0;
    int flag = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        s += what == SUM_OF_SQUARES ? (double)v * v : (double)v;
        flag |= !(fabsf(v) <= FLT_MAX);  // the bound must be finite: !(|inf| <= INFINITY) is false
    }
    s = block_sum(s);
    flag = __syncthreads_or(flag);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = s;
        nonfinite[blockIdx.x] = flag;
    }
}
// A sum's partials, on the device until sum_read.
typedef struct {
    double *part;    // (RED_BLOCKS,)
    int *nonfinite;  // (RED_BLOCKS,)
} DeviceSum;
template <SumOf what> static void sum_launch(const Launch *L, DeviceSum r, const float *x, size_t n) {
    sum_kernel<what><<<RED_BLOCKS, BLOCK_THREADS, 0, L->stream>>>(r.part, r.nonfinite, x, n);
    launchCheck();
}
// The partials to the host (a sync) and their sum, in order; *any_nonfinite when not NULL.
static double sum_read(const Launch *L, DeviceSum r, int *any_nonfinite) {
    double hp[RED_BLOCKS], s = 0;
    int hb[RED_BLOCKS], b = 0;
    cudaCheck(cudaMemcpyAsync(hp, r.part, sizeof hp, cudaMemcpyDeviceToHost, L->stream));
    cudaCheck(cudaMemcpyAsync(hb, r.nonfinite, sizeof hb, cudaMemcpyDeviceToHost, L->stream));
    cudaCheck(cudaStreamSynchronize(L->stream));
    for (int i = 0; i < RED_BLOCKS; i++) {
        s += hp[i];
        b |= hb[i];
    }
    if (any_nonfinite) *any_nonfinite = b;
    return s;
}

// ----------------------------------------------------------------------------
// Optimizer and small pointwise kernels.

// Unscale (1/S) and clip (grad_factor), Adam on the FP32 master weights, in one pass: the
// update of each element is mlstm.h's adam_element, the CPU's own code.
__global__ void adam_kernel(float *p, float *m1, float *m2, const float *grads, size_t n, float grad_factor,
                            AdamStep a) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        adam_element(&p[i], &m1[i], &m2[i], grads[i] * grad_factor, a);
}
static void adam_gpu(const Launch *L, float *p, float *m1, float *m2, const float *grads, size_t n, float grad_factor,
                     AdamStep a) {
    int blocks = 8 * L->sms;  // a grid-stride loop: a few waves of blocks
    adam_kernel<<<blocks, BLOCK_THREADS, 0, L->stream>>>(p, m1, m2, grads, n, grad_factor, a);
    launchCheck();
}
__global__ void divide_kernel(float *x, size_t n, float d) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) x[i] /= d;
}
static void divide_gpu(const Launch *L, float *x, size_t n, float d) {
    divide_kernel<<<4 * L->sms, BLOCK_THREADS, 0, L->stream>>>(x, n, d);
    launchCheck();
}
__global__ void to_x_kernel(floatX *y, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = tox(x[i]);
}
__global__ void to_f32_kernel(float *y, const floatX *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = tof(x[i]);
}
static void to_x(const Launch *L, floatX *y, const float *x, size_t n) {
    to_x_kernel<<<ceil_div((long)n, BLOCK_THREADS), BLOCK_THREADS, 0, L->stream>>>(y, x, n);
    launchCheck();
}
static void to_f32(const Launch *L, float *y, const floatX *x, size_t n) {
    to_f32_kernel<<<ceil_div((long)n, BLOCK_THREADS), BLOCK_THREADS, 0, L->stream>>>(y, x, n);
    launchCheck();
}

#define OVERLAP_CHUNKS 4  // switch overlap: the backward loop's chunks (backward_steps)

// ----------------------------------------------------------------------------
// The model on the device. One allocation holds the FP32 parameters, gradients and
// Adam moments (checkpoint layout, ParamTable views); one holds everything else.

struct Model {
    MlstmConfig cfg;
    int B, T;
    size_t np;
    Mlstm host;            // host copy (built for B=1, T=1): checkpoints and sampling
    real *host_h, *host_c; // (B,H) host copy of the carried training state
    // device: parameters
    float *params, *grads, *adam_m, *adam_v;  // (np,) each, one allocation
    ParamTable p, g;
    floatX *weights;       // the effective weights in the storage type: W[*] then Wout, one buffer
    floatX *W[NWN];        // W[WN_X] (4H,D), W[WN_H] (4H,H), W[WN_MX] (H,D), W[WN_MH] (H,H)
    floatX *Wout;          // (V,H)
    float *dW[NWN];        // gradients of W[*] (alias grads without weight norm)
    float *norms;          // (10H,) row norms, at WnMat.norm_offset
    // device: activations, time-major, N = B*T rows
    uint8_t *tok;          // (3,B,T) inputs, targets, resets
    floatX *xe;            // (N,D) embedded inputs
    float *z;              // (N,4H) e W_x^T + b for all steps; step t adds m_t W_h^T to its rows: the
                           // pre-activations z_t, kept for backward (which recomputes the gates i,f,o,u from them)
    floatX *mx, *mh;       // (N,H) e W_mx^T, h_{t-1} W_mh^T
    floatX *mt;            // (N,H) m_t, their product
    floatX *hs;            // (T+1,B,H) state entering step t at index t
    float *cs;             // (T+1,B,H)
    float *logits;         // (N,V)
    floatX *dlogits;       // (N,V) (softmax - onehot) * S
    float *losses;         // (N,)
    floatX *dz;            // (N,4H)
    floatX *dmx, *dmh;     // (N,H)
    floatX *dhs;           // (N,H) gradient into h_t from the output layer
    float *dh, *dc;        // (B,H) running gradients of the time loop
    float *dxe;            // (N,D)
    float *colpart;        // colsum's partial sums, colsum_part_floats(max(4H,V))
    DeviceSum loss_sum;    // the losses' sum, launched by forward, read by mean_loss
    DeviceSum grad_sumsq;  // the gradients' sum of squares (model_check)
    float *train_h, *train_c;  // (B,H) carried training state
    float *val_h, *val_c;      // (B,H) validation state
    void *pbase, *abase;
    Launch launch;         // the context of every launch for this model (the main stream's)
    cudaStream_t stream2;  // switch overlap's second stream (wgrad_chunk's copy of the context)
    float *splitk_ws2;     // split-K's partial sums on it (switch splitk)
    void *lt_ws2;          // cuBLASLt's workspace on it (switch cublaslt)
    LtPlans *lt;           // cuBLASLt's plans, for both streams (switch cublaslt)
    Seam seam;             // the tests' and benchmarks' knobs and counts (Launch.seam)
#if GPU_NCCL
    ncclComm_t comm;       // the process's (gpu_setup); only the training model all-reduces
#endif
    int use_graphs;        // run the time loops as CUDA graphs (run_steps); 0: launch them directly
    cudaEvent_t ev_chunk[OVERLAP_CHUNKS], ev_join;  // switch overlap's fork after each chunk, and join
    cudaGraphExec_t fwd_graph, bwd_graph;  // the forward and backward time loops, captured on first use
};

// Carves one allocation into the buffers of a table, 256-byte aligned.
typedef struct {
    void **ptr;
    size_t bytes;
} Buf;
#define BUF_ALIGN 256
static size_t buf_rounded(size_t bytes) { return (bytes + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN; }
static void *alloc_bufs(Buf *b, int n, cudaStream_t stream) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += buf_rounded(b[i].bytes);
    char *base;
    cudaCheck(cudaMalloc(&base, total));
    cudaCheck(cudaMemsetAsync(base, 0, total, stream));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        *b[i].ptr = base + off;
        off += buf_rounded(b[i].bytes);
    }
    return base;
}

// ----------------------------------------------------------------------------
// A Model: its buffers (one allocation for the FP32 parameters, gradients and Adam moments, one
// for everything else, from a table), its streams and launch context, and the host model.

// The device buffers of md's table, the switches' workspaces among them.
static void model_alloc(Model *md) {
    const MlstmConfig cfg = md->cfg;
    const size_t V = cfg.V, D = cfg.D, H = cfg.H, B = md->B, N = B * md->T, np = md->np;
    const size_t X = sizeof(floatX), F = sizeof(float);
    const Switches sw = md->launch.sw;
    const cudaStream_t stream = md->launch.stream;
    Buf pb[] = {{(void **)&md->params, F * np}, {(void **)&md->grads, F * np},
                {(void **)&md->adam_m, F * np}, {(void **)&md->adam_v, F * np}};
    md->pbase = alloc_bufs(pb, 4, stream);
    param_table(&md->p, &cfg, md->params);
    param_table(&md->g, &cfg, md->grads);
    WnMat wn[NWN];
    weightnorm_mats(&cfg, wn);
    size_t nW = weightnorm_elems(&cfg);
    float *dW = NULL;  // with weight norm: the gradients of the four effective matrices, back to back
    const size_t splitk_ws_n = sw.splitk ? splitk_ws_floats(md->launch.sms) : 0;
    const size_t lt_ws_n = sw.cublaslt ? LT_WORKSPACE_BYTES : 0, lt_scratch_n = sw.cublaslt ? B * H : 0;
    Buf ab[] = {
        {(void **)&md->weights, X * (nW + V * H)},
        {(void **)&dW, cfg.wnorm ? F * nW : 0},
        {(void **)&md->norms, F * weightnorm_rows(&cfg)},
        {(void **)&md->tok, 3 * N},
        {(void **)&md->xe, X * N * D},
        {(void **)&md->z, F * N * 4 * H},
        {(void **)&md->mx, X * N * H},
        {(void **)&md->mh, X * N * H},
        {(void **)&md->mt, X * N * H},
        {(void **)&md->hs, X * (N + B) * H},
        {(void **)&md->cs, F * (N + B) * H},
        {(void **)&md->logits, F * N * V},
        {(void **)&md->dlogits, X * N * V},
        {(void **)&md->losses, F * N},
        {(void **)&md->dz, X * N * 4 * H},
        {(void **)&md->dmx, X * N * H},
        {(void **)&md->dmh, X * N * H},
        {(void **)&md->dhs, X * N * H},
        {(void **)&md->dh, F * B * H},
        {(void **)&md->dc, F * B * H},
        {(void **)&md->dxe, F * N * D},
        {(void **)&md->colpart, F * colsum_part_floats(4 * H > V ? 4 * H : V)},
        {(void **)&md->loss_sum.part, sizeof(double) * RED_BLOCKS},
        {(void **)&md->loss_sum.nonfinite, sizeof(int) * RED_BLOCKS},
        {(void **)&md->grad_sumsq.part, sizeof(double) * RED_BLOCKS},
        {(void **)&md->grad_sumsq.nonfinite, sizeof(int) * RED_BLOCKS},
        {(void **)&md->train_h, F * B * H},
        {(void **)&md->train_c, F * B * H},
        {(void **)&md->val_h, F * B * H},
        {(void **)&md->val_c, F * B * H},
        {(void **)&md->launch.splitk_ws, F * splitk_ws_n},
        {(void **)&md->splitk_ws2, F * splitk_ws_n},
        {(void **)&md->launch.lt_ws, lt_ws_n},
        {(void **)&md->lt_ws2, lt_ws_n},
        {(void **)&md->launch.lt_scratch, F * lt_scratch_n},
    };
    md->abase = alloc_bufs(ab, sizeof ab / sizeof ab[0], stream);
    md->launch.splitk_ws_n = splitk_ws_n;
    md->launch.lt_ws_n = lt_ws_n;
    md->launch.lt_scratch_n = lt_scratch_n;
    for (int k = 0; k < NWN; k++) {
        md->W[k] = md->weights + wn[k].offset;
        md->dW[k] = cfg.wnorm ? dW + wn[k].offset : md->g.t[wn[k].param];
    }
    md->Wout = md->weights + nW;
}

// The model of the run's options o (its --hidden, --embed, weight norm, --seq-len, --seed and
// --matmul; the other switches from the environment) for B rows.
static Model *model_create(const Options *o, int B) {
    const Gpu *gpu = gpu_setup();
    Model *md = (Model *)mallocCheck(sizeof(Model));
    memset(md, 0, sizeof *md);
    md->cfg = o->model;
    md->B = B;
    md->T = o->T;
    mlstm_build(&md->host, md->cfg, 1, 1);
    mlstm_init(&md->host, (uint64_t)o->seed);  // the same initial weights as the CPU trainer
    md->np = md->host.nparams;
    md->host_h = (real *)mallocCheck(sizeof(real) * B * md->cfg.H);
    md->host_c = (real *)mallocCheck(sizeof(real) * B * md->cfg.H);
    memset(md->host_h, 0, sizeof(real) * B * md->cfg.H);
    memset(md->host_c, 0, sizeof(real) * B * md->cfg.H);
    // The main stream has the device's highest priority: the time loops are the critical path, and
    // the block scheduler starts the blocks of a higher-priority stream first whenever an SM has
    // room. Switch overlap's second stream (forked from and joined to it in the graph) has the
    // lowest: its weight gradients fill what the loop leaves idle, and never get ahead of it. Both
    // are blocking streams, so work a caller puts on stream 0 (the tests' cudaMemcpy) still waits
    // for them, and they for that work; a CUDA graph can be captured only from a stream other than 0.
    Launch *L = &md->launch;
    cudaCheck(cudaStreamCreateWithPriority(&L->stream, cudaStreamDefault, gpu->priority_greatest));
    cudaCheck(cudaStreamCreateWithPriority(&md->stream2, cudaStreamDefault, gpu->priority_least));
    L->sms = gpu->prop.multiProcessorCount;
    L->sw = switches_of(o);
    md->seam = seam_defaults();
    L->seam = &md->seam;
    L->lt = md->lt = lt_plans_new();
    model_alloc(md);
#if GPU_NCCL
    md->comm = gpu->comm;
#endif
    if (L->sw.l2) l2_window(md, &gpu->prop);
    const char *no_graph = getenv("MLSTM_NO_GRAPH");  // MLSTM_NO_GRAPH=1: the direct path, to compare
    md->use_graphs = GPU_GRAPHS && !(no_graph && atoi(no_graph));
    for (int j = 0; j < OVERLAP_CHUNKS; j++)
        cudaCheck(cudaEventCreateWithFlags(&md->ev_chunk[j], cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&md->ev_join, cudaEventDisableTiming));
    if (rank == 0) warn_simt_shapes(L, md->cfg.H, md->cfg.D, B, md->T, stderr);
    model_loaded(md);
    return md;
}

// The precision boundary of the weights (Puri et al., section 3.1: FP16 storage and
// arithmetic, FP32 master weights): the FP16 copies the matmuls read, made from the FP32
// masters whenever these change (model_create, model_loaded, model_apply). Weight norm
// runs here, over the WnMat table, in FP32 (a plain copy without it); then W_out. (The
// FP32 build makes FP32 copies.) The other crossings are per step: embed_forward's
// embedded inputs and forward's h_0 into FP16; the cell's z and c, the logits and the
// weight gradients (epi_grad) in FP32.
static void fp16_weights_from_masters(Model *md) {
    const MlstmConfig *c = &md->cfg;
    const ParamTable *p = &md->p;
    WnMat wn[NWN];
    weightnorm_mats(c, wn);
    for (int k = 0; k < NWN; k++) {
        const float *gain = c->wnorm ? p->t[wn[k].gain] : NULL;
        weightnorm_forward_gpu(&md->launch, md->W[k], md->norms + wn[k].norm_offset, p->t[wn[k].param], gain,
                               (int)wn[k].rows, (int)wn[k].cols);
    }
    to_x(&md->launch, md->Wout, p->t[P_WOUT], (size_t)c->V * c->H);
}

// The two time loops: T dependent steps of two matmuls and a cell kernel each, 3T
// launches that are short at small B, so launch latency adds up (1,536 launches a
// step at T = 256). Their arguments are the Model's own buffers, fixed from
// model_create on, so each loop is captured once into a CUDA graph and replayed
// with one launch: the same kernels, in the same order, with the same arguments as
// the direct path, so the same bits (test_gpu checks). Not in the debug build.
static void run_steps(Model *md, cudaGraphExec_t *graph, void (*steps)(Model *)) {
    if (!md->use_graphs) {
        steps(md);
        return;
    }
    const cudaStream_t st = md->launch.stream;
    if (!*graph) {  // capture: the launches are recorded, not run
        cudaGraph_t g;
        cudaCheck(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));  // only this thread's calls matter
        steps(md);
        cudaCheck(cudaStreamEndCapture(st, &g));
        // each kernel node keeps the priority of the stream it was captured from (the overlapped
        // weight gradients the lowest); without the flag every node would run at the priority of
        // the stream the graph is launched into
        cudaCheck(cudaGraphInstantiate(graph, g, cudaGraphInstantiateFlagUseNodePriority));
        cudaCheck(cudaGraphDestroy(g));
    }
    cudaCheck(cudaGraphLaunch(*graph, st));
}

// One forward time step t (mlstm.h's recurrence): two matmuls and the cell.
static void forward_step(Model *md, int t) {
    const Launch *L = &md->launch;
    const int H = md->cfg.H, B = md->B, T = md->T, N = B * T;
    const size_t BH = (size_t)B * H, o = (size_t)t * BH;
    const uint8_t *rs = md->tok + 2 * N;
    float *z_t = md->z + 4 * o;  // holds e W_x^T + b; the product below adds m_t W_h^T: z_t
    Epilogue mt_product = epi_mt_product(md->mt + o, md->mh + o, md->mx + o, rs + t, T, H);
    seam_mark(L, 0);
    matmul(L, MM_NT, B, H, H, md->hs + o, md->W[WN_MH], mt_product);  // m_t = mx * (h_{t-1} W_mh^T)   (B,H)
    seam_mark(L, 1);
    matmul(L, MM_NT, B, 4 * H, H, md->mt + o, md->W[WN_H], epi_add_f32(z_t, 4 * H));  // z_t += m_t W_h^T   (B,4H)
    seam_mark(L, 2);
    cell_forward_step(L, md->hs + o + BH, md->cs + o + BH, z_t, md->cs + o, rs, t, T, B, H);
    seam_mark(L, 3);
}
// Forward steps t = 0 .. T-1 from hs[0], cs[0].
static void forward_steps(Model *md) {
    for (int t = 0; t < md->T; t++) forward_step(md, t);
}

// One backward time step t (mlstm.h's mlstm_backward's time loop): the cell, two matmuls.
static void backward_step(Model *md, int t) {
    const Launch *L = &md->launch;
    const int H = md->cfg.H, B = md->B, T = md->T, N = B * T;
    const size_t BH = (size_t)B * H, o = (size_t)t * BH;
    const uint8_t *rs = md->tok + 2 * N;
    const float *z_t = md->z + 4 * o;
    const float *c_prev = md->cs + o, *c = md->cs + o + BH;
    seam_mark(L, 0);
    cell_backward_step(L, md->dz + 4 * o, md->dc, md->dh, md->dhs + o, z_t, c_prev, c, rs, t, T, B, H);
    seam_mark(L, 1);
    // dm = dz W_h, split into dmx = dm * mh and dmh = dm * mx   (B,H)
    Epilogue split = epi_dm_split(md->dmx + o, md->dmh + o, md->mh + o, md->mx + o, rs + t, T, H);
    matmul(L, MM_NN, B, H, 4 * H, md->dz + 4 * o, md->W[WN_H], split);
    seam_mark(L, 2);
    matmul(L, MM_NN, B, H, H, md->dmh + o, md->W[WN_MH], epi_f32(md->dh, H));  // dh_{t-1} = dmh W_mh
    seam_mark(L, 3);
}
// Backward steps t = T-1 .. 0 from dh = dc = 0 (with switch overlap, in chunks: train_switches.cu).
static void backward_steps(Model *md) {
    const int T = md->T, chunks = overlap_chunks(md), C = T / chunks;
    for (int j = 0; j < chunks; j++) {
        for (int t = T - 1 - j * C; t >= T - (j + 1) * C; t--) backward_step(md, t);
        if (chunks > 1) wgrad_chunk(md, j, T - (j + 1) * C, C);
    }
    if (chunks > 1) overlap_join(md);
}

// Forward over T steps from the state (h0, c0) (B,H), which it advances; with
// scale > 0 also dlogits for backward, seeded with S. The losses' sum is launched
// into loss_sum, not read: mean_loss reads it (a host sync).
// mlstm.h's mlstm_forward, equation by equation (the block above it).
static void forward(Model *md, float *h0, float *c0, double scale) {
    const Launch *L = &md->launch;
    const int D = md->cfg.D, H = md->cfg.H, V = md->cfg.V, B = md->B, T = md->T, N = B * T;
    const size_t BH = (size_t)B * H;
    const uint8_t *in = md->tok, *tg = md->tok + N;
    embed_forward(L, md->xe, md->p.t[P_E], in, B, T, D);
    // input projections of all T steps: z = e W_x^T + b (N,4H) FP32, mx = e W_mx^T (N,H)
    Epilogue e = epi_f32(md->z, 4 * H);
    e.bias = md->p.t[P_B];
    matmul(L, MM_NT, N, 4 * H, D, md->xe, md->W[WN_X], e);
    matmul(L, MM_NT, N, H, D, md->xe, md->W[WN_MX], epi_x(md->mx, H));
    to_x(L, md->hs, h0, BH);
    cudaCheck(cudaMemcpyAsync(md->cs, c0, sizeof(float) * BH, cudaMemcpyDeviceToDevice, L->stream));
    run_steps(md, &md->fwd_graph, forward_steps);
    e = epi_f32(md->logits, V);  // output layer over all T*B rows: logits = h W_out^T + b_out (N,V)
    e.bias = md->p.t[P_BOUT];
    matmul(L, MM_NT, N, V, H, md->hs + BH, md->Wout, e);
    softmax_xent_gpu(L, scale > 0 ? md->dlogits : NULL, md->losses, md->logits, tg, B, T, V, (float)scale);
    sum_launch<SUM_OF_VALUES>(L, md->loss_sum, md->losses, N);
    // stateful truncated BPTT: the last state feeds the next batch
    to_f32(L, h0, md->hs + (size_t)T * BH, BH);
    cudaCheck(cudaMemcpyAsync(c0, md->cs + (size_t)T * BH, sizeof(float) * BH, cudaMemcpyDeviceToDevice, L->stream));
}
static double mean_loss(Model *md) { return sum_read(&md->launch, md->loss_sum, NULL) / ((double)md->B * md->T); }

// Backward through time of the last forward (mlstm.h's mlstm_backward): writes
// S * d(mean loss)/d(params) into grads. Weight gradients are single matmuls over
// all T*B rows after the time loop; the activation gradients before them carry each
// prediction's gradient times S, and epi_grad / colsum apply the mean's 1/N in FP32.
static void backward(Model *md) {
    const Launch *L = &md->launch;
    const int D = md->cfg.D, H = md->cfg.H, V = md->cfg.V, B = md->B, T = md->T, N = B * T;
    const size_t BH = (size_t)B * H;
    const uint8_t *in = md->tok;
    ParamTable *g = &md->g;
    // every tensor is overwritten; zero is the safe default
    cudaCheck(cudaMemsetAsync(md->grads, 0, md->np * sizeof(float), L->stream));
    matmul(L, MM_TN, V, H, N, md->dlogits, md->hs + BH, epi_grad(g->t[P_WOUT], H, N));  // dW_out = dlogits^T h / N
    colsum(L, g->t[P_BOUT], md->colpart, md->dlogits, N, V, 1.f / N);
    matmul(L, MM_NN, N, H, V, md->dlogits, md->Wout, epi_x(md->dhs, H));  // dh_t from the output layer (N,H)
    cudaCheck(cudaMemsetAsync(md->dh, 0, sizeof(float) * BH, L->stream));
    cudaCheck(cudaMemsetAsync(md->dc, 0, sizeof(float) * BH, L->stream));
    run_steps(md, &md->bwd_graph, backward_steps);
    if (overlap_chunks(md) == 1)  // (with switch overlap, in the loop's chunks)
        matmul(L, MM_TN, 4 * H, H, N, md->dz, md->mt, epi_grad(md->dW[WN_H], H, N));  // dW_h  = dz^T m / N
    matmul(L, MM_TN, 4 * H, D, N, md->dz, md->xe, epi_grad(md->dW[WN_X], D, N));  // dW_x  = dz^T e / N
    matmul(L, MM_TN, H, D, N, md->dmx, md->xe, epi_grad(md->dW[WN_MX], D, N));    // dW_mx = dmx^T e / N
    if (overlap_chunks(md) == 1)
        matmul(L, MM_TN, H, H, N, md->dmh, md->hs, epi_grad(md->dW[WN_MH], H, N));  // dW_mh = dmh^T h_{t-1} / N
    colsum(L, g->t[P_B], md->colpart, md->dz, N, 4 * H, 1.f / N);
    matmul(L, MM_NN, N, D, 4 * H, md->dz, md->W[WN_X], epi_grad(md->dxe, D, N));  // dxe = (dz W_x + dmx W_mx) / N
    Epilogue e = epi_grad(md->dxe, D, N);
    e.accumulate = 1;
    matmul(L, MM_NN, N, D, H, md->dmx, md->W[WN_MX], e);
    embed_backward(L, g->t[P_E], md->dxe, in, B, T, D, V);
    if (md->cfg.wnorm) {  // dW into the gradients of V and g
        const ParamTable *p = &md->p;
        WnMat wn[NWN];
        weightnorm_mats(&md->cfg, wn);
        for (int k = 0; k < NWN; k++) {
            const float *norms = md->norms + wn[k].norm_offset;
            weightnorm_backward_gpu(L, g->t[wn[k].param], g->t[wn[k].gain], md->dW[k], p->t[wn[k].param],
                                    p->t[wn[k].gain], norms, (int)wn[k].rows, (int)wn[k].cols);
        }
    }
}

// Steps 2-3 of doc/design.md, "The training step": forward from the carried state,
// backward seeded with S. The loss is read before backward, a host sync between them,
// or with switch l2 after it.
static double model_step(Model *md, const uint8_t *in, const uint8_t *tg, const uint8_t *rs, double scale) {
    upload_batch(md, in, tg, rs);
    forward(md, md->train_h, md->train_c, scale);
    double loss = md->launch.sw.l2 ? 0 : mean_loss(md);
    backward(md);
    return md->launch.sw.l2 ? mean_loss(md) : loss;
}

// Step 4: the mean over ranks. NCCL when built with it; otherwise through MPI on the host.
static void model_allreduce(Model *md) {
    if (world == 1) return;
    const Launch *L = &md->launch;
#if GPU_NCCL
    (void)dist_sum;  // train.h's MPI path, not needed with NCCL
    ncclCheck(ncclAllReduce(md->grads, md->grads, md->np, ncclFloat, ncclSum, md->comm, L->stream));
#else
    size_t n = md->np * sizeof(float);
    cudaCheck(cudaMemcpyAsync(md->host.grads, md->grads, n, cudaMemcpyDeviceToHost, L->stream));
    cudaCheck(cudaStreamSynchronize(L->stream));
    dist_sum(md->host.grads, md->np);
    cudaCheck(cudaMemcpyAsync(md->grads, md->host.grads, n, cudaMemcpyHostToDevice, L->stream));
#endif
    divide_gpu(L, md->grads, md->np, (float)world);  // as train.c: sum, then divide
}

// Step 5, on the reduced gradients: inf/NaN, and their norm for the clip. An FP16
// activation gradient that overflowed reaches them as inf/NaN (doc/gpu.md,
// "Precision"); the FP32 weight gradients themselves cannot overflow, so no FP16 limit applies.
static GradientCheck model_check(Model *md) {
    GradientCheck c;
    sum_launch<SUM_OF_SQUARES>(&md->launch, md->grad_sumsq, md->grads, md->np);
    c.norm = sqrt(sum_read(&md->launch, md->grad_sumsq, &c.overflow));
    return c;
}

// Step 7: unscale and clip (grad_factor), Adam, in one kernel; then the FP16 copies.
static void model_apply(Model *md, double grad_factor, double lr, long applied) {
    AdamConfig a = adam_defaults;
    a.lr = lr;
    adam_gpu(&md->launch, md->params, md->adam_m, md->adam_v, md->grads, md->np, (float)grad_factor,
             adam_step(a, applied));
    fp16_weights_from_masters(md);
}

// Validation: forward only, on the validation state (first = 1 zeroes it).
static double model_eval(Model *md, const uint8_t *in, const uint8_t *tg, const uint8_t *rs, int first) {
    if (first) {
        cudaCheck(cudaMemsetAsync(md->val_h, 0, sizeof(float) * md->B * md->cfg.H, md->launch.stream));
        cudaCheck(cudaMemsetAsync(md->val_c, 0, sizeof(float) * md->B * md->cfg.H, md->launch.stream));
    }
    upload_batch(md, in, tg, rs);
    forward(md, md->val_h, md->val_c, 0);
    return mean_loss(md);
}

// ----------------------------------------------------------------------------
// The build fixes the precision: the FP16 build always scales the loss (--fp16 is
// implied), the FP32 build never does (S = 1; --fp16 is ignored with a note). Everything
// downstream (scaler, overflow limit, checkpoint mode check) follows; the FP16 build's
// scaler is capped at FP16_MAX_LOSS_SCALE (doc/gpu.md, "The cap on S"). The description
// also names the matmuls, and the switches when one is on.
static Precision model_precision(const Options *o) {
    Precision p;
    const Switches sw = switches_of(o);
    char switches[64] = "";
    if (sw.splitk || sw.overlap || sw.l2 || sw.warp64)
        snprintf(switches, sizeof switches, "; switches%s%s%s%s", sw.splitk ? " splitk" : "",
                 sw.overlap ? " overlap" : "", sw.l2 ? " l2" : "", sw.warp64 ? " warp64" : "");
    const char *matmuls = sw.cublaslt ? "cuBLASLt" : GPU_FP16 ? "WMMA" : "SIMT";
#if GPU_FP16
    p.fp16 = 1;
    p.max_loss_scale = FP16_MAX_LOSS_SCALE;
    snprintf(p.description, sizeof p.description, "FP16 weights+activations, FP32 master+Adam, dynamic loss scale; %s "
             "matmuls%s", matmuls, switches);
#else
    if (o->fp16 && rank == 0)
        fprintf(stderr, "note: --fp16 ignored: this is the FP32 build (train_gpu is the FP16 one)\n");
    p.fp16 = 0;
    p.max_loss_scale = INFINITY;  // (S = 1 throughout)
    snprintf(p.description, sizeof p.description, "FP32 everywhere (-DPRECISION_FP32), S = 1; %s matmuls%s",
             matmuls, switches);
#endif
    return p;
}

static Backend model_backend(void) { return BACKEND_GPU; }

#include "train_switches.cu"  // the run-time switches (declared above, below the matmul layouts)
#include "harness/gpu_harness.cu"  // the harness (declared above, below the switches' declarations)

int main(int argc, char **argv) {
    openmp_prefer_passive_wait(argv);  // process-level, so here and not in train_main
    return train_main(argc, argv);
}
