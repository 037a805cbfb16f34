// The CPU trainer end to end, run as a user runs it (build/train next to this
// test): exact resume, MPI ranks against one process, the overflow skip path,
// SIGTERM and kill -9, and bad flags. A tiny model keeps it to seconds.
#include "fast.h"  // defines: fast_forward (the trainer's forward) and via it mlstm.h
#include "harness/checkpoint.h"  // defines: the checkpoint file (CkptHeader, checkpoint_open/read/load, checkpoint_save_run)
#include "data.h"
#include "schedule.h"
#include "test/test.h"
#include <signal.h>

static char dir[] = "/tmp/mlstm_train_XXXXXX";
static char trainer[4200];
// a tiny model on a small built-in corpus; one thread so runs are comparable
// (TINY_RUN: all but the model and the batch, which --resume reads from the checkpoint)
#define TINY_RUN "--seq-len 16 --corpus-bytes 60000 --val-every 0 --val-steps 2 --sample-len 0 --print-every 1000 --threads 1 " \
                 "--lr-schedule legw --lr 3e-3 --base-batch 4 --warmup-steps 3 --decay-steps 40"
#define TINY "--hidden 32 --embed 16 --batch 4 " TINY_RUN


// The "train" lines of a log, fields: step epoch lr loss bpc scale skipped gnorm chars/s.
typedef struct { long step; double lr, loss, scale, gnorm; int skipped; } LogLine;
static int read_log(const char *path, LogLine *out, int max) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        LogLine l;
        double epoch, bpc;
        if (sscanf(line, "train %ld %lf %lf %lf %lf %lf %d %lf", &l.step, &epoch, &l.lr, &l.loss, &bpc, &l.scale, &l.skipped, &l.gnorm) == 8)
            out[n++] = l;
    }
    fclose(f);
    return n;
}

// Loads a checkpoint written by the trainer for the TINY model and G rows.
static void load(const char *path, Mlstm *m, TrainState *st, int G) {
    MlstmConfig cfg = {256, 16, 32, 1};
    mlstm_build(m, cfg, 1, 1);
    real *h = (real *)mallocCheck(sizeof(real) * G * 32), *c = (real *)mallocCheck(sizeof(real) * G * 32);
    checkpoint_load(path, m, st, h, c, G);
    free(h); free(c);
}
static double rel_diff(const real *a, const real *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) { d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); s += (double)b[i] * b[i]; }
    return sqrt(d / s);
}

static void test_resume(void) {
    // N steps straight, versus N/2, a checkpoint, and N/2 more: the same bytes
    int r1 = test_system("%s " TINY " --fp16 --steps 20 --out %s/a > %s/a.out 2>&1", trainer, dir, dir);
    int r2 = test_system("%s " TINY " --fp16 --steps 10 --out %s/b > %s/b.out 2>&1", trainer, dir, dir);
    // the resume gives no --hidden, --embed or --batch: they come from the checkpoint
    int r3 = test_system("%s " TINY_RUN " --fp16 --steps 20 --resume %s/b >> %s/b.out 2>&1", trainer, dir, dir);
    CHECK(r1 == 0 && r2 == 0 && r3 == 0, "resume: the three runs exit 0, the resume without the model and batch flags (%d %d %d)", r1, r2, r3);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/a/latest.ckpt", dir); snprintf(b, sizeof b, "%s/b/latest.ckpt", dir);
    CHECK(file_size(a) > 0 && files_equal(a, b), "resume: 20 steps straight and 10 + resume + 10 give byte-identical checkpoints");
    LogLine la[64], lb[64];
    snprintf(a, sizeof a, "%s/a/train.log", dir); snprintf(b, sizeof b, "%s/b/train.log", dir);
    int na = read_log(a, la, 64), nb = read_log(b, lb, 64), same = na == 20 && nb == 20;
    for (int i = 0; same && i < 20; i++) same = la[i].step == lb[i].step && la[i].loss == lb[i].loss && la[i].lr == lb[i].lr;
    CHECK(same, "resume: the 20 logged losses and learning rates are identical (%d and %d lines)", na, nb);
    CHECK(na == 20 && la[19].loss < la[0].loss, "resume: the loss falls over 20 steps (%.3f -> %.3f)", na ? la[0].loss : 0, na == 20 ? la[19].loss : 0);
    int rc = test_system("tools/plot_log.sh %s %s/a.png > /dev/null && [ -s %s/a.png ]", a, dir, dir);
    CHECK(rc == 0, "tools/plot_log.sh draws the log into a PNG (exit %d)", rc);
}

static void test_threads(void) {
    // 1 and 2 threads give the same bytes: every reduction has a fixed order.
    // Clipping acts here (gradient norm > 0.1), so the norm's sum is exercised too.
    int r1 = test_system("%s " TINY " --clip 0.1 --steps 8 --out %s/t1 > %s/t.out 2>&1", trainer, dir, dir);
    int r2 = test_system("%s " TINY " --clip 0.1 --threads 2 --steps 8 --out %s/t2 >> %s/t.out 2>&1", trainer, dir, dir);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/t1/train.log", dir);
    LogLine l[16];
    int n = read_log(a, l, 16);
    double gmax = 0;
    for (int i = 0; i < n; i++) gmax = fmax(gmax, l[i].gnorm);
    snprintf(a, sizeof a, "%s/t1/latest.ckpt", dir); snprintf(b, sizeof b, "%s/t2/latest.ckpt", dir);
    CHECK(r1 == 0 && r2 == 0 && n == 8 && gmax > 0.1 && files_equal(a, b),
          "threads: 8 steps (largest gradient norm %.2f, clipped to 0.1) with 1 and 2 threads give byte-identical checkpoints", gmax);
}

static void expect_bad(const char *args, const char *needle, const char *what);

// --bf16: the products in BF16 (gemm.h; AMX's tiles, AVX512-BF16 or its emulation, as the CPU
// allows, the same kernel in every run here). Resume is exact and keeps the mode without the flag, 1 and 2
// threads give the same bytes, the mode computes something else than FP32 and still learns,
// the log says so, and a resume that would change the mode is refused naming the flag.
static void test_bf16(void) {
    int r1 = test_system("%s " TINY " --bf16 --steps 20 --out %s/h1 > %s/h.out 2>&1", trainer, dir, dir);
    int r2 = test_system("%s " TINY " --bf16 --steps 10 --threads 2 --out %s/h2 >> %s/h.out 2>&1", trainer, dir, dir);
    int r3 = test_system("%s " TINY_RUN " --steps 20 --resume %s/h2 >> %s/h.out 2>&1", trainer, dir, dir);
    int r4 = test_system("%s " TINY " --steps 20 --out %s/h32 >> %s/h.out 2>&1", trainer, dir, dir);
    CHECK(r1 == 0 && r2 == 0 && r3 == 0 && r4 == 0, "bf16: the runs exit 0 (%d %d %d %d)", r1, r2, r3, r4);
    char a[600], b[600], c[600];
    snprintf(a, sizeof a, "%s/h1/latest.ckpt", dir); snprintf(b, sizeof b, "%s/h2/latest.ckpt", dir);
    snprintf(c, sizeof c, "%s/h32/latest.ckpt", dir);
    CHECK(file_size(a) > 0 && files_equal(a, b),
          "bf16: 20 steps on 1 thread and 10 on 2 + a resume without --bf16 + 10 give byte-identical checkpoints");
    CHECK(file_size(c) > 0 && !files_equal(a, c), "bf16: the checkpoint differs from the FP32 run's");
    LogLine l[32], f[32];
    snprintf(a, sizeof a, "%s/h1/train.log", dir); snprintf(c, sizeof c, "%s/h32/train.log", dir);
    int n = read_log(a, l, 32), nf = read_log(c, f, 32);
    CHECK(n == 20 && nf == 20 && l[19].loss < l[0].loss && fabs(l[19].loss - f[19].loss) < 0.05 * f[19].loss,
          "bf16: the loss falls over 20 steps (%.3f -> %.3f), within 5%% of FP32's (%.3f)", n ? l[0].loss : 0,
          n == 20 ? l[19].loss : 0, nf == 20 ? f[19].loss : 0);
    CHECK(test_system("grep -q '^| precision *| BF16 products' %s/h.out", dir) == 0, "bf16: the settings table says BF16");
    char args[900];
    snprintf(args, sizeof args, TINY_RUN " --bf16 --steps 30 --resume %s/h32", dir);
    expect_bad(args, "--bf16 on disagrees with checkpoint", "--bf16 on resuming an FP32 run");
}

// --bf16-kernel: each kernel's emulation gives that kernel's bytes where the CPU runs it (and one line, exit 2,
// where it cannot), the two kernels' bits differ, a resume may change the kernel, and the flag needs --bf16.
static void test_bf16_kernels(void) {
    const char *kernels[] = {"amx", "amx-emulated", "avx512bf16", "avx512bf16-emulated"};
    const int native[] = {gemm_bf16_amx_supported(), 1, gemm_bf16_native_supported(), 1};
    char ckpt[4][600];
    for (int k = 0; k < 4; k++) {
        snprintf(ckpt[k], sizeof ckpt[k], "%s/k%d/latest.ckpt", dir, k);
        int rc = test_system("%s " TINY " --bf16 --bf16-kernel %s --steps 6 --out %s/k%d > %s/k%d.out 2>&1", trainer,
                             kernels[k], dir, k, dir, k);
        int said = test_system("grep -q '^| precision *| BF16 products (%s' %s/k%d.out",
                               k < 2 ? "AMX-BF16" : "AVX512-BF16", dir, k) == 0;
        if (native[k])
            CHECK(rc == 0 && said, "bf16-kernel %s: runs (exit %d), the settings table names it", kernels[k], rc);
        else
            CHECK(rc == 2 && test_system("grep -q -- '^error: --bf16-kernel %s: this CPU' %s/k%d.out", kernels[k], dir,
                                         k) == 0 && file_size(ckpt[k]) <= 0,
                  "bf16-kernel %s on a CPU without it: one line naming the flag, exit %d (want 2), no checkpoint",
                  kernels[k], rc);
    }
    for (int k = 0; k < 4; k += 2)
        if (native[k])
            CHECK(files_equal(ckpt[k], ckpt[k + 1]), "bf16-kernel %s and %s: byte-identical checkpoints", kernels[k],
                  kernels[k + 1]);
    CHECK(file_size(ckpt[1]) > 0 && !files_equal(ckpt[1], ckpt[3]),
          "bf16-kernel: AMX's bits and AVX512-BF16's differ (their sums' order)");
    int r1 = test_system("%s " TINY " --bf16 --bf16-kernel amx-emulated --steps 3 --out %s/k4 > %s/k4.out 2>&1",
                         trainer, dir, dir);
    int r2 = test_system("%s " TINY_RUN " --bf16-kernel avx512bf16-emulated --steps 6 --resume %s/k4 >> %s/k4.out 2>&1",
                         trainer, dir, dir);
    CHECK(r1 == 0 && r2 == 0 && test_system("grep -q 'AVX512-BF16.s bits, emulated' %s/k4.out", dir) == 0,
          "bf16-kernel: a resume may change the kernel (exit %d %d), the settings table says the new one", r1, r2);
    expect_bad(TINY " --bf16-kernel amx", "--bf16-kernel given without --bf16", "--bf16-kernel without --bf16");
    expect_bad(TINY " --bf16 --bf16-kernel tiles", "--bf16-kernel: expected one of auto|amx|",
               "an unknown BF16 kernel");
}

static void test_overflow(void) {
    // step 6 (--inject-overflow counts steps as the log does) overflows: compare with a run that stopped after 5
    int r1 = test_system("%s " TINY " --fp16 --steps 5 --out %s/o5 > %s/o.out 2>&1", trainer, dir, dir);
    int r2 = test_system("%s " TINY " --fp16 --steps 6 --inject-overflow 6 --out %s/o6 >> %s/o.out 2>&1", trainer, dir, dir);
    int r3 = test_system("%s " TINY " --fp16 --steps 8 --inject-overflow 6 --out %s/o8 >> %s/o.out 2>&1", trainer, dir, dir);
    CHECK(r1 == 0 && r2 == 0 && r3 == 0, "overflow: runs exit 0 (%d %d %d)", r1, r2, r3);
    char p[600];
    Mlstm m5, m6;
    TrainState s5, s6;
    snprintf(p, sizeof p, "%s/o5/latest.ckpt", dir); load(p, &m5, &s5, 4);
    snprintf(p, sizeof p, "%s/o6/latest.ckpt", dir); load(p, &m6, &s6, 4);
    CHECK(memcmp(m5.params, m6.params, m5.nparams * sizeof(real)) == 0 && memcmp(m5.adam_m, m6.adam_m, m5.nparams * sizeof(real)) == 0 &&
          memcmp(m5.adam_v, m6.adam_v, m5.nparams * sizeof(real)) == 0, "overflow: weights and Adam moments untouched by the skipped step");
    CHECK(s5.step == 5 && s6.step == 5 && s6.data_step == 6, "overflow: applied steps stay 5 (%llu), the data moved on (%llu)",
          (unsigned long long)s6.step, (unsigned long long)s6.data_step);
    LossScaler l5, l6;
    loss_scaler_deserialize(&l5, s5.scaler); loss_scaler_deserialize(&l6, s6.scaler);
    CHECK(l5.scale == 65536 && l6.scale == 32768 && l6.good_steps == 0, "overflow: scale halved %g -> %g, good-step counter reset (%ld)",
          l5.scale, l6.scale, l6.good_steps);
    LogLine ll[16];
    snprintf(p, sizeof p, "%s/o8/train.log", dir);
    int n = read_log(p, ll, 16);
    CHECK(n == 8 && ll[5].skipped == 1 && ll[4].skipped == 0 && ll[6].skipped == 0, "overflow: the log marks step 6 (index 5) skipped");
    // the schedule did not advance: the step after the skip uses the rate the skipped step would have used
    CHECK(n == 8 && ll[6].lr == ll[5].lr && ll[5].lr != ll[4].lr && ll[7].lr != ll[6].lr,
          "overflow: lr after the skip repeats (%.4e %.4e %.4e %.4e)", n == 8 ? ll[4].lr : 0, n == 8 ? ll[5].lr : 0,
          n == 8 ? ll[6].lr : 0, n == 8 ? ll[7].lr : 0);
    CHECK(n == 8 && ll[5].scale == 65536 && ll[6].scale == 32768, "overflow: the next step runs at the halved scale");
    // without --fp16 (S = 1, limit: any non-finite value) an injected +inf must be caught too
    int r4 = test_system("%s " TINY " --steps 7 --inject-overflow 6 --out %s/f7 >> %s/o.out 2>&1", trainer, dir, dir);
    snprintf(p, sizeof p, "%s/f7/train.log", dir);
    n = read_log(p, ll, 16);
    CHECK(r4 == 0 && n == 7 && ll[5].skipped == 1 && ll[4].skipped == 0 && ll[6].skipped == 0 && ll[5].scale == 1,
          "overflow: FP32 mode skips the step with an injected +inf (exit %d, %d log lines)", r4, n);
    mlstm_free(&m5); mlstm_free(&m6);
}

static void test_mpi(void) {
    const char *mpirun = test_mpirun("mpi");
    if (!mpirun) return;
    int r1 = test_system("%s -np 1 %s " TINY " --batch 8 --steps 10 --out %s/m1 > %s/m.out 2>&1", mpirun, trainer, dir, dir);
    int r2 = test_system("%s -np 2 %s " TINY " --batch 4 --steps 10 --out %s/m2 >> %s/m.out 2>&1", mpirun, trainer, dir, dir);
    CHECK(r1 == 0 && r2 == 0, "mpi: -np 1 with 8 rows and -np 2 with 4 rows each exit 0 (%d %d)", r1, r2);
    char p[600];
    snprintf(p, sizeof p, "%s/m.out", dir);
    CHECK(test_system("grep -q '4 rows/rank x 2 ranks = 8' %s", p) == 0, "mpi: the 2-rank run reports 2 ranks x 4 rows");
    Mlstm a, b;
    TrainState sa, sb;
    snprintf(p, sizeof p, "%s/m1/latest.ckpt", dir); load(p, &a, &sa, 8);
    snprintf(p, sizeof p, "%s/m2/latest.ckpt", dir); load(p, &b, &sb, 8);
    // What holds (doc/training.md's claim): 2 ranks x 4 rows read exactly the 8 rows 1 rank
    // reads, so the data steps agree and step 1's loss (same weights, same rows; the two
    // ranks' means added in double) is the same number. The gradients are the same sums
    // added in another order (each rank sums its rows, the all-reduce sums the ranks), so
    // they differ by FP32 rounding: at most K 2^-24 relative for a K-term sum (K = 8 x 16
    // characters), 8e-6. Adam turns a relative gradient change d into an update change of
    // at most lr d (m / sqrt(v) is scale-free), so after n steps the weights (rms ~0.1)
    // move apart by at most n lr d / 0.1 = 10 x 4.2e-3 x 8e-6 / 0.1, 3e-6: the bound below
    // is that with room. Bit-exact equality would need the single process to add its
    // rows in the ranks' order, which the matmuls do not.
    double dw = rel_diff(b.params, a.params, a.nparams);
    CHECK(dw < 1e-5 && sa.step == 10 && sb.step == 10 && sa.data_step == sb.data_step,
          "mpi: after 10 steps the same data step and weights within %.1e relative (< 1e-5: FP32 sums in another order)", dw);
    LogLine la[16], lb[16];
    snprintf(p, sizeof p, "%s/m1/train.log", dir); int na = read_log(p, la, 16);
    snprintf(p, sizeof p, "%s/m2/train.log", dir); int nb = read_log(p, lb, 16);
    double dl = 0;
    for (int i = 0; i < na && i < nb; i++) dl = fmax(dl, fabs(la[i].loss - lb[i].loss) / la[i].loss);
    CHECK(na == 10 && nb == 10 && la[0].loss == lb[0].loss, "mpi: step 1's loss (the same weights on the same rows) is the same number (%.6f %.6f)",
          na ? la[0].loss : 0, nb ? lb[0].loss : 0);
    CHECK(na == 10 && nb == 10 && dl < 1e-5, "mpi: the 10 losses agree to %.1e relative (< 1e-5)", dl);
    mlstm_free(&a); mlstm_free(&b);
}

// --val-batch: validation reads the same rows and windows whatever the training batch.
// The val stream of the TINY corpus (1500 bytes) in 8 rows of 16 steps: 11 batches,
// of which TINY's --val-steps 2 reads 2.
static double val_line(const char *log, long step) {  // the bpc of "val STEP ...", NAN if none
    FILE *f = fopen(log, "r");
    char line[512];
    double bpc = NAN, epoch, loss;
    long s;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "val %ld %lf %lf %lf", &s, &epoch, &loss, &bpc) == 4 && s == step) break;
        else bpc = NAN;
    if (f) fclose(f);
    return bpc;
}
static void test_val_batch(void) {
    // 1. Step 0, the seed's weights: --batch 4 and 16 score the same 8 rows, to the last printed digit;
    // without --val-batch each scores its own rows, and the two differ (so the check can fail).
    double v[4];
    const char *extra[4] = {"--batch 4 --val-batch 8", "--batch 16 --val-batch 8", "--batch 4", "--batch 16"};
    int rc = 0;
    for (int i = 0; i < 4; i++) {
        rc |= test_system("%s " TINY " %s --val-every 100 --steps 1 --out %s/v%d > %s/v%d.out 2>&1",
                          trainer, extra[i], dir, i, dir, i);
        char p[600];
        snprintf(p, sizeof p, "%s/v%d/train.log", dir, i);
        v[i] = val_line(p, 0);
    }
    CHECK(rc == 0 && v[0] == v[1] && isfinite(v[0]), "val-batch: --batch 4 and 16 with --val-batch 8 score the same "
          "weights identically (%.6f, %.6f bpc)", v[0], v[1]);
    CHECK(v[2] != v[3], "val-batch: without it they score their own rows and differ (%.6f, %.6f bpc)", v[2], v[3]);
    // 2. Trained weights: after 10 steps at --batch 4, the trainer's validation on 8 rows equals
    // fast.h's forward (the trainer's) of the checkpoint's weights over the same 2 batches of 8
    // rows. The same code and flags compute both, so they differ by the log's 6 printed decimals (5e-7 on ~5 bpc,
    // 1e-7 relative) and, if the two builds contracted FMAs differently, FP32 rounding of a 16-step
    // forward (~1e-6 relative): 1e-5 relative bounds both.
    rc = test_system("%s " TINY " --batch 4 --val-batch 8 --steps 10 --out %s/vb > %s/vb.out 2>&1",
                     trainer, dir, dir);
    char p[600];
    snprintf(p, sizeof p, "%s/vb/train.log", dir);
    double got = val_line(p, 10);
    MlstmConfig cfg = {256, 16, 32, 1};
    Mlstm m;
    FastPacks pk;
    mlstm_build(&m, cfg, 8, 16);
    fast_packs_build(&pk, &cfg, GEMM_FP32);
    TrainState st;
    real *h = (real *)calloc(8 * 32, sizeof(real)), *c = (real *)calloc(8 * 32, sizeof(real));
    real *th = (real *)mallocCheck(sizeof(real) * 4 * 32), *tc = (real *)mallocCheck(sizeof(real) * 4 * 32);
    snprintf(p, sizeof p, "%s/vb/latest.ckpt", dir);
    checkpoint_load(p, &m, &st, th, tc, 4);
    Stream vs;
    corpus_stream(&vs, 60000 / 40, 1, 1);  // what the trainer validates on: TINY's corpus, seed 1
    Loader l;
    loader_init(&l, &vs, 1, 0, 8, 16, "the data");
    uint8_t in[8 * 16], tg[8 * 16], rs[8 * 16];
    double sum = 0;
    for (long s = 0; s < 2; s++) {
        loader_batch(&l, s, in, tg, rs);
        sum += fast_forward(&m, &pk, in, tg, rs, h, c, 8, 16);
        memcpy(h, mlstm_h_out(&m), sizeof(real) * 8 * 32);
        memcpy(c, mlstm_c_out(&m), sizeof(real) * 8 * 32);
    }
    double want = sum / 2 / M_LN2;
    CHECK(rc == 0 && fabs(got - want) <= 1e-5 * want, "val-batch: after 10 steps at --batch 4 the trainer's val bpc "
          "on 8 rows is fast_forward's on the checkpoint's weights (%.6f, %.6f)", got, want);
    stream_free(&vs);
    mlstm_free(&m);
    fast_packs_free(&pk);
    free(h); free(c); free(th); free(tc);
    // 3. Ranks: 2 ranks x 2 rows score the same 8 rows as one process (sums in another order: 1e-5 relative)
    if (test_system("command -v mpirun > /dev/null") == 0) {
        rc = test_system("ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                         "OMPI_MCA_rmaps_base_oversubscribe=1 mpirun -np 2 %s " TINY " --batch 2 --val-batch 8 "
                         "--val-every 100 --steps 1 --out %s/vm > %s/vm.out 2>&1", trainer, dir, dir);
        snprintf(p, sizeof p, "%s/vm/train.log", dir);
        double vm = val_line(p, 0);
        CHECK(rc == 0 && fabs(vm - v[0]) <= 1e-5 * v[0], "val-batch: 2 ranks x 2 rows score the 8 rows as one process "
              "(%.6f, %.6f bpc)", vm, v[0]);
    }
    expect_bad("--val-batch 0", "--val-batch: must be between 1 and", "zero val batch");
}

static void test_signals(void) {
    // SIGTERM mid-run: finish the step, write a checkpoint, exit 0; resuming from it
    // then ends where an uninterrupted run ends.
    char log[600], ck[600];
    snprintf(log, sizeof log, "%s/s/train.log", dir); snprintf(ck, sizeof ck, "%s/s/latest.ckpt", dir);
    int rc = test_system("%s " TINY " --steps 100000 --out %s/s > %s/s.out 2>&1 & pid=$!; "
                         "for i in $(seq 200); do n=$(grep -c '^train' %s 2>/dev/null); [ \"${n:-0}\" -ge 3 ] && break; sleep 0.05; done; "
                         "kill -TERM $pid; wait $pid", trainer, dir, dir, log);
    CHECK(rc == 0, "sigterm: the trainer exits 0 (%d)", rc);
    Mlstm m;
    TrainState st;
    load(ck, &m, &st, 4);
    CHECK(st.data_step >= 3 && st.data_step < 100000, "sigterm: a valid checkpoint at step %llu", (unsigned long long)st.data_step);
    long k = (long)st.data_step + 4;
    int r1 = test_system("%s " TINY " --steps %ld --resume %s/s >> %s/s.out 2>&1", trainer, k, dir, dir);
    int r2 = test_system("%s " TINY " --steps %ld --out %s/s2 >> %s/s.out 2>&1", trainer, k, dir, dir);
    char ck2[600];
    snprintf(ck2, sizeof ck2, "%s/s2/latest.ckpt", dir);
    CHECK(r1 == 0 && r2 == 0 && files_equal(ck, ck2), "sigterm: resuming to step %ld equals the uninterrupted run, byte for byte", k);
    mlstm_free(&m);

    // kill -9 while checkpoints are being written (one every step, a larger model so
    // writes take a while): the last complete checkpoint always survives; resuming into
    // the same files removes the killed run's temporary file and cuts the log back to
    // the checkpoint, so every step is logged once
    int intact = 1, torn = 0, cleaned = 1, once = 1;
    for (int trial = 0; trial < 6; trial++) {
        test_system("rm -rf %s/k", dir);
        test_system("%s --hidden 256 --batch 1 --seq-len 2 --corpus-bytes 20000 --val-every 0 --sample-len 0 --threads 1 "
                    "--steps 100000 --ckpt-every 1 --overwrite --out %s/k > /dev/null 2>&1 & pid=$!; "
                    "for i in $(seq 400); do [ -f %s/k/latest.ckpt ] && break; sleep 0.01; done; sleep 0.%d; kill -9 $pid; wait $pid 2>/dev/null",
                    trainer, dir, dir, 13 + 13 * trial);
        int mid = test_system("ls %s/k | grep -q 'latest.ckpt.tmp'", dir) == 0;  // killed mid-write: a temporary file remains
        torn += mid;
        if (!mid) test_system("echo partial > %s/k/latest.ckpt.tmp.999999999", dir);  // as such a kill leaves, when the timing missed
        char p[600];
        snprintf(p, sizeof p, "%s/k/latest.ckpt", dir);
        uint8_t hd[64] = {0};
        FILE *f = fopen(p, "rb");
        if (!f || fread(hd, 1, 64, f) != 64) intact = 0;
        if (f) fclose(f);
        long ds = (long)get64(hd + 56);  // CKPT_AT_DATA_STEP
        int ok = test_system("%s --hidden 256 --batch 1 --seq-len 2 --corpus-bytes 20000 --val-every 0 --sample-len 0 --threads 1 "
                             "--steps %ld --resume %s/k > %s/k.out 2>&1", trainer, ds + 1, dir, dir);
        if (ok != 0) intact = 0;
        if (test_system("ls %s/k | grep -q 'latest.ckpt.tmp'", dir) == 0) cleaned = 0;
        LogLine l[4096];
        snprintf(p, sizeof p, "%s/k/train.log", dir);
        int n = read_log(p, l, 4096);
        if (n != ds + 1) once = 0;
        for (int i = 0; i < n; i++) if (l[i].step != i + 1) once = 0;
    }
    CHECK(intact, "kill -9 during checkpoint writes (6 trials, %d of them mid-write): the checkpoint left behind always loads", torn);
    CHECK(cleaned, "kill -9: resuming removes the temporary file the killed run left (%d trials left one, the others one planted)", torn);
    CHECK(once, "kill -9: after resuming into the same log every step is logged once, in order");
}

static void expect_bad(const char *args, const char *needle, const char *what) {
    char out[600];
    snprintf(out, sizeof out, "%s/bad.out", dir);
    int rc = test_system("timeout 120 %s %s > %s 2>&1", trainer, args, out);  // a hang (a FIFO) fails, not blocks
    int found = test_system("grep -qF -- '%s' %s", needle, out) == 0;
    char msg[300] = "";
    FILE *f = fopen(out, "r");
    if (f) { if (!fgets(msg, sizeof msg, f)) msg[0] = 0; fclose(f); }
    msg[strcspn(msg, "\n")] = 0;
    int stepped = test_system("grep -q '^step ' %s", out) == 0;  // a progress or validation line: work was done first
    CHECK(rc == 2 && found && !stepped, "bad input, %s: exit %d (want 2), \"%s\"%s", what, rc, msg, stepped ? " after steps ran" : "");
}

static void test_bad_flags(void) {
    expect_bad("--bogus 3", "unknown flag --bogus", "unknown flag");
    expect_bad("--batch 0", "--batch: must be between 1 and", "zero batch");
    expect_bad("--hidden -4", "--hidden: must be between 1 and", "negative hidden size");
    expect_bad("--seq-len 12x", "--seq-len: expected a whole number, got \"12x\"", "size with junk");
    expect_bad("--lr abc", "--lr", "learning rate that is not a number");
    expect_bad("--steps", "--steps needs a value", "missing value");
    expect_bad("--train /no/such/dir", "/no/such/dir", "missing data path");
    char args[900];
    // a checkpoint of another shape (written by test_resume: H=32)
    snprintf(args, sizeof args, "--hidden 64 --embed 16 --batch 4 --seq-len 16 --corpus-bytes 60000 --resume %s/a", dir);
    expect_bad(args, "--hidden 64 disagrees with checkpoint", "resume from a checkpoint of another shape");
    snprintf(args, sizeof args, "--resume %s/none.ckpt", dir);
    expect_bad(args, "none.ckpt", "resume from a missing checkpoint");
    int rc = test_system("%s --help > %s/help.out 2>&1", trainer, dir);
    CHECK(rc == 0, "--help exits 0");
}

// Every flag --help lists is one the parser reads: feed each back and check it is not "unknown".
static void test_help_matches_parser(void) {
    char p[600];
    snprintf(p, sizeof p, "%s/help.out", dir);
    FILE *f = fopen(p, "r");
    char line[512], flag[64];
    int n = 0, bad = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, " --%63[a-z0-9-]", flag) == 1 && strcmp(flag, "help") != 0) {
            n++;
            if (test_system("%s --%s 1 --steps 0 > %s/h.out 2>&1; grep -q 'unknown flag' %s/h.out", trainer, flag, dir, dir) == 0) {
                bad++;
                printf("      --%s is in --help but unknown to the parser\n", flag);
            }
        }
    if (f) fclose(f);
    CHECK(n >= 35 && bad == 0, "--help lists %d flags, all read by the parser (%d not)", n, bad);
}

// The "(default X)" --help prints for --NAME ("" if none).
static const char *help_default(const char *name, char *out, size_t n) {
    char p[600], line[512], want[80];
    snprintf(p, sizeof p, "%s/help.out", dir);
    snprintf(want, sizeof want, "  --%s ", name);
    out[0] = 0;
    FILE *f = fopen(p, "r");
    while (f && fgets(line, sizeof line, f)) {
        char *d = strstr(line, "(default ");
        if (strncmp(line, want, strlen(want)) || !d) continue;
        snprintf(out, n, "%s", d + 9);
        out[strcspn(out, ")")] = 0;
    }
    if (f) fclose(f);
    return out;
}
// The start-up table row `name` of an output file ("" if none).
static const char *table_row(const char *file, const char *name, char *out, size_t n) {
    char line[512];
    out[0] = 0;
    FILE *f = fopen(file, "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "| ", 2) && !strncmp(line + 2, name, strlen(name)) && line[2 + strlen(name)] == ' ') snprintf(out, n, "%s", line);
    if (f) fclose(f);
    return out;
}

// --help's defaults are the ones a run without flags uses (its start-up table shows
// them), and the default decay ends at --steps.
static void test_help_defaults(void) {
    char o[600], h[64], d[64], b[64], t[64], sched[64], lr[64], bb[64], hor[64], row[512], want[400];
    snprintf(o, sizeof o, "%s/d.out", dir);
    int rc = test_system("%s --steps 3 --val-every 0 --sample-len 0 --threads 1 --corpus-bytes 200000 --out %s/d > %s 2>&1",
                         trainer, dir, o);
    help_default("hidden", h, 64); help_default("embed", d, 64); help_default("batch", b, 64); help_default("seq-len", t, 64);
    help_default("lr-schedule", sched, 64); help_default("lr", lr, 64); help_default("base-batch", bb, 64); help_default("decay-epochs", hor, 64);
    snprintf(want, sizeof want, "D=%s H=%s,", d, h);
    int model = strstr(table_row(o, "model", row, sizeof row), want) != NULL;
    snprintf(want, sizeof want, "%s rows/rank x 1 ranks = %s, T = %s ", b, b, t);
    int batch = strstr(table_row(o, "batch", row, sizeof row), want) != NULL;
    snprintf(want, sizeof want, "| %s ", sched);
    int rule = strstr(table_row(o, "lr schedule", row, sizeof row), want) != NULL;
    snprintf(want, sizeof want, "| %s at batch %s ", lr, bb);
    int base = strstr(table_row(o, "base lr", row, sizeof row), want) != NULL;
    CHECK(rc == 0 && model && batch && rule && base, "--help's defaults (H %s, D %s, batch %s, T %s, %s, lr %s at batch %s) are the run's "
          "(%d %d %d %d)", h, d, b, t, sched, lr, bb, model, batch, rule, base);
    int decay = strstr(table_row(o, "decay", row, sizeof row), "by step 3 ") != NULL;
    CHECK(rc == 0 && decay && !strcmp(hor, "at --steps"), "the default decay ends at --steps (3), as --help says (\"%s\")", hor);
    // a 20-step run decays to its end, not over the 937-step epoch
    LogLine l[32];
    rc = test_system("%s --hidden 32 --embed 16 --batch 4 --seq-len 16 --corpus-bytes 60000 --val-every 0 --sample-len 0 --threads 1 "
                     "--steps 20 --out %s/h > %s/h.out 2>&1", trainer, dir, dir);
    snprintf(o, sizeof o, "%s/h/train.log", dir);
    int n = read_log(o, l, 32);
    double top = 0;
    for (int i = 0; i < n; i++) top = fmax(top, l[i].lr);
    CHECK(rc == 0 && n == 20 && l[19].lr > 0 && l[19].lr < 0.1 * top, "--steps 20 without a horizon: lr falls to %.2e of peak %.2e by step 20",
          n == 20 ? l[19].lr : 0, top);
}

// Integer flags are range-checked before any conversion; the numbers named are the user's.
static void test_flag_ranges(void) {
    expect_bad("--batch 4294967298", "--batch: must be between 1 and 1048576, got 4294967298", "--batch 2^32+2 (was B=2)");
    expect_bad("--batch 2147483648", "--batch: must be between 1 and 1048576, got 2147483648", "--batch 2^31");
    expect_bad("--threads 100000", "--threads: must be between 1 and 1024, got 100000", "--threads 100000 (was a libgomp crash)");
    expect_bad("--hidden 1000000", "--hidden: must be between 1 and 65536, got 1000000", "--hidden 1000000");
    expect_bad("--hidden 60000", "--hidden, --embed: too large", "--hidden 60000 (the model outgrows memory)");
    expect_bad("--batch 100000 --seq-len 100000", "--batch 100000 x --seq-len 100000: too large", "--batch x --seq-len beyond an int");
    expect_bad("--steps 1e3", "--steps: expected a whole number, got \"1e3\"", "--steps 1e3");
    expect_bad("--seed -1", "--seed: must be at least 0, got -1", "--seed -1");
    expect_bad("--temperature 0.5x", "--temperature: expected a number", "--temperature with junk");
    expect_bad("--warmup-steps 3junk", "--warmup-steps: expected a whole number, got \"3junk\"", "--warmup-steps with junk");
    expect_bad("--decay-steps 1e5", "--decay-steps: expected a whole number, got \"1e5\"", "--decay-steps 1e5, as --steps 1e3");
    expect_bad("--corpus-bytes 2000 --batch 8 --seq-len 16", "validation split (1/40 of --corpus-bytes 2000) has 50 bytes", "too little data names the split");
}

// The run directory (--out) is checked, created and locked before the first step.
static void test_outputs(void) {
    char a[1200];
    snprintf(a, sizeof a, TINY " --steps 2 --out /proc/sys/x");
    expect_bad(a, "--out /proc/sys/x: cannot create directory /proc/sys/x", "--out in an unwritable directory");
    test_system("mkdir -p %s/adir %s/fifodir && mkfifo %s/fifo.ckpt %s/fifodir/latest.ckpt && touch %s/plain && "
                "mkdir -p %s/full && ln -s /dev/full %s/full/train.log", dir, dir, dir, dir, dir, dir, dir);
    snprintf(a, sizeof a, TINY " --steps 2 --out %s/plain", dir);
    expect_bad(a, "plain: not a directory", "--out a regular file");
    snprintf(a, sizeof a, TINY " --steps 2 --out ''");
    expect_bad(a, "--out: empty path", "--out ''");
    snprintf(a, sizeof a, TINY " --steps 2 --out %s/fifodir", dir);
    expect_bad(a, "fifodir/latest.ckpt: not a regular file", "a FIFO where latest.ckpt goes");
    snprintf(a, sizeof a, TINY " --steps 2 --overwrite --out %s/full", dir);
    expect_bad(a, "full/train.log: not a regular file", "train.log a link to /dev/full, even with --overwrite");
    snprintf(a, sizeof a, TINY " --steps 2 --out /proc/self");
    expect_bad(a, "--out /proc/self", "--out /proc/self");
    snprintf(a, sizeof a, TINY " --steps 2 --resume %s/fifo.ckpt", dir);
    expect_bad(a, "fifo.ckpt: not a regular file", "--resume a FIFO (was a hang)");
    snprintf(a, sizeof a, TINY " --steps 2 --init-from %s/fifo.ckpt", dir);
    expect_bad(a, "fifo.ckpt: not a regular file", "--init-from a FIFO");
    snprintf(a, sizeof a, TINY " --steps 2 --resume %s/adir", dir);
    expect_bad(a, "adir: no latest.ckpt there (not a run directory", "--resume a directory that holds no run");
    snprintf(a, sizeof a, TINY " --steps 2 --resume /dev/stdin --out %s/stdin", dir);
    expect_bad(a, "--resume /dev/stdin: not a regular file", "--resume /dev/stdin");
    CHECK(test_system("[ -e /proc/sys/x ] || [ -e %s/stdin/latest.ckpt ]", dir) != 0,
          "nothing was written for the refused runs");
    // parents are created; an existing run is not clobbered without --overwrite; a finished one says so
    int rc = test_system("%s " TINY " --steps 2 --out %s/p/q/r > %s/p.out 2>&1", trainer, dir, dir);
    snprintf(a, sizeof a, "%s/p/q/r/latest.ckpt", dir);
    CHECK(rc == 0 && file_size(a) > 0, "--out p/q/r: the directories are created (exit %d)", rc);
    snprintf(a, sizeof a, TINY " --steps 2 --out %s/p/q/r", dir);
    expect_bad(a, "--out " , "a new run into a run directory");
    CHECK(test_system("grep -q 'continue it with --resume .*p/q/r.* or --overwrite to replace it' %s/bad.out", dir) == 0,
          "... the message names --resume and --overwrite");
    test_system("cp %s/p/q/r/best.ckpt %s/p/q/r/best.keep", dir, dir);
    rc = test_system("%s " TINY " --steps 3 --val-every 1 --overwrite --out %s/p/q/r > %s/p.out 2>&1", trainer, dir, dir);
    CHECK(rc == 0 && test_system("! cmp -s %s/p/q/r/best.ckpt %s/p/q/r/best.keep && [ $(grep -c '^train' %s/p/q/r/train.log) = 3 ]",
                                 dir, dir, dir) == 0, "--overwrite replaces the run there, its best.ckpt and log (exit %d)", rc);
    snprintf(a, sizeof a, TINY_RUN " --steps 3 --resume %s/p/q/r", dir);
    expect_bad(a, "is at step 3 and --steps is 3: nothing to train", "resuming a finished run");
    // a second trainer on the same directory is refused while the first runs
    rc = test_system("%s " TINY " --steps 1000000 --out %s/l > %s/l.out 2>&1 & pid=$!; "
                     "for i in $(seq 400); do grep -q '^train' %s/l/train.log 2>/dev/null && break; sleep 0.02; done; "
                     "%s " TINY " --steps 2 --overwrite --out %s/l > %s/l2.out 2>&1; a=$?; "
                     "kill -TERM $pid; wait $pid; [ $a = 2 ]", trainer, dir, dir, dir, trainer, dir, dir);
    int c1 = test_system("grep -q 'l is in use by another trainer' %s/l2.out", dir) == 0;
    CHECK(rc == 0 && c1, "a second trainer on a running trainer's --out exits 2 naming it (%d %d)", rc, c1);
}

// Fields under a valid checksum are still checked: inf/NaN numbers, impossible steps.
static void test_checkpoint_fields(void) {
    char p[600], a[1200];
    Mlstm m;
    TrainState st;
    real h[4 * 32] = {0}, c[4 * 32] = {0};
    snprintf(p, sizeof p, "%s/a/latest.ckpt", dir);
    load(p, &m, &st, 4);
    TrainState s2 = st;
    m.params[5] = NAN;
    snprintf(p, sizeof p, "%s/nan.ckpt", dir);
    checkpoint_save(p, &m, &st, h, c);
    m.params[5] = 0;
    snprintf(a, sizeof a, TINY " --seed 1 --fp16 --steps 30 --resume %s --out %s/r", p, dir);
    expect_bad(a, "nan.ckpt: params[5] is nan", "resume from NaN weights under a valid checksum");
    snprintf(a, sizeof a, TINY " --steps 3 --init-from %s --out %s/r", p, dir);
    expect_bad(a, "nan.ckpt: params[5] is nan", "--init-from NaN weights");
    m.adam_v[7] = INFINITY;
    snprintf(p, sizeof p, "%s/inf.ckpt", dir);
    checkpoint_save(p, &m, &st, h, c);
    m.adam_v[7] = 0;
    snprintf(a, sizeof a, TINY " --seed 1 --fp16 --steps 30 --resume %s --out %s/r", p, dir);
    expect_bad(a, "inf.ckpt: adam_v[7] is inf", "resume from an infinite Adam moment");
    s2.data_step = 1ULL << 63;
    snprintf(p, sizeof p, "%s/far.ckpt", dir);
    checkpoint_save(p, &m, &s2, h, c);
    snprintf(a, sizeof a, TINY " --seed 1 --fp16 --steps 30 --resume %s --out %s/r", p, dir);
    expect_bad(a, "far.ckpt: data step 9223372036854775808 is beyond any run", "data_step 2^63");
    s2 = st;
    s2.step = s2.data_step + 1;
    snprintf(p, sizeof p, "%s/ahead.ckpt", dir);
    checkpoint_save(p, &m, &s2, h, c);
    snprintf(a, sizeof a, TINY " --seed 1 --fp16 --steps 30 --resume %s --out %s/r", p, dir);
    expect_bad(a, "ahead.ckpt: 21 applied steps but only 20 batches read", "step > data_step");
    snprintf(a, sizeof a, TINY_RUN " --fp16 --batch 8 --steps 30 --resume %s/a/latest.ckpt --out %s/r", dir, dir);
    expect_bad(a, "--batch 8 x 1 ranks = 8 rows disagrees with checkpoint", "resume with another --batch");
    snprintf(a, sizeof a, TINY_RUN " --no-weight-norm --fp16 --steps 30 --resume %s/a/latest.ckpt --out %s/r", dir, dir);
    expect_bad(a, "--no-weight-norm disagrees with checkpoint", "resume with another weight norm");
    snprintf(a, sizeof a, TINY " --resume %s/a/latest.ckpt --init-from %s/a/latest.ckpt", dir, dir);
    expect_bad(a, "--resume and --init-from: give one", "--resume and --init-from together");
    mlstm_free(&m);
}

// A run whose weights blow up (the loss goes NaN) stops with an error at once instead of
// skipping or training on: FP32 and FP16 alike, and it leaves no checkpoint.
static void test_stuck_skips(void) {
    const char *mode[2] = {"", "--fp16"};
    for (int k = 0; k < 2; k++) {
        char o[600], lg[600];
        snprintf(o, sizeof o, "%s/nan%d.out", dir, k);
        snprintf(lg, sizeof lg, "%s/nan%d/train.log", dir, k);
        // --lr 1e38: the first update sends the weights to ~1e37 and the next loss far past 8 bits
        int rc = test_system("%s " TINY " %s --lr 1e38 --clip 0 --steps 200 --out %s/nan%d > %s 2>&1",
                             trainer, mode[k], dir, k, o);
        LogLine l[256];
        int n = read_log(lg, l, 256);
        // (a loss past any number is said in words, not as "-nan nats")
        int said = test_system("grep -q 'step 2: the training loss is \\(NaN (the weights hold inf or NaN)\\|"
                               "infinite (the weights hold inf or NaN)\\|[0-9.e+]* nats\\).*the model has diverged' %s",
                               o) == 0;
        char ck[600];
        snprintf(ck, sizeof ck, "%s/nan%d/latest.ckpt", dir, k);
        CHECK(rc == 2 && said && n < 40 && file_size(ck) < 0, "diverged %s run: exit %d after %d of 200 steps, no checkpoint, says why",
              k ? "FP16" : "FP32", rc, n);
    }
}

// SIGINT inside a long validation pass stops it within a batch; a second SIGINT
// exits at once and leaves the last checkpoint as it was. Long passes show progress.
static void test_signal_in_validation(void) {
#define BIG "--hidden 256 --seq-len 64 --corpus-bytes 20000000 --sample-len 0 --threads 1 --print-every 1"
    int r1 = test_system("%s " BIG " --batch 8 --val-every 0 --val-steps 1 --steps 1 --out %s/v > %s/v.out 2>&1",
                         trainer, dir, dir);
    // resumed to step 2, then the whole val stream (976 batches, a minute or more): signalled once progress shows
    int r2 = test_system("%s " BIG " --batch 8 --val-every 2 --steps 3 --resume %s/v > %s/v2.out 2>&1 & pid=$!; "
                         "for i in $(seq 1200); do grep -q '^validation' %s/v2.out && break; sleep 0.1; done; "
                         "t0=$(date +%%s%%N); kill -INT $pid; wait $pid; rc=$?; t1=$(date +%%s%%N); "
                         "echo $(( (t1 - t0) / 1000000 )) > %s/v2.ms; exit $rc", trainer, dir, dir, dir, dir);
    char p[600];
    snprintf(p, sizeof p, "%s/v2.ms", dir);
    long ms = -1;
    FILE *f = fopen(p, "r");
    if (f) { if (fscanf(f, "%ld", &ms) != 1) ms = -1; fclose(f); }
    int progress = test_system("grep -Eq '^validation +[0-9]+%% \\([0-9]+/[0-9]+ batches, ETA' %s/v2.out", dir) == 0;
    CHECK(r1 == 0 && progress, "a long validation pass prints its progress (\"validation   3%% (31/976 batches, ETA ..)\")");
    Mlstm m;
    TrainState st;
    MlstmConfig cfg = {256, 64, 256, 1};
    mlstm_build(&m, cfg, 1, 1);
    real *h = (real *)mallocCheck(sizeof(real) * 8 * 256), *c = (real *)mallocCheck(sizeof(real) * 8 * 256);
    snprintf(p, sizeof p, "%s/v/latest.ckpt", dir);
    checkpoint_load(p, &m, &st, h, c, 8);
    int no_val = test_system("grep -q '^val 2 ' %s/v/train.log", dir) != 0;
    CHECK(r2 == 0 && ms >= 0 && ms < 5000 && st.data_step == 2 && no_val,
          "SIGINT during validation: exit %d %ld ms later, checkpoint at step %llu, the cut pass not logged", r2, ms,
          (unsigned long long)st.data_step);
    // a first step of 512 rows takes over a second even with gemm.h (about 90 GFLOP; 256 rows no
    // longer sufficed): the first SIGINT, 0.2 s into it, waits for it, the second, 0.2 s later, does not,
    // and writes nothing (the run's checkpoint would be written after the step)
    int r3 = test_system("%s " BIG " --batch 512 --val-every 0 --steps 5 --out %s/w > %s/w.out 2>&1 & pid=$!; "
                         "for i in $(seq 1200); do grep -q '^| best checkpoint by' %s/w.out && break; sleep 0.05; done; "
                         "sleep 0.2; kill -INT $pid; sleep 0.2; t0=$(date +%%s%%N); kill -INT $pid; wait $pid; rc=$?; "
                         "t1=$(date +%%s%%N); echo $(( (t1 - t0) / 1000000 )) > %s/w.ms; exit $rc", trainer, dir, dir, dir,
                         dir);
    snprintf(p, sizeof p, "%s/w.ms", dir);
    f = fopen(p, "r");
    ms = -1;
    if (f) { if (fscanf(f, "%ld", &ms) != 1) ms = -1; fclose(f); }
    int steps = test_system("grep -q '^train' %s/w/train.log", dir) == 0;
    int written = test_system("ls %s/w | grep -q ckpt", dir) == 0;
    CHECK(r3 == 130 && ms >= 0 && ms < 1500 && !written && !steps,
          "a second SIGINT mid-step: exit %d (want 130) %ld ms later, no checkpoint written", r3, ms);
    free(h); free(c);
    mlstm_free(&m);
#undef BIG
}

// --init-from: the weights of any checkpoint (here one with 1 row) start a new run at
// any batch and number of ranks, with fresh Adam moments and step 0.
static double val0(const char *log) {
    FILE *f = fopen(log, "r");
    char line[512];
    double v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "val 0 0 %lf", &v) == 1) break;
    if (f) fclose(f);
    return v;
}
static double last_val(const char *log) {
    FILE *f = fopen(log, "r");
    char line[512];
    double v = -1, x;
    long s;
    char ep[64];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "val %ld %63s %lf", &s, ep, &x) == 3) v = x;
    if (f) fclose(f);
    return v;
}
static void test_init_from(void) {
    char p[600], q[600];
    int r0 = test_system("%s " TINY " --batch 1 --steps 6 --val-every 6 --out %s/if > %s/if.out 2>&1", trainer, dir, dir);
    int r1 = test_system("%s " TINY " --batch 1 --steps 2 --val-every 1 --init-from %s/if/latest.ckpt --out %s/if1 >> %s/if.out 2>&1",
                         trainer, dir, dir, dir);
    snprintf(p, sizeof p, "%s/if/train.log", dir); snprintf(q, sizeof q, "%s/if1/train.log", dir);
    double vsrc = last_val(p), v1 = val0(q);
    CHECK(r0 == 0 && r1 == 0 && vsrc > 0 && v1 == vsrc, "--init-from: step 0's validation loss %.6f is the source's last %.6f (its weights)", v1, vsrc);
    // batch 4 (no model flags: they come from the checkpoint), 1 step: Adam's moments start at zero,
    // so after one step m = (1-b1) g, v = (1-b2) g^2 and m^2/v = (1-b1)^2/(1-b2), about 10, for every weight
    // with g != 0 (the betas as FP32 numbers, as adam_element uses them: 1 - 0.999f is 1.3e-5 off 0.001)
    int r2 = test_system("%s " TINY_RUN " --batch 4 --steps 1 --val-every 1 --init-from %s/if/latest.ckpt --out %s/if2 >> %s/if.out 2>&1",
                         trainer, dir, dir, dir);
    Mlstm m;
    TrainState st;
    snprintf(p, sizeof p, "%s/if2/latest.ckpt", dir);
    int fresh = 0;
    if (r2 == 0) {
        load(p, &m, &st, 4);
        double worst = 0, b1 = 1 - (double)(real)0.9, b2 = 1 - (double)(real)0.999, want = b1 * b1 / b2;
        size_t nz = 0;
        for (size_t i = 0; i < m.nparams; i++)
            if (m.adam_v[i] > 1e-30) {
                // m, g^2 and v are FP32 roundings (2^-24 = 6e-8 relative each): m^2/v is within a few 1e-7 of want
                worst = fmax(worst, fabs((double)m.adam_m[i] * m.adam_m[i] / m.adam_v[i] - want) / want);
                nz++;
            }
        fresh = nz > m.nparams / 2 && worst < 1e-6 && st.step == 1 && st.data_step == 1 && st.G == 4;
        printf("      init-from at batch 4: %zu of %zu moments nonzero, m^2/v within %.1e of (1-b1)^2/(1-b2); step %llu, G %d\n", nz, m.nparams,
               worst, (unsigned long long)st.step, st.G);
        mlstm_free(&m);
    }
    CHECK(r2 == 0 && fresh, "--init-from at batch 4: fresh Adam moments, step 1 of a new run, 4 rows of state (exit %d)", r2);
    if (test_system("command -v mpirun > /dev/null") != 0) {
        SKIP("init-from with mpirun: mpirun not found");
        return;
    }
    int r3 = test_system("ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
                         "mpirun -np 2 %s " TINY_RUN " --batch 2 --steps 1 --val-every 1 --init-from %s/if/latest.ckpt --out %s/if3 "
                         ">> %s/if.out 2>&1", trainer, dir, dir, dir);
    snprintf(p, sizeof p, "%s/if2/train.log", dir); snprintf(q, sizeof q, "%s/if3/train.log", dir);
    double v2 = val0(p), v3 = val0(q);
    // the same weights and the same 4 rows; the two ranks' mean losses are added in double: ~1e-16 relative
    CHECK(r3 == 0 && v2 > 0 && fabs(v3 - v2) <= 1e-12 * v2 + 1e-6, "--init-from with mpirun -np 2 x 2 rows: step 0's validation %.6f = %.6f at 1 x 4 (exit %d)",
          v3, v2, r3);
}

int main(void) {
    snprintf(trainer, sizeof trainer, "%s/train", test_bin_dir());
    if (access(trainer, X_OK) != 0) { printf("FAIL  %s not built\n", trainer); return 1; }
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_resume();
    test_threads();
    test_bf16();
    test_bf16_kernels();
    test_overflow();
    test_mpi();
    test_val_batch();
    test_signals();
    test_bad_flags();
    test_help_matches_parser();
    test_help_defaults();
    test_flag_ranges();
    test_outputs();
    test_checkpoint_fields();
    test_stuck_skips();
    test_init_from();
    test_signal_in_validation();
    test_system("rm -rf %s", dir);
    return test_summary("test_train");
}
