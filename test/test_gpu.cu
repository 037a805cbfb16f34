// test/test_gpu.cu: the GPU trainer against the CPU reference (mlstm.h). On a GPU,
// dev/gpu_check.sh runs it; `make test` runs it on the CPU layer of test/cuda
// (build/cudacpu/test_gpu*: every kernel executed thread by thread on the CPU,
// doc/gpu.md). Built by nvcc without a GPU present, it says so and exits 1.
//
//   build/test_gpu                    every check; ends "test_gpu: N passed, N failed"
//   build/test_gpu --quick            the same without the H=4096 matmul shapes
//   build/test_gpu --only G1,G2,...   those groups of checks (matmul, model, precision, cap, resume, ...)
//   build/test_gpu --bench-step B N   N timed training steps at H=4096 D=64 T=256
//   build/test_gpu --bench-matmul B   hand-written matmul vs cuBLASLt on the model's shapes (the per-step
//                                     products also at 2 and 4 cp.async stages)
//   build/test_gpu --bench-kernels B  each kernel of one forward and one backward time step, timed by events
//   build/test_gpu --bench-copy       the DRAM and the L2 bandwidth, by device copies (buffers of 1 GiB; L2/8, L2/4)
//   add --matmul cublaslt to train with cuBLASLt's matmuls in --bench-step
//   MLSTM_NO_GRAPH=1 in the environment: the time loops without CUDA graphs (a --bench-step of
//   the direct path; the checks compare the two paths themselves)
//
// What is compared, and how. The error of a tensor is max|gpu - cpu| / max|cpu|
// (so a single wrong row fails; noise is judged against the tensor's scale), and
// each line prints it as a percentage of its tolerance.
//
// FP32 build: 1e-4 everywhere: the two differ only in summation order.
//
// FP16 build: u = 2^-11 = 4.9e-4 is FP16's unit roundoff; every FP16 tensor carries
// a relative error of about u, and FP32 accumulation adds nothing comparable.
//   logits, state   1e-2  (20u): h and W_out are rounded, and the rounding of h, m and
//                   the gates feeds back through the T recurrent steps (a few u each)
//   loss            2e-3  (4u): a mean over all predictions, errors average out
//   gradients       5e-2  (100u): the backward rounds dlogits, dh, dz, dmx, dmh and the
//                   gates (each about u), sums products of two rounded tensors over all
//                   rows and steps, and the gain gradients g_* are dot products dW.V
//                   that cancel, which magnifies relative error
//   ten losses      5e-3  (10u): weights moved by Adam from FP16-noisy gradients
//   gradient norm   1e-2  (20u): dominated by the largest gradients, whose errors are
//                   a few u and average out in the sum of squares
// Matrix gradients are also compared row by row with the gradient tolerance: each row
// is the same kind of sum as the whole tensor, judged against its own scale.
// A bug (a wrong index, a missing term, a wrong row) gives errors of order 1.
#define main train_gpu_main  // the trainer whole, its main renamed: this file has its own
#include "train.cu"
#undef main
#include "test/test.h"
#include <algorithm>
#include <vector>

#if GPU_FP16
static const double TOL_LOGITS = 1e-2, TOL_LOSS = 2e-3, TOL_GRAD = 5e-2, TOL_STATE = 1e-2, TOL_STEPS = 5e-3,
                    TOL_NORM = 1e-2;
#else
static const double TOL_LOGITS = 1e-4, TOL_LOSS = 1e-4, TOL_GRAD = 1e-4, TOL_STATE = 1e-4, TOL_STEPS = 1e-4,
                    TOL_NORM = 1e-4;
#endif
// Matmul, element by element against S = sum_k |a_k b_k| (the scale of every rounding in the sum).
// The products are exact (FP16 inputs: 22 bits; FP32 inputs: an FMA rounds once per step), so an
// FP32 accumulator of depth K, rounding to nearest or truncating as tensor cores do (Fasi et al.
// 2021, "Numerical behavior of NVIDIA tensor cores"), in any order, is within K 2^-23 S (each of
// at most K additions is off by under one unit in the last place of a partial sum, itself at most
// S). For terms of random sign, as these hashed inputs are, the partial sums walk like sqrt(k) and
// the error grows like sqrt(K) 2^-24 S, truncation included (its bias follows each partial sum's
// sign, which wanders); 6 sqrt(K) 2^-23 bounds it with room over every element of the paper's shapes
// (a truncating accumulator of each product, simulated: 0.6 sqrt(K) 2^-23 at K = 3 to 131,072).
//   vs the exact double sum (one accumulator): |err| / S <= TOL_MM = 1e-4, which is K 2^-23 up to
//     K = 838 and 6 sqrt(K) 2^-23 up to K = 19,500; above that it still holds 2.5 times the
//     simulated truncating worst at K = 131,072 (4e-5; round to nearest: a third of that);
//   vs cuBLASLt (two accumulators, each truncating in its own order): |diff| / S <= tol_mm_pair(K),
//     twice the one accumulator's min(K, 6 sqrt(K)) 2^-23: 7e-7 at K = 3, 1.8e-4 at K = 16,384, 5.2e-4
//     at K = 131,072. A fixed fraction of max|C| cannot hold there: two truncating sums of depth
//     131,072 differ by 3e-3 of max|C| (the bias grows like K u |C|), which the deep shape shows on
//     the CPU layer, whose cuBLASLt truncates after every product.
// A dropped or doubled K-slab of 32 products moves an element by about 2 sqrt(32)/3, which is
// above both tolerances up to K = 16,384 (the per-step and most weight-gradient depths).
static const double TOL_MM = 1e-4;
static double tol_mm_pair(int K) { return 2 * fmin((double)K, 6 * sqrt((double)K)) * ldexp(1.0, -23); }

static const char *precision_name = GPU_FP16 ? "FP16" : "FP32";

// ----------------------------------------------------------------------------
// The trainer as the tests drive it: models made from Options (as train.h makes them), launch
// contexts of their own for the products they run directly, and the seam's knobs and counts.

static int matmul_kind = MATMUL_WMMA;  // --matmul (this program's flag, for --bench-step), and the switch runs
static Model *model_for(MlstmConfig cfg, int B, int T, uint64_t seed) {
    Options o;
    options_defaults(&o);
    o.model = cfg;
    o.T = T;
    o.seed = (long)seed;
    o.matmul = matmul_kind;
    return model_create(&o, B);
}
// Plans the products of md (both of its streams) for `sms` SMs instead of the device's: the
// 128x128 tile, split-K and a bounded grid then take the tests' small shapes as the paper's.
static void plan_for_sms(Model *md, int sms) {
    if (sms > 0) md->launch.sms = sms;
}
// The loss scale's cap the trainer puts on its scaler (model_precision's, for the defaults).
static double trainer_max_loss_scale(void) {
    Options o;
    options_defaults(&o);
    return model_precision(&o).max_loss_scale;
}
// A launch context for the products a test runs itself, on stream 0: the device's SMs, no switch,
// the seam's defaults, cuBLASLt's plans and workspace of its own (test_launch_free).
typedef struct {
    Launch L;
    Seam seam;
    LtPlans lt;
} TestLaunch;
static void test_launch_init(TestLaunch *t) {
    memset(t, 0, sizeof *t);
    t->seam = seam_defaults();
    t->L.stream = 0;
    t->L.sms = gpu_setup()->prop.multiProcessorCount;
    t->L.seam = &t->seam;
    t->L.lt = &t->lt;
    cudaCheck(cudaMalloc(&t->L.lt_ws, LT_WORKSPACE_BYTES));
    t->L.lt_ws_n = LT_WORKSPACE_BYTES;
}
static void test_launch_free(TestLaunch *t) {
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaFree(t->L.lt_ws));
    lt_plans_free(&t->lt);
}

// ----------------------------------------------------------------------------
// helpers

static double max_rel_err(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= 1e300)) return INFINITY;  // NaN or inf
        d = e > d ? e : d;
        m = fabs((double)b[i]) > m ? fabs((double)b[i]) : m;
    }
    return m > 0 ? d / m : d;
}
static void check_err(const char *what, double err, double tol) {
    CHECK(err <= tol, "%-34s rel err %.2e = %6.1f%% of tolerance %.0e", what, err, 100 * err / tol, tol);
}
static void check_tensor(const char *what, const float *gpu, const float *cpu, size_t n, double tol) {
    check_err(what, max_rel_err(gpu, cpu, n), tol);
}
// The same metric per row of a (rows, cols) tensor, each row against its own scale:
// an error confined to a few small rows (one byte of dE, one unit of dW_mh, the
// output row of a rare byte) hides in the whole-tensor metric, not here. A row that
// is exactly 0 on the CPU (a byte absent from the batch) must be exactly 0.
static void check_rows(const char *what, const float *gpu, const float *cpu, size_t rows, size_t cols, double tol) {
    double worst = 0;
    size_t at = 0;
    for (size_t r = 0; r < rows; r++) {
        double e = max_rel_err(gpu + r * cols, cpu + r * cols, cols);
        if (!(e <= worst)) { worst = e; at = r; }  // NaN counts as worst
    }
    char w[96];
    snprintf(w, sizeof w, "%s per row (worst: %zu)", what, at);
    check_err(w, worst, tol);
}
static float *d2h(const float *d, size_t n) {
    float *h = (float *)mallocCheck(n * sizeof(float));
    cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
// A random batch: bytes, and a few resets (one at t=0 of row 0 for certain).
static void random_batch(uint8_t *in, uint8_t *tg, uint8_t *rs, int B, int T, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < B * T; i++) {
        in[i] = (uint8_t)(rng_next(&s) >> 56);
        tg[i] = (uint8_t)(rng_next(&s) >> 56);
        rs[i] = rng_uniform(&s) < 0.05;
    }
    rs[0] = 1;
}

// ----------------------------------------------------------------------------
// The time loops as CUDA graphs (the default) against the direct path (MLSTM_NO_GRAPH=1):
// the same kernels in the same order with the same arguments, so the same bits, at the
// step that captures the loops, at a step that replays them after Adam moved the
// weights (state carried), and at a validation forward.

static void test_graph_path(MlstmConfig cfg, int B, int T, uint64_t seed, int sms) {
    if (!GPU_GRAPHS) {
        printf("skip  graph path: no CUDA graphs in this build (GPU_DEBUG)\n");
        return;
    }
    const int N = B * T, BH = B * cfg.H;
    Model *m[2];
    const char *env = getenv("MLSTM_NO_GRAPH");
    char *saved = env ? strdup(env) : NULL;
    for (int k = 0; k < 2; k++) {  // the switch as a user sets it
        if (k) setenv("MLSTM_NO_GRAPH", "1", 1);
        else unsetenv("MLSTM_NO_GRAPH");
        m[k] = model_for(cfg, B, T, seed);
        plan_for_sms(m[k], sms);
    }
    if (saved) setenv("MLSTM_NO_GRAPH", saved, 1);
    else unsetenv("MLSTM_NO_GRAPH");
    free(saved);
    CHECK(m[0]->use_graphs && !m[1]->use_graphs, "MLSTM_NO_GRAPH=1 turns the graphs off, its absence leaves them on");
    const size_t np = m[0]->np, nl = (size_t)N * cfg.V;
    uint8_t *in = (uint8_t *)mallocCheck(N), *tg = (uint8_t *)mallocCheck(N), *rs = (uint8_t *)mallocCheck(N);
    cudaGraphExec_t fwd = NULL, bwd = NULL;
    for (int step = 1; step <= 2; step++) {
        random_batch(in, tg, rs, B, T, seed * 7 + step);
        double loss[2];
        float *grads[2], *logits[2], *state[2];
        for (int k = 0; k < 2; k++) {
            loss[k] = model_step(m[k], in, tg, rs, N);
            grads[k] = d2h(m[k]->grads, np);
            logits[k] = d2h(m[k]->logits, nl);
            state[k] = (float *)mallocCheck(sizeof(float) * 2 * BH);
            real *h, *c;
            model_state(m[k], &h, &c);
            memcpy(state[k], h, sizeof(float) * BH);
            memcpy(state[k] + BH, c, sizeof(float) * BH);
            model_check(m[k]);
            model_apply(m[k], 1.0 / N, 1e-3, step);
        }
        if (step == 1) { fwd = m[0]->fwd_graph; bwd = m[0]->bwd_graph; }
        CHECK(loss[0] == loss[1] && !memcmp(grads[0], grads[1], np * 4) && !memcmp(logits[0], logits[1], nl * 4) &&
                  !memcmp(state[0], state[1], sizeof(float) * 2 * BH),
              "graph path == direct path, bit for bit, step %d (%s): loss %s, gradients %s, logits %s, state %s", step,
              step == 1 ? "captures" : "replays", loss[0] == loss[1] ? "same" : "DIFFER",
              memcmp(grads[0], grads[1], np * 4) ? "DIFFER" : "same",
              memcmp(logits[0], logits[1], nl * 4) ? "DIFFER" : "same",
              memcmp(state[0], state[1], sizeof(float) * 2 * BH) ? "DIFFER" : "same");
        for (int k = 0; k < 2; k++) { free(grads[k]); free(logits[k]); free(state[k]); }
    }
    CHECK(fwd && bwd && m[0]->fwd_graph == fwd && m[0]->bwd_graph == bwd && !m[1]->fwd_graph && !m[1]->bwd_graph,
          "each time loop captured once (step 1) and replayed (step 2); none on the direct path");
    double ev0 = model_eval(m[0], in, tg, rs, 1), ev1 = model_eval(m[1], in, tg, rs, 1);
    CHECK(ev0 == ev1, "validation forward (its own state) through the replayed graph: loss %.9g == %.9g", ev0, ev1);
    for (int k = 0; k < 2; k++) model_free(m[k]);
    free(in); free(tg); free(rs);
}

// ----------------------------------------------------------------------------
// Model vs CPU: one step (loss, logits, every gradient, the state), then ten
// training steps with the state carried.

// sms > 0 plans the products for that many SMs (plan_for_sms): the 128x128 tile on small shapes.
// One step of the model on a batch and a carried-in state, computed once by mlstm.h (FP32), to
// compare the GPU's step with (test_model, and each switch of test_switches).
// The biases it starts from: random ones in [-0.5, 0.5] (mlstm_init's are 0, which hides a bias left
// out of a product's epilogue), or a trained mLSTM's saturated gates (step_case_init says which).
typedef enum { BIAS_RANDOM, BIAS_SATURATED } BiasKind;
typedef struct {
    MlstmConfig cfg;
    int B, T;
    uint8_t *in, *tg, *rs;
    real *h0, *c0;   // the carried-in state, the same on both
    double S, loss;  // loss scale; mlstm.h's loss
    Mlstm cpu;       // its gradients and final state
    float *logits;   // (N,V) mlstm.h's
} StepCase;
static void step_case_init(StepCase *c, MlstmConfig cfg, int B, int T, uint64_t seed, BiasKind bias) {
    const int H = cfg.H, V = cfg.V, N = B * T;
    c->cfg = cfg; c->B = B; c->T = T;
    c->in = (uint8_t *)mallocCheck(N); c->tg = (uint8_t *)mallocCheck(N); c->rs = (uint8_t *)mallocCheck(N);
    random_batch(c->in, c->tg, c->rs, B, T, seed);
    mlstm_build(&c->cpu, cfg, B, T);
    mlstm_init(&c->cpu, seed);
    uint64_t bs = seed + 7;
    for (size_t i = 0; i < c->cpu.p.n[P_B]; i++) c->cpu.p.t[P_B][i] = (real)(rng_uniform(&bs) - 0.5);
    for (size_t i = 0; i < c->cpu.p.n[P_BOUT]; i++) c->cpu.p.t[P_BOUT][i] = (real)(rng_uniform(&bs) - 0.5);
    if (bias == BIAS_SATURATED) {
        // A trained mLSTM's long-memory units: forget-gate biases from 7 to 10 across the units
        // (f = 0.99909 .. 0.99995: below, inside and above the band 0.99927 .. 0.99976 where FP16 gets 1 - f
        // wrong by -33% to +100%, and above it FP16 rounds f to 1), input and output gates open (+3),
        // the candidate u saturated at +-3 .. +-5 (1 - u^2 down to 2e-4)
        real *b = c->cpu.p.t[P_B];
        for (int j = 0; j < H; j++) {
            b[j] = 3;
            b[H + j] = (real)(7 + 3.0 * j / (H - 1));
            b[2 * H + j] = 3;
            b[3 * H + j] = (real)((j % 2 ? 1 : -1) * (3 + 2.0 * j / (H - 1)));
        }
    }
    // a non-zero carried-in state
    c->h0 = (real *)mallocCheck(sizeof(real) * B * H);
    c->c0 = (real *)mallocCheck(sizeof(real) * B * H);
    uint64_t s = seed + 99;
    for (int i = 0; i < B * H; i++) {
        c->h0[i] = (real)(0.5 * rng_uniform(&s) - 0.25);
        c->c0[i] = (real)(rng_uniform(&s) - 0.5);
    }
#if GPU_FP16
    for (int i = 0; i < B * H; i++) c->h0[i] = tof(tox(c->h0[i]));  // the GPU keeps h in FP16; start equal
#endif
    // a production-size loss scale: the scaler starts at FP16's cap 2^15 and halves on overflow;
    // 2^14 leaves room for the random model's gradients (dlogits reach S)
    c->S = 16384;
    c->loss = mlstm_forward(&c->cpu, c->in, c->tg, c->rs, c->h0, c->c0, B, T);
    mlstm_backward(&c->cpu, (real)c->S);
    c->logits = (float *)mallocCheck(sizeof(float) * N * V);
    matmul_nt(c->logits, c->cpu.hs + (size_t)B * H, c->cpu.p.t[P_WOUT], c->cpu.p.t[P_BOUT], N, V, H, MATMUL_SET);
}
static void step_case_free(StepCase *c) {
    mlstm_free(&c->cpu);
    free(c->in); free(c->tg); free(c->rs); free(c->h0); free(c->c0); free(c->logits);
}
// The GPU's step from the case's state (md made with the case's seed): loss, logits, every
// gradient (and matrices row by row), the final state against mlstm.h's. label prefixes the checks.
static void check_step(StepCase *c, Model *md, const char *label) {
    const int H = c->cfg.H, V = c->cfg.V, N = c->B * c->T;
    memcpy(model_host(md)->params, c->cpu.params, sizeof(float) * md->np);  // the case's weights and biases
    real *gh, *gc;
    model_state(md, &gh, &gc);
    memcpy(gh, c->h0, sizeof(real) * c->B * H);
    memcpy(gc, c->c0, sizeof(real) * c->B * H);
    model_loaded(md);
    double lg = model_step(md, c->in, c->tg, c->rs, c->S);
    cudaCheck(cudaDeviceSynchronize());
    char what[96];
    snprintf(what, sizeof what, "%sloss", label);
    check_err(what, fabs(lg - c->loss) / fabs(c->loss), TOL_LOSS);
    float *logits_gpu = d2h(md->logits, (size_t)N * V);
    snprintf(what, sizeof what, "%slogits", label);
    check_tensor(what, logits_gpu, c->logits, (size_t)N * V, TOL_LOGITS);
    float *grads = d2h(md->grads, md->np);
    ParamTable gt;
    param_table(&gt, &c->cfg, grads);
    size_t rows[NPARAM], cols[NPARAM];
    param_shapes(&c->cfg, rows, cols);
    for (int i = 0; i < NPARAM; i++) {
        if (!gt.n[i]) continue;
        snprintf(what, sizeof what, "%sgrad %s (%zu)", label, param_names[i], gt.n[i]);
        check_tensor(what, gt.t[i], c->cpu.g.t[i], gt.n[i], TOL_GRAD);
        // matrices also row by row; the vectors (biases, gains) are single slices, as
        // one bias or gain element can be a sum that cancels to near zero
        if (cols[i] > 1) check_rows(what, gt.t[i], c->cpu.g.t[i], rows[i], cols[i], TOL_GRAD);
    }
    model_state(md, &gh, &gc);
    snprintf(what, sizeof what, "%sfinal state h", label);
    check_tensor(what, gh, mlstm_h_out(&c->cpu), (size_t)c->B * H, TOL_STATE);
    snprintf(what, sizeof what, "%sfinal state c", label);
    check_tensor(what, gc, mlstm_c_out(&c->cpu), (size_t)c->B * H, TOL_STATE);
    free(logits_gpu); free(grads);
}

static void test_model(MlstmConfig cfg, int B, int T, uint64_t seed, int sms) {
    const int H = cfg.H;
    char tag[96];
    snprintf(tag, sizeof tag, "D=%d H=%d B=%d T=%d wnorm=%d%s", cfg.D, H, B, T, cfg.wnorm,
             sms == 1 ? " tile 128 where it divides" : "");
    printf("-- model %s (%s)\n", tag, precision_name);
    StepCase sc;
    step_case_init(&sc, cfg, B, T, seed, BIAS_RANDOM);
    Model *md = model_for(cfg, B, T, seed);
    plan_for_sms(md, sms);
    check_step(&sc, md, "");
    model_free(md);
    const double S = sc.S;
    uint8_t *in = sc.in, *tg = sc.tg, *rs = sc.rs;
    real *h0 = sc.h0, *c0 = sc.c0;
    Mlstm &cpu = sc.cpu;
    double lc, lg;
    test_graph_path(cfg, B, T, seed, sms);

    // ten steps from the same initial weights and a zero state, state carried
    md = model_for(cfg, B, T, seed);
    plan_for_sms(md, sms);
    mlstm_init(&cpu, seed);
    memset(h0, 0, sizeof(real) * B * H); memset(c0, 0, sizeof(real) * B * H);
    double worst = 0, worst_norm = 0, lr = 2e-3;
    int overflowed = 0, clipped = 0;
    cudaGraphExec_t fwd_graph = NULL;
    for (int step = 1; step <= 10; step++) {
        double clip = step % 2 ? 0.05 : 1e3;  // odd steps clip (the norms are 0.1 - 0.4), even steps do not
        random_batch(in, tg, rs, B, T, seed * 1000 + step);
        lc = mlstm_forward(&cpu, in, tg, rs, h0, c0, B, T);
        mlstm_backward(&cpu, (real)S);
        memcpy(h0, mlstm_h_out(&cpu), sizeof(real) * B * H);
        memcpy(c0, mlstm_c_out(&cpu), sizeof(real) * B * H);
        double gn = grad_norm(cpu.grads, cpu.nparams) / S;  // train.c's CPU step 7, written out
        for (size_t i = 0; i < cpu.nparams; i++) cpu.grads[i] *= (real)(clip_factor(gn, clip) / S);
        clipped += gn > clip;
        AdamConfig a = adam_defaults;
        a.lr = lr;
        adam_update(cpu.params, cpu.grads, 1, cpu.adam_m, cpu.adam_v, cpu.nparams, a, step);

        lg = model_step(md, in, tg, rs, S);
        model_allreduce(md);
        GradientCheck check = model_check(md);
        overflowed |= check.overflow;
        double gg = check.norm / S;  // the norm before clipping, as the CPU's gn
        model_apply(md, clip_factor(gg, clip) / S, lr, step);
        if (step == 1) fwd_graph = md->fwd_graph;
        double e = fabs(lg - lc) / fabs(lc), en = fabs(gg - gn) / gn;
        worst = e > worst ? e : worst;
        worst_norm = en > worst_norm ? en : worst_norm;
        printf("      step %2d  loss cpu %.6f gpu %.6f  norm cpu %.6f gpu %.6f%s\n", step, lc, lg, gn, gg,
               gn > clip ? " (clipped)" : "");
    }
    CHECK(!overflowed, "no overflow in ten steps at S = %g", S);
    CHECK(clipped >= 3, "clipping triggered on %d of the 10 steps (it must, for the test to see it)", clipped);
    check_err("ten losses, state carried (worst)", worst, TOL_STEPS);
    check_err("ten gradient norms, as returned (worst)", worst_norm, TOL_NORM);
    if (md->use_graphs)
        CHECK(fwd_graph && md->fwd_graph == fwd_graph,
              "the ten steps ran the time loops as CUDA graphs, captured at step 1");
    model_free(md);
    step_case_free(&sc);
}

#ifdef GPU_DEBUG
// The debug build: a failed launch is reported with the function that launched it. The launch runs in a
// process of its own, this program again with --bad-launch: CUDA cannot be used in a child forked after its
// parent initialised it (on a GPU every call there fails with "initialization error"), so EXPECT_EXIT's fork,
// which the CPU layer allows, would not test the GPU.
static void bad_launch(void) {
    float *x;
    floatX *y;
    cudaCheck(cudaMalloc(&x, sizeof(float)));
    cudaCheck(cudaMalloc(&y, sizeof(floatX)));
    TestLaunch t;
    test_launch_init(&t);
    to_x(&t.L, y, x, 0);  // an empty grid: an invalid configuration
}
static void test_debug_check(void) {
    printf("-- GPU_DEBUG: every launch checked and waited for\n");
    char self[4096], said_file[] = "/tmp/test_gpu_bad_launch.XXXXXX";
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    int fd = mkstemp(said_file);
    if (n <= 0 || fd < 0) { perror("test_debug_check: /proc/self/exe or mkstemp"); exit(1); }
    self[n] = 0;
    close(fd);
    int rc = test_system("'%s' --bad-launch > /dev/null 2> %s", self, said_file);
    int said = test_system("grep -q 'launched by to_x at' %s", said_file);
    CHECK(rc == 1 && said == 0, "a failed launch names its launcher, file and line (exit %d)", rc);
    if (said) test_system("cat %s", said_file);
    unlink(said_file);
}
#endif

// ----------------------------------------------------------------------------
// FP16's range at the loss scale production uses. A trained character model gives
// most bytes probabilities of 1e-7 and below, and the output layer learns from those
// (softmax - onehot) terms. Here the model gets such a softmax (b_out spread over 16
// nats: p from 0.06 down to 7e-9, targets among the 32 likeliest bytes), S is found
// as the dynamic scaler finds it (from the trainer's start, halved while the step overflows), and the
// gradients of W_out, of the rare bytes' b_out and of W_mh are compared with mlstm.h
// (FP32) row by row. Then the FP16 build repeats the step with dlogits seeded at 0.5,
// the factor the earlier seeding S/N had at B=512, T=256, S=2^16: there those terms
// flush to zero, and the same comparison must see it.

// One step from the given weights and a zero state at loss scale S: the unscaled
// gradients into grads; returns model_check's overflow verdict.
static int precision_step(Model *md, const Mlstm *init, const uint8_t *in, const uint8_t *tg, const uint8_t *rs,
                           double S, float *grads) {
    Mlstm *h = model_host(md);
    memcpy(h->params, init->params, sizeof(float) * md->np);
    real *hh, *hc;
    model_state(md, &hh, &hc);
    memset(hh, 0, sizeof(real) * md->B * md->cfg.H);
    memset(hc, 0, sizeof(real) * md->B * md->cfg.H);
    model_loaded(md);
    model_step(md, in, tg, rs, S);
    int ov = model_check(md).overflow;
    cudaCheck(cudaMemcpy(grads, md->grads, sizeof(float) * md->np, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < md->np; i++) grads[i] = (float)(grads[i] / S);
    return ov;
}

static void test_precision(void) {
    printf("-- FP16 range at the production loss scale (%s)\n", precision_name);
    MlstmConfig cfg = {256, 64, 128, 1};
    const int B = 64, T = 8, N = B * T, V = cfg.V, H = cfg.H, LIKELY = 32;
    uint8_t *in = (uint8_t *)mallocCheck(N), *tg = (uint8_t *)mallocCheck(N), *rs = (uint8_t *)mallocCheck(N);
    random_batch(in, tg, rs, B, T, 21);
    for (int i = 0; i < N; i++) tg[i] %= LIKELY;
    Mlstm cpu;
    mlstm_build(&cpu, cfg, B, T);
    mlstm_init(&cpu, 21);
    for (int v = 0; v < V; v++) cpu.p.t[P_BOUT][v] = (real)(-16.0 * v / (V - 1));
    real *h0 = (real *)calloc((size_t)B * H, sizeof(real)), *c0 = (real *)calloc((size_t)B * H, sizeof(real));
    mlstm_forward(&cpu, in, tg, rs, h0, c0, B, T);
    double p_min = 1;
    for (int v = 0; v < V; v++) p_min = fmin(p_min, cpu.probs[v]);  // row 0's softmax (backward overwrites it)
    printf("      smallest probability of row 0: %.1e\n", p_min);
    mlstm_backward(&cpu, 1);

    Model *md = model_for(cfg, B, T, 21);
    float *grads = (float *)mallocCheck(sizeof(float) * md->np);
    ParamTable gt;
    param_table(&gt, &cfg, grads);
    LossScaler ls;
    loss_scaler_init(&ls, 1);
    loss_scaler_cap(&ls, trainer_max_loss_scale());  // as the trainer
    int tries = 0, ov = 1;
    while (ov && tries++ < 20) {
        ov = precision_step(md, &cpu, in, tg, rs, ls.scale, grads);
        if (ov) loss_scaler_update(&ls, 1);
    }
    CHECK(!ov, "the scaler's S: %g after %d tries", ls.scale, tries);
    check_rows("grad W_out", gt.t[P_WOUT], cpu.g.t[P_WOUT], V, H, TOL_GRAD);
    check_rows("grad b_out, bytes never a target", gt.t[P_BOUT] + LIKELY, cpu.g.t[P_BOUT] + LIKELY, V - LIKELY, 1,
               TOL_GRAD);
    check_rows("grad W_mh", gt.t[P_WMH], cpu.g.t[P_WMH], H, H, TOL_GRAD);
#if GPU_FP16
    precision_step(md, &cpu, in, tg, rs, 0.5, grads);
    double worst = 0;
    for (int v = 0; v < V; v++)
        worst = fmax(worst, max_rel_err(gt.t[P_WOUT] + (size_t)v * H, cpu.g.t[P_WOUT] + (size_t)v * H, H));
    CHECK(worst > TOL_GRAD,
          "seeded at 0.5 (S/N at B=512, T=256, S=2^16) the rare bytes' W_out rows are lost: worst row error %.2f",
          worst);
#endif
    free(grads);
    model_free(md);
    mlstm_free(&cpu);
    free(in); free(tg); free(rs); free(h0); free(c0);
}

// ----------------------------------------------------------------------------
// Saturated gates, as a trained mLSTM has them (step_case_init's BIAS_SATURATED: forget gates from
// 0.99909 to 0.99995, the candidate at +-(0.995 .. 0.9999)). The backward needs 1 - f and 1 - u^2,
// which gates stored in FP16 lose there (f rounds to 1 above 0.99976: its gradient is exactly 0); the
// GPU keeps the pre-activations in FP32 and recomputes the gates. One step against mlstm.h, every
// tensor as the model test checks it (the matrices row by row: W_x's and W_h's forget rows are the
// units' own), and b's gradient per gate.
static void test_saturated_gates(void) {
    printf("-- saturated gates, a trained mLSTM's (%s)\n", precision_name);
    MlstmConfig cfg = {256, 32, 64, 1};
    const int B = 64, T = 4, H = cfg.H;
    StepCase sc;
    step_case_init(&sc, cfg, B, T, 51, BIAS_SATURATED);
    Model *md = model_for(cfg, B, T, 51);
    check_step(&sc, md, "[saturated] ");
    float *grads = d2h(md->grads, md->np);
    ParamTable gt;
    param_table(&gt, &cfg, grads);
    check_rows("[saturated] grad b, gate by gate (i, f, o, u)", gt.t[P_B], sc.cpu.g.t[P_B], 4, H, TOL_GRAD);
    free(grads);
    model_free(md);
    step_case_free(&sc);
}

// ----------------------------------------------------------------------------
// The loss-scale cap (doc/gpu.md, "The cap on S"), which model_precision hands the loop. A trained-like
// softmax: b_out spread
// over 16 nats, most targets among the 16 likeliest bytes and one in 16 a rare byte
// (p < 2^-12, as a trained model gives the characters it does not expect). At the cap,
// S = 2^15, dlogits stays finite and dhs within its bound; at 2^16, the scaler's next
// power of two, the rare targets' (p - 1) S round to -inf and the step is flagged.

#if GPU_FP16
static double max_abs_x(const floatX *d, size_t n, size_t *n_inf) {
    floatX *h = (floatX *)mallocCheck(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(h, d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    double m = 0;
    *n_inf = 0;
    for (size_t i = 0; i < n; i++) {
        double v = fabs((double)tof(h[i]));
        if (!(v <= FLT_MAX)) (*n_inf)++;
        else m = v > m ? v : m;
    }
    free(h);
    return m;
}
#endif

static void test_loss_scale_cap(void) {
#if GPU_FP16
    printf("-- the loss-scale cap from FP16's range (%s)\n", precision_name);
    MlstmConfig cfg = {256, 16, 64, 1};
    const int B = 8, T = 8, N = B * T, V = cfg.V, H = cfg.H;
    uint8_t in[64], tg[64], rs[64];
    random_batch(in, tg, rs, B, T, 31);
    for (int i = 0; i < N; i++) tg[i] = i % 16 ? tg[i] % 16 : 128 + tg[i] % 128;
    Model *md = model_for(cfg, B, T, 31);
    Mlstm *h = model_host(md);
    for (int v = 0; v < V; v++) h->p.t[P_BOUT][v] = (real)(-16.0 * v / (V - 1));
    model_loaded(md);
    const double S = FP16_MAX_LOSS_SCALE;
    CHECK(trainer_max_loss_scale() == S, "model_precision gives the loop FP16's cap, 2^15 (%g)",
          trainer_max_loss_scale());
    model_step(md, in, tg, rs, S);
    int ov = model_check(md).overflow;
    // the targets' probabilities, from the FP32 logits
    float *logits = d2h(md->logits, (size_t)N * V);
    double p_min = 1;
    int rare = 0;
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, x[v]);
        for (int v = 0; v < V; v++) sum += exp(x[v] - mx);
        int y = tg[(n % B) * T + n / B];
        double p = exp(x[y] - mx) / sum;
        p_min = fmin(p_min, p);
        rare += p < 1.0 / 4096;
    }
    free(logits);
    CHECK(rare >= N / 16 && p_min < 1.0 / 4096, "%d of %d targets have p < 2^-12 (smallest %.1e)", rare, N, p_min);
    size_t n_inf, dhs_inf;
    double dl = max_abs_x(md->dlogits, (size_t)N * V, &n_inf), dh = max_abs_x(md->dhs, (size_t)N * H, &dhs_inf);
    CHECK(!ov && n_inf == 0 && dl <= FP16_MAX, "S = 2^15 (the cap): no overflow (%d), max |dlogits| = %.0f <= 65504",
          ov, dl);
    // dhs's bound: S times the largest spread (max - min) of a column of W_out (FP16, as the matmul reads it)
    floatX *wo = (floatX *)mallocCheck(sizeof(floatX) * V * H);
    cudaCheck(cudaMemcpy(wo, md->Wout, sizeof(floatX) * V * H, cudaMemcpyDeviceToHost));
    double spread = 0;
    for (int j = 0; j < H; j++) {
        double lo = INFINITY, hi = -INFINITY;
        for (int v = 0; v < V; v++) {
            lo = fmin(lo, tof(wo[(size_t)v * H + j]));
            hi = fmax(hi, tof(wo[(size_t)v * H + j]));
        }
        spread = fmax(spread, hi - lo);
    }
    free(wo);
    // (1 + 1e-2: the FP16 roundings of dlogits and of dhs, a few u each)
    CHECK(dhs_inf == 0 && dh <= S * spread * (1 + 1e-2),
          "max |dhs| = %.1f <= S x the widest W_out column spread = %.1f", dh, S * spread);
    model_step(md, in, tg, rs, 2 * S);
    ov = model_check(md).overflow;
    max_abs_x(md->dlogits, (size_t)N * V, &n_inf);
    CHECK(ov && n_inf >= (size_t)rare,
          "S = 2^16 (just above): %zu dlogits are inf (rare targets: %d), the step is flagged (%d)", n_inf, rare, ov);
    // the scaler as the trainer sets it up: at the cap from the start, never above it
    LossScaler ls;
    loss_scaler_init(&ls, 1);
    loss_scaler_cap(&ls, trainer_max_loss_scale());
    double start = ls.scale, top = 0;
    for (int i = 0; i < 5000; i++) {
        loss_scaler_update(&ls, i == 100);  // one overflow: S halves, then grows back
        top = fmax(top, ls.scale);
    }
    CHECK(start == S && top == S && ls.scale == S,
          "the trainer's scaler: starts at %g, at most %g in 5000 steps, ends at %g", start, top, ls.scale);
    model_free(md);
#else
    CHECK(trainer_max_loss_scale() == INFINITY, "the FP32 build stores nothing in FP16 (S = 1): no cap (%g)",
          trainer_max_loss_scale());
#endif
}

// ----------------------------------------------------------------------------
// Shapes that are not tile multiples run on the SIMT kernel; the FP16 build says so.
static void test_simt_warning(void) {
    printf("-- shapes off the tensor-core tile (%s)\n", precision_name);
    char buf[1024] = "";
    FILE *f = tmpfile();
    TestLaunch t;
    test_launch_init(&t);
    int good = warn_simt_shapes(&t.L, 4096, 64, 128, 256, f), odd = warn_simt_shapes(&t.L, 4096, 64, 100, 256, f);
    test_launch_free(&t);
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    CHECK(good == 0, "H=4096 D=64 B=128 T=256: every matmul on the tensor-core path (%d off it)", good);
    if (GPU_FP16)
        CHECK(odd == 4 && strstr(buf, "warning:") && strstr(buf, "(mh, z, dm, dh)") && strstr(buf, "--batch"),
              "B=100: the 4 per-step products with B rows (%d flagged) are named, with the flag: %s", odd, buf);
    else
        CHECK(odd == 0 && n == 0, "FP32 build: everything is SIMT by design, no warning (%d)", odd);
}

// ----------------------------------------------------------------------------
// Overflow: a backward seeded with S = inf (--inject-overflow's way), and gradients beyond
// FP16's range, are detected after the all-reduce; the step is skipped, the weights stay,
// the scale halves.

static void test_overflow(void) {
    printf("-- overflow (%s)\n", precision_name);
    MlstmConfig cfg = {256, 16, 64, 1};
    int B = 8, T = 6;
    uint8_t in[48], tg[48], rs[48];
    random_batch(in, tg, rs, B, T, 5);
    Model *md = model_for(cfg, B, T, 5);
    size_t n = md->np * sizeof(float);
    float *before = (float *)mallocCheck(n);
    memcpy(before, model_host(md)->params, n);
    LossScaler ls;
    loss_scaler_init(&ls, GPU_FP16);
    LrSettings lrs = lr_settings_default();
    lrs.rule = LR_CONSTANT; lrs.decay = DECAY_NONE; lrs.warmup = 0;
    long applied = 0;
    double S0 = ls.scale;
    double loss = model_step(md, in, tg, rs, INFINITY);
    model_allreduce(md);
    int ov = model_check(md).overflow;
    StepDecision d = decide_step(&ls, &lrs, &applied, B, ov);
    if (d.apply) model_apply(md, d.inv_scale, d.lr, applied);
    CHECK(ov && !d.apply && applied == 0 && isfinite(loss),
          "backward seeded with S = inf: overflow %d, step skipped %d, applied steps %ld, loss %g", ov, !d.apply,
          applied, loss);
    CHECK(ls.scale == (S0 / 2 > 1 ? S0 / 2 : 1), "loss scale %g -> %g", S0, ls.scale);
    CHECK(!memcmp(before, model_host(md)->params, n), "weights untouched by the skipped step (bit for bit)");
    // a huge loss scale: the gradients overflow for real (FP16: dlogits beyond 65504;
    // FP32 build: the sums over N predictions beyond FLT_MAX) and arrive as inf/NaN
    const double huge = GPU_FP16 ? 1e12 : 3e38;
    model_step(md, in, tg, rs, huge);
    CHECK(model_check(md).overflow, "gradients at S = %g flagged", huge);
    // and a normal step applies
    model_step(md, in, tg, rs, B * T);
    ov = model_check(md).overflow;
    if (!ov) model_apply(md, 1.0 / (B * T), 1e-3, 1);
    CHECK(!ov && memcmp(before, model_host(md)->params, n), "a clean step applies and moves the weights");
    free(before);
    model_free(md);
}

// A set of the run-time switches (train.cu's Switches), as a user sets them: the environment, and
// --matmul (the models' Options, model_for; the trainer's command line, run_trainer).
struct SwitchRun {
    const char *name;
    int splitk, overlap, l2, warp64, cublaslt;
};
static void set_switch_env(const SwitchRun *r) {
    const char *names[] = {"MLSTM_SPLITK", "MLSTM_OVERLAP", "MLSTM_L2", "MLSTM_WARP64"};
    const int on[] = {r->splitk, r->overlap, r->l2, r->warp64};
    for (int i = 0; i < 4; i++) {
        if (on[i]) setenv(names[i], "1", 1);
        else unsetenv(names[i]);
    }
    matmul_kind = r->cublaslt ? MATMUL_CUBLASLT : MATMUL_WMMA;
}

// ----------------------------------------------------------------------------
// Bit-exact resume through the real trainer: 6 steps in one run, against 3 steps,
// checkpoint, resume, 3 more (with the hand-written switches on: 4 against 2 + 2). The two
// final checkpoints must be byte-identical and the losses of the resumed steps the same
// strings in both logs.

#ifdef CUDACPU  // the CPU layer (test/cuda) runs the same paths (64x64 tiles, every kernel) 7x cheaper
#define RESUME_H "64"
#define RESUME_D "32"
#define RESUME_T "16"
#else
#define RESUME_H "128"
#define RESUME_D "64"
#define RESUME_T "32"
#endif
static int run_trainer(const char *dir, const char *name, int steps, const char *resume) {
    char out[512], st[32];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    snprintf(st, sizeof st, "%d", steps);
    const char *args[40] = {"train_gpu", "--hidden", RESUME_H, "--embed", RESUME_D, "--batch", "64", "--seq-len",
                            RESUME_T,
                            "--steps", st, "--corpus-bytes", "200000", "--val-every", "0", "--val-steps", "1",
                            "--sample-len", "0", "--lr-schedule", "constant", "--lr", "1e-3", "--print-every", "100",
                            "--out", out};
    int n = 27;
    if (resume) { args[n++] = "--resume"; args[n++] = resume; }
    if (matmul_kind == MATMUL_CUBLASLT) { args[n++] = "--matmul"; args[n++] = "cublaslt"; }
    args[n] = NULL;
    optind = 0;  // getopt_long starts afresh
    fflush(stdout);
    return train_main(n, (char **)args);
}
static int read_file(const char *path, uint8_t **buf, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = (uint8_t *)mallocCheck(*n);
    size_t got = fread(*buf, 1, *n, f);
    fclose(f);
    return got == *n ? 0 : -1;
}
// The loss column of "train STEP ..." lines for steps from..to, joined; returns
// how many of all the train lines were applied (skipped column 0). *max_scale: the
// largest loss scale of all the train lines (the scale column), if not NULL.
static int log_losses(const char *path, int from, int to, char *out, size_t cap, double *max_scale) {
    FILE *f = fopen(path, "r");
    char line[512];
    int applied = 0;
    out[0] = 0;
    if (max_scale) *max_scale = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        int step, skipped = 1;
        char epoch[64], lr[64], loss[64], bpc[64], scale[64];
        int k = sscanf(line, "train %d %63s %63s %63s %63s %63s %d", &step, epoch, lr, loss, bpc, scale, &skipped);
        if (k == 7) applied += !skipped;
        if (k == 7 && max_scale && atof(scale) > *max_scale) *max_scale = atof(scale);
        if (k >= 4 && step >= from && step <= to) snprintf(out + strlen(out), cap - strlen(out), "%s ", loss);
    }
    fclose(f);
    return applied;
}

// 2n steps in one run against n, checkpoint, resume, n more, with the switches r on.
static void resume_check(const SwitchRun *r, int n) {
    printf("-- bit-exact checkpoint/resume through the trainer, switches %s (%s)\n", r->name, precision_name);
    set_switch_env(r);
    char dir[] = "/tmp/test_gpu_XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    char path[600];
    int ra = run_trainer(dir, "a", 2 * n, NULL);
    int rb1 = run_trainer(dir, "b", n, NULL);
    snprintf(path, sizeof path, "%s/b", dir);
    int rb2 = run_trainer(dir, "b", 2 * n, path);
    snprintf(path, sizeof path, "%s/b/latest.ckpt", dir);
    CHECK(ra == 0 && rb1 == 0 && rb2 == 0, "[%s] trainer runs exit 0 (%d, %d, %d)", r->name, ra, rb1, rb2);
    uint8_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    char pa[600];
    snprintf(pa, sizeof pa, "%s/a/latest.ckpt", dir);
    int ok = read_file(pa, &a, &na) == 0 && read_file(path, &b, &nb) == 0;
    CHECK(ok && na == nb && !memcmp(a, b, na),
          "[%s] %d steps == %d + checkpoint + resume + %d: checkpoints identical (%zu bytes)", r->name, 2 * n, n, n,
          na);
    char la[600], lb[600], sa[1024], sb[1024];
    snprintf(la, sizeof la, "%s/a/train.log", dir);
    snprintf(lb, sizeof lb, "%s/b/train.log", dir);
    double max_scale = 0;
    int applied = log_losses(la, n + 1, 2 * n, sa, sizeof sa, &max_scale);
    log_losses(lb, n + 1, 2 * n, sb, sizeof sb, NULL);
    CHECK(applied >= n, "[%s] the %d-step run applied %d of its steps (not all skipped for overflow)", r->name,
          2 * n, applied);
#if GPU_FP16
    CHECK(max_scale == FP16_MAX_LOSS_SCALE,
          "[%s] the trainer's loss scale starts at FP16's cap and stays there: %g (cap %g)", r->name, max_scale,
          FP16_MAX_LOSS_SCALE);
#else
    CHECK(max_scale == 1, "[%s] the FP32 trainer's loss scale is 1: %g", r->name, max_scale);
#endif
    CHECK(sa[0] && !strcmp(sa, sb), "[%s] losses of steps %d-%d identical: [%s] vs [%s]", r->name, n + 1, 2 * n, sa,
          sb);
    CkptHeader hd;
    memset(&hd, 0, sizeof hd);
    if (ok) checkpoint_header(pa, &hd);  // exits on any problem: the CPU trainer reads the GPU's file
    CHECK(ok && (int)hd.st.step == 2 * n && hd.cfg.H == atoi(RESUME_H),
          "[%s] the CPU code reads the GPU checkpoint (step %llu)", r->name,
          ok ? (unsigned long long)hd.st.step : 0ULL);
    free(a); free(b);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (test_system("%s", cmd) != 0) printf("note: could not remove %s\n", dir);
    const SwitchRun off = {"as-is", 0, 0, 0, 0, 0};
    set_switch_env(&off);
}
// What is bit-exact (doc/gpu.md, "What is bit-exact"): resume on the default path; and with the
// hand-written switches, which keep every sum in a fixed order (split-K's partials, the overlapped
// chunks on one stream), in the FP16 builds that run each switch (CI's budget: the FP32, debug and
// sanitizer builds run the default path).
static void test_resume(void) {
    const SwitchRun as_is = {"as-is", 0, 0, 0, 0, 0}, all_wmma = {"all-wmma", 1, 1, 1, 1, 0};
    resume_check(&as_is, 3);
#if GPU_FP16 && !defined(GPU_DEBUG) && !defined(__SANITIZE_ADDRESS__)
    resume_check(&all_wmma, 2);
#else
    (void)all_wmma;
#endif
}

// ----------------------------------------------------------------------------
// Matmul: the hand-written kernels against the exact sum (sampled, in double on the
// CPU) and against cuBLASLt (whole tensor, on the GPU). Inputs are a hash of their
// index, so the CPU can compute any element without copying the operands.

static __host__ __device__ inline float hval(uint64_t seed, uint64_t i) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ULL + i;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (float)((double)(z >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
}
__global__ void fill_kernel(floatX *x, size_t n, uint64_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = tox(hval(seed, i));
}
static void *try_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) { cudaGetLastError(); return NULL; }
    return p;
}
static const char *plan_names[] = {"simt", "wmma64", "wmma128"};
static const char *layout_names[] = {"NT x.W^T", "NN dY.W", "TN dY^T.X"};

// Element (m,k) of A and (k,n) of B as stored by the layout, FP16-rounded in the FP16 build.
static double elem_a(int layout, int M, int K, int m, int k) {
    return tof(tox(hval(1, layout == MM_TN ? (uint64_t)k * M + m : (uint64_t)m * K + k)));
}
static double elem_b(int layout, int N, int K, int k, int n) {
    return tof(tox(hval(2, layout == MM_NT ? (uint64_t)n * K + k : (uint64_t)k * N + n)));
}

// cuBLASLt's product C (M,N) FP32 = A . B (train.cu's --matmul cublaslt path, plain epilogue) in
// the context ctx: what the hand-written kernel is checked and timed against. False when it did not
// run: a build without cuBLASLt, or a shape its heuristic refuses (train.cu's matmul then runs it).
static bool lt_product(const Launch *ctx, int L, int M, int N, int K, const floatX *A, const floatX *B, float *C) {
    return matmul_lt(ctx, L, M, N, K, A, B, epi_f32(C, N));
}
// |x| in place (the operands of S = |A| . |B|, the tolerance's scale)
__global__ void abs_kernel(floatX *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = tox(fabsf(tof(x[i])));
}
// d[i] = |d[i] - b[i]| (inf where either is not finite)
__global__ void absdiff_kernel(float *d, const float *b, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float e = fabsf(d[i] - b[i]);
        d[i] = e <= 3e38f ? e : INFINITY;
    }
}
// max_i d[i] / s[i] (0 / 0 counts 0, anything else over 0 infinity)
__global__ void maxratio_kernel(float *out, const float *d, const float *s, size_t n) {
    float r = 0.f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        r = fmaxf(r, d[i] == 0.f ? 0.f : s[i] > 0.f ? d[i] / s[i] : INFINITY);
    r = block_max(r);
    if (threadIdx.x == 0) out[blockIdx.x] = r;
}
// max over the elements of |C - Cb| / S, S = |A| . |B| by the hand-written kernel in ctx's plan (an
// FP32 sum of positive terms, low by at most K 2^-23 of itself: the ratio errs high, the check
// strict), uncounted by ctx's seam. Leaves A and B as their absolute values, C as |C - Cb|, Cb as S.
static double rel_to_abs_products(const Launch *ctx, int L, int M, int N, int K, floatX *A, floatX *B, float *C,
                                  float *Cb) {
    const size_t nc = (size_t)M * N;
    absdiff_kernel<<<4 * ctx->sms, 256>>>(C, Cb, nc);
    abs_kernel<<<4 * ctx->sms, 256>>>(A, (size_t)M * K);
    abs_kernel<<<4 * ctx->sms, 256>>>(B, (size_t)K * N);
    launchCheck();
    Launch quiet = *ctx;  // (the seam's counts are the checked products')
    Seam seam = *ctx->seam;
    quiet.seam = &seam;
    matmul(&quiet, L, M, N, K, A, B, epi_f32(Cb, N));
    float *part, hp[RED_BLOCKS];
    cudaCheck(cudaMalloc(&part, sizeof hp));
    maxratio_kernel<<<RED_BLOCKS, 256>>>(part, C, Cb, nc);
    launchCheck();
    cudaCheck(cudaMemcpy(hp, part, sizeof hp, cudaMemcpyDeviceToHost));
    cudaCheck(cudaFree(part));
    double r = 0;
    for (int i = 0; i < RED_BLOCKS; i++) r = hp[i] > r || !(hp[i] <= 3e38f) ? hp[i] : r;
    return r <= 3e38 ? r : INFINITY;
}
// Runs one shape: checks (unless bench) or times (bench reps > 0) ours and cuBLASLt.
// The shared-memory pipeline depth a plan runs at (the SIMT kernel's: 1; before sm_80 the WMMA
// kernel's copies are synchronous whatever the depth).
static int plan_stages(const Launch *ctx, int plan) {
#if GPU_FP16
    return plan == MM_SIMT ? 1 : ctx->seam->wmma_stages;
#else
    (void)ctx;
    (void)plan;
    return 1;
#endif
}
#if GPU_FP16
// Whether matmul_setup offered the pipeline depth st on this device; says so when not.
static bool depth_offered(int st, const char *what) {
    const int ok = gpu_setup()->wmma_depth_ok[st];
    if (!ok)
        printf("skip  %s at %d stages: not on this device (no cp.async before sm_80, or too little shared memory)\n",
               what, st);
    return ok;
}
#endif
static void matmul_shape(const Launch *ctx, const Shape *s, int bench_reps) {
    const int M = s->M, N = s->N, K = s->K, L = s->layout;
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    floatX *A = (floatX *)try_alloc(na * sizeof(floatX)), *Bm = (floatX *)try_alloc(nb * sizeof(floatX));
    float *C = (float *)try_alloc(nc * 4), *Cb = (float *)try_alloc(nc * 4);
    char name[160];
    int plan = matmul_plan(ctx, M, N, K, A ? A : (floatX *)16, Bm ? Bm : (floatX *)16);
    snprintf(name, sizeof name, "%-10s %-9s M=%-6d N=%-6d K=%-6d %-7s stages=%d", s->what, layout_names[L], M, N, K,
             plan_names[plan], plan_stages(ctx, plan));
    if (!A || !Bm || !C || !Cb) {
        printf("skip  %s: needs %.1f GB of GPU memory\n", name, (na + nb) * sizeof(floatX) / 1e9 + nc * 8 / 1e9);
        cudaFree(A); cudaFree(Bm); cudaFree(C); cudaFree(Cb);
        return;
    }
    fill_kernel<<<4 * ctx->sms, 256>>>(A, na, 1);
    fill_kernel<<<4 * ctx->sms, 256>>>(Bm, nb, 2);
    launchCheck();
    if (bench_reps > 0) {
        cudaEvent_t e0, e1;
        cudaCheck(cudaEventCreate(&e0)); cudaCheck(cudaEventCreate(&e1));
        float ms_ours, ms_lt;
        matmul(ctx, L, M, N, K, A, Bm, epi_f32(C, N));  // warm-up
        cudaCheck(cudaEventRecord(e0));
        for (int r = 0; r < bench_reps; r++) matmul(ctx, L, M, N, K, A, Bm, epi_f32(C, N));
        cudaCheck(cudaEventRecord(e1)); cudaCheck(cudaEventSynchronize(e1));
        cudaCheck(cudaEventElapsedTime(&ms_ours, e0, e1));
        ms_lt = 0;  // (0: cuBLASLt did not run it; gpu_check.sh's report says n/a)
        if (lt_product(ctx, L, M, N, K, A, Bm, Cb)) {
            cudaCheck(cudaEventRecord(e0));
            for (int r = 0; r < bench_reps; r++) lt_product(ctx, L, M, N, K, A, Bm, Cb);
            cudaCheck(cudaEventRecord(e1)); cudaCheck(cudaEventSynchronize(e1));
            cudaCheck(cudaEventElapsedTime(&ms_lt, e0, e1));
        }
        ms_ours /= bench_reps; ms_lt /= bench_reps;
        double fl = 2.0 * M * N * K;
        printf("bench_matmul %s | ours %8.3f ms %7.1f TFLOP/s | cuBLASLt %8.3f ms %7.1f TFLOP/s"
               " | ours/cuBLASLt %5.1f%%\n", name, ms_ours, fl / ms_ours / 1e9, ms_lt, ms_lt > 0 ? fl / ms_lt / 1e9 : 0,
               100.0 * ms_lt / ms_ours);
        cudaEventDestroy(e0); cudaEventDestroy(e1);
    } else {
        matmul(ctx, L, M, N, K, A, Bm, epi_f32(C, N));
        const bool lt_ran = lt_product(ctx, L, M, N, K, A, Bm, Cb);
        cudaCheck(cudaDeviceSynchronize());
        // vs the exact sum at sampled (or all) elements
        int all = nc <= 4096, ns = all ? (int)nc : 66;
        uint64_t rs = (uint64_t)M * 31 + N * 7 + K;
        double worst = 0;
        for (int q = 0; q < ns; q++) {
            int r, c;
            if (all) { r = q / N; c = q % N; }
            else if (q < 2) { r = q ? M - 1 : 0; c = q ? N - 1 : 0; }
            else { r = (int)(rng_next(&rs) % M); c = (int)(rng_next(&rs) % N); }
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double t = elem_a(L, M, K, r, k) * elem_b(L, N, K, k, c);
                ref += t; mag += fabs(t);
            }
            float got;
            cudaCheck(cudaMemcpy(&got, C + (size_t)r * N + c, 4, cudaMemcpyDeviceToHost));
            double e = fabs(got - ref) / (mag > 0 ? mag : 1);
            if (!(e <= 1e300)) e = INFINITY;
            worst = e > worst ? e : worst;
        }
        char what[200];
        snprintf(what, sizeof what, "%s vs CPU (%s)", name, all ? "all" : "66 samples");
        check_err(what, worst, TOL_MM);
        snprintf(what, sizeof what, "%s vs cuBLASLt", name);
        if (lt_ran) check_err(what, rel_to_abs_products(ctx, L, M, N, K, A, Bm, C, Cb), tol_mm_pair(K));
        else printf("skip  %s: cuBLASLt did not run it (%s)\n", what, GPU_CUBLASLT ? "refused" : "not built");
    }
    cudaCheck(cudaFree(A)); cudaCheck(cudaFree(Bm)); cudaCheck(cudaFree(C)); cudaCheck(cudaFree(Cb));
}

// The matmul group's products, in its order: small and odd shapes in every layout (the SIMT path,
// both tiles), the model test's own shapes; on tensor cores (FP16) the other pipeline depths the
// benchmark times (2 and 4 slabs in shared memory; K from fewer slabs than the pipeline holds, so
// empty commit groups, to ten) and switch warp64 (the 128x128 tile as 4 warps of 64x64; one and
// several blocks and slabs), both with one SM seen (the 128x128 tile wherever it divides), every
// layout; and unless quick, the paper's shapes at B = 128, 256, 512.
typedef struct {
    Shape s;
    int stages;           // the WMMA pipeline depth (0: the trainer's)
    int warp64;           // switch warp64
    int one_sm;           // the dispatcher sees one SM
    const char *heading;  // printed before this product (NULL: none)
} MatmulCase;
static std::vector<MatmulCase> matmul_cases(int quick) {
    std::vector<MatmulCase> v;
    const int small[][3] = {{37, 45, 29}, {1, 7, 3}, {64, 64, 64}, {128, 256, 96}, {192, 64, 320}, {2048, 2048, 64}};
    for (int i = 0; i < (int)(sizeof small / sizeof small[0]); i++)
        for (int L = 0; L < 3; L++) v.push_back({{"small", L, small[i][0], small[i][1], small[i][2]}, 0, 0, 0, NULL});
    // the depth of the weight gradients at B = 512 (K = B T = 131,072), on 16 x 16 (SIMT: the CPU layer
    // affords it), where two FP32 accumulators differ most (tol_mm_pair)
    v.push_back({{"deep", MM_TN, 16, 16, 131072}, 0, 0, 0, NULL});
    Shape shapes[MAX_SHAPES];
    int n = step_shapes(shapes, 128, 64, 64, 8);  // the model test's own shapes
    for (int i = 0; i < n; i++) v.push_back({shapes[i], 0, 0, 0, NULL});
    if (GPU_FP16) {
        const int tiles[][3] = {{128, 128, 96}, {64, 64, 64}, {192, 64, 320}};
        for (int st = 2; st <= 4; st += 2)
            for (int i = 0; i < 3; i++)
                for (int L = 0; L < 3; L++)
                    v.push_back({{"depth", L, tiles[i][0], tiles[i][1], tiles[i][2]}, st, 0, 1, NULL});
        const int tiles64[][3] = {{128, 128, 96}, {256, 384, 64}};
        for (int i = 0; i < 2; i++)
            for (int L = 0; L < 3; L++)
                v.push_back({{"warp64", L, tiles64[i][0], tiles64[i][1], tiles64[i][2]}, 0, 1, 1, NULL});
    }
    if (quick) return v;
    const int Bs[] = {128, 256, 512};
    static const char *headings[] = {"-- matmul: the paper's shapes, H=4096 D=64 T=256 B=128",
                                     "-- matmul: the paper's shapes, H=4096 D=64 T=256 B=256",
                                     "-- matmul: the paper's shapes, H=4096 D=64 T=256 B=512"};
    for (int b = 0; b < 3; b++) {
        n = step_shapes(shapes, 4096, 64, Bs[b], 256);
        for (int i = 0; i < n; i++) v.push_back({shapes[i], 0, 0, 0, i ? NULL : headings[b]});
    }
    return v;
}

static void test_matmul(int quick) {
    printf("-- matmul (%s): hand-written vs exact (CPU, double) and vs cuBLASLt\n", precision_name);
    TestLaunch t;
    test_launch_init(&t);
    const int sms = t.L.sms;
    int warp64_products = 0;
#if GPU_FP16
    int skipped_depth = 0;
#endif
    for (const MatmulCase &c : matmul_cases(quick)) {
        if (c.heading) printf("%s\n", c.heading);
#if GPU_FP16
        if (c.stages && c.stages != skipped_depth && !depth_offered(c.stages, "matmul")) skipped_depth = c.stages;
        if (c.stages && !gpu_setup()->wmma_depth_ok[c.stages]) continue;
        t.seam.wmma_stages = c.stages ? c.stages : WMMA_STAGES;
#endif
        t.L.sw.warp64 = c.warp64;
        warp64_products += c.warp64;
        t.L.sms = c.one_sm ? 1 : sms;
        matmul_shape(&t.L, &c.s, 0);
    }
#if GPU_FP16
    CHECK(t.seam.wmma128[1] == warp64_products, "switch warp64: the %d products ran as 4 warps of 64x64 (%ld)",
          warp64_products, t.seam.wmma128[1]);
#endif
    test_launch_free(&t);
}

// Every product of the full matmul group (the paper's shapes too, which the CPU layer cannot run)
// gets its cuBLASLt plan: the plans are made here without a product, as matmul_shape's lt_product
// would make them (fresh, 256-byte aligned operands; an FP32 output, no bias). The full group
// needs more plans than a table of 64 holds, so this is where a fixed table would end the run.
static void test_lt_plans(void) {
#if !GPU_CUBLASLT
    printf("skip  cuBLASLt plans: built without cuBLASLt\n");
    return;
#else
    printf("-- cuBLASLt plans for every product of the full matmul group (%s)\n", precision_name);
    TestLaunch t;  // (test_matmul's: lt_product's workspace)
    test_launch_init(&t);
    const void *fresh = (const void *)(uintptr_t)256;
    std::vector<LtKey> keys;
    const std::vector<MatmulCase> cases = matmul_cases(0);
    for (const MatmulCase &c : cases) {
        LtKey k = lt_key(&t.L, c.s.layout, c.s.M, c.s.N, c.s.K, fresh, fresh, fresh, 1, NULL);
        bool seen = false;
        for (const LtKey &o : keys) seen |= !memcmp(&o, &k, sizeof k);
        if (!seen) keys.push_back(k);
        lt_plan(t.L.lt, &k, NULL);
    }
    size_t planned = 0;
    for (const LtKey &k : keys)
        for (const LtPlan *p = t.lt.plans; p; p = p->next) planned += !memcmp(&p->key, &k, sizeof k);
    CHECK(planned == keys.size() && keys.size() > 64,
          "the full group's %zu products: %zu distinct plans, %zu of them made (%d plans in all)", cases.size(),
          keys.size(), planned, t.lt.n);
    test_launch_free(&t);
#endif
}

// cuBLASLt's bias has D's type, so an FP16 output with the FP32 master bias goes through the FP32
// scratch and the epilogue kernel (train.cu's matmul_lt): against the hand-written kernel, which adds
// the same bias to its FP32 accumulators. Both round once into FP16, from FP32 sums in different
// orders, so they may differ by one FP16 unit in the last place: 2^-10 of the largest element.
static void test_lt_fp16_bias(void) {
    if (!GPU_FP16 || !GPU_CUBLASLT) {
        printf("skip  cuBLASLt with an FP16 output and a bias: %s\n",
               GPU_FP16 ? "built without cuBLASLt" : "the FP32 build has no FP16 output");
        return;
    }
    printf("-- cuBLASLt: an FP16 output with an FP32 bias, through the epilogue kernel (%s)\n", precision_name);
    const int M = 64, N = 128, K = 96;
    floatX *A, *Bm, *C[2];
    float *bias, *scratch, *out[2];
    cudaCheck(cudaMalloc(&A, sizeof(floatX) * M * K));
    cudaCheck(cudaMalloc(&Bm, sizeof(floatX) * K * N));
    cudaCheck(cudaMalloc(&bias, sizeof(float) * N));
    cudaCheck(cudaMalloc(&scratch, sizeof(float) * M * N));
    fill_kernel<<<4, 256>>>(A, (size_t)M * K, 1);
    fill_kernel<<<4, 256>>>(Bm, (size_t)K * N, 2);
    launchCheck();
    std::vector<float> hb(N);
    for (int c = 0; c < N; c++) hb[c] = hval(3, c) * 4;
    cudaCheck(cudaMemcpy(bias, hb.data(), sizeof(float) * N, cudaMemcpyHostToDevice));
    TestLaunch t;
    test_launch_init(&t);
    t.L.lt_scratch = scratch;
    t.L.lt_scratch_n = (size_t)M * N;
    for (int k = 0; k < 2; k++) {  // hand-written, then cuBLASLt
        cudaCheck(cudaMalloc(&C[k], sizeof(floatX) * M * N));
        cudaCheck(cudaMalloc(&out[k], sizeof(float) * M * N));
        t.L.sw.cublaslt = k;
        Epilogue e = epi_x(C[k], N);
        e.bias = bias;
        matmul(&t.L, MM_NT, M, N, K, A, Bm, e);
        to_f32(&t.L, out[k], C[k], (size_t)M * N);
    }
    cudaCheck(cudaDeviceSynchronize());
    float *h0 = d2h(out[0], (size_t)M * N), *h1 = d2h(out[1], (size_t)M * N);
    double err = max_rel_err(h1, h0, (size_t)M * N);
    CHECK(t.seam.cublaslt == 1 && err <= 1.0 / 1024,
          "an FP16 output with a bias: cuBLASLt's product plus the epilogue kernel's bias match the hand-written "
          "kernel within one FP16 unit (rel err %.2e)", err);
    free(h0); free(h1);
    for (int k = 0; k < 2; k++) { cudaCheck(cudaFree(C[k])); cudaCheck(cudaFree(out[k])); }
    cudaCheck(cudaFree(A)); cudaCheck(cudaFree(Bm)); cudaCheck(cudaFree(bias)); cudaCheck(cudaFree(scratch));
    test_launch_free(&t);
}

// A bounded grid (Launch.grid_bound: switch overlap's weight gradients beside the backward loop): fewer
// blocks than tiles, which walk the tiles in turn, in the weight gradients' layout (TN; the others
// launch their whole grid), both tiles, a split product; against the exact sums and cuBLASLt as the
// other products, and the launches counted as walking.
static void test_bounded_grid(void) {
#if !GPU_FP16
    printf("skip  the bounded grid: the FP32 build's SIMT kernel is not bounded\n");
#else
    printf("-- matmul on a bounded grid: 2 blocks walk the tiles (%s)\n", precision_name);
    TestLaunch t;
    test_launch_init(&t);
    const int tiles[][3] = {{256, 384, 64}, {192, 128, 96}};  // 128x128: 6 tiles; 64x64: 6 tiles
    int n = 0;
    t.L.grid_bound = 2;
    for (int i = 0; i < 2; i++)
        for (int L = 0; L < 3; L++) {
            t.L.sms = i ? 64 : 1;  // the 128x128 tile for the first, the 64x64 for the second
            Shape s = {"bounded", L, tiles[i][0], tiles[i][1], tiles[i][2]};
            matmul_shape(&t.L, &s, 0);
            n += L == MM_TN;
        }
    // a split product on a bounded grid: 1 block per split walks the tiles of its split
    t.L.sw.splitk = 1;
    t.seam.split_min_k = 32;
    t.L.sms = 4;
    t.L.splitk_ws_n = splitk_ws_floats(t.L.sms);
    cudaCheck(cudaMalloc(&t.L.splitk_ws, sizeof(float) * t.L.splitk_ws_n));
    Shape s = {"bounded", MM_TN, 256, 128, 256};
    matmul_shape(&t.L, &s, 0);
    n++;
    CHECK(t.seam.splitk > 0, "the split product split (%ld)", t.seam.splitk);
    CHECK(t.seam.walking == n, "the %d products ran on at most 2 blocks walking their tiles (%ld launches)", n,
          t.seam.walking);
    cudaCheck(cudaFree(t.L.splitk_ws));
    test_launch_free(&t);
#endif
}

// The bias gradients' column sums (train.cu's colsum) against sums in double, odd shapes; and the
// launch shape at the paper's sizes. An FP32 sum of n terms in any order is within (n - 1) 2^-24 of
// the sum of their magnitudes; the launch for b_out (V = 256 columns over B T = 65536 rows) has blocks
// for every SM several times over and few rows a thread.
static void test_colsum(void) {
    printf("-- colsum: bias gradients' column sums (%s)\n", precision_name);
    TestLaunch t;
    test_launch_init(&t);
    const int shapes[][2] = {{1, 5}, {37, 300}, {1000, 256}, {70001, 3}};  // rows, cols
    for (int i = 0; i < 4; i++) {
        const int rows = shapes[i][0], cols = shapes[i][1];
        floatX *x;
        float *part, *out;
        cudaCheck(cudaMalloc(&x, sizeof(floatX) * rows * cols));
        cudaCheck(cudaMalloc(&part, sizeof(float) * colsum_part_floats(cols)));
        cudaCheck(cudaMalloc(&out, sizeof(float) * cols));
        fill_kernel<<<64, 256>>>(x, (size_t)rows * cols, 7 + i);
        launchCheck();
        colsum(&t.L, out, part, x, rows, cols, 0.5f);
        float *got = d2h(out, cols);
        double worst = 0;
        for (int c = 0; c < cols; c++) {
            double ref = 0, mag = 0;
            for (int r = 0; r < rows; r++) {
                double v = tof(tox(hval(7 + i, (uint64_t)r * cols + c)));
                ref += v;
                mag += fabs(v);
            }
            double e = fabs(got[c] - 0.5 * ref) / (0.5 * mag * (rows > 1 ? rows - 1 : 1) / 16777216.0);
            worst = e > worst || !(e <= 1e300) ? e : worst;
        }
        CHECK(worst <= 1, "colsum of %d x %d: error %.2f of the bound (n - 1) 2^-24 sum|x| (%d chunks)", rows, cols,
              worst, colsum_chunks(rows, cols));
        free(got);
        cudaCheck(cudaFree(x)); cudaCheck(cudaFree(part)); cudaCheck(cudaFree(out));
    }
    const int N = 256 * 256, V = 256, chunks = colsum_chunks(N, V);
    const int blocks = ceil_div(V, BLOCK_THREADS) * chunks, rows_per_thread = ceil_div(N, chunks);
    CHECK(blocks >= 1024 && rows_per_thread <= 64,
          "b_out at B = 256, T = 256: %d blocks (an H200 has 132 SMs), %d rows a thread", blocks, rows_per_thread);
    test_launch_free(&t);
}

// ----------------------------------------------------------------------------
// Benchmarks (dev/gpu_check.sh reads the bench_* lines).

// The loss scale the trainer starts at (train.h): the FP16 cap, or 1.
static double start_scale(void) {
    LossScaler ls;
    loss_scaler_init(&ls, GPU_FP16);
    loss_scaler_cap(&ls, trainer_max_loss_scale());
    return ls.scale;
}

// Every model shape at B (H=4096, D=64, T=256 unless given), ours beside cuBLASLt; the per-step
// products (mh, z, dm, dh: latency-bound at small B) also at 2 and 4 pipeline stages, so the
// time per slab in flight is measured: t = slabs x latency / (stages - 1) when latency-bound.
#if GPU_FP16
static int is_per_step(const char *what) {
    return !strcmp(what, "mh") || !strcmp(what, "z") || !strcmp(what, "dm") || !strcmp(what, "dh");
}
#endif
static void bench_matmul(int B, int H, int D, int T, int reps) {
    TestLaunch t;
    test_launch_init(&t);
    Shape shapes[MAX_SHAPES] = {};
    int n = step_shapes(shapes, H, D, B, T);
    for (int i = 0; i < n; i++) matmul_shape(&t.L, &shapes[i], reps);
#if GPU_FP16
    for (int st = 2; st <= 4; st += 2) {
        if (!depth_offered(st, "bench_matmul")) continue;
        t.seam.wmma_stages = st;
        for (int i = 0; i < n; i++)
            if (is_per_step(shapes[i].what)) matmul_shape(&t.L, &shapes[i], reps);
        t.seam.wmma_stages = WMMA_STAGES;
    }
#endif
    test_launch_free(&t);
}

// The kernels of one forward and one backward time step (mh, z, cell_fwd; cell_bwd, dm, dh),
// each timed by events around its launch (the seam's step_events), the mean over `steps` consecutive time
// steps from the
// middle of the sequence, after one training step has filled the activations. In the step's own
// order, so that W_mh and W_h come from DRAM as in training (timed alone and repeated, W_mh's
// 33.5 MB would stay in L2). Prints bench_kernel lines (gpu_check.sh sets them beside
// perf_model.py's predict_kernel lines); returns the forward + backward time step in us.
static double bench_kernels(MlstmConfig cfg, int B, int T, int steps) {
    const int N = B * T, H = cfg.H;
    Model *md = model_for(cfg, B, T, 1);
    uint8_t *in = (uint8_t *)mallocCheck(N), *tg = (uint8_t *)mallocCheck(N), *rs = (uint8_t *)mallocCheck(N);
    random_batch(in, tg, rs, B, T, 77);
    memset(rs, 0, N);
    model_step(md, in, tg, rs, start_scale());
    cudaEvent_t ev[4];
    for (int i = 0; i < 4; i++) cudaCheck(cudaEventCreate(&ev[i]));
    md->seam.step_events = ev;
    double us[2][3] = {{0}};
    int t0 = T / 2 - steps / 2 > 0 ? T / 2 - steps / 2 : 0;
    if (t0 + steps > T) steps = T - t0;
    for (int dir = 0; dir < 2; dir++)
        for (int i = 0; i < steps; i++) {
            if (dir == 0) forward_step(md, t0 + i);
            else backward_step(md, t0 + steps - 1 - i);
            cudaCheck(cudaEventSynchronize(ev[3]));
            for (int k = 0; k < 3; k++) {
                float ms;
                cudaCheck(cudaEventElapsedTime(&ms, ev[k], ev[k + 1]));
                us[dir][k] += 1e3 * ms / steps;
            }
        }
    const char *names[2][3] = {{"mh", "z", "cell_fwd"}, {"cell_bwd", "dm", "dh"}};
    md->seam.step_events = NULL;
    const Launch *L = &md->launch;
    const int plans[2][3] = {{matmul_plan(L, B, H, H, NULL, NULL), matmul_plan(L, B, 4 * H, H, NULL, NULL), -1},
                             {-1, matmul_plan(L, B, H, 4 * H, NULL, NULL), matmul_plan(L, B, H, H, NULL, NULL)}};
    double total = 0;
    for (int dir = 0; dir < 2; dir++)
        for (int k = 0; k < 3; k++) {
            printf("bench_kernel precision=%s B=%d T=%d H=%d what=%s plan=%s us=%.2f\n", precision_name, B, T, H,
                   names[dir][k], plans[dir][k] < 0 ? "cell" : plan_names[plans[dir][k]], us[dir][k]);
            total += us[dir][k];
        }
    printf("bench_kernel precision=%s B=%d T=%d H=%d what=time_step plan=- us=%.2f\n", precision_name, B, T, H, total);
    for (int i = 0; i < 4; i++) cudaCheck(cudaEventDestroy(ev[i]));
    model_free(md);
    free(in); free(tg); free(rs);
    return total;
}

// The two bandwidths dev/perf_model.py assumes (l2_gbs; hbm_gbs x mem_eff), measured by a device copy
// of 16-byte loads and stores repeated `reps` times, timed by events: from DRAM with buffers of
// dram_bytes; from L2 with buffers of l2_bytes / 2 and of l2_bytes (all within the L2, which keeps
// them between repetitions). Bandwidth is the bytes read plus written over the time; for L2 the
// difference of the two sizes over the difference of their times, which takes out each launch's fixed
// cost (a copy that stays in L2 lasts a few microseconds). Prints bench_copy lines (dev/gpu_check.sh
// sets them beside the model's constants); returns the L2 bandwidth in GB/s.
__global__ void copy16_kernel(uint4 *dst, const uint4 *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
static double bench_copy(size_t dram_bytes, size_t l2_bytes, int reps) {
    const struct { const char *what; size_t bytes; } runs[] = {
        {"dram", dram_bytes}, {"l2_half", l2_bytes / 2}, {"l2", l2_bytes}};
    double us[3];
    for (int r = 0; r < 3; r++) {
        const size_t n = runs[r].bytes / sizeof(uint4);
        uint4 *a, *b;
        cudaCheck(cudaMalloc(&a, n * sizeof(uint4)));
        cudaCheck(cudaMalloc(&b, n * sizeof(uint4)));
        cudaCheck(cudaMemset(a, 0x3c, n * sizeof(uint4)));
        const int blocks = (int)std::min<size_t>(8L * gpu_setup()->prop.multiProcessorCount, (n + 255) / 256);
        cudaEvent_t e0, e1;
        cudaCheck(cudaEventCreate(&e0));
        cudaCheck(cudaEventCreate(&e1));
        copy16_kernel<<<blocks, 256>>>(b, a, n);  // warm-up (and the L2 filled)
        launchCheck();
        cudaCheck(cudaEventRecord(e0));
        for (int k = 0; k < reps; k++) copy16_kernel<<<blocks, 256>>>(k % 2 ? a : b, k % 2 ? b : a, n);
        cudaCheck(cudaEventRecord(e1));
        cudaCheck(cudaEventSynchronize(e1));
        launchCheck();
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        us[r] = 1e3 * ms / reps;
        printf("bench_copy what=%s bytes=%zu reps=%d us=%.2f gbs=%.0f\n", runs[r].what, n * sizeof(uint4), reps,
               us[r], 2.0 * n * sizeof(uint4) / (us[r] * 1e-6) / 1e9);
        cudaCheck(cudaEventDestroy(e0)); cudaCheck(cudaEventDestroy(e1));
        cudaCheck(cudaFree(a)); cudaCheck(cudaFree(b));
    }
    const double gbs = 2.0 * (runs[2].bytes - runs[1].bytes) / ((us[2] - us[1]) * 1e-6) / 1e9;
    printf("bench_copy what=l2_slope bytes=%zu reps=%d us=%.2f gbs=%.0f\n", runs[2].bytes - runs[1].bytes, reps,
           us[2] - us[1], gbs);
    return gbs;
}

// The switches that are on, by the names dev/gpu_check.sh's report gives the benchmark's variants:
// as-is, splitk, overlap, l2, warp64, cublaslt, all-wmma (the four of the hand-written matmul), all
// (splitk, overlap, l2 and cublaslt, which leaves warp64 nothing to change); other sets joined by '+'.
static void switches_name(const Switches *s, char *out, size_t n) {
    int k = s->splitk + s->overlap + s->l2;
    if (k == 3 && (s->cublaslt || s->warp64)) {
        snprintf(out, n, "%s", s->cublaslt ? "all" : "all-wmma");
        return;
    }
    snprintf(out, n, "%s%s%s%s%s", s->splitk ? "+splitk" : "", s->overlap ? "+overlap" : "", s->l2 ? "+l2" : "",
             s->warp64 ? "+warp64" : "", s->cublaslt ? "+cublaslt" : "");
    if (!out[0]) snprintf(out, n, "as-is");
    else memmove(out, out + 1, strlen(out));
}

// A benchmark's count from the command line: a whole number in 1..max, else one line naming the
// flag and exit 2 (a count that is not one would otherwise fall through to the tests, or size
// B x T buffers from a negative number).
#define BENCH_MAX_B 4096  // B x T rows stay far inside int; whether they fit on the GPU, its allocation says
static int bench_count(const char *flag, const char *what, const char *text, long max) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < 1 || v > max) {
        fprintf(stderr, "error: %s: %s '%s' is not a whole number in 1..%ld\n", flag, what, text, max);
        exit(2);
    }
    return (int)v;
}

// Returns 0, or 1 when a loss was not finite or every timed step was skipped: a fast
// step that computes nothing is not a result.
static int bench_step(int B, int steps) {
    MlstmConfig cfg = {256, 64, 4096, 1};
    const int T = 256;
    const size_t N = (size_t)B * T;  // (B is 1..BENCH_MAX_B: bench_count)
    Model *md = model_for(cfg, B, T, 1);
    uint8_t *in = (uint8_t *)mallocCheck(N), *tg = (uint8_t *)mallocCheck(N), *rs = (uint8_t *)mallocCheck(N);
    LossScaler ls;
    loss_scaler_init(&ls, GPU_FP16);
    loss_scaler_cap(&ls, trainer_max_loss_scale());  // as the trainer
    LrSettings lrs = lr_settings_default();
    lrs.rule = LR_CONSTANT; lrs.decay = DECAY_NONE; lrs.warmup = 0;
    long applied = 0;
    double t0 = 0, loss = 0;
    int skipped = 0, nonfinite = 0;
    for (int s = -1; s < steps; s++) {  // step -1 is the warm-up
        if (s == 0) { cudaCheck(cudaDeviceSynchronize()); t0 = now_seconds(); }
        random_batch(in, tg, rs, B, T, 1000 + s);
        memset(rs, 0, N);
        loss = model_step(md, in, tg, rs, ls.scale);
        model_allreduce(md);
        StepDecision d = decide_step(&ls, &lrs, &applied, B, model_check(md).overflow);
        if (d.apply) model_apply(md, d.inv_scale, d.lr, applied);
        else if (s >= 0) skipped++;
        nonfinite += !isfinite(loss);
        fprintf(stderr, "  bench B=%d step %d/%d loss %.3f\n", B, s + 1, steps, loss);
    }
    cudaCheck(cudaDeviceSynchronize());
    double dt = now_seconds() - t0, cps = (double)N * steps / dt;
    char variant[64];
    switches_name(&md->launch.sw, variant, sizeof variant);
    // direct: MLSTM_NO_GRAPH=1
    const char *kind = md->launch.sw.cublaslt ? "cublaslt" : md->use_graphs ? "ours" : "ours-direct";
    printf("bench_step precision=%s matmul=%s variant=%s B=%d T=%d H=4096 steps=%d seconds=%.3f chars_per_s=%.0f "
           "tflops=%.2f skipped=%d\n", precision_name, kind, variant, B, T, steps, dt, cps,
           3 * flops_per_char(&cfg) * cps / 1e12, skipped);
    model_free(md);
    free(in); free(tg); free(rs);
    if (nonfinite || skipped == steps) {
        fprintf(stderr, "error: bench_step B=%d: %d non-finite losses, %d of %d steps skipped\n", B, nonfinite,
                skipped, steps);
        return 1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// The run-time switches (train.cu's Switches, doc/gpu.md), each on alone and all together, set as
// a user sets them (the environment, --matmul), against mlstm.h: one step of the tile model from a
// carried-in state, every tensor as test_model checks it, and what each switch must have done
// (the model's seam counts the paths its products took). The products are planned for 4 SMs and
// split-K's minimum depth is 32 (the seam's knob), so that split-K splits these small products as
// it splits the paper's.

#ifdef CUDACPU
static const bool on_cpu_layer = true;
#else
static const bool on_cpu_layer = false;
#endif
// The share of an L2 window of `window` bytes that persists with `granted` bytes set aside.
static float l2_share(size_t granted, size_t window) { return window <= granted ? 1.f : (float)granted / window; }
// Switch l2's window persists as much as the driver set aside, read back: CUDA promises no set-aside
// (a driver rounds it to units of its own, and may give less than asked). On the CPU layer the grant
// is capped at half the window (CUDACPU_L2_GRANT_MAX; a GPU ignores it): the window's hit ratio then
// is 0.5, where taking the request as granted would say 1 and evict its own lines.
static void test_l2_granted(void) {
    const cudaDeviceProp &prop = gpu_setup()->prop;
    if (prop.persistingL2CacheMaxSize <= 0) {
        printf("skip  switch l2's granted set-aside: no persisting L2 on this device\n");
        return;
    }
    const MlstmConfig cfg = {256, 32, 64, 1};  // W_mh: 64 x 64 FP16 = 8 KB (16 KB in FP32)
    const size_t window = (size_t)cfg.H * cfg.H * sizeof(floatX);
    char half[32];
    snprintf(half, sizeof half, "%zu", window / 2);
    setenv("CUDACPU_L2_GRANT_MAX", half, 1);
    const SwitchRun l2 = {"l2", 0, 0, 1, 0, 0}, off = {"as-is", 0, 0, 0, 0, 0};
    set_switch_env(&l2);
    Model *md = model_for(cfg, 8, 4, 5);
    cudaStreamAttrValue a;
    cudaCheck(cudaStreamGetAttribute(md->launch.stream, cudaStreamAttributeAccessPolicyWindow, &a));
    size_t granted = 0;
    cudaCheck(cudaDeviceGetLimit(&granted, cudaLimitPersistingL2CacheSize));
    CHECK(a.accessPolicyWindow.num_bytes == window && granted > 0 &&
              a.accessPolicyWindow.hitRatio == l2_share(granted, window) && (!on_cpu_layer || granted == window / 2),
          "switch l2: a window of %zu bytes, %zu set aside (read back), hit ratio %g: what was granted persists",
          window, granted, a.accessPolicyWindow.hitRatio);
    model_free(md);
    set_switch_env(&off);
    unsetenv("CUDACPU_L2_GRANT_MAX");
}

static void test_switches(void) {
    printf("-- the run-time switches against mlstm.h (%s)\n", precision_name);
    MlstmConfig cfg = {256, 32, 64, 1};  // every product on a tensor-core tile, T a multiple of the overlap's 4 chunks
    const int B = 64, T = 4, H = cfg.H;
    StepCase sc;
    step_case_init(&sc, cfg, B, T, 41, BIAS_RANDOM);
    const SwitchRun all[] = {{"as-is", 0, 0, 0, 0, 0},    {"splitk", 1, 0, 0, 0, 0},   {"overlap", 0, 1, 0, 0, 0},
                             {"l2", 0, 0, 1, 0, 0},       {"warp64", 0, 0, 0, 1, 0},   {"cublaslt", 0, 0, 0, 0, 1},
                             {"all-wmma", 1, 1, 1, 1, 0}, {"all", 1, 1, 1, 1, 1}},
                   few[] = {{"as-is", 0, 0, 0, 0, 0}, {"all", 1, 1, 1, 1, 1}};
    // Each switch alone in the FP16 builds (lockstep, and sm_75 under reverse: both schedules); the
    // FP32, debug and sanitizer builds, which add no schedule, run as-is and all of them together
    // (every new path once, at a third of the cost: CI's budget).
#if GPU_FP16 && !defined(GPU_DEBUG) && !defined(__SANITIZE_ADDRESS__)
    const std::vector<SwitchRun> runs(all, all + sizeof all / sizeof all[0]);
    (void)few;
#else
    const std::vector<SwitchRun> runs(few, few + sizeof few / sizeof few[0]);
    (void)all;
#endif
    float *ref_grads = NULL;
    double ref_loss = 0;
    for (const SwitchRun &r : runs) {
        if (r.cublaslt && !GPU_CUBLASLT) {
            printf("skip  [%s]: built without cuBLASLt\n", r.name);
            continue;
        }
        set_switch_env(&r);
        Model *md = model_for(cfg, B, T, 41);
        plan_for_sms(md, 4);
        md->seam.split_min_k = 32;
        char label[48];
        snprintf(label, sizeof label, "[%s] ", r.name);
        if (&r == &runs[0]) {  // the streams' priorities: the loop's the device's highest, switch overlap's lowest
            int least, greatest, p_main, p_wgrad;
            cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
            cudaCheck(cudaStreamGetPriority(md->launch.stream, &p_main));
            cudaCheck(cudaStreamGetPriority(md->stream2, &p_wgrad));
            CHECK(p_main == greatest && p_wgrad == least && greatest < least,
                  "the main stream at the highest priority (%d), the weight gradients' stream at the lowest (%d)",
                  p_main, p_wgrad);
        }
        check_step(&sc, md, label);
        const Seam &seen = md->seam;
        // Switch overlap: chunks 0-2 of the 4 run beside the loop on a bounded grid, dW_h and dW_mh each (4 SMs
        // seen: ours 4 blocks, cuBLASLt planned for 2 SMs); the last after it on the whole GPU
        const long want = r.overlap ? 6 : 0;
        CHECK(seen.bounded == want, "[%s] %ld products on a bounded grid (%ld expected)", r.name, seen.bounded, want);
        // beside the loop, on the second stream: a workspace the loop's products also used would be
        // overwritten under them on a GPU (the layer replays the two branches without interleaving them)
        if (r.overlap) {
            const Launch w = wgrad_launch(md, 0), &m = md->launch;
            CHECK(w.stream == md->stream2 && w.stream != m.stream &&
                      (!r.splitk || (w.splitk_ws && w.splitk_ws != m.splitk_ws)) &&
                      (!r.cublaslt || (w.lt_ws && w.lt_ws != m.lt_ws)),
                  "[%s] the weight gradients beside the loop launch on the second stream, with its own workspaces",
                  r.name);
        }
#if GPU_CUBLASLT
        if (r.overlap && r.cublaslt) {
            int targeted = 0;
            for (const LtPlan *p = md->lt->plans; p; p = p->next) targeted += p->key.sm_target == md->launch.sms / 2;
            CHECK(targeted >= 2, "[%s] cuBLASLt planned the weight gradients beside the loop for %d SMs (%d plans)",
                  r.name, md->launch.sms / 2, targeted);
        }
#endif
        const long splits = seen.splitk, lt_launched = seen.cublaslt, wmma128[2] = {seen.wmma128[0], seen.wmma128[1]};
        float *grads = d2h(md->grads, md->np);
        double loss = model_eval(md, sc.in, sc.tg, sc.rs, 1);  // (the validation path, with the switches too)
        if (r.l2) {
            const cudaDeviceProp &prop = gpu_setup()->prop;
            cudaStreamAttrValue a;
            cudaCheck(cudaStreamGetAttribute(md->launch.stream, cudaStreamAttributeAccessPolicyWindow, &a));
            size_t limit = 0;
            cudaCheck(cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize));
            const cudaAccessPolicyWindow &w = a.accessPolicyWindow;
            if (prop.persistingL2CacheMaxSize > 0)
                CHECK(w.base_ptr == (void *)md->W[WN_MH] && w.num_bytes == (size_t)H * H * sizeof(floatX) &&
                          w.hitProp == cudaAccessPropertyPersisting && w.hitRatio == l2_share(limit, w.num_bytes),
                      "[%s] the stream's L2 window is W_mh (%zu bytes, persisting, hit ratio %g), %zu bytes set aside "
                      "(read back: the hit ratio is the share of the window it covers)",
                      r.name, w.num_bytes, w.hitRatio, limit);
            else
                CHECK(w.num_bytes == 0, "[%s] no persisting L2 on this device (sm_%d): no window", r.name,
                      prop.major * 10 + prop.minor);
        }
        if (!ref_grads) {
            ref_grads = grads;
            ref_loss = loss;
        } else {
            if (r.splitk && GPU_FP16 && !r.cublaslt)
                CHECK(splits > 0, "[%s] split-K split %ld products of the step", r.name, splits);
            if (r.cublaslt)
                CHECK(lt_launched >= 13 && splits == 0,
                      "[%s] every product of the step through cuBLASLt (%ld launches), none split by ours", r.name,
                      lt_launched);
            // l2 and warp64 move no bits (a warp of 64x64 runs each fragment's mma in the same k order); the
            // others sum in another order
            if (!r.splitk && !r.overlap && !r.cublaslt)
                CHECK(!memcmp(grads, ref_grads, sizeof(float) * md->np) && loss == ref_loss,
                      "[%s] gradients and validation loss bit for bit those of as-is", r.name);
            if (r.warp64 && GPU_FP16 && !r.cublaslt)
                CHECK(wmma128[1] > 0 && wmma128[0] == 0,
                      "[%s] every 128x128 product of the step as 4 warps of 64x64 (%ld launches), none as 8 of 64x32",
                      r.name, wmma128[1]);
            if (r.overlap && md->use_graphs) {
                // the graph's fork and join, replayed in an order the dependencies allow (the reverse
                // schedule runs the latest-captured ready node first), against the direct path
                setenv("MLSTM_NO_GRAPH", "1", 1);
                Model *direct = model_for(cfg, B, T, 41);
                plan_for_sms(direct, 4);
                direct->seam.split_min_k = 32;
                unsetenv("MLSTM_NO_GRAPH");
                check_step(&sc, direct, "[overlap, direct] ");
                float *dg = d2h(direct->grads, direct->np);
                CHECK(!memcmp(dg, grads, sizeof(float) * md->np),
                      "[%s] graph (forked, joined) == direct path, bit for bit", r.name);
                free(dg);
                model_free(direct);
            }
            free(grads);
        }
        model_free(md);
    }
    free(ref_grads);
    step_case_free(&sc);
    // cuBLASLt on odd shapes, whose per-step operands are not 256-byte aligned (B H % 128 != 0: row t B
    // of a (T,B,H) FP16 tensor is aligned to 2 B H t bytes): each plan states the alignment it was
    // given, and the CPU layer refuses a pointer less aligned than its algorithm was chosen for
#if GPU_CUBLASLT
    const SwitchRun lt = {"cublaslt", 0, 0, 0, 0, 1};
    set_switch_env(&lt);
    const struct { MlstmConfig cfg; int B, T; } odd[] = {{{256, 12, 40, 1}, 3, 5}, {{256, 16, 40, 0}, 100, 4}};
    for (int i = 0; i < 2; i++) {
        StepCase oc;
        step_case_init(&oc, odd[i].cfg, odd[i].B, odd[i].T, 61 + i, BIAS_RANDOM);
        Model *md = model_for(odd[i].cfg, odd[i].B, odd[i].T, 61 + i);
        char label[64];
        snprintf(label, sizeof label, "[cublaslt, H=%d B=%d] ", odd[i].cfg.H, odd[i].B);
        check_step(&oc, md, label);
        int below = 0, made = 0;
        for (const LtPlan *p = md->lt->plans; p; p = p->next, made++)
            below += p->key.align[0] < 256 || p->key.align[1] < 256 || p->key.align[3] < 256;
        CHECK(below > 0, "%s%d of its %d new plans for operands aligned to less than 256 bytes", label, below, made);
        model_free(md);
        step_case_free(&oc);
    }
#endif
    SwitchRun off = {"as-is", 0, 0, 0, 0, 0};
    set_switch_env(&off);
}

// Two models in one process, as the trainer's training and validation models (--val-batch gives
// the validation model its own B): each launches through its own context, so neither's settings,
// streams, workspaces, plans or L2 window reach the other's launches. Model a runs switches splitk
// and overlap planned for 4 SMs with split-K's depth lowered to 32; model b, at twice the rows,
// switch l2 on the device's SMs. Their calls interleaved (a's step, b's validation, a's update,
// b's validation, a's step) give what each gives alone, bit for bit, and each seam counts only its
// own model's products.
static void test_two_models(void) {
    printf("-- two models with different settings, interleaved (%s)\n", precision_name);
    const MlstmConfig cfg = {256, 32, 64, 1};
    const int T = 4, Ba = 64, Bb = 128;
    uint8_t *in = (uint8_t *)mallocCheck(Bb * T), *tg = (uint8_t *)mallocCheck(Bb * T);
    uint8_t *rs = (uint8_t *)mallocCheck(Bb * T);
    const SwitchRun a_sw = {"splitk+overlap", 1, 1, 0, 0, 0}, b_sw = {"l2", 0, 0, 1, 0, 0};
    const SwitchRun off = {"as-is", 0, 0, 0, 0, 0};
    Model *m[2][2];  // [alone, interleaved][a, b]
    for (int k = 0; k < 2; k++) {
        set_switch_env(&a_sw);
        m[k][0] = model_for(cfg, Ba, T, 71);
        plan_for_sms(m[k][0], 4);
        m[k][0]->seam.split_min_k = 32;
        set_switch_env(&b_sw);
        m[k][1] = model_for(cfg, Bb, T, 72);
    }
    set_switch_env(&off);
    // the calls: (model, what) with what 0 a step, 1 Adam's update, 2 a validation forward
    const int calls[][2] = {{0, 0}, {1, 2}, {0, 1}, {1, 2}, {0, 0}};
    const int ncalls = (int)(sizeof calls / sizeof calls[0]);
    double got[2][5] = {{0}};
    for (int k = 0; k < 2; k++) {
        int order[5];
        for (int i = 0; i < ncalls; i++) order[i] = i;
        if (k == 0) std::stable_sort(order, order + ncalls, [&](int x, int y) { return calls[x][0] < calls[y][0]; });
        for (int q = 0; q < ncalls; q++) {  // alone: a's calls, then b's; interleaved: in the list's order
            const int i = order[q], which = calls[i][0], what = calls[i][1], B = which ? Bb : Ba;
            Model *md = m[k][which];
            random_batch(in, tg, rs, B, T, 500 + i);
            if (what == 0) got[k][i] = model_step(md, in, tg, rs, start_scale());
            else if (what == 1) model_apply(md, 1.0 / start_scale(), 1e-3, 1);
            else got[k][i] = model_eval(md, in, tg, rs, 1);
        }
    }
    for (int which = 0; which < 2; which++) {
        float *g0 = d2h(m[0][which]->grads, m[0][which]->np), *g1 = d2h(m[1][which]->grads, m[1][which]->np);
        float *p0 = d2h(m[0][which]->params, m[0][which]->np), *p1 = d2h(m[1][which]->params, m[1][which]->np);
        const size_t bytes = sizeof(float) * m[0][which]->np;
        int same = !memcmp(g0, g1, bytes) && !memcmp(p0, p1, bytes);
        for (int i = 0; i < ncalls; i++) same &= calls[i][0] != which || got[0][i] == got[1][i];
        CHECK(same, "model %c (%s) interleaved with the other: losses, gradients and weights bit for bit its own "
              "alone", "ab"[which], which ? b_sw.name : a_sw.name);
        free(g0); free(g1); free(p0); free(p1);
    }
    const Seam &sa = m[1][0]->seam, &sb = m[1][1]->seam;
    CHECK(sb.splitk == 0 && sb.bounded == 0 && (!GPU_FP16 || sa.splitk > 0) && sa.bounded > 0,
          "each seam counts its own model's products: a split %ld and bounded %ld, b split %ld and bounded %ld",
          sa.splitk, sa.bounded, sb.splitk, sb.bounded);
    cudaStreamAttrValue wa, wb;
    cudaCheck(cudaStreamGetAttribute(m[1][0]->launch.stream, cudaStreamAttributeAccessPolicyWindow, &wa));
    cudaCheck(cudaStreamGetAttribute(m[1][1]->launch.stream, cudaStreamAttributeAccessPolicyWindow, &wb));
    const bool persisting = gpu_setup()->prop.persistingL2CacheMaxSize > 0;
    CHECK(m[1][0]->launch.stream != m[1][1]->launch.stream && wa.accessPolicyWindow.num_bytes == 0 &&
              (!persisting || wb.accessPolicyWindow.base_ptr == (void *)m[1][1]->W[WN_MH]),
          "each model launches on its own stream, b's with b's W_mh in its L2 window, a's with none");
    for (int k = 0; k < 2; k++) {
        model_free(m[k][0]);
        model_free(m[k][1]);
    }
    free(in); free(tg); free(rs);
}

// The benchmarks' own paths (per-kernel events around the step functions, the matmul at every
// depth) at a small size: they must run here before their first GPU run, where time is short.
static void test_bench_paths(void) {
    printf("-- the benchmarks' paths, small (%s)\n", precision_name);
    double us = bench_kernels((MlstmConfig){256, 16, 64, 1}, 64, 8, 4);
    CHECK(us > 0 && us < 1e9, "bench_kernels: the six kernels of a time step timed by events (%.0f us here)", us);
    bench_matmul(64, 64, 16, 8, 1);
    CHECK(1, "bench_matmul: every shape at B=64 H=64 D=16 T=8, the per-step ones at every depth");
    double gbs = bench_copy(1 << 16, 1 << 15, 2);
    CHECK(!isnan(gbs), "bench_copy: a DRAM-sized and two L2-sized copies timed by events (%.0f GB/s here)", gbs);
}

// Whether --only's comma-separated list (NULL: every group) names this group.
static bool group_selected(const char *only, const char *name) {
    size_t n = strlen(name);
    for (const char *g = only; g && *g; g += strcspn(g, ",") + (g[strcspn(g, ",")] == ','))
        if (strcspn(g, ",") == n && !strncmp(g, name, n)) return true;
    return !only;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int ndev = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err != cudaSuccess || ndev == 0) {
        printf("test_gpu: no usable CUDA GPU (%s); this test needs one (run dev/gpu_check.sh on a GPU machine)\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        CHECK(0, "a CUDA GPU is present");
        return test_summary("test_gpu");
    }
    int quick = 0, bench_b = 0, bench_steps = 0, bench_mm = 0, bench_k = 0, bench_c = 0;
#ifdef GPU_DEBUG
    int bad = 0;
#endif
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--matmul") && i + 1 < argc) {
            const char *kind = argv[++i];
            if (strcmp(kind, "wmma") && strcmp(kind, "cublaslt")) {
                fprintf(stderr, "error: --matmul %s: expected wmma or cublaslt\n", kind);
                return 2;
            }
            if (!strcmp(kind, "cublaslt") && !GPU_CUBLASLT) {
                fprintf(stderr, "error: --matmul cublaslt: this build has no cuBLASLt (make probe says why)\n");
                return 2;
            }
            matmul_kind = strcmp(kind, "cublaslt") ? MATMUL_WMMA : MATMUL_CUBLASLT;
        }
        else if (!strcmp(argv[i], "--bench-step") && i + 2 < argc) {
            bench_b = bench_count("--bench-step", "B", argv[++i], BENCH_MAX_B);
            bench_steps = bench_count("--bench-step", "STEPS", argv[++i], 1000000);
        }
        else if (!strcmp(argv[i], "--bench-matmul") && i + 1 < argc)
            bench_mm = bench_count("--bench-matmul", "B", argv[++i], BENCH_MAX_B);
        else if (!strcmp(argv[i], "--bench-kernels") && i + 1 < argc)
            bench_k = bench_count("--bench-kernels", "B", argv[++i], BENCH_MAX_B);
        else if (!strcmp(argv[i], "--bench-copy")) bench_c = 1;
#ifdef GPU_DEBUG
        else if (!strcmp(argv[i], "--bad-launch")) bad = 1;  // test_debug_check's own process
#endif
        else {
            fprintf(stderr, "usage: %s [--quick] [--only GROUP[,GROUP...]] [--matmul wmma|cublaslt] "
                            "[--bench-step B STEPS] [--bench-matmul B] [--bench-kernels B] [--bench-copy]\n", argv[0]);
            return 2;
        }
    }
    gpu_setup();
#ifdef GPU_DEBUG
    if (bad) { bad_launch(); return 0; }
#endif
    if (bench_b > 0) return bench_step(bench_b, bench_steps);
    if (bench_mm > 0) {
        bench_matmul(bench_mm, 4096, 64, 256, 5);
        return 0;
    }
    if (bench_c) {
        bench_copy((size_t)1 << 30, (size_t)gpu_setup()->prop.l2CacheSize / 4, 200);
        return 0;
    }
    if (bench_k > 0) {
        bench_kernels((MlstmConfig){256, 64, 4096, 1}, bench_k, 256, 8);
        return 0;
    }
    printf("test_gpu: %s build; tolerances: logits %.0e loss %.0e gradients %.0e state %.0e ten losses %.0e"
           " matmul %.0e\n", precision_name, TOL_LOGITS, TOL_LOSS, TOL_GRAD, TOL_STATE, TOL_STEPS, TOL_MM);
    // --only GROUP[,GROUP...] runs those groups of checks (while working on one; CI runs the sanitized
    // build's groups in two processes): debug, matmul, model, precision, cap, overflow, simt, resume,
    // bench, switches
    const char *groups[] = {"debug", "matmul", "model", "precision", "cap", "overflow", "simt", "resume", "bench",
                            "switches"};
    const int ngroups = (int)(sizeof groups / sizeof groups[0]);
    for (const char *g = only; g && *g; g += strcspn(g, ",") + (g[strcspn(g, ",")] == ',')) {
        size_t len = strcspn(g, ",");
        int known = 0;
        for (int i = 0; i < ngroups; i++) known |= strlen(groups[i]) == len && !strncmp(g, groups[i], len);
        if (!known) {
            fprintf(stderr, "error: --only %.*s: not a group of checks (debug, matmul, model, precision, cap, "
                            "overflow, simt, resume, bench, switches)\n", (int)len, g);
            return 2;
        }
    }
// each group's seconds follow it (what makes the CPU layer's runs, and CI, slow)
#define GROUP(name, ...)                                                          \
    if (group_selected(only, name)) {                                             \
        double group_t0 = now_seconds();                                          \
        __VA_ARGS__;                                                              \
        printf("time  %s: %.1f s\n", name, now_seconds() - group_t0);             \
    }
#ifdef GPU_DEBUG
    GROUP("debug", test_debug_check());
#endif
    GROUP("matmul", test_matmul(quick); test_lt_plans(); test_lt_fp16_bias(); test_bounded_grid());
    // tensor-core tiles: 128x128 over all rows, 64x64 per step; odd sizes: the SIMT path; no weight norm
    GROUP("model", test_colsum(); test_model((MlstmConfig){256, 64, 128, 1}, 64, 8, 11, 1);
          test_model((MlstmConfig){256, 12, 40, 1}, 3, 5, 12, 0);
          test_model((MlstmConfig){256, 16, 64, 0}, 8, 6, 13, 0));
    GROUP("precision", test_precision(); test_saturated_gates());
    GROUP("cap", test_loss_scale_cap());
    GROUP("overflow", test_overflow());
    GROUP("simt", test_simt_warning());
    GROUP("resume", test_resume());
    GROUP("bench", test_bench_paths());
    GROUP("switches", test_switches(); test_two_models(); test_l2_granted());
#undef GROUP
    return test_summary("test_gpu");
}
