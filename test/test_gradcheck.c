// The backward pass against central finite differences, in double precision
// (doc/design.md, "Testing"): T = 9 steps from a non-zero carried state, with and without
// weight norm, and once with state resets inside the window. Every parameter
// tensor's gradient, and the gradient into the carried h and c, must agree to a
// relative error below 1e-6. Why 1e-6 holds on any CPU: all in double; central
// differences with eps = 1e-5 err by about eps^2 |f'''| (1e-10) plus the loss's
// rounding over 2 eps (2^-53 |f| / 1e-5, about 1e-11), both far below 1e-6 of the
// gradient, while a wrong term in the backward pass is off by a large fraction of it.
#define MLSTM_REAL double
#include "mlstm.h"
#include "test/test.h"

enum { B = 2, T = 9 };

static double loss_at(Mlstm *m, const uint8_t *in, const uint8_t *tg, const uint8_t *rs, const double *h0, const double *c0) {
    return mlstm_forward(m, in, tg, rs, h0, c0, B, T);
}

// relative error ||a - b|| / max(||a||, ||b||) of two vectors
static double rel_err(const double *a, const double *b, size_t n) {
    double d = 0, na = 0, nb = 0;
    for (size_t i = 0; i < n; i++) { d += (a[i] - b[i]) * (a[i] - b[i]); na += a[i] * a[i]; nb += b[i] * b[i]; }
    double s = sqrt(na > nb ? na : nb);
    return s > 0 ? sqrt(d) / s : 0;
}

// Numerical gradient of the loss with respect to x[0..n) by central differences.
static void numeric_grad(Mlstm *m, double *x, size_t n, double *out, const uint8_t *in, const uint8_t *tg,
                         const uint8_t *rs, const double *h0, const double *c0) {
    const double eps = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + eps; double lp = loss_at(m, in, tg, rs, h0, c0);
        x[i] = keep - eps; double lm = loss_at(m, in, tg, rs, h0, c0);
        x[i] = keep;
        out[i] = (lp - lm) / (2 * eps);
    }
}

static void gradcheck(int wnorm, int with_reset) {
    MlstmConfig cfg = {256, 5, 6, wnorm};
    Mlstm m;
    mlstm_build(&m, cfg, B, T);
    mlstm_init(&m, 42);
    uint64_t s = 7;
    // perturb the gains and biases away from their initial values so every path is exercised
    for (size_t i = 0; i < m.nparams; i++) m.params[i] += 0.1 * (2 * rng_uniform(&s) - 1);
    uint8_t in[B * T], tg[B * T], rs[B * T] = {0};
    for (int i = 0; i < B * T; i++) { in[i] = (uint8_t)(rng_next(&s) % 12); tg[i] = (uint8_t)(rng_next(&s) % 12); }
    if (with_reset) { rs[0 * T + 0] = 1; rs[0 * T + 5] = 1; rs[1 * T + 6] = 1; }
    const uint8_t *reset = with_reset ? rs : NULL;
    double h0[B * 6], c0[B * 6];
    for (int i = 0; i < B * 6; i++) { h0[i] = 0.8 * (2 * rng_uniform(&s) - 1); c0[i] = 1.5 * (2 * rng_uniform(&s) - 1); }

    loss_at(&m, in, tg, reset, h0, c0);
    mlstm_backward(&m, 1.0);
    double *num = (double *)mallocCheck(m.nparams * sizeof(double));
    numeric_grad(&m, m.params, m.nparams, num, in, tg, reset, h0, c0);
    ParamTable nt;
    param_table(&nt, &cfg, num);
    for (int p = 0; p < NPARAM; p++) {
        if (m.g.n[p] == 0) continue;
        double e = rel_err(m.g.t[p], nt.t[p], m.g.n[p]);
        CHECK(e < 1e-6, "gradcheck wnorm=%d reset=%d %-5s (%zu values): rel err %.2e < 1e-6", wnorm, with_reset,
              param_names[p], m.g.n[p], e);
    }
    // gradient into the carried state: backward again, the parameters are unchanged
    double dh0[B * 6], dc0[B * 6], nh[B * 6], nc[B * 6];
    loss_at(&m, in, tg, reset, h0, c0);
    mlstm_backward(&m, 1.0);
    memcpy(dh0, m.dh0, sizeof dh0); memcpy(dc0, m.dc0, sizeof dc0);
    numeric_grad(&m, h0, B * 6, nh, in, tg, reset, h0, c0);
    numeric_grad(&m, c0, B * 6, nc, in, tg, reset, h0, c0);
    double eh = rel_err(dh0, nh, B * 6), ec = rel_err(dc0, nc, B * 6);
    CHECK(eh < 1e-6, "gradcheck wnorm=%d reset=%d h0: rel err %.2e < 1e-6", wnorm, with_reset, eh);
    CHECK(ec < 1e-6, "gradcheck wnorm=%d reset=%d c0: rel err %.2e < 1e-6", wnorm, with_reset, ec);
    if (with_reset) {  // row 0 was reset before its first step: its carried state cannot matter
        double mx = 0, other = 0;
        for (int i = 0; i < 6; i++) mx = fmax(mx, fabs(dh0[i]) + fabs(dc0[i]));
        for (int i = 6; i < 12; i++) other = fmax(other, fabs(dh0[i]) + fabs(dc0[i]));
        CHECK(mx == 0 && other > 0, "a reset at step 0 stops the gradient into that row's carried state (max %.1e; other row %.1e)", mx, other);
    }
    // the seed scales every gradient linearly (loss scaling, doc/design.md, "The training step"). The
    // backward pass is linear in the seed, and multiplying by a power of two is exact
    // in binary floating point (rounding commutes with it, barring overflow and
    // subnormals), so backward(S=1024) / 1024 is backward(S=1) bit for bit, on any CPU.
    loss_at(&m, in, tg, reset, h0, c0);
    mlstm_backward(&m, 1.0);
    double *g1 = (double *)mallocCheck(m.nparams * sizeof(double));
    memcpy(g1, m.grads, m.nparams * sizeof(double));
    loss_at(&m, in, tg, reset, h0, c0);
    mlstm_backward(&m, 1024.0);
    size_t differ = 0;
    for (size_t i = 0; i < m.nparams; i++) differ += m.grads[i] / 1024.0 != g1[i];
    CHECK(differ == 0, "gradcheck wnorm=%d reset=%d: backward(S=1024)/1024 equals backward(S=1) exactly (%zu of %zu differ)",
          wnorm, with_reset, differ, m.nparams);
    free(g1);
    free(num);
    mlstm_free(&m);
}

int main(void) {
    gradcheck(1, 0);
    gradcheck(0, 0);
    gradcheck(1, 1);
    return test_summary("test_gradcheck");
}
