// The CPU trainer end to end, run as a user runs it (build/train next to this
// test): exact resume, MPI ranks against one process, the overflow skip path,
// SIGTERM and kill -9, and bad flags. A tiny model keeps it to seconds.
#include "mlstm.h"
#include "schedule.h"
#include "test/test.h"
#include <libgen.h>
#include <signal.h>

static char dir[] = "/tmp/mlstm_train_XXXXXX";
static char trainer[1024];
// a tiny model on a small built-in corpus; one thread so runs are comparable
#define TINY "--hidden 32 --embed 16 --batch 4 --seq-len 16 --corpus-bytes 60000 --val-every 0 --val-steps 2 " \
             "--sample-len 0 --print-every 1000 --threads 1 --lr-schedule legw --lr 3e-3 --base-batch 4 --warmup-steps 3 --decay-steps 40"


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
    int r1 = test_system("%s " TINY " --fp16 --steps 20 --ckpt %s/a.ckpt --log %s/a.log > %s/a.out 2>&1", trainer, dir, dir, dir);
    int r2 = test_system("%s " TINY " --fp16 --steps 10 --ckpt %s/b.ckpt --log %s/b.log > %s/b.out 2>&1", trainer, dir, dir, dir);
    int r3 = test_system("%s " TINY " --fp16 --steps 20 --resume %s/b.ckpt --ckpt %s/b.ckpt --log %s/b.log >> %s/b.out 2>&1", trainer, dir, dir, dir, dir);
    CHECK(r1 == 0 && r2 == 0 && r3 == 0, "resume: the three runs exit 0 (%d %d %d)", r1, r2, r3);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/a.ckpt", dir); snprintf(b, sizeof b, "%s/b.ckpt", dir);
    CHECK(file_size(a) > 0 && files_equal(a, b), "resume: 20 steps straight and 10 + resume + 10 give byte-identical checkpoints");
    LogLine la[64], lb[64];
    snprintf(a, sizeof a, "%s/a.log", dir); snprintf(b, sizeof b, "%s/b.log", dir);
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
    int r1 = test_system("%s " TINY " --clip 0.1 --steps 8 --ckpt %s/t1.ckpt --log %s/t1.log > %s/t.out 2>&1", trainer, dir, dir, dir);
    int r2 = test_system("%s " TINY " --clip 0.1 --threads 2 --steps 8 --ckpt %s/t2.ckpt --log %s/t2.log >> %s/t.out 2>&1", trainer, dir, dir, dir);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/t1.log", dir);
    LogLine l[16];
    int n = read_log(a, l, 16);
    double gmax = 0;
    for (int i = 0; i < n; i++) gmax = fmax(gmax, l[i].gnorm);
    snprintf(a, sizeof a, "%s/t1.ckpt", dir); snprintf(b, sizeof b, "%s/t2.ckpt", dir);
    CHECK(r1 == 0 && r2 == 0 && n == 8 && gmax > 0.1 && files_equal(a, b),
          "threads: 8 steps (largest gradient norm %.2f, clipped to 0.1) with 1 and 2 threads give byte-identical checkpoints", gmax);
}

static void test_overflow(void) {
    // step index 5 overflows: compare with a run that stopped after 5 steps
    int r1 = test_system("%s " TINY " --fp16 --steps 5 --ckpt %s/o5.ckpt --log %s/o5.log > %s/o.out 2>&1", trainer, dir, dir, dir);
    int r2 = test_system("%s " TINY " --fp16 --steps 6 --inject-overflow 5 --ckpt %s/o6.ckpt --log %s/o6.log >> %s/o.out 2>&1", trainer, dir, dir, dir);
    int r3 = test_system("%s " TINY " --fp16 --steps 8 --inject-overflow 5 --ckpt %s/o8.ckpt --log %s/o8.log >> %s/o.out 2>&1", trainer, dir, dir, dir);
    CHECK(r1 == 0 && r2 == 0 && r3 == 0, "overflow: runs exit 0 (%d %d %d)", r1, r2, r3);
    char p[600];
    Mlstm m5, m6;
    TrainState s5, s6;
    snprintf(p, sizeof p, "%s/o5.ckpt", dir); load(p, &m5, &s5, 4);
    snprintf(p, sizeof p, "%s/o6.ckpt", dir); load(p, &m6, &s6, 4);
    CHECK(memcmp(m5.params, m6.params, m5.nparams * sizeof(real)) == 0 && memcmp(m5.adam_m, m6.adam_m, m5.nparams * sizeof(real)) == 0 &&
          memcmp(m5.adam_v, m6.adam_v, m5.nparams * sizeof(real)) == 0, "overflow: weights and Adam moments untouched by the skipped step");
    CHECK(s5.step == 5 && s6.step == 5 && s6.data_step == 6, "overflow: applied steps stay 5 (%llu), the data moved on (%llu)",
          (unsigned long long)s6.step, (unsigned long long)s6.data_step);
    LossScaler l5, l6;
    loss_scaler_deserialize(&l5, s5.scaler); loss_scaler_deserialize(&l6, s6.scaler);
    CHECK(l5.scale == 65536 && l6.scale == 32768 && l6.good_steps == 0, "overflow: scale halved %g -> %g, good-step counter reset (%ld)",
          l5.scale, l6.scale, l6.good_steps);
    LogLine ll[16];
    snprintf(p, sizeof p, "%s/o8.log", dir);
    int n = read_log(p, ll, 16);
    CHECK(n == 8 && ll[5].skipped == 1 && ll[4].skipped == 0 && ll[6].skipped == 0, "overflow: the log marks step 6 (index 5) skipped");
    // the schedule did not advance: the step after the skip uses the rate the skipped step would have used
    CHECK(n == 8 && ll[6].lr == ll[5].lr && ll[5].lr != ll[4].lr && ll[7].lr != ll[6].lr,
          "overflow: lr after the skip repeats (%.4e %.4e %.4e %.4e)", n == 8 ? ll[4].lr : 0, n == 8 ? ll[5].lr : 0,
          n == 8 ? ll[6].lr : 0, n == 8 ? ll[7].lr : 0);
    CHECK(n == 8 && ll[5].scale == 65536 && ll[6].scale == 32768, "overflow: the next step runs at the halved scale");
    // without --fp16 (S = 1, limit: any non-finite value) an injected +inf must be caught too
    int r4 = test_system("%s " TINY " --steps 7 --inject-overflow 5 --ckpt %s/f7.ckpt --log %s/f7.log >> %s/o.out 2>&1", trainer, dir, dir, dir);
    snprintf(p, sizeof p, "%s/f7.log", dir);
    n = read_log(p, ll, 16);
    CHECK(r4 == 0 && n == 7 && ll[5].skipped == 1 && ll[4].skipped == 0 && ll[6].skipped == 0 && ll[5].scale == 1,
          "overflow: FP32 mode skips the step with an injected +inf (exit %d, %d log lines)", r4, n);
    mlstm_free(&m5); mlstm_free(&m6);
}

static void test_mpi(void) {
    if (test_system("command -v mpirun > /dev/null") != 0) {
        if (getenv("REQUIRE_MPI")) CHECK(0, "mpi: mpirun not found but REQUIRE_MPI is set");
        else printf("skip  mpi: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)\n");
        return;
    }
    // Open MPI itself leaks at exit (its plugins), which LeakSanitizer would report
    // in a SAN=1 build: leak checking is off for these two runs only.
    const char *mpirun = "ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                         "OMPI_MCA_rmaps_base_oversubscribe=1 mpirun";
    int r1 = test_system("%s -np 1 %s " TINY " --batch 8 --steps 10 --ckpt %s/m1.ckpt --log %s/m1.log > %s/m.out 2>&1", mpirun, trainer, dir, dir, dir);
    int r2 = test_system("%s -np 2 %s " TINY " --batch 4 --steps 10 --ckpt %s/m2.ckpt --log %s/m2.log >> %s/m.out 2>&1", mpirun, trainer, dir, dir, dir);
    CHECK(r1 == 0 && r2 == 0, "mpi: -np 1 with 8 rows and -np 2 with 4 rows each exit 0 (%d %d)", r1, r2);
    char p[600];
    snprintf(p, sizeof p, "%s/m.out", dir);
    CHECK(test_system("grep -q '4 rows/rank x 2 ranks = 8' %s", p) == 0, "mpi: the 2-rank run reports 2 ranks x 4 rows");
    Mlstm a, b;
    TrainState sa, sb;
    snprintf(p, sizeof p, "%s/m1.ckpt", dir); load(p, &a, &sa, 8);
    snprintf(p, sizeof p, "%s/m2.ckpt", dir); load(p, &b, &sb, 8);
    double dw = rel_diff(b.params, a.params, a.nparams);
    CHECK(dw < 1e-5 && sa.step == 10 && sb.step == 10, "mpi: weights after 10 steps agree to %.1e relative (< 1e-5)", dw);
    LogLine la[16], lb[16];
    snprintf(p, sizeof p, "%s/m1.log", dir); int na = read_log(p, la, 16);
    snprintf(p, sizeof p, "%s/m2.log", dir); int nb = read_log(p, lb, 16);
    double dl = 0;
    for (int i = 0; i < na && i < nb; i++) dl = fmax(dl, fabs(la[i].loss - lb[i].loss) / la[i].loss);
    CHECK(na == 10 && nb == 10 && dl < 1e-5, "mpi: the 10 losses agree to %.1e relative (< 1e-5)", dl);
    mlstm_free(&a); mlstm_free(&b);
}

static void test_signals(void) {
    // SIGTERM mid-run: finish the step, write a checkpoint, exit 0; resuming from it
    // then ends where an uninterrupted run ends.
    char log[600], ck[600];
    snprintf(log, sizeof log, "%s/s.log", dir); snprintf(ck, sizeof ck, "%s/s.ckpt", dir);
    int rc = test_system("%s " TINY " --steps 100000 --ckpt %s --log %s > %s/s.out 2>&1 & pid=$!; "
                         "for i in $(seq 200); do n=$(grep -c '^train' %s 2>/dev/null); [ \"${n:-0}\" -ge 3 ] && break; sleep 0.05; done; "
                         "kill -TERM $pid; wait $pid", trainer, ck, log, dir, log);
    CHECK(rc == 0, "sigterm: the trainer exits 0 (%d)", rc);
    Mlstm m;
    TrainState st;
    load(ck, &m, &st, 4);
    CHECK(st.data_step >= 3 && st.data_step < 100000, "sigterm: a valid checkpoint at step %llu", (unsigned long long)st.data_step);
    long k = (long)st.data_step + 4;
    int r1 = test_system("%s " TINY " --steps %ld --resume %s --ckpt %s --log %s >> %s/s.out 2>&1", trainer, k, ck, ck, log, dir);
    int r2 = test_system("%s " TINY " --steps %ld --ckpt %s/s2.ckpt --log %s/s2.log >> %s/s.out 2>&1", trainer, k, dir, dir, dir);
    char ck2[600];
    snprintf(ck2, sizeof ck2, "%s/s2.ckpt", dir);
    CHECK(r1 == 0 && r2 == 0 && files_equal(ck, ck2), "sigterm: resuming to step %ld equals the uninterrupted run, byte for byte", k);
    mlstm_free(&m);

    // kill -9 while checkpoints are being written (one every step, a larger model so
    // writes take a while): the last complete checkpoint always survives
    int intact = 1, torn = 0;
    for (int trial = 0; trial < 6; trial++) {
        test_system("rm -f %s/k.ckpt*", dir);
        test_system("%s --hidden 256 --batch 1 --seq-len 2 --corpus-bytes 20000 --val-every 0 --sample-len 0 --threads 1 "
                    "--steps 100000 --ckpt-every 1 --ckpt %s/k.ckpt --log %s/k.log > /dev/null 2>&1 & pid=$!; "
                    "for i in $(seq 400); do [ -f %s/k.ckpt ] && break; sleep 0.01; done; sleep 0.%d; kill -9 $pid; wait $pid 2>/dev/null",
                    trainer, dir, dir, dir, 13 + 13 * trial);
        torn += test_system("ls %s | grep -q 'k.ckpt.tmp'", dir) == 0;  // killed mid-write: a temporary file remains
        char p[600];
        snprintf(p, sizeof p, "%s/k.ckpt", dir);
        int ok = test_system("%s --hidden 256 --batch 1 --seq-len 2 --corpus-bytes 20000 --val-every 0 --sample-len 0 --threads 1 "
                             "--steps 1 --resume %s --ckpt %s/k2.ckpt --log %s/k2.log > %s/k.out 2>&1", trainer, p, dir, dir, dir);
        if (ok != 0) intact = 0;
    }
    CHECK(intact, "kill -9 during checkpoint writes (6 trials, %d of them mid-write): the checkpoint left behind always loads", torn);
}

static void expect_bad(const char *args, const char *needle, const char *what) {
    char out[600];
    snprintf(out, sizeof out, "%s/bad.out", dir);
    int rc = test_system("%s %s > %s 2>&1", trainer, args, out);
    int found = test_system("grep -qF -- '%s' %s", needle, out) == 0;
    char msg[300] = "";
    FILE *f = fopen(out, "r");
    if (f) { if (!fgets(msg, sizeof msg, f)) msg[0] = 0; fclose(f); }
    msg[strcspn(msg, "\n")] = 0;
    CHECK(rc == 2 && found, "bad input, %s: exit %d (want 2), \"%s\"", what, rc, msg);
}

static void test_bad_flags(void) {
    expect_bad("--bogus 3", "unknown flag --bogus", "unknown flag");
    expect_bad("--batch 0", "--batch: must be at least 1, got 0", "zero batch");
    expect_bad("--hidden -4", "--hidden: must be at least 1, got -4", "negative hidden size");
    expect_bad("--seq-len 12x", "--seq-len: expected a whole number, got \"12x\"", "size with junk");
    expect_bad("--lr abc", "--lr", "learning rate that is not a number");
    expect_bad("--steps", "--steps needs a value", "missing value");
    expect_bad("--train /no/such/dir", "/no/such/dir", "missing data path");
    char args[900];
    // a checkpoint of another shape (written by test_resume: H=32)
    snprintf(args, sizeof args, "--hidden 64 --embed 16 --batch 4 --seq-len 16 --corpus-bytes 60000 --resume %s/a.ckpt", dir);
    expect_bad(args, "the command line asks for D=16 H=64", "resume from a checkpoint of another shape");
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

int main(int argc, char **argv) {
    (void)argc;
    char self[1024];
    snprintf(self, sizeof self, "%s", argv[0]);
    snprintf(trainer, sizeof trainer, "%s/train", dirname(self));
    if (access(trainer, X_OK) != 0) { printf("FAIL  %s not built\n", trainer); return 1; }
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_resume();
    test_threads();
    test_overflow();
    test_mpi();
    test_signals();
    test_bad_flags();
    test_help_matches_parser();
    test_system("rm -rf %s", dir);
    return test_summary("test_train");
}
