// test/cuda/cudacpu.cpp: the CPU layer's scheduler, barriers, cp.async and runtime
// (see cudacpu.h for what it checks). Compiled once per build with the same
// -D__CUDA_ARCH__ as the kernels.
#include "cuda_runtime.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <time.h>
#include <sys/mman.h>
#include <signal.h>
#include <map>
#include <set>
#include <vector>
#include <algorithm>

#if defined(__SANITIZE_ADDRESS__)
#define CUDACPU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDACPU_ASAN 1
#endif
#endif
#ifdef CUDACPU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// ----------------------------------------------------------------------------
// Context switch: cudacpu_switch(&save_sp, next_sp) pushes the callee-saved
// registers on the current stack, stores its pointer, loads the other stack's and
// pops its registers; `ret` resumes it. A new fiber's stack is built so that the
// first switch to it "returns" into cudacpu_trampoline, which calls cudacpu_fiber_main.
// (ucontext's swapcontext makes a signal-mask system call per switch: ~30x slower.)
extern "C" void cudacpu_switch(void **save_sp, void *next_sp);
extern "C" void cudacpu_trampoline(void);
extern "C" __attribute__((visibility("hidden"), used)) void cudacpu_fiber_main(void);

#if defined(__x86_64__)
__asm__(R"(
    .text
    .globl cudacpu_switch
    .type cudacpu_switch, @function
cudacpu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cudacpu_switch, .-cudacpu_switch
    .globl cudacpu_trampoline
    .type cudacpu_trampoline, @function
cudacpu_trampoline:
    call cudacpu_fiber_main
    ud2
    .size cudacpu_trampoline, .-cudacpu_trampoline
)");
enum { FRAME_WORDS = 9, RET_SLOT = 6 };  // 6 registers, the return address, 2 words so the trampoline starts 16-aligned
#elif defined(__aarch64__)
__asm__(R"(
    .text
    .globl cudacpu_switch
    .type cudacpu_switch, %function
cudacpu_switch:
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x2, sp
    str x2, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #176
    ret
    .size cudacpu_switch, .-cudacpu_switch
    .globl cudacpu_trampoline
    .type cudacpu_trampoline, %function
cudacpu_trampoline:
    bl cudacpu_fiber_main
    brk #0
    .size cudacpu_trampoline, .-cudacpu_trampoline
)");
enum { FRAME_WORDS = 22, RET_SLOT = 11 };  // x19..x30 (x30 = return address at slot 11), d8..d15
#else
#error "cudacpu: the context switch is written for x86-64 and arm64 only"
#endif

namespace cudacpu {

Thread *cur;
uint3 cur_tid, block_idx;
dim3 block_dim, grid_dim;
const char *kernel_name;
int arch = __CUDA_ARCH__;

enum State { RUNNABLE, AT_BARRIER, AT_WARP_OP, DONE };
struct Copy { char *dst; const char *src; int bytes; long group; };
struct Thread {
    void *sp;                 // saved stack pointer while not running
    char *stack;              // its stack (mmap'd, a guard page below)
    uint3 idx;
    int tid, lane, warp;
    State state;
    const char *file; int line; const char *what;  // where it waits (or last synchronised)
    uint64_t result;          // of the last collective
    long agree_seq;           // per-lane count of warp_agree calls
    std::vector<Copy> copies; // cp.async in flight
    long committed;           // cp.async groups committed so far
    void *fake_stack;         // ASan's fake stack while switched out
};
struct Agree { uint64_t k1, k2; const char *file; int line; unsigned seen; };
struct Warp {
    bool busy; Op op; unsigned mask, arrived; const char *file; int line;
    Arrival lanes[32];
    long agree_base;          // warp_agree: sequence number of agree[0]
    std::vector<Agree> agree;
};

static const size_t STACK = 256 << 10, PAGE = 4096;
static std::vector<Thread> threads;  // of the running block; stacks are kept between blocks
static std::vector<Warp> warps;
static int nthreads, ndone;
static void *sched_sp;               // the scheduler's stack pointer while a fiber runs
static BodyFn body_fn;
static void *body_closure;
static const char *launch_file;
static int launch_line;
static struct { int arrived, kind, acc; const char *file; int line; } bar;
static char *smem_base;              // dynamic shared memory of the running launch
static size_t smem_size;
static enum { SCHED_LOCKSTEP, SCHED_REVERSE } schedule;
static const char *schedule_names[] = {"lockstep", "reverse"};
#ifdef CUDACPU_ASAN
static const void *main_stack_bottom;
static size_t main_stack_size;
static void *sched_fake_stack;
#endif

static const char *op_names[OP_COUNT] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                         "__ballot_sync", "__all_sync", "__any_sync", "wmma::load_matrix_sync", "wmma::mma_sync"};

void fail(const char *file, int line, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "cudacpu: error: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (!file && cur) { file = cur->file; line = cur->line; }
    if (file) fprintf(stderr, " at %s:%d", file, line);
    fprintf(stderr, "\n");
    if (kernel_name)
        fprintf(stderr, "cudacpu:   in kernel %s launched at %s:%d, block (%u,%u,%u) of (%u,%u,%u), thread (%u,%u,%u), schedule %s\n",
                kernel_name, launch_file, launch_line, block_idx.x, block_idx.y, block_idx.z, grid_dim.x, grid_dim.y, grid_dim.z,
                cur ? cur->idx.x : 0, cur ? cur->idx.y : 0, cur ? cur->idx.z : 0, schedule_names[schedule]);
    abort();
}
void in_kernel(const char *what, const char *file, int line) {
    if (!cur) fail(file, line, "%s called outside a kernel", what);
}
int lane_id() { return cur->lane; }

// ----------------------------------------------------------------------------
// Fibers and the scheduler

static void yield_to_scheduler() {
    Thread *t = cur;
#ifdef CUDACPU_ASAN
    __sanitizer_start_switch_fiber(t->state == DONE ? nullptr : &t->fake_stack, main_stack_bottom, main_stack_size);
#endif
    cudacpu_switch(&t->sp, sched_sp);
#ifdef CUDACPU_ASAN
    __sanitizer_finish_switch_fiber(t->fake_stack, nullptr, nullptr);
#endif
}
static void run(Thread *t) {
    cur = t;
    cur_tid = t->idx;
#ifdef CUDACPU_ASAN
    __sanitizer_start_switch_fiber(&sched_fake_stack, t->stack, STACK);
#endif
    cudacpu_switch(&sched_sp, t->sp);
#ifdef CUDACPU_ASAN
    __sanitizer_finish_switch_fiber(sched_fake_stack, nullptr, nullptr);
#endif
    cur = nullptr;
}

static void check_exit(Thread *t);
}  // namespace cudacpu

using namespace cudacpu;
extern "C" void cudacpu_fiber_main(void) {
#ifdef CUDACPU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &main_stack_bottom, &main_stack_size);
#endif
    Thread *t = cur;
    t->file = nullptr; t->line = 0; t->what = "kernel body";
    body_fn(body_closure);
    t = cur;
    t->state = DONE;
    ndone++;
    check_exit(t);
    yield_to_scheduler();
    abort();  // a finished fiber is never resumed
}

namespace cudacpu {

static void describe(const Thread &t, char *buf, size_t n) {
    static const char *states[] = {"runnable", "waits at", "waits at", "exited"};
    snprintf(buf, n, "thread (%u,%u,%u) %s %s%s%s:%d", t.idx.x, t.idx.y, t.idx.z, states[t.state],
             t.state == AT_BARRIER || t.state == AT_WARP_OP ? t.what : "", t.state == DONE ? "" : " ", t.file ? t.file : "?", t.line);
}

// A thread that exits must not leave a barrier or a warp operation waiting for it,
// nor copies in flight.
static void check_exit(Thread *t) {
    if (!t->copies.empty())
        fail(nullptr, 0, "thread exits with %zu cp.async copies never waited for (cp.async.wait_group missing?)", t->copies.size());
    if (bar.arrived && bar.arrived + ndone == nthreads)
        fail(bar.file, bar.line, "__syncthreads waits for threads that have exited (a barrier in divergent code)");
    Warp &w = warps[t->warp];
    if (w.busy && (w.mask >> t->lane & 1))
        fail(w.file, w.line, "%s: lane %d of its mask 0x%08x exited", op_names[w.op], t->lane, w.mask);
}

static void deadlock() {
    char buf[256];
    fflush(stdout);
    fprintf(stderr, "cudacpu: error: deadlock: no thread of the block can continue\n");
    int shown = 0;
    for (const Thread &t : threads) {
        if (t.state == DONE || t.state == RUNNABLE) continue;
        if (shown++ == 8) { fprintf(stderr, "cudacpu:   ...\n"); break; }
        describe(t, buf, sizeof buf);
        fprintf(stderr, "cudacpu:   %s\n", buf);
    }
    cur = nullptr;
    fail(nullptr, 0, "deadlock (above)");
}

static void run_block() {
    const int n = nthreads;
    ndone = 0;
    bar.arrived = 0;
    for (int w = 0; w < (n + 31) / 32; w++) { warps[w].busy = false; warps[w].agree.clear(); warps[w].agree_base = 0; }
    if (smem_size) memset(smem_base, 0xff, smem_size);  // shared memory starts as NaN: reading it unwritten shows
    for (int i = 0; i < n; i++) {
        Thread &t = threads[i];
        t.idx = uint3{(unsigned)(i % block_dim.x), (unsigned)(i / block_dim.x % block_dim.y), (unsigned)(i / (block_dim.x * block_dim.y))};
        t.tid = i; t.lane = i % 32; t.warp = i / 32;
        t.state = RUNNABLE; t.file = nullptr; t.line = 0; t.what = "";
        t.agree_seq = 0; t.copies.clear(); t.committed = 0; t.fake_stack = nullptr;
#ifdef CUDACPU_ASAN
        __asan_unpoison_memory_region(t.stack, STACK);
#endif
        void **sp = (void **)((uintptr_t)(t.stack + STACK) & ~(uintptr_t)15) - FRAME_WORDS;
        memset(sp, 0, FRAME_WORDS * sizeof(void *));
        sp[RET_SLOT] = (void *)cudacpu_trampoline;
        t.sp = sp;
    }
    while (ndone < n) {
        bool progress = false;
        if (schedule == SCHED_LOCKSTEP) {  // every thread in turn, each until it waits
            for (int i = 0; i < n; i++)
                if (threads[i].state == RUNNABLE) { run(&threads[i]); progress = true; }
        } else {  // the last warp first, its lanes last to first, each warp until it waits at a block barrier
            for (int w = (n + 31) / 32 - 1; w >= 0; w--)
                for (bool any = true; any;) {
                    any = false;
                    for (int l = 31; l >= 0; l--) {
                        int i = w * 32 + l;
                        if (i < n && threads[i].state == RUNNABLE) { run(&threads[i]); any = progress = true; }
                    }
                }
        }
        if (!progress) deadlock();
    }
}

int syncthreads(int kind, int pred, const char *file, int line) {
    static const char *names[] = {"__syncthreads", "__syncthreads_or", "__syncthreads_and", "__syncthreads_count"};
    in_kernel(names[kind], file, line);
    Thread *t = cur;
    if (bar.arrived == 0) { bar.kind = kind; bar.file = file; bar.line = line; bar.acc = kind == 2 ? 1 : 0; }
    else if (bar.file != file || bar.line != line || bar.kind != kind)
        fail(file, line, "%s here while other threads wait at %s %s:%d (a barrier in divergent code)", names[kind], names[bar.kind],
             bar.file, bar.line);
    if (kind == 1) bar.acc |= pred;
    if (kind == 2) bar.acc &= pred;
    if (kind == 3) bar.acc += pred;
    t->file = file; t->line = line; t->what = names[kind];
    if (++bar.arrived + ndone < nthreads) {
        t->state = AT_BARRIER;
        yield_to_scheduler();
        return (int)t->result;
    }
    if (ndone) fail(file, line, "%s waits for %d threads that have exited (a barrier in divergent code)", names[kind], ndone);
    for (Thread &o : threads)
        if (o.state == AT_BARRIER) { o.state = RUNNABLE; o.result = (uint64_t)bar.acc; }
    bar.arrived = 0;
    return bar.acc;
}

// Results of a completed shuffle or vote, per lane, by the PTX rules.
static void exec_simple(Warp &w) {
    unsigned mask = w.mask;
    uint64_t ballot = 0;
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1) ballot |= (uint64_t)(w.lanes[l].value != 0) << l;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1)) continue;
        const Arrival &a = w.lanes[l];
        uint64_t r = 0;
        int width = a.width, base = l & ~(width - 1), src = l;
        switch (w.op) {
        case OP_SYNCWARP: break;
        case OP_BALLOT: r = ballot; break;
        case OP_ALL: r = ballot == mask; break;
        case OP_ANY: r = ballot != 0; break;
        case OP_SHFL: src = base + (a.arg & (width - 1)); break;
        case OP_SHFL_UP: src = l - a.arg >= base ? l - a.arg : l; break;
        case OP_SHFL_DOWN: src = l + a.arg < base + width ? l + a.arg : l; break;
        case OP_SHFL_XOR: src = l ^ a.arg; if (src >= base + width || src < base) src = l; break;
        default: break;
        }
        if (w.op >= OP_SHFL && w.op <= OP_SHFL_XOR) {
            if (!(mask >> src & 1))
                fail(w.file, w.line, "%s: lane %d reads lane %d, which is not in the mask 0x%08x", op_names[w.op], l, src, mask);
            r = w.lanes[src].value;
        }
        threads[32 * (cur->warp) + l].result = r;
    }
}

uint64_t warp_collective(Op op, unsigned mask, const Arrival &mine, ExecFn exec, void *ctx, const char *file, int line) {
    in_kernel(op_names[op], file, line);
    Thread *t = cur;
    Warp &w = warps[t->warp];
    if (!(mask >> t->lane & 1)) fail(file, line, "%s: lane %d calls it with a mask 0x%08x that leaves it out", op_names[op], t->lane, mask);
    int wbase = t->warp * 32;
    if (!w.busy)  // the first lane to arrive checks the mask; a lane that exits later is caught by check_exit
        for (int l = 0; l < 32; l++)
            if (mask >> l & 1) {
                if (wbase + l >= nthreads) fail(file, line, "%s: mask 0x%08x names lane %d, which the block does not have", op_names[op], mask, l);
                if (threads[wbase + l].state == DONE) fail(file, line, "%s: lane %d of the mask 0x%08x has exited", op_names[op], l, mask);
            }
    if ((op >= OP_SHFL && op <= OP_SHFL_XOR) && (mine.width < 1 || mine.width > 32 || (mine.width & (mine.width - 1))))
        fail(file, line, "%s: width %d is not a power of two up to 32", op_names[op], mine.width);
    if (!w.busy) { w.busy = true; w.op = op; w.mask = mask; w.file = file; w.line = line; w.arrived = 0; }
    else if (w.op != op || w.mask != mask || w.file != file || w.line != line)
        fail(file, line, "lanes of warp %d disagree: lane %d at %s (mask 0x%08x) while lanes 0x%08x wait at %s (mask 0x%08x) %s:%d", t->warp,
             t->lane, op_names[op], mask, w.arrived, op_names[w.op], w.mask, w.file, w.line);
    if (op == OP_WMMA_LOAD) {  // every lane must load the same tile
        int first = __builtin_ctz(w.arrived | (1u << t->lane));
        const Arrival &f = first == t->lane ? mine : w.lanes[first];
        if (f.ptr != mine.ptr || f.ldm != mine.ldm || f.value != mine.value)
            fail(file, line, "wmma::load_matrix_sync: lane %d loads %p ldm %u, lane %d %p ldm %u", t->lane, mine.ptr, mine.ldm, first, f.ptr, f.ldm);
    }
    if ((op >= OP_SHFL && op <= OP_SHFL_XOR) && w.arrived && w.lanes[__builtin_ctz(w.arrived)].width != mine.width)
        fail(file, line, "%s: lanes pass different widths", op_names[op]);
    w.lanes[t->lane] = mine;
    w.arrived |= 1u << t->lane;
    t->file = file; t->line = line; t->what = op_names[op];
    if (w.arrived != mask) {
        t->state = AT_WARP_OP;
        yield_to_scheduler();
        return t->result;
    }
    if (exec) exec(w.lanes, mask, ctx);
    else exec_simple(w);
    w.busy = false;
    for (int l = 0; l < 32; l++)
        if ((mask >> l & 1) && l != t->lane) threads[wbase + l].state = RUNNABLE;
    return t->result;
}

void warp_agree(const char *what, uint64_t k1, uint64_t k2, const char *file, int line) {
    in_kernel(what, file, line);
    Thread *t = cur;
    Warp &w = warps[t->warp];
    long i = t->agree_seq++ - w.agree_base;
    if (i == (long)w.agree.size()) w.agree.push_back(Agree{k1, k2, file, line, 0});
    Agree &a = w.agree[i];
    if (a.k1 != k1 || a.file != file || a.line != line)
        fail(file, line, "%s: lane %d passes a different pointer or ldm than another lane did at %s:%d", what, t->lane, a.file, a.line);
    if (a.k2 != k2) fail(file, line, "%s: lane %d stores a fragment that differs from another lane's (a race on the tile?)", what, t->lane);
    a.seen |= 1u << t->lane;
    int nl = nthreads - t->warp * 32 < 32 ? nthreads - t->warp * 32 : 32;
    while (!w.agree.empty() && w.agree[0].seen == (nl == 32 ? 0xffffffffu : (1u << nl) - 1)) {  // everyone passed: forget it
        w.agree.erase(w.agree.begin());
        w.agree_base++;
    }
}

// ----------------------------------------------------------------------------
// Shared memory and cp.async

void *dyn_smem(size_t align, const char *file, int line) {
    in_kernel("extern __shared__", file, line);
    if (align > 256) fail(file, line, "extern __shared__ aligned to %zu bytes: the layer gives 256", align);
    return smem_base;
}
size_t cvta_generic_to_shared(const void *p) {
    in_kernel("__cvta_generic_to_shared", nullptr, 0);
    if (!smem_base || (const char *)p < smem_base || (const char *)p >= smem_base + smem_size)
        fail(nullptr, 0, "__cvta_generic_to_shared(%p): not in the block's dynamic shared memory (%zu bytes)", p, smem_size);
    return (size_t)((const char *)p - smem_base);
}
void cp_async(size_t saddr, const void *gmem, int bytes, int cache_global, const char *file, int line) {
    in_kernel("cp.async", file, line);
    if (bytes != 4 && bytes != 8 && bytes != 16) fail(file, line, "cp.async of %d bytes (4, 8 or 16)", bytes);
    if (cache_global && bytes != 16) fail(file, line, "cp.async.cg copies 16 bytes, not %d", bytes);
    if (saddr + bytes > smem_size) fail(file, line, "cp.async to shared offset %zu + %d, beyond the %zu bytes of the block", saddr, bytes, smem_size);
    char *dst = smem_base + saddr;
    if ((uintptr_t)dst % bytes || (uintptr_t)gmem % bytes)
        fail(file, line, "cp.async of %d bytes from %p to shared offset %zu: misaligned", bytes, gmem, saddr);
    check_device_range(gmem, bytes, "cp.async source", file, line);
    memset(dst, 0xff, bytes);  // NaN until the group is waited for
    cur->copies.push_back(Copy{dst, (const char *)gmem, bytes, cur->committed});
}
void cp_async_commit(const char *file, int line) {
    in_kernel("cp.async.commit_group", file, line);
    cur->committed++;
}
// Completes the copies of every group but the newest n; the uncommitted ones stay.
void cp_async_wait(int n, const char *file, int line) {
    in_kernel("cp.async.wait_group", file, line);
    Thread *t = cur;
    size_t keep = 0;
    for (size_t i = 0; i < t->copies.size(); i++) {
        Copy &c = t->copies[i];
        if (c.group < t->committed - n) memcpy(c.dst, c.src, c.bytes);
        else t->copies[keep++] = c;
    }
    t->copies.resize(keep);
}

// ----------------------------------------------------------------------------
// Device memory

static std::map<uintptr_t, size_t> allocs;  // start -> size
static cudaError_t last_error = cudaSuccess;
static std::map<const void *, int> smem_optin;  // kernel -> cudaFuncAttributeMaxDynamicSharedMemorySize
static const size_t SMEM_DEFAULT = 48 << 10, SMEM_OPTIN = 227 << 10;
static const int L2_PERSIST_MAX = (50 << 20) / 4 * 3, L2_WINDOW_MAX = (128 << 20) - (2 << 10);
static int sms_override;

bool is_device(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return false;
    --it;
    return a >= it->first && a - it->first <= it->second && n <= it->second - (a - it->first);
}
void check_device_range(const void *p, size_t n, const char *what, const char *file, int line) {
    if (!is_device(p, n)) fail(file, line, "%s [%p, +%zu) is not inside one device allocation", what, p, n);
}
static void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "cudacpu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}
static cudaError_t set_error(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

int check_launch(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem, const char *file, int line) {
    long nt = (long)block.x * block.y * block.z;
    if (nt < 1 || nt > 1024 || block.z > 64 || grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.y > 65535 || grid.z > 65535 ||
        grid.x > 2147483647u) {
        note("%s:%d: launch of %s with grid (%u,%u,%u) block (%u,%u,%u): invalid configuration", file, line, name, grid.x, grid.y,
             grid.z, block.x, block.y, block.z);
        return set_error(cudaErrorInvalidConfiguration);
    }
    auto it = smem_optin.find(kernel);
    size_t limit = it != smem_optin.end() && (size_t)it->second > SMEM_DEFAULT ? (size_t)it->second : SMEM_DEFAULT;
    if (smem > limit) {
        note("%s:%d: launch of %s with %zu bytes of dynamic shared memory; the limit is %zu%s", file, line, name, smem, limit,
             limit == SMEM_DEFAULT ? " (above 48 KB needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize))" : "");
        return set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

int launch_grid(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem, BodyFn body, void *closure, const char *file,
                int line) {
    if (cur) fail(file, line, "kernel %s launched from inside a kernel", name);
    if (int e = check_launch(kernel, name, grid, block, smem, file, line)) return e;
    long nt = (long)block.x * block.y * block.z;
    if ((int)threads.size() < nt) {
        size_t old = threads.size();
        threads.resize(nt);
        for (size_t i = old; i < (size_t)nt; i++) {
            char *m = (char *)mmap(nullptr, STACK + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (m == MAP_FAILED) { perror("cudacpu: mmap"); abort(); }
            mprotect(m, PAGE, PROT_NONE);  // a stack overflow faults instead of corrupting the next stack
            threads[i].stack = m + PAGE;
        }
    }
    if (warps.size() < (size_t)(nt + 31) / 32) warps.resize((nt + 31) / 32);
    nthreads = (int)nt;
    char *buf = nullptr;
    if (smem && posix_memalign((void **)&buf, 256, smem)) { perror("cudacpu: shared memory"); abort(); }
    smem_base = buf; smem_size = smem;
    body_fn = body; body_closure = closure; kernel_name = name; launch_file = file; launch_line = line;
    block_dim = block; grid_dim = grid;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                block_idx = uint3{x, y, z};
                run_block();
            }
    free(buf);
    smem_base = nullptr; smem_size = 0; kernel_name = nullptr;
    return cudaSuccess;
}

void bad_arg(int k, const void *p, const char *name, const char *file, int line) {
    fail(file, line, "argument %d of kernel %s is %p, not device memory (a host pointer?)", k + 1, name, p);
}
void set_schedule(const char *s) {
    if (!s || !strcmp(s, "lockstep")) schedule = SCHED_LOCKSTEP;
    else if (!strcmp(s, "reverse")) schedule = SCHED_REVERSE;
    else { fprintf(stderr, "cudacpu: CUDACPU_SCHEDULE=%s: use lockstep or reverse\n", s); exit(2); }
}
#ifndef CUDACPU_ASAN
// A fault inside a kernel (a misaligned vector access, a wild pointer, a fiber's stack
// overflowing into its guard page) names the kernel, block and thread, as a GPU's
// "misaligned address" / "illegal address" error names the kernel. ASan has its own.
static void on_fault(int sig) {
    if (kernel_name)
        fprintf(stderr, "cudacpu: error: %s in kernel %s launched at %s:%d, block (%u,%u,%u), thread (%u,%u,%u), last at %s:%d\n",
                sig == SIGBUS ? "SIGBUS" : "SIGSEGV", kernel_name, launch_file, launch_line, block_idx.x, block_idx.y, block_idx.z,
                cur ? cur->idx.x : 0, cur ? cur->idx.y : 0, cur ? cur->idx.z : 0, cur && cur->file ? cur->file : "?", cur ? cur->line : 0);
    signal(sig, SIG_DFL);
    raise(sig);
}
#endif
static void init_schedule() __attribute__((constructor));
static void init_schedule() {
#ifndef CUDACPU_ASAN
    static char altstack[64 << 10];  // the handler must run when a fiber's stack is exhausted
    stack_t ss = {};
    ss.ss_sp = altstack; ss.ss_size = sizeof altstack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa = {};
    sa.sa_handler = on_fault;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
#endif
    set_schedule(getenv("CUDACPU_SCHEDULE"));
    const char *n = getenv("CUDACPU_SMS");
    sms_override = n ? atoi(n) : 0;
    // The trainer re-executes itself once to set OpenMP's wait policy (mlstm.h); under a
    // test program that would restart the test with the trainer's flags. Passive
    // waiting is what the re-exec would choose anyway.
    setenv("OMP_WAIT_POLICY", "passive", 0);
}

}  // namespace cudacpu

// ----------------------------------------------------------------------------
// The runtime API

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureUnmatched: return "the capture was not initiated in this stream";
    case cudaErrorStreamCaptureUnjoined:
        return "the capture sequence contains a fork that was not joined to the primary stream";
    case cudaErrorStreamCaptureIsolation:
        return "a dependency would have been created which crosses the capture sequence boundary";
    }
    return "unknown error";
}
cudaError_t cudaGetLastError(void) { cudaError_t e = last_error; last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError(void) { return last_error; }
cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return set_error(d == 0 ? cudaSuccess : cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (d != 0) return set_error(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cudacpu (CPU emulation of sm_%d, schedule %s)", arch / 10, schedule_names[schedule]);
    p->major = arch / 100; p->minor = arch / 10 % 10;
    p->multiProcessorCount = sms_override > 0 ? sms_override : 132;  // an H200's
    p->totalGlobalMem = (size_t)141 << 30;
    p->sharedMemPerBlock = SMEM_DEFAULT; p->sharedMemPerBlockOptin = SMEM_OPTIN;
    p->warpSize = 32; p->maxThreadsPerBlock = 1024;
    p->l2CacheSize = 50 << 20;  // an H200's; persisting L2 from sm_80 on: 75% of it, windows up to 128 MB
    p->persistingL2CacheMaxSize = arch >= 800 ? L2_PERSIST_MAX : 0;
    p->accessPolicyMaxWindowSize = arch >= 800 ? L2_WINDOW_MAX : 0;
    return cudaSuccess;
}
// ----------------------------------------------------------------------------
// Streams and graphs. Work runs at once, in call order (one device, nothing
// concurrent), except on a stream that is capturing: that records it, and each
// cudaGraphLaunch runs the recording in order. What CUDA refuses during a capture is
// refused here with CUDA's error, and invalidates the capture (cudaStreamEndCapture
// then fails), so a capture that could not work on a GPU fails here too:
//   - the legacy stream (0, and with it the synchronous cudaMemcpy and cudaMemset)
//     waits for every blocking stream, as all streams here are: using it while one
//     captures would make it wait for the capture: cudaErrorStreamCaptureImplicit;
//   - waiting for a capture (cudaStreamSynchronize on it, cudaDeviceSynchronize):
//     cudaErrorStreamCaptureUnsupported; so is cudaMalloc or cudaFree in the global
//     and thread-local modes (they may synchronise the device);
//   - the layer's own rules, stricter than CUDA's documented ones: kernel attributes
//     (cudaFuncSetAttribute) and stream attributes are set before a capture.
// A capture may fork into other streams and join back, as on a GPU: an event recorded in
// a capturing stream stands for that stream's last nodes; a stream that waits for it
// joins the capture, and its work depends on those nodes. The graph keeps each node's
// dependencies, cudaStreamEndCapture fails with cudaErrorStreamCaptureUnjoined unless
// every stream that joined has been waited for by the capturing one, and a replay runs
// the nodes in an order the dependencies allow: capture order under the lockstep
// schedule; under reverse, the forked streams' nodes as soon as their dependencies have
// run (before the capturing stream's). So a dependency the code forgot (a fork that does
// not wait for the work it reads) runs in the wrong order under reverse, as it may on a GPU.
struct Node { const char *what; std::function<int()> op; std::vector<int> deps; bool forked; int priority; };
struct cudacpu_graph { std::vector<Node> nodes; cudaStream_t origin; bool capturing; };
struct cudacpu_graph_exec { std::vector<Node> nodes; std::vector<int> order; };
struct CUstream_st {
    cudaStreamCaptureStatus capture;
    cudaStreamCaptureMode mode;
    cudacpu_graph *graph;           // the capture it takes part in (its origin's, for a stream that joined)
    std::vector<int> tail;          // the nodes its next captured work depends on
    cudaAccessPolicyWindow window;  // cudaStreamSetAttribute's (num_bytes 0: none)
    int priority;                   // cudaStreamCreateWithPriority's (0: the default, the least)
};
static std::set<cudaStream_t> streams;
static std::set<cudaGraph_t> graphs;
static std::set<cudaGraphExec_t> execs;

static cudaStream_t capturing() {  // a stream with a capture under way, if any
    for (cudaStream_t s : streams)
        if (s->capture != cudaStreamCaptureStatusNone) return s;
    return nullptr;
}
// Invalidates the capture s takes part in, on every stream of it.
static void invalidate(cudaStream_t s) {
    for (cudaStream_t o : streams)
        if (o->capture == cudaStreamCaptureStatusActive && o->graph == s->graph)
            o->capture = cudaStreamCaptureStatusInvalidated;
}
// Refuses a call made during a capture: invalidates s's capture (every capture without s).
static cudaError_t refuse(cudaStream_t s, cudaError_t e, const char *what) {
    note("%s while a stream is capturing a graph: %s; the capture is invalidated", what, cudaGetErrorString(e));
    for (cudaStream_t o : streams)
        if (o->capture == cudaStreamCaptureStatusActive && (!s || o->graph == s->graph))
            o->capture = cudaStreamCaptureStatusInvalidated;
    return set_error(e);
}
static cudaError_t legacy_stream_ok(const char *what) {
    return capturing() ? refuse(nullptr, cudaErrorStreamCaptureImplicit, what) : cudaSuccess;
}
static cudaError_t stream_ok(cudaStream_t s, const char *what) {
    if (!s || streams.count(s)) return cudaSuccess;
    note("%s on %p, which is not a live stream", what, (void *)s);
    return set_error(cudaErrorInvalidResourceHandle);
}

int cudacpu::submit(void *stream, const char *what, const char *file, int line, const std::function<int()> &check,
                    std::function<int()> op) {
    cudaStream_t s = (cudaStream_t)stream;
    if (cudaError_t e = stream_ok(s, what)) return e;
    if (!s && capturing()) {
        char where[600];
        snprintf(where, sizeof where, "%s (%s:%d) on the legacy stream", what, file ? file : "?", line);
        return legacy_stream_ok(where);
    }
    if (int e = check()) {  // check has set the error
        if (s && s->capture == cudaStreamCaptureStatusActive) invalidate(s);
        return e;
    }
    if (!s || s->capture == cudaStreamCaptureStatusNone) return op();
    if (s->capture == cudaStreamCaptureStatusInvalidated) return set_error(cudaErrorStreamCaptureInvalidated);
    s->graph->nodes.push_back(Node{what, std::move(op), s->tail, s != s->graph->origin, s->priority});
    s->tail.assign(1, (int)s->graph->nodes.size() - 1);
    return cudaSuccess;
}

// Priorities, an H100's range: 0 the least (the default), -5 the greatest; a priority outside it is
// clamped to it, as CUDA does. Nothing runs concurrently here, so a priority changes no order; a
// capture keeps it per node (cudaGraphInstantiate below).
static const int PRIORITY_LEAST = 0, PRIORITY_GREATEST = -5;
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    *least = PRIORITY_LEAST;
    *greatest = PRIORITY_GREATEST;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority) {
    if (flags != cudaStreamDefault) {
        note("cudaStreamCreateWithPriority: flags %u (the layer has blocking streams only)", flags);
        return set_error(cudaErrorInvalidValue);
    }
    priority = priority > PRIORITY_LEAST ? PRIORITY_LEAST : priority < PRIORITY_GREATEST ? PRIORITY_GREATEST
                                                                                        : priority;
    *s = new CUstream_st{cudaStreamCaptureStatusNone, cudaStreamCaptureModeGlobal, nullptr, {},
                         cudaAccessPolicyWindow{}, priority};
    streams.insert(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) {
    return cudaStreamCreateWithPriority(s, cudaStreamDefault, PRIORITY_LEAST);
}
cudaError_t cudaStreamGetPriority(cudaStream_t s, int *priority) {
    if (cudaError_t e = stream_ok(s, "cudaStreamGetPriority")) return e;
    *priority = s ? s->priority : PRIORITY_LEAST;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    if (cudaError_t e = stream_ok(s, "cudaStreamDestroy")) return e;
    if (s->capture != cudaStreamCaptureStatusNone) { note("cudaStreamDestroy of a stream that is capturing"); return set_error(cudaErrorIllegalState); }
    streams.erase(s);
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    if (!s) { note("cudaStreamBeginCapture: the legacy stream cannot be captured"); return set_error(cudaErrorStreamCaptureUnsupported); }
    if (cudaError_t e = stream_ok(s, "cudaStreamBeginCapture")) return e;
    if (s->capture != cudaStreamCaptureStatusNone) { note("cudaStreamBeginCapture: the stream is capturing already"); return set_error(cudaErrorIllegalState); }
    s->capture = cudaStreamCaptureStatusActive;
    s->mode = mode;
    s->graph = new cudacpu_graph{{}, s, true};
    s->tail.clear();
    return cudaSuccess;
}
// The nodes on which the nodes `from` depend, and those nodes.
static std::set<int> ancestors(const cudacpu_graph *g, const std::vector<int> &from) {
    std::set<int> seen;
    std::vector<int> todo(from);
    while (!todo.empty()) {
        int n = todo.back();
        todo.pop_back();
        if (!seen.insert(n).second) continue;
        for (int d : g->nodes[n].deps) todo.push_back(d);
    }
    return seen;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    *g = nullptr;
    if (cudaError_t e = stream_ok(s, "cudaStreamEndCapture")) return e;
    if (!s || s->capture == cudaStreamCaptureStatusNone) { note("cudaStreamEndCapture: the stream is not capturing"); return set_error(cudaErrorIllegalState); }
    cudacpu_graph *graph = s->graph;
    if (graph->origin != s) {
        note("cudaStreamEndCapture on a stream that joined the capture, not on the one that began it");
        return set_error(cudaErrorStreamCaptureUnmatched);
    }
    bool ok = s->capture == cudaStreamCaptureStatusActive, joined = true;
    std::set<int> before_end = ancestors(graph, s->tail);
    for (cudaStream_t o : streams) {  // every stream that joined must have been joined back
        if (o == s || o->graph != graph) continue;
        for (int n : o->tail) joined &= before_end.count(n) > 0;
        o->graph = nullptr;
        o->capture = cudaStreamCaptureStatusNone;
        o->tail.clear();
    }
    s->graph = nullptr;
    s->capture = cudaStreamCaptureStatusNone;
    s->tail.clear();
    graph->capturing = false;
    if (!ok || !joined) {
        if (!joined)
            note("cudaStreamEndCapture: a stream that joined the capture has work the capturing stream never waited for");
        delete graph;
        return set_error(ok ? cudaErrorStreamCaptureUnjoined : cudaErrorStreamCaptureInvalidated);
    }
    graphs.insert(graph);
    *g = graph;
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status) {
    *status = cudaStreamCaptureStatusNone;
    if (cudaError_t e = stream_ok(s, "cudaStreamIsCapturing")) return e;
    if (!s) return capturing() ? set_error(cudaErrorStreamCaptureImplicit) : cudaSuccess;
    *status = s->capture;
    return cudaSuccess;
}
// The layer's rule, stricter than CUDA: a graph captured from streams of different priorities must be
// instantiated with cudaGraphInstantiateFlagUseNodePriority; without it CUDA runs every node at the
// priority of the stream the graph is launched into, and the priorities the capture kept are lost.
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags) {
    *exec = nullptr;
    if (!graphs.count(g) || (flags & ~(unsigned long long)cudaGraphInstantiateFlagUseNodePriority))
        return set_error(cudaErrorInvalidValue);
    if (!(flags & cudaGraphInstantiateFlagUseNodePriority))
        for (const Node &n : g->nodes)
            if (n.priority != g->nodes[0].priority) {
                note("cudaGraphInstantiate: nodes captured at priorities %d and %d, without "
                     "cudaGraphInstantiateFlagUseNodePriority: every node would run at the launch stream's",
                     g->nodes[0].priority, n.priority);
                return set_error(cudaErrorInvalidValue);
            }
    // the nodes, copied (the graph may be destroyed now), and the order a replay runs them in:
    // among the nodes whose dependencies have run, the first captured (lockstep), or the first
    // captured of a forked stream, else of the capturing one (reverse)
    std::vector<int> order, pending(g->nodes.size());
    std::vector<std::vector<int>> users(g->nodes.size());
    std::set<int> ready;
    for (size_t i = 0; i < g->nodes.size(); i++) {
        pending[i] = (int)g->nodes[i].deps.size();
        for (int d : g->nodes[i].deps) users[d].push_back((int)i);
        if (!pending[i]) ready.insert((int)i);
    }
    while (!ready.empty()) {
        int n = *ready.begin();
        if (schedule == SCHED_REVERSE)
            for (int r : ready)
                if (g->nodes[r].forked) { n = r; break; }
        ready.erase(n);
        order.push_back(n);
        for (int u : users[n])
            if (!--pending[u]) ready.insert(u);
    }
    *exec = new cudacpu_graph_exec{g->nodes, order};
    execs.insert(*exec);
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    if (!execs.count(exec)) { note("cudaGraphLaunch of %p, which is not an instantiated graph", (void *)exec); return set_error(cudaErrorInvalidResourceHandle); }
    std::vector<Node> nodes = exec->nodes;  // (captured into another graph, this launch keeps its own copy)
    std::vector<int> order = exec->order;
    return (cudaError_t)submit(s, "cudaGraphLaunch", nullptr, 0, [] { return 0; }, [nodes, order] {
        for (int i : order)
            if (int e = nodes[i].op()) return e;
        return 0;
    });
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    if (!execs.erase(exec)) return set_error(cudaErrorInvalidValue);
    delete exec;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    if (!graphs.erase(g)) return set_error(cudaErrorInvalidValue);
    delete g;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    return capturing() ? refuse(nullptr, cudaErrorStreamCaptureUnsupported, "cudaDeviceSynchronize") : cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (cudaError_t e = stream_ok(s, "cudaStreamSynchronize")) return e;
    if (!s) return legacy_stream_ok("cudaStreamSynchronize of the legacy stream");
    if (s->capture != cudaStreamCaptureStatusNone) return refuse(s, cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize of the capturing stream");
    return cudaSuccess;
}
// cudaMalloc and cudaFree may synchronise the device: refused during a global or thread-local capture
static cudaError_t alloc_ok(const char *what) {
    cudaStream_t s = capturing();
    return s && s->mode != cudaStreamCaptureModeRelaxed ? refuse(nullptr, cudaErrorStreamCaptureUnsupported, what) : cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) {
    *p = nullptr;
    if (cudaError_t e = alloc_ok("cudaMalloc")) return e;
    if (n == 0) return cudaSuccess;
    void *m = nullptr;
    if (n > ((size_t)64 << 30) || posix_memalign(&m, 256, n)) return set_error(cudaErrorMemoryAllocation);
    memset(m, 0xff, n);  // NaN in every float format: a read of memory never written shows
    allocs[(uintptr_t)m] = n;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (cudaError_t e = alloc_ok("cudaFree")) return e;
    if (!p) return cudaSuccess;
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end()) { note("cudaFree(%p): not the start of a device allocation", p); return set_error(cudaErrorInvalidDevicePointer); }
    allocs.erase(it);
    free(p);
    return cudaSuccess;
}
// Each side must be what the kind says: device memory inside one allocation, or host memory.
static cudaError_t check_side(const void *p, size_t n, bool device, const char *what) {
    if (device ? is_device(p, n) : !is_device(p, 1)) return cudaSuccess;
    note("%s %p (+%zu bytes) is %s", what, p, n, device ? "not inside one device allocation" : "device memory, but the copy kind says host");
    return set_error(cudaErrorInvalidValue);
}
static cudaError_t memcpy_check(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    bool ddev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool sdev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyDefault) { ddev = is_device(dst, 1); sdev = is_device(src, 1); }
    cudaError_t e;
    if ((e = check_side(dst, n, ddev, "cudaMemcpy destination")) || (e = check_side(src, n, sdev, "cudaMemcpy source"))) return e;
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    if (cudaError_t e = legacy_stream_ok("cudaMemcpy (synchronous, on the legacy stream)")) return e;
    if (n == 0) return cudaSuccess;
    if (cudaError_t e = memcpy_check(dst, src, n, kind)) return e;
    memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    auto check = [=] { return n ? memcpy_check(dst, src, n, kind) : cudaSuccess; };
    return (cudaError_t)submit(s, "cudaMemcpyAsync", nullptr, 0, check, [=] {
        cudaError_t e = check();
        if (!e && n) memmove(dst, src, n);  // the memory as it is when the copy runs (at a graph's replay)
        return e;
    });
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    if (cudaError_t e = legacy_stream_ok("cudaMemset (synchronous, on the legacy stream)")) return e;
    if (n == 0) return cudaSuccess;
    if (cudaError_t e = check_side(p, n, true, "cudaMemset")) return e;
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    auto check = [=] { return n ? check_side(p, n, true, "cudaMemsetAsync") : cudaSuccess; };
    return (cudaError_t)submit(s, "cudaMemsetAsync", nullptr, 0, check, [=] {
        cudaError_t e = check();
        if (!e && n) memset(p, v, n);
        return e;
    });
}
cudaError_t cudaFuncSetAttribute_(const void *fn, cudaFuncAttribute attr, int value) {
    if (capturing()) return refuse(nullptr, cudaErrorStreamCaptureUnsupported, "cudaFuncSetAttribute (the layer's rule: before a capture)");
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > SMEM_OPTIN) {
            note("cudaFuncSetAttribute: %d bytes of dynamic shared memory; the device allows %zu", value, SMEM_OPTIN);
            return set_error(cudaErrorInvalidValue);
        }
        smem_optin[fn] = value;
    }
    return cudaSuccess;
}
// Persisting L2: the layer checks what a GPU takes silently. A window must lie inside one device
// allocation and fit accessPolicyMaxWindowSize; a persisting window needs the persisting limit set
// (without it nothing persists: the switch would do nothing on a GPU); both are set before a
// capture (the layer's rule). What persists is not simulated (results do not depend on it). The
// set-aside cudaDeviceGetLimit reads back is what was asked rounded up to whole MiB (capped at the
// maximum): CUDA does not promise the value asked for (a driver sets L2 aside in units of its own),
// so code must compare it with >=. CUDACPU_L2_GRANT_MAX=BYTES makes the layer grant at most that
// (a driver that gives less than asked), so code must read back what it got.
static size_t persisting_limit;
static const size_t L2_SET_ASIDE_UNIT = (size_t)1 << 20;
cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
    if (capturing())
        return refuse(nullptr, cudaErrorStreamCaptureUnsupported, "cudaDeviceSetLimit (the layer's rule: before a capture)");
    if (limit != cudaLimitPersistingL2CacheSize) return set_error(cudaErrorInvalidValue);
    if (arch < 800 || value > (size_t)L2_PERSIST_MAX) {
        note("cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, %zu): the device allows %d", value,
             arch < 800 ? 0 : L2_PERSIST_MAX);
        return set_error(cudaErrorInvalidValue);
    }
    persisting_limit = (value + L2_SET_ASIDE_UNIT - 1) / L2_SET_ASIDE_UNIT * L2_SET_ASIDE_UNIT;
    if (persisting_limit > (size_t)L2_PERSIST_MAX) persisting_limit = L2_PERSIST_MAX;
    const char *grant_max = getenv("CUDACPU_L2_GRANT_MAX");
    if (grant_max && *grant_max && persisting_limit > strtoull(grant_max, NULL, 10))
        persisting_limit = strtoull(grant_max, NULL, 10);
    return cudaSuccess;
}
cudaError_t cudaDeviceGetLimit(size_t *value, cudaLimit limit) {
    if (limit != cudaLimitPersistingL2CacheSize) return set_error(cudaErrorInvalidValue);
    *value = persisting_limit;
    return cudaSuccess;
}
cudaError_t cudaStreamSetAttribute(cudaStream_t s, cudaStreamAttrID attr, const cudaStreamAttrValue *v) {
    if (cudaError_t e = stream_ok(s, "cudaStreamSetAttribute")) return e;
    if (!s) { note("cudaStreamSetAttribute on the legacy stream"); return set_error(cudaErrorInvalidResourceHandle); }
    if (s->capture != cudaStreamCaptureStatusNone)
        return refuse(s, cudaErrorStreamCaptureUnsupported,
                      "cudaStreamSetAttribute (the layer's rule: before a capture)");
    if (attr != cudaStreamAttributeAccessPolicyWindow) return set_error(cudaErrorInvalidValue);
    const cudaAccessPolicyWindow &w = v->accessPolicyWindow;
    if (w.num_bytes) {
        if (arch < 800 || w.num_bytes > (size_t)L2_WINDOW_MAX || !(w.hitRatio >= 0.f && w.hitRatio <= 1.f) ||
            w.hitProp > cudaAccessPropertyPersisting || w.missProp > cudaAccessPropertyPersisting) {
            note("cudaStreamSetAttribute: access policy window of %zu bytes, hit ratio %g: not valid here", w.num_bytes,
                 w.hitRatio);
            return set_error(cudaErrorInvalidValue);
        }
        if (!is_device(w.base_ptr, w.num_bytes)) {
            note("cudaStreamSetAttribute: the access policy window [%p, +%zu) is not inside one device allocation",
                 w.base_ptr, w.num_bytes);
            return set_error(cudaErrorInvalidValue);
        }
        if (w.hitProp == cudaAccessPropertyPersisting && !persisting_limit) {
            note("cudaStreamSetAttribute: a persisting window, no persisting L2 set aside (cudaDeviceSetLimit first)");
            return set_error(cudaErrorInvalidValue);
        }
    }
    s->window = w;
    return cudaSuccess;
}
cudaError_t cudaStreamGetAttribute(cudaStream_t s, cudaStreamAttrID attr, cudaStreamAttrValue *v) {
    if (cudaError_t e = stream_ok(s, "cudaStreamGetAttribute")) return e;
    if (!s || attr != cudaStreamAttributeAccessPolicyWindow) return set_error(cudaErrorInvalidValue);
    memset(v, 0, sizeof *v);
    v->accessPolicyWindow = s->window;
    return cudaSuccess;
}
cudaError_t cudaCtxResetPersistingL2Cache(void) {
    if (capturing()) return refuse(nullptr, cudaErrorStreamCaptureUnsupported, "cudaCtxResetPersistingL2Cache");
    return cudaSuccess;
}

// An event recorded outside a capture holds the time it ran (everything runs at once); one
// recorded in a capture, the capturing stream's last nodes, for the streams that wait for it.
struct cudacpu_event { double t; unsigned flags; cudacpu_graph *graph; std::vector<int> nodes; };
static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new cudacpu_event{0, 0, nullptr, {}}; return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    if (flags & ~(unsigned)cudaEventDisableTiming) return set_error(cudaErrorInvalidValue);
    *e = new cudacpu_event{0, flags, nullptr, {}};
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (cudaError_t err = stream_ok(s, "cudaEventRecord")) return err;
    if (!s && capturing()) return legacy_stream_ok("cudaEventRecord on the legacy stream");
    if (s && s->capture == cudaStreamCaptureStatusInvalidated) return set_error(cudaErrorStreamCaptureInvalidated);
    if (s && s->capture == cudaStreamCaptureStatusActive) {
        e->graph = s->graph;
        e->nodes = s->tail;
        return cudaSuccess;
    }
    e->graph = nullptr;
    e->nodes.clear();
    e->t = now_s();
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    if (cudaError_t err = stream_ok(s, "cudaStreamWaitEvent")) return err;
    if (flags) return set_error(cudaErrorInvalidValue);
    if (e->graph && !e->graph->capturing) {
        note("cudaStreamWaitEvent for an event recorded in a capture that has ended");
        return set_error(cudaErrorStreamCaptureIsolation);
    }
    if (!s && (e->graph || capturing())) return legacy_stream_ok("cudaStreamWaitEvent on the legacy stream");
    if (!e->graph) {  // an event of work that has run (all of it has): nothing to wait for, unless s captures
        if (s && s->capture != cudaStreamCaptureStatusNone)
            return refuse(s, cudaErrorStreamCaptureIsolation,
                          "cudaStreamWaitEvent for an event recorded outside the capture");
        return cudaSuccess;
    }
    if (s->capture == cudaStreamCaptureStatusNone) {  // s joins the capture
        s->capture = e->graph->origin->capture;
        s->mode = e->graph->origin->mode;
        s->graph = e->graph;
        s->tail = e->nodes;
        return cudaSuccess;
    }
    if (s->graph != e->graph)
        return refuse(s, cudaErrorStreamCaptureIsolation, "cudaStreamWaitEvent across two captures");
    for (int n : e->nodes)
        if (std::find(s->tail.begin(), s->tail.end(), n) == s->tail.end()) s->tail.push_back(n);
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (e->graph) {
        note("cudaEventSynchronize of an event recorded in a capture");
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if ((a->flags | b->flags) & cudaEventDisableTiming || a->graph || b->graph)
        return set_error(cudaErrorInvalidResourceHandle);
    *ms = (float)(1e3 * (b->t - a->t));
    return cudaSuccess;
}
