// The C reference against an independent PyTorch autograd implementation
// (test/torch_crosscheck.py, float64) through the committed fixture
// test/fixtures/crosscheck.bin: loss, every gradient, the gradient into the
// carried state, the final state, and ten Adam steps with the state carried.
// The C side runs in FP32; each tensor's error is printed as a percentage of
// its tolerance (1e-5 relative for one step, 1e-4 for the ten-step losses).
// Why these hold on any CPU: FP32 rounds at u = 2^-24 = 6e-8; the fixture's T = 8
// steps forward and 8 back each round dot products of up to H = 16 terms (errors
// growing like sqrt(H) u, Higham sec. 3.1) and carry them on through the state, so a
// gradient's relative error is about 2 T sqrt(H) u = 4e-6 whatever the summation
// order (measured: 1e-7 to 4e-7). Ten Adam steps divide by sqrt(v) and compound it:
// 1e-4 for those losses. A wrong term is off by far more than either.
// Both paths run it: mlstm.h's reference and fast.h's (the CPU trainer's: gemm.h's
// products, fast_exp and fast_tanh within 4 ulp), whose other order of each sum and
// other exp stay within the same sqrt(H) u growth, so the same tolerances hold.
#include "fast.h"  // defines: fast_forward, fast_backward and via it mlstm.h
#include "test/test.h"

static const char *fixture_path = "test/fixtures/crosscheck.bin";

static void read_or_die(FILE *f, void *p, size_t n) {
    if (fread(p, 1, n, f) != n) { fprintf(stderr, "error: %s is truncated\n", fixture_path); exit(1); }
}
static double *read_f64(FILE *f, size_t n) {
    double *x = (double *)mallocCheck(n * sizeof(double));
    read_or_die(f, x, n * sizeof(double));
    return x;
}

// ||a - b|| / ||b|| with a in FP32 (the C side) and b the float64 reference
static double rel_err(const float *a, const double *b, size_t n) {
    double d = 0, nb = 0;
    for (size_t i = 0; i < n; i++) { d += (a[i] - b[i]) * (a[i] - b[i]); nb += b[i] * b[i]; }
    return nb > 0 ? sqrt(d / nb) : sqrt(d);
}
static const char *path_name = "";  // which path the checks below are on
static void check_tensor(const char *what, const float *a, const double *b, size_t n, double tol) {
    double e = rel_err(a, b, n);
    CHECK(e <= tol, "crosscheck %s %-14s rel err %.2e = %5.1f%% of tolerance %.0e", path_name, what, e, 100 * e / tol,
          tol);
}

int main(void) {
    FILE *f = fopen(fixture_path, "rb");
    if (!f) { fprintf(stderr, "error: cannot open %s (run from the repository root)\n", fixture_path); return 1; }
    char magic[8];
    int32_t hdr[8];
    double hyper[4];
    read_or_die(f, magic, 8); read_or_die(f, hdr, sizeof hdr); read_or_die(f, hyper, sizeof hyper);
    CHECK(memcmp(magic, "MLSTMFX1", 8) == 0, "fixture magic");
    MlstmConfig cfg = {hdr[0], hdr[1], hdr[2], hdr[3]};
    int B = hdr[4], T = hdr[5], nsteps = hdr[6], H = cfg.H;
    Mlstm m;
    mlstm_build(&m, cfg, B, T);
    CHECK(m.nparams == 8544, "fixture model has %zu parameters (D=%d H=%d weight norm=%d)", m.nparams, cfg.D, H, cfg.wnorm);
    read_or_die(f, m.params, m.nparams * 4);
    float *h = (float *)mallocCheck(B * H * 4), *c = (float *)mallocCheck(B * H * 4);
    read_or_die(f, h, B * H * 4); read_or_die(f, c, B * H * 4);
    uint8_t *data = (uint8_t *)mallocCheck((size_t)nsteps * B * (T + 1));
    read_or_die(f, data, (size_t)nsteps * B * (T + 1));
    double loss_ref; read_or_die(f, &loss_ref, 8);
    double *grads = read_f64(f, m.nparams), *dh0 = read_f64(f, B * H), *dc0 = read_f64(f, B * H);
    double *hT = read_f64(f, B * H), *cT = read_f64(f, B * H), *losses = read_f64(f, nsteps);
    fclose(f);

    uint8_t *in = (uint8_t *)mallocCheck(B * T), *tg = (uint8_t *)mallocCheck(B * T);
    float *params0 = (float *)mallocCheck(m.nparams * 4);
    float *h0 = (float *)mallocCheck(B * H * 4), *c0 = (float *)mallocCheck(B * H * 4);
    memcpy(params0, m.params, m.nparams * 4), memcpy(h0, h, B * H * 4), memcpy(c0, c, B * H * 4);
    FastPacks pk;
    fast_packs_build(&pk, &cfg, GEMM_FP32);
    for (int fast = 0; fast < 2; fast++) {  // the same fixture, from the same start, on each path
        path_name = fast ? "fast.h " : "mlstm.h";
        memcpy(m.params, params0, m.nparams * 4), memcpy(h, h0, B * H * 4), memcpy(c, c0, B * H * 4);
        memset(m.adam_m, 0, m.nparams * 4), memset(m.adam_v, 0, m.nparams * 4);
        for (int k = 0; k < nsteps; k++) {
            const uint8_t *batch = data + (size_t)k * B * (T + 1);  // (B, T+1)
            for (int b = 0; b < B; b++) {
                memcpy(in + b * T, batch + b * (T + 1), T);
                memcpy(tg + b * T, batch + b * (T + 1) + 1, T);
            }
            double loss = fast ? fast_forward(&m, &pk, in, tg, NULL, h, c, B, T)
                               : mlstm_forward(&m, in, tg, NULL, h, c, B, T);
            if (fast) fast_backward(&m, &pk, 1.0f);
            else mlstm_backward(&m, 1.0f);
            if (k == 0) {
                double e = fabs(loss - loss_ref) / fabs(loss_ref);
                CHECK(e <= 1e-5, "crosscheck %s %-14s rel err %.2e = %5.1f%% of tolerance 1e-05", path_name, "loss", e,
                      100 * e / 1e-5);
                for (int p = 0; p < NPARAM; p++) {  // the reference is float64 at the same offsets
                    if (m.g.n[p] == 0) continue;
                    char name[32];
                    snprintf(name, sizeof name, "d%s", param_names[p]);
                    check_tensor(name, m.g.t[p], grads + (m.g.t[p] - m.grads), m.g.n[p], 1e-5);
                }
                check_tensor("dh0", m.dh0, dh0, B * H, 1e-5);
                check_tensor("dc0", m.dc0, dc0, B * H, 1e-5);
                check_tensor("h_final", mlstm_h_out(&m), hT, B * H, 1e-5);
                check_tensor("c_final", mlstm_c_out(&m), cT, B * H, 1e-5);
            }
            double e = fabs(loss - losses[k]) / fabs(losses[k]);
            char what[32];
            snprintf(what, sizeof what, "adam loss %d", k);
            CHECK(e <= 1e-4, "crosscheck %s %-14s %.6f vs %.6f rel err %.2e = %5.1f%% of tolerance 1e-04", path_name,
                  what, loss, losses[k], e, 100 * e / 1e-4);
            // carry the state, then one Adam step with the fixture's settings
            memcpy(h, mlstm_h_out(&m), B * H * 4);
            memcpy(c, mlstm_c_out(&m), B * H * 4);
            AdamConfig a = {hyper[0], hyper[1], hyper[2], hyper[3]};
            adam_update(m.params, m.grads, 1, m.adam_m, m.adam_v, m.nparams, a, k + 1);
        }
    }
    fast_packs_free(&pk);
    free(params0); free(h0); free(c0);
    mlstm_free(&m);
    free(h); free(c); free(data); free(grads); free(dh0); free(dc0); free(hT); free(cT); free(losses); free(in); free(tg);
    return test_summary("test_crosscheck");
}
