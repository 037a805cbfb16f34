// test/cuda/mma.h: nvcuda::wmma on the CPU layer, 16x16x16 with half inputs and
// float or half accumulators. A fragment holds its whole tile in every lane (a GPU
// spreads it over the lanes); load_matrix_sync and mma_sync are warp collectives
// whose lanes must pass the same pointer and ldm, or fragments with the same
// contents (a difference means the lanes raced on the tile). store_matrix_sync is
// per lane and writes only the 8 accumulator elements the lane owns in sm_80's
// mma.m16n8k16 layout (rows lane/4 and lane/4 + 8, columns 2(lane%4) + {0,1} and
// 8 + 2(lane%4) + {0,1}), so a lane that reads the stored tile before __syncwarp
// sees what the others have not written yet. The product is float FMAs in k order:
// within tolerance of a tensor core, not bit for bit.
#pragma once
#include "cudacpu.h"
#include "cuda_fp16.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static constexpr int ROWS = std::is_same<Use, matrix_b>::value ? K : M;
    static constexpr int COLS = std::is_same<Use, matrix_a>::value ? K : N;
    static constexpr int num_elements = ROWS * COLS;  // here: the whole tile, row-major
    T x[ROWS * COLS];
};

template <typename Use, int M, int N, int K, typename T, typename L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, const T &v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}

namespace detail {
template <typename F> struct LoadCtx { bool col; };
// tile element (r,c) of a fragment loaded from p with leading dimension ldm
template <typename F, typename T> static void load_exec(cudacpu::Arrival *lanes, unsigned mask, void *ctx) {
    bool col = ((LoadCtx<F> *)ctx)->col;
    int first = __builtin_ctz(mask);
    const T *p = (const T *)lanes[first].ptr;
    unsigned ldm = lanes[first].ldm;
    F tile;
    for (int r = 0; r < F::ROWS; r++)
        for (int c = 0; c < F::COLS; c++) tile.x[r * F::COLS + c] = col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1) memcpy(lanes[l].frag[0], &tile, sizeof tile);
}
template <typename F, typename T> static void load(F &f, const T *p, unsigned ldm, bool col, const char *file, int line) {
    if ((uintptr_t)p % 32) cudacpu::fail(file, line, "wmma::load_matrix_sync: pointer %p is not 256-bit aligned", (const void *)p);
    if (ldm % (16 / sizeof(T)))
        cudacpu::fail(file, line, "wmma::load_matrix_sync: ldm %u is not a multiple of 16 bytes (%zu elements)", ldm, 16 / sizeof(T));
    cudacpu::Arrival a = {};
    a.ptr = p; a.ldm = ldm; a.value = col; a.frag[0] = &f;
    LoadCtx<F> ctx = {col};
    cudacpu::warp_collective(cudacpu::OP_WMMA_LOAD, 0xffffffffu, a, load_exec<F, T>, &ctx, file, line);
}
template <typename FD, typename FA, typename FB, typename FC> static void mma_exec(cudacpu::Arrival *lanes, unsigned mask, void *) {
    int first = __builtin_ctz(mask);
    const FA &a = *(const FA *)lanes[first].frag[1];
    const FB &b = *(const FB *)lanes[first].frag[2];
    const FC &c = *(const FC *)lanes[first].frag[3];
    for (int l = first + 1; l < 32; l++)  // every lane must hold the same operands
        if (memcmp(lanes[l].frag[1], &a, sizeof a) || memcmp(lanes[l].frag[2], &b, sizeof b) || memcmp(lanes[l].frag[3], &c, sizeof c))
            cudacpu::fail(nullptr, 0, "wmma::mma_sync: lane %d holds different operands than lane %d (a race on the tile?)", l, first);
    float fa[16][16], fb[16][16], acc[16][16];  // converted once; then sums in k order for every (i,j)
    for (int i = 0; i < 256; i++) {
        fa[i / 16][i % 16] = (float)a.x[i];
        fb[i / 16][i % 16] = (float)b.x[i];
        acc[i / 16][i % 16] = (float)c.x[i];
    }
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++)
            for (int j = 0; j < 16; j++) acc[i][j] += fa[i][k] * fb[k][j];  // the product of two halves is exact in float
    FD d;
    for (int i = 0; i < 256; i++) d.x[i] = acc[i / 16][i % 16];
    for (int l = 0; l < 32; l++) memcpy(lanes[l].frag[0], &d, sizeof d);
}
static inline uint64_t hash_bytes(const void *p, size_t n) {  // n a multiple of 8: fragments are
    uint64_t h = 0x9e3779b97f4a7c15ULL, w;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        memcpy(&w, (const char *)p + i, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
    }
    return h;
}
}  // namespace detail

template <typename Use, typename T, typename L>
static inline void load_matrix_sync_at(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm, const char *file, int line) {
    detail::load(f, p, ldm, std::is_same<L, col_major>::value, file, line);
}
template <typename T>
static inline void load_matrix_sync_at(fragment<accumulator, 16, 16, 16, T> &f, const T *p, unsigned ldm, layout_t l, const char *file,
                                       int line) {
    detail::load(f, p, ldm, l == mem_col_major, file, line);
}
template <typename TC, typename TA, typename LA, typename LB>
static inline void mma_sync_at(fragment<accumulator, 16, 16, 16, TC> &d, const fragment<matrix_a, 16, 16, 16, TA, LA> &a,
                               const fragment<matrix_b, 16, 16, 16, TA, LB> &b, const fragment<accumulator, 16, 16, 16, TC> &c,
                               const char *file, int line) {
    typedef fragment<accumulator, 16, 16, 16, TC> FC;
    cudacpu::Arrival x = {};
    x.frag[0] = &d; x.frag[1] = (void *)&a; x.frag[2] = (void *)&b; x.frag[3] = (void *)&c;
    cudacpu::warp_collective(cudacpu::OP_WMMA_MMA, 0xffffffffu, x,
                             detail::mma_exec<FC, fragment<matrix_a, 16, 16, 16, TA, LA>, fragment<matrix_b, 16, 16, 16, TA, LB>, FC>,
                             nullptr, file, line);
}
template <typename T>
static inline void store_matrix_sync_at(T *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ldm, layout_t l, const char *file,
                                        int line) {
    if ((uintptr_t)p % 32) cudacpu::fail(file, line, "wmma::store_matrix_sync: pointer %p is not 256-bit aligned", (void *)p);
    if (ldm % (16 / sizeof(T))) cudacpu::fail(file, line, "wmma::store_matrix_sync: ldm %u is not a multiple of 16 bytes", ldm);
    // all lanes store the same tile to the same place, though not at the same moment
    cudacpu::warp_agree("wmma::store_matrix_sync", (uint64_t)(uintptr_t)p ^ ((uint64_t)ldm << 48) ^ ((uint64_t)l << 63),
                        detail::hash_bytes(&f, sizeof f), file, line);
    int lane = cudacpu::lane_id(), g = lane / 4, t = lane % 4;
    for (int rr = 0; rr < 2; rr++)
        for (int cc = 0; cc < 4; cc++) {
            int r = g + 8 * rr, c = 2 * t + (cc & 1) + 8 * (cc >> 1);
            p[l == mem_row_major ? (size_t)r * ldm + c : (size_t)c * ldm + r] = f.x[r * 16 + c];
        }
}
}  // namespace wmma
}  // namespace nvcuda

#define load_matrix_sync(...) load_matrix_sync_at(__VA_ARGS__, __FILE__, __LINE__)
#define mma_sync(...) mma_sync_at(__VA_ARGS__, __FILE__, __LINE__)
#define store_matrix_sync(...) store_matrix_sync_at(__VA_ARGS__, __FILE__, __LINE__)
