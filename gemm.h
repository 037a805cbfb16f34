// gemm.h: the fast FP32 matmuls of the CPU trainer (dev/bench/cpu-perf.md), which fast.h's
// forward and backward call where mlstm.h's reference calls its plain matmul_nt/nn/tn.
//
// One register-blocked kernel does all the work: a tile of MR rows x NR columns of
// C lives in vector registers while k runs; each step adds the outer product of MR
// values of A (broadcast) and NR values of B (NV vectors). B is packed first into
// KC x NR panels that the kernel streams; A is read in place through strides (an A^T
// of the weight gradients, read down its columns, is packed too on the 4-row tile:
// gemm_pack_a). In the recurrence, W_h and W_mh are the same for all T steps: they
// are packed once per forward (and once per backward) and every step reuses them.
//
// Every element of C is one chain c = init; c += a_k b_k for k = 0..K-1 in order
// (init: C itself, the bias, or 0). Tiles beyond the edge of A or B compute on
// repeated rows or zero columns that are never stored, so an element gets the same
// operations whatever tile it falls in, however many threads split the work, and
// whatever vector width the compiler was given (MR, NR differ by instruction set,
// the chain does not). Fused multiply-add, where the build contracts a*b+c, makes
// the rounding differ between machines; never between runs or thread counts.
//
// BF16 products (GemmPrecision), the mixed precision of Micikevicius et al. 2018 that the paper
// trains with on the GPU, on the same packing, blocking and tiles: both operands are rounded to
// BF16 (to nearest, ties to even) as they are packed, two k to a 4-byte slot, and the kernel adds
// a pair's products to the FP32 accumulators with AVX512-BF16's vdpbf16ps. Its arithmetic is
// exact products (8-bit by 8-bit significands), added to the accumulator one after the other,
// the odd k first, each sum of the exact values rounded to nearest even, a subnormal accumulator
// read as zero and a subnormal sum flushed to zero (with its sign): c = (c + a_{k+1} b_{k+1}) +
// a_k b_k, as Intel defines it, and as probed bit for bit on Zen 4 (random operands, and
// subnormal, tiny, huge and cancelling ones: test_gemm_bf16). The scalar emulation
// (gemm_bf16_dot_emulated) does the same operations in that order, so native and emulated give
// the same bits, and the emulation runs (slowly) on every CPU.
//
// Where the CPU has AMX-BF16 (Sapphire Rapids and later) and the kernel grants its tiles, the BF16
// products run on them instead (GEMM_BF16_AMX): a tile of C is 16 rows x 16 FP32, and one
// tdpbf16ps adds to it the products of a 16-row tile of A and a tile of B of 16 k pairs (32 k).
// Its arithmetic, probed bit for bit on Sapphire Rapids (random operands and subnormal, tiny, huge,
// infinite and cancelling ones; test_gemm_bf16 keeps checking it), is not vdpbf16ps's: over the
// instruction's 32 k, the even k's exact products are summed in k order from +0, each sum rounded
// to nearest even, the odd k's likewise apart, then the two sums are added, and that is added to
// C, each of these sums rounded once and a subnormal one flushed to zero with its sign, a
// subnormal C read as zero: c = c + (e + o), e = (..(0 + a_0 b_0) + a_2 b_2) + .. + a_30 b_30, o
// the same over the odd k. So it groups k by 32 from the start of K (every k block starts on a
// multiple of 32) and its bits differ from vdpbf16ps's; its scalar emulation
// (gemm_amx_tile_emulated, GEMM_BF16_AMX_EMULATED) does the same on the same packing, and gives
// its bits on any CPU. Its A and B are padded with zero to whole tiles of 32 k (gemm_depth_rows),
// which the emulation adds as the instruction does.
#pragma once
#include "mlstm.h"  // MatmulInto and the order of a matmul's sizes: (rows, cols, depth)
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

// The tile: MR rows x NV vectors. MR = 4 or 8 divides the rows a thread owns in the time
// loops (fast.h splits the batch on multiples of 4), so no row of a tile is wasted there.
// 8 rows where the CPU has AVX-512, 4 elsewhere. -DGEMM_MR=8 or 4 builds the other tile on
// any CPU (GCC splits vectors wider than the CPU's, slowly): the tests run both tiles' code
// on every machine (the Makefile's test_gemm_other_tile).
#ifndef GEMM_MR
#if defined(__AVX512F__)
#define GEMM_MR 8
#else
#define GEMM_MR 4
#endif
#endif
#if GEMM_MR == 8
#define GEMM_VB 64   // bytes per vector: 32 registers hold 8x2 accumulators, 2 for B, 1 for A
#define GEMM_NV 2
#elif GEMM_MR == 4
#if defined(__AVX__)
#define GEMM_VB 32   // 16 registers: 4x3 accumulators, 3 for B, 1 for A
#else
#define GEMM_VB 16   // SSE: 16 registers too
#endif
#define GEMM_NV 3
#else
#error "gemm.h: GEMM_MR (the tile's rows) is 4 or 8"
#endif
// An A read down its columns (the weight gradients' dOut^T) is packed per k block (gemm_pack_a)
// in a product of 8 panels or more, on either tile; -DGEMM_PACK_A=0 reads it in place there too,
// as the products of fewer panels do (the 8-row tile fetching it ahead: GEMM_FETCH_A).
#ifndef GEMM_PACK_A
#define GEMM_PACK_A 1
#endif
#define GEMM_VL (GEMM_VB / 4)         // floats per vector
#define GEMM_NR (GEMM_NV * GEMM_VL)   // columns per tile
// k per packed block of a weight the time loops stream (gemm_pack, gemm_packed_serial). On
// the 4-row tile 1024: a tile then loads and stores its C once per 1024 k, not 256 (C is a
// step's gates, 512 KB at H = 1024, B = 32, in L3 between blocks), and its A sliver (4 x 1024,
// 16 KB) stays in L1. The 8-row tile keeps 256 (its sliver would fill L1; not measured).
#ifndef GEMM_KC_STREAMED
#define GEMM_KC_STREAMED (GEMM_MR == 4 ? 1024 : GEMM_KC)
#endif
#define GEMM_KC 256             // k per packed block: an A sliver (MR x KC) stays in L1
#define GEMM_NC (256 / GEMM_NR * GEMM_NR)  // columns per block of packed B that a thread keeps in L2: whole panels
_Static_assert(GEMM_NC % GEMM_NR == 0, "a block of B is whole panels: its packed size is KC x NC");
_Static_assert(GEMM_KC % 2 == 0 && GEMM_KC_STREAMED % 2 == 0, "BF16 k pairs never straddle two k blocks");

typedef float gemm_vec __attribute__((vector_size(GEMM_VB), aligned(4), may_alias));

// What a product's operands are rounded to: FP32 (as they are), or BF16 (8-bit significands,
// FP32's exponent range) with FP32 accumulation, on AVX512-BF16 (Zen 4 and later, Cooper Lake,
// Sapphire Rapids and later) or in the scalar emulation of the same arithmetic on any CPU, or on
// AMX-BF16's tiles (Sapphire Rapids and later) or the emulation of theirs, whose sums' order differs.
typedef enum { GEMM_FP32, GEMM_BF16_NATIVE, GEMM_BF16_EMULATED, GEMM_BF16_AMX, GEMM_BF16_AMX_EMULATED } GemmPrecision;
static inline int gemm_is_amx(GemmPrecision prec) { return prec == GEMM_BF16_AMX || prec == GEMM_BF16_AMX_EMULATED; }
static inline int gemm_bf16_is_native(GemmPrecision prec) { return prec == GEMM_BF16_NATIVE || prec == GEMM_BF16_AMX; }
typedef uint16_t gemm_bf16 __attribute__((may_alias));  // a BF16 value's bits, stored in a float buffer
typedef uint32_t gemm_slot __attribute__((may_alias));  // a packed pair of BF16 (k even low, k + 1 high)

// Whether this build and CPU run vdpbf16ps: GCC 10 and clang 11 know the target, and the CPU
// says so in cpuid (libgcc's check includes the OS saving AVX-512's registers).
#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 11) || \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#define GEMM_BF16_BUILT 1
#include <immintrin.h>
#define GEMM_BF16_TARGET __attribute__((target("avx512f,avx512vl,avx512bf16")))
#else
#define GEMM_BF16_BUILT 0
#endif
static inline int gemm_bf16_native_supported(void) {
#if GEMM_BF16_BUILT
    return __builtin_cpu_supports("avx512bf16") != 0;
#else
    return 0;
#endif
}

// Whether this build and CPU run AMX-BF16's tiles: GCC 11 and clang 12 know the target, cpuid
// says the CPU has AMX-TILE and AMX-BF16, and Linux (5.16 and later) grants this process the
// tiles' 8 KB of state, which it asks for once (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA: the permission is the process's, all its threads'). libgcc 12's
// __builtin_cpu_supports does not know AMX: cpuid leaf 7, EDX bits 22 (AMX-BF16) and 24 (AMX-TILE).
#if defined(__x86_64__) && defined(__linux__) && ((defined(__clang__) && __clang_major__ >= 12) || \
                                                  (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define GEMM_AMX_BUILT 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define GEMM_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))
#ifndef ARCH_REQ_XCOMP_PERM
#define ARCH_REQ_XCOMP_PERM 0x1023  // as <asm/prctl.h> of Linux 5.16 and later defines it
#endif
#define GEMM_XFEATURE_XTILEDATA 18  // the tiles' data in XSAVE's state (Linux's XFEATURE_XTILEDATA)
#else
#define GEMM_AMX_BUILT 0
#endif
static inline int gemm_bf16_amx_supported(void) {
#if GEMM_AMX_BUILT
    static int known = -1;  // asked once: first from the main thread (the trainer's model_products, the tests)
    if (known < 0) {
        unsigned eax, ebx, ecx, edx;
        int cpu = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx >> 22 & 1) && (edx >> 24 & 1);
        known = cpu && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, GEMM_XFEATURE_XTILEDATA) == 0;
    }
    return known;
#else
    return 0;
#endif
}

// k values per packed row: a BF16 operand holds a k pair in each 4-byte slot, so a block of kc k
// is (kc + 1) / 2 rows of slots (an odd kc's last pair padded with a zero), for AMX whole tiles
// of 16 pairs (the rest zero); offsets into packed operands count slots (floats) for any precision.
#define GEMM_AMX_PAIRS 16  // k pairs in a tile of A (16 rows x 64 bytes) and of B (16 rows of pairs)
static inline int gemm_depth_rows(int kc, GemmPrecision prec) {
    return prec == GEMM_FP32 ? kc
           : gemm_is_amx(prec) ? ((kc + 1) / 2 + GEMM_AMX_PAIRS - 1) / GEMM_AMX_PAIRS * GEMM_AMX_PAIRS
                               : (kc + 1) / 2;
}
_Static_assert(GEMM_KC % (2 * GEMM_AMX_PAIRS) == 0 && GEMM_KC_STREAMED % (2 * GEMM_AMX_PAIRS) == 0,
               "AMX's k groups of 32 start at every k block's start, the same from K's start");

// FP32 to BF16, to nearest, ties to even (as vcvtneps2bf16): the carry of the rounding increment
// runs into the exponent, so the largest values round to infinity; a NaN stays a (quiet) NaN;
// subnormals become zero, as vdpbf16ps reads them.
// (Selects, not branches: the packing loops vectorise.)
static inline uint16_t gemm_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    nearest = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x0040u : nearest;
    return (uint16_t)((u & 0x7f800000u) == 0 ? (u >> 16) & 0x8000u : nearest);
}
static inline float gemm_bf16_value(uint32_t bits16) {
    uint32_t u = bits16 << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// Runs of values rounded as gemm_bf16_round: n values of src to BF16 at dst (gemm_bf16_run), and
// n pairs' slots, the low k's values from lo and the high k's from hi (NULL: zero), at dst
// (gemm_bf16_pair_run). Where prec's products run natively (GEMM_BF16_NATIVE or _AMX, whose CPUs
// have AVX512-BF16), 16 values an instruction with vcvtneps2bf16, which rounds as
// gemm_bf16_round does (Intel's definition; test_gemm_bf16 checks the two against each other); the
// emulated precisions round in scalar code, so every CPU runs that path, and gives the same bytes.
#if GEMM_BF16_BUILT
#define GEMM_BF16_CONVERT_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16")))
static inline GEMM_BF16_CONVERT_TARGET __mmask16 gemm_bf16_mask(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}
static GEMM_BF16_CONVERT_TARGET void gemm_bf16_run_native(gemm_bf16 *dst, const float *src, int n) {
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = gemm_bf16_mask(n - j);
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + j));
        _mm256_mask_storeu_epi16(dst + j, m, (__m256i)h);
    }
}
static GEMM_BF16_CONVERT_TARGET void gemm_bf16_pair_run_native(gemm_slot *dst, const float *lo, const float *hi,
                                                                int n) {
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = gemm_bf16_mask(n - j);
        __m512i slots = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, lo + j)));
        if (hi)
            slots = _mm512_or_si512(slots, _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(
                                                                 _mm512_maskz_loadu_ps(m, hi + j))), 16));
        _mm512_mask_storeu_epi32(dst + j, m, slots);
    }
}
static GEMM_BF16_CONVERT_TARGET void gemm_bf16_column_run_native(gemm_slot *dst, int stride, const float *src, int n) {
    const __m512i at = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(stride));
    for (int k = 0; k < n; k += 32) {  // 32 values, 16 slots: the low half of the conversion from the first 16
        const __m512bh pairs = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(gemm_bf16_mask(n - k - 16), src + k + 16),
                                                   _mm512_maskz_loadu_ps(gemm_bf16_mask(n - k), src + k));
        _mm512_mask_i32scatter_epi32(dst + (size_t)(k / 2) * stride, gemm_bf16_mask((n - k + 1) / 2), at,
                                     (__m512i)pairs, 4);
    }
}
#endif
static inline void gemm_bf16_run(gemm_bf16 *dst, const float *src, int n, GemmPrecision prec) {
#if GEMM_BF16_BUILT
    if (gemm_bf16_is_native(prec)) {
        gemm_bf16_run_native(dst, src, n);
        return;
    }
#endif
    (void)prec;
    for (int j = 0; j < n; j++) dst[j] = gemm_bf16_round(src[j]);
}
static inline void gemm_bf16_pair_run(gemm_slot *dst, const float *lo, const float *hi, int n, GemmPrecision prec) {
#if GEMM_BF16_BUILT
    if (gemm_bf16_is_native(prec)) {
        gemm_bf16_pair_run_native(dst, lo, hi, n);
        return;
    }
#endif
    (void)prec;
    if (hi)
        for (int j = 0; j < n; j++) dst[j] = gemm_bf16_round(lo[j]) | (uint32_t)gemm_bf16_round(hi[j]) << 16;
    else
        for (int j = 0; j < n; j++) dst[j] = gemm_bf16_round(lo[j]);
}

// A run of n values that lie as k pairs (a row of W, packed as a column of B = W^T: gemm_pack_nt), as
// (n + 1) / 2 slots, the first at dst and each the next stride slots on (an odd n's last pair's high
// half zero).
static inline void gemm_bf16_column_run(gemm_slot *dst, int stride, const float *src, int n, GemmPrecision prec) {
#if GEMM_BF16_BUILT
    if (gemm_bf16_is_native(prec)) {
        gemm_bf16_column_run_native(dst, stride, src, n);
        return;
    }
#endif
    (void)prec;
    for (int k = 0; k < n; k += 2) {
        const uint32_t hi = k + 1 < n ? gemm_bf16_round(src[k + 1]) : 0;
        dst[(size_t)(k / 2) * stride] = gemm_bf16_round(src[k]) | hi << 16;
    }
}

// Element (k, j) of an operand packed k after k, W values of j per k (a panel of B: W = NR; a
// sliver of A: W = MR), in d: a float each, or BF16 in k pairs, ((k/2) W + j) slots in.
static inline void gemm_put(float *d, int W, int k, int j, float x, GemmPrecision prec) {
    if (prec == GEMM_FP32) d[(size_t)k * W + j] = x;
    else ((gemm_bf16 *)d)[((size_t)(k >> 1) * W + j) * 2 + (k & 1)] = gemm_bf16_round(x);
}

static inline int gemm_panels(int N) { return (N + GEMM_NR - 1) / GEMM_NR; }
// floats of a packed (K,N) operand, N columns and depth K: panels of NR columns, zero-padded
// (BF16: the same in k pairs; every streamed block but the last holds an even number of k)
static inline size_t gemm_packed_floats(int N, int K, GemmPrecision prec) {
    return (size_t)gemm_depth_rows(K, prec) * gemm_panels(N) * GEMM_NR;
}

// Packs B (K,N), element (k,n) at b[k*rs + n*cs], rows [k0, k0+kc), into
// bp[panel][k][NR] (BF16: bp[panel][k/2][NR] in k pairs): the kernel's order. Columns past N,
// and an odd kc's last pair's second k (AMX: the pairs up to a whole tile's 16), are zero.
static inline void gemm_pack_block(float *bp, const float *b, ptrdiff_t rs, ptrdiff_t cs, int k0, int kc, int N, int p0,
                                   int p1, GemmPrecision prec) {
    const int rows = gemm_depth_rows(kc, prec);
    for (int p = p0; p < p1; p++) {
        float *d = bp + (size_t)p * rows * GEMM_NR;
        int n0 = p * GEMM_NR, nn = N - n0 < GEMM_NR ? N - n0 : GEMM_NR;
        if (nn < GEMM_NR || (prec != GEMM_FP32 && 2 * rows != kc)) memset(d, 0, sizeof(float) * rows * GEMM_NR);
        if (cs == 1 && prec == GEMM_FP32)  // rows of B are contiguous
            for (int k = 0; k < kc; k++)
                memcpy(d + (size_t)k * GEMM_NR, b + (size_t)(k0 + k) * rs + n0, sizeof(float) * nn);
        else if (cs == 1)  // BF16: rows k and k + 1 of B make a row of pair slots (an odd kc's last alone)
            for (int k = 0; k < kc; k += 2) {
                const float *lo = b + (size_t)(k0 + k) * rs + n0;
                gemm_bf16_pair_run((gemm_slot *)d + (size_t)(k >> 1) * GEMM_NR, lo, k + 1 < kc ? lo + rs : NULL, nn,
                                   prec);
            }
        else if (rs == 1 && prec != GEMM_FP32)  // BF16, B's columns contiguous: a column's k pairs side by side
            for (int j = 0; j < nn; j++)
                gemm_bf16_column_run((gemm_slot *)d + j, GEMM_NR, b + (size_t)(n0 + j) * cs + k0, kc, prec);
        else  // columns are: 8 at a time (columns a page apart share an L1 set), each line read for 16 k
            for (int j0 = 0; j0 < nn; j0 += 8)
                for (int k = 0; k < kc; k++) {
                    const float *s = b + (size_t)(k0 + k) * rs;
                    for (int j = j0; j < j0 + 8 && j < nn; j++)
                        gemm_put(d, GEMM_NR, k, j, s[(size_t)(n0 + j) * cs], prec);
                }
    }
}
// The whole of B (K,N), block after block of KC_STREAMED rows: block k0 starts at
// gemm_depth_rows(k0) * panels * NR.
static inline void gemm_pack(float *bp, const float *b, ptrdiff_t rs, ptrdiff_t cs, int N, int K, GemmPrecision prec) {
    int np = gemm_panels(N), nk = (K + GEMM_KC_STREAMED - 1) / GEMM_KC_STREAMED;
    #pragma omp parallel for schedule(static) collapse(2)
    for (int kb = 0; kb < nk; kb++)
        for (int p = 0; p < np; p++) {
            int k0 = kb * GEMM_KC_STREAMED, kc = K - k0 < GEMM_KC_STREAMED ? K - k0 : GEMM_KC_STREAMED;
            gemm_pack_block(bp + (size_t)gemm_depth_rows(k0, prec) * np * GEMM_NR, b, rs, cs, k0, kc, N, p, p + 1,
                            prec);
        }
}

// The kernel's k loop: acc += A . Bp over kc steps, A row i's element k at ar[i][k*csa].
// fetch says which lines it brings into L2 ahead of use; it is a constant at each call,
// so each case is a loop of its own, and a tile that fetches nothing runs no prefetch.
//  - GEMM_FETCH_NEXT: this tile's share of the packed panel the caller streams after this
//    one (next): the time loops' weights come from L3 or memory at every step, and the few
//    row tiles of a small batch would otherwise wait on each panel. A panel's row tiles
//    share the fetch, each a row of the next panel every `every` k, so the lines arrive at
//    the rate they are used: one tile fetching the whole panel (96 KB at k = 1024) outran
//    the misses a core keeps in flight, and stalled.
//  - GEMM_FETCH_A: A read down its columns (A^T in the weight gradients), 8 k ahead: each
//    k a new line, a page or more from the last, where the hardware prefetchers do not
//    follow (into L1 the lines, all on one set at these strides, would evict the ones in
//    use). Where such an A is read in place (a product of fewer than 8 panels; gemm_pack_a
//    packs it in the others), and only for the 8-row tile: on the 4-row tile a line serves
//    four tiles in turn, and fetching it cost more than it saved (dev/bench/cpu-perf.md).
enum { GEMM_FETCH_NONE, GEMM_FETCH_NEXT, GEMM_FETCH_A };
// How many row tiles share that fetch, the panel's last: 8 bring a 96 KB panel (AVX2) or a
// 32 KB one (AVX-512) at ~7 GB/s, under what a core's misses in flight carry, and what they
// fetch waits in L2 for at most 8 tiles' reads of A, not a whole panel's (512 KB of A at
// B = 128, H = 1024: L2's size on Zen 3).
#define GEMM_FETCH_TILES 8
typedef struct {
    const float *rows;  // the first of n rows (NR floats each) of a packed panel
    int n, every;       // fetched one row every `every` k, from k = 0
} GemmFetch;
// B's vectors are loaded once a k into registers. With 16 vector registers (AVX2, SSE) the
// 4 x 3 tile needs every one of them, and GCC then reads B as the FMAs' memory operands
// instead: 12 vector loads and 4 broadcasts a k for 12 FMAs, more than Zen 3's two vector
// loads a cycle keep up with (gemm.h's SGEMM ran 0.67 of MKL's there; dev/bench/cpu-perf.md).
// An empty asm that takes the vector in a register keeps the load a load of its own.
#if (defined(__x86_64__) || defined(__i386__)) && GEMM_MR == 4
#define GEMM_IN_REGISTER(v) __asm__("" : "+x"(v))
#else
#define GEMM_IN_REGISTER(v) ((void)0)  // the 8-row tile (AVX-512's 32 registers): GCC keeps B in them itself
#endif
// One k step's share of the fetch of the next panel (GEMM_FETCH_NEXT), rows of NR slots.
static inline __attribute__((always_inline)) void gemm_fetch_step(GemmFetch next, int *fetched, int *countdown) {
    if (--*countdown) return;
    *countdown = next.every;
    if (*fetched < next.n) {
        #pragma GCC unroll 4
        for (int j = 0; j < GEMM_NR; j += 64 / (int)sizeof(float))
            __builtin_prefetch(next.rows + (size_t)*fetched * GEMM_NR + j, 0, 2);
        ++*fetched;
    }
}
static inline __attribute__((always_inline)) void gemm_tile_steps(gemm_vec acc[GEMM_MR][GEMM_NV], int kc,
                                                                  const float *const *ar, ptrdiff_t csa,
                                                                  const float *bp, GemmFetch next, int fetch) {
    int fetched = 0, countdown = 1;
    for (int k = 0; k < kc; k++) {
        if (fetch == GEMM_FETCH_NEXT) gemm_fetch_step(next, &fetched, &countdown);
        if (fetch == GEMM_FETCH_A && k + 8 < kc) __builtin_prefetch(ar[0] + (k + 8) * csa, 0, 2);  // within A
        gemm_vec b[GEMM_NV];
        #pragma GCC unroll 4
        for (int v = 0; v < GEMM_NV; v++) {
            b[v] = *(const gemm_vec *)(bp + (size_t)k * GEMM_NR + v * GEMM_VL);
            GEMM_IN_REGISTER(b[v]);
        }
        const ptrdiff_t o = k * csa;
        #pragma GCC unroll 16
        for (int i = 0; i < GEMM_MR; i++) {
            const float x = ar[i][o];
            #pragma GCC unroll 4
            for (int v = 0; v < GEMM_NV; v++) acc[i][v] += x * b[v];
        }
    }
}

// vdpbf16ps in scalar arithmetic: c + a1 b1 + a0 b0, the odd k's product first. A product of two
// BF16 is exact in double (16 significant bits, exponents far inside double's), and so is its
// sum with c before the one rounding to FP32 (a sum of two such values rounded to double then to
// float is rounded correctly: 53 >= 2 x 24 + 2 bits, Figueroa 1995), which is the instruction's
// sum of exact values rounded once; a subnormal c reads as zero and a subnormal result flushes to
// zero with its sign (x * 0), as the instruction's.
static inline float gemm_bf16_flush(float x) { return x > -0x1p-126f && x < 0x1p-126f ? x * 0.0f : x; }
static inline float gemm_bf16_dot_emulated(float c, uint32_t a, uint32_t b) {
    double p1 = (double)gemm_bf16_value(a >> 16) * gemm_bf16_value(b >> 16);
    double p0 = (double)gemm_bf16_value(a & 0xffff) * gemm_bf16_value(b & 0xffff);
    c = gemm_bf16_flush((float)((double)gemm_bf16_flush(c) + p1));
    return gemm_bf16_flush((float)((double)c + p0));
}
// The k loop over kc2 = gemm_depth_rows(kc) pairs of BF16 operands (slots): A row i's pair kk at
// ar[i][kk*csa], the panel's row of NR pairs at bp + kk*NR. Emulated: element by element, the
// same arithmetic as vdpbf16ps (tests, and CPUs without it).
static inline __attribute__((always_inline)) void gemm_tile_steps_bf16_emulated(gemm_vec acc[GEMM_MR][GEMM_NV],
                                                                                int kc2, const float *const *ar,
                                                                                ptrdiff_t csa, const float *bp) {
    for (int kk = 0; kk < kc2; kk++)
        for (int i = 0; i < GEMM_MR; i++) {
            const uint32_t a = *(const gemm_slot *)(ar[i] + kk * csa);
            for (int v = 0; v < GEMM_NV; v++)
                for (int l = 0; l < GEMM_VL; l++)
                    acc[i][v][l] = gemm_bf16_dot_emulated(
                        acc[i][v][l], a, *(const gemm_slot *)(bp + (size_t)kk * GEMM_NR + v * GEMM_VL + l));
        }
}
#if GEMM_BF16_BUILT
// vdpbf16ps on the build's vector width (512, 256 or 128 bits: the last two with AVX512-VL), so
// the BF16 tile is the FP32 one, whatever -march the build was given.
#if GEMM_VB == 64
#define GEMM_BF16_DOT(c, a32, b) \
    ((gemm_vec)_mm512_dpbf16_ps((__m512)(c), (__m512bh)_mm512_set1_epi32(a32), (__m512bh)(b)))
#elif GEMM_VB == 32
#define GEMM_BF16_DOT(c, a32, b) \
    ((gemm_vec)_mm256_dpbf16_ps((__m256)(c), (__m256bh)_mm256_set1_epi32(a32), (__m256bh)(b)))
#else
#define GEMM_BF16_DOT(c, a32, b) ((gemm_vec)_mm_dpbf16_ps((__m128)(c), (__m128bh)_mm_set1_epi32(a32), (__m128bh)(b)))
#endif
static inline __attribute__((always_inline)) GEMM_BF16_TARGET void gemm_tile_steps_bf16(
    gemm_vec acc[GEMM_MR][GEMM_NV], int kc2, const float *const *ar, ptrdiff_t csa, const float *bp, GemmFetch next,
    int fetch) {
    int fetched = 0, countdown = 1;
    for (int kk = 0; kk < kc2; kk++) {
        if (fetch == GEMM_FETCH_NEXT) gemm_fetch_step(next, &fetched, &countdown);
        gemm_vec b[GEMM_NV];
        #pragma GCC unroll 4
        for (int v = 0; v < GEMM_NV; v++) b[v] = *(const gemm_vec *)(bp + (size_t)kk * GEMM_NR + v * GEMM_VL);
        #pragma GCC unroll 16
        for (int i = 0; i < GEMM_MR; i++) {
            const int a = (int)*(const gemm_slot *)(ar[i] + kk * csa);
            #pragma GCC unroll 4
            for (int v = 0; v < GEMM_NV; v++) acc[i][v] = GEMM_BF16_DOT(acc[i][v], a, b[v]);
        }
    }
}
#endif

// The kernel. C tile (mr x nr valid, at c with row stride ldc) = init + A . Bp over
// kc steps. A row i's element k is at a[i][k*csa]; rows past mr repeat row mr-1.
// init: 0 zero, 1 C's own values, 2 bias[0..nr) on every row. next: the tile's share of the
// packed panel the caller streams after this one, fetched as k runs (gemm_tile_steps), or NULL.
// One function per precision's k loop, each one copy of the code; they share the tile's start
// (gemm_tile_begin: the accumulators, through a buffer at the edges) and its end.
enum { GEMM_ZERO, GEMM_LOAD, GEMM_BIAS };
typedef struct {
    float tmp[GEMM_MR * GEMM_NR] __attribute__((aligned(64)));
    float *t;  // where the accumulators load from and store to: C itself, or tmp at the edges
    ptrdiff_t ld;
    int full;
} GemmTileIo;
static inline __attribute__((always_inline)) void gemm_tile_begin(GemmTileIo *io, gemm_vec acc[GEMM_MR][GEMM_NV],
                                                                  float *c, ptrdiff_t ldc, int mr, int nr, int init,
                                                                  const float *bias) {
    io->full = mr == GEMM_MR && nr == GEMM_NR;
    io->t = io->full ? c : io->tmp;
    io->ld = io->full ? ldc : GEMM_NR;
    if (!io->full) {
        memset(io->tmp, 0, sizeof io->tmp);
        if (init == GEMM_LOAD)
            for (int i = 0; i < mr; i++) memcpy(io->tmp + i * GEMM_NR, c + i * ldc, sizeof(float) * nr);
        if (init == GEMM_BIAS)
            for (int i = 0; i < mr; i++) memcpy(io->tmp + i * GEMM_NR, bias, sizeof(float) * nr);
    }
    #pragma GCC unroll 16
    for (int i = 0; i < GEMM_MR; i++)
        #pragma GCC unroll 4
        for (int v = 0; v < GEMM_NV; v++) {
            if (init == GEMM_ZERO) acc[i][v] = (gemm_vec){0};
            else if (init == GEMM_BIAS && io->full) acc[i][v] = *(const gemm_vec *)(bias + v * GEMM_VL);
            else acc[i][v] = *(const gemm_vec *)(io->t + i * io->ld + v * GEMM_VL);
        }
}
static inline __attribute__((always_inline)) void gemm_tile_end(GemmTileIo *io, gemm_vec acc[GEMM_MR][GEMM_NV],
                                                                float *c, ptrdiff_t ldc, int mr, int nr) {
    #pragma GCC unroll 16
    for (int i = 0; i < GEMM_MR; i++)
        #pragma GCC unroll 4
        for (int v = 0; v < GEMM_NV; v++) *(gemm_vec *)(io->t + i * io->ld + v * GEMM_VL) = acc[i][v];
    if (!io->full)
        for (int i = 0; i < mr; i++) memcpy(c + i * ldc, io->tmp + i * GEMM_NR, sizeof(float) * nr);
}
#if defined(__clang__)
#define GEMM_ONE_COPY __attribute__((noinline))  // one copy of the code: every tile the same arithmetic
#elif defined(__GNUC__)
#define GEMM_ONE_COPY __attribute__((noinline, noclone))
#else
#define GEMM_ONE_COPY
#endif
// the k loops differ in prefetches only
static GEMM_ONE_COPY void gemm_tile_fp32(int kc, const float *const *a, ptrdiff_t csa, const float *bp, float *c,
                                         ptrdiff_t ldc, int mr, int nr, int init, const float *bias,
                                         const GemmFetch *next) {
    GemmTileIo io;
    gemm_vec acc[GEMM_MR][GEMM_NV];
    gemm_tile_begin(&io, acc, c, ldc, mr, nr, init, bias);
    const float *ar[GEMM_MR];
    for (int i = 0; i < GEMM_MR; i++) ar[i] = a[i < mr ? i : mr - 1];
    const GemmFetch none = {NULL, 0, 1};
    if (next) gemm_tile_steps(acc, kc, ar, csa, bp, *next, GEMM_FETCH_NEXT);
    else if (GEMM_MR == 8 && csa > GEMM_MR) gemm_tile_steps(acc, kc, ar, csa, bp, none, GEMM_FETCH_A);
    else gemm_tile_steps(acc, kc, ar, csa, bp, none, GEMM_FETCH_NONE);
    gemm_tile_end(&io, acc, c, ldc, mr, nr);
}
// BF16's A is always packed (gemm_pack_a): no fetch of A
static GEMM_ONE_COPY void gemm_tile_bf16_emulated(int kc, const float *const *a, ptrdiff_t csa, const float *bp,
                                                  float *c, ptrdiff_t ldc, int mr, int nr, int init,
                                                  const float *bias) {
    GemmTileIo io;
    gemm_vec acc[GEMM_MR][GEMM_NV];
    gemm_tile_begin(&io, acc, c, ldc, mr, nr, init, bias);
    const float *ar[GEMM_MR];
    for (int i = 0; i < GEMM_MR; i++) ar[i] = a[i < mr ? i : mr - 1];
    gemm_tile_steps_bf16_emulated(acc, gemm_depth_rows(kc, GEMM_BF16_EMULATED), ar, csa, bp);
    gemm_tile_end(&io, acc, c, ldc, mr, nr);
}
#if GEMM_BF16_BUILT
static GEMM_ONE_COPY GEMM_BF16_TARGET void gemm_tile_bf16(int kc, const float *const *a, ptrdiff_t csa,
                                                          const float *bp, float *c, ptrdiff_t ldc, int mr, int nr,
                                                          int init, const float *bias, const GemmFetch *next) {
    GemmTileIo io;
    gemm_vec acc[GEMM_MR][GEMM_NV];
    gemm_tile_begin(&io, acc, c, ldc, mr, nr, init, bias);
    const float *ar[GEMM_MR];
    for (int i = 0; i < GEMM_MR; i++) ar[i] = a[i < mr ? i : mr - 1];
    const GemmFetch none = {NULL, 0, 1};
    const int kc2 = gemm_depth_rows(kc, GEMM_BF16_NATIVE);
    if (next) gemm_tile_steps_bf16(acc, kc2, ar, csa, bp, *next, GEMM_FETCH_NEXT);
    else gemm_tile_steps_bf16(acc, kc2, ar, csa, bp, none, GEMM_FETCH_NONE);
    gemm_tile_end(&io, acc, c, ldc, mr, nr);
}
#endif
static inline void gemm_tile(int kc, const float *const *a, ptrdiff_t csa, const float *bp, float *c, ptrdiff_t ldc,
                             int mr, int nr, int init, const float *bias, const GemmFetch *next, GemmPrecision prec) {
    if (prec == GEMM_FP32) gemm_tile_fp32(kc, a, csa, bp, c, ldc, mr, nr, init, bias, next);
    else if (prec == GEMM_BF16_EMULATED || !GEMM_BF16_BUILT)  // the same bits: a build without vdpbf16ps runs this
        gemm_tile_bf16_emulated(kc, a, csa, bp, c, ldc, mr, nr, init, bias);
#if GEMM_BF16_BUILT
    else gemm_tile_bf16(kc, a, csa, bp, c, ldc, mr, nr, init, bias, next);
#endif
}

// The next tile's C, on its way while a tile computes: rows [i0, i0+mr), columns
// [n0, n0+NR) within N. A large C (a weight gradient's, 1 MB for dW_h at H=256; the
// gates the time loop adds to) waits in L3, and each tile would begin with its loads'
// latency; each step's gates and m_t products are new memory, whose every line a tile's
// stores would wait on. Fetched for writing (prefetchw): every tile stores its C.
static inline void gemm_prefetch_c(const float *c, ptrdiff_t ldc, int i0, int mr, int n0, int N) {
    for (int i = 0; i < mr; i++)
        for (int j = n0; j < n0 + GEMM_NR && j < N; j += 64 / (int)sizeof(float))
            __builtin_prefetch(c + (size_t)(i0 + i) * ldc + j, 1);
}

// ----------------------------------------------------------------------------
// AMX-BF16 (GEMM_BF16_AMX). The tiles of a call: C 2 x 2 tiles (rows 0-15 and 16-31 of a group of
// 32 rows, the panel's columns 0-15 and the rest), A 2 (the group's two strips of 16 rows), B 2
// (the panel's two column halves), the machine's 8 tiles; tdpbf16ps reads 16 pairs each (32 k).
// A is packed in strips of 16 rows (gemm_pack_a_amx), a strip's 16 pairs one 1 KB tile; B's panels
// are BF16's (16 pair rows of NR slots: a tile, rows NR slots apart).
#define GEMM_AMX_ROWS 16                                // rows of a tile of C and of A
#define GEMM_AMX_W0 (GEMM_NR < 16 ? GEMM_NR : 16)      // columns of the panel's first tile of C and B
#define GEMM_AMX_W1 (GEMM_NR - GEMM_AMX_W0)            // and of its second (none: 0)
_Static_assert(GEMM_NR <= 32, "AMX: a panel is at most two tiles of 16 columns");
// slots of a strip of 16 rows of A packed for AMX, rows pairs deep: its tiles one after the other
static inline size_t gemm_amx_strip(int rows) { return (size_t)GEMM_AMX_ROWS * rows; }

// The slot of pair kk of row i of A packed for AMX, rows pairs deep: in strip i / 16, tile kk / 16.
static inline size_t gemm_amx_a_slot(int i, int kk, int rows) {
    return (size_t)(i / GEMM_AMX_ROWS) * gemm_amx_strip(rows) + (size_t)(kk / GEMM_AMX_PAIRS) * GEMM_AMX_ROWS *
           GEMM_AMX_PAIRS + i % GEMM_AMX_ROWS * GEMM_AMX_PAIRS + kk % GEMM_AMX_PAIRS;
}
// Rows [i0, i1) of A, k block (k0, kc), packed for AMX into strips of 16 rows (the last padded
// with zero rows), pair kk of row i of a strip at (kk / 16) 256 + i 16 + kk % 16 slots into it,
// the pairs past kc zero: one tile of A is 1 KB in one piece.
static inline void gemm_pack_a_amx(float *ap, const float *a, ptrdiff_t rsa, ptrdiff_t csa, int i0, int i1, int k0,
                                   int kc, GemmPrecision prec) {
    if (csa != 1 && rsa != 1) {
        fprintf(stderr, "%s:%d: gemm_pack_a_amx: A is read along its rows or down them, not strided both ways\n",
                __FILE__, __LINE__);
        abort();
    }
    const int rows = gemm_depth_rows(kc, GEMM_BF16_AMX), strips = (i1 - i0 + GEMM_AMX_ROWS - 1) / GEMM_AMX_ROWS;
    if (strips == 0) return;  // no rows: ap may be NULL (a product with M = 0)
    if ((i1 - i0) % GEMM_AMX_ROWS || 2 * rows != kc) memset(ap, 0, sizeof(float) * strips * gemm_amx_strip(rows));
    gemm_bf16 *d = (gemm_bf16 *)ap;
    if (csa == 1)  // A along its rows: a row's 32 k of one tile land in 64 contiguous bytes (in dxe this is dz,
                   // B x 4H, each time step)
        for (int i = i0; i < i1; i++)
            for (int k = 0; k < kc; k += 2 * GEMM_AMX_PAIRS) {
                const float *src = a + (size_t)i * rsa + k0 + k;
                gemm_bf16 *dst = d + gemm_amx_a_slot(i - i0, k >> 1, rows) * 2;
                gemm_bf16_run(dst, src, kc - k < 2 * GEMM_AMX_PAIRS ? kc - k : 2 * GEMM_AMX_PAIRS, prec);
            }
    else  // down its columns, its rows contiguous (the weight gradients' dOut^T: rsa 1, as every such caller's): a
          // tile at a time, its 16 rows' k pair q made from two runs of i into slots t[q][i], which are then
          // written transposed, a row's 16 pairs together
        for (int k = 0; k < kc; k += 2 * GEMM_AMX_PAIRS)
            for (int s = i0; s < i1; s += GEMM_AMX_ROWS) {
                const int ni = i1 - s < GEMM_AMX_ROWS ? i1 - s : GEMM_AMX_ROWS;
                gemm_slot t[GEMM_AMX_PAIRS][GEMM_AMX_ROWS];
                if (s + 2 * GEMM_AMX_ROWS < i1)  // the tile after next's 32 lines (each k's its own)
                    for (int q = 0; q < 2 * GEMM_AMX_PAIRS && k + q < kc; q++)
                        __builtin_prefetch(a + s + 2 * GEMM_AMX_ROWS + (size_t)(k0 + k + q) * csa);
                for (int q = 0; q < GEMM_AMX_PAIRS; q++) {
                    const int kl = k + 2 * q;  // the pair's low k; past kc the pair is zero, and its high k past kc
                    if (kl < kc) {
                        const float *lo = a + s + (size_t)(k0 + kl) * csa;
                        gemm_bf16_pair_run(t[q], lo, kl + 1 < kc ? lo + csa : NULL, ni, prec);
                    } else memset(t[q], 0, sizeof t[q]);
                }
                gemm_slot *tile = (gemm_slot *)ap + gemm_amx_a_slot(s - i0, k >> 1, rows);
                for (int i = 0; i < ni; i++)
                    for (int q = 0; q < GEMM_AMX_PAIRS; q++) tile[i * GEMM_AMX_PAIRS + q] = t[q][i];
            }
}

// The C of a group of mr <= 32 rows and nr <= NR columns, through a buffer at the edges (rows past
// mr and columns past nr are computed on zero A and B there, and dropped).
typedef struct {
    float tmp[2 * GEMM_AMX_ROWS * GEMM_NR] __attribute__((aligned(64)));
    float *t;  // where the tiles of C load from and store to: C itself, or tmp at the edges
    ptrdiff_t ld;
    int full, two;  // two: rows 16-31 too
} GemmAmxIo;
static inline void gemm_amx_begin(GemmAmxIo *io, float *c, ptrdiff_t ldc, int mr, int nr, int init,
                                  const float *bias) {
    io->two = mr > GEMM_AMX_ROWS;
    io->full = mr == (io->two ? 2 : 1) * GEMM_AMX_ROWS && nr == GEMM_NR;
    io->t = io->full ? c : io->tmp;
    io->ld = io->full ? ldc : GEMM_NR;
    if (!io->full) {
        memset(io->tmp, 0, sizeof io->tmp);
        for (int i = 0; i < mr && init != GEMM_ZERO; i++)
            memcpy(io->tmp + i * GEMM_NR, init == GEMM_LOAD ? c + i * ldc : bias, sizeof(float) * nr);
    }
}
static inline void gemm_amx_end(GemmAmxIo *io, float *c, ptrdiff_t ldc, int mr, int nr) {
    if (!io->full)
        for (int i = 0; i < mr; i++) memcpy(c + i * ldc, io->tmp + i * GEMM_NR, sizeof(float) * nr);
}

// A tile's depth in pieces: k blocks (of one product, or of several products summed into the same C),
// each its group's A packed by gemm_pack_a_amx (the group's first strip; the second follows it) and
// the panel's B in that block, kc deep. The tile runs them in turn with its sums kept in the tiles:
// the bits of one product per piece, each adding to C, without writing C between them.
typedef struct {
    const float *a, *b;
    int kc;
} GemmAmxPiece;

// The emulation: element by element, the instruction's sums in its order (the header's), on the
// same packed A and B; a subnormal sum flushed with its sign and C read through gemm_bf16_flush
// (packed operands are never subnormal: gemm_bf16_round).
static GEMM_ONE_COPY void gemm_amx_tile_emulated(const GemmAmxPiece *piece, int pieces, float *c, ptrdiff_t ldc,
                                                 int mr, int nr, int init, const float *bias) {
    GemmAmxIo io;
    gemm_amx_begin(&io, c, ldc, mr, nr, init, bias);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float x = init == GEMM_ZERO ? 0 : init == GEMM_BIAS && io.full ? bias[j] : io.t[i * io.ld + j];
            for (int s = 0; s < pieces; s++) {
                const int rows = gemm_depth_rows(piece[s].kc, GEMM_BF16_AMX);
                const float *ap = piece[s].a, *bp = piece[s].b;
                for (int kk = 0; kk < rows; kk += GEMM_AMX_PAIRS) {
                    float even = 0, odd = 0;
                    for (int q = 0; q < GEMM_AMX_PAIRS; q++) {
                        const uint32_t a = *(const gemm_slot *)(ap + gemm_amx_a_slot(i, kk + q, rows));
                        const uint32_t b = *(const gemm_slot *)(bp + (size_t)(kk + q) * GEMM_NR + j);
                        even = gemm_bf16_flush((float)((double)even + (double)gemm_bf16_value(a & 0xffff) *
                                                                          gemm_bf16_value(b & 0xffff)));
                        odd = gemm_bf16_flush((float)((double)odd + (double)gemm_bf16_value(a >> 16) *
                                                                        gemm_bf16_value(b >> 16)));
                    }
                    x = gemm_bf16_flush((float)((double)gemm_bf16_flush(x) + gemm_bf16_flush(even + odd)));
                }
            }
            io.t[i * io.ld + j] = x;
        }
    gemm_amx_end(&io, c, ldc, mr, nr);
}

#if GEMM_AMX_BUILT
// ldtilecfg's operand (64 bytes): palette 1, each tile's rows and bytes a row
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} GemmAmxConfig;
// The tiles' shapes, per thread: loaded at the start of each product (about 100 cycles, once per
// thread and call: gemm_columns, gemm_packed_serial) and released at its end.
static inline GEMM_AMX_TARGET void gemm_amx_configure(void) {
    GemmAmxConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {  // C 0 1 (rows 0-15), 2 3 (rows 16-31); A 4 5; B 6 7
        const int w = t == 4 || t == 5 ? GEMM_AMX_PAIRS : t % 2 == 0 ? GEMM_AMX_W0 : GEMM_AMX_W1;
        cfg.rows[t] = w ? GEMM_AMX_ROWS : 0;
        cfg.colsb[t] = (uint16_t)(4 * w);
    }
    // (not _tile_loadconfig: GCC 12's tells the compiler that ldtilecfg reads 8 bytes, and it then
    // dropped the stores of the rows and widths, and ldtilecfg faulted on palette 1 without them)
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}
static inline GEMM_AMX_TARGET void gemm_amx_release(void) { _tile_release(); }
static GEMM_ONE_COPY GEMM_AMX_TARGET void gemm_amx_tile(const GemmAmxPiece *piece, int pieces, float *c,
                                                        ptrdiff_t ldc, int mr, int nr, int init, const float *bias) {
    GemmAmxIo io;
    gemm_amx_begin(&io, c, ldc, mr, nr, init, bias);
    // GCC 12's tileloadd does not say that it reads memory: C's buffer is written before it
    __asm__ volatile("" : : : "memory");
    const int two = io.two, wide = GEMM_AMX_W1 > 0;  // wide: 2 tiles
    const size_t ld = sizeof(float) * io.ld, ldb = sizeof(float) * GEMM_NR, lda = sizeof(float) * GEMM_AMX_PAIRS;
    const float *t0 = io.t, *t1 = io.t + GEMM_AMX_W0, *t2 = io.t + GEMM_AMX_ROWS * io.ld, *t3 = t2 + GEMM_AMX_W0;
    if (init == GEMM_ZERO) {
        _tile_zero(0);
        if (wide) _tile_zero(1);
        if (two) _tile_zero(2);
        if (two && wide) _tile_zero(3);
    } else if (init == GEMM_BIAS && io.full) {  // the bias on every row: a stride of 0
        _tile_loadd(0, bias, 0);
        if (wide) _tile_loadd(1, bias + GEMM_AMX_W0, 0);
        if (two) _tile_loadd(2, bias, 0);
        if (two && wide) _tile_loadd(3, bias + GEMM_AMX_W0, 0);
    } else {
        _tile_loadd(0, t0, ld);
        if (wide) _tile_loadd(1, t1, ld);
        if (two) _tile_loadd(2, t2, ld);
        if (two && wide) _tile_loadd(3, t3, ld);
    }
    for (int s = 0; s < pieces; s++) {
        const int rows = gemm_depth_rows(piece[s].kc, GEMM_BF16_AMX);
        const float *ap = piece[s].a, *a1 = ap + gemm_amx_strip(rows), *bp = piece[s].b;
        for (int kk = 0; kk < rows; kk += GEMM_AMX_PAIRS) {
            const float *b = bp + (size_t)kk * GEMM_NR, *a0 = ap + (size_t)kk * GEMM_AMX_ROWS;
            _tile_loadd(6, b, ldb);
            if (wide) _tile_loadd(7, b + GEMM_AMX_W0, ldb);
            _tile_loadd(4, a0, lda);
            _tile_dpbf16ps(0, 4, 6);
            if (wide) _tile_dpbf16ps(1, 4, 7);
            if (two) {
                _tile_loadd(5, a1 + (size_t)kk * GEMM_AMX_ROWS, lda);
                _tile_dpbf16ps(2, 5, 6);
                if (wide) _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
    _tile_stored(0, (float *)t0, ld);
    if (wide) _tile_stored(1, (float *)t1, ld);
    if (two) _tile_stored(2, (float *)t2, ld);
    if (two && wide) _tile_stored(3, (float *)t3, ld);
    gemm_amx_end(&io, c, ldc, mr, nr);
}
#endif

static inline void gemm_amx_tile_pieces(const GemmAmxPiece *piece, int pieces, float *c, ptrdiff_t ldc, int mr,
                                        int nr, int init, const float *bias, GemmPrecision prec) {
#if GEMM_AMX_BUILT
    if (prec == GEMM_BF16_AMX) {
        gemm_amx_tile(piece, pieces, c, ldc, mr, nr, init, bias);
        return;
    }
#endif
    (void)prec;
    gemm_amx_tile_emulated(piece, pieces, c, ldc, mr, nr, init, bias);
}

// The k blocks a tile of AMX runs without writing C between them (gemm_amx_serial,
// gemm_columns_amx): 2048 k, A's 32 rows of them 128 KB in BF16 and B's panel as much.
#define GEMM_AMX_CHAIN 8
// k blocks of a chain: A's rows packed by gemm_pack_a_amx from the first row the caller's C starts
// at, B's block packed by gemm_pack_block (its panel 0), kc deep
typedef struct {
    const float *a[GEMM_AMX_CHAIN], *b[GEMM_AMX_CHAIN];
    int kc[GEMM_AMX_CHAIN], blocks;
} GemmAmxChain;

// The tile of C at rows [i0, i0+32) (fewer at M) and panel p, through every block of the chain.
static inline void gemm_amx_chain_tile(float *c, ptrdiff_t ldc, int M, int N, int i0, int p, const GemmAmxChain *ch,
                                       int init, const float *bias, GemmPrecision prec) {
    const int mr = M - i0 < 2 * GEMM_AMX_ROWS ? M - i0 : 2 * GEMM_AMX_ROWS;
    const int n0 = p * GEMM_NR, nr = N - n0 < GEMM_NR ? N - n0 : GEMM_NR;
    GemmAmxPiece piece[GEMM_AMX_CHAIN];
    for (int j = 0; j < ch->blocks; j++) {
        const int rows = gemm_depth_rows(ch->kc[j], prec);
        piece[j] = (GemmAmxPiece){ch->a[j] + (size_t)i0 / GEMM_AMX_ROWS * gemm_amx_strip(rows),
                                  ch->b[j] + (size_t)p * rows * GEMM_NR, ch->kc[j]};
    }
    gemm_amx_tile_pieces(piece, ch->blocks, c + (size_t)i0 * ldc + n0, ldc, mr, nr, init, bias ? bias + n0 : NULL,
                         prec);
}
static inline void gemm_amx_start(GemmPrecision prec) {
#if GEMM_AMX_BUILT
    if (prec == GEMM_BF16_AMX) gemm_amx_configure();
#endif
    (void)prec;
}
static inline void gemm_amx_stop(GemmPrecision prec) {
#if GEMM_AMX_BUILT
    if (prec == GEMM_BF16_AMX) gemm_amx_release();
#endif
    (void)prec;
}

// Rows [i0, i0+mr) of C against panels [p0, p1) of one packed block (k0, kc). next: what of
// the panel streamed after p1 - 1 the tiles fetch (gemm_tile_steps), or NULL for nothing.
// BF16 reads A packed (gemm_pack_a), from its block's start: k0 = 0.
static inline void gemm_rows_block(float *c, ptrdiff_t ldc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, int i0,
                                   int mr, const float *blk, int kc, int k0, int N, int p0, int p1, int init,
                                   const float *bias, const GemmFetch *next, GemmPrecision prec) {
    const float *rows[GEMM_MR];
    for (int i = 0; i < mr; i++) rows[i] = a + (size_t)(i0 + i) * rsa + (size_t)k0 * csa;
    for (int p = p0; p < p1; p++) {
        int n0 = p * GEMM_NR, nr = N - n0 < GEMM_NR ? N - n0 : GEMM_NR;
        if (p + 1 < p1) gemm_prefetch_c(c, ldc, i0, mr, n0 + GEMM_NR, N);
        gemm_tile(kc, rows, csa, blk + (size_t)p * gemm_depth_rows(kc, prec) * GEMM_NR, c + (size_t)i0 * ldc + n0, ldc,
                  mr, nr, init, bias ? bias + n0 : NULL, next, prec);
    }
}

// C + bias, the start of a chain that adds products to C and a bias (a case the model does not use).
static inline void gemm_add_bias(float *c, ptrdiff_t ldc, const float *bias, int M, int N) {
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) c[(size_t)i * ldc + n] += bias[n];
}
// C = bias (0 without one): a product that sets C with no k to sum (K = 0).
static inline void gemm_set_bias(float *c, ptrdiff_t ldc, const float *bias, int M, int N) {
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) c[(size_t)i * ldc + n] = bias ? bias[n] : 0;
}

// A thread's buffers, kept between calls (the callers are serial; threads beyond
// GEMM_THREADS take fresh ones per call): which 0 holds the packed blocks of B, which 1 the
// packed slivers of A, which 2 the BF16 slivers of A of the time loops (gemm_packed_serial,
// gemm_amx_serial), grown to the largest size asked.
#define GEMM_THREADS 64
static inline float *gemm_thread_buffer(int id, int which, size_t floats, int *owned) {
    static float *buf[3][GEMM_THREADS];
    static size_t size[3][GEMM_THREADS];
    const int kept = id < GEMM_THREADS;
    float *p = kept && size[which][id] >= floats ? buf[which][id] : NULL;
    if (!p) {
        if (posix_memalign((void **)&p, 64, sizeof(float) * floats) != 0)
            alloc_failed(floats, sizeof(float), __FILE__, __LINE__);
        if (kept) {
            free(buf[which][id]);
            buf[which][id] = p, size[which][id] = floats;
        }
    }
    *owned = !kept;
    return p;
}

// Rows [i0, i1) of A (i0 a multiple of MR), k block (k0, kc), packed into MR x kc slivers:
// sliver q holds rows i0 + q MR .. + MR, element (i, k) at q MR kc + k MR + i. For an A read
// down its columns (A^T in the weight gradients: each k a line of its own, a page or more
// from the last) the kernel then reads a sliver from L1 at every panel; read in place, a
// sliver's lines all fall on one L1 set and come from L2 or L3 at every panel, and the
// weight gradients ran 0.65 of SGEMM on Zen 3. The pack reads A along its rows (k fixed, i
// running) once per k block, and costs about what a product of 5 panels gains: gemm packs
// for 8 panels or more (dev/bench/cpu-perf.md).
//
// BF16 packs every A it reads (each value rounded once per k block, not at every panel): the
// sliver holds k pairs, (kc + 1) / 2 rows of MR slots, an odd kc's last pair padded with zero.
static inline void gemm_pack_a(float *ap, const float *a, ptrdiff_t rsa, ptrdiff_t csa, int i0, int i1, int k0,
                               int kc, GemmPrecision prec) {
    const int rows = gemm_depth_rows(kc, prec);
    if (csa == 1)  // A along its rows (BF16's time loops and output layer): a row at a time, as it lies
        for (int i = i0; i < i1; i++) {
            const float *src = a + (size_t)i * rsa + k0;
            float *sliver = ap + (size_t)(i - i0) / GEMM_MR * GEMM_MR * rows;
            for (int k = 0; k < kc; k++) gemm_put(sliver, GEMM_MR, k, (i - i0) % GEMM_MR, src[k], prec);
        }
    else  // down its columns: each k's run of i contiguous
        for (int k = 0; k < kc; k++) {
            const float *src = a + (size_t)(k0 + k) * csa;
            for (int i = i0; i < i1; i++) {
                int q = (i - i0) / GEMM_MR;
                gemm_put(ap + (size_t)q * GEMM_MR * rows, GEMM_MR, k, (i - i0) % GEMM_MR, src[(size_t)i * rsa], prec);
            }
        }
    if (prec != GEMM_FP32 && kc % 2)
        for (int i = i0; i < i1; i++)
            gemm_put(ap + (size_t)(i - i0) / GEMM_MR * GEMM_MR * rows, GEMM_MR, kc, (i - i0) % GEMM_MR, 0, prec);
}

// The thread-buffer slot of the calling thread: its thread number in one parallel region (the time
// loops', gemm_columns'), or a fresh buffer where regions nest, active or not: thread numbers then
// repeat across the outer region's threads.
static inline int gemm_thread_slot(void) {
#ifdef _OPENMP
    return omp_get_level() <= 1 ? omp_get_thread_num() : GEMM_THREADS;
#else
    return 0;
#endif
}

// The calling thread's share [q0, q1) of units split evenly between the threads of its region.
typedef struct {
    int q0, q1;
} GemmShare;
static inline GemmShare gemm_thread_share(int units) {
#ifdef _OPENMP
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
#else
    const int nt = 1, id = 0;
#endif
    return (GemmShare){(int)((long)units * id / nt), (int)((long)units * (id + 1) / nt)};
}


// C (M,N) = [C +] A (M,K) . B (K,N) [+ bias (N,)], A's (i,k) at a[i*rsa + k*csa], B
// already packed by gemm_pack. Serial: for the time loops, where each thread owns
// its rows of the batch. Column panels outside, rows inside: a panel of B is read
// once from memory per step and serves every row. BF16: the rows of A are rounded and
// packed per k block first (gemm_pack_a), into a buffer of the calling thread's.
// (AMX: gemm_amx_serial.)
static inline void gemm_packed_serial(float *c, ptrdiff_t ldc, const float *a, ptrdiff_t rsa, ptrdiff_t csa,
                                      const float *bp, const float *bias, int M, int N, int K, MatmulInto into,
                                      GemmPrecision prec) {
    int np = gemm_panels(N), init0 = into == MATMUL_ADD ? GEMM_LOAD : bias ? GEMM_BIAS : GEMM_ZERO;
    if (into == MATMUL_ADD && bias) gemm_add_bias(c, ldc, bias, M, N);
    if (K == 0 && into == MATMUL_SET) gemm_set_bias(c, ldc, bias, M, N);  // no products
    int owned_a = 0;
    float *ap = prec != GEMM_FP32 && M > 0 && K > 0
                    ? gemm_thread_buffer(gemm_thread_slot(), 2,
                                         (size_t)(M + GEMM_MR - 1) / GEMM_MR * GEMM_MR *
                                             gemm_depth_rows(GEMM_KC_STREAMED, prec), &owned_a)
                    : NULL;
    for (int k0 = 0; k0 < K; k0 += GEMM_KC_STREAMED) {
        int kc = K - k0 < GEMM_KC_STREAMED ? K - k0 : GEMM_KC_STREAMED, init = k0 > 0 ? GEMM_LOAD : init0;
        int kc_rows = gemm_depth_rows(kc, prec);
        const float *blk = bp + (size_t)gemm_depth_rows(k0, prec) * np * GEMM_NR;
        if (ap) gemm_pack_a(ap, a, rsa, csa, 0, M, k0, kc, prec);
        // the panel after this one (at a block's end, the next block's first, kn rows deep), fetched
        // in equal shares of its rows by the last S of the R row tiles (gemm_tile_steps says why;
        // GEMM_FETCH_TILES, why the last)
        int R = (M + GEMM_MR - 1) / GEMM_MR, S = R < GEMM_FETCH_TILES ? R : GEMM_FETCH_TILES;
        int rest = gemm_depth_rows(K - k0 - kc < GEMM_KC_STREAMED ? K - k0 - kc : GEMM_KC_STREAMED, prec);
        for (int p = 0; p < np; p++) {
            const float *next_panel = blk + (size_t)(p + 1 < np ? p + 1 : np) * kc_rows * GEMM_NR;
            int kn = p + 1 < np ? kc_rows : rest;  // the next panel's rows of NR slots
            for (int i0 = 0, r = 0; i0 < M; i0 += GEMM_MR, r++) {
                int mr = M - i0 < GEMM_MR ? M - i0 : GEMM_MR;
                int next = i0 + GEMM_MR < M ? i0 + GEMM_MR : 0, pn = next ? p : p + 1;  // next tile: rows, then panel
                if (pn < np) gemm_prefetch_c(c, ldc, next, M - next < GEMM_MR ? M - next : GEMM_MR, pn * GEMM_NR, N);
                int s = r - (R - S), lo = s >= 0 ? (int)((long)kn * s / S) : 0;
                int n = s >= 0 ? (int)((long)kn * (s + 1) / S) - lo : 0;
                const GemmFetch share = {n ? next_panel + (size_t)lo * GEMM_NR : NULL, n,
                                         n && kc_rows / n > 1 ? kc_rows / n : 1};
                if (ap)  // the rows' packed sliver
                    gemm_rows_block(c + (size_t)i0 * ldc, ldc, ap + (size_t)i0 * kc_rows, 1, GEMM_MR, 0, mr, blk, kc,
                                    0, N, p, p + 1, init, bias, n ? &share : NULL, prec);
                else
                    gemm_rows_block(c, ldc, a, rsa, csa, i0, mr, blk, kc, k0, N, p, p + 1, init, bias,
                                    n ? &share : NULL, prec);
            }
        }
    }
    if (ap && owned_a) free(ap);
}

// A term of a chain of products summed into one C: A (M,K), element (i,k) at a[i*rsa + k*csa],
// times B (K,N) packed by gemm_pack.
typedef struct {
    const float *a;
    ptrdiff_t rsa, csa;
    const float *bp;
    int K;
} GemmTerm;

// gemm_packed_serial on AMX, for the sum of the terms' products: C (M,N) = [C +] sum_t A_t . B_t
// [+ bias]. The terms' k blocks in turn, GEMM_AMX_CHAIN at a time: their A packed first (the
// blocks one after the other in the thread's buffer), then each tile of C (32 rows, a panel) runs
// through all of them with its sums kept in the tiles, and C is read and written once for them all.
// Each element is the chain of one product per block, each adding to C: the same bits as
// gemm_packed_serial on one term after another. Written per block, a product as thin as the input
// projections' (K = D = 64: 2 tdpbf16ps per tile) was mostly the writes of C.
static inline void gemm_amx_serial(float *c, ptrdiff_t ldc, const GemmTerm *term, int terms, const float *bias, int M,
                                   int N, MatmulInto into, GemmPrecision prec) {
    if (M <= 0) return;
    const int np = gemm_panels(N), strips = (M + GEMM_AMX_ROWS - 1) / GEMM_AMX_ROWS;
    int init = into == MATMUL_ADD ? GEMM_LOAD : bias ? GEMM_BIAS : GEMM_ZERO, blocks = 0, owned_a = 0;
    if (into == MATMUL_ADD && bias) gemm_add_bias(c, ldc, bias, M, N);
    for (int t = 0; t < terms; t++) blocks += (term[t].K + GEMM_KC_STREAMED - 1) / GEMM_KC_STREAMED;
    if (blocks == 0) {  // no products: C = bias or 0, or C as it is
        if (into == MATMUL_SET) gemm_set_bias(c, ldc, bias, M, N);
        return;
    }
    const size_t block_floats = (size_t)strips * gemm_amx_strip(gemm_depth_rows(GEMM_KC_STREAMED, prec));
    float *ap = gemm_thread_buffer(gemm_thread_slot(), 2, GEMM_AMX_CHAIN * block_floats, &owned_a);
    GemmAmxChain ch = {.blocks = 0};
    gemm_amx_start(prec);
    for (int t = 0; t < terms; t++)
        for (int k0 = 0; k0 < term[t].K; k0 += GEMM_KC_STREAMED) {
            const int kc = term[t].K - k0 < GEMM_KC_STREAMED ? term[t].K - k0 : GEMM_KC_STREAMED, j = ch.blocks++;
            ch.a[j] = ap + j * block_floats;
            ch.b[j] = term[t].bp + (size_t)gemm_depth_rows(k0, prec) * np * GEMM_NR;
            ch.kc[j] = kc;
            gemm_pack_a_amx(ap + j * block_floats, term[t].a, term[t].rsa, term[t].csa, 0, M, k0, kc, prec);
            if (--blocks > 0 && ch.blocks < GEMM_AMX_CHAIN) continue;  // the chain runs when full, or at the end
            for (int p = 0; p < np; p++)  // the panels one after the other, each against every group of rows
                for (int i0 = 0; i0 < M; i0 += 2 * GEMM_AMX_ROWS) {
                    const int next = i0 + 2 * GEMM_AMX_ROWS < M ? i0 + 2 * GEMM_AMX_ROWS : 0, pn = next ? p : p + 1;
                    if (pn < np)  // the next tile's C
                        gemm_prefetch_c(c, ldc, next, M - next < 2 * GEMM_AMX_ROWS ? M - next : 2 * GEMM_AMX_ROWS,
                                        pn * GEMM_NR, N);
                    gemm_amx_chain_tile(c, ldc, M, N, i0, p, &ch, init, bias, prec);
                }
            init = GEMM_LOAD, ch.blocks = 0;
        }
    gemm_amx_stop(prec);
    if (owned_a) free(ap);
}

// The sum of the terms' products into C, serially (the time loops): AMX as one chain
// (gemm_amx_serial), the other kernels one term after another.
static inline void gemm_terms_serial(float *c, ptrdiff_t ldc, const GemmTerm *term, int terms, const float *bias,
                                     int M, int N, MatmulInto into, GemmPrecision prec) {
    if (gemm_is_amx(prec)) {
        gemm_amx_serial(c, ldc, term, terms, bias, M, N, into, prec);
        return;
    }
    for (int t = 0; t < terms; t++)
        gemm_packed_serial(c, ldc, term[t].a, term[t].rsa, term[t].csa, term[t].bp, t ? NULL : bias, M, N, term[t].K,
                           t ? MATMUL_ADD : into, prec);
}

// An operand read in place: element (i,k) at at[i * rows + k * cols] (its row and column strides).
typedef struct {
    const float *at;
    ptrdiff_t rows, cols;
} GemmView;

// Columns of a product with A: C (M,N) = [C +] A . B [+ bias], element (k,n) of B at
// B.at[k * B.rows + n * B.cols].
typedef struct {
    float *c;
    ptrdiff_t ldc;
    GemmView B;
    const float *bias;
    int N;
} GemmColumns;

// gemm_columns on AMX (K > 0, the bias of an accumulating product already added): the rows of C
// split between the threads in strips of 16, GEMM_AMX_CHAIN k blocks at a time. Each thread packs its
// rows of A for all of them, then for each part and each NC columns the blocks of B, and each tile
// of C (groups of 32 rows outside, panels inside) runs through the blocks with its sums in the
// tiles: C is read and written once per GEMM_AMX_CHAIN blocks. Once per block, a weight gradient's
// C (dW_h, 16 MB at H = 1024) went through memory 32 times a step at B T = 8192.
static inline void gemm_columns_amx(GemmView A, int M, int K, const GemmColumns *parts, int nparts, MatmulInto into,
                                    GemmPrecision prec) {
    const int mp = (M + GEMM_AMX_ROWS - 1) / GEMM_AMX_ROWS, kc_rows = gemm_depth_rows(GEMM_KC, prec);
    const size_t b_block = (size_t)kc_rows * GEMM_NC;
    #pragma omp parallel
    {
        const GemmShare share = gemm_thread_share(mp);
        const int q0 = share.q0, q1 = share.q1, slot = gemm_thread_slot();
        int owned = 0, owned_a = 0;
        int i0 = q0 * GEMM_AMX_ROWS, i1 = q1 * GEMM_AMX_ROWS < M ? q1 * GEMM_AMX_ROWS : M;
        const size_t a_block = (size_t)(q1 - q0) * gemm_amx_strip(kc_rows);
        float *ws = q0 < q1 ? gemm_thread_buffer(slot, 0, GEMM_AMX_CHAIN * b_block, &owned) : NULL;
        float *ap = ws ? gemm_thread_buffer(slot, 1, GEMM_AMX_CHAIN * a_block, &owned_a) : NULL;
        if (ws) gemm_amx_start(prec);
        for (int k0 = 0; ws && k0 < K; k0 += GEMM_AMX_CHAIN * GEMM_KC) {
            GemmAmxChain ch = {.blocks = 0};
            for (int kb = k0; kb < K && ch.blocks < GEMM_AMX_CHAIN; kb += GEMM_KC) {
                const int j = ch.blocks++;
                ch.kc[j] = K - kb < GEMM_KC ? K - kb : GEMM_KC;
                ch.a[j] = ap + j * a_block;
                ch.b[j] = ws + j * b_block;
                gemm_pack_a_amx(ap + j * a_block, A.at, A.rows, A.cols, i0, i1, kb, ch.kc[j], prec);
            }
            for (int p = 0; p < nparts; p++) {
                const GemmColumns *g = &parts[p];
                const int init = k0 || into == MATMUL_ADD ? GEMM_LOAD : g->bias ? GEMM_BIAS : GEMM_ZERO;
                for (int j0 = 0; j0 < g->N; j0 += GEMM_NC) {
                    const int nc = g->N - j0 < GEMM_NC ? g->N - j0 : GEMM_NC, np = gemm_panels(nc);
                    float *c = g->c + (size_t)i0 * g->ldc + j0;
                    for (int j = 0; j < ch.blocks; j++)
                        gemm_pack_block(ws + j * b_block, g->B.at + (size_t)j0 * g->B.cols, g->B.rows, g->B.cols,
                                        k0 + j * GEMM_KC, ch.kc[j], nc, 0, np, prec);
                    for (int r = 0; r < i1 - i0; r += 2 * GEMM_AMX_ROWS)  // each group of 32 rows, every panel
                        for (int q = 0; q < np; q++) {
                            if (q + 1 < np)  // the next tile's C
                                gemm_prefetch_c(c, g->ldc, r, i1 - i0 - r < 2 * GEMM_AMX_ROWS ? i1 - i0 - r
                                                                                             : 2 * GEMM_AMX_ROWS,
                                                (q + 1) * GEMM_NR, nc);
                            gemm_amx_chain_tile(c, g->ldc, i1 - i0, nc, r, q, &ch, init,
                                                g->bias ? g->bias + j0 : NULL, prec);
                        }
                }
            }
        }
        if (ws) gemm_amx_stop(prec);
        if (ap && owned_a) free(ap);
        if (ws && owned) free(ws);
    }
}

// Products with one A, as one product whose columns are the parts' in turn (in each k block,
// after A is packed for it), with B unpacked and the rows of C split between threads in a
// fixed static way. Each thread packs the blocks of B it needs (KC x NC, in its L2) itself:
// packing is a small part of the work at the model's sizes, and the threads then meet only
// once, at the end. BF16 rounds A as it packs it, and B as it packs each block.
static inline void gemm_columns(GemmView A, int M, int K, const GemmColumns *parts, int nparts, MatmulInto into,
                                GemmPrecision prec) {
    const float *a = A.at;
    const ptrdiff_t rsa = A.rows, csa = A.cols;
    const int accumulate = into == MATMUL_ADD;
    int panels = 0;
    for (int p = 0; p < nparts; p++) {
        const GemmColumns *g = &parts[p];
        panels += gemm_panels(g->N);
        if (accumulate && g->bias) gemm_add_bias(g->c, g->ldc, g->bias, M, g->N);
        if (K == 0 && !accumulate) gemm_set_bias(g->c, g->ldc, g->bias, M, g->N);  // no products
    }
    if (K == 0) return;
    if (gemm_is_amx(prec)) {
        gemm_columns_amx(A, M, K, parts, nparts, into, prec);
        return;
    }
    const int mp = (M + GEMM_MR - 1) / GEMM_MR;  // the rows are split between threads in whole tiles
    const int pack_a = prec != GEMM_FP32 || (GEMM_PACK_A && csa != 1 && panels >= 8);  // gemm_pack_a says why 8
    #pragma omp parallel
    {
        const GemmShare share = gemm_thread_share(mp);
        const int q0 = share.q0, q1 = share.q1, slot = gemm_thread_slot();
        int owned = 0, owned_a = 0;
        float *ws = q0 < q1 ? gemm_thread_buffer(slot, 0, (size_t)GEMM_KC * GEMM_NC, &owned) : NULL;
        float *ap = ws && pack_a ? gemm_thread_buffer(slot, 1, (size_t)(q1 - q0) * GEMM_MR * GEMM_KC, &owned_a) : NULL;
        for (int k0 = 0; ws && k0 < K; k0 += GEMM_KC) {
            int kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC;
            const int kc_rows = gemm_depth_rows(kc, prec);
            if (ap) gemm_pack_a(ap, a, rsa, csa, q0 * GEMM_MR, q1 * GEMM_MR < M ? q1 * GEMM_MR : M, k0, kc, prec);
            for (int p = 0; p < nparts; p++) {
                const GemmColumns *g = &parts[p];
                const int init = k0 || accumulate ? GEMM_LOAD : g->bias ? GEMM_BIAS : GEMM_ZERO;
                for (int j0 = 0; j0 < g->N; j0 += GEMM_NC) {
                    int nc = g->N - j0 < GEMM_NC ? g->N - j0 : GEMM_NC, np = gemm_panels(nc);
                    const float *bias = g->bias ? g->bias + j0 : NULL;
                    gemm_pack_block(ws, g->B.at + (size_t)j0 * g->B.cols, g->B.rows, g->B.cols, k0, kc, nc, 0, np,
                                    prec);
                    for (int q = q0; q < q1; q++) {
                        int r0 = q * GEMM_MR, mr = M - r0 < GEMM_MR ? M - r0 : GEMM_MR;
                        float *c = g->c + (size_t)r0 * g->ldc + j0;
                        if (ap)  // the rows' packed sliver
                            gemm_rows_block(c, g->ldc, ap + (size_t)(q - q0) * GEMM_MR * kc_rows, 1, GEMM_MR, 0, mr,
                                            ws, kc, 0, nc, 0, np, init, bias, NULL, prec);
                        else
                            gemm_rows_block(g->c + j0, g->ldc, a, rsa, csa, r0, mr, ws, kc, k0, nc, 0, np, init,
                                            bias, NULL, prec);
                    }
                }
            }
        }
        if (ap && owned_a) free(ap);
        if (ws && owned) free(ws);
    }
}

// C (M,N) = [C +] A (M,K) . B (K,N) [+ bias (N,)], A's (i,k) at A.at[i*A.rows + k*A.cols].
static inline void gemm(float *c, ptrdiff_t ldc, GemmView A, GemmView B, const float *bias, int M, int N, int K,
                        MatmulInto into, GemmPrecision prec) {
    const GemmColumns part = {c, ldc, B, bias, N};
    gemm_columns(A, M, K, &part, 1, into, prec);
}

// The three layouts of mlstm.h, with the signatures of its plain matmul_nt/nn/tn and the precision.
// out (N,O) = [out +] in (N,K) . W (O,K)^T [+ bias (O,)]
static inline void gemm_nt(float *out, const float *in, const float *W, const float *bias, int N, int O, int K,
                           MatmulInto into, GemmPrecision prec) {
    gemm(out, O, (GemmView){in, K, 1}, (GemmView){W, 1, K}, bias, N, O, K, into, prec);
}
// dIn (N,K) = [dIn +] dOut (N,O) . W (O,K)
static inline void gemm_nn(float *dIn, const float *dOut, const float *W, int N, int K, int O, MatmulInto into,
                           GemmPrecision prec) {
    gemm(dIn, K, (GemmView){dOut, O, 1}, (GemmView){W, K, 1}, NULL, N, K, O, into, prec);
}
// dW (O,K) += dOut (N,O)^T . in (N,K)
static inline void gemm_tn(float *dW, const float *dOut, const float *in, int O, int K, int N, GemmPrecision prec) {
    gemm(dW, K, (GemmView){dOut, 1, O}, (GemmView){in, K, 1}, NULL, O, K, N, MATMUL_ADD, prec);
}
// dW1 (O,K1) += dOut^T . in1 (N,K1) and dW2 (O,K2) += dOut^T . in2 (N,K2): one pass over dOut,
// packed once for both (a product of few columns, dW_x's D = 64, gets dW_h's packed A).
static inline void gemm_tn_pair(float *dW1, const float *in1, int K1, float *dW2, const float *in2, int K2,
                                const float *dOut, int O, int N, GemmPrecision prec) {
    const GemmColumns parts[2] = {{dW1, K1, (GemmView){in1, K1, 1}, NULL, K1},
                                  {dW2, K2, (GemmView){in2, K2, 1}, NULL, K2}};
    gemm_columns((GemmView){dOut, 1, O}, O, N, parts, 2, MATMUL_ADD, prec);
}

// The time loops' products on rows [n0, n1) of the batch, with W (O,K) packed once:
// gemm_pack_nt(Wp, W, O, K) for out (N,O) = in . W^T [+ bias], gemm_pack_nn(Wp, W, K, O) for
// dIn (N,K) = dOut . W (each packs the product's columns and depth, in that order), packed and
// multiplied in one precision.
static inline void gemm_pack_nt(float *Wp, const float *W, int O, int K, GemmPrecision prec) {
    gemm_pack(Wp, W, 1, K, O, K, prec);
}
static inline void gemm_pack_nn(float *Wp, const float *W, int K, int O, GemmPrecision prec) {
    gemm_pack(Wp, W, K, 1, K, O, prec);
}
static inline void gemm_nt_rows_packed(float *out, const float *in, const float *Wp, const float *bias, int n0, int n1,
                                       int O, int K, MatmulInto into, GemmPrecision prec) {
    const GemmTerm term = {in + (size_t)n0 * K, K, 1, Wp, K};
    gemm_terms_serial(out + (size_t)n0 * O, O, &term, 1, bias, n1 - n0, O, into, prec);
}
static inline void gemm_nn_rows_packed(float *dIn, const float *dOut, const float *Wp, int n0, int n1, int K, int O,
                                       MatmulInto into, GemmPrecision prec) {
    const GemmTerm term = {dOut + (size_t)n0 * O, O, 1, Wp, O};
    gemm_terms_serial(dIn + (size_t)n0 * K, K, &term, 1, NULL, n1 - n0, K, into, prec);
}
// Two products summed, as one chain per element: out (N,O) = bias + in1 (N,K1) . W1^T + in2 (N,K2) . W2^T
// (W1, W2 packed by gemm_pack_nt), the bits of gemm_nt_rows_packed on in1 then adding in2's. AMX
// writes out once for both (gemm_amx_serial).
static inline void gemm_nt_rows_packed_sum(float *out, const float *in1, const float *Wp1, int K1, const float *in2,
                                           const float *Wp2, int K2, const float *bias, int n0, int n1, int O,
                                           GemmPrecision prec) {
    const GemmTerm term[2] = {{in1 + (size_t)n0 * K1, K1, 1, Wp1, K1}, {in2 + (size_t)n0 * K2, K2, 1, Wp2, K2}};
    gemm_terms_serial(out + (size_t)n0 * O, O, term, 2, bias, n1 - n0, O, MATMUL_SET, prec);
}
// dIn (N,K) = dOut1 (N,O1) . W1 (O1,K) + dOut2 (N,O2) . W2 (O2,K) (packed by gemm_pack_nn), likewise
static inline void gemm_nn_rows_packed_sum(float *dIn, const float *dOut1, const float *Wp1, int O1,
                                           const float *dOut2, const float *Wp2, int O2, int n0, int n1, int K,
                                           GemmPrecision prec) {
    const GemmTerm term[2] = {{dOut1 + (size_t)n0 * O1, O1, 1, Wp1, O1}, {dOut2 + (size_t)n0 * O2, O2, 1, Wp2, O2}};
    gemm_terms_serial(dIn + (size_t)n0 * K, K, term, 2, NULL, n1 - n0, K, MATMUL_SET, prec);
}
