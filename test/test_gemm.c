// fast.h, the CPU trainer's path, against mlstm.h, the reference it replaces for speed:
//  1. every gemm.h matmul layout at sizes that leave partial tiles and several KC blocks,
//     with bias and accumulation, agrees with mlstm.h's plain loops within the rounding
//     bound of two FP32 sums (below);
//  2. the result of an element does not depend on how rows are split between calls or
//     threads: bit-identical (the promise behind bit-exact resume);
//  3. fast_exp, fast_sigmoid and fast_tanh are within a few ulp of exp, sigmoid, tanh in double;
//  4. fast_forward and fast_backward agree with mlstm_forward and mlstm_backward on the loss,
//     the probabilities, the state carried out and every gradient (tolerance argued at
//     test_model), and give the same bits with 1 and 2 threads.
#include "fast.h"
#include "test/test.h"
#include <math.h>

static float *rand_buf(size_t n, uint64_t *s) {
    float *x = mlstm_alloc(n);
    for (size_t i = 0; i < n; i++) x[i] = (float)(2 * rng_uniform(s) - 1);
    return x;
}

// Each of the two results is a sum of K products plus at most two more terms
// (the bias and the accumulated value) in some order, with or without fused
// multiply-adds. Each such FP32 sum is within gamma_n * sum|terms| of the exact
// value, gamma_n = n u / (1 - n u), u = 2^-24 (Higham, Accuracy and Stability of
// Numerical Algorithms, section 3.1), so they differ by at most 2 gamma_{K+2} sum|terms|.
// mag[i] = sum of |terms| of element i, computed in double.
static double worst_ratio(const float *a, const float *b, const double *mag, size_t n, int K) {
    double u = ldexp(1.0, -24), g = (K + 2) * u / (1 - (K + 2) * u), worst = 0;
    for (size_t i = 0; i < n; i++) {
        double bound = 2 * g * mag[i] + 1e-30, r = fabs((double)a[i] - b[i]) / bound;
        worst = r > worst || r != r ? r : worst;  // a NaN counts as a failure
    }
    return worst;
}

// out (N,O) = [out +] in (N,K) W^T [+ bias], all three layouts, against the plain loops
static void test_layouts(int N, int K, int O, uint64_t *s) {
    float *in = rand_buf((size_t)N * K, s), *W = rand_buf((size_t)O * K, s), *bias = rand_buf(O, s);
    float *init = rand_buf((size_t)N * O, s), *fast = mlstm_alloc((size_t)N * O), *ref = mlstm_alloc((size_t)N * O);
    size_t nmag = (size_t)(N > O ? N : O) * (O > K ? O : K);  // covers (N,O), (N,K) and (O,K)
    double *mag = (double *)mallocCheck(sizeof(double) * nmag);
    for (int acc = 0; acc < 2; acc++)
        for (int wb = 0; wb < 2; wb++) {
            const float *bp = wb ? bias : NULL;
            memcpy(fast, init, sizeof(float) * N * O); memcpy(ref, init, sizeof(float) * N * O);
            gemm_nt(fast, in, W, bp, N, O, K, acc, GEMM_FP32);
            matmul_nt(ref, in, W, bp, N, O, K, acc);
            for (int n = 0; n < N; n++)
                for (int o = 0; o < O; o++) {
                    double m = (acc ? fabs(init[(size_t)n * O + o]) : 0) + (bp ? fabs(bp[o]) : 0);
                    for (int k = 0; k < K; k++) m += fabs((double)in[(size_t)n * K + k] * W[(size_t)o * K + k]);
                    mag[(size_t)n * O + o] = m;
                }
            double r = worst_ratio(fast, ref, mag, (size_t)N * O, K);
            CHECK(r <= 1, "nt N=%d K=%d O=%d%s%s: worst |fast - plain| is %.3f of the FP32 bound", N, K, O,
                  acc ? " accumulate" : "", bp ? " bias" : "", r);
        }
    // dIn (N,K) = [dIn +] dOut (N,O) . W (O,K), with in's buffer as dOut's (N*O floats needed)
    float *dOut = rand_buf((size_t)N * O, s), *dfast = mlstm_alloc((size_t)N * K), *dref = mlstm_alloc((size_t)N * K);
    for (int acc = 0; acc < 2; acc++) {
        for (size_t i = 0; i < (size_t)N * K; i++) dfast[i] = dref[i] = in[i];
        gemm_nn(dfast, dOut, W, N, K, O, acc, GEMM_FP32);
        matmul_nn(dref, dOut, W, N, K, O, acc);
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                double m = acc ? fabs(in[(size_t)n * K + k]) : 0;
                for (int o = 0; o < O; o++) m += fabs((double)dOut[(size_t)n * O + o] * W[(size_t)o * K + k]);
                mag[(size_t)n * K + k] = m;
            }
        double r = worst_ratio(dfast, dref, mag, (size_t)N * K, O);
        CHECK(r <= 1, "nn N=%d O=%d K=%d%s: worst |fast - plain| is %.3f of the FP32 bound", N, O, K, acc ? " accumulate" : "", r);
    }
    // dW (O,K) += dOut^T in: a sum over the N rows
    float *wfast = mlstm_alloc((size_t)O * K), *wref = mlstm_alloc((size_t)O * K);
    memcpy(wfast, W, sizeof(float) * O * K); memcpy(wref, W, sizeof(float) * O * K);
    gemm_tn(wfast, dOut, in, O, K, N, GEMM_FP32);
    matmul_tn(wref, dOut, in, O, K, N);
    for (int o = 0; o < O; o++)
        for (int k = 0; k < K; k++) {
            double m = fabs(W[(size_t)o * K + k]);
            for (int n = 0; n < N; n++) m += fabs((double)dOut[(size_t)n * O + o] * in[(size_t)n * K + k]);
            mag[(size_t)o * K + k] = m;
        }
    double r = worst_ratio(wfast, wref, mag, (size_t)O * K, N);
    CHECK(r <= 1, "tn N=%d O=%d K=%d: worst |fast - plain| is %.3f of the FP32 bound", N, O, K, r);

    // the time loops' products with W packed once, on rows [n0, n1) as a thread runs them
    float *Wp = mlstm_alloc(fast_packed_floats(O, K));  // either way round
    int n0 = N > 4 ? 4 : 0, n1 = N;
    gemm_pack_nt(Wp, W, O, K, GEMM_FP32);
    for (int acc = 0; acc < 2; acc++)
        for (int wb = 0; wb < 2; wb++) {
            const float *bp = wb ? bias : NULL;
            memcpy(fast, init, sizeof(float) * N * O); memcpy(ref, init, sizeof(float) * N * O);
            gemm_nt_rows_packed(fast, in, Wp, bp, n0, n1, O, K, acc, GEMM_FP32);
            matmul_nt(ref + (size_t)n0 * O, in + (size_t)n0 * K, W, bp, n1 - n0, O, K, acc);
            for (int n = 0; n < N; n++)
                for (int o = 0; o < O; o++) {
                    double m = (acc ? fabs(init[(size_t)n * O + o]) : 0) + (bp ? fabs(bp[o]) : 0);
                    for (int k = 0; k < K; k++) m += fabs((double)in[(size_t)n * K + k] * W[(size_t)o * K + k]);
                    mag[(size_t)n * O + o] = m;
                }
            r = worst_ratio(fast, ref, mag, (size_t)N * O, K);
            CHECK(r <= 1 && memcmp(fast, init, sizeof(float) * n0 * O) == 0,
                  "nt rows [%d,%d) packed%s%s: worst |fast - plain| is %.3f of the FP32 bound, rows outside untouched",
                  n0, n1, acc ? " accumulate" : "", bp ? " bias" : "", r);
        }
    gemm_pack_nn(Wp, W, K, O, GEMM_FP32);
    for (size_t i = 0; i < (size_t)N * K; i++) dfast[i] = dref[i] = in[i];
    gemm_nn_rows_packed(dfast, dOut, Wp, n0, n1, K, O, MATMUL_SET, GEMM_FP32);
    matmul_nn(dref + (size_t)n0 * K, dOut + (size_t)n0 * O, W, n1 - n0, K, O, MATMUL_SET);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            double m = 0;
            for (int o = 0; o < O; o++) m += fabs((double)dOut[(size_t)n * O + o] * W[(size_t)o * K + k]);
            mag[(size_t)n * K + k] = m;
        }
    r = worst_ratio(dfast + (size_t)n0 * K, dref + (size_t)n0 * K, mag + (size_t)n0 * K, (size_t)(n1 - n0) * K, O);
    CHECK(r <= 1 && memcmp(dfast, in, sizeof(float) * n0 * K) == 0,
          "nn rows [%d,%d) packed: worst |fast - plain| is %.3f of the FP32 bound, rows outside untouched", n0, n1, r);
    free(in); free(W); free(bias); free(init); free(fast); free(ref); free(mag);
    free(dOut); free(dfast); free(dref); free(wfast); free(wref); free(Wp);
}

// A read down its columns (gemm_tn's dOut^T: packed into slivers by gemm_pack_a where the
// product has enough panels, else read in place) gives the bits of the same A transposed
// first and read along its rows, on 1, 2 and 3 threads: each element is the same chain.
static void test_transposed_a(int N, int K, int O, uint64_t *s) {
    float *dOut = rand_buf((size_t)N * O, s), *in = rand_buf((size_t)N * K, s), *init = rand_buf((size_t)O * K, s);
    float *dOutT = mlstm_alloc((size_t)O * N), *a = mlstm_alloc((size_t)O * K), *b = mlstm_alloc((size_t)O * K);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) dOutT[(size_t)o * N + n] = dOut[(size_t)n * O + o];
    for (int threads = 1; threads <= 3; threads++) {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        memcpy(a, init, sizeof(float) * O * K); memcpy(b, init, sizeof(float) * O * K);
        gemm_tn(a, dOut, in, O, K, N, GEMM_FP32);
        gemm(b, K, (GemmView){dOutT, N, 1}, (GemmView){in, K, 1}, NULL, O, K, N, MATMUL_ADD, GEMM_FP32);
        CHECK(memcmp(a, b, sizeof(float) * O * K) == 0,
              "tn N=%d O=%d K=%d (%d panels%s), %d thread(s): A read down its columns gives the bits of A transposed",
              N, O, K, gemm_panels(K), GEMM_PACK_A && gemm_panels(K) >= 8 ? ", A packed" : "", threads);
    }
    // the same product paired with one of 3 columns on the same A (dW_h and dW_x), each part's bits
    // those of its own gemm_tn, whether the pair packs A and the part alone would not, or neither
    float *in2 = rand_buf((size_t)N * 3, s), *x = mlstm_alloc((size_t)O * 3), *y = mlstm_alloc((size_t)O * 3);
    memcpy(a, init, sizeof(float) * O * K); memcpy(b, init, sizeof(float) * O * K);
    for (size_t i = 0; i < (size_t)O * 3; i++) x[i] = y[i] = init[i];
    gemm_tn(a, dOut, in, O, K, N, GEMM_FP32);
    gemm_tn(x, dOut, in2, O, 3, N, GEMM_FP32);
    gemm_tn_pair(b, in, K, y, in2, 3, dOut, O, N, GEMM_FP32);
    CHECK(memcmp(a, b, sizeof(float) * O * K) == 0 && memcmp(x, y, sizeof(float) * O * 3) == 0,
          "tn N=%d O=%d K=%d and K=3 as a pair: each part gives its own product's bits", N, O, K);
    free(in2); free(x); free(y);
    free(dOut); free(in); free(init); free(dOutT); free(a); free(b);
}

// An element's value does not depend on the tile it falls in, the rows a call
// covers or the number of threads: the parallel product, the packed product on
// all rows, and the packed product in pieces give the same bits.
static void test_splits(int N, int K, int O, uint64_t *s) {
    float *in = rand_buf((size_t)N * K, s), *W = rand_buf((size_t)O * K, s), *bias = rand_buf(O, s);
    float *a = mlstm_alloc((size_t)N * O), *b = mlstm_alloc((size_t)N * O), *c = mlstm_alloc((size_t)N * O);
    float *Wp = mlstm_alloc(gemm_packed_floats(O, K, GEMM_FP32));
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    gemm_nt(a, in, W, bias, N, O, K, MATMUL_SET, GEMM_FP32);
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    gemm_nt(b, in, W, bias, N, O, K, MATMUL_SET, GEMM_FP32);
    CHECK(memcmp(a, b, sizeof(float) * N * O) == 0, "nt N=%d K=%d O=%d: 1 and 2 threads give the same bits", N, K, O);
    gemm_pack_nt(Wp, W, O, K, GEMM_FP32);
    gemm_nt_rows_packed(c, in, Wp, bias, 0, N, O, K, MATMUL_SET, GEMM_FP32);
    int same_all = memcmp(a, c, sizeof(float) * N * O) == 0;
    memset(c, 0, sizeof(float) * N * O);
    for (int n0 = 0; n0 < N; n0 += 3)  // tiles cut elsewhere
        gemm_nt_rows_packed(c, in, Wp, bias, n0, n0 + 3 < N ? n0 + 3 : N, O, K, MATMUL_SET, GEMM_FP32);
    CHECK(same_all && memcmp(a, c, sizeof(float) * N * O) == 0,
          "nt N=%d K=%d O=%d: packed on all rows, and in pieces of 3 rows, give the parallel product's bits", N, K, O);
    // dIn (N,K) = dOut (N,O) . W: the parallel product against the packed one in pieces, both
    // with a second product added (fast.h's dxe = dz W_x + dmx W_mx, with W twice)
    float *dOut = a, *dIn = rand_buf((size_t)N * K, s), *dInPacked = mlstm_alloc((size_t)N * K);
    free(Wp);
    Wp = mlstm_alloc(gemm_packed_floats(K, O, GEMM_FP32));
    gemm_nn(dIn, dOut, W, N, K, O, MATMUL_SET, GEMM_FP32);
    gemm_nn(dIn, dOut, W, N, K, O, MATMUL_ADD, GEMM_FP32);
    gemm_pack_nn(Wp, W, K, O, GEMM_FP32);
    for (int n0 = 0; n0 < N; n0 += 3) {
        gemm_nn_rows_packed(dInPacked, dOut, Wp, n0, n0 + 3 < N ? n0 + 3 : N, K, O, MATMUL_SET, GEMM_FP32);
        gemm_nn_rows_packed(dInPacked, dOut, Wp, n0, n0 + 3 < N ? n0 + 3 : N, K, O, MATMUL_ADD, GEMM_FP32);
    }
    CHECK(memcmp(dIn, dInPacked, sizeof(float) * N * K) == 0,
          "nn N=%d K=%d O=%d: packed in pieces of 3 rows, set then added to, gives the parallel product's bits",
          N, K, O);
    memset(dInPacked, 0xff, sizeof(float) * N * K);  // NaN: the sum sets it
    for (int n0 = 0; n0 < N; n0 += 3)
        gemm_nn_rows_packed_sum(dInPacked, dOut, Wp, O, dOut, Wp, O, n0, n0 + 3 < N ? n0 + 3 : N, K, GEMM_FP32);
    CHECK(memcmp(dIn, dInPacked, sizeof(float) * N * K) == 0,
          "nn N=%d K=%d O=%d: the packed sum of two products, in pieces of 3 rows, gives the bits of the two in turn",
          N, K, O);
    // out = bias + in W^T + in W^T: the parallel products in turn against the packed sum in pieces
    free(Wp);
    Wp = mlstm_alloc(gemm_packed_floats(O, K, GEMM_FP32));
    gemm_pack_nt(Wp, W, O, K, GEMM_FP32);
    gemm_nt(b, in, W, NULL, N, O, K, MATMUL_ADD, GEMM_FP32);  // b: in W^T + bias, from above
    memset(c, 0xff, sizeof(float) * N * O);
    for (int n0 = 0; n0 < N; n0 += 3)
        gemm_nt_rows_packed_sum(c, in, Wp, K, in, Wp, K, bias, n0, n0 + 3 < N ? n0 + 3 : N, O, GEMM_FP32);
    CHECK(memcmp(b, c, sizeof(float) * N * O) == 0,
          "nt N=%d K=%d O=%d: the packed sum of two products with the bias, in pieces of 3 rows, gives the bits of "
          "the two in turn", N, K, O);
    free(in); free(W); free(bias); free(a); free(b); free(c); free(Wp); free(dIn); free(dInPacked);
}

// fast_bias_grad splits the columns between threads (above worth_threads' size): each
// column's sum keeps mlstm.h's order, so its bits are bias_grad's, with 1 and 2 threads.
static void test_bias_grad(int N, int O, uint64_t *s) {
    float *d = rand_buf((size_t)N * O, s), *init = rand_buf(O, s), *ref = mlstm_alloc(O), *fast = mlstm_alloc(O);
    memcpy(ref, init, sizeof(float) * O);
    bias_grad(ref, d, N, O);
    int same = 1;
    for (int threads = 1; threads <= 3; threads++) {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        memcpy(fast, init, sizeof(float) * O);
        fast_bias_grad(fast, d, N, O);
        same &= memcmp(fast, ref, sizeof(float) * O) == 0;
    }
    CHECK(same && worth_threads((double)N * O),
          "bias gradient N=%d O=%d: fast_bias_grad gives bias_grad's bits on 1 and 2 threads", N, O);
    free(d); free(init); free(ref); free(fast);
}

// |f - exact| in units of the float spacing at exact
static double ulps(float f, double exact) {
    double sp = exact == 0 ? ldexp(1.0, -149) : fabs((double)nextafterf((float)fabs(exact), INFINITY) - (float)fabs(exact));
    return fabs((double)f - exact) / sp;
}

static void test_pointwise(void) {
    // dense grids over the ranges the cell sees (and beyond, where the clamps act)
    double we = 0, ws = 0, wt = 0;
    for (int i = -400000; i <= 400000; i++) {
        float x = (float)(i * 2.175e-4);  // [-87, 87], inside the clamps
        we = fmax(we, ulps(fast_exp(x), exp((double)x)));
    }
    for (int i = -300000; i <= 300000; i++) {
        float x = (float)(i * 1e-4);  // [-30, 30]
        ws = fmax(ws, ulps(fast_sigmoid(x), 1 / (1 + exp(-(double)x))));
        wt = fmax(wt, ulps(fast_tanh(x), tanh((double)x)));
    }
    for (int i = 1; i <= 100000; i++) {  // small arguments, where tanh(x) ~ x
        float x = (float)(i * 1e-8);
        wt = fmax(wt, fmax(ulps(fast_tanh(x), tanh((double)x)), ulps(fast_tanh(-x), tanh(-(double)x))));
    }
    // glibc's expf is within 1 ulp; the Horner sums and the 2^n scaling add about one more
    CHECK(we <= 2, "fast_exp within %.2f ulp of exp on [-87, 87] (bound 2)", we);
    // 1/(1 + e^-x): fast_exp's 2 ulp, then half an ulp in the sum and in the quotient
    CHECK(ws <= 3, "fast_sigmoid within %.2f ulp of sigmoid on [-30, 30] (bound 3)", ws);
    // 1 - 2/(1 + e^{2|x|}): the quotient's 2 ulp grow by at most 1/tanh(0.5) - 1 < 1.2 in the subtraction
    CHECK(wt <= 4, "fast_tanh within %.2f ulp of tanh on [-30, 30] and near 0 (bound 4)", wt);
    float big = fast_exp(1000), tiny = fast_exp(-1000), nan = fast_exp(NAN);
    CHECK(isfinite(big) && big > 1e38f && tiny >= 0 && tiny < 1e-37f && isnan(nan) && isnan(fast_tanh(NAN)),
          "fast_exp clamps to [e^-87, e^88] (%g, %g) and passes NaN", tiny, big);
    CHECK(fast_tanh(100) == 1 && fast_tanh(-100) == -1 && fast_tanh(0) == 0 && fast_sigmoid(-200) < 1e-37f && fast_sigmoid(200) == 1,
          "fast_tanh(+-100) = +-1, fast_tanh(0) = 0, fast_sigmoid saturates to 0 and 1");
}

// ----------------------------------------------------------------------------
// The whole step: fast_forward + fast_backward against mlstm_forward + mlstm_backward on
// the same weights, batch (with resets) and non-zero carried state.

// max |a - b| / max |b|: an error against the scale of the tensor (as test_gpu.cu)
static double max_rel_err(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= 1e300)) return INFINITY;  // NaN or inf
        d = e > d ? e : d;
        m = fabs((double)b[i]) > m ? fabs((double)b[i]) : m;
    }
    return m > 0 ? d / m : d;
}
// the same per row of a (rows, cols) tensor, the worst row: an error confined to a few
// small rows (one byte's row of dE, one unit) hides in the whole tensor's metric
static double max_row_err(const float *a, const float *b, size_t rows, size_t cols) {
    double worst = 0;
    for (size_t r = 0; r < rows; r++) {
        double e = max_rel_err(a + r * cols, b + r * cols, cols);
        worst = e > worst || e != e ? e : worst;
    }
    return worst;
}

typedef struct {
    double loss;
    float *probs, *h, *c, *grads, *dh0, *dc0;  // copies: probs before backward turns them into dlogits
} StepResult;

static float *copy_of(const float *x, size_t n) {
    float *y = (float *)mallocCheck(sizeof(float) * n);
    memcpy(y, x, sizeof(float) * n);
    return y;
}
// One step on m: fast.h's with packs, mlstm.h's without (pk NULL).
static StepResult run_step(Mlstm *m, FastPacks *pk, const uint8_t *in, const uint8_t *tg, const uint8_t *rs,
                           const float *h0, const float *c0, int B, int T, float S) {
    StepResult r;
    size_t BH = (size_t)B * m->cfg.H;
    r.loss = pk ? fast_forward(m, pk, in, tg, rs, h0, c0, B, T) : mlstm_forward(m, in, tg, rs, h0, c0, B, T);
    r.probs = copy_of(m->probs, (size_t)B * T * m->cfg.V);
    r.h = copy_of(mlstm_h_out(m), BH);
    r.c = copy_of(mlstm_c_out(m), BH);
    if (pk) fast_backward(m, pk, S);
    else mlstm_backward(m, S);
    r.grads = copy_of(m->grads, m->nparams);
    r.dh0 = copy_of(m->dh0, BH);
    r.dc0 = copy_of(m->dc0, BH);
    return r;
}
static void step_free(StepResult *r) {
    free(r->probs); free(r->h); free(r->c); free(r->grads); free(r->dh0); free(r->dc0);
}

// Tolerance. The two paths evaluate the same expressions on the same FP32 inputs and
// differ only in the order of each sum (gemm.h's k blocks and fused multiply-adds against
// mlstm.h's vectorised dot products and axpys) and in exp, sigmoid and tanh (fast.h's within
// 4 ulp, libm's within 1: test_pointwise). A sum of K terms of either sign rounds each of
// its partial sums, which grow like sqrt(k) terms, by a relative u = 2^-24 of either sign,
// so its error is about u sqrt(K) of the result (as test_gpu.cu argues for the GPU; Higham
// and Mary, SIAM J. Sci. Comput. 2019, make such probabilistic bounds rigorous); 6 times
// that bounds the largest of a tensor's elements, and two orders differ by twice that. At
// these initial weights the slopes of sigmoid and tanh (<= 1) and products with gates in
// (0, 1) and |h| < 1 pass an error from one sum to the next without growing it; errors add
// along the longest chain of dependent sums: forward through T steps, the output layer,
// back through T steps, and a weight gradient's sum over the N = B T rows, 2 T + 3 sums of
// at most K = max(4H, N) terms. So each tensor, and each row of a matrix against its own
// scale, is within (2 T + 3) 12 sqrt(K) u of the reference (the activations' 5 u per step
// are far below). Nothing here depends on the vector width or on fused multiply-adds. A
// bug (a wrong row, gate, step or reset) is off by O(1), a dropped term by ~1/sqrt(K).
static void test_model(MlstmConfig cfg, int B, int T, uint64_t seed) {
    const int H = cfg.H, N = B * T, V = cfg.V, K = 4 * H > N ? 4 * H : N;
    const double tol = (2.0 * T + 3) * 12 * sqrt((double)K) * 0x1p-24;
    char tag[96];
    snprintf(tag, sizeof tag, "D=%d H=%d B=%d T=%d wnorm=%d", cfg.D, H, B, T, cfg.wnorm);
    uint8_t *in = (uint8_t *)mallocCheck(N), *tg = (uint8_t *)mallocCheck(N), *rs = (uint8_t *)mallocCheck(N);
    float *h0 = mlstm_alloc((size_t)B * H), *c0 = mlstm_alloc((size_t)B * H);
    uint64_t s = seed;
    for (int i = 0; i < N; i++) {
        in[i] = (uint8_t)(rng_next(&s) >> 56);
        tg[i] = (uint8_t)(rng_next(&s) >> 56);
        rs[i] = rng_uniform(&s) < 0.1;
    }
    rs[1] = 1;  // a reset inside the window, not only at its start
    for (int i = 0; i < B * H; i++) {
        h0[i] = (float)(0.5 * rng_uniform(&s) - 0.25);
        c0[i] = (float)(rng_uniform(&s) - 0.5);
    }
    Mlstm m;
    FastPacks pk;
    mlstm_build(&m, cfg, B, T);
    fast_packs_build(&pk, &cfg, GEMM_FP32);
    mlstm_init(&m, seed);
    const float S = 1024;  // a loss scale: both seed backward with it
    StepResult ref = run_step(&m, NULL, in, tg, rs, h0, c0, B, T, S);
    StepResult fast = run_step(&m, &pk, in, tg, rs, h0, c0, B, T, S);
    double e_loss = fabs(fast.loss - ref.loss) / ref.loss, e_probs = max_row_err(fast.probs, ref.probs, N, V);
    double e_h = max_rel_err(fast.h, ref.h, (size_t)B * H), e_c = max_rel_err(fast.c, ref.c, (size_t)B * H);
    double e_dh0 = max_rel_err(fast.dh0, ref.dh0, (size_t)B * H), e_dc0 = max_rel_err(fast.dc0, ref.dc0, (size_t)B * H);
    CHECK(e_loss <= tol && e_probs <= tol && e_h <= tol && e_c <= tol && e_dh0 <= tol && e_dc0 <= tol,
          "model %s: loss, probabilities per row, h, c out, dh0, dc0 within %.1e %.1e %.1e %.1e %.1e %.1e of mlstm.h's "
          "(<= %.1e)", tag, e_loss, e_probs, e_h, e_c, e_dh0, e_dc0, tol);
    ParamTable gf, gr;
    param_table(&gf, &cfg, fast.grads);
    param_table(&gr, &cfg, ref.grads);
    size_t rows[NPARAM], cols[NPARAM];
    param_shapes(&cfg, rows, cols);
    for (int i = 0; i < NPARAM; i++) {
        if (!gr.n[i]) continue;
        double e = max_rel_err(gf.t[i], gr.t[i], gr.n[i]);
        double er = cols[i] > 1 ? max_row_err(gf.t[i], gr.t[i], rows[i], cols[i]) : e;
        CHECK(e <= tol && er <= tol, "model %s: grad %s within %.1e of mlstm.h's, worst row %.1e (<= %.1e)", tag,
              param_names[i], e, er, tol);
    }
    // the thread count changes no bit of the fast path (and a second step reuses the packs)
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    StepResult one = run_step(&m, &pk, in, tg, rs, h0, c0, B, T, S);
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    StepResult two = run_step(&m, &pk, in, tg, rs, h0, c0, B, T, S);
    size_t BH = sizeof(float) * B * H;
    int same = one.loss == two.loss && !memcmp(one.probs, two.probs, sizeof(float) * N * V) &&
               !memcmp(one.h, two.h, BH) && !memcmp(one.c, two.c, BH) && !memcmp(one.dh0, two.dh0, BH) &&
               !memcmp(one.dc0, two.dc0, BH) && !memcmp(one.grads, two.grads, sizeof(float) * m.nparams);
    CHECK(same, "model %s: 1 and 2 threads give the same bits (loss, probabilities, state, every gradient)", tag);
    step_free(&ref); step_free(&fast); step_free(&one); step_free(&two);
    mlstm_free(&m);
    fast_packs_free(&pk);
    free(in); free(tg); free(rs); free(h0); free(c0);
}

int main(void) {
    uint64_t s = 18;
    // partial tiles in every direction, K below, at and above KC (one and several blocks)
    test_layouts(37, 67, 45, &s);
    test_layouts(16, GEMM_KC, 4 * 32, &s);
    test_layouts(19, GEMM_KC + 13, 2 * GEMM_NR + 1, &s);
    test_layouts(64, 2 * GEMM_KC + 5, 96, &s);
    test_layouts(3, 5, 2, &s);
    test_splits(37, 67, 45, &s);
    test_splits(70, GEMM_KC + 31, 3 * GEMM_NR + 7, &s);
    // the time loops' packed weights in two streamed blocks of k
    test_layouts(9, GEMM_KC_STREAMED + 13, 2 * GEMM_NR + 1, &s);
    test_splits(13, GEMM_KC_STREAMED + 31, 3 * GEMM_NR + 7, &s);
    // and more row tiles than share the fetch of the next panel (GEMM_FETCH_TILES), a partial one last
    test_layouts(4 + GEMM_MR * (GEMM_FETCH_TILES + 1) + 3, GEMM_KC_STREAMED + 13, 2 * GEMM_NR + 1, &s);
    // A packed (8 panels or more, K above KC, a partial row tile, rows split 2 ways) and read in place
    test_transposed_a(GEMM_KC + 40, 8 * GEMM_NR + 5, 4 * 9 + 3, &s);
    test_transposed_a(2 * GEMM_KC + 1, 3 * GEMM_NR, 4 * 5 + 2, &s);
    test_transposed_a(70, 8 * GEMM_NR + 1, 5, &s);  // two row tiles: a third thread has none
    test_bias_grad(300, 1201, &s);  // columns not a whole number of 16-float shares
    test_pointwise();
    // H above KC (the recurrent products in two k blocks), B splitting 4 + 2 over two threads
    test_model((MlstmConfig){256, 24, 300, 1}, 6, 5, 21);
    test_model((MlstmConfig){256, 16, 40, 0}, 3, 7, 22);  // without weight norm, a partial row tile
    return test_summary(GEMM_MR == 8 ? "test_gemm_8_row_tile" : "test_gemm_4_row_tile");
}
