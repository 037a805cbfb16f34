// test_sweep.c: the large-batch sweep end to end (dev/sweep/sweep.py, dev/sweep/sweep_report.py;
// dev/sweep/README.md), tiny: a 16-unit model on a few kB of the built-in corpus.
//   1. bad flags: exit 2 with a message naming the flag
//   2. a sweep of 2 rules x 2 batch sizes: every run done, the table filled in, and the
//      table regenerated from the run logs alone is byte for byte the same
//   3. a deliberately diverging run (lr 5): detected, stopped early (SIGTERM), shown
//      as 'diverged' in the table, not dropped
//   2b. --ks, and the claim report over seed directories (gzipped logs; a run counted once)
//   4. running a finished sweep again redoes nothing
//   5. a sweep interrupted by SIGTERM during its second run: exit 143, the first run's
//      result kept, a checkpoint left, a second sweep on the same directory refused;
//      run again, the first run is skipped and the second resumes from its checkpoint
//   6. alphaA and puri-run: the peak lr^A and the decay the start-up table states
//   7. make_data.py: every seed's set holds the same documents in another order
//   8. critical_batch.py on logs made to follow S = S_min (1 + B_n / B) and
//      E|G_B|^2 = |G|^2 + tr(Sigma) / B: it finds B_n and B_simple; thin_logs.py's
//      thinned logs give the same page
//   9. frontier_report.py's verdicts on runs made to confirm, refute and not test LEGW, and
//      no verdict at a k where some alphas alone ran
//  10. frontier.py: a tiny plan, stopped by SIGTERM and run again: exit 143, then every
//      run done once, the grid grown where its best was at an edge, the base lr its best;
//      a k given its own alphas runs those alone
//  11. a trainer that takes --ckpt and --log (not --out): given those, by path
// The trainer is the one next to this program (build/train, or build-san/train under
// SAN=1); tools are found from the repository root, where tests run.
#include "test/test.h"
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

static char trainer[4200], dir[64];

static int exists(const char *fmt, const char *a) {
    char p[4200];
    snprintf(p, sizeof p, fmt, dir, a);
    struct stat sb;
    return stat(p, &sb) == 0;
}

// The whole of a file (NULL if unreadable); the caller frees it.
static char *slurp(const char *fmt, const char *a) {
    char p[4200];
    snprintf(p, sizeof p, fmt, dir, a);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, r;
    char *buf = (char *)malloc(cap + 1);
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) buf = (char *)realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    buf[n] = 0;
    return buf;
}

static int count_lines(const char *fmt, const char *a, const char *prefix) {
    char *s = slurp(fmt, a);
    if (!s) return 0;
    int n = 0;
    for (char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, prefix, strlen(prefix)) == 0) n++;
    free(s);
    return n;
}

static int contains(const char *fmt, const char *a, const char *needle) {
    char *s = slurp(fmt, a);
    int ok = s && strstr(s, needle) != NULL;
    free(s);
    return ok;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Writes a file (the fixtures of tests 8 and 9); returns 0 on failure.
static int write_file(const char *path, const char *fmt, ...) {
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    return fclose(f) == 0;
}

// A run's .out as the trainer writes its start-up table: what sweep_report.read_run_blocks reads.
static int write_out(const char *runs, const char *name, int seed, int B, int steps, double base, double peak) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s.out", runs, name);
    return write_file(p, "$ train --seed %d --batch %d\n| setting | value |\n"
                      "| batch | %d rows/rank x 1 ranks = %d, T = 8 |\n| steps | %d (1.00 epochs) |\n"
                      "| base lr | %g at batch 4 |\n| peak lr | %g at batch %d |\n"
                      "| warmup | 10 steps (0.0015625 epochs at B0) |\n", seed, B, B, B, steps, base, peak, B);
}

// A run made up as a thinned log and its .status: finished at bpc (its train bpc `path`, a block per value,
// "" for one block at the final bpc), or stopped by the divergence rule (diverged: no final validation).
static int fake_run_path(const char *root, const char *sub, const char *name, int seed, int B, double base,
                         double peak, double bpc, const char *path, int diverged) {
    char runs[4300], p[4400], blocks[1024] = "";
    snprintf(runs, sizeof runs, "%s/%s/runs", root, sub);
    if (test_system("mkdir -p %s", runs) != 0) return 0;
    int step = 0;
    for (const char *q = path; *q; ) {
        char *end;
        double x = strtod(q, &end);
        if (end == q) break;
        step += 10;
        snprintf(blocks + strlen(blocks), sizeof blocks - strlen(blocks), "block %d 0.1 0 %.6f %.6f 0.5 10\n", step,
                 x * 0.6931, x);
        q = end;
    }
    if (!*path) snprintf(blocks, sizeof blocks, "block 100 1 0 %.6f %.6f 0.5 100\n", bpc * 0.6931, bpc);
    snprintf(p, sizeof p, "%s/%s.thin", runs, name);
    int ok = write_out(runs, name, seed, B, 100, base, peak);
    if (diverged) ok = ok && write_file(p, "# thinned\n%s", blocks);
    else ok = ok && write_file(p, "# thinned\n%sval 100 1 %.6f %.6f\n", blocks, bpc * 0.6931, bpc);
    snprintf(p, sizeof p, "%s/%s.status", runs, name);
    if (diverged) ok = ok && write_file(p, "{\"status\": \"diverged\", \"step\": 20, \"reason\": \"made up\"}\n");
    else ok = ok && write_file(p, "{\"status\": \"done\", \"bpc\": %.6f}\n", bpc);
    return ok && test_system("gzip -nf %s/%s.thin", runs, name) == 0;
}

static int fake_run(const char *root, const char *sub, const char *name, int seed, int B, double base, double peak,
                    double bpc) {
    return fake_run_path(root, sub, name, seed, B, base, peak, bpc, "", 0);
}

// The model and data every sweep here uses; `more` adds flags.
#define TINY "--hidden 16 --seq-len 8 --base-batch 2 --threads 1 --budget 120"
#define TRAINER_FLAGS "-- --embed 8"

// The number after the second '|' of the start-up table row `name` in text (NAN if none).
static double table_num(const char *text, const char *name) {
    char key[128];
    snprintf(key, sizeof key, "\n| %s ", name);
    const char *r = text ? strstr(text, key) : NULL;
    if (!r || !(r = strchr(r + 2, '|'))) return NAN;
    return atof(r + 1);
}

// Field i (0: the text before the first '|') of the markdown row starting with `row`, as a number.
static double md_field(const char *text, const char *row, int i) {
    const char *r = text ? strstr(text, row) : NULL;
    for (int f = 0; r && f < i; f++) {
        r = strchr(r + (f == 0 ? 0 : 1), '|');
        if (r && f + 1 < i && strchr(r + 1, '\n') && strchr(r + 1, '|') > strchr(r + 1, '\n')) return NAN;
    }
    return r ? atof(r + 1) : NAN;
}

// 6. the alphaA rules and puri-run, as the trainer's start-up table states them
static void test_alpha_rules(void) {
    int rc = test_system("dev/sweep/sweep.py --train-bin %s --out %s/al --corpus-bytes 4000 --ks 4 --lr 0.01 "
                         "--no-report --rules alpha0.25,alpha1,puri,puri-run " TINY " " TRAINER_FLAGS
                         " > %s/al.txt 2>&1", trainer, dir, dir);
    CHECK(rc == 0, "alpha0.25,alpha1,puri,puri-run at k = 4: exit %d (output in %s/al.txt)", rc, dir);
    CHECK(contains("%s/al/runs/%s.out", "puri_k4", "linear to 0 by step 100000 "),
          "puri: the reconstruction's fixed 100,000-step horizon");
    char *a = slurp("%s/al/runs/%s.out", "alpha0.25_k4"), *b = slurp("%s/al/runs/%s.out", "alpha1_k4");
    char *p = slurp("%s/al/runs/%s.out", "puri-run_k4");
    double pa = table_num(a, "peak lr"), pb = table_num(b, "peak lr"), pp = table_num(p, "peak lr");
    // the table prints 6 significant digits
    CHECK(fabs(pa - 0.01 * pow(4, 0.25)) < 1e-6 && fabs(pb - 0.04) < 1e-9,
          "peak lr x k^alpha: alpha 0.25 %.7g (want %.7g), alpha 1 %g (want 0.04)", pa, 0.01 * pow(4, 0.25), pb);
    double wa = table_num(a, "warmup");
    CHECK(wa > 0 && wa == table_num(b, "warmup"),
          "every alpha has LEGW's warmup, the same steps");
    double steps = table_num(p, "steps");
    char want[64];
    snprintf(want, sizeof want, "linear to 0 by step %.0f ", steps);
    CHECK(fabs(pp - 0.04) < 1e-9 && p && strstr(p, want) && table_num(p, "warmup") == 0,
          "puri-run: peak min(lr k, 6 lr) = %g (want 0.04), no warmup, decay to 0 at the run's last step (%s)",
          pp, want);
    free(a); free(b); free(p);
    rc = test_system("dev/sweep/sweep.py --train-bin %s --rules alpha3 > %s/al2.txt 2>&1", trainer, dir);
    CHECK(rc == 2 && contains("%s/al2.txt", "", "alpha3"), "--rules alpha3 (A above 2): exit %d (want 2)", rc);
}

// 7. make_data.py: the same documents for every seed, in the seed's order
static void test_make_data(void) {
    int rc = test_system("dev/sweep/make_data.py --out %s/md --sizes 3000,6000 --seeds 1,2 --val-bytes 1000 "
                         "--prepare %s/prepare > %s/md.txt 2>&1", dir, test_bin_dir(), dir);
    CHECK(rc == 0, "make_data.py: exit %d (output in %s/md.txt)", rc, dir);
    char a[200], b[200];
    snprintf(a, sizeof a, "%s/md/6000/seed1/train_000.bin", dir);
    snprintf(b, sizeof b, "%s/md/6000/seed2/train_000.bin", dir);
    CHECK(file_size(a) > 6000 && file_size(a) == file_size(b) && !files_equal(a, b),
          "two seeds: as long, not the same");
    rc = test_system("tail -c +33 %s | sort > %s/d1 && tail -c +33 %s | sort > %s/d2 && cmp -s %s/d1 %s/d2 && "
                     "tail -c +33 %s/md/3000/seed1/train_000.bin | sort | comm -23 - %s/d1 | grep -q . ; test $? = 1",
                     a, dir, b, dir, dir, dir, dir, dir);
    CHECK(rc == 0, "... the same documents, and the 3000-byte set's are among the 6000-byte set's");
    struct stat s1, s2;
    int ok = stat(a, &s1) == 0;
    rc = test_system("sleep 1.1 && dev/sweep/make_data.py --out %s/md --sizes 3000,6000 --seeds 1,2 --val-bytes 1000 "
                     "--prepare %s/prepare > %s/md2.txt 2>&1", dir, test_bin_dir(), dir);
    CHECK(rc == 0 && ok && stat(a, &s2) == 0 && s1.st_mtime == s2.st_mtime,
          "run again: nothing rewritten (exit %d)", rc);
}

// 8. critical_batch.py on made-up logs: steps to 1.2 bpc S = 1000 (1 + 32 / B) (a bpc falling linearly to
// it, slowly enough that a block of 8192 characters falls less than the noise bins' 0.1), |G_B|^2 =
// 1 + 100 / B; then the same from thinned logs
static void test_critical_batch(void) {
    int ok = test_system("mkdir -p %s/cb/s1/runs", dir) == 0;
    for (int k = 1; k <= 16; k *= 2) {
        int B = 4 * k;
        double S = 1000.0 * (1 + 32.0 / B), g = sqrt(1 + 100.0 / B);
        int N = (int)(2 * S);
        char name[32], p[300];
        snprintf(name, sizeof name, "legw_k%d", k);
        snprintf(p, sizeof p, "%s/cb/s1/runs", dir);
        ok = ok && write_out(p, name, 1, B, N, 0.01, 0.01);
        snprintf(p, sizeof p, "%s/cb/s1/runs/%s.log", dir, name);
        FILE *f = fopen(p, "w");
        if (!f) { ok = 0; continue; }
        fprintf(f, "# train step epoch lr loss bpc scale skipped gnorm chars_per_s | val step epoch loss bpc\n");
        for (int s = 1; s <= N; s++) {
            double bpc = 2.0 - 0.8 * s / S;
            fprintf(f, "train %d %.6f 1e-3 %.6f %.6f 1 0 %.6e 1000\n", s, (double)s / N, bpc * M_LN2, bpc, g);
        }
        fprintf(f, "val %d 1 0.5 0.7213\n", N);
        fclose(f);
        snprintf(p, sizeof p, "%s/cb/s1/runs/%s.status", dir, name);
        ok = ok && write_file(p, "{\"status\": \"done\", \"bpc\": 0.7213}\n");
    }
    CHECK(ok, "made-up logs written");
    int rc = test_system("dev/sweep/critical_batch.py --out %s/cb/crit --targets 1.2 --bins 1.5 %s/cb/s1 > %s/cb.txt "
                         "2>&1",
                         dir, dir, dir);
    char *md = slurp("%s/cb/crit.md", "");
    double smin = md_field(md, "| 1.2 |", 7), bn = md_field(md, "| 1.2 |", 8), ns = md_field(md, "| 1.5 |", 4);
    // B_n is fitted on a grid of 1% steps; the crossing is exact by construction (a linear fall, interpolated)
    CHECK(rc == 0 && fabs(bn / 32 - 1) < 0.02 && fabs(smin / 1000 - 1) < 0.02,
          "steps to a loss: B_n %g (want 32), S_min %g (want 1000) (exit %d)", bn, smin, rc);
    CHECK(fabs(ns / 100 - 1) < 0.01, "noise scale: B_simple %g (want 100)", ns);
    rc = test_system("dev/sweep/thin_logs.py %s/cb > %s/thin.txt 2>&1 && mkdir -p %s/cb/raw && "
                     "mv %s/cb/s1/runs/*.log %s/cb/raw/ && dev/sweep/critical_batch.py --out %s/cb/crit "
                     "--targets 1.2 --bins 1.5 %s/cb/s1 >> %s/cb.txt 2>&1", dir, dir, dir, dir, dir, dir, dir, dir);
    char *md2 = slurp("%s/cb/crit.md", "");
    CHECK(rc == 0 && md && md2 && strcmp(md, md2) == 0 && exists("%s/cb/s1/runs/%s", "legw_k16.thin.gz"),
          "thinned logs give the same page (exit %d)", rc);
    free(md); free(md2);
    rc = test_system("dev/sweep/thin_logs.py %s/cb > %s/thin2.txt 2>&1", dir, dir);
    CHECK(rc == 0 && contains("%s/thin2.txt", "", "0 written"), "thin_logs.py again: nothing rewritten");
}

// 9. frontier_report.py's verdicts, on made-up runs: per budget a grid of two base lrs (0.02 best) over
// seeds 1-4, and at k = 64 LEGW and alphas 0.25 and 1 at the baseline plus an offset per seed
static void fake_budget(const char *root, const char *budget, const double legw[4], const double a25[4],
                        const double a1[4], double main_base) {
    const double base[4] = {1.00, 1.01, 0.99, 1.005};
    char r[300], sub[300], name[32];
    snprintf(r, sizeof r, "%s/%s", root, budget);
    for (int s = 1; s <= 4; s++) {
        snprintf(sub, sizeof sub, "grid/lr0.01/seed%d", s);
        fake_run(r, sub, "legw_k1", s, 4, 0.01, 0.01, base[s - 1] + 0.05);
        snprintf(sub, sizeof sub, "grid/lr0.02/seed%d", s);
        fake_run(r, sub, "legw_k1", s, 4, 0.02, 0.02, base[s - 1]);
        snprintf(sub, sizeof sub, "main/seed%d", s);
        fake_run(r, sub, "legw_k64", s, 256, main_base, main_base * 8, base[s - 1] + legw[s - 1]);
        snprintf(name, sizeof name, "alpha0.25_k64");
        fake_run(r, sub, name, s, 256, main_base / 2, main_base * 2.83, base[s - 1] + a25[s - 1]);
        fake_run(r, sub, "alpha1_k64", s, 256, main_base * 8, main_base * 64, base[s - 1] + a1[s - 1]);
    }
}

static void test_frontier_report(void) {
    char root[200];
    snprintf(root, sizeof root, "%s/fv", dir);
    const double near[4] = {0.004, 0.006, 0.005, 0.005}, far[4] = {0.06, 0.061, 0.059, 0.06},
                 worse[4] = {0.1, 0.1, 0.1, 0.1}, none[4] = {0.2, 0.21, 0.19, 0.2},
                 straddle[4] = {0.005, 0.035, 0.010, 0.030};
    fake_budget(root, "1000", near, far, worse, 0.02);      // LEGW keeps the accuracy
    for (int s = 1; s <= 4; s++) {  // and at k = 32 LEGW and alpha 0.25 alone: no frontier there, no verdict
        char r1[300], sub[300];
        snprintf(r1, sizeof r1, "%s/1000", root);
        snprintf(sub, sizeof sub, "main/seed%d", s);
        fake_run(r1, sub, "legw_k32", s, 128, 0.02, 0.02 * 5.66, 1.0 + near[s - 1]);
        fake_run(r1, sub, "alpha0.25_k32", s, 128, 0.02 / 1.41, 0.02 * 2.38, 1.0 + far[s - 1]);
    }
    fake_budget(root, "2000", far, near, worse, 0.02);      // alpha 0.25 keeps it, LEGW does not
    fake_budget(root, "3000", none, none, none, 0.02);      // nothing keeps it
    fake_budget(root, "4000", straddle, worse, worse, 0.02);  // LEGW's interval straddles the margin
    int rc = test_system("dev/sweep/frontier_report.py %s --legw %s/none > %s/fv.txt 2>&1", root, dir, dir);
    char *md = slurp("%s/fv/frontier.md", "");
    const char *want[][2] = {{"[1000 bytes]", "| LEGW confirmed |"}, {"[2000 bytes]", "| LEGW refuted |"},
                             {"[3000 bytes]", "| not testable at this budget |"}, {"[4000 bytes]", "| undecided |"}};
    for (int i = 0; i < 4; i++) {  // the budget's row at k = 64
        const char *row = md ? strstr(md, want[i][0]) : NULL, *end = row ? strchr(row, '\n') : NULL;
        while (row && end && !(strstr(row, " | 64 | ") && strstr(row, " | 64 | ") < end)) {
            row = strstr(end, want[i][0]);
            end = row ? strchr(row, '\n') : NULL;
        }
        const char *v = row ? strstr(row, want[i][1]) : NULL;
        CHECK(rc == 0 && v && end && v < end, "budget %s: verdict %s at k = 64 (exit %d)", want[i][0], want[i][1],
              rc);
    }
    const char *v32 = md ? strstr(md, " | 32 | 0.5 (of 0.25, 0.5) |") : NULL;
    const char *e32 = v32 ? strchr(v32, '\n') : NULL;
    const char *n32 = v32 ? strstr(v32, "| no verdict (alphas 0.25, 0.5 alone) |") : NULL;
    const char *l32 = v32;  // the start of its row: budget 1000's
    while (l32 && l32 > md && l32[-1] != '\n') l32--;
    CHECK(v32 && n32 && e32 && n32 < e32 && strncmp(l32, "| [1000 bytes]", 14) == 0,
          "k = 32 with two alphas alone: the better of them named as such, and no verdict");
    CHECK(contains("%s/fv/1000/frontier.md", "", "| 32 | 0.5 (of 0.25, 0.5) |") &&
          contains("%s/fv/1000/frontier.md", "", "At k = 32 only alphas 0.25, 0.5 ran: no frontier"),
          "... and so on the budget's page");
    char *b2 = slurp("%s/fv/2000/frontier.md", "");
    // Puri's claim at k = 256 (budget 5000): linear (x256) stopped by the rule in seeds 1 and 2 and blown up in
    // seeds 1 and 3; sqrt (x16) within 2% of puri-run, which is the frontier; LEGW 2.5% behind it
    const double base[3] = {1.00, 1.01, 0.99};
    char r5[300], sub[300];
    snprintf(r5, sizeof r5, "%s/5000", root);
    for (int s = 1; s <= 3; s++) {
        snprintf(sub, sizeof sub, "grid/lr0.02/seed%d", s);
        fake_run(r5, sub, "legw_k1", s, 4, 0.02, 0.02, base[s - 1]);
        snprintf(sub, sizeof sub, "main/seed%d", s);
        fake_run(r5, sub, "legw_k256", s, 1024, 0.02, 0.32, base[s - 1] + 0.12);
        fake_run(r5, sub, "puri-run_k256", s, 1024, 0.02, 0.12, base[s - 1] + 0.095);
        snprintf(sub, sizeof sub, "range/x16/seed%d", s);
        fake_run(r5, sub, "linear_k256", s, 1024, 0.02 * 16 / 256, 0.32, base[s - 1] + 0.10);
        snprintf(sub, sizeof sub, "range/x256/seed%d", s);
        fake_run_path(r5, sub, "linear_k256", s, 1024, 0.02, 5.12, 4.3, s == 2 ? "3.0" : "3.0 2.0 1.8 3.5 4.3",
                      s < 3);  // seed 1 blew up before it was stopped: one failure, not two
    }
    rc = test_system("dev/sweep/frontier_report.py %s --legw %s/none > %s/fv.txt 2>&1", root, dir, dir);
    char *pm = slurp("%s/fv/frontier.md", "");
    const char *p5 = pm ? strstr(pm, "| 5000 | 256 | 2 of 3 | 3 of 3 |") : NULL;
    const char *e5 = p5 ? strchr(p5, '\n') : NULL;
    CHECK(rc == 0 && p5 && e5 && strstr(p5, "| confirmed | sqrt |") && strstr(p5, "| confirmed | sqrt |") < e5,
          "Puri's claim: linear stopped in 2 of 3 seeds, failed in 3, puri-run the frontier: confirmed, and "
          "sqrt matches it (exit %d)", rc);
    free(pm);
    // the peak group at k = 256 (budget 5000): peaks 6 and 16 x base, warmups 0 and 390, and the puri rule.
    // Warmup lowers the bpc by 0.035 at both peaks (resolved), the peak moves it by +0.004, -0.003, +0.001 (not
    // resolved), LEGW (16, 390) ends 0.033 below puri-run and 0.032 below the puri rule: within the margin of
    // both, so no schedule of one's own is needed, and warmup is what matters. Budget 6000: the same cells, but
    // LEGW 0.06 above the puri rule (outside the margin: needed), and the peak, not the warmup, resolved.
    const double dpeak[3] = {0.004, -0.003, 0.001}, dwarm[3] = {0.001, -0.001, 0.0};
    for (int s = 1; s <= 3; s++) {
        double b0 = base[s - 1];
        const struct { const char *sub; double bpc5, bpc6; } cells[] = {
            {"x6-w0", b0 + 0.095, b0 + 0.040 + dwarm[s - 1]},
            {"x6-w390", b0 + 0.060 + dwarm[s - 1], b0 + 0.040},
            {"x16-w0", b0 + 0.095 + dpeak[s - 1], b0 + 0.100 + dwarm[s - 1]},
            {"x16-w390", b0 + 0.060 + dwarm[s - 1] + dpeak[s - 1], b0 + 0.100},
            {"puri", b0 + 0.094, b0 + 0.040 + dpeak[s - 1]}};
        char r6[300];
        snprintf(r6, sizeof r6, "%s/6000", root);
        snprintf(sub, sizeof sub, "grid/lr0.02/seed%d", s);
        fake_run(r6, sub, "legw_k1", s, 4, 0.02, 0.02, b0);
        for (int c = 0; c < 5; c++) {
            const char *rule = c == 4 ? "puri_k256" : "puri-run_k256";
            snprintf(sub, sizeof sub, "peak/%s/seed%d", cells[c].sub, s);
            fake_run(r5, sub, rule, s, 1024, 0.02, 0.12, cells[c].bpc5);
            fake_run(r6, sub, rule, s, 1024, 0.02, 0.12, cells[c].bpc6);
        }
    }
    rc = test_system("dev/sweep/frontier_report.py %s --legw %s/none > %s/fv.txt 2>&1", root, dir, dir);
    CHECK(rc == 0 && contains("%s/fv/5000/frontier.md", "", "**a schedule of one's own is not needed** at k = 256") &&
          contains("%s/fv/5000/frontier.md", "", "**warmup is what matters** (warmup -0.0350 ± "),
          "the peak group: LEGW within the margin of puri-run and the puri rule, warmup resolved, the peak not: "
          "not needed, warmup is what matters (exit %d, %s/fv/5000/frontier.md)", rc, dir);
    CHECK(contains("%s/fv/6000/frontier.md", "", "**a schedule of one's own is needed** at k = 256") &&
          contains("%s/fv/6000/frontier.md", "", "**the peak is what matters**"),
          "... LEGW outside the margin of the puri rule, the peak resolved, the warmup not: needed, the peak matters");
    CHECK(contains("%s/fv/5000/frontier.md", "", "puri-run's (seeds 1,2,3): the same final bpc; legw's (seeds 1,2,3): "
                   "final bpc differing by up to 0.064000"),
          "... and the corners that repeat committed runs (puri-run's the same, LEGW's not) are compared with them");
    CHECK(b2 && strstr(b2, "| 0.02 (chosen) |") && strstr(b2, "| 64 | 0.25 |"),
          "the base lr is the grid's best (0.02), the frontier at k = 64 alpha 0.25");
    free(md); free(b2);
    // main runs at another base lr than the grid's best: the grid changed after they ran; refused
    snprintf(root, sizeof root, "%s/fv2", dir);
    fake_budget(root, "1000", near, far, worse, 0.01);
    rc = test_system("dev/sweep/frontier_report.py %s > %s/fv2.txt 2>&1", root, dir);
    CHECK(rc == 2 && contains("%s/fv2.txt", "", "the grid changed"),
          "main runs at another base lr: exit %d (want 2)", rc);
}

// 11. a trainer that takes its checkpoint and log by path (--ckpt, --log; an experiment's earlier build) rather
// than a run directory (--out): sweep.py reads which from its --help and gives it the paths. Made up here as a
// wrapper of the trainer that logs the flags it got and passes them on as --out and --resume take them.
static void test_path_trainer(void) {
    char wrap[300], none[300];
    snprintf(wrap, sizeof wrap, "%s/path-train", dir);
    snprintf(none, sizeof none, "%s/no-train", dir);
    int ok = write_file(wrap,
                        "#!/bin/sh\n"
                        "if [ \"$1\" = --help ]; then printf '  --ckpt PATH  a checkpoint\\n  --log PATH  a log\\n'; "
                        "exit 0; fi\n"
                        "echo \"$*\" >> %s/path-train.args\n"
                        "set -- \"$@\" --end; out=; res=\n"
                        "while [ \"$1\" != --end ]; do\n"
                        "  case $1 in\n"
                        "    --ckpt) out=$(dirname \"$2\"); shift 2 ;;\n"
                        "    --log) shift 2 ;;\n"
                        "    --resume) res=$(dirname \"$2\"); shift 2 ;;\n"
                        "    *) set -- \"$@\" \"$1\"; shift ;;\n"
                        "  esac\n"
                        "done\n"
                        "shift\n"
                        "if [ -n \"$res\" ]; then exec %s --resume \"$res\" \"$@\"; fi\n"
                        "exec %s --out \"$out\" \"$@\"\n", dir, trainer, trainer) &&
             write_file(none, "#!/bin/sh\necho 'usage: no-train'\n") &&
             test_system("chmod +x %s %s", wrap, none) == 0;
    int rc = test_system("dev/sweep/sweep.py --train-bin %s --out %s/pt --corpus-bytes 4000 --ks 2 --rules legw "
                         TINY " " TRAINER_FLAGS " > %s/pt.txt 2>&1", wrap, dir, dir);
    CHECK(ok && rc == 0 && contains("%s/pt/runs/%s", "legw_k2.status", "\"done\""),
          "a trainer taking --ckpt and --log: the sweep finishes its run (exit %d, output in %s/pt.txt)", rc, dir);
    CHECK(contains("%s/path-train.args", "", "/ckpt/legw_k2/latest.ckpt --log ") &&
          !contains("%s/path-train.args", "", "--out"), "... given --ckpt and --log by path, never --out");
    rc = test_system("dev/sweep/sweep.py --train-bin %s --out %s/nt > %s/nt.txt 2>&1", none, dir, dir);
    CHECK(rc == 2 && contains("%s/nt.txt", "", "neither --out nor --ckpt"),
          "a trainer whose --help lists neither: exit %d (want 2)", rc);
}

// 10. frontier.py: a tiny plan, stopped by SIGTERM part way, then run again
static void test_frontier_driver(void) {
    int rc = test_system("dev/sweep/make_data.py --out %s/fd --sizes 20000 --seeds 1,2 --val-bytes 2000 "
                         "--prepare %s/prepare > %s/fd.txt 2>&1", dir, test_bin_dir(), dir);
    char plan[300];
    snprintf(plan, sizeof plan, "%s/plan.json", dir);
    int ok = write_file(plan,
                        "{\"root\": \"%s/fr\", \"train_bin\": \"%s\", \"data\": \"%s/fd\", \"logs\": \"%s/fr-logs\",\n"
                        " \"workers\": 2, \"nice\": 0,\n"
                        " \"model\": [\"--hidden\", \"16\", \"--seq-len\", \"8\", \"--base-batch\", \"2\",\n"
                        "           \"--threads\", \"1\"],\n"
                        " \"trainer\": [\"--val-batch\", \"2\", \"--clip\", \"0\", \"--embed\", \"8\"],\n"
                        " \"w0\": 0.01, \"alphas\": [0.5, 1],\n"
                        " \"budgets\": {\"20000\": {\"grid\": [0.01, 0.02], \"grid_seeds\": [1],\n"
                        "                        \"decisive\": [1, 4], \"ks\": {\"4\": [1, 2], \"1\": [1, 2],\n"
                        "                        \"2\": {\"seeds\": [1], \"alphas\": [1]}},\n"
                        "                        \"peak_warmup\": {\"k\": 4, \"seeds\": [1], \"peaks\": [1, 2],\n"
                        "                                        \"warmup_steps\": [0, 3]}}}}\n",
                        dir, trainer, dir, dir);
    CHECK(rc == 0 && ok, "the driver's data and plan (exit %d)", rc);
    char out1[300];
    snprintf(out1, sizeof out1, "%s/fr1.txt", dir);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(out1, "w", stdout) || dup2(fileno(stdout), 2) < 0) _exit(127);
        execl("/usr/bin/python3", "python3", "dev/sweep/frontier.py", "run", plan, (char *)NULL);
        _exit(127);
    }
    int signalled = 0;
    for (double t = now(); now() - t < 60; usleep(5000)) {
        if (count_lines("%s/%s", "fr1.txt", "") > 0 && count_lines("%s/fr1.txt", "", "") >= 1) {
            char *o = slurp("%s/fr1.txt", "");
            int started = 0;
            for (char *q = o; q && (q = strstr(q, " start ")) != NULL; q++) started++;
            free(o);
            if (started >= 2) { kill(pid, SIGTERM); signalled = 1; break; }
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) { pid = -1; break; }
    }
    int ws = 0;
    if (pid > 0) waitpid(pid, &ws, 0);
    int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    CHECK(signalled && code == 143 && contains("%s/fr1.txt", "", "stopped by signal 15"),
          "SIGTERM: the driver stops its sweeps and exits %d (want 143)", code);
    // (f[r]: the pattern does not match pgrep's own shell's command line)
    CHECK(test_system("pgrep -f '%s/f[r]/' > /dev/null", dir) != 0,
          "... and no sweep or trainer of it is left running");
    rc = test_system("python3 dev/sweep/frontier.py run %s > %s/fr2.txt 2>&1", plan, dir);
    CHECK(rc == 0 && contains("%s/fr2.txt", "", "finished: every job of the plan is done"),
          "run again: finished (exit %d)", rc);
    rc = test_system("python3 dev/sweep/frontier.py status %s > %s/fr3.txt 2>&1", plan, dir);
    char *st = slurp("%s/fr3.txt", "");
    int done = -1, all = -2;
    const char *q = st ? strstr(st, " jobs done") : NULL;
    while (q && q > st && q[-1] != '\n') q--;
    if (q) sscanf(q, "%d of %d jobs done", &done, &all);
    CHECK(rc == 0 && done == all && all >= 7, "status: %d of %d jobs done", done, all);
    CHECK(exists("%s/fr/20000/main/seed1/runs/%s", "alpha1_k2.status") &&
          !exists("%s/fr/20000/main/seed1/runs/%s", "legw_k2.status") &&
          !exists("%s/fr/20000/main/seed2/runs/%s", "alpha1_k2.status"),
          "a k given its own seeds and alphas runs those alone");
    // the peak group: each peak x warmup as puri-run with its cap at M x base and the warmup given, and the puri
    // rule beside them
    char *pw = slurp("%s/fr/20000/peak/x2-w3/seed1/runs/%s", "puri-run_k4.out");
    char *p0 = slurp("%s/fr/20000/peak/x1-w0/seed1/runs/%s", "puri-run_k4.out");
    CHECK(pw && p0 && fabs(table_num(pw, "peak lr") / table_num(pw, "base lr") - 2) < 1e-6 &&
          strstr(pw, "| warmup                   | 3 steps ") && fabs(table_num(p0, "peak lr") /
          table_num(p0, "base lr") - 1) < 1e-6 && strstr(p0, "| warmup                   | none ") &&
          exists("%s/fr/20000/peak/puri/seed1/runs/%s", "puri_k4.status") &&
          exists("%s/fr/20000/peak/x2-w0/seed1/runs/%s", "puri-run_k4.status") &&
          exists("%s/fr/20000/peak/x1-w3/seed1/runs/%s", "puri-run_k4.status"),
          "peak_warmup: peaks 1 and 2 x base crossed with warmups 0 and 3 steps, and the puri rule, ran");
    free(pw); free(p0);
    char bad[300];
    snprintf(bad, sizeof bad, "%s/plan-bad.json", dir);
    rc = test_system("sed 's#\"alphas\": \\[1\\]#\"alphas\": [0.75]#' %s > %s && "
                     "python3 dev/sweep/frontier.py status %s > %s/fr-bad.txt 2>&1", plan, bad, bad, dir);
    CHECK(rc == 2, "a k's alphas not among the plan's: exit %d (want 2)", rc);
    CHECK(contains("%s/fr-bad.txt", "", "ks[\"2\"]"), "... naming the k");
    rc = test_system("sed 's#\"peaks\": \\[1, 2\\]#\"peaks\": [1, 8]#' %s > %s && "
                     "python3 dev/sweep/frontier.py status %s > %s/fr-bad2.txt 2>&1", plan, bad, bad, dir);
    CHECK(rc == 2 && contains("%s/fr-bad2.txt", "", "peak_warmup"), "a peak above k: exit %d (want 2), naming "
          "peak_warmup", rc);
    // every log: as many train lines as distinct steps, and each run's last step its plan's
    rc = test_system("for f in $(find %s/fr -name '*.log'); do n=$(grep -c '^train' $f); "
                     "u=$(grep '^train' $f | cut -d' ' -f2 | sort -u | wc -l); [ \"$n\" = \"$u\" ] || exit 1; done",
                     dir);
    CHECK(rc == 0, "no step logged twice in any run");
    // the base lr is the grid's best (seed 1, the grid's seed), and an lr at the grid's edge only after 3 growths
    double best = NAN, best_mean = 1e9;
    int n_lr = 0, best_i = -1, n_better = 0;
    double lrs[16], means[16];
    char *o = slurp("%s/fr2.txt", "");
    const char *g = o ? strstr(o, "(grid ") : NULL;
    if (o && strstr(o, ": base lr ")) best = atof(strstr(o, ": base lr ") + 10);
    for (g = g ? g + 6 : NULL; g && n_lr < 16; ) {
        lrs[n_lr] = atof(g);
        char p[300];
        double m = NAN;
        snprintf(p, sizeof p, "%s/fr/20000/grid/lr%.3g/seed1/runs/legw_k1.status", dir, lrs[n_lr]);
        FILE *f = fopen(p, "r");
        char buf[256] = "";
        if (f) {
            if (fgets(buf, sizeof buf, f) && strstr(buf, "\"bpc\": ")) m = atof(strstr(buf, "\"bpc\": ") + 7);
            fclose(f);
        }
        means[n_lr] = m;
        if (m < best_mean) { best_mean = m; best_i = n_lr; }
        n_lr++;
        g = strchr(g, ',');
        g = g ? g + 2 : NULL;
    }
    for (int i = 0; i < n_lr; i++) n_better += means[i] < means[best_i > 0 ? best_i : 0];
    CHECK(n_lr >= 2 && best_i >= 0 && fabs(best - lrs[best_i]) < 1e-9 * best && n_better == 0,
          "the base lr %g is the grid's best (%d lrs)", best, n_lr);
    CHECK(n_lr >= 2 && ((best_i > 0 && best_i < n_lr - 1) || n_lr == 5),
          "the best is inside the grid, or the grid grew 3 times (%d lrs, best the %d-th)", n_lr, best_i + 1);
    // the report with the plan in the root: a grid run's result gone, the budget's page says the grid is unfinished
    rc = test_system("sed 's#\"root\": \"%s/fr\"#\"root\": \"%s/fr\"#' %s > %s/fr/plan.json && "
                     "dev/sweep/frontier_report.py %s/fr > %s/frr.txt 2>&1 && "
                     "grep -q 'LEGW at k = 1' %s/fr/20000/frontier.md && "
                     "rm %s/fr/20000/grid/lr0.01/seed1/runs/legw_k1.status && "
                     "dev/sweep/frontier_report.py %s/fr >> %s/frr.txt 2>&1", dir, dir, plan, dir, dir, dir, dir, dir,
                     dir, dir);
    CHECK(rc == 0 && contains("%s/fr/20000/frontier.md", "", "The base-lr grid is not finished"),
          "frontier_report.py with the plan: a budget whose grid lacks a run is reported unfinished (exit %d)", rc);
    free(o); free(st);
}

int main(void) {
    snprintf(trainer, sizeof trainer, "%s/train", test_bin_dir());
    if (access(trainer, X_OK) != 0) {
        CHECK(0, "the trainer %s is built (make)", trainer);
        return test_summary("test_sweep");
    }
    snprintf(dir, sizeof dir, "/tmp/test_sweep.XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    double t0 = now();

    // 1. bad flags
    int rc = test_system("dev/sweep/sweep.py --train-bin %s --budget -1 > %s/bad1 2>&1", trainer, dir);
    CHECK(rc == 2 && contains("%s/bad1", "", "--budget"), "--budget -1: exit %d (want 2) naming --budget", rc);
    rc = test_system("dev/sweep/sweep.py --train-bin %s --rules linear,bogus > %s/bad2 2>&1", trainer, dir);
    CHECK(rc == 2 && contains("%s/bad2", "", "bogus"), "--rules linear,bogus: exit %d (want 2) naming the rule", rc);
    rc = test_system("dev/sweep/sweep.py --train-bin %s/nothing > %s/bad3 2>&1", dir, dir);
    CHECK(rc == 2 && contains("%s/bad3", "", "--train-bin"), "a missing trainer: exit %d (want 2)", rc);
    rc = test_system("dev/sweep/sweep_report.py %s/nothing > %s/bad4 2>&1", dir, dir);
    CHECK(rc == 2 && contains("%s/bad4", "", "runs/"), "sweep_report.py on a non-sweep: exit %d (want 2)", rc);

    // 2. a tiny sweep: 2 rules x k = 1, 2 (250 and 125 steps)
    const char *sweep_a = "dev/sweep/sweep.py --train-bin %s --out %s/a --corpus-bytes 4000 --max-k 2 "
                          "--rules legw,linear " TINY " " TRAINER_FLAGS;
    char cmd[8192];
    snprintf(cmd, sizeof cmd, sweep_a, trainer, dir);
    rc = test_system("%s > %s/a.txt 2>&1", cmd, dir);
    CHECK(rc == 0, "tiny sweep: exit %d (output in %s/a.txt)", rc, dir);
    const char *runs[] = {"legw_k1", "legw_k2", "linear_k1", "linear_k2"};
    for (int i = 0; i < 4; i++)
        CHECK(contains("%s/a/runs/%s.status", runs[i], "\"done\"") && exists("%s/a/runs/%s.log", runs[i]),
              "%s: done, log kept", runs[i]);
    CHECK(!exists("%s/a/ckpt/%s", "legw_k1"), "a finished run's run directory is removed");
    CHECK(contains("%s/a/results.md", "", "| rule | B=2 (k=1) | B=4 (k=2) |"), "results.md: a column per batch");
    char *table = slurp("%s/a/results.md", "");
    int numbers = 0;
    if (table) {
        const char *rows[] = {"| legw | ", "| linear | "};
        for (int i = 0; i < 2; i++) {
            char *row = strstr(table, rows[i]);
            double x, y;
            if (row && sscanf(row + strlen(rows[i]), "%lf | %lf |", &x, &y) == 2 && x > 0 && x < 9 && y > 0 && y < 9)
                numbers++;
        }
    }
    CHECK(numbers == 2, "results.md: a final val bpc in every cell of both rows");
    int gnuplot = test_system("command -v gnuplot > /dev/null") == 0;
    // regenerate from the logs alone: the same table
    rc = test_system("rm -f %s/a/results.md %s/a/*.png && dev/sweep/sweep_report.py %s/a > %s/rep.txt 2>&1",
                     dir, dir, dir, dir);
    char *again = slurp("%s/a/results.md", "");
    CHECK(rc == 0 && table && again && strcmp(table, again) == 0,
          "sweep_report.py regenerates the same results.md (exit %d)", rc);
    free(again);
    if (gnuplot)
        CHECK(exists("%s/a/%s", "bpc_vs_batch.png") && exists("%s/a/%s", "curves_largest.png") &&
              exists("%s/a/%s", "schedules_largest.png"), "the three PNGs");
    else
        printf("(gnuplot not found: PNGs not checked)\n");

    // 2b. the claim report over seeds: seed 1 is sweep a; seed 2 runs legw alone at --ks 1,2, and
    // one of its logs is gzipped, as committed logs are. The mean of the two seeds' k = 1 results
    // is the baseline; the same run twice (seed 1 copied) is refused.
    rc = test_system("mkdir -p %s/c && cp -r %s/a %s/c/seed1 && dev/sweep/sweep.py --train-bin %s --out %s/c/seed2 "
                     "--corpus-bytes 4000 --ks 1,2 --rules legw --seed 2 --no-report " TINY " " TRAINER_FLAGS
                     " > %s/c.txt 2>&1 && gzip %s/c/seed2/runs/legw_k2.log && dev/sweep/sweep_report.py --claim %s/c "
                     ">> %s/c.txt 2>&1",
                     dir, dir, dir, trainer, dir, dir, dir, dir, dir);
    CHECK(rc == 0 && exists("%s/c/seed2/runs/%s", "legw_k2.log.gz") && !exists("%s/c/seed2/runs/%s", "linear_k1.log"),
          "--ks 1,2 --rules legw runs exactly legw at k = 1 and 2 (exit %d)", rc);
    double b1 = -1, b2 = -1, mean = -2;
    char *t1 = slurp("%s/a/results.md", ""), *t2 = slurp("%s/c/seed2/results.md", ""), *tc = slurp("%s/c/claim.md", "");
    if (t1 && strstr(t1, "| legw | ")) sscanf(strstr(t1, "| legw | ") + 9, "%lf", &b1);
    if (t2 && strstr(t2, "| legw | ")) sscanf(strstr(t2, "| legw | ") + 9, "%lf", &b2);
    if (tc && strstr(tc, "LEGW at k = 1: ")) sscanf(strstr(tc, "LEGW at k = 1: ") + 15, "%lf", &mean);
    // results.md prints 3 decimals, claim.md the mean to 4: they agree to 1e-3
    CHECK(b1 != b2 && fabs(mean - (b1 + b2) / 2) < 1e-3,
          "claim.md: the baseline %.4f is the mean of the seeds' %.3f and %.3f", mean, b1, b2);
    char row[512] = "";
    if (tc && strstr(tc, "| legw | ")) sscanf(strstr(tc, "| legw | "), "%511[^\n]", row);
    int two = 0;
    for (char *q = row; (q = strstr(q, " (2) |")) != NULL; q++) two++;
    CHECK(two == 2 && strstr(row, " ± ") != NULL,
          "claim.md: legw at k = 1 and 2 counts 2 seeds, with a 95%% interval: %s", row);
    free(t1); free(t2); free(tc);
    rc = test_system("cp -r %s/c/seed1 %s/c/seed1again && dev/sweep/sweep_report.py --claim %s/c > %s/c2.txt 2>&1",
                     dir, dir, dir, dir);
    CHECK(rc == 2 && contains("%s/c2.txt", "", "a seed counts once"),
          "--claim refuses the same run in two directories (exit %d)", rc);

    // 3. a deliberately diverging run: lr 5 on 1250 planned steps
    rc = test_system("dev/sweep/sweep.py --train-bin %s --out %s/d --corpus-bytes 20000 --max-k 1 --rules constant "
                     "--lr 5 " TINY " " TRAINER_FLAGS " > %s/d.txt 2>&1", trainer, dir, dir);
    int steps = count_lines("%s/d/runs/%s.log", "constant_k1", "train ");
    CHECK(rc == 0 && contains("%s/d/runs/%s.status", "constant_k1", "\"diverged\""),
          "lr 5: marked diverged (exit %d)", rc);
    char *st = slurp("%s/d/runs/%s.status", "constant_k1");
    int at = -1;
    if (st && strstr(st, "\"step\": ")) at = atoi(strstr(st, "\"step\": ") + 8);
    free(st);
    CHECK(at >= 1 && at <= 40, "detected at step %d (by the trainer itself, or when the 20-step window is full)", at);
    CHECK(steps >= at && steps < 1000, "stopped early: %d of 1250 steps", steps);
    CHECK(contains("%s/d/results.md", "", "| constant | diverged (step"), "results.md shows it as diverged");
    CHECK(contains("%s/d.txt", "", "diverged in"), "the progress line says so");
    rc = test_system("dev/sweep/sweep_report.py --check %s/d/runs/constant_k1.log > %s/check.txt 2>&1", dir, dir);
    CHECK(rc == 0 && contains("%s/check.txt", "", "diverged"), "sweep_report.py --check finds it from the log alone");

    // 4. a finished sweep run again: everything skipped, logs untouched
    char *log_before = slurp("%s/a/runs/%s.log", "legw_k2");
    rc = test_system("%s > %s/a2.txt 2>&1", cmd, dir);
    char *log_after = slurp("%s/a/runs/%s.log", "legw_k2");
    CHECK(rc == 0 && count_lines("%s/a2.txt", "", "[") == 4 && contains("%s/a2.txt", "", "already done, skipped") &&
          !contains("%s/a2.txt", "", "steps, about"), "a finished sweep again: 4 runs skipped, none run (exit %d)", rc);
    CHECK(log_before && log_after && strcmp(log_before, log_after) == 0, "... and their logs are untouched");
    free(log_before); free(log_after); free(table);

    // 5. interrupted by SIGTERM in its second run, then resumed (about 2500 and 1250 steps)
    char out_r[128];
    snprintf(out_r, sizeof out_r, "%s/r", dir);
    pid_t pid = fork();
    if (pid == 0) {
        char path[200];
        snprintf(path, sizeof path, "%s/r1.txt", dir);
        if (!freopen(path, "w", stdout) || dup2(fileno(stdout), 2) < 0) _exit(127);
        execl("/usr/bin/python3", "python3", "dev/sweep/sweep.py", "--train-bin", trainer, "--out", out_r,
              "--corpus-bytes", "40000", "--max-k", "2", "--rules", "legw", "--hidden", "16", "--seq-len", "8",
              "--base-batch", "2", "--threads", "1", "--budget", "120", "--", "--embed", "8", (char *)NULL);
        _exit(127);
    }
    int signalled = 0, lock_checked = 0;
    for (double t = now(); now() - t < 40; usleep(5000)) {
        // a second sweep on the directory the first is running in is refused, and leaves it alone (asked
        // during the first run: the signal below then follows the second run's 20th step at once, whatever
        // the second sweep's start-up costs)
        if (!lock_checked && count_lines("%s/r/ckpt/%s/train.log", "legw_k1", "train ") >= 20) {
            int rc2 = test_system("dev/sweep/sweep.py --train-bin %s --out %s --corpus-bytes 40000 --max-k 2 "
                                  "--rules legw " TINY " " TRAINER_FLAGS " > %s/lock.txt 2>&1", trainer, out_r, dir);
            CHECK(rc2 == 2 && contains("%s/lock.txt", "", "another sweep is running"),
                  "a second sweep on a running sweep's directory: exit %d (want 2)", rc2);
            lock_checked = 1;
        }
        if (lock_checked && exists("%s/r/runs/%s.status", "legw_k1") &&
            count_lines("%s/r/ckpt/%s/train.log", "legw_k2", "train ") >= 20) {
            kill(pid, SIGTERM);
            signalled = 1;
            break;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) { pid = -1; break; }
    }
    int ws = 0;
    if (pid > 0) waitpid(pid, &ws, 0);
    int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    CHECK(signalled && code == 143, "SIGTERM during the second run: sweep exit %d (want 143)", code);
    CHECK(exists("%s/r/ckpt/%s/latest.ckpt", "legw_k2") && !exists("%s/r/runs/%s.status", "legw_k2"),
          "the interrupted run left its run directory and no result");
    int partial = count_lines("%s/r/ckpt/%s/train.log", "legw_k2", "train ");
    CHECK(partial >= 20 && partial < 1200, "it stopped part way: %d of about 1250 steps", partial);
    char *first_log = slurp("%s/r/runs/%s.log", "legw_k1");
    rc = test_system("dev/sweep/sweep.py --train-bin %s --out %s --corpus-bytes 40000 --max-k 2 --rules legw "
                     TINY " " TRAINER_FLAGS " > %s/r2.txt 2>&1", trainer, out_r, dir);
    char *first_after = slurp("%s/r/runs/%s.log", "legw_k1");
    CHECK(rc == 0 && contains("%s/r2.txt", "", "legw     k=1   B=2     already done, skipped"),
          "resumed: the finished run is skipped (exit %d)", rc);
    CHECK(first_log && first_after && strcmp(first_log, first_after) == 0, "... and its log is untouched");
    char *r2 = slurp("%s/r2.txt", "");
    char *line = r2 ? strstr(r2, "k=2   B=4     ") : NULL;
    int planned = 0;
    if (line) sscanf(line + strlen("k=2   B=4     "), "%d steps, resuming", &planned);
    CHECK(line && strstr(line, " steps, resuming") && contains("%s/r/runs/%s.out", "legw_k2", "resumed from"),
          "the interrupted run resumes from its checkpoint");
    int lines = count_lines("%s/r/runs/%s.log", "legw_k2", "train ");
    CHECK(contains("%s/r/runs/%s.status", "legw_k2", "\"done\"") && planned > 1000 && lines == planned,
          "... and finishes: %d train lines for %d steps, no step twice", lines, planned);
    free(r2);
    CHECK(contains("%s/r/results.md", "", "| legw | "), "results.md after the resumed sweep");
    free(first_log); free(first_after);

    double t_rules = now();
    test_alpha_rules();
    test_path_trainer();
    test_make_data();
    test_critical_batch();
    double t_report = now();
    test_frontier_report();
    double t_driver = now();
    test_frontier_driver();
    printf("(the sweep itself %.1f s, its rules, data and critical batch %.1f s, the frontier's report %.1f s, "
           "its driver %.1f s)\n", t_rules - t0, t_report - t_rules, t_driver - t_report, now() - t_driver);

    printf("(sweep tests took %.1f s)\n", now() - t0);
    if (test_failed == 0) test_system("rm -rf %s", dir);
    else printf("(files kept in %s)\n", dir);
    return test_summary("test_sweep");
}
