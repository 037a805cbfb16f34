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
//      result kept, a checkpoint left; run again, the first run is skipped and the
//      second resumes from its checkpoint
// The trainer is the one next to this program (build/train, or build-san/train under
// SAN=1); tools are found from the repository root, where tests run.
#include "test/test.h"
#include <errno.h>
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

// The model and data every sweep here uses; `more` adds flags.
#define TINY "--hidden 16 --seq-len 8 --base-batch 2 --threads 1 --budget 120"
#define TRAINER_FLAGS "-- --embed 8"

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
    const char *sweep_a = "dev/sweep/sweep.py --train-bin %s --out %s/a --corpus-bytes 4000 --max-k 2 --rules legw,linear "
                          TINY " " TRAINER_FLAGS;
    char cmd[8192];
    snprintf(cmd, sizeof cmd, sweep_a, trainer, dir);
    rc = test_system("%s > %s/a.txt 2>&1", cmd, dir);
    CHECK(rc == 0, "tiny sweep: exit %d (output in %s/a.txt)", rc, dir);
    const char *runs[] = {"legw_k1", "legw_k2", "linear_k1", "linear_k2"};
    for (int i = 0; i < 4; i++)
        CHECK(contains("%s/a/runs/%s.status", runs[i], "\"done\"") && exists("%s/a/runs/%s.log", runs[i]),
              "%s: done, log kept", runs[i]);
    CHECK(!exists("%s/a/ckpt/%s.ckpt", "legw_k1"), "a finished run's checkpoint is removed");
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
    rc = test_system("rm -f %s/a/results.md %s/a/*.png && dev/sweep/sweep_report.py %s/a > %s/rep.txt 2>&1", dir, dir, dir, dir);
    char *again = slurp("%s/a/results.md", "");
    CHECK(rc == 0 && table && again && strcmp(table, again) == 0, "sweep_report.py regenerates the same results.md (exit %d)", rc);
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
                     " > %s/c.txt 2>&1 && gzip %s/c/seed2/runs/legw_k2.log && dev/sweep/sweep_report.py --claim %s/c >> %s/c.txt 2>&1",
                     dir, dir, dir, trainer, dir, dir, dir, dir, dir);
    CHECK(rc == 0 && exists("%s/c/seed2/runs/%s", "legw_k2.log.gz") && !exists("%s/c/seed2/runs/%s", "linear_k1.log"),
          "--ks 1,2 --rules legw runs exactly legw at k = 1 and 2 (exit %d)", rc);
    double b1 = -1, b2 = -1, mean = -2;
    char *t1 = slurp("%s/a/results.md", ""), *t2 = slurp("%s/c/seed2/results.md", ""), *tc = slurp("%s/c/claim.md", "");
    if (t1 && strstr(t1, "| legw | ")) sscanf(strstr(t1, "| legw | ") + 9, "%lf", &b1);
    if (t2 && strstr(t2, "| legw | ")) sscanf(strstr(t2, "| legw | ") + 9, "%lf", &b2);
    if (tc && strstr(tc, "LEGW at k = 1: ")) sscanf(strstr(tc, "LEGW at k = 1: ") + 15, "%lf", &mean);
    // results.md prints 3 decimals, claim.md the mean to 4: they agree to 1e-3
    CHECK(b1 != b2 && fabs(mean - (b1 + b2) / 2) < 1e-3, "claim.md: the baseline %.4f is the mean of the seeds' %.3f and %.3f",
          mean, b1, b2);
    char row[512] = "";
    if (tc && strstr(tc, "| legw | ")) sscanf(strstr(tc, "| legw | "), "%511[^\n]", row);
    int two = 0;
    for (char *q = row; (q = strstr(q, " (2) |")) != NULL; q++) two++;
    CHECK(two == 2 && strstr(row, " ± ") != NULL, "claim.md: legw at k = 1 and 2 counts 2 seeds, with a 95%% interval: %s", row);
    free(t1); free(t2); free(tc);
    rc = test_system("cp -r %s/c/seed1 %s/c/seed1again && dev/sweep/sweep_report.py --claim %s/c > %s/c2.txt 2>&1", dir, dir, dir, dir);
    CHECK(rc == 2 && contains("%s/c2.txt", "", "a seed counts once"), "--claim refuses the same run in two directories (exit %d)", rc);

    // 3. a deliberately diverging run: lr 5 on 1250 planned steps
    rc = test_system("dev/sweep/sweep.py --train-bin %s --out %s/d --corpus-bytes 20000 --max-k 1 --rules constant --lr 5 "
                     TINY " " TRAINER_FLAGS " > %s/d.txt 2>&1", trainer, dir, dir);
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
    int signalled = 0;
    for (double t = now(); now() - t < 40; usleep(5000)) {
        if (exists("%s/r/runs/%s.status", "legw_k1") && count_lines("%s/r/ckpt/%s/train.log", "legw_k2", "train ") >= 20) {
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

    printf("(sweep tests took %.1f s)\n", now() - t0);
    if (test_failed == 0) test_system("rm -rf %s", dir);
    else printf("(files kept in %s)\n", dir);
    return test_summary("test_sweep");
}
