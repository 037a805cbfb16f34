// gemm.h's BF16 products (GemmPrecision) and fast.h's step in BF16, against references:
//  1. the rounding to BF16 against an independent one (frexp, rint) and known ties, NaN,
//     infinity, subnormals;
//  2. every layout, with partial tiles, odd K (a padded last pair), several k blocks, bias and
//     accumulation, bit for bit a scalar model of vdpbf16ps written here from Intel's
//     definition, for the emulation and (where the CPU has AVX512-BF16) the native kernel,
//     and bit for bit a model of AMX's tdpbf16ps written here from what it was seen to do
//     (gemm.h's header), for its emulation and (where the CPU and kernel allow AMX) the tiles;
//     each within the bound argued at bf16_bound of the plain FP32 loops of mlstm.h;
//  3. the same bits whatever the row split or thread count;
//  4. fast_forward + fast_backward in BF16 against mlstm.h's FP32 step within the bound argued
//     at test_model_bf16, with trained-like saturated gates too, and 1 and 2 threads bit for bit.
#include "fast.h"
#include "test/test.h"
#include <math.h>

static float *rand_buf(size_t n, uint64_t *s) {
    float *x = mlstm_alloc(n);
    for (size_t i = 0; i < n; i++) x[i] = (float)(2 * rng_uniform(s) - 1);
    return x;
}

// ----------------------------------------------------------------------------
// The reference: BF16 rounding and vdpbf16ps, written from their definitions without gemm.h.

// x to the nearest value of 8 significant bits, ties to even (rint in the default rounding
// mode), in double, so that no FP32 rounding takes part; subnormal FP32 to zero (vdpbf16ps
// reads them as zero); overflow past BF16's largest value rounds to infinity.
static float ref_bf16(float x) {
    if (isnan(x)) return x;
    if (fabsf(x) < 0x1p-126f) return copysignf(0.0f, x);
    if (isinf(x)) return x;
    int e;
    double m = frexp((double)x, &e);  // x = m 2^e, 0.5 <= |m| < 1
    return (float)ldexp(rint(ldexp(m, 8)), e - 8);  // 2^128, past FP32's range, becomes infinity
}
static float ref_flush(float x) { return fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x; }
// Intel's definition: c += a[2j+1] b[2j+1], then c += a[2j] b[2j], the exact product added and
// the sum rounded to nearest even in FP32, a subnormal c read as zero and a subnormal sum
// flushed to zero (with its sign: -0 + a tiny negative product gives -0, not +0).
static float ref_dot(float c, float a0, float a1, float b0, float b1) {
    double p1 = (double)a1 * b1, p0 = (double)a0 * b0;  // exact: 16 significant bits
    c = ref_flush((float)((double)ref_flush(c) + p1));  // double then float: rounded correctly (53 >= 2 24 + 2)
    return ref_flush((float)((double)c + p0));
}
// AMX's tdpbf16ps as it was seen to compute (probed on Sapphire Rapids, gemm.h's header): over
// its 32 k (16 pairs), the even k's exact products summed in order from +0 and the odd k's apart,
// each sum rounded to nearest even and flushed if subnormal (with its sign), then c + (even + odd),
// each of the two sums rounded once and flushed, c read as zero if subnormal. a, b: 32 values each.
static float ref_tdp(float c, const float *a, const float *b) {
    float e = 0, o = 0;
    for (int k = 0; k < 32; k += 2) {
        e = ref_flush((float)((double)e + (double)a[k] * b[k]));  // the exact product, one rounding
        o = ref_flush((float)((double)o + (double)a[k + 1] * b[k + 1]));
    }
    return ref_flush((float)((double)ref_flush(c) + ref_flush(e + o)));
}
// out (N,O) = [init +] in (N,K) W (O,K)^T [+ bias], element (n,o) from the FP32 start value
// (init, then + bias in FP32, or the bias, or 0): the chain of vdpbf16ps over the k pairs in
// order, or (amx) of tdpbf16ps over the k in 32s from k = 0, the last 32 padded with zero.
// in and W as strided views, so one reference serves every layout.
static void ref_product(float *out, const float *init, const float *in, ptrdiff_t irs, ptrdiff_t ics,
                        const float *W, ptrdiff_t wrs, ptrdiff_t wcs, const float *bias, int N, int O, int K, int amx) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            float c = init ? init[(size_t)n * O + o] : 0;
            if (bias) c = init ? c + bias[o] : bias[o];
            for (int k = 0; k < K && !amx; k += 2) {
                float a0 = ref_bf16(in[n * irs + k * ics]), b0 = ref_bf16(W[o * wrs + k * wcs]);
                float a1 = k + 1 < K ? ref_bf16(in[n * irs + (k + 1) * ics]) : 0;
                float b1 = k + 1 < K ? ref_bf16(W[o * wrs + (k + 1) * wcs]) : 0;
                c = ref_dot(c, a0, a1, b0, b1);
            }
            for (int k0 = 0; k0 < K && amx; k0 += 32) {
                float a[32], b[32];
                for (int k = k0; k < k0 + 32; k++) {
                    a[k - k0] = k < K ? ref_bf16(in[n * irs + k * ics]) : 0;
                    b[k - k0] = k < K ? ref_bf16(W[o * wrs + k * wcs]) : 0;
                }
                c = ref_tdp(c, a, b);
            }
            out[(size_t)n * O + o] = c;
        }
}

static void test_rounding(void) {
    // ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (goes to 1, even), 1 + 3 2^-8 halfway
    // between 1 + 2^-7 and 1 + 2^-6 (goes up, even); the largest float rounds to infinity
    const struct { float x; uint16_t bits; } known[] = {
        {1.00390625f, 0x3f80}, {1.01171875f, 0x3f82}, {-1.01171875f, 0xbf82},
        {3.4e38f, 0x7f80},     {-3.4e38f, 0xff80},    {1e-40f, 0x0000},       {-1e-40f, 0x8000},
        {INFINITY, 0x7f80},    {0x1p-126f, 0x0080},   {0.0f, 0x0000},         {-0.0f, 0x8000},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) bad += gemm_bf16_round(known[i].x) != known[i].bits;
    bad += gemm_bf16_round(nextafterf(1.00390625f, 2)) != 0x3f81;  // just above a tie: up
    uint16_t qnan = gemm_bf16_round(NAN);
    CHECK(!bad && (qnan & 0x7f80) == 0x7f80 && (qnan & 0x7f),
          "BF16 rounding: ties to even, overflow to infinity, subnormals to signed zero, NaN stays NaN (0x%04x)", qnan);
    // every 16th float bit pattern, against the reference in double
    long mism = 0;
    for (uint64_t u = 0; u <= 0xffffffffu; u += 16 * 1031 + 7) {
        uint32_t b = (uint32_t)u;
        float x, r;
        memcpy(&x, &b, 4);
        if (isnan(x)) continue;
        r = gemm_bf16_value(gemm_bf16_round(x));
        float want = ref_bf16(x);
        mism += memcmp(&r, &want, 4) != 0;
    }
    CHECK(mism == 0, "BF16 rounding of 260,000 float bit patterns across the range: %ld differ from frexp/rint's", mism);
    // the packing's runs (gemm_bf16_run, gemm_bf16_pair_run, gemm_bf16_column_run), in scalar code and where
    // the CPU has it with vcvtneps2bf16 / vcvtne2ps2bf16, against gemm_bf16_round: the same patterns and every
    // special value above, NaNs included, in runs of 1 to 37 (the vector code's masked tails), nothing written
    // past a run's end or, for the strided column runs, between its slots
    enum { RUN = 37 };
    float x[2 * RUN];
    long runs = 0, diff = 0;
    // the emulated precision's rounding is the scalar code on any CPU, the native one's vcvtneps2bf16
    const GemmPrecision roundings[] = {GEMM_BF16_EMULATED, GEMM_BF16_NATIVE};
    for (int r = 0; r <= gemm_bf16_native_supported(); r++)
        for (uint64_t u = 0; u <= 0xffffffffu; u += (uint64_t)2 * RUN * 40009 + 3) {
            for (int j = 0; j < 2 * RUN; j++) {
                uint32_t b = (uint32_t)(u + (uint64_t)j * 40009);
                memcpy(&x[j], &b, 4);
            }
            const int n = 1 + (int)(u % RUN);
            for (size_t j = 0; j < sizeof known / sizeof known[0] && j < (size_t)n; j++)
                x[(u / 7 + j) % n] = known[j].x;
            x[u % n] = NAN;
            gemm_bf16 run[RUN + 1];
            gemm_slot pairs[RUN + 1], single[RUN + 1];
            run[n] = 0xdead, pairs[n] = single[n] = 0xdeadbeef;
            gemm_bf16_run(run, x, n, roundings[r]);
            gemm_bf16_pair_run(pairs, x, x + RUN, n, roundings[r]);
            gemm_bf16_pair_run(single, x, NULL, n, roundings[r]);
            enum { STRIDE = 3 };
            gemm_slot column[STRIDE * RUN];
            for (int j = 0; j < STRIDE * RUN; j++) column[j] = 0xdeadbeef;
            gemm_bf16_column_run(column, STRIDE, x, n, roundings[r]);
            for (int j = 0; j < n; j++) {
                const uint32_t lo = gemm_bf16_round(x[j]), hi = gemm_bf16_round(x[RUN + j]);
                diff += run[j] != lo || pairs[j] != (lo | hi << 16) || single[j] != lo;
            }
            for (int j = 0; j < STRIDE * RUN; j++) {
                const int k = j / STRIDE * 2;  // the slot's first value
                const uint32_t hi = k + 1 < n ? gemm_bf16_round(x[k + 1]) : 0;
                diff += column[j] != (j % STRIDE || k >= n ? 0xdeadbeef : gemm_bf16_round(x[k]) | hi << 16);
            }
            diff += run[n] != 0xdead || pairs[n] != 0xdeadbeef || single[n] != 0xdeadbeef;
            runs++;
        }
    CHECK(runs > 0 && diff == 0,
          "BF16 runs for packing (scalar%s): %ld runs, %ld values or ends differ from gemm_bf16_round",
          gemm_bf16_native_supported() ? " and vcvtneps2bf16, vcvtne2ps2bf16" : "", runs, diff);
}

// ----------------------------------------------------------------------------
// The bound against the plain FP32 loops. Each operand is rounded to BF16, within u = 2^-8
// of itself (8 significant bits, ties to even: half of the 2^-7 spacing at 1; subnormals,
// flushed, lie further off only in absolute terms, below 2^-126, which the 1e-30 absorbs).
// A product of two rounded operands is exact in FP32 and within (2u + u^2)|a b| of a b. The
// FP32 sum of K such products and at most two unrounded terms (the bias, C's value) in any
// order or grouping (AMX's too) is within gamma_{K+2} = (K+2) 2^-24 / (1 - (K+2) 2^-24) of their
// sum of magnitudes (Higham, section 3.1; the zero products of padding add nothing), and the plain loops'
// own sum within gamma_{K+2} of its own. So with mag = sum |terms| of the exact product,
//   |bf16 - plain| <= (2u + u^2 + 2 gamma_{K+2} (1 + 2u + u^2)) mag,
// about (2^-7 + 2 K 2^-24) mag: the rounding of the operands dominates at the model's K.
static double bf16_bound(int K, double mag) {
    double u = ldexp(1.0, -8), g = (K + 2) * ldexp(1.0, -24) / (1 - (K + 2) * ldexp(1.0, -24));
    return (2 * u + u * u + 2 * g * (1 + 2 * u + u * u)) * mag + 1e-30;
}

static const char *instruction(GemmPrecision p) { return gemm_is_amx(p) ? "tdpbf16ps" : "vdpbf16ps"; }

// The checks on one product's result: bit for bit the reference chain, within the bound of
// the plain loops' FP32 result. mag (N*O) the sums of magnitudes.
static void check_product(const char *what, const float *got, const float *chain, const float *plain,
                          const double *mag, size_t n, int K, GemmPrecision prec) {
    double worst = 0;
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)got[i] - plain[i]) / bf16_bound(K, mag[i]);
        worst = r > worst || r != r ? r : worst;
        diff += memcmp(&got[i], &chain[i], 4) != 0;
    }
    CHECK(diff == 0 && worst <= 1, "%s: %zu of %zu elements differ from %s's chain; worst |bf16 - FP32 loops| %.3f of "
          "the bound", what, diff, n, instruction(prec), worst);
}

// sums of |terms| of out = [init +] in W^T [+ bias] (strided views as ref_product)
static void magnitudes(double *mag, const float *init, const float *in, ptrdiff_t irs, ptrdiff_t ics, const float *W,
                       ptrdiff_t wrs, ptrdiff_t wcs, const float *bias, int N, int O, int K) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double m = (init ? fabs(init[(size_t)n * O + o]) : 0) + (bias ? fabs(bias[o]) : 0);
            for (int k = 0; k < K; k++) m += fabs((double)in[n * irs + k * ics] * W[o * wrs + k * wcs]);
            mag[(size_t)n * O + o] = m;
        }
}

static const char *prec_name(GemmPrecision p) {
    return p == GEMM_BF16_NATIVE ? "native" : p == GEMM_BF16_EMULATED ? "emulated" : p == GEMM_BF16_AMX ? "AMX"
                                                                                                         : "AMX emulated";
}

// Every layout of gemm.h in precision prec, N rows, depth K, O columns.
static void test_layouts(int N, int K, int O, GemmPrecision prec, uint64_t *s) {
    const int big = (N > O ? N : O) * (O > K ? O : K);  // covers (N,O), (N,K) and (O,K)
    float *in = rand_buf((size_t)N * K, s), *W = rand_buf((size_t)O * K, s), *bias = rand_buf(O, s);
    float *init = rand_buf(big, s), *got = mlstm_alloc(big), *chain = mlstm_alloc(big), *plain = mlstm_alloc(big);
    float *dOut = rand_buf((size_t)N * O, s), *Wp = mlstm_alloc(fast_packed_floats(O, K));
    double *mag = (double *)mallocCheck(sizeof(double) * big);
    const int amx = gemm_is_amx(prec);
    char what[160];
    for (int acc = 0; acc < 2; acc++)
        for (int wb = 0; wb < 2; wb++) {  // out (N,O) = [out +] in W^T [+ bias]: gemm_nt, and packed on rows [n0, N)
            const float *bp = wb ? bias : NULL, *i0 = acc ? init : NULL;
            ref_product(chain, i0, in, K, 1, W, K, 1, bp, N, O, K, amx);
            memcpy(plain, init, sizeof(float) * N * O);
            matmul_nt(plain, in, W, bp, N, O, K, acc);
            magnitudes(mag, i0, in, K, 1, W, K, 1, bp, N, O, K);
            memcpy(got, init, sizeof(float) * N * O);
            gemm_nt(got, in, W, bp, N, O, K, acc, prec);
            snprintf(what, sizeof what, "%s nt N=%d K=%d O=%d%s%s", prec_name(prec), N, K, O, acc ? " accumulate" : "",
                     bp ? " bias" : "");
            check_product(what, got, chain, plain, mag, (size_t)N * O, K, prec);
            const int n0 = N > 4 ? 4 : 0;
            memcpy(got, init, sizeof(float) * N * O);
            gemm_pack_nt(Wp, W, O, K, prec);
            gemm_nt_rows_packed(got, in, Wp, bp, n0, N, O, K, acc, prec);
            snprintf(what, sizeof what, "%s nt packed rows [%d,%d) K=%d O=%d%s%s", prec_name(prec), n0, N, K, O,
                     acc ? " accumulate" : "", bp ? " bias" : "");
            CHECK(memcmp(got, init, sizeof(float) * n0 * O) == 0, "%s: rows outside untouched", what);
            size_t off = (size_t)n0 * O;
            check_product(what, got + off, chain + off, plain + off, mag + off, (size_t)(N - n0) * O, K, prec);
        }
    for (int acc = 0; acc < 2; acc++) {  // dIn (N,K) = [dIn +] dOut (N,O) W (O,K): depth O; packed too
        const float *i0 = acc ? init : NULL;
        ref_product(chain, i0, dOut, O, 1, W, 1, K, NULL, N, K, O, amx);
        memcpy(plain, init, sizeof(float) * N * K);
        matmul_nn(plain, dOut, W, N, K, O, acc);
        magnitudes(mag, i0, dOut, O, 1, W, 1, K, NULL, N, K, O);
        memcpy(got, init, sizeof(float) * N * K);
        gemm_nn(got, dOut, W, N, K, O, acc, prec);
        snprintf(what, sizeof what, "%s nn N=%d O=%d K=%d%s", prec_name(prec), N, O, K, acc ? " accumulate" : "");
        check_product(what, got, chain, plain, mag, (size_t)N * K, O, prec);
        memcpy(got, init, sizeof(float) * N * K);
        gemm_pack_nn(Wp, W, K, O, prec);
        for (int r0 = 0; r0 < N; r0 += 5)  // rows in pieces of 5, as threads would own them
            gemm_nn_rows_packed(got, dOut, Wp, r0, r0 + 5 < N ? r0 + 5 : N, K, O, acc, prec);
        snprintf(what, sizeof what, "%s nn packed, rows in 5s, N=%d O=%d K=%d%s", prec_name(prec), N, O, K,
                 acc ? " accumulate" : "");
        check_product(what, got, chain, plain, mag, (size_t)N * K, O, prec);
    }
    // dW (O,K) += dOut (N,O)^T in (N,K): depth N, A read down its columns; and as a pair with 3 columns
    ref_product(chain, init, dOut, 1, O, in, 1, K, NULL, O, K, N, amx);
    memcpy(plain, init, sizeof(float) * O * K);
    matmul_tn(plain, dOut, in, O, K, N);
    magnitudes(mag, init, dOut, 1, O, in, 1, K, NULL, O, K, N);
    memcpy(got, init, sizeof(float) * O * K);
    gemm_tn(got, dOut, in, O, K, N, prec);
    snprintf(what, sizeof what, "%s tn N=%d O=%d K=%d", prec_name(prec), N, O, K);
    check_product(what, got, chain, plain, mag, (size_t)O * K, N, prec);
    float *in3 = rand_buf((size_t)N * 3, s), *x = mlstm_alloc((size_t)O * 3), *y = mlstm_alloc((size_t)O * 3);
    memcpy(got, init, sizeof(float) * O * K);
    memcpy(x, init, sizeof(float) * O * 3);
    ref_product(y, init, dOut, 1, O, in3, 1, 3, NULL, O, 3, N, amx);
    gemm_tn_pair(got, in, K, x, in3, 3, dOut, O, N, prec);
    CHECK(memcmp(got, chain, sizeof(float) * O * K) == 0 && memcmp(x, y, sizeof(float) * O * 3) == 0,
          "%s tn pair N=%d O=%d K=%d and 3: each part bit for bit %s's chain", prec_name(prec), N, O, K,
          instruction(prec));
    free(in3); free(x); free(y);
    free(in); free(W); free(bias); free(init); free(got); free(chain); free(plain); free(dOut); free(Wp); free(mag);
}

// The time loops' sums of two products (fast.h's z = b + e W_x^T + m W_h^T, dxe = dz W_x + dmx W_mx) on
// rows in pieces of 5, as threads own them: bit for bit the chain of the first product and then the
// second added (AMX keeps the sum in its tiles through both: gemm_amx_serial), within the bound of the
// plain loops at depth K1 + K2. out (N,O) = bias + in1 (N,K1) W1^T + in2 (N,K2) W2^T, and
// dIn (N,O) = dOut1 (N,K1) W1 + dOut2 (N,K2) W2 with the same operands read the other way.
static void test_sums(int N, int K1, int K2, int O, GemmPrecision prec, uint64_t *s) {
    const int amx = gemm_is_amx(prec);
    float *in1 = rand_buf((size_t)N * K1, s), *W1 = rand_buf((size_t)O * K1, s), *bias = rand_buf(O, s);
    float *in2 = rand_buf((size_t)N * K2, s), *W2 = rand_buf((size_t)O * K2, s);
    float *Wp1 = mlstm_alloc(fast_packed_floats(O, K1)), *Wp2 = mlstm_alloc(fast_packed_floats(O, K2));
    float *first = mlstm_alloc((size_t)N * O), *chain = mlstm_alloc((size_t)N * O), *plain = mlstm_alloc((size_t)N * O);
    float *got = mlstm_alloc((size_t)N * O);
    double *mag = (double *)mallocCheck(sizeof(double) * N * O), *mag2 = (double *)mallocCheck(sizeof(double) * N * O);
    char what[160];
    for (int layout = 0; layout < 2; layout++) {  // 0: nt with the bias; 1: nn (W1 (K1,O), W2 (K2,O) as stored)
        const ptrdiff_t r1 = layout ? 1 : K1, c1 = layout ? O : 1, r2 = layout ? 1 : K2, c2 = layout ? O : 1;
        const float *b = layout ? NULL : bias;
        ref_product(first, NULL, in1, K1, 1, W1, r1, c1, b, N, O, K1, amx);
        ref_product(chain, first, in2, K2, 1, W2, r2, c2, NULL, N, O, K2, amx);
        magnitudes(mag, NULL, in1, K1, 1, W1, r1, c1, b, N, O, K1);
        magnitudes(mag2, NULL, in2, K2, 1, W2, r2, c2, NULL, N, O, K2);
        for (size_t i = 0; i < (size_t)N * O; i++) mag[i] += mag2[i];
        if (layout == 0) {
            matmul_nt(plain, in1, W1, bias, N, O, K1, MATMUL_SET);
            matmul_nt(plain, in2, W2, NULL, N, O, K2, MATMUL_ADD);
            gemm_pack_nt(Wp1, W1, O, K1, prec);
            gemm_pack_nt(Wp2, W2, O, K2, prec);
        } else {
            matmul_nn(plain, in1, W1, N, O, K1, MATMUL_SET);
            matmul_nn(plain, in2, W2, N, O, K2, MATMUL_ADD);
            gemm_pack_nn(Wp1, W1, O, K1, prec);
            gemm_pack_nn(Wp2, W2, O, K2, prec);
        }
        memset(got, 0xff, sizeof(float) * N * O);  // NaN: a set product must not read it
        for (int r0 = 0; r0 < N; r0 += 5) {
            const int r_end = r0 + 5 < N ? r0 + 5 : N;
            if (layout == 0) gemm_nt_rows_packed_sum(got, in1, Wp1, K1, in2, Wp2, K2, bias, r0, r_end, O, prec);
            else gemm_nn_rows_packed_sum(got, in1, Wp1, K1, in2, Wp2, K2, r0, r_end, O, prec);
        }
        snprintf(what, sizeof what, "%s %s sum of two products, rows in 5s, N=%d K=%d+%d O=%d", prec_name(prec),
                 layout ? "nn" : "nt with bias", N, K1, K2, O);
        check_product(what, got, chain, plain, mag, (size_t)N * O, K1 + K2, prec);
    }
    free(in1); free(W1); free(bias); free(in2); free(W2); free(Wp1); free(Wp2);
    free(first); free(chain); free(plain); free(got); free(mag); free(mag2);
}

// A product with no k to sum (K = 0) that sets C gives the bias (0 without one), never C's old
// contents: the time loops' serial products alone and as the first term of a sum, and the parallel one.
static void test_no_depth(GemmPrecision prec, uint64_t *s) {
    enum { N = 7, K = 40, O = GEMM_NR + 3 };
    float *in = rand_buf((size_t)N * K, s), *W = rand_buf((size_t)O * K, s), *bias = rand_buf(O, s);
    float *Wp = mlstm_alloc(fast_packed_floats(O, K)), *got = mlstm_alloc((size_t)N * O);
    float *want = mlstm_alloc((size_t)N * O);
    gemm_pack_nt(Wp, W, O, K, prec);
    long bad = 0;
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        const float *b = with_bias ? bias : NULL;
        memset(got, 0xff, sizeof(float) * N * O);  // NaN
        gemm_nt_rows_packed(got, in, Wp, b, 0, N, O, 0, MATMUL_SET, prec);
        for (int i = 0; i < N * O; i++) bad += got[i] != (b ? b[i % O] : 0);
        memset(got, 0xff, sizeof(float) * N * O);
        gemm_nt(got, in, W, b, N, O, 0, MATMUL_SET, prec);
        for (int i = 0; i < N * O; i++) bad += got[i] != (b ? b[i % O] : 0);
        gemm_nt_rows_packed(want, in, Wp, b, 0, N, O, K, MATMUL_SET, prec);
        memset(got, 0xff, sizeof(float) * N * O);
        gemm_nt_rows_packed_sum(got, in, Wp, 0, in, Wp, K, b, 0, N, O, prec);
        bad += memcmp(got, want, sizeof(float) * N * O) != 0;
    }
    CHECK(bad == 0, "%s: products with K = 0 set C to the bias or 0 (serial, parallel, a sum's first term): %ld wrong",
          prec_name(prec), bad);
    free(in); free(W); free(bias); free(Wp); free(got); free(want);
}

// The time loops' serial products called by the threads of an outer region, each from an inner region
// that OpenMP runs inactive (one level active by default): every inner thread number is 0, and each caller
// must still pack A into buffers of its own (gemm_thread_slot). Each thread's bits, call after call, against
// its product computed alone.
static void test_nested(GemmPrecision prec, uint64_t *s) {
#ifdef _OPENMP
    enum { N = 64, K = 300, O = 2 * GEMM_NR + 5, CALLS = 100 };
    float *in[2] = {rand_buf((size_t)N * K, s), rand_buf((size_t)N * K, s)}, *W = rand_buf((size_t)O * K, s);
    float *Wp = mlstm_alloc(fast_packed_floats(O, K));
    float *want[2] = {mlstm_alloc((size_t)N * O), mlstm_alloc((size_t)N * O)};
    gemm_pack_nt(Wp, W, O, K, prec);
    for (int t = 0; t < 2; t++) gemm_nt_rows_packed(want[t], in[t], Wp, NULL, 0, N, O, K, MATMUL_SET, prec);
    long bad = 0, threads = 0;
    #pragma omp parallel num_threads(2) reduction(+ : bad, threads)
    {
        const int t = omp_get_thread_num();
        float *got = mlstm_alloc((size_t)N * O);
        threads++;
        for (int r = 0; r < CALLS; r++) {
            #pragma omp parallel num_threads(1)  // one thread: inactive whatever the nesting setting
            gemm_nt_rows_packed(got, in[t], Wp, NULL, 0, N, O, K, MATMUL_SET, prec);
            bad += memcmp(got, want[t], sizeof(float) * N * O) != 0;
        }
        free(got);
    }
    CHECK(threads == 2 && bad == 0, "%s: serial products from %ld threads, each inside an inactive nested region, "
          "%d calls each: %ld give other bits than alone", prec_name(prec), threads, CALLS, bad);
    free(in[0]); free(in[1]); free(W); free(Wp); free(want[0]); free(want[1]);
#else
    (void)prec, (void)s;
#endif
}

// The same bits on 1, 2 and 3 threads (the rows of C split between them) and natively and
// emulated (vdpbf16ps's: native, where the CPU has it, and emulated; AMX's likewise): each element
// is one chain whatever thread or kernel computes it.
static void test_threads_and_kernels(int N, int K, int O, GemmPrecision emulated, GemmPrecision native,
                                     int native_runs, uint64_t *s) {
    float *in = rand_buf((size_t)N * K, s), *W = rand_buf((size_t)O * K, s), *dOut = rand_buf((size_t)N * O, s);
    float *a = mlstm_alloc((size_t)O * K), *b = mlstm_alloc((size_t)O * K), *c = mlstm_alloc((size_t)N * O);
    float *d = mlstm_alloc((size_t)N * O);
    int same = 1;
    memset(a, 0, sizeof(float) * O * K);
    gemm_tn(a, dOut, in, O, K, N, emulated);
    gemm_nt(c, in, W, NULL, N, O, K, MATMUL_SET, emulated);
    for (int threads = 1; threads <= 3; threads++) {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        for (int kernel = 0; kernel < 1 + native_runs; kernel++) {
            GemmPrecision p = kernel ? native : emulated;
            memset(b, 0, sizeof(float) * O * K);
            gemm_tn(b, dOut, in, O, K, N, p);
            gemm_nt(d, in, W, NULL, N, O, K, MATMUL_SET, p);
            same &= !memcmp(a, b, sizeof(float) * O * K) && !memcmp(c, d, sizeof(float) * N * O);
        }
    }
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    CHECK(same, "%s tn and nt N=%d K=%d O=%d: the same bits on 1, 2, 3 threads%s%s", prec_name(emulated), N, K, O,
          native_runs ? ", and natively: " : "", native_runs ? prec_name(native) : "");
    free(in); free(W); free(dOut); free(a); free(b); free(c); free(d);
}

// Operands that test the flushes and the order at their edges: subnormal and tiny values (whose
// products fall below 2^-126), huge ones (whose sums overflow), exact cancellations, NaN.
static void test_special_values(GemmPrecision prec, uint64_t *s) {
    const int N = 9, K = 37, O = 35;
    static const float pool[] = {1e-40f, -3e-39f, 0x1p-70f, -0x1p-64f, 0x1p-126f, 3e38f, -3e38f, 1.0f,
                                 -1.0f,  0.0f,    -0.0f,     1.00390625f, 0x1p-60f, 65504.0f, 0x1.fep127f};
    const int np = sizeof pool / sizeof pool[0];
    float *in = mlstm_alloc((size_t)N * K), *W = mlstm_alloc((size_t)O * K);
    float *got = mlstm_alloc((size_t)N * O), *chain = mlstm_alloc((size_t)N * O), *init = mlstm_alloc((size_t)N * O);
    for (int i = 0; i < N * K; i++) in[i] = pool[rng_next(s) % np];
    for (int i = 0; i < O * K; i++) W[i] = pool[rng_next(s) % np];
    for (int i = 0; i < N * O; i++) init[i] = pool[rng_next(s) % np];
    memcpy(got, init, sizeof(float) * N * O);
    gemm_nt(got, in, W, NULL, N, O, K, MATMUL_ADD, prec);
    ref_product(chain, init, in, K, 1, W, K, 1, NULL, N, O, K, gemm_is_amx(prec));
    size_t diff = 0;
    for (int i = 0; i < N * O; i++) diff += !(memcmp(&got[i], &chain[i], 4) == 0 || (isnan(got[i]) && isnan(chain[i])));
    CHECK(diff == 0, "%s: subnormal, tiny, huge and cancelling operands: %zu of %d elements differ from %s's chain "
          "(NaN counts as equal to NaN)", prec_name(prec), diff, N * O, instruction(prec));
    in[3] = NAN;
    gemm_nt(got, in, W, NULL, N, O, K, MATMUL_SET, prec);
    int nan_row = 1;
    for (int o = 0; o < O; o++) nan_row &= isnan(got[o]) != 0;
    CHECK(nan_row, "%s: a NaN operand makes its row's products NaN", prec_name(prec));
    free(in); free(W); free(got); free(chain); free(init);
}

// ----------------------------------------------------------------------------
// The whole step in BF16 against mlstm.h's FP32 step.

static double max_rel_err(const float *a, const float *b, size_t n) {  // max |a - b| / max |b|
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= 1e300)) return INFINITY;
        d = e > d ? e : d;
        m = fabs((double)b[i]) > m ? fabs((double)b[i]) : m;
    }
    return m > 0 ? d / m : d;
}
static float *copy_of(const float *x, size_t n) {
    float *y = (float *)mallocCheck(sizeof(float) * n);
    memcpy(y, x, sizeof(float) * n);
    return y;
}
typedef struct {
    double loss;
    float *probs, *grads, *dh0;
} StepResult;
static StepResult run_step(Mlstm *m, FastPacks *pk, const uint8_t *in, const uint8_t *tg, const uint8_t *rs,
                           const float *h0, const float *c0, int B, int T) {
    StepResult r;
    r.loss = pk ? fast_forward(m, pk, in, tg, rs, h0, c0, B, T) : mlstm_forward(m, in, tg, rs, h0, c0, B, T);
    r.probs = copy_of(m->probs, (size_t)B * T * m->cfg.V);
    if (pk) fast_backward(m, pk, 1.0f);
    else mlstm_backward(m, 1.0f);
    r.grads = copy_of(m->grads, m->nparams);
    r.dh0 = copy_of(m->dh0, (size_t)B * m->cfg.H);
    return r;
}
static void step_free(StepResult *r) { free(r->probs); free(r->grads); free(r->dh0); }

// Tolerance, argued as test_gemm's for FP32 with BF16's rounding of the operands in place of
// FP32's of the sums. A product's operands each carry a relative error of at most u = 2^-8,
// of either sign and independent from term to term, so a sum of K terms carries an error of
// about u sqrt(2 sum (a_k b_k)^2), against a result of the order of sqrt(sum (a_k b_k)^2)
// (the terms' signs vary): u sqrt(2) of the result whatever K, and 6 times that bounds the
// largest of a tensor's elements. These errors add along the longest chain of dependent
// products (through T steps forward, the output layer, back through T steps, a weight
// gradient): (2 T + 3) 6 sqrt(2) u, with FP32's own rounding (test_gemm's bound) far below. At
// these weights the slopes of sigmoid and tanh (<= 1) and gates in (0, 1) pass an error on
// without growing it; saturated gates (the large biases) pass on less of it. A bug (a row,
// gate, pair or reset wrong) is off by O(1); operands not rounded at all would pass, which the
// bit-exact checks of the products above exclude.
static void test_model_bf16(MlstmConfig cfg, int B, int T, float gate_bias, uint64_t seed, GemmPrecision emulated,
                            GemmPrecision native, int native_runs) {
    const int H = cfg.H, N = B * T, V = cfg.V;
    const double tol = (2.0 * T + 3) * 6 * sqrt(2.0) * 0x1p-8;
    char tag[96];
    snprintf(tag, sizeof tag, "BF16 (%s) D=%d H=%d B=%d T=%d gate biases %+g", prec_name(native_runs ? native : emulated),
             cfg.D, H, B, T, gate_bias);
    uint8_t *in = (uint8_t *)mallocCheck(N), *tg = (uint8_t *)mallocCheck(N), *rs = (uint8_t *)mallocCheck(N);
    float *h0 = mlstm_alloc((size_t)B * H), *c0 = mlstm_alloc((size_t)B * H);
    uint64_t s = seed;
    for (int i = 0; i < N; i++) {
        in[i] = (uint8_t)(rng_next(&s) >> 56);
        tg[i] = (uint8_t)(rng_next(&s) >> 56);
        rs[i] = rng_uniform(&s) < 0.1;
    }
    for (int i = 0; i < B * H; i++) {
        h0[i] = (float)(0.5 * rng_uniform(&s) - 0.25);
        c0[i] = (float)(rng_uniform(&s) - 0.5);
    }
    Mlstm m;
    FastPacks pk;
    mlstm_build(&m, cfg, B, T);
    fast_packs_build(&pk, &cfg, native_runs ? native : emulated);
    mlstm_init(&m, seed);
    // trained-like saturation: input and forget gates near 1 (+), output gate near 0 (-), as
    // biases of a few units do after training; the cell then carries c over many steps
    for (int j = 0; j < H; j++) {
        m.p.t[P_B][j] += gate_bias;
        m.p.t[P_B][H + j] += gate_bias;
        m.p.t[P_B][2 * H + j] -= gate_bias;
    }
    StepResult ref = run_step(&m, NULL, in, tg, rs, h0, c0, B, T);
    StepResult bf = run_step(&m, &pk, in, tg, rs, h0, c0, B, T);
    double e_loss = fabs(bf.loss - ref.loss) / ref.loss, e_probs = max_rel_err(bf.probs, ref.probs, (size_t)N * V);
    double e_dh0 = max_rel_err(bf.dh0, ref.dh0, (size_t)B * H);
    CHECK(e_loss <= tol && e_probs <= tol && e_dh0 <= tol,
          "model %s: loss, probabilities, dh0 within %.1e %.1e %.1e of mlstm.h's FP32 (<= %.1e)", tag, e_loss,
          e_probs, e_dh0, tol);
    ParamTable gb, gr;
    param_table(&gb, &cfg, bf.grads);
    param_table(&gr, &cfg, ref.grads);
    double worst = 0;
    int worst_i = 0;
    for (int i = 0; i < NPARAM; i++) {
        if (!gr.n[i]) continue;
        double e = max_rel_err(gb.t[i], gr.t[i], gr.n[i]);
        if (e > worst || e != e) worst = e, worst_i = i;
    }
    CHECK(worst <= tol, "model %s: every gradient within %.1e of mlstm.h's FP32, worst %s (<= %.1e)", tag, worst,
          param_names[worst_i], tol);
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    StepResult one = run_step(&m, &pk, in, tg, rs, h0, c0, B, T);
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    StepResult two = run_step(&m, &pk, in, tg, rs, h0, c0, B, T);
    CHECK(one.loss == two.loss && !memcmp(one.probs, two.probs, sizeof(float) * N * V) &&
              !memcmp(one.grads, two.grads, sizeof(float) * m.nparams) &&
              !memcmp(one.grads, bf.grads, sizeof(float) * m.nparams),
          "model %s: 1 and 2 threads give the same bits (loss, probabilities, every gradient)", tag);
    // the emulation gives the native kernel's bits for the whole step
    if (native_runs) {
        pk.precision = emulated;
        StepResult emu = run_step(&m, &pk, in, tg, rs, h0, c0, B, T);
        CHECK(emu.loss == bf.loss && !memcmp(emu.grads, bf.grads, sizeof(float) * m.nparams),
              "model %s: emulated, the native kernel's bits (loss, every gradient)", tag);
        step_free(&emu);
    }
    step_free(&ref); step_free(&bf); step_free(&one); step_free(&two);
    mlstm_free(&m);
    fast_packs_free(&pk);
    free(in); free(tg); free(rs); free(h0); free(c0);
}

int main(void) {
    uint64_t s = 46;
    test_rounding();
    const int native = gemm_bf16_native_supported(), amx = gemm_bf16_amx_supported();
    if (!native) SKIP("this CPU has no AVX512-BF16: the native kernel is not run (the emulation is)");
    if (!amx) SKIP("this CPU (or kernel) allows no AMX-BF16: the tiles are not run (their emulation is)");
    const GemmPrecision kernels[] = {GEMM_BF16_EMULATED, GEMM_BF16_NATIVE, GEMM_BF16_AMX_EMULATED, GEMM_BF16_AMX};
    for (int i = 0; i < 4; i++) {
        GemmPrecision p = kernels[i];
        if ((p == GEMM_BF16_NATIVE && !native) || (p == GEMM_BF16_AMX && !amx)) continue;
        // partial tiles everywhere, odd K (a padded last pair), K at and above KC, several streamed
        // blocks, more row tiles than share the fetch of the next panel; for AMX, more than one
        // group of 32 rows, partial groups of 1 - 31 rows, K off a multiple of 32
        test_layouts(37, 67, 45, p, &s);
        test_layouts(3, 5, 2, p, &s);
        test_layouts(19, GEMM_KC + 13, 2 * GEMM_NR + 1, p, &s);
        test_layouts(9, GEMM_KC_STREAMED + 13, 8 * GEMM_NR + 3, p, &s);
        test_layouts(4 + GEMM_MR * (GEMM_FETCH_TILES + 1) + 3, 2 * GEMM_KC_STREAMED + 1, GEMM_NR + 1, p, &s);
        test_layouts(64, 96, 2 * GEMM_NR, p, &s);  // whole tiles of AMX: C straight from and to memory
        // the weight gradients' depth (N) past AMX's chain of k blocks (gemm_columns_amx runs one chain, then
        // goes on from C)
        test_layouts(GEMM_AMX_CHAIN * GEMM_KC + 37, 45, 37, p, &s);
        test_layouts(19, GEMM_AMX_CHAIN * GEMM_KC + 5, 21, p, &s);  // and a product's depth K (set, then added to)
        test_special_values(p, &s);
        test_no_depth(p, &s);
        test_nested(p, &s);
        test_sums(37, 67, 45, 2 * GEMM_NR + 3, p, &s);  // partial groups of rows, tiles and k pairs
        test_sums(64, 64, 256, 4 * GEMM_NR, p, &s);     // fast.h's shapes: D = 64 and H, whole tiles
        // more k blocks than AMX's chain holds (gemm_amx_serial runs it, then goes on from C)
        test_sums(19, (GEMM_AMX_CHAIN - 1) * GEMM_KC_STREAMED + 40, 2 * GEMM_KC_STREAMED + 7, GEMM_NR + 5, p, &s);
    }
    test_threads_and_kernels(70, GEMM_KC + 31, 8 * GEMM_NR + 7, GEMM_BF16_EMULATED, GEMM_BF16_NATIVE, native, &s);
    test_threads_and_kernels(70, GEMM_KC + 31, 8 * GEMM_NR + 7, GEMM_BF16_AMX_EMULATED, GEMM_BF16_AMX, amx, &s);
    for (int family = 0; family < 2; family++) {
        const GemmPrecision emulated = family ? GEMM_BF16_AMX_EMULATED : GEMM_BF16_EMULATED;
        const GemmPrecision fast = family ? GEMM_BF16_AMX : GEMM_BF16_NATIVE;
        const int runs = family ? amx : native;
        test_model_bf16((MlstmConfig){256, 24, 300, 1}, 6, 5, 0, 21, emulated, fast, runs);
        test_model_bf16((MlstmConfig){256, 16, 40, 0}, 3, 7, 0, 22, emulated, fast, runs);
        test_model_bf16((MlstmConfig){256, 24, 300, 1}, 6, 5, 6, 23, emulated, fast, runs);  // saturated gates
    }
    return test_summary(GEMM_MR == 8 ? "test_gemm_bf16_8_row_tile" : "test_gemm_bf16_4_row_tile");
}
