// test/cuda/cudacpu.h: a CUDA execution layer on the CPU, for tests. train.cu and
// test/test_gpu.cu compile as host C++ against the headers in this folder
// (cuda_runtime.h, cuda_fp16.h, mma.h, cublasLt.h, nccl.h) after test/cuda/cudapp
// has rewritten the few constructs C++ cannot parse (<<<>>>, extern __shared__,
// cp.async asm), line for line. What the layer does (doc/gpu.md says what it cannot):
//   - each thread of a block is a fiber (its own stack, switched by a few lines of
//     assembly); the blocks of a grid run one after another, so a static __shared__
//     variable (a C++ static) belongs to the block that is running;
//   - __syncthreads(_or/_and/_count), __syncwarp, shuffles, votes and the WMMA
//     operations are real barriers: a fiber runs until it reaches one, then the
//     scheduler runs the others (in the order CUDACPU_SCHEDULE picks). Deadlock,
//     a barrier reached from different lines, exited threads a barrier waits for,
//     and lanes of a warp that disagree on mask, operation or call site are reported;
//   - WMMA fragments hold the whole 16x16 tile in every lane; lanes must pass the
//     same pointers and operands; store_matrix_sync writes only the elements the
//     storing lane owns on sm_80 (so a missing __syncwarp before reading them shows);
//   - cp.async copies land at the matching wait_group; the destination reads NaN
//     until then; alignment, sizes and the source range are checked;
//   - device memory is host memory, filled with NaN bytes when allocated, range-checked
//     by cudaMemcpy/cudaMemset/cp.async (and by ASan in the SAN build); more than 48 KB
//     of dynamic shared memory needs cudaFuncSetAttribute, as on a GPU;
//   - streams run everything at once, in call order, except a stream that is capturing
//     a CUDA graph: its launches, copies and memsets are recorded (kernel parameters
//     copied at the capture, as on a GPU) and run, in order, by each cudaGraphLaunch;
//     the calls CUDA refuses during a capture fail with CUDA's errors.
// A report names the kernel, the block, the thread and the line, and aborts.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <tuple>
#include <utility>
#include <functional>
#include <memory>
#include <type_traits>

#ifndef __CUDA_ARCH__
#error "cudacpu: build with -D__CUDA_ARCH__=750 or 800 (the device code path to emulate)"
#endif
#define CUDACPU 1

// ---- keywords: host C++ has no address spaces; a block's __shared__ is a static
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __constant__ static
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }

// device-side min/max as CUDA declares them (host code has std::min only)
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

namespace cudacpu {

// ---- the running thread (fiber) and block; valid inside a kernel only
struct Thread;
extern Thread *cur;        // the fiber that is running
extern uint3 cur_tid;      // its threadIdx (copied on every switch, so reading it is cheap)
extern uint3 block_idx;    // blockIdx of the running block
extern dim3 block_dim, grid_dim;
extern const char *kernel_name;
extern int arch;           // __CUDA_ARCH__ of the build, for the device properties

[[noreturn]] void fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void in_kernel(const char *what, const char *file, int line);  // fails outside a kernel

// Block barrier: kind 0 plain, 1 or, 2 and, 3 count. Returns the reduced predicate.
int syncthreads(int kind, int pred, const char *file, int line);

// Warp collectives. Every lane in `mask` must arrive with the same op, site and mask;
// the last to arrive executes `exec` (which fills each lane's result) for all of them.
enum Op { OP_SYNCWARP, OP_SHFL, OP_SHFL_UP, OP_SHFL_DOWN, OP_SHFL_XOR, OP_BALLOT, OP_ALL, OP_ANY,
          OP_WMMA_LOAD, OP_WMMA_MMA, OP_COUNT };
struct Arrival {           // what one lane brings to a collective
    uint64_t value;        // shuffled or voted value (bytes of the operand)
    int arg, width;        // source lane / delta / xor mask, and width
    const void *ptr;       // WMMA: the memory operand
    unsigned ldm;
    void *frag[4];         // WMMA: this lane's fragments (d, a, b, c)
};
typedef void (*ExecFn)(Arrival *lanes, unsigned mask, void *ctx);
// Returns this lane's 64-bit result (shuffles, votes).
uint64_t warp_collective(Op op, unsigned mask, const Arrival &mine, ExecFn exec, void *ctx, const char *file, int line);
int lane_id();

// Per-lane (non-blocking) consistency of a sequence of warp operations whose lanes
// may run at different times (store_matrix_sync): the n-th such call of every lane
// of a warp must agree on key (pointer, ldm, layout, a hash of the fragment).
void warp_agree(const char *what, uint64_t key1, uint64_t key2, const char *file, int line);

// ---- cp.async
size_t cvta_generic_to_shared(const void *p);
void cp_async(size_t shared_addr, const void *gmem, int bytes, int cache_global, const char *file, int line);
void cp_async_commit(const char *file, int line);
void cp_async_wait(int n, const char *file, int line);

// ---- dynamic shared memory of the running block; align is the declared alignment
void *dyn_smem(size_t align, const char *file, int line);

// ---- launching: the body runs once per thread, blocks one after another
typedef void (*BodyFn)(void *closure);
int launch_grid(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem, BodyFn body, void *closure,
                const char *file, int line);

bool is_device(const void *p, size_t n);  // [p, p+n) lies in one allocation (n = 0: p may be its end)
[[noreturn]] void bad_arg(int k, const void *p, const char *name, const char *file, int line);
template <typename T> static inline void check_arg(const T &x, int k, const char *name, const char *file, int line) {
    if constexpr (std::is_pointer<T>::value)
        if (x && !is_device((const void *)x, 0)) bad_arg(k, (const void *)x, name, file, line);
}
void set_schedule(const char *name);  // "lockstep" or "reverse" (tests; CUDACPU_SCHEDULE sets it for a run)

// Runs op on a stream now, or records it when the stream is capturing a graph (then
// each cudaGraphLaunch runs it). check validates the call at the time it is made, as
// CUDA does at a launch or a capture; op validates again when it runs. Returns the
// error, which is also kept for cudaGetLastError.
int submit(void *stream, const char *what, const char *file, int line, const std::function<int()> &check,
           std::function<int()> op);
int check_launch(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem, const char *file, int line);

template <typename... P> struct Launcher {
    void (*fn)(P...);
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t smem;
    void *stream;
    template <typename... A> void operator()(A &&...a) {
        static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
        // the kernel's parameters, converted and copied once, at the launch, as on a GPU
        // (a captured graph keeps this copy); each thread gets copies of its own
        struct Closure { void (*fn)(P...); std::tuple<typename std::decay<P>::type...> args; };
        auto c = std::make_shared<Closure>(Closure{fn, std::tuple<typename std::decay<P>::type...>(std::forward<A>(a)...)});
        Launcher l = *this;
        // a pointer argument must point into device memory (a host pointer faults on a GPU);
        // checked at the launch and again when a graph replays it (the memory may be freed)
        auto args_ok = [c, l]() {
            int k = 0;
            std::apply([&](const auto &...x) { (check_arg(x, k++, l.name, l.file, l.line), ...); }, c->args);
        };
        submit(stream, name, file, line,
               [args_ok, l]() { args_ok(); return check_launch((const void *)l.fn, l.name, l.grid, l.block, l.smem, l.file, l.line); },
               [args_ok, c, l]() {
                   args_ok();
                   return launch_grid((const void *)l.fn, l.name, l.grid, l.block, l.smem,
                                      [](void *p) { Closure *cl = (Closure *)p; std::apply(cl->fn, cl->args); }, c.get(), l.file, l.line);
               });
    }
};
template <typename... P>
Launcher<P...> launch(const char *file, int line, const char *name, void (*fn)(P...), dim3 grid, dim3 block, size_t smem = 0,
                      void *stream = nullptr) {
    return Launcher<P...>{fn, name, file, line, grid, block, smem, stream};
}

// ---- device memory registry (cudaMalloc'd ranges)
void check_device_range(const void *p, size_t n, const char *what, const char *file, int line);

}  // namespace cudacpu

#define threadIdx (cudacpu::cur_tid)
#define blockIdx (cudacpu::block_idx)
#define blockDim (cudacpu::block_dim)
#define gridDim (cudacpu::grid_dim)
static constexpr int warpSize = 32;

#define __syncthreads() ((void)cudacpu::syncthreads(0, 0, __FILE__, __LINE__))
#define __syncthreads_or(p) cudacpu::syncthreads(1, (p) != 0, __FILE__, __LINE__)
#define __syncthreads_and(p) cudacpu::syncthreads(2, (p) != 0, __FILE__, __LINE__)
#define __syncthreads_count(p) cudacpu::syncthreads(3, (p) != 0, __FILE__, __LINE__)
#define __syncwarp(...) cudacpu::Site{__FILE__, __LINE__}.syncwarp(__VA_ARGS__)
#define __shfl_sync(...) cudacpu::Site{__FILE__, __LINE__}.shfl(cudacpu::OP_SHFL, __VA_ARGS__)
#define __shfl_up_sync(...) cudacpu::Site{__FILE__, __LINE__}.shfl(cudacpu::OP_SHFL_UP, __VA_ARGS__)
#define __shfl_down_sync(...) cudacpu::Site{__FILE__, __LINE__}.shfl(cudacpu::OP_SHFL_DOWN, __VA_ARGS__)
#define __shfl_xor_sync(...) cudacpu::Site{__FILE__, __LINE__}.shfl(cudacpu::OP_SHFL_XOR, __VA_ARGS__)
#define __ballot_sync(m, p) ((unsigned)cudacpu::Site{__FILE__, __LINE__}.vote(cudacpu::OP_BALLOT, m, p))
#define __all_sync(m, p) ((int)cudacpu::Site{__FILE__, __LINE__}.vote(cudacpu::OP_ALL, m, p))
#define __any_sync(m, p) ((int)cudacpu::Site{__FILE__, __LINE__}.vote(cudacpu::OP_ANY, m, p))
#define __cvta_generic_to_shared(p) cudacpu::cvta_generic_to_shared(p)
#define __threadfence() __sync_synchronize()
#define __threadfence_block() __sync_synchronize()
#define __trap() cudacpu::fail(__FILE__, __LINE__, "__trap() in a kernel")

namespace cudacpu {
// The call site of a warp operation (lanes must agree on it), then the operation.
struct Site {
    const char *file;
    int line;
    void syncwarp(unsigned mask = 0xffffffffu) const {
        Arrival a = {};
        warp_collective(OP_SYNCWARP, mask, a, nullptr, nullptr, file, line);
    }
    template <typename T> T shfl(Op op, unsigned mask, T v, int arg, int width = 32) const {
        static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type wider than 8 bytes");
        Arrival a = {};
        memcpy(&a.value, &v, sizeof v);
        a.arg = arg; a.width = width;
        uint64_t r = warp_collective(op, mask, a, nullptr, nullptr, file, line);
        T out;
        memcpy(&out, &r, sizeof out);
        return out;
    }
    uint64_t vote(Op op, unsigned mask, int pred) const {
        Arrival a = {};
        a.value = pred != 0;
        return warp_collective(op, mask, a, nullptr, nullptr, file, line);
    }
};
}  // namespace cudacpu
