// The fast FP32 path (gemm.h's matmuls, expr and tanhr in mlstm.h) against the
// plain loops it replaces and against double precision:
//  1. every matmul layout at sizes that leave partial tiles and several KC blocks,
//     with bias and accumulation, agrees with mlstm.h's plain loops within the
//     rounding bound of two FP32 sums (below);
//  2. the result of an element does not depend on how rows are split between
//     calls or threads: bit-identical (the promise behind bit-exact resume);
//  3. expr, sigmoidr and tanhr are within a few ulp of exp, sigmoid, tanh in double.
#include "mlstm.h"
#include "test/test.h"
#include <math.h>

#ifndef MLSTM_FAST
#error "test_gemm tests the FP32 fast path: build without MLSTM_REAL and MLSTM_PLAIN"
#endif

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
            gemm_nt(fast, in, W, bp, N, K, O, acc);
            matmul_nt(ref, in, W, bp, N, K, O, acc);
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
        gemm_nn(dfast, dOut, W, N, O, K, acc);
        matmul_nn(dref, dOut, W, N, O, K, acc);
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
    gemm_tn(wfast, dOut, in, N, O, K);
    matmul_tn(wref, dOut, in, N, O, K);
    for (int o = 0; o < O; o++)
        for (int k = 0; k < K; k++) {
            double m = fabs(W[(size_t)o * K + k]);
            for (int n = 0; n < N; n++) m += fabs((double)dOut[(size_t)n * O + o] * in[(size_t)n * K + k]);
            mag[(size_t)o * K + k] = m;
        }
    double r = worst_ratio(wfast, wref, mag, (size_t)O * K, N);
    CHECK(r <= 1, "tn N=%d O=%d K=%d: worst |fast - plain| is %.3f of the FP32 bound", N, O, K, r);

    // the time loops' products with W packed once, on rows [n0, n1) as a thread runs them
    float *Wp = mlstm_alloc(gemm_packed_floats(K, O) > gemm_packed_floats(O, K) ? gemm_packed_floats(K, O) : gemm_packed_floats(O, K));
    int n0 = N > 4 ? 4 : 0, n1 = N;
    memcpy(fast, init, sizeof(float) * N * O); memcpy(ref, init, sizeof(float) * N * O);
    gemm_pack_nt(Wp, W, O, K);
    gemm_nt_rows_packed(fast, in, Wp, n0, n1, K, O, 1);
    mm_nt_rows(ref, in, W, NULL, n0, n1, K, O, 1);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double m = fabs(init[(size_t)n * O + o]);
            for (int k = 0; k < K; k++) m += fabs((double)in[(size_t)n * K + k] * W[(size_t)o * K + k]);
            mag[(size_t)n * O + o] = m;
        }
    r = worst_ratio(fast, ref, mag, (size_t)N * O, K);
    CHECK(r <= 1 && memcmp(fast, init, sizeof(float) * n0 * O) == 0,
          "nt rows [%d,%d) packed: worst |fast - plain| is %.3f of the FP32 bound, rows outside untouched", n0, n1, r);
    gemm_pack_nn(Wp, W, O, K);
    for (size_t i = 0; i < (size_t)N * K; i++) dfast[i] = dref[i] = in[i];
    gemm_nn_rows_packed(dfast, dOut, Wp, n0, n1, O, K, 0);
    mm_nn_rows(dref, dOut, W, n0, n1, O, K, 0);
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

// An element's value does not depend on the tile it falls in, the rows a call
// covers or the number of threads: the parallel product, the packed product on
// all rows, and the packed product in pieces give the same bits.
static void test_splits(int N, int K, int O, uint64_t *s) {
    float *in = rand_buf((size_t)N * K, s), *W = rand_buf((size_t)O * K, s);
    float *a = mlstm_alloc((size_t)N * O), *b = mlstm_alloc((size_t)N * O), *c = mlstm_alloc((size_t)N * O);
    float *Wp = mlstm_alloc(gemm_packed_floats(K, O));
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    gemm_nt(a, in, W, NULL, N, K, O, 0);
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    gemm_nt(b, in, W, NULL, N, K, O, 0);
    CHECK(memcmp(a, b, sizeof(float) * N * O) == 0, "nt N=%d K=%d O=%d: 1 and 2 threads give the same bits", N, K, O);
    gemm_pack_nt(Wp, W, O, K);
    gemm_nt_rows_packed(c, in, Wp, 0, N, K, O, 0);
    int same_all = memcmp(a, c, sizeof(float) * N * O) == 0;
    memset(c, 0, sizeof(float) * N * O);
    for (int n0 = 0; n0 < N; n0 += 3) gemm_nt_rows_packed(c, in, Wp, n0, n0 + 3 < N ? n0 + 3 : N, K, O, 0);  // tiles cut elsewhere
    CHECK(same_all && memcmp(a, c, sizeof(float) * N * O) == 0,
          "nt N=%d K=%d O=%d: packed on all rows, and in pieces of 3 rows, give the parallel product's bits", N, K, O);
    free(in); free(W); free(a); free(b); free(c); free(Wp);
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
        we = fmax(we, ulps(expr(x), exp((double)x)));
    }
    for (int i = -300000; i <= 300000; i++) {
        float x = (float)(i * 1e-4);  // [-30, 30]
        ws = fmax(ws, ulps(sigmoidr(x), 1 / (1 + exp(-(double)x))));
        wt = fmax(wt, ulps(tanhr(x), tanh((double)x)));
    }
    for (int i = 1; i <= 100000; i++) {  // small arguments, where tanh(x) ~ x
        float x = (float)(i * 1e-8);
        wt = fmax(wt, fmax(ulps(tanhr(x), tanh((double)x)), ulps(tanhr(-x), tanh(-(double)x))));
    }
    // glibc's expf is within 1 ulp; the Horner sums and the 2^n scaling add about one more
    CHECK(we <= 2, "expr within %.2f ulp of exp on [-87, 87] (bound 2)", we);
    // 1/(1 + e^-x): expr's 2 ulp, then half an ulp in the sum and in the quotient
    CHECK(ws <= 3, "sigmoidr within %.2f ulp of sigmoid on [-30, 30] (bound 3)", ws);
    // 1 - 2/(1 + e^{2|x|}): the quotient's 2 ulp grow by at most 1/tanh(0.5) - 1 < 1.2 in the subtraction
    CHECK(wt <= 4, "tanhr within %.2f ulp of tanh on [-30, 30] and near 0 (bound 4)", wt);
    float big = expr(1000), tiny = expr(-1000), nan = expr(NAN);
    CHECK(isfinite(big) && big > 1e38f && tiny >= 0 && tiny < 1e-37f && isnan(nan) && isnan(tanhr(NAN)),
          "expr clamps to [e^-87, e^88] (%g, %g) and passes NaN", tiny, big);
    CHECK(tanhr(100) == 1 && tanhr(-100) == -1 && tanhr(0) == 0 && sigmoidr(-200) < 1e-37f && sigmoidr(200) == 1,
          "tanhr(+-100) = +-1, tanhr(0) = 0, sigmoidr saturates to 0 and 1");
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
    test_pointwise();
    return test_summary("test_gemm");
}
