// fast.h: the CPU trainer's fast path (dev/bench/cpu-perf.md). mlstm.h's model, on mlstm.h's
// buffers, with the work arranged for speed:
//  - gemm.h's packed, register-blocked matmuls in place of mlstm.h's plain loops;
//  - the weights of the time loops packed once per pass, and every time step reusing them;
//  - each thread runs all T steps of its own rows of the batch, with no barrier per step,
//    the input projections and the input gradients of a step included (where its rows are
//    in cache, not in passes of their own over all T*B rows);
//  - the cell, softmax and the loss as vectorised loops, with exp and tanh as inline arithmetic;
//  - the bias gradients with their columns split between the threads.
// Everything else (weight norm, the embedding, m_t, the gradients of the cell, the
// embedding's gradient) is mlstm.h's own code, called from here.
// The results differ from mlstm.h's only by FP32 rounding, and test_gemm holds them to a
// tolerance argued from it. train.c (the CPU trainer) and tools/transfer.c run this path,
// tools/generate.c its cell; everything else, the tests against PyTorch and finite
// differences included, runs mlstm.h.
#pragma once
#include "mlstm.h"  // defines: Mlstm, forward_begin, mt_product, backward_begin, ...
#include "gemm.h"   // defines: gemm_nt/nn/tn, gemm_pack_nt/nn, gemm_nt/nn_rows_packed

_Static_assert(sizeof(real) == sizeof(float), "fast.h is the FP32 path: include it without MLSTM_REAL");

// ----------------------------------------------------------------------------
// The step's phases, for dev/bench/step_vs_sgemm.c's breakdown. That benchmark defines
// FAST_PHASES and FAST_PHASE(phase, work) then adds the work's wall time to
// fast_phase_seconds[phase] (inside a parallel region each thread adds its share, so a
// phase of the time loops counts its mean thread time, and the loop's own entry minus
// those is the time threads spent waiting for each other). Everywhere else, the trainer
// included, FAST_PHASE(phase, work) is the work alone: no clock is read.
enum {
    FP_WNORM_EMBED,  // forward_begin: weight norm forward, the embedding gather, the state in
    FP_PACK,         // W_h, W_mh, W_x, W_mx packed for the time loops, forward and backward
    FP_LOOP_FWD,     // the forward time loop as a whole (its four phases and the waiting)
    FP_IN_PROJ,      // mx = e W_mx^T at every step
    FP_REC_FWD,      // mh = h W_mh^T at every step
    FP_MT_FWD,       // m_t = mx * mh
    FP_GATES_FWD,    // z = b + e W_x^T + m W_h^T at every step (one sum: gemm_nt_rows_packed_sum)
    FP_CELL_FWD,     // gates, c_t, h_t
    FP_OUT_FWD,      // the logits h W_out^T + b_out
    FP_SOFTMAX,      // softmax and the loss
    FP_DLOGITS,      // backward_begin: the gradients zeroed, dlogits from the probabilities
    FP_OUT_BWD,      // dW_out, db_out, dh from the output layer
    FP_LOOP_BWD,     // the backward time loop as a whole
    FP_CELL_BWD,     // dz, dc at every step
    FP_REC_BWD,      // dz W_h, dmh W_mh at every step
    FP_MT_BWD,       // dmx, dmh
    FP_IN_BWD,       // dxe = dz W_x + dmx W_mx at every step
    FP_WGRAD,        // dz^T m, dz^T e, dmx^T e, dmh^T h
    FP_BIAS_BWD,     // db, the column sums of dz
    FP_WNORM_BWD,    // backward_end: the embedding's gradient, weight norm backward
    FP_COUNT
};
#ifdef FAST_PHASES
#include <time.h>
#ifndef FAST_PHASE_CLOCK  // CLOCK_THREAD_CPUTIME_ID on one thread: CPU time, which other work moves less
#define FAST_PHASE_CLOCK CLOCK_MONOTONIC
#endif
static double fast_phase_seconds[FP_COUNT];
static inline double fast_phase_clock(void) {
    struct timespec t;
    clock_gettime(FAST_PHASE_CLOCK, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static inline void fast_phase_add(int phase, double t0) {
#ifdef _OPENMP
    double share = (fast_phase_clock() - t0) / omp_get_num_threads();
#else
    double share = fast_phase_clock() - t0;
#endif
    #pragma omp atomic
    fast_phase_seconds[phase] += share;
}
#define FAST_PHASE(phase, ...) \
    do { double t0_ = fast_phase_clock(); __VA_ARGS__; fast_phase_add(phase, t0_); } while (0)
#else
#define FAST_PHASE(phase, ...) do { __VA_ARGS__; } while (0)
#endif

#define FAST_INLINE __attribute__((always_inline))  // clang vectorises the cell loops only with these inlined
// The cell loops choose between values (the clamp in fast_exp, the two halves of fast_tanh,
// a reset's zero) with conditionals. GCC turns those into vector selects only where no
// floating-point exception could be raised by computing both sides, which its default
// -ftrapping-math assumes possible: without AVX-512's masked operations the loops then
// stay scalar, 6 times slower. Nothing here reads the FP exception flags.
#if defined(__GNUC__) && !defined(__clang__)
#define FAST_SELECTS_VECTORISE __attribute__((optimize("no-trapping-math")))
#else
#define FAST_SELECTS_VECTORISE  // clang vectorises them as they are
#endif

// ----------------------------------------------------------------------------
// exp and tanh as plain arithmetic, so the cell loops vectorise (glibc's expf and
// tanhf are calls, and tanhf goes through expm1f: a quarter of the step at H=256).
// test_gemm checks them on a grid against double.
// e^x: x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts, n*hi exact, so r is
// exact to a rounding), e^r by its Taylor series to r^7 (the next term is 5e-9 of
// it), times 2^n put straight into the exponent bits. x is clamped to [-87, 88],
// where e^x stays a normal float (a NaN passes through: the comparisons are false).
static inline FAST_INLINE float fast_exp(float x) {
    x = x < -87 ? -87 : x > 88 ? 88 : x;
    float t = x * 1.44269504f + 12582912.0f;  // 1.5*2^23: t's low bits hold n = round(x/ln2)
    float n = t - 12582912.0f;
    float r = x - n * 0.693145751953125f - n * 1.428606765330187e-6f;
    float p = 1 + r * (1 + r * (1 / 2.f + r * (1 / 6.f + r * (1 / 24.f + r * (1 / 120.f + r * (1 / 720.f +
              r * (1 / 5040.f)))))));
    uint32_t tb, e;
    memcpy(&tb, &t, 4);
    e = (tb - 0x4b400000u + 127u) << 23;  // the bits of 2^n
    float s;
    memcpy(&s, &e, 4);
    return p * s;
}
static inline FAST_INLINE float fast_sigmoid(float x) { return 1 / (1 + fast_exp(-x)); }
// tanh: |x| < 0.5, its Taylor series to x^17 (the next term is < 3e-9 of tanh
// there); above, 1 - 2/(1 + e^{2|x|}), where tanh > 0.46 so the subtraction grows the
// quotient's error by at most 1/tanh(0.5) - 1 < 1.2 of it: within 4 ulp of tanh, the
// bound test_gemm checks.
static inline FAST_INLINE float fast_tanh(float x) {
    float a = x < 0 ? -x : x, r;
    if (a < 0.5f) {
        float x2 = x * x;
        r = x * (1 + x2 * (-1 / (float)3 + x2 * (2 / (float)15 + x2 * (-17 / (float)315 + x2 * (62 / (float)2835 +
            x2 * (-1382 / (float)155925 + x2 * (21844 / (float)6081075 + x2 * (-929569 / (float)638512875 +
            x2 * (6404582 / (float)10854718875)))))))));
    } else {
        r = 1 - 2 / (1 + fast_exp(2 * a));
        r = x < 0 ? -r : r;
    }
    return r;
}

// mlstm.h's cell_forward with these, given the gates i, f, o, u: the state c and h. With
// -ffp-contract=fast the compiler fuses one of c's products into the sum; GCC 12 fuses i u
// in this order, as it does mlstm.h's `f * c_prev + i * u` in one loop with the gates, so
// the cell in passes (below) gives the bits of the cell in one loop.
static inline FAST_INLINE float fast_cell_state(float i, float f, float o, float u, float c_prev, float *h) {
    float c = i * u + f * c_prev;
    *h = o * fast_tanh(c);
    return c;
}
// The whole cell for one unit: gates i, f, o, u at stride H, in place (tools/generate.c's
// one-row step, whose loop over the units does the recurrent product too).
static inline FAST_INLINE float fast_cell_forward(float *z, size_t H, float c_prev, float *h) {
    float i = fast_sigmoid(z[0]), f = fast_sigmoid(z[H]), o = fast_sigmoid(z[2 * H]), u = fast_tanh(z[3 * H]);
    z[0] = i, z[H] = f, z[2 * H] = o, z[3 * H] = u;
    return fast_cell_state(i, f, o, u, c_prev, h);
}

// mlstm.h's softmax_xent with fast_exp: the same softmax and losses, each row's loops
// vectorised (libm's expf is a call per logit: a twentieth of the step at H=256). The
// row's maximum and sum run in FAST_LANES partial results, lane j taking the logits
// v = j mod FAST_LANES in order, then the lanes in order: loops any vector unit runs
// whole, in an order that is the same on every machine (a reduction left to the
// compiler would follow its vector width). The mean loss is summed in order, in
// double, as there.
#define FAST_LANES 16
static inline FAST_SELECTS_VECTORISE double fast_softmax_xent(Mlstm *m) {
    const int B = m->b, T = m->t, N = B * T, V = m->cfg.V, Vl = V / FAST_LANES * FAST_LANES;
    #pragma omp parallel for schedule(static) if (worth_threads((double)N * V))
    for (int n = 0; n < N; n++) {
        float *p = m->logits + (size_t)n * V, top[FAST_LANES], part[FAST_LANES], mx = p[0], sum = 0;
        int t = n / B, b = n % B;
        for (int j = 0; j < FAST_LANES; j++) top[j] = p[0], part[j] = 0;
        for (int v0 = 0; v0 < Vl; v0 += FAST_LANES)
            for (int j = 0; j < FAST_LANES; j++) top[j] = p[v0 + j] > top[j] ? p[v0 + j] : top[j];
        for (int j = 0; j < FAST_LANES; j++) mx = top[j] > mx ? top[j] : mx;
        for (int v = Vl; v < V; v++) mx = p[v] > mx ? p[v] : mx;
        float target_logit = p[m->targets[b * T + t]];
        for (int v = 0; v < V; v++) p[v] = fast_exp(p[v] - mx);
        for (int v0 = 0; v0 < Vl; v0 += FAST_LANES)
            for (int j = 0; j < FAST_LANES; j++) part[j] += p[v0 + j];
        for (int j = 0; j < FAST_LANES; j++) sum += part[j];
        for (int v = Vl; v < V; v++) sum += p[v];
        for (int v = 0; v < V; v++) p[v] /= sum;
        m->losses[n] = (double)mx + log((double)sum) - (double)target_logit;  // -log softmax, without log(0)
    }
    double loss = 0;
    for (int n = 0; n < N; n++) loss += m->losses[n];
    return loss / N;
}

// ----------------------------------------------------------------------------
// The weights of the time loops in gemm.h's packed layout: packed once per forward (for
// m_t W_h^T) and once per backward (the other way round, for dz W_h).

// precision: what every product of the step (the time loops', the output layer's, the weight
// gradients') rounds its operands to; FP32 or BF16 (gemm.h), accumulating in FP32 either way.
// The cell, softmax, norms and everything outside the products stay FP32.
typedef struct {
    float *W_h, *W_mh, *W_x, *W_mx;  // room for W_h (4H,H), W_mh (H,H), W_x (4H,D), W_mx (H,D) packed either way round
    GemmPrecision precision;
} FastPacks;

// floats of a weight (O,K) packed either way round, in any precision: BF16 packs in about half of
// FP32's room, AMX too but for its padding to whole tiles of 32 k (more than FP32's at small K)
static inline size_t fast_packed_floats(int O, int K) {
    const GemmPrecision widest[2] = {GEMM_FP32, GEMM_BF16_AMX};
    size_t most = 0;
    for (int i = 0; i < 2; i++) {
        size_t nt = gemm_packed_floats(O, K, widest[i]), nn = gemm_packed_floats(K, O, widest[i]);
        most = nt > most ? nt : most;
        most = nn > most ? nn : most;
    }
    return most;
}
static inline void fast_packs_build(FastPacks *pk, const MlstmConfig *c, GemmPrecision precision) {
    pk->precision = precision;
    pk->W_h = mlstm_alloc(fast_packed_floats(4 * c->H, c->H));
    pk->W_mh = mlstm_alloc(fast_packed_floats(c->H, c->H));
    pk->W_x = mlstm_alloc(fast_packed_floats(4 * c->H, c->D));
    pk->W_mx = mlstm_alloc(fast_packed_floats(c->H, c->D));
}
static inline void fast_packs_free(FastPacks *pk) {
    free(pk->W_h);
    free(pk->W_mh);
    free(pk->W_x);
    free(pk->W_mx);
}

// This thread's share [i0, i1) of n items inside a parallel region, in whole units
// (the last share ends at n). A fixed split: the same work goes to the same thread.
static inline void thread_share(int n, int unit, int *i0, int *i1) {
#ifdef _OPENMP
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
#else
    int nt = 1, id = 0;
#endif
    int units = (n + unit - 1) / unit;
    *i0 = (int)((long)units * id / nt) * unit;
    *i1 = (int)((long)units * (id + 1) / nt) * unit;
    if (*i1 > n) *i1 = n;
    if (*i0 > n) *i0 = n;
}

// The rows [b0, b1) of B that this thread owns inside a parallel region. The time
// loops split the batch by rows: rows are independent through time, so each thread
// runs all T steps of its rows with no barrier per step. Splits fall on multiples
// of 4 rows; a row's values do not depend on them (gemm.h computes each element as
// one chain, whatever tile it falls in).
static inline void thread_rows(int B, int *b0, int *b1) { thread_share(B, 4, b0, b1); }

// mlstm.h's bias_grad with the columns split between the threads: each column is still
// summed over the rows in order, so the same bits whatever the split.
static inline void fast_bias_grad(float *db, const float *d, int N, int O) {
    #pragma omp parallel if (worth_threads((double)N * O))
    {
        int o0, o1;
        thread_share(O, 16, &o0, &o1);  // 16 floats: a cache line of db each
        for (int n = 0; n < N; n++)
            #pragma omp simd
            for (int o = o0; o < o1; o++) db[o] += d[(size_t)n * O + o];
    }
}

// ----------------------------------------------------------------------------
// The forward: mlstm_forward's steps, in its order, for the same arguments and result.

// Step t's cell on rows [b0, b1): row pointers and `omp simd` loops over the units. The
// gates come first, in place, each element a short chain (the sigmoids of i, f, o lie
// together in z); then the state. In one loop an element was one long dependent chain of
// five exps and divisions, as long as the out-of-order window: a vector of 8 units took
// about 200 cycles on Zen 3, and the cell was 5% of the step at H = 256.
static inline FAST_SELECTS_VECTORISE void fast_cells_forward(Mlstm *m, int t, int b0, int b1) {
    const size_t H = m->cfg.H, s = (size_t)t * m->b * H, BH = (size_t)m->b * H;
    for (int b = b0; b < b1; b++) {
        const int keep = !is_reset(m, b, t);
        const float *cp = m->cs + s + b * H;
        float *z = m->z + 4 * s + b * 4 * H, *cn = m->cs + s + BH + b * H, *hn = m->hs + s + BH + b * H;
        #pragma omp simd
        for (size_t j = 0; j < 3 * H; j++) z[j] = fast_sigmoid(z[j]);
        #pragma omp simd
        for (size_t j = 3 * H; j < 4 * H; j++) z[j] = fast_tanh(z[j]);
        #pragma omp simd
        for (size_t j = 0; j < H; j++) {
            float c_prev = cp[j];
            cn[j] = fast_cell_state(z[j], z[H + j], z[2 * H + j], z[3 * H + j], keep ? c_prev : 0, &hn[j]);
        }
    }
}

// The time loop: each thread all T steps of its rows of the batch. The input projections
// are computed at their step, with the products that use them: mx_t = e_t W_mx^T just before
// m_t, and z_t = b + e_t W_x^T + m_t W_h^T as one sum (the same chain per element as the
// projection over all T*B rows ahead of the loop, then m_t W_h^T added), without writing z and
// mx out to memory and reading them back.
static inline void fast_forward_steps(Mlstm *m, FastPacks *pk, int B, int T) {
    const int D = m->cfg.D, H = m->cfg.H;
    const float *bias = m->p.t[P_B];
    const GemmPrecision pr = pk->precision;
    #pragma omp parallel
    {
        int b0, b1;
        thread_rows(B, &b0, &b1);
        for (int t = 0; t < T; t++) {
            const size_t s = (size_t)t * B * H;
            const float *e = m->xe + (size_t)t * B * D;
            FAST_PHASE(FP_IN_PROJ,
                       gemm_nt_rows_packed(m->mx + s, e, pk->W_mx, NULL, b0, b1, H, D, MATMUL_SET, pr));
            FAST_PHASE(FP_REC_FWD,
                       gemm_nt_rows_packed(m->mh + s, m->hs + s, pk->W_mh, NULL, b0, b1, H, H, MATMUL_SET, pr));
            FAST_PHASE(FP_MT_FWD, mt_product(m, t, b0, b1));
            FAST_PHASE(FP_GATES_FWD, gemm_nt_rows_packed_sum(m->z + 4 * s, e, pk->W_x, D, m->mt + s, pk->W_h, H, bias,
                                                             b0, b1, 4 * H, pr));
            FAST_PHASE(FP_CELL_FWD, fast_cells_forward(m, t, b0, b1));
        }
    }
}

static inline double fast_forward(Mlstm *m, FastPacks *pk, const uint8_t *inputs, const uint8_t *targets,
                                  const uint8_t *reset, const float *h0, const float *c0, int B, int T) {
    FAST_PHASE(FP_WNORM_EMBED, forward_begin(m, inputs, targets, reset, h0, c0, B, T));
    const int D = m->cfg.D, H = m->cfg.H, V = m->cfg.V, N = B * T;
    FAST_PHASE(FP_PACK, gemm_pack_nt(pk->W_mh, m->W[WN_MH], H, H, pk->precision);
                        gemm_pack_nt(pk->W_h, m->W[WN_H], 4 * H, H, pk->precision);
                        gemm_pack_nt(pk->W_mx, m->W[WN_MX], H, D, pk->precision);
                        gemm_pack_nt(pk->W_x, m->W[WN_X], 4 * H, D, pk->precision));
    FAST_PHASE(FP_LOOP_FWD, fast_forward_steps(m, pk, B, T));
    FAST_PHASE(FP_OUT_FWD,
               gemm_nt(m->logits, m->hs + (size_t)B * H, m->p.t[P_WOUT], m->p.t[P_BOUT], N, V, H, MATMUL_SET,
                       pk->precision));
    double loss;
    FAST_PHASE(FP_SOFTMAX, loss = fast_softmax_xent(m));
    return loss;
}

// ----------------------------------------------------------------------------
// The backward: mlstm_backward's steps, in its order.

// Step t's cell gradients on rows [b0, b1), as fast_cells_forward.
static inline FAST_SELECTS_VECTORISE void fast_cells_backward(Mlstm *m, int t, int b0, int b1) {
    const size_t H = m->cfg.H, s = (size_t)t * m->b * H, BH = (size_t)m->b * H;
    for (int b = b0; b < b1; b++) {
        const int keep = !is_reset(m, b, t);
        const float *g = m->gates + 4 * s + b * 4 * H, *cp = m->cs + s + b * H, *cn = cp + BH;
        const float *dhs = m->dhs + s + b * H, *dhn = m->dh + b * H;
        float *dc = m->dc + b * H, *dz = m->dz + 4 * s + b * 4 * H;
        #pragma omp simd
        for (size_t j = 0; j < H; j++) {
            float c_prev = cp[j];
            float dh = dhn[j] + dhs[j];  // from step t+1 and from the output layer
            float d = cell_backward_given_tanh(g + j, H, keep ? c_prev : 0, fast_tanh(cn[j]), dh, dc[j], dz + j);
            dc[j] = keep ? d : 0;  // a reset cuts the state: nothing flows back
        }
    }
}

// The time loop, last step first, each thread on its rows. The input gradients
// dxe_t = dz_t W_x + dmx_t W_mx are computed at their step as one sum, while dz_t and dmx_t are
// in cache: the same chain per element as one product over all T*B rows after the loop.
static inline void fast_backward_steps(Mlstm *m, FastPacks *pk, int B, int T) {
    const int D = m->cfg.D, H = m->cfg.H;
    const GemmPrecision pr = pk->precision;
    #pragma omp parallel
    {
        int b0, b1;
        thread_rows(B, &b0, &b1);
        for (int t = T - 1; t >= 0; t--) {
            const size_t s = (size_t)t * B * H;
            float *dxe = m->dxe + (size_t)t * B * D;
            FAST_PHASE(FP_CELL_BWD, fast_cells_backward(m, t, b0, b1));
            FAST_PHASE(FP_REC_BWD,
                       gemm_nn_rows_packed(m->dm, m->dz + 4 * s, pk->W_h, b0, b1, H, 4 * H, MATMUL_SET, pr));
            FAST_PHASE(FP_MT_BWD, mt_backward(m, t, b0, b1));
            FAST_PHASE(FP_IN_BWD, gemm_nn_rows_packed_sum(dxe, m->dz + 4 * s, pk->W_x, 4 * H, m->dmx + s, pk->W_mx, H,
                                                          b0, b1, D, pr));
            FAST_PHASE(FP_REC_BWD, gemm_nn_rows_packed(m->dh, m->dmh + s, pk->W_mh, b0, b1, H, H, MATMUL_SET, pr));
        }
    }
}

static inline void fast_backward(Mlstm *m, FastPacks *pk, float scale) {
    const int D = m->cfg.D, H = m->cfg.H, V = m->cfg.V, B = m->b, T = m->t, N = B * T;
    FAST_PHASE(FP_DLOGITS, backward_begin(m, scale));
    FAST_PHASE(FP_OUT_BWD, gemm_tn(m->g.t[P_WOUT], m->dlogits, m->hs + (size_t)B * H, V, H, N, pk->precision);
                           fast_bias_grad(m->g.t[P_BOUT], m->dlogits, N, V);
                           gemm_nn(m->dhs, m->dlogits, m->p.t[P_WOUT], N, H, V, MATMUL_SET, pk->precision));
    FAST_PHASE(FP_PACK, gemm_pack_nn(pk->W_mh, m->W[WN_MH], H, H, pk->precision);
                        gemm_pack_nn(pk->W_h, m->W[WN_H], H, 4 * H, pk->precision);
                        gemm_pack_nn(pk->W_mx, m->W[WN_MX], D, H, pk->precision);
                        gemm_pack_nn(pk->W_x, m->W[WN_X], D, 4 * H, pk->precision));
    FAST_PHASE(FP_LOOP_BWD, fast_backward_steps(m, pk, B, T));
    FAST_PHASE(FP_WGRAD, gemm_tn_pair(m->dW[WN_H], m->mt, H, m->dW[WN_X], m->xe, D, m->dz, 4 * H, N, pk->precision);
                         gemm_tn(m->dW[WN_MX], m->dmx, m->xe, H, D, N, pk->precision);
                         gemm_tn(m->dW[WN_MH], m->dmh, m->hs, H, H, N, pk->precision));
    FAST_PHASE(FP_BIAS_BWD, fast_bias_grad(m->g.t[P_B], m->dz, N, 4 * H));
    FAST_PHASE(FP_WNORM_BWD, backward_end(m));
}
