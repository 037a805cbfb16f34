// The CPU trainer's training step, phase by phase, against the bounds of this machine
// (dev/bench/cpu-perf.md): the step's time split into its phases (fast.h's FAST_PHASE
// points, and train.c's gradient check and update), each with its work (FLOPs for the
// products, bytes for the pointwise passes) and its rate as a fraction of its bound: the
// best large SGEMM on the same threads for the products, a streaming triad's memory
// bandwidth for the rest. Then the whole step against that SGEMM in CPU time, alternating
// (what a machine shared with other work still gives: wall-clock rates there depend on
// what else runs). The step is train.c's own: model_step (forward, backward, state
// carried), model_check (inf/NaN, the gradient norm) and model_apply (clip, Adam).
//   cc -O3 -march=native -ffp-contract=fast -std=c11 -D_GNU_SOURCE -fopenmp -I. dev/bench/step_vs_sgemm.c -lm
//   ./a.out H B T steps threads [SGEMM GFLOP/s] [bf16]
// bf16: the step with --bf16's products (the SGEMM stays FP32).
// With OpenBLAS's cblas.h: add -DUSE_CBLAS ... -lopenblas, and its sgemm is measured too. A
// given SGEMM rate (bench_cpu.sh passes MKL's, measured through PyTorch) counts when it is
// the highest. dev/bench/bench_cpu.sh runs it at B = 32 and 128, H = 256 and 1024.
#define main train_cpu_main  // the trainer whole, its main renamed: this file has its own
#define FAST_PHASES  // fast.h then times its phases into fast_phase_seconds
#include "train.c"   // defines: model_create, model_step, model_check, model_apply and via it fast.h
#undef main
#ifdef USE_CBLAS
#include <cblas.h>
#endif

static double wall_seconds(void) { return fast_phase_clock(); }
static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// The reference SGEMM, (M,K) . (K,N) with M, N, K = 2048, 1024, 4096: GFLOP/s per wall
// second and per CPU second of the process (meant for one thread), best of 3.
enum { SG_M = 2048, SG_N = 1024, SG_K = 4096 };
typedef struct { double wall, cpu; } Rate;
static Rate sgemm_rate(const float *a, const float *b, float *o, int use_blas) {
    Rate best = {0, 0};
    for (int r = 0; r < 3; r++) {
        double w = wall_seconds(), c = cpu_seconds();
#ifdef USE_CBLAS
        if (use_blas)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, SG_M, SG_N, SG_K, 1, a, SG_K, b, SG_N, 0, o, SG_N);
        else
#endif
            gemm_nn(o, a, b, SG_M, SG_N, SG_K, MATMUL_SET, GEMM_FP32);
        (void)use_blas;
        double flops = 2.0 * SG_M * SG_N * SG_K, gw = flops / (wall_seconds() - w) / 1e9;
        double gc = flops / (cpu_seconds() - c) / 1e9;
        best.wall = gw > best.wall ? gw : best.wall;
        best.cpu = gc > best.cpu ? gc : best.cpu;
    }
    return best;
}

// Memory bandwidth: a[i] = b[i] + s c[i] over 3 arrays of 128 MB (far beyond any L3 of
// today), 12 bytes per element as STREAM counts them, best of 5, on the same threads.
static double triad_gbs(void) {
    const size_t n = (size_t)32 << 20;
    float *a = mlstm_alloc(n), *b = mlstm_alloc(n), *c = mlstm_alloc(n);
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t = wall_seconds();
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        double g = 12.0 * n / (wall_seconds() - t) / 1e9;
        best = g > best ? g : best;
    }
    free(a); free(b); free(c);
    return best;
}

// The phases of the breakdown: fast.h's, less the two time loops (each becomes its
// phases plus the threads' waiting), and train.c's check and update.
enum { PH_WAIT_FWD = FP_COUNT, PH_WAIT_BWD, PH_CHECK, PH_APPLY, PH_OTHER, PH_COUNT };
typedef struct {
    const char *what;
    double flops, bytes;  // per step: one of them
} PhaseWork;

static void phase_work(PhaseWork w[PH_COUNT], const MlstmConfig *c, int B, int T, size_t nparams) {
    const double N = (double)B * T, H = c->H, D = c->D, V = c->V, F = 4;  // F: bytes a float
    const double nW = (double)weightnorm_elems(c), P = (double)nparams;
    PhaseWork t[PH_COUNT] = {
        [FP_WNORM_EMBED] = {"weight norm fwd, embedding gather", 0, F * (2 * nW + 2 * N * D + 4 * B * H)},
        [FP_PACK] = {"packing W_h, W_mh, W_x, W_mx (fwd and bwd)", 0, F * 2 * 2 * 5 * H * (H + D)},
        [FP_IN_PROJ] = {"input projection e W_mx^T (time loop)", 2 * N * D * H, 0},
        [FP_REC_FWD] = {"recurrent products fwd h W_mh^T (time loop)", 2 * N * H * H, 0},
        [FP_GATES_FWD] = {"gate products b + e W_x^T + m W_h^T (time loop)", 2 * N * (D + H) * 4 * H, 0},
        [FP_MT_FWD] = {"m_t = mx * mh (time loop)", 0, F * 3 * N * H},
        [FP_CELL_FWD] = {"cell fwd (time loop)", 0, F * 11 * N * H},
        [PH_WAIT_FWD] = {"threads waiting, fwd time loop", 0, 0},
        [FP_OUT_FWD] = {"output layer logits h W_out^T", 2 * N * H * V, 0},
        [FP_SOFTMAX] = {"softmax and loss", 0, F * 2 * N * V},
        [FP_DLOGITS] = {"dlogits, gradients zeroed", 0, F * (2 * N * V + P + nW)},
        [FP_OUT_BWD] = {"output layer bwd dW_out, dh", 4 * N * H * V, 0},
        [FP_CELL_BWD] = {"cell bwd (time loop)", 0, F * 14 * N * H},
        [FP_REC_BWD] = {"recurrent products bwd (time loop)", 2 * N * 5 * H * H, 0},
        [FP_MT_BWD] = {"dmx, dmh (time loop)", 0, F * 5 * N * H},
        [FP_IN_BWD] = {"input gradients dxe (time loop)", 2 * N * 5 * H * D, 0},
        [PH_WAIT_BWD] = {"threads waiting, bwd time loop", 0, 0},
        [FP_WGRAD] = {"weight-gradient products", 2 * N * (5 * H * H + 5 * H * D), 0},
        [FP_BIAS_BWD] = {"bias gradient db", 0, F * 4 * N * H},
        [FP_WNORM_BWD] = {"weight norm bwd, embedding grad", 0, F * (4 * nW + 2 * N * D)},
        [PH_CHECK] = {"inf/NaN check, gradient norm", 0, F * 2 * P},
        [PH_APPLY] = {"clip and Adam", 0, F * 9 * P},
        [PH_OTHER] = {"the rest (state carried, calls)", 0, 0},
    };
    memcpy(w, t, sizeof t);
}

static int phase_in_time_loop(int p) {
    return p == FP_IN_PROJ || p == FP_REC_FWD || p == FP_MT_FWD || p == FP_GATES_FWD || p == FP_CELL_FWD ||
           p == FP_REC_BWD || p == FP_MT_BWD || p == FP_CELL_BWD || p == FP_IN_BWD;
}

// The wall time of fast.h's phases so far: the time loops as wholes (their phases are inside them).
static double fast_step_seconds(void) {
    double s = 0;
    for (int p = 0; p < FP_COUNT; p++)
        if (!phase_in_time_loop(p)) s += fast_phase_seconds[p];
    return s;
}
int main(int argc, char **argv) {
    openmp_prefer_passive_wait(argv);  // as ./train's main: OpenMP threads that wait sleep
    (void)train_main;                  // train.h's loop: not run here
    const int bf16 = argc > 6 && !strcmp(argv[argc - 1], "bf16");
    argc -= bf16;
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s H B T steps threads [SGEMM GFLOP/s] [bf16]\n", argv[0]);
        return 2;
    }
    int H = atoi(argv[1]), B = atoi(argv[2]), T = atoi(argv[3]), steps = atoi(argv[4]), threads = atoi(argv[5]);
    double given = argc == 7 ? atof(argv[6]) : 0;
    if (H < 1 || B < 1 || T < 1 || steps < 1 || threads < 1 || !(given >= 0)) {
        fprintf(stderr, "error: H, B, T, steps and threads must be positive, the SGEMM rate not negative\n");
        return 2;
    }
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
#ifdef USE_CBLAS
    openblas_set_num_threads(threads);
#endif
    const MlstmConfig cfg = {256, 64, H, 1};
    Options opt;
    options_defaults(&opt);
    opt.model = cfg;
    opt.T = T;
    opt.seed = 1;
    opt.bf16 = bf16;
    Model *md = model_create(&opt, B);
    uint8_t *x = (uint8_t *)mallocCheck((size_t)B * T), *y = (uint8_t *)mallocCheck((size_t)B * T);
    uint64_t s = 5;
    for (int i = 0; i < B * T; i++) { x[i] = (uint8_t)rng_next(&s); y[i] = (uint8_t)rng_next(&s); }
    float *a = mlstm_alloc((size_t)SG_M * SG_K), *b = mlstm_alloc((size_t)SG_K * SG_N);
    float *o = mlstm_alloc((size_t)SG_M * SG_N);
    for (size_t i = 0; i < (size_t)SG_M * SG_K; i++) a[i] = (float)(rng_uniform(&s) - 0.5);
    for (size_t i = 0; i < (size_t)SG_K * SG_N; i++) b[i] = (float)(rng_uniform(&s) - 0.5);
    const double step_flops = 3 * flops_per_char(&cfg) * B * T;

    long applied = 0;
    double ph[PH_COUNT] = {0}, step_wall = 0;
    Rate own = {0, 0}, blas = {0, 0};
    model_step(md, x, y, NULL, 1);  // warm-up: first touch of every buffer
    printf("H=%d D=64 B=%d T=%d, %d thread(s)%s: step against SGEMM (2048x4096 . 4096x1024), alternating\n", H, B,
           T, threads, bf16 ? ", BF16 products" : "");
    for (int r = 0; r < 3; r++) {
        Rate g = sgemm_rate(a, b, o, 0);
        own.wall = fmax(own.wall, g.wall), own.cpu = fmax(own.cpu, g.cpu);
#ifdef USE_CBLAS
        Rate gb = sgemm_rate(a, b, o, 1);
        blas.wall = fmax(blas.wall, gb.wall), blas.cpu = fmax(blas.cpu, gb.cpu);
        g.wall = fmax(g.wall, gb.wall), g.cpu = fmax(g.cpu, gb.cpu);
#endif
        memset(fast_phase_seconds, 0, sizeof fast_phase_seconds);
        double w0 = wall_seconds(), c0 = cpu_seconds(), other = 0, check = 0, apply = 0;
        for (int i = 0; i < steps; i++) {  // train.c's step, as train.h's loop calls it
            double t0 = wall_seconds(), before = fast_step_seconds();
            model_step(md, x, y, NULL, 1);
            other += wall_seconds() - t0 - (fast_step_seconds() - before);
            double t1 = wall_seconds();
            GradientCheck gc = model_check(md);
            double t2 = wall_seconds();
            double factor = gc.norm > 1 ? 1 / gc.norm : 1;  // a clip at 1, as the trainer's default
            model_apply(md, factor, 5e-4, ++applied);
            double t3 = wall_seconds();
            check += t2 - t1, apply += t3 - t2;
        }
        double wall = wall_seconds() - w0, cpu = cpu_seconds() - c0;
        if (threads == 1)  // (with more, a thread's sleeping waits are not CPU time: no such ratio)
            printf("  round %d: step %.1f GFLOP/s per wall second, %.1f per CPU second; SGEMM %.1f per CPU second: "
                   "ratio %.2f\n", r + 1, step_flops * steps / wall / 1e9, step_flops * steps / cpu / 1e9, g.cpu,
                   step_flops * steps / cpu / 1e9 / g.cpu);
        else
            printf("  round %d: step %.1f GFLOP/s, SGEMM %.1f: ratio %.2f\n", r + 1, step_flops * steps / wall / 1e9,
                   g.wall, step_flops * steps / wall / 1e9 / g.wall);
        for (int p = 0; p < FP_COUNT; p++) ph[p] += fast_phase_seconds[p];
        ph[PH_CHECK] += check, ph[PH_APPLY] += apply, ph[PH_OTHER] += other;
        step_wall += wall;
    }
    const double nsteps = 3.0 * steps;
    ph[PH_WAIT_FWD] = ph[FP_LOOP_FWD] - ph[FP_IN_PROJ] - ph[FP_REC_FWD] - ph[FP_MT_FWD] - ph[FP_GATES_FWD] -
                      ph[FP_CELL_FWD];
    ph[PH_WAIT_BWD] = ph[FP_LOOP_BWD] - ph[FP_CELL_BWD] - ph[FP_REC_BWD] - ph[FP_MT_BWD] - ph[FP_IN_BWD];
    ph[FP_LOOP_FWD] = ph[FP_LOOP_BWD] = 0;  // shown as their parts
    double sg = fmax(fmax(own.wall, blas.wall), given), bw = triad_gbs();
    printf("\nbounds on %d thread(s): SGEMM %.1f GFLOP/s (gemm.h %.1f", threads, sg, own.wall);
#ifdef USE_CBLAS
    printf(", OpenBLAS %.1f", blas.wall);
#endif
    if (given > 0) printf(", given %.1f", given);
    printf("), memory triad %.1f GB/s\n", bw);
    printf("step: %.1f ms, %.0f chars/s, %.1f GFLOP/s = %.2f of SGEMM (wall, %d rounds of %d steps)\n\n",
           1e3 * step_wall / nsteps, B * T * nsteps / step_wall, step_flops * nsteps / step_wall / 1e9,
           step_flops * nsteps / step_wall / 1e9 / sg, 3, steps);
    PhaseWork w[PH_COUNT];
    phase_work(w, &cfg, B, T, md->m.nparams);
    static const int order[] = {FP_WNORM_EMBED, FP_PACK, FP_IN_PROJ, FP_REC_FWD, FP_MT_FWD, FP_GATES_FWD, FP_CELL_FWD,
                                PH_WAIT_FWD, FP_OUT_FWD, FP_SOFTMAX, FP_DLOGITS, FP_OUT_BWD, FP_CELL_BWD,
                                FP_REC_BWD, FP_MT_BWD, FP_IN_BWD, PH_WAIT_BWD, FP_WGRAD, FP_BIAS_BWD,
                                FP_WNORM_BWD, PH_CHECK, PH_APPLY, PH_OTHER};
    printf("| phase (H=%d B=%d, %d thread%s) | ms a step | share | work a step | rate | of its bound |\n", H, B,
           threads, threads > 1 ? "s" : "");
    printf("|---|---|---|---|---|---|\n");
    double total = 0;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) total += ph[order[i]];
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        int p = order[i];
        double sec = ph[p] / nsteps;
        printf("| %s | %.2f | %.1f%% | ", w[p].what, 1e3 * sec, 100 * ph[p] / total);
        if (w[p].flops > 0)
            printf("%.3f GFLOP | %.1f GFLOP/s | %.2f |\n", w[p].flops / 1e9, w[p].flops / sec / 1e9,
                   w[p].flops / sec / 1e9 / sg);
        else if (w[p].bytes > 0)
            printf("%.1f MB | %.1f GB/s | %.2f |\n", w[p].bytes / 1e6, w[p].bytes / sec / 1e9,
                   w[p].bytes / sec / 1e9 / bw);
        else
            printf("- | - | - |\n");
    }
    printf("| all | %.2f | 100%% | %.3f GFLOP | %.1f GFLOP/s | %.2f |\n", 1e3 * total / nsteps, step_flops / 1e9,
           step_flops * nsteps / total / 1e9, step_flops * nsteps / total / 1e9 / sg);
    model_free(md);
    free(x); free(y); free(a); free(b); free(o);
    return 0;
}
