// test/cuda/test_cudacpu.cu: the CPU layer itself. Each check that the layer
// reports a defect runs the faulty kernel in a child process and looks for the
// report on its stderr; the others check values. Last, the emulated GPU trainer
// under `mpirun -np 2` against `-np 1` with twice the rows (NCCL routed to MPI).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <cublasLt.h>
#include "mlstm.h"
#include "harness/checkpoint.h"  // defines: the checkpoint file (CkptHeader, checkpoint_open/read/load, checkpoint_save_run)
#include "test/test.h"
using namespace nvcuda;

#define FULL 0xffffffffu
static float *dev_floats(size_t n) {
    float *p;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) { fprintf(stderr, "cudaMalloc\n"); exit(1); }
    return p;
}
static const int ABORT = 128 + 6;  // a report aborts

// ---- barriers and warp operations used wrongly: each must be reported

__global__ void k_deadlock(float *out) {
    if (threadIdx.x == 0) __syncthreads();  // waits for lanes that wait for it
    else __syncwarp();
    out[threadIdx.x] = 1;
}
__global__ void k_divergent(float *out) {
    if (threadIdx.x % 2) __syncthreads();
    else __syncthreads();
    out[threadIdx.x] = 1;
}
__global__ void k_exited(float *out) {
    if (threadIdx.x == 5) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}
__global__ void k_shfl_sites(float *out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_xor_sync(FULL, v, 1);
    else v = __shfl_xor_sync(FULL, v, 1);
    out[threadIdx.x] = v;
}
__global__ void k_shfl_half_mask(float *out) {  // a reduction over 16 lanes, its mask leaving out the callers 16..31
    float v = (float)threadIdx.x;
    for (int o = 8; o > 0; o /= 2) v += __shfl_xor_sync(0xffff, v, o);
    out[threadIdx.x] = v;
}
__global__ void k_shfl_outside(float *out) {  // lanes 0..15 read lanes 16..31, which are not in the mask
    float v = (float)threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_xor_sync(0xffff, v, 16);
    out[threadIdx.x] = v;
}
static void run1(void (*k)(float *), int threads) {
    float *out = dev_floats(1024);
    k<<<1, threads>>>(out);
    cudaDeviceSynchronize();
}
static void deadlock(void *) { run1(k_deadlock, 32); }
static void divergent(void *) { run1(k_divergent, 64); }
static void exited(void *) { run1(k_exited, 64); }
static void shfl_sites(void *) { run1(k_shfl_sites, 32); }
static void shfl_half_mask(void *) { run1(k_shfl_half_mask, 32); }
static void shfl_outside(void *) { run1(k_shfl_outside, 32); }

// ---- what they compute when used rightly

__global__ void k_collectives(int *out) {
    int t = threadIdx.x, l = t % 32;
    int *o = out + 8 * t;
    o[0] = __shfl_xor_sync(FULL, t, 3);
    o[1] = __shfl_up_sync(FULL, t, 2);
    o[2] = __shfl_down_sync(FULL, t, 5, 16);
    o[3] = __shfl_sync(FULL, t, 7);
    o[4] = (int)__ballot_sync(FULL, l % 3 == 0);
    o[5] = __syncthreads_count(t % 5 == 0);
    o[6] = __syncthreads_or(t == 37);
    o[7] = __syncthreads_and(t != 37);
}
static void test_collectives(void) {
    int *d, h[64 * 8];
    cudaMalloc(&d, sizeof h);
    k_collectives<<<1, 64>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    int ok = 1;
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++) ballot |= (l % 3 == 0) << l;
    for (int t = 0; t < 64; t++) {
        int l = t % 32, w = t - l, *o = h + 8 * t;
        int up = l >= 2 ? t - 2 : t, down = l % 16 + 5 < 16 ? t + 5 : t;
        ok &= o[0] == (w | (l ^ 3)) && o[1] == up && o[2] == down && o[3] == w + 7 && (unsigned)o[4] == ballot && o[5] == 13 &&
              o[6] == 1 && o[7] == 0;
    }
    CHECK(ok, "shuffles (xor, up, down with width 16, indexed), ballot, __syncthreads_count/or/and give the PTX results");
    cudaFree(d);
}

// A race: without the barrier a thread reads its neighbour's slot before it is written.
// Which threads see the old value depends on the schedule.
__global__ void k_race(float *out, float base, int barrier) {
    __shared__ float s[64];
    s[threadIdx.x] = base + threadIdx.x;
    if (barrier) __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
static int race_wrong(const char *schedule, int barrier) {
    cudacpu::set_schedule(schedule);
    float *d = dev_floats(64), h[64];
    int wrong = 0;
    for (int rep = 0; rep < 2; rep++) {  // the second launch must not see the first one's values
        k_race<<<1, 64>>>(d, 100.f * (rep + 1), barrier);
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        for (int t = 0; t < 64; t++) wrong += h[t] != 100.f * (rep + 1) + (t + 1) % 64;
    }
    cudaFree(d);
    cudacpu::set_schedule(getenv("CUDACPU_SCHEDULE"));
    return wrong;
}
static void test_schedules(void) {
    int l = race_wrong("lockstep", 0), r = race_wrong("reverse", 0), lb = race_wrong("lockstep", 1), rb = race_wrong("reverse", 1);
    CHECK(l > 0 && r > 0 && l != r && lb == 0 && rb == 0,
          "a missing __syncthreads shows under both schedules, at different threads (%d and %d wrong values; 0 and 0 with it)", l, r);
}

// ---- cp.async

__global__ void k_cpasync(const float *g, float *out, int misalign, int wait) {
    extern __shared__ __align__(16) float sm[];
    unsigned s = (unsigned)__cvta_generic_to_shared(sm + 4 * threadIdx.x + misalign);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(g + 4 * threadIdx.x));
    asm volatile("cp.async.commit_group;\n" ::);
    out[2 * threadIdx.x] = sm[4 * threadIdx.x];  // not landed yet: NaN
    if (wait) asm volatile("cp.async.wait_group 0;\n" ::);
    out[2 * threadIdx.x + 1] = sm[4 * threadIdx.x];
}
static void cpasync(int misalign, int wait, float *h) {
    float *g = dev_floats(4 * 32 + 4), *o = dev_floats(64), hg[4 * 32 + 4];
    for (int i = 0; i < 4 * 32 + 4; i++) hg[i] = (float)i;
    cudaMemcpy(g, hg, sizeof hg, cudaMemcpyHostToDevice);
    k_cpasync<<<1, 32, 4 * 33 * sizeof(float)>>>(g, o, misalign, wait);
    if (h) cudaMemcpy(h, o, 64 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(g); cudaFree(o);
}
static void cp_misaligned(void *) { cpasync(1, 1, NULL); }
static void cp_unwaited(void *) { cpasync(0, 0, NULL); }
static void test_cpasync(void) {
    float h[64];
    cpasync(0, 1, h);
    int ok = 1;
    for (int t = 0; t < 32; t++) ok &= isnan(h[2 * t]) && h[2 * t + 1] == 4.f * t;
    CHECK(ok, "cp.async: the destination reads NaN until wait_group, then the copied value");
    EXPECT_EXIT(cp_misaligned, NULL, ABORT, "misaligned", "cp.async to a shared address off by 4 bytes is reported");
    EXPECT_EXIT(cp_unwaited, NULL, ABORT, "never waited", "cp.async never waited for is reported");
}

// ---- shared memory limit

__global__ void k_big(float *out) {
    extern __shared__ float big[];
    big[threadIdx.x] = 1.f;
    out[threadIdx.x] = big[threadIdx.x];
}
static void test_smem_limit(void) {
    float *o = dev_floats(32);
    cudaGetLastError();
    k_big<<<1, 32, 64 << 10>>>(o);
    cudaError_t e1 = cudaGetLastError();
    cudaError_t e2 = cudaFuncSetAttribute(k_big, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10);
    k_big<<<1, 32, 64 << 10>>>(o);
    cudaError_t e3 = cudaGetLastError();
    CHECK(e1 == cudaErrorInvalidValue && e2 == cudaSuccess && e3 == cudaSuccess,
          "64 KB of dynamic shared memory: refused (%s) until cudaFuncSetAttribute raises the limit (%s, %s)", cudaGetErrorString(e1),
          cudaGetErrorString(e2), cudaGetErrorString(e3));
    cudaFree(o);
}

// ---- WMMA

__global__ void k_wmma(const half *a, const half *b, float *out, int sync, int skew) {
    extern __shared__ __align__(32) float cs[];
    int lane = threadIdx.x % 32;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.f);
    wmma::load_matrix_sync(fa, a + (skew && lane == 3 ? 16 : 0), 16);  // skew: one lane loads another tile
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(cs, acc, 16, wmma::mem_row_major);
    if (sync) __syncwarp();
    for (int q = lane; q < 256; q += 32) out[q] = cs[q];
}
static void wmma_run(int sync, int skew, float *h, float *ref) {
    half ha[512], hb[256];
    for (int i = 0; i < 512; i++) ha[i] = (float)((i * 7) % 11 - 5) / 4;
    for (int i = 0; i < 256; i++) hb[i] = (float)((i * 5) % 13 - 6) / 8;
    half *a, *b;
    float *o = dev_floats(256);
    cudaMalloc(&a, sizeof ha); cudaMalloc(&b, sizeof hb);
    cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice);
    k_wmma<<<1, 32, 1024>>>(a, b, o, sync, skew);
    if (h) cudaMemcpy(h, o, 256 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(a); cudaFree(b); cudaFree(o);
    if (ref)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                float s = 0;
                for (int k = 0; k < 16; k++) s += (float)ha[i * 16 + k] * (float)hb[k * 16 + j];
                ref[i * 16 + j] = s;
            }
}
static void wmma_skew(void *) { wmma_run(1, 1, NULL, NULL); }
static void test_wmma(void) {
    float h[256], ref[256];
    wmma_run(1, 0, h, ref);
    int same = !memcmp(h, ref, sizeof h);  // small integers over 8: every sum is exact
    wmma_run(0, 0, h, NULL);
    int nans = 0;
    for (int i = 0; i < 256; i++) nans += isnan(h[i]);
    CHECK(same && nans > 0, "WMMA: the product is exact; without __syncwarp after store_matrix_sync %d of 256 reads see unwritten elements",
          nans);
    EXPECT_EXIT(wmma_skew, NULL, ABORT, "load_matrix_sync: lane", "WMMA: a lane that loads a different tile is reported");
}

// ---- device memory

__global__ void k_touch(float *p) { p[threadIdx.x] = 0; }
static void host_arg(void *) {
    static float host[32];
    k_touch<<<1, 32>>>(host);
}
static void test_memory(void) {
    float *d = dev_floats(16), h[17];
    cudaMemcpy(h, d, 16 * sizeof(float), cudaMemcpyDeviceToHost);
    int nan = 1;
    for (int i = 0; i < 16; i++) nan &= isnan(h[i]);
    cudaError_t e = cudaMemcpy(h, d, 17 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaError_t e2 = cudaMemcpy(d, h, 4, cudaMemcpyDeviceToHost);
    CHECK(nan && e == cudaErrorInvalidValue && e2 == cudaErrorInvalidValue,
          "device memory: NaN until written; a copy past its end and a copy of the wrong kind fail (%s)", cudaGetErrorString(e));
    cudaFree(d);
    EXPECT_EXIT(host_arg, NULL, ABORT, "not device memory", "a host pointer passed to a kernel is reported");
}

// ---- streams and CUDA graphs

__global__ void k_add(float *p, float v) { p[threadIdx.x] += v; }
__global__ void k_mul(float *p, float v) { p[threadIdx.x] *= v; }
static float first(const float *d) {
    float h;
    cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    return h;
}
// One illegal call during a capture: its error, and the capture's end must fail.
static void illegal_in_capture(const char *what, cudaError_t want, cudaError_t (*call)(cudaStream_t, float *)) {
    cudaStream_t s;
    cudaStreamCreate(&s);
    float *d = dev_floats(32), *a = dev_floats(32);
    cudaMemset(d, 0, 32 * sizeof(float));
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    k_add<<<1, 32, 0, s>>>(d, 1.f);
    cudaError_t e = call(s, a);
    cudaStreamCaptureStatus st;
    cudaStreamIsCapturing(s, &st);
    cudaGraph_t g = (cudaGraph_t)1;
    cudaError_t end = cudaStreamEndCapture(s, &g);
    cudaGetLastError();
    CHECK(e == want && st == cudaStreamCaptureStatusInvalidated && end == cudaErrorStreamCaptureInvalidated && !g && first(d) == 0.f,
          "capture: %s is refused (%s) and invalidates the capture (end: %s)", what, cudaGetErrorString(e), cudaGetErrorString(end));
    cudaFree(d); cudaFree(a);
    cudaStreamDestroy(s);
}
static void test_graphs(void) {
    cudaGetLastError();  // the tests above leave errors behind
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s) == cudaSuccess, "cudaStreamCreate");
    float *a = dev_floats(32), *b = dev_floats(32), *c = dev_floats(32), one = 1.f;
    cudaMemset(b, 0, 32 * sizeof(float));
    cudaMemsetAsync(c, 0, 32 * sizeof(float), s);
    k_add<<<1, 32, 0, s>>>(c, 5.f);  // not capturing: runs at once
    CHECK(first(c) == 5.f, "a launch on a stream that is not capturing runs at once");
    // graph: a = 0; a += v (v = 2 at the capture); a *= 3; b += 1; c = a (copy). Order matters: (0 + 2) * 3 = 6, not 2.
    float v = 2.f;
    cudaStreamCaptureStatus st;
    cudaError_t eb = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaStreamIsCapturing(s, &st);
    cudaMemsetAsync(a, 0, 32 * sizeof(float), s);
    k_add<<<1, 32, 0, s>>>(a, v);
    v = 100.f;  // a kernel's parameters are copied at the capture: the graph keeps 2
    k_mul<<<1, 32, 0, s>>>(a, 3.f);
    k_add<<<1, 32, 0, s>>>(b, one);
    cudaMemcpyAsync(c, a, 32 * sizeof(float), cudaMemcpyDeviceToDevice, s);
    cudaError_t e1 = cudaGetLastError();
    cudaGraph_t g = NULL;
    cudaError_t ee = cudaStreamEndCapture(s, &g);
    CHECK(eb == cudaSuccess && st == cudaStreamCaptureStatusActive && e1 == cudaSuccess && ee == cudaSuccess && g,
          "capture of 2 copies/memsets and 3 launches: begin %s, status active, end %s", cudaGetErrorString(eb), cudaGetErrorString(ee));
    CHECK(first(b) == 0.f && first(c) == 5.f && isnan(first(a)), "captured launches, memsets and copies do not run at the capture");
    cudaGraphExec_t x = NULL;
    cudaError_t ei = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);  // the instantiated graph keeps its own copy
    cudaError_t l1 = cudaGraphLaunch(x, s);
    float a1 = first(a), b1 = first(b), c1 = first(c);
    cudaError_t l2 = cudaGraphLaunch(x, s);
    cudaStreamSynchronize(s);
    float a2 = first(a), b2 = first(b), c2 = first(c);
    CHECK(ei == cudaSuccess && l1 == cudaSuccess && l2 == cudaSuccess && a1 == 6.f && c1 == 6.f && b1 == 1.f && a2 == 6.f &&
              c2 == 6.f && b2 == 2.f,
          "graph replay: in capture order, with the capture-time argument (a = %g, c = %g; (0 + 2) * 3 = 6), twice runs twice "
          "(b = %g, then %g)", a1, c1, b1, b2);
    cudaGraphExecDestroy(x);
    cudaStreamDestroy(s);
    cudaFree(a); cudaFree(b); cudaFree(c);
}
// A capture that forks into a second stream and joins back: a = 1 on s; s2 (after the fork)
// b = a * 2 while s computes a += 10; s waits for s2 (the join), then c = b. The replay runs each
// node after its dependencies under either schedule: c = 2, a = 11. A fork whose branch is
// never waited for fails the capture's end; an event recorded outside the capture cannot be waited
// for inside it.
static void test_fork_join(void) {
    cudaGetLastError();
    cudaStream_t s, s2;
    cudaStreamCreate(&s);
    cudaStreamCreate(&s2);
    cudaEvent_t fork, join, outside;
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    cudaEventCreate(&outside);
    float *a = dev_floats(32), *b = dev_floats(32), *c = dev_floats(32);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaMemsetAsync(a, 0, 32 * sizeof(float), s);
    k_add<<<1, 32, 0, s>>>(a, 1.f);
    cudaEventRecord(fork, s);
    cudaStreamWaitEvent(s2, fork, 0);
    cudaStreamCaptureStatus st2;
    cudaStreamIsCapturing(s2, &st2);
    cudaMemcpyAsync(b, a, 32 * sizeof(float), cudaMemcpyDeviceToDevice, s2);
    k_mul<<<1, 32, 0, s2>>>(b, 2.f);
    k_add<<<1, 32, 0, s>>>(a, 10.f);
    cudaEventRecord(join, s2);
    cudaStreamWaitEvent(s, join, 0);
    cudaMemcpyAsync(c, b, 32 * sizeof(float), cudaMemcpyDeviceToDevice, s);
    k_add<<<1, 32, 0, s>>>(c, 0.f);
    cudaGraph_t g = NULL;
    cudaError_t ee = cudaStreamEndCapture(s, &g);
    cudaStreamCaptureStatus after;
    cudaStreamIsCapturing(s2, &after);
    cudaGraphExec_t x = NULL;
    cudaGraphInstantiate(&x, g, 0);
    cudaGraphLaunch(x, s);
    cudaStreamSynchronize(s);
    // c = b: (1 * 2) = 2 before a += 10 ran or after: the branch copied a = 1 (it waits only for the fork)
    CHECK(ee == cudaSuccess && st2 == cudaStreamCaptureStatusActive && after == cudaStreamCaptureStatusNone &&
              first(c) == 2.f && first(a) == 11.f,
          "capture with a fork into a second stream and a join: the branch joins the capture, the replay gives "
          "b = 2, a = 11 (end %s, c = %g)", cudaGetErrorString(ee), first(c));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, fork, join) == cudaErrorInvalidResourceHandle,
          "no elapsed time between events of a capture");
    cudaGetLastError();
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    // where the dependencies allow either order (b = a copied after the fork, beside a += 1 on s),
    // lockstep replays in capture order (b = 1) and reverse runs the branch first (b = 0): a
    // dependency the code left out shows under reverse
    float bs[2];
    for (int k = 0; k < 2; k++) {
        cudacpu::set_schedule(k ? "reverse" : "lockstep");
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        cudaMemsetAsync(a, 0, 32 * sizeof(float), s);
        cudaEventRecord(fork, s);
        k_add<<<1, 32, 0, s>>>(a, 1.f);
        cudaStreamWaitEvent(s2, fork, 0);
        cudaMemcpyAsync(b, a, 32 * sizeof(float), cudaMemcpyDeviceToDevice, s2);
        cudaEventRecord(join, s2);
        cudaStreamWaitEvent(s, join, 0);
        cudaStreamEndCapture(s, &g);
        cudaGraphInstantiate(&x, g, 0);
        cudaGraphLaunch(x, s);
        cudaStreamSynchronize(s);
        bs[k] = first(b);
        cudaGraphExecDestroy(x);
        cudaGraphDestroy(g);
    }
    cudacpu::set_schedule(getenv("CUDACPU_SCHEDULE"));
    CHECK(bs[0] == 1.f && bs[1] == 0.f,
          "replay order: lockstep in capture order (b = %g), reverse the forked branch first (b = %g)", bs[0], bs[1]);
    // the branch never joined back
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    k_add<<<1, 32, 0, s>>>(a, 1.f);
    cudaEventRecord(fork, s);
    cudaStreamWaitEvent(s2, fork, 0);
    k_add<<<1, 32, 0, s2>>>(b, 1.f);
    g = (cudaGraph_t)1;
    ee = cudaStreamEndCapture(s, &g);
    cudaStreamIsCapturing(s2, &after);
    CHECK(ee == cudaErrorStreamCaptureUnjoined && !g && after == cudaStreamCaptureStatusNone,
          "a fork never joined back: cudaStreamEndCapture fails (%s), the branch's capture ends too",
          cudaGetErrorString(ee));
    cudaGetLastError();
    // an event from outside the capture
    cudaEventRecord(outside, s2);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaError_t ew = cudaStreamWaitEvent(s, outside, 0);
    ee = cudaStreamEndCapture(s, &g);
    CHECK(ew == cudaErrorStreamCaptureIsolation && ee == cudaErrorStreamCaptureInvalidated,
          "a capture cannot wait for an event recorded outside it (%s)", cudaGetErrorString(ew));
    cudaGetLastError();
    cudaEventDestroy(fork); cudaEventDestroy(join); cudaEventDestroy(outside);
    cudaStreamDestroy(s); cudaStreamDestroy(s2);
    cudaFree(a); cudaFree(b); cudaFree(c);
}

// The persisting-L2 window: inside one allocation, with persisting L2 set aside first.
static void test_l2_window(void) {
    cudaGetLastError();
    cudaStream_t s;
    cudaStreamCreate(&s);
    float *a = dev_floats(1024);
    cudaStreamAttrValue v;
    memset(&v, 0, sizeof v);
    v.accessPolicyWindow.base_ptr = a;
    v.accessPolicyWindow.num_bytes = 4096;
    v.accessPolicyWindow.hitRatio = 1.f;
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    cudaError_t none = cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v);  // nothing set aside yet
    cudaGetLastError();
    cudaError_t lim = cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 4096);
    size_t set_aside = 0;
    cudaDeviceGetLimit(&set_aside, cudaLimitPersistingL2CacheSize);
    cudaError_t ok = cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v);
    cudaStreamAttrValue back;
    cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &back);
    v.accessPolicyWindow.num_bytes = 8192;  // past the allocation
    cudaError_t past = cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v);
    cudaGetLastError();
    CHECK(none == cudaErrorInvalidValue && lim == cudaSuccess && ok == cudaSuccess &&
              back.accessPolicyWindow.base_ptr == a && back.accessPolicyWindow.num_bytes == 4096 &&
              past == cudaErrorInvalidValue,
          "L2 window: refused before persisting L2 is set aside (%s) and past its allocation (%s), kept otherwise",
          cudaGetErrorString(none), cudaGetErrorString(past));
    CHECK(set_aside == (1 << 20), "4096 bytes of L2 asked for: %zu set aside (whole MiB, as a driver may round)",
          set_aside);
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0);
    cudaStreamDestroy(s);
    cudaFree(a);
}
// Stream priorities (an H100's range, clamped), kept per captured node: a graph whose nodes
// differ in priority needs cudaGraphInstantiateFlagUseNodePriority (the layer's rule).
static void test_priorities(void) {
    cudaGetLastError();
    int least, greatest, p_hi, p_lo, p_clamped;
    cudaDeviceGetStreamPriorityRange(&least, &greatest);
    cudaStream_t hi, lo, clamped;
    cudaStreamCreateWithPriority(&hi, cudaStreamDefault, greatest);
    cudaStreamCreateWithPriority(&lo, cudaStreamDefault, least);
    cudaStreamCreateWithPriority(&clamped, cudaStreamDefault, greatest - 10);
    cudaStreamGetPriority(hi, &p_hi);
    cudaStreamGetPriority(lo, &p_lo);
    cudaStreamGetPriority(clamped, &p_clamped);
    CHECK(least == 0 && greatest == -5 && p_hi == greatest && p_lo == least && p_clamped == greatest,
          "priorities: range %d..%d, kept by their streams, one beyond the range clamped (%d)", least, greatest,
          p_clamped);
    float *a = dev_floats(32), *b = dev_floats(32);
    cudaEvent_t fork, join;
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    cudaError_t inst[3];
    for (int k = 0; k < 3; k++) {  // two priorities without the flag, with it; one priority without it
        cudaStream_t side = k < 2 ? lo : hi;
        cudaStreamBeginCapture(hi, cudaStreamCaptureModeThreadLocal);
        k_add<<<1, 32, 0, hi>>>(a, 1.f);
        cudaEventRecord(fork, hi);
        cudaStream_t s2 = side == hi ? clamped : lo;  // (clamped has hi's priority)
        cudaStreamWaitEvent(s2, fork, 0);
        k_add<<<1, 32, 0, s2>>>(b, 1.f);
        cudaEventRecord(join, s2);
        cudaStreamWaitEvent(hi, join, 0);
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(hi, &g);
        cudaGraphExec_t x = NULL;
        inst[k] = cudaGraphInstantiate(&x, g, k == 1 ? cudaGraphInstantiateFlagUseNodePriority : 0);
        cudaGetLastError();
        if (x) cudaGraphExecDestroy(x);
        cudaGraphDestroy(g);
    }
    CHECK(inst[0] == cudaErrorInvalidValue && inst[1] == cudaSuccess && inst[2] == cudaSuccess,
          "a graph captured at two priorities is instantiated only with its node priorities (%s without, %s with; "
          "one priority: %s)", cudaGetErrorString(inst[0]), cudaGetErrorString(inst[1]), cudaGetErrorString(inst[2]));
    cudaEventDestroy(fork); cudaEventDestroy(join);
    cudaStreamDestroy(hi); cudaStreamDestroy(lo); cudaStreamDestroy(clamped);
    cudaFree(a); cudaFree(b);
}

// cuBLASLt's rules the layer checks: a bias of D's type, and pointers as aligned as the algorithm
// was chosen for (256 bytes unless the preferences say less).
static cublasStatus_t lt_product(half *A, half *B, half *D, const void *bias, cudaDataType_t bias_type,
                                 uint32_t align) {
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t d;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (bias) {
        uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
        int32_t bt = bias_type;
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    cublasLtMatrixLayout_t l;
    cublasLtMatrixLayoutCreate(&l, CUDA_R_16F, 8, 8, 8);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    for (int i = 0; i < 4; i++) {
        const int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i;
        cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a, &align, sizeof align);
    }
    cublasLtMatmulHeuristicResult_t r = {};
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, d, l, l, l, l, pref, 1, &r, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found == 0) st = CUBLAS_STATUS_NOT_SUPPORTED;  // no algorithm: refused
    if (st == CUBLAS_STATUS_SUCCESS) {
        const float one = 1.f, zero = 0.f;
        st = cublasLtMatmul(h, d, &one, A, l, B, l, &zero, D, l, D, l, &r.algo, NULL, 0, 0);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(d);
    cublasLtDestroy(h);
    return st;
}
static void test_cublaslt_rules(void) {
    half *m;
    cudaMalloc(&m, 4096 * sizeof(half));
    cudaMemset(m, 0, 4096 * sizeof(half));
    half *A = m, *B = m + 1024, *D = m + 2048, *odd = m + 3072 + 32;  // odd: 64-byte aligned, not 128
    const cublasStatus_t f32_bias = lt_product(A, B, D, m + 3072, CUDA_R_32F, 256),
                         f16_bias = lt_product(A, B, D, m + 3072, CUDA_R_16F, 256),
                         default_align = lt_product(odd, B, D, NULL, CUDA_R_16F, 256),
                         told = lt_product(odd, B, D, NULL, CUDA_R_16F, 64);
    CHECK(f32_bias == CUBLAS_STATUS_NOT_SUPPORTED && f16_bias == CUBLAS_STATUS_SUCCESS,
          "cuBLASLt: a bias of D's type only (FP32 bias, FP16 D: status %d; FP16 bias: %d)", (int)f32_bias,
          (int)f16_bias);
    CHECK(default_align == CUBLAS_STATUS_INVALID_VALUE && told == CUBLAS_STATUS_SUCCESS,
          "cuBLASLt: a 64-byte aligned operand refused for an algorithm chosen for 256 (%d), taken for one chosen "
          "for 64 (%d)", (int)default_align, (int)told);
    cudaFree(m);
}

static cudaError_t sync_memcpy(cudaStream_t, float *a) {
    float h;
    return cudaMemcpy(&h, a, sizeof h, cudaMemcpyDeviceToHost);
}
static cudaError_t sync_memset(cudaStream_t, float *a) { return cudaMemset(a, 0, 4); }
static cudaError_t device_sync(cudaStream_t, float *) { return cudaDeviceSynchronize(); }
static cudaError_t stream_sync(cudaStream_t s, float *) { return cudaStreamSynchronize(s); }
static cudaError_t malloc_(cudaStream_t, float *) {
    void *p;
    return cudaMalloc(&p, 64);
}
static cudaError_t legacy_launch(cudaStream_t, float *a) {
    k_add<<<1, 32>>>(a, 1.f);
    return cudaGetLastError();
}
static cudaError_t set_attribute(cudaStream_t, float *) {
    return cudaFuncSetAttribute(k_big, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10);
}
static void test_capture_rules(void) {
    illegal_in_capture("a synchronous cudaMemcpy (the legacy stream)", cudaErrorStreamCaptureImplicit, sync_memcpy);
    illegal_in_capture("a synchronous cudaMemset", cudaErrorStreamCaptureImplicit, sync_memset);
    illegal_in_capture("a launch on the legacy stream 0", cudaErrorStreamCaptureImplicit, legacy_launch);
    illegal_in_capture("cudaDeviceSynchronize", cudaErrorStreamCaptureUnsupported, device_sync);
    illegal_in_capture("cudaStreamSynchronize of the capturing stream", cudaErrorStreamCaptureUnsupported, stream_sync);
    illegal_in_capture("cudaMalloc (thread-local mode)", cudaErrorStreamCaptureUnsupported, malloc_);
    illegal_in_capture("cudaFuncSetAttribute (set attributes before)", cudaErrorStreamCaptureUnsupported, set_attribute);
}

// ---- NCCL via MPI: the emulated GPU trainer, 2 ranks x 4 rows against 1 rank x 8 rows

static const char *mpirun_cmd = "ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                "OMPI_MCA_rmaps_base_oversubscribe=1 mpirun";

static double rel_diff(const real *a, const real *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) { d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); s += (double)b[i] * b[i]; }
    return sqrt(d / s);
}
static void test_mpi(const char *trainer, const char *what, double tol) {
    char dir[] = "/tmp/test_cudacpu_XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    const char *mpirun = mpirun_cmd;
    // step 2 overflows on rank 0 only: every rank must see it after the all-reduce and skip
#define GPU_TINY "--hidden 64 --embed 32 --seq-len 8 --steps 4 --inject-overflow 2 --corpus-bytes 60000 --val-every 0 --val-steps 1 --sample-len 0 " \
                 "--print-every 1000 --threads 1 --lr-schedule constant --lr 3e-3"
    int r1 = test_system("%s -np 1 %s " GPU_TINY " --batch 8 --out %s/m1 > %s/m.out 2>&1", mpirun, trainer, dir, dir);
    int r2 = test_system("%s -np 2 %s " GPU_TINY " --batch 4 --out %s/m2 >> %s/m.out 2>&1", mpirun, trainer, dir, dir);
    char p[600];
    snprintf(p, sizeof p, "%s/m.out", dir);
    CHECK(r1 == 0 && r2 == 0 && test_system("grep -q '4 rows/rank x 2 ranks = 8' %s", p) == 0,
          "%s: mpirun -np 1 (8 rows) and -np 2 (4 rows each) exit 0 (%d %d)", what, r1, r2);
    if (r1 || r2) test_system("cat %s", p);
    Mlstm a, b;
    TrainState sa, sb;
    MlstmConfig cfg = {256, 32, 64, 1};
    real *hs = (real *)mallocCheck(sizeof(real) * 8 * 64 * 2);
    mlstm_build(&a, cfg, 1, 1); mlstm_build(&b, cfg, 1, 1);
    snprintf(p, sizeof p, "%s/m1/latest.ckpt", dir);
    if (!r1) checkpoint_load(p, &a, &sa, hs, hs + 8 * 64, 8);
    snprintf(p, sizeof p, "%s/m2/latest.ckpt", dir);
    if (!r2) checkpoint_load(p, &b, &sb, hs, hs + 8 * 64, 8);
    double dw = r1 || r2 ? INFINITY : rel_diff(b.params, a.params, a.nparams);
    CHECK(dw < tol && !r1 && sa.step == 3 && sb.step == 3, "%s: weights after 4 steps, one skipped, agree to %.1e relative (< %.0e)",
          what, dw, tol);
    mlstm_free(&a); mlstm_free(&b); free(hs);
    test_system("rm -rf %s", dir);
}

// ---- The GPU trainer's --matmul: a flag of run.h's one table that only train_gpu takes. In its
// --help, not in the CPU trainer's (which refuses it by name); a bad value refused by name; not in
// the run record (it picks how the products are summed: a resume may change it, as it may move a
// run between the trainers); compared across ranks like every flag.
#define MATMUL_TINY "--hidden 64 --embed 32 --seq-len 8 --batch 8 --corpus-bytes 60000 --val-every 0 --val-steps 1 " \
                    "--sample-len 0 --print-every 1000 --threads 1"
// Shapes cuBLASLt refuses (the layer's heuristic made to, in each of its three ways: a status, no
// algorithm, an algorithm in a failed state) run on the hand-written kernel: a run with --matmul
// cublaslt whose every shape is refused trains as --matmul wmma, bit for bit, and says so once per
// shape, not per call (2 steps and a validation run every product several times).
static void test_lt_refused(const char *gpu, const char *dir) {
    int ref = test_system("%s " MATMUL_TINY " --steps 2 --out %s/w > %s/w.out 2>&1", gpu, dir, dir);
    Mlstm w, r;
    TrainState sw, sr;
    MlstmConfig cfg = {256, 32, 64, 1};
    real *hs = (real *)mallocCheck(sizeof(real) * 8 * 64 * 2);
    mlstm_build(&w, cfg, 1, 1);
    mlstm_build(&r, cfg, 1, 1);
    char p[4400];
    snprintf(p, sizeof p, "%s/w/latest.ckpt", dir);
    if (!ref) checkpoint_load(p, &w, &sw, hs, hs + 8 * 64, 8);
    const char *modes[] = {"status", "none", "state"};
    for (int i = 0; i < 3; i++) {
        int rc = test_system("CUDACPU_LT_REFUSE=%s %s " MATMUL_TINY " --steps 2 --matmul cublaslt --out %s/%s "
                             "> %s/%s.out 2>&1", modes[i], gpu, dir, modes[i], dir, modes[i]);
        snprintf(p, sizeof p, "%s/%s/latest.ckpt", dir, modes[i]);
        if (!rc && !ref) checkpoint_load(p, &r, &sr, hs, hs + 8 * 64, 8);
        const bool same = !rc && !ref && !memcmp(r.params, w.params, sizeof(real) * w.nparams) && sr.step == sw.step;
        // each refused shape said once: some lines, none repeated
        int once = test_system("n=$(grep -c 'cuBLASLt refuses .*: it runs on the hand-written kernel' %s/%s.out) && "
                               "test $n -ge 2 && test $(grep 'cuBLASLt refuses' %s/%s.out | sort -u | wc -l) = $n", dir,
                               modes[i], dir, modes[i]);
        CHECK(same && once == 0, "every shape refused by cuBLASLt (CUDACPU_LT_REFUSE=%s): the run trains as --matmul "
              "wmma, bit for bit, each shape said once (exit %d)", modes[i], rc);
        if (rc || once) test_system("cat %s/%s.out", dir, modes[i]);
    }
    mlstm_free(&w);
    mlstm_free(&r);
    free(hs);
}

static void test_matmul_flag(const char *self, int have_mpirun) {
    char dir[] = "/tmp/test_cudacpu_XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    char gpu[4200], cpu[4200];
    snprintf(gpu, sizeof gpu, "%s/train_gpu", self);
    snprintf(cpu, sizeof cpu, "%s/../train", self);
    int help = test_system("%s --help | grep -q -- '--matmul wmma|cublaslt' && %s --help | grep -q -- '--hidden'", gpu,
                           gpu);
    int cpu_help = test_system("%s --help | grep -q -- 'matmul'", cpu);
    CHECK(help == 0 && cpu_help == 1, "--matmul wmma|cublaslt in train_gpu's --help beside the shared flags, not "
          "in the CPU trainer's (%d %d)", help, cpu_help);
    int bad = test_system("%s --matmul cublas --steps 1 > %s/bad.out 2>&1", gpu, dir);
    int bad_said = test_system("grep -q -- '--matmul: expected one of wmma|cublaslt, got \"cublas\"' %s/bad.out", dir);
    int cpu_rc = test_system("%s --matmul wmma --steps 1 > %s/cpu.out 2>&1", cpu, dir);
    int cpu_said = test_system("grep -q -- '--matmul: a flag of the GPU trainer' %s/cpu.out", dir);
    CHECK(bad == 2 && bad_said == 0 && cpu_rc == 2 && cpu_said == 0,
          "train_gpu --matmul cublas and the CPU trainer's --matmul wmma exit 2, naming the flag (%d %d)", bad, cpu_rc);
    int r1 = test_system("%s " MATMUL_TINY " --steps 2 --matmul cublaslt --out %s/a > %s/a.out 2>&1", gpu, dir, dir);
    int r2 = test_system("%s " MATMUL_TINY " --steps 3 --resume %s/a > %s/b.out 2>&1", gpu, dir, dir);
    int recorded = test_system("grep -aq matmul %s/a/latest.ckpt", dir);
    CHECK(r1 == 0 && r2 == 0 && recorded == 1,
          "a run with --matmul cublaslt resumes with the hand-written matmuls; its checkpoint's record holds no "
          "--matmul (exit %d, %d; grep %d)", r1, r2, recorded);
    // a build without cuBLASLt: --matmul cublaslt is one line and exit 2, before the run directory
    int nolt =
        test_system("%s_nolt " MATMUL_TINY " --steps 1 --matmul cublaslt --out %s/n > %s/n.out 2>&1", gpu, dir, dir);
    int nolt_said = test_system("test $(wc -l < %s/n.out) = 1 && grep -q -- '--matmul cublaslt: this build has no "
                                "cuBLASLt' %s/n.out && test ! -e %s/n", dir, dir, dir);
    CHECK(nolt == 2 && nolt_said == 0, "built without cuBLASLt: --matmul cublaslt says so in one line, exit 2, no run "
          "directory (exit %d)", nolt);
    if (nolt_said) test_system("cat %s/n.out", dir);
    test_lt_refused(gpu, dir);
    if (have_mpirun) {
        int rc = test_system("cd %s && %s -np 1 %s " MATMUL_TINY " --steps 2 --matmul cublaslt --out mp : -np 1 %s "
                             MATMUL_TINY " --steps 2 --out mp > mp.out 2>&1", dir, mpirun_cmd, gpu, gpu);
        int said = test_system("grep -q -- 'rank 1 has --matmul wmma, rank 0 --matmul cublaslt' %s/mp.out", dir);
        int none = test_system("test -e %s/mp/latest.ckpt", dir);
        CHECK(rc != 0 && said == 0 && none != 0, "ranks started with another --matmul stop before any step, naming it "
              "(exit %d)", rc);
    }
    test_system("rm -rf %s", dir);
}

// ---- test_gpu's benchmark counts (gpu_check.sh passes them): anything but a whole number in range is refused in
// one line naming the flag, exit 2, before any test or benchmark runs (a count atoi read as 0 fell through to the
// whole test suite).
static void test_bench_counts(const char *self) {
    static const char *bad[][2] = {{"--bench-step abc 3", "--bench-step: B 'abc'"},
                                   {"--bench-step -5 3", "--bench-step: B '-5'"},
                                   {"--bench-step 4097 3", "--bench-step: B '4097'"},
                                   {"--bench-step 8 2x", "--bench-step: STEPS '2x'"},
                                   {"--bench-step 8 0", "--bench-step: STEPS '0'"},
                                   {"--bench-matmul 1e3", "--bench-matmul: B '1e3'"},
                                   {"--bench-kernels ''", "--bench-kernels: B ''"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char out[4200];
        snprintf(out, sizeof out, "%s/bench_count.out", self);
        int rc = test_system("%s/test_gpu %s > %s 2>&1", self, bad[i][0], out);
        int said = test_system("test $(wc -l < %s) = 1 && grep -q -- \"error: %s\" %s", out, bad[i][1], out);
        CHECK(rc == 2 && said == 0, "test_gpu %s: exit 2, one line naming the flag (exit %d)", bad[i][0], rc);
        if (said) test_system("cat %s", out);
        test_system("rm -f %s", out);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_collectives();
    test_schedules();
    EXPECT_EXIT(deadlock, NULL, ABORT, "deadlock", "a thread at __syncthreads while its warp waits at __syncwarp: deadlock reported");
    EXPECT_EXIT(divergent, NULL, ABORT, "divergent", "__syncthreads reached from two lines is reported");
    EXPECT_EXIT(exited, NULL, ABORT, "exited", "__syncthreads waiting for an exited thread is reported");
    EXPECT_EXIT(shfl_sites, NULL, ABORT, "disagree", "lanes at two different shuffles are reported");
    EXPECT_EXIT(shfl_half_mask, NULL, ABORT, "leaves it out", "a shuffle whose mask leaves out its caller is reported");
    EXPECT_EXIT(shfl_outside, NULL, ABORT, "not in the mask", "a shuffle reading a lane outside its mask is reported");
    test_cpasync();
    test_smem_limit();
    test_wmma();
    test_memory();
    test_graphs();
    test_fork_join();
    test_l2_window();
    test_capture_rules();
    test_priorities();
    test_cublaslt_rules();
    const char *self = test_bin_dir();
    char trainer[4200];
    const int have_mpirun = test_system("command -v mpirun > /dev/null") == 0;
    test_matmul_flag(self, have_mpirun);
    test_bench_counts(self);
    if (!have_mpirun && !getenv("REQUIRE_MPI"))
        SKIP("mpi: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)");
    else {
        // FP32: the two runs differ only in the order of FP32 sums, as the CPU trainer's test
        snprintf(trainer, sizeof trainer, "%s/train_gpu_fp32", self);
        test_mpi(trainer, "NCCL->MPI, FP32 build", 1e-5);
        // FP16: each rank's activations are rounded to FP16 from differently ordered
        // FP32 sums, so an element can flip by one FP16 ulp (u = 4.9e-4); such flips
        // are rare and diluted over all weights: 1e-4 relative (measured: 6e-7)
        snprintf(trainer, sizeof trainer, "%s/train_gpu", self);
        test_mpi(trainer, "NCCL->MPI, FP16 build", 1e-4);
    }
    return test_summary("test_cudacpu");
}
