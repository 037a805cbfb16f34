// The CPU trainer's training step (fast.h) against OpenBLAS's sgemm on one thread, in CPU
// time, alternating: the ratio that a machine shared with other work still gives
// (wall-clock rates there depend on what else runs). dev/bench/bench_cpu.sh builds it
// when OpenBLAS's cblas.h is installed (libopenblas-dev):
//   cc -O3 -march=native -ffp-contract=fast -fopenmp -I. dev/bench/step_vs_sgemm.c -lopenblas -lm
//   OMP_NUM_THREADS=1 ./a.out H B T steps
#include "fast.h"  // defines: fast_forward, fast_backward and via it mlstm.h
#include <cblas.h>
#include <time.h>

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s H B T steps\n", argv[0]); return 2; }
    int H = atoi(argv[1]), B = atoi(argv[2]), T = atoi(argv[3]), steps = atoi(argv[4]);
    if (H < 1 || B < 1 || T < 1 || steps < 1) { fprintf(stderr, "error: H, B, T and steps must be positive\n"); return 2; }
    openblas_set_num_threads(1);
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    MlstmConfig cfg = {256, 64, H, 1};
    Mlstm m;
    FastPacks pk;
    mlstm_build(&m, cfg, B, T);
    fast_packs_build(&pk, &cfg);
    mlstm_init(&m, 1);
    uint8_t *x = (uint8_t *)mallocCheck((size_t)B * T), *y = (uint8_t *)mallocCheck((size_t)B * T);
    uint64_t s = 5;
    for (int i = 0; i < B * T; i++) { x[i] = (uint8_t)rng_next(&s); y[i] = (uint8_t)rng_next(&s); }
    real *h = mlstm_alloc((size_t)B * H), *c = mlstm_alloc((size_t)B * H);
    const int M = 2048, N = 1024, K = 4096;  // the reference sgemm: (M,K) . (K,N)
    float *a = mlstm_alloc((size_t)M * K), *b = mlstm_alloc((size_t)K * N), *o = mlstm_alloc((size_t)M * N);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(rng_uniform(&s) - 0.5);
    for (size_t i = 0; i < (size_t)K * N; i++) b[i] = (float)(rng_uniform(&s) - 0.5);
    fast_forward(&m, &pk, x, y, NULL, h, c, B, T);  // warm-up: first touch of every buffer
    fast_backward(&m, &pk, 1);
    for (int r = 0; r < 3; r++) {
        double t = cpu_seconds();
        for (int i = 0; i < steps; i++) {  // train.c's step: forward, backward, norm for the clip, Adam
            fast_forward(&m, &pk, x, y, NULL, h, c, B, T);
            fast_backward(&m, &pk, 1);
            (void)grad_norm(m.grads, m.nparams);
            adam_update(m.params, m.grads, m.adam_m, m.adam_v, m.nparams, adam_defaults, i + 1);
        }
        double step_gf = 3 * flops_per_char(&cfg) * B * T * steps / (cpu_seconds() - t) / 1e9, best = 0;
        for (int i = 0; i < 3; i++) {
            double u = cpu_seconds();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, a, K, b, N, 0, o, N);
            double g = 2.0 * M * N * K / (cpu_seconds() - u) / 1e9;
            best = g > best ? g : best;
        }
        printf("H=%d B=%d T=%d, 1 thread, per CPU-second: step %.1f GFLOP/s, sgemm %.1f GFLOP/s, ratio %.2f\n",
               H, B, T, step_gf, best, step_gf / best);
    }
    mlstm_free(&m);
    fast_packs_free(&pk);
    free(x); free(y); free(h); free(c); free(a); free(b); free(o);
    return 0;
}
