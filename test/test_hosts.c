// Two hosts: the CPU trainer under Open MPI across two network namespaces joined by
// a veth pair (test/hosts.sh), as it runs on a cluster: a rank on each host, each
// host with its own address, name, local disk and login environment, the remote
// daemon started by a launch agent in place of ssh, and the ranks' traffic over TCP
// on the veth only (shared memory off).
//   1. 2 hosts x 4 rows against one process with 8 rows: the same first loss, the
//      weights to test_train's FP32 bound; one checkpoint, on rank 0's disk only.
//   2. kill -9 of the rank on host 2 mid-run: the job ends by itself within a bound,
//      naming rank 1; the last checkpoint loads; one process resumes it at the same
//      global batch, and its next step is the one a run that never stopped takes.
//   3. SIGTERM to the rank on host 2: both ranks stop after the step, rank 0 writes
//      one checkpoint.
//   4. host 2 lacks the shards (or, resuming, the checkpoint): an error naming host 2
//      and the path, before the first step, and no file written.
//   5. host 2 cut off (its link down, no connection closed): with the runtime's TCP
//      keepalive shortened, the job ends by itself on both hosts, naming host 2.
// It needs root and iproute2 (network namespaces); elsewhere it skips, counted, and
// REQUIRE_NETNS=1 (CI) makes the skip a failure.
#include "mlstm.h"
#include "harness/checkpoint.h"  // defines: the checkpoint file (CkptHeader, checkpoint_open/read/load, checkpoint_save_run)
#include "data.h"
#include "test/test.h"
#include <limits.h>
#include <signal.h>
#include <time.h>

#define RUN_LIMIT_S 60    // any one run; the tiny model's runs take a second or two
#define END_BOUND_S 30    // a job whose rank was killed ends within this (measured: about 5 s)
#define TEST_LIMIT_S 300  // the whole test, a backstop for a hang the limits above miss

static char root[64];                        // /tmp/mlstm_hosts_<pid>: hosts.sh's state and both disks
static char script[PATH_MAX], trainer[4200];
static char mpirun[2 * PATH_MAX + 600];      // mpirun across the two hosts, started on host 1
static char tiny_run[PATH_MAX + 400];        // all the flags but the model, the batch and the files
static char tiny[PATH_MAX + 500];
static size_t nparams;

// ---- setup and teardown: hosts.sh down, from atexit and from a signal (fork + exec: signal-safe)
static void teardown(void) {
    if (!root[0]) return;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 1);
        execl(script, script, "down", root, (char *)NULL);
        _exit(127);
    }
    if (pid > 0) waitpid(pid, NULL, 0);
    root[0] = 0;
}
static void on_signal(int sig) {
    static const char msg[] = "FAIL  test_hosts: stopped by a signal or its time limit; removing the hosts\n";
    ssize_t r = write(1, msg, sizeof msg - 1);
    (void)r;
    teardown();
    _exit(128 + sig);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static int contains(const char *path, const char *needle) {
    char cmd[PATH_MAX + 600];
    snprintf(cmd, sizeof cmd, "grep -aqF -- '%s' %s", needle, path);
    return test_system("%s", cmd) == 0;
}
static int count_lines(const char *path, const char *pattern) {  // lines matching the extended regex
    char cmd[PATH_MAX + 200];
    snprintf(cmd, sizeof cmd, "grep -acE -- '%s' %s 2> /dev/null", pattern, path);
    FILE *f = popen(cmd, "r");
    int n = 0;
    if (f && fscanf(f, "%d", &n) != 1) n = 0;
    if (f) pclose(f);
    return n;
}
static double read_number(const char *path) {
    FILE *f = fopen(path, "r");
    double x = NAN;
    if (f && fscanf(f, "%lf", &x) != 1) x = NAN;
    if (f) fclose(f);
    return x;
}
static void show(const char *path) {
    test_system("echo '      --- %s, but the settings table:'; grep -av '^|' %s | tail -n 25 | "
                "tr -c '\\11\\12\\40-\\176' '?' | sed 's/^/      /'", path, path);
}

// Host N's veth: bytes received and sent so far.
static void veth_bytes(int n, double *rx, double *tx) {
    char cmd[PATH_MAX + 100];
    snprintf(cmd, sizeof cmd, "%s bytes %s %d", script, root, n);
    FILE *f = popen(cmd, "r");
    *rx = *tx = NAN;
    if (f && fscanf(f, "%lf %lf", rx, tx) != 2) *rx = *tx = NAN;
    if (f) pclose(f);
}

// Brings the two hosts up; 0 with a reason when this machine cannot.
static int hosts_up(char *why, size_t n) {
    if (geteuid() != 0) {
        snprintf(why, n, "not root (network namespaces need it)");
        return 0;
    }
    if (test_system("command -v ip > /dev/null && command -v unshare > /dev/null") != 0) {
        snprintf(why, n, "no ip (iproute2) or unshare (util-linux) here");
        return 0;
    }
    if (test_system("command -v mpirun > /dev/null && command -v orted > /dev/null") != 0) {
        snprintf(why, n, "no mpirun/orted here (apt-get install openmpi-bin libopenmpi-dev)");
        return 0;
    }
    snprintf(root, sizeof root, "/tmp/mlstm_hosts_%d", (int)getpid());
    char cmd[PATH_MAX + 100];
    snprintf(cmd, sizeof cmd, "%s up %s 2>&1", script, root);
    FILE *f = popen(cmd, "r");
    why[0] = 0;
    if (f && !fgets(why, (int)n, f)) why[0] = 0;
    int status = f ? pclose(f) : -1;
    why[strcspn(why, "\n")] = 0;
    if (status == 0) return 1;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    teardown();
    if (code == 3) return 0;  // the machine's limit, said by hosts.sh
    CHECK(0, "two hosts: hosts.sh up failed (exit %d): %s", code, why);
    snprintf(why, n, "setup failed");
    return -1;
}

// The "train" lines of a log: step, lr and loss.
typedef struct { long step; double lr, loss; } LogLine;
static int read_log(const char *path, LogLine *out, int max) {
    FILE *f = fopen(path, "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f) && n < max) {
        double epoch;
        if (sscanf(line, "train %ld %lf %lf %lf", &out[n].step, &epoch, &out[n].lr, &out[n].loss) == 4) n++;
    }
    if (f) fclose(f);
    return n;
}
static const LogLine *at_step(const LogLine *l, int n, long step) {
    for (int i = 0; i < n; i++)
        if (l[i].step == step) return &l[i];
    return NULL;
}
// A checkpoint of the tiny model with G rows; 0 if it does not load. checkpoint_load
// exits on a bad file, so a child tries first: a missing or damaged checkpoint is a
// failed check, not the end of the test.
static void load_into(const char *path, Mlstm *m, TrainState *st, int G) {
    MlstmConfig cfg = {256, 16, 32, 1};
    mlstm_build(m, cfg, 1, 1);
    real *h = (real *)mallocCheck(sizeof(real) * G * 32), *c = (real *)mallocCheck(sizeof(real) * G * 32);
    checkpoint_load(path, m, st, h, c, G);
    free(h);
    free(c);
}
static int load(const char *path, Mlstm *m, TrainState *st, int G) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        root[0] = 0;  // a failing load exits: the hosts are the parent's to remove
        load_into(path, m, st, G);
        _exit(0);
    }
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) return 0;
    load_into(path, m, st, G);
    return 1;
}
static double rel_diff(const real *a, const real *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) { d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); s += (double)b[i] * b[i]; }
    return sqrt(d / s);
}

// ---- 1. two hosts against one process with twice the rows
static void test_two_hosts(void) {
    int r1 = test_system("timeout %d %s %s --train %s/host1/data --batch 8 --steps 10 --out %s/one "
                         "> %s/one.out 2>&1", RUN_LIMIT_S, trainer, tiny, root, root, root);
    double rx0, tx0, rx1, tx1;
    veth_bytes(2, &rx0, &tx0);
    double t0 = now();
    int r2 = test_system("%s %s %s --batch 4 --steps 10 --out %s/local/out/m > %s/two.out 2>&1", mpirun, trainer, tiny,
                         root, root);
    double seconds = now() - t0;
    veth_bytes(2, &rx1, &tx1);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/two.out", root);
    CHECK(r1 == 0 && r2 == 0 && contains(p, "4 rows/rank x 2 ranks = 8"),
          "two hosts: one process with 8 rows, and 2 ranks x 4 rows on two hosts (%.1f s), exit 0 (%d %d)",
          seconds, r1, r2);
    if (r2) show(p);
    Mlstm a = {0}, b = {0};
    TrainState sa = {0}, sb = {0};
    char q[PATH_MAX];
    snprintf(q, sizeof q, "%s/one/latest.ckpt", root);
    int la = load(q, &a, &sa, 8);
    snprintf(q, sizeof q, "%s/host1/out/m/latest.ckpt", root);
    int lb = load(q, &b, &sb, 8);
    nparams = la ? a.nparams : 0;
    // Each all-reduce leaves on both ranks a sum that depends on all nparams numbers of
    // the other rank, so each direction carries at least 4 nparams bytes per step: a run
    // whose ranks met through shared memory, or on one host, leaves the veth idle.
    double need = 10.0 * 4 * nparams;
    CHECK(la && rx1 - rx0 >= need && tx1 - tx0 >= need, "two hosts: host 2's veth received %.0f and sent %.0f bytes "
          "(>= %.0f: 10 all-reduces of %zu FP32 gradients each way)", rx1 - rx0, tx1 - tx0, need, nparams);
    snprintf(q, sizeof q, "%s/host2/out", root);
    struct stat st;
    CHECK(lb && count_lines(p, "^step +[0-9]+ \\| checkpoint ") == 1 && stat(q, &st) != 0,
          "two hosts: one checkpoint, written by rank 0 on host 1; nothing written on host 2's disk");
    // The bound of test_train's mpi test: the same rows, gradients summed in another order (FP32)
    double dw = la && lb ? rel_diff(b.params, a.params, a.nparams) : INFINITY;
    CHECK(dw < 1e-5 && sa.step == 10 && sb.step == 10 && sa.data_step == sb.data_step,
          "two hosts: after 10 steps the same data step and weights within %.1e relative "
          "(< 1e-5: FP32 sums in another order)", dw);
    LogLine l1[16], l2[16];
    snprintf(q, sizeof q, "%s/one/train.log", root);
    int n1 = read_log(q, l1, 16);
    snprintf(q, sizeof q, "%s/host1/out/m/train.log", root);
    int n2 = read_log(q, l2, 16);
    double dl = 0;
    for (int i = 0; i < n1 && i < n2; i++) dl = fmax(dl, fabs(l1[i].loss - l2[i].loss) / l1[i].loss);
    CHECK(n1 == 10 && n2 == 10 && l1[0].loss == l2[0].loss && dl < 1e-5,
          "two hosts: step 1's loss is the same number (%.6f %.6f), the 10 losses agree to %.1e relative",
          n1 ? l1[0].loss : 0, n2 ? l2[0].loss : 0, dl);
    if (la) mlstm_free(&a);
    if (lb) mlstm_free(&b);
}

// Starts a long two-host run in the background (mpirun's extra flags, then the trainer's),
// waits until its log has `lines` steps, runs the shell command `act` ($p: the pid of the
// rank on host 2), and waits for mpirun: its exit status, and in *seconds the time from
// `act` to the end of the job (NAN if it did not come to it).
static int disturb(const char *name, const char *mpi_extra, const char *extra, int lines, const char *act,
                   double *seconds) {
    int rc = test_system(
        "(%s %s %s %s --batch 4 --steps 100000 %s --out %s/local/out/%s "
        "  > %s/%s.out 2>&1; echo $? > %s/%s.rc) & "
        "for i in $(seq 400); do n=$(grep -c '^train' %s/host1/out/%s/train.log 2> /dev/null); "
        "  [ \"${n:-0}\" -ge %d ] && break; sleep 0.05; done; "
        "p=$(%s pid %s 2 %s); [ -n \"$p\" ] || { echo 'no rank on host 2'; wait; exit 1; }; "
        "t0=$(date +%%s.%%N); %s; wait; t1=$(date +%%s.%%N); awk \"BEGIN { print $t1 - $t0 }\" > %s/%s.seconds",
        mpirun, mpi_extra, trainer, tiny, extra, root, name, root, name, root, name, root, name, lines,
        script, root, trainer, act, root, name);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s.seconds", root, name);
    *seconds = rc == 0 ? read_number(p) : NAN;
    snprintf(p, sizeof p, "%s/%s.rc", root, name);
    double status = read_number(p);
    return isnan(status) ? -1 : (int)status;
}

// ---- 2. kill -9 of the rank on host 2, and the resume on one host
static void test_kill(void) {
    double seconds;
    int rc = disturb("k", "", "--ckpt-every 5", 12, "kill -KILL $p", &seconds);
    char out[PATH_MAX], p[PATH_MAX];
    snprintf(out, sizeof out, "%s/k.out", root);
    CHECK(rc != 0 && rc != 124 && seconds < END_BOUND_S, "kill -9 on host 2: the job ends by itself %.1f s later "
          "(< %d s), exit %d", seconds, END_BOUND_S, rc);
    CHECK(contains(out, "process rank 1 with PID") && contains(out, "exited on signal 9"),
          "kill -9 on host 2: mpirun names the lost rank (\"process rank 1 ... exited on signal 9\")");
    if (rc == 0 || rc == 124) show(out);
    Mlstm k = {0};
    TrainState sk = {0};
    snprintf(p, sizeof p, "%s/host1/out/k/latest.ckpt", root);
    int lk = load(p, &k, &sk, 8);
    long c = (long)sk.data_step;
    CHECK(lk && c >= 10 && c % 5 == 0 && sk.G == 8, "kill -9 on host 2: the last checkpoint loads (data step %ld, a "
          "multiple of --ckpt-every 5, %d rows)", c, sk.G);
    if (!lk) return;
    mlstm_free(&k);
    // One host, the same 8 rows (the checkpoint's batch), in place: --resume takes the
    // model and the batch from the checkpoint and cuts the log back to its step.
    int r1 = test_system("timeout %d %s run %s 1 %s %s --steps %ld --ckpt-every 5 --resume %s/local/out/k "
                         "> %s/kr.out 2>&1", RUN_LIMIT_S, script, root, trainer, tiny_run, c + 5, root, root);
    // The run that never stopped: two hosts, the same flags, to the same step.
    int r2 = test_system("%s %s %s --batch 4 --steps %ld --ckpt-every 5 --out %s/local/out/u > %s/u.out 2>&1", mpirun,
                         trainer, tiny, c + 5, root, root);
    snprintf(p, sizeof p, "%s/kr.out", root);
    CHECK(r1 == 0 && r2 == 0 && contains(p, "8 rows/rank x 1 ranks = 8"), "resume on one host: 1 process x 8 rows "
          "from the checkpoint's step %ld, and the uninterrupted run, exit 0 (%d %d)", c, r1, r2);
    if (r1) show(p);
    static LogLine lr[4096], lu[4096];
    snprintf(p, sizeof p, "%s/host1/out/k/train.log", root);
    int nr = read_log(p, lr, 4096);
    snprintf(p, sizeof p, "%s/host1/out/u/train.log", root);
    int nu = read_log(p, lu, 4096);
    int in_order = nr == c + 5;
    for (int i = 0; in_order && i < nr; i++) in_order = lr[i].step == i + 1;
    const LogLine *a = at_step(lr, nr, c + 1), *b = at_step(lu, nu, c + 1);
    // Step c+1 runs the weights and the carried state of step c on the rows of data step c:
    // the same numbers in both runs, so the same loss (only its mean is added in another
    // order, in double); a data step or a row off, or a state not carried, changes it.
    CHECK(in_order && a && b && a->loss == b->loss && a->lr == b->lr, "resume on one host: the log runs 1..%ld, and "
          "step %ld has the uninterrupted run's loss %.6f (%.6f) and lr %.4e (%.4e)", c + 5, c + 1, b ? b->loss : 0,
          a ? a->loss : 0, b ? b->lr : 0, a ? a->lr : 0);
    Mlstm r = {0}, u = {0};
    TrainState sr = {0}, su = {0};
    snprintf(p, sizeof p, "%s/host1/out/k/latest.ckpt", root);
    int lr_ok = load(p, &r, &sr, 8);
    snprintf(p, sizeof p, "%s/host1/out/u/latest.ckpt", root);
    int lu_ok = load(p, &u, &su, 8);
    // 5 steps on 1 process against 2 ranks: test_train's 10-step FP32 bound holds a fortiori
    double dw = lr_ok && lu_ok ? rel_diff(r.params, u.params, u.nparams) : INFINITY;
    CHECK(dw < 1e-5 && sr.data_step == su.data_step && sr.step == su.step && sr.data_step == (uint64_t)c + 5,
          "resume on one host: at step %ld the weights are within %.1e of the uninterrupted run's (< 1e-5)", c + 5, dw);
    if (lr_ok) mlstm_free(&r);
    if (lu_ok) mlstm_free(&u);
}

// ---- 3. SIGTERM to the rank on host 2
static void test_sigterm(void) {
    // Rank 0 samples after every step while rank 1 waits at the check that stops both, so
    // the signal most likely comes in that wait: a loop that checked once more before the
    // next step agreed to stop there, and ended without a checkpoint (6 runs in 6).
    double seconds;
    int rc = disturb("s", "", "--sample-every 1 --sample-len 3000", 5, "kill -TERM $p", &seconds);
    char out[PATH_MAX], p[PATH_MAX];
    snprintf(out, sizeof out, "%s/s.out", root);
    long stopped = -1;
    FILE *f = fopen(out, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) sscanf(line, "stopped at step %ld", &stopped);
    if (f) fclose(f);
    CHECK(rc == 0 && seconds < END_BOUND_S && stopped > 0, "SIGTERM to rank 1 on host 2: every rank stops after "
          "step %ld and exits 0 (exit %d, %.1f s after the signal)", stopped, rc, seconds);
    if (rc || stopped <= 0) show(out);
    static LogLine l[4096];
    snprintf(p, sizeof p, "%s/host1/out/s/train.log", root);
    int n = read_log(p, l, 4096);
    Mlstm m = {0};
    TrainState st = {0};
    snprintf(p, sizeof p, "%s/host1/out/s/latest.ckpt", root);
    int ok = load(p, &m, &st, 8);
    char q[PATH_MAX];
    snprintf(q, sizeof q, "%s/host2/out", root);
    struct stat sb;
    int written = count_lines(out, "^step +[0-9]+ \\| checkpoint ");
    CHECK(ok && written == 1 && (long)st.data_step == stopped && n > 0 && l[n - 1].step == stopped && stat(q, &sb) != 0,
          "SIGTERM to rank 1: one checkpoint, at step %ld, the log's last step, written by rank 0 "
          "(%d written; nothing on host 2's disk)", stopped, written);
    if (ok) mlstm_free(&m);
}

// ---- 4. a shard, or the checkpoint, missing on host 2. Here the ranks that wait for
// the failed one are killed at once (odls_base_sigkill_timeout 0: they have nothing to
// finish); by default Open MPI gives each a grace of a second, and these runs take 4 s.
static void test_missing(void) {
    char p[PATH_MAX], out[PATH_MAX], msg[PATH_MAX + 100];
    const char *now_kill = "--mca odls_base_sigkill_timeout 0";
    test_system("rm -f %s/host2/data/*.bin", root);  // as if the copy to host 2 had been forgotten
    double t0 = now();
    int rc = test_system("%s %s %s %s --batch 4 --steps 10 --out %s/local/new/m > %s/d.out 2>&1", mpirun, now_kill,
                         trainer, tiny, root, root);
    double seconds = now() - t0;
    snprintf(out, sizeof out, "%s/d.out", root);
    snprintf(msg, sizeof msg, "error: rank 1 on mlstm-host2: cannot open shard %s/local/data/train_000.bin: "
             "No such file", root);
    snprintf(p, sizeof p, "%s/host1/new", root);
    struct stat sb;
    CHECK(rc == 2 && contains(out, msg) && seconds < END_BOUND_S, "no shards on host 2: exit 2 after %.1f s, \"%s\"",
          seconds, msg);
    if (rc != 2) show(out);
    CHECK(count_lines(out, "^step ") == 0 && stat(p, &sb) != 0, "no shards on host 2: stopped before the first step, "
          "and rank 0 created no file (%s absent)", p);
    // --resume on two hosts reads the checkpoint on both: here it is on host 1's disk only
    t0 = now();
    rc = test_system("%s %s %s %s --steps 1000000 --resume %s/local/out/m --out %s/local/new2/m > %s/r.out 2>&1",
                     mpirun, now_kill, trainer, tiny_run, root, root, root);
    seconds = now() - t0;
    snprintf(out, sizeof out, "%s/r.out", root);
    snprintf(msg, sizeof msg, "error: rank 1 on mlstm-host2: --resume %s/local/out/m: No such file", root);
    snprintf(p, sizeof p, "%s/host1/new2", root);
    CHECK(rc == 2 && contains(out, msg) && stat(p, &sb) != 0 && seconds < END_BOUND_S,
          "the checkpoint on host 1 only, --resume on both: exit 2 after %.1f s, \"%s\"", seconds, msg);
    if (rc != 2) show(out);
    test_system("cp %s/host1/data/*.bin %s/host2/data/", root, root);  // host 2's copy, back for what follows
}

// ---- 5. host 2 cut off: its link goes down, as when a host loses power or its cable, and
// nothing closes its connections. By Open MPI's defaults (TCP keepalive on the runtime's
// links after 300 s idle, then 9 probes 20 s apart) the job would hang for minutes (a run
// here still hung 100 s later); with keepalive after 2 s, 3 probes 1 s apart, it ends.
static void test_cut(void) {
    double seconds;
    char act[PATH_MAX + 100];
    snprintf(act, sizeof act, "%s cut %s 2", script, root);
    const char *keepalive = "--mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 "
                            "--mca oob_tcp_keepalive_probes 3";
    int rc = disturb("c", keepalive, "--ckpt-every 5", 12, act, &seconds);
    char out[PATH_MAX], p[PATH_MAX];
    snprintf(out, sizeof out, "%s/c.out", root);
    CHECK(rc != 0 && rc != 124 && seconds < END_BOUND_S && contains(out, "lost communication with a remote daemon") &&
          contains(out, "Remote daemon: [[") && contains(out, "on node 198.18.0.2"), "host 2 cut off: with a 2 s "
          "keepalive the job ends by itself %.1f s later (< %d s), exit %d, naming host 2's daemon",
          seconds, END_BOUND_S, rc);
    if (rc == 0 || rc == 124) show(out);
    // host 2's daemon lost its link too, and ends with its rank: nothing is left running there
    int left = -1;
    for (int i = 0; i < 100 && left != 0; i++) {
        char cmd[PATH_MAX + 100];
        snprintf(cmd, sizeof cmd, "ip netns pids %s-2 | wc -l", strrchr(root, '/') + 1);
        FILE *f = popen(cmd, "r");
        if (!f || fscanf(f, "%d", &left) != 1) left = -1;
        if (f) pclose(f);
        if (left != 0) usleep(100000);
    }
    CHECK(left == 0, "host 2 cut off: its daemon and rank end by themselves too, within 10 s (%d processes left)", left);
    Mlstm m = {0};
    TrainState st = {0};
    snprintf(p, sizeof p, "%s/host1/out/c/latest.ckpt", root);
    int ok = load(p, &m, &st, 8);
    CHECK(ok && st.data_step >= 10 && st.data_step % 5 == 0,
          "host 2 cut off: the last checkpoint loads (data step %llu)", (unsigned long long)st.data_step);
    if (ok) mlstm_free(&m);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    double t_start = now();
    // build/train beside this program; test/hosts.sh from the repository root, where make test runs
    snprintf(trainer, sizeof trainer, "%s/train", test_bin_dir());
    if (!realpath("test/hosts.sh", script)) fail("test/hosts.sh not found: run test_hosts from the repository root");

    char why[512];
    int up = hosts_up(why, sizeof why);
    if (up <= 0) {
        if (up == 0 && getenv("REQUIRE_NETNS")) CHECK(0, "two hosts: %s, but REQUIRE_NETNS is set", why);
        else if (up == 0) SKIP("two hosts: %s", why);
        return test_summary("test_hosts");
    }
    atexit(teardown);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
    alarm(TEST_LIMIT_S);

    // the shards, on each host's disk (a cluster's nodes read their own copies)
    Stream s;
    char p[PATH_MAX];
    test_system("mkdir -p %s/host1/data %s/host2/data", root, root);
    corpus_stream(&s, 60000, 1, 0);
    snprintf(p, sizeof p, "%s/host1/data/train_000.bin", root);
    shard_write(p, s.shards[0].data, (size_t)s.shards[0].size, SHARD_FRAMED);
    stream_free(&s);
    corpus_stream(&s, 1500, 1, 1);
    snprintf(p, sizeof p, "%s/host1/data/val_000.bin", root);
    shard_write(p, s.shards[0].data, (size_t)s.shards[0].size, SHARD_FRAMED);
    stream_free(&s);
    test_system("cp %s/host1/data/*.bin %s/host2/data/", root, root);

    // a tiny model on one thread, as test_train's; the data at the same path on each host
    snprintf(tiny_run, sizeof tiny_run, "--train %s/local/data --seq-len 16 --val-every 0 --val-steps 2 --sample-len 0 "
             "--print-every 1000 --threads 1 --lr-schedule legw --lr 3e-3 --base-batch 4 --warmup-steps 3 "
             "--decay-steps 40", root);
    snprintf(tiny, sizeof tiny, "--hidden 32 --embed 16 %s", tiny_run);
    // mpirun on host 1, host 2's daemon through hosts.sh; TCP only, on the veths' addresses
    // (-x: a remote login does not see mpirun's environment; ASan's, for SAN=1 builds)
    snprintf(mpirun, sizeof mpirun, "timeout -k 5 %d %s run %s 1 env OMPI_ALLOW_RUN_AS_ROOT=1 "
             "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 mpirun --hostfile %s/hostfile -np 2 "
             "--mca plm_rsh_agent '%s agent %s' -x ASAN_OPTIONS --mca pml ob1 --mca btl tcp,self "
             "--mca btl_tcp_if_include 198.18.0.0/30 --mca oob_tcp_if_include 198.18.0.0/30",
             RUN_LIMIT_S, script, root, root, script, root);

    test_two_hosts();
    test_kill();
    test_sigterm();
    test_missing();
    test_cut();  // last: host 2 stays cut off

    char ns[128];
    snprintf(ns, sizeof ns, "%s-", strrchr(root, '/') + 1);
    char dir[64];
    snprintf(dir, sizeof dir, "%s", root);
    teardown();
    struct stat sb;
    CHECK(test_system("ip netns list | grep -q '^%s'", ns) != 0 && stat(dir, &sb) != 0,
          "two hosts: both namespaces, their veths and %s are gone (%.0f s in all)", dir, now() - t_start);
    return test_summary("test_hosts");
}
