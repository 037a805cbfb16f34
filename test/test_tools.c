// test_tools: the shell tools as a user runs them, fed names a user might choose:
// tools/plot_log.sh and dev/plot_schedules.sh with a backquoted command and a double
// quote in the file names (gnuplot once ran the command), names that start with '-',
// a PNG that is the log itself, and tools/transfer_eval.sh's own argument errors and a
// run directory as its model. The scripts are found beside this program's build
// directory. Also what every program shares (util.h, harness/checkpoint.h's reader): an
// error is one write, a range names its bounds, OMP_NUM_THREADS is checked like a flag
// by train, generate and transfer, and every reader of checkpoints refuses the same files.
#include "mlstm.h"
#include "harness/checkpoint.h"  // defines: the checkpoint file (CkptHeader, checkpoint_open/read/load, checkpoint_save_run)
#include "data.h"
#include "test/test.h"
#include <sys/socket.h>

static char bin[4096], root[4200], tmp[4096];

static int exists(const char *name) {
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    return access(p, F_OK) == 0;
}

static const char log_text[] = "# step epoch lr loss bpc scale skipped gnorm chars/s\n"
                               "train 1 0.01 0.001 5.5 7.9 1 0 1.0 100\ntrain 2 0.02 0.002 5.0 7.2 1 0 1.0 100\n"
                               "val 2 0.02 5.1 7.3\ntrain 3 0.03 0.002 4.5 6.5 1 0 1.0 100\n";

static void write_log(const char *name) {  // tmp/name: a training log of three steps
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    FILE *f = fopen(p, "w");
    if (!f) { perror(p); exit(1); }
    fputs(log_text, f);
    fclose(f);
}

// plot_log.sh never writes its PNG over the log (by name, symbolic or hard link), nor
// over anything but a regular file; this part needs no gnuplot (refused before it runs)
static void test_plot_refusals(void) {
    write_log("r.log");
    test_system("cd %s && cp r.log r.keep && ln -sf r.log r_link.png && ln -f r.log r_hard.png && mkdir -p r_dir.png",
                tmp);
    const char *pngs[][2] = {{"r.log", "the log itself"}, {"./r.log", "the log by another path"},
                             {"r_link.png", "a symbolic link to the log"}, {"r_hard.png", "a hard link to the log"}};
    for (int k = 0; k < 4; k++) {
        int rc = test_system("cd %s && %s/tools/plot_log.sh r.log %s > pr.out 2>&1", tmp, root, pngs[k][0]);
        int said = test_system("cd %s && [ $(wc -l < pr.out) -eq 1 ] && grep -q 'is the log r.log itself' pr.out",
                               tmp) == 0;
        CHECK(rc == 2 && said && test_system("cd %s && cmp -s r.log r.keep", tmp) == 0,
              "plot_log.sh r.log %s (%s): exit %d, refused in one line, the log intact", pngs[k][0], pngs[k][1], rc);
    }
    int rc = test_system("cd %s && %s/tools/plot_log.sh r.log r_dir.png > pr.out 2>&1", tmp, root);
    CHECK(rc == 2 && test_system("cd %s && grep -q 'cannot write r_dir.png: it is not a regular file' pr.out",
                                 tmp) == 0,
          "plot_log.sh with a directory as the PNG: exit %d, refused", rc);
}

static void test_plots(void) {
    test_plot_refusals();
    if (test_system("command -v gnuplot >/dev/null 2>&1") != 0) {
        SKIP("gnuplot not found: the plot scripts are not run (apt-get install gnuplot-nox)");
        return;
    }
    // a log named x`touch P1`"q.log: the name is the plot's title and the PNG's stem
    char p[8400];
    write_log("x`touch P1`\"q.log");
    int rc = test_system("cd %s && %s/tools/plot_log.sh 'x`touch P1`\"q.log' >plot.out 2>&1", tmp, root);
    CHECK(rc == 0 && !exists("P1"), "plot_log.sh 'x`touch P1`\"q.log': exit %d, the backquoted command did not run (P1 %s)",
          rc, exists("P1") ? "exists" : "absent");
    snprintf(p, sizeof p, "%s/x`touch P1`\"q.png", tmp);
    CHECK(file_size(p) > 1000, "and the PNG is there under that name (%ld bytes)", file_size(p));
    // plot_schedules.sh (which runs from the repository root): a temporary directory
    // (TMPDIR) and an output name with the same characters; the command's path is absolute
    char tdir[8400];
    snprintf(tdir, sizeof tdir, "%s/t`touch %s/P2`\"q", tmp, tmp);
    rc = test_system("mkdir -p '%s' && cd %s && BUILD=%s TMPDIR='%s' %s/dev/plot_schedules.sh '%s/s`touch P2`\"q.png' >sched.out 2>&1",
                     tdir, tmp, bin, tdir, root, tmp);
    CHECK(rc == 0 && !exists("P2"), "plot_schedules.sh with such names: exit %d, the backquoted command did not run (P2 %s)",
          rc, exists("P2") ? "exists" : "absent");
    snprintf(p, sizeof p, "%s/s`touch P2`\"q.png", tmp);
    CHECK(file_size(p) > 1000, "and the PNG is there under that name (%ld bytes)", file_size(p));
    // a name that starts with '-' is a name, for the log and the PNG it defaults to
    test_system("cd %s && cp r.log ./-x.log", tmp);
    rc = test_system("cd %s && %s/tools/plot_log.sh -x.log > dash.out 2>&1", tmp, root);
    snprintf(p, sizeof p, "%s/-x.png", tmp);
    CHECK(rc == 0 && file_size(p) > 1000, "plot_log.sh -x.log: exit %d, -x.png drawn (%ld bytes)", rc, file_size(p));
    // a PNG that is a symbolic link: written through, the link kept, the file's mode kept
    test_system("cd %s && mkdir -p store && echo old > store/p.png && chmod 640 store/p.png && "
                "ln -sf store/p.png lp.png", tmp);
    rc = test_system("cd %s && %s/tools/plot_log.sh r.log lp.png > lp.out 2>&1", tmp, root);
    CHECK(rc == 0 && test_system("cd %s && [ -L lp.png ] && [ $(stat -c %%a store/p.png) = 640 ] && "
                                 "[ $(stat -c %%s store/p.png) -gt 1000 ]", tmp) == 0,
          "plot_log.sh r.log lp.png, a link to store/p.png (mode 640): exit %d, the link kept, the PNG in store/p.png, "
          "mode 640", rc);
    CHECK(test_system("cd %s && ! find . -name '*.tmp.*' | grep -q .", tmp) == 0, "no temporary file left behind");
}

static void test_transfer_eval_args(void) {
    char out[4300];
    snprintf(out, sizeof out, "%s/eval.out", tmp);
    int rc = test_system("%s/tools/transfer_eval.sh -o >%s 2>&1", root, out);
    CHECK(rc == 2 && test_system("tail -n 1 %s | grep -qx 'error: -o needs a value (the output directory)'", out) == 0 &&
          test_system("grep -q 'unbound variable' %s", out) != 0, "transfer_eval.sh -o without a value: exit %d, says so (no \"unbound variable\")", rc);
    rc = test_system("%s/tools/transfer_eval.sh --help >%s 2>&1", root, out);
    CHECK(rc == 0 && test_system("grep -q 'transfer_eval.sh \\[-o OUTDIR\\] \\[--\\] CKPT DATA' %s", out) == 0 &&
          test_system("grep -q 'set -' %s", out) != 0, "transfer_eval.sh --help: exit %d, the usage and no line of code", rc);
    rc = test_system("%s/tools/transfer_eval.sh onlyone >%s 2>&1", root, out);
    CHECK(rc == 2 && test_system("tail -n 1 %s | grep -q 'error: need CKPT and DATA'", out) == 0, "transfer_eval.sh with one argument: exit %d", rc);
}

// transfer_eval.sh end to end on the tiny model of test_outputs_apart: an output
// directory named -dash (mkdir took it for options), and a run directory as the model
static void test_transfer_eval_runs(void) {
    int rc = test_system("cd %s && BUILD=%s %s/tools/transfer_eval.sh -o -dash m.ckpt builtin --docs 40 > ev1.out 2>&1",
                         tmp, bin, root);
    CHECK(rc == 0 && exists("-dash/summary.txt") && exists("-dash/heatmap.html"),
          "transfer_eval.sh -o -dash: exit %d, the results in ./-dash", rc);
    test_system("cd %s && mkdir -p run && cp m.ckpt run/" RUN_BEST_CKPT, tmp);
    rc = test_system("cd %s && BUILD=%s %s/tools/transfer_eval.sh -o ev -- run builtin --docs 40 > ev2.out 2>&1",
                     tmp, bin, root);
    CHECK(rc == 0 && exists("ev/summary.txt") &&
              test_system("cd %s && cmp -s ev/train.feat ./-dash/train.feat", tmp) == 0,
          "transfer_eval.sh -o ev -- run (a run directory): exit %d, the features of run/best.ckpt", rc);
}

// No tool writes over one of its own inputs: each such command exits 2 naming both, the input as it was.
static void test_outputs_apart(void) {
    int rc = test_system("cd %s && %s/prepare --builtin 20000 -o d > /dev/null 2>&1 && "
                         "%s/train --hidden 8 --embed 4 --batch 2 --seq-len 8 --corpus-bytes 20000 --steps 1 --val-every 0 "
                         "--sample-len 0 --out run > /dev/null 2>&1 && cp run/latest.ckpt m.ckpt && cp m.ckpt m.keep && "
                         "printf 'label,sentence\n1,good\n0,bad\n' > in.csv && cp in.csv in.keep && cp d/train_000.bin t.keep",
                         tmp, bin, bin);
    CHECK(rc == 0, "outputs apart: shards, a checkpoint and a CSV to work on (exit %d)", rc);
    const char *cases[][3] = {
        {"transfer featurize -m m.ckpt -o m.ckpt in.csv", "-o m.ckpt and -m m.ckpt are the same file", "m.ckpt m.keep"},
        {"transfer featurize -m m.ckpt -o in.csv in.csv", "-o in.csv and INPUT in.csv are the same file", "in.csv in.keep"},
        {"transfer heatmap -m m.ckpt --unit 0 -o h h.dat", "-o h.dat and INPUT h.dat are the same file", "h.dat in.keep"},
        {"prepare --format text -o d d/train_000.bin", "input d/train_000.bin is one of the files -o d is about to replace",
         "d/train_000.bin t.keep"},
        {"import_npy -o npy/0.npy npy", "-o npy/0.npy and input npy/0.npy are the same file", "npy/0.npy in.keep"},
    };
    test_system("mkdir -p %s/npy && cp %s/in.csv %s/npy/0.npy && cp %s/in.csv %s/h.dat", tmp, tmp, tmp, tmp, tmp);
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        rc = test_system("cd %s && %s/%s > al.out 2>&1", tmp, bin, cases[k][0]);
        int said = test_system("grep -q -- '%s' %s/al.out", cases[k][1], tmp) == 0;
        int kept = test_system("cd %s && cmp -s %s", tmp, cases[k][2]) == 0;
        CHECK(rc == 2 && said && kept, "outputs apart: %s: exit %d, names both, the input kept", cases[k][0], rc);
    }
    rc = test_system("cd %s && cp in.csv a.feat && %s/transfer classify --summary a.feat a.feat a.feat a.feat > al.out 2>&1 && false; "
                     "grep -q -- '--summary a.feat and train a.feat are the same file' al.out && cmp -s a.feat in.keep", tmp, bin);
    CHECK(rc == 0, "outputs apart: transfer classify --summary one of its feature files: refused, the file kept");
}

// ----------------------------------------------------------------------------
// util.h's primitives, in child processes

// Runs fn(arg) in a child whose stderr is a SOCK_SEQPACKET socket, where every write(2)
// arrives as one message: returns the number of writes, the bytes into out (cap), and
// the exit status into *status.
static int writes_of(void (*fn)(void *), void *arg, char *out, size_t cap, int *status) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) { perror("socketpair"); exit(1); }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        dup2(sv[1], 2);
        fn(arg);
        exit(0);
    }
    close(sv[1]);
    int writes = 0;
    size_t n = 0;
    ssize_t k;
    while (n < cap - 1 && (k = recv(sv[0], out + n, cap - 1 - n, 0)) > 0) n += (size_t)k, writes++;
    out[n] = 0;
    close(sv[0]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    return writes;
}
static void fail_on_rank(void *arg) {
    fail_where_set(3, "node7");
    fail("cannot open shard %s: No such file or directory\nHINT: make shards with build/prepare", (const char *)arg);
}
static void fail_long(void *arg) {
    (void)arg;
    static char path[10001];
    memset(path, 'p', 10000);
    fail("cannot open %s", path);
}
static void sigbus_on_rank(void *arg) {  // a shard truncated under its mapping: data.h's SIGBUS handler reports it
    fail_where_set(1, "node2");
    const char *p = (const char *)arg;
    uint8_t *big = (uint8_t *)mallocCheck(1 << 16), buf[16];
    shard_write(p, big, 1 << 16, 0);
    Stream s;
    stream_open(&s, &p, 1, 1);
    if (truncate(p, 100) != 0) exit(99);
    stream_read(&s, 60000, 16, buf);
}
typedef struct { const char *text; long long min, max; } WholeCase;
static void parse_whole_case(void *arg) {
    const WholeCase *c = (const WholeCase *)arg;
    parse_whole("--steps", c->text, c->min, c->max);
}
static void parse_real_case(void *arg) { parse_real("--temperature", (const char *)arg, 0, 1e30); }
static void omp_check_case(void *arg) {
    setenv("OMP_NUM_THREADS", (const char *)arg, 1);
    omp_num_threads_check();
}

// openmp_prefer_passive_wait executes the program again with the policy set: here
// test_tools itself, whose main prints what it was given (wait_env_main).
static void prefer_passive_case(void *arg) {
    char *argv[] = {"test_tools", "--print-wait-env", NULL};
    const char *spin = (const char *)arg;
    unsetenv("OMP_WAIT_POLICY");
    if (spin) setenv("GOMP_SPINCOUNT", spin, 1);
    else unsetenv("GOMP_SPINCOUNT");
    openmp_prefer_passive_wait(argv);
}
static int wait_env_main(void) {
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    fprintf(stderr, "%s %s\n", policy ? policy : "-", spin ? spin : "-");
    return 0;
}
static void test_wait_policy(void) {
    char out[200];
    int status;
#ifdef _OPENMP
    const char *want[2] = {"passive 3000", "passive 77"};
#else
    const char *want[2] = {"", ""};  // no OpenMP: nothing to set, the program carries on as it is
#endif
    writes_of(prefer_passive_case, NULL, out, sizeof out, &status);
    out[strcspn(out, "\n")] = 0;
    CHECK(status == 0 && !strcmp(out, want[0]), "unset OMP_WAIT_POLICY: the program runs again with passive "
          "waiting after a short spin (got '%s', exit %d)", out, status);
    writes_of(prefer_passive_case, "77", out, sizeof out, &status);
    out[strcspn(out, "\n")] = 0;
    CHECK(status == 0 && !strcmp(out, want[1]), "a GOMP_SPINCOUNT the user set stays (got '%s', exit %d)", out,
          status);
}

static void test_util(void) {
    char out[20000];
    int status;
    int w = writes_of(fail_on_rank, "data/train_003.bin", out, sizeof out, &status);
    const char *want = "error: rank 3 on node7: cannot open shard data/train_003.bin: No such file or directory\n"
                       "HINT: make shards with build/prepare\n";
    CHECK(w == 1 && status == 2 && !strcmp(out, want), "fail(): the whole error, two lines, in one write (%d writes, "
          "exit %d): the lines of several ranks cannot interleave", w, status);
    char shard[4300];
    snprintf(shard, sizeof shard, "%s/bus.bin", tmp);
    w = writes_of(sigbus_on_rank, shard, out, sizeof out, &status);
    CHECK(w == 1 && status == 2 && strstr(out, "error: rank 1 on node2: ") == out &&
              strstr(out, "bus.bin was truncated") && strstr(out, "\nHINT: do not rewrite shards"),
          "a shard truncated under a rank: its two lines in one write (%d writes, exit %d)", w, status);
    w = writes_of(fail_long, NULL, out, sizeof out, &status);
    CHECK(w == 1 && status == 2 && strlen(out) == 10020 && out[10019] == '\n',
          "fail(): a 10,020-byte message, whole, in one write (%d writes, %zu bytes)", w, strlen(out));
    // a value beyond a large bound says the range (it said "must be at least 1")
    WholeCase whole[] = {{"2000000000000000", 1, 1LL << 50}, {"99999999999999999999", 1, 1LL << 50},
                         {"0", 1, 1LL << 50}, {"-99999999999999999999", 1, 1LL << 50}, {"70000", 1, 65536}};
    const char *says[] = {"--steps: must be between 1 and 1125899906842624, got 2000000000000000",
                          "--steps: must be between 1 and 1125899906842624, got 99999999999999999999",
                          "--steps: must be at least 1, got 0",
                          "--steps: must be at least 1, got -99999999999999999999",
                          "--steps: must be between 1 and 65536, got 70000"};
    for (int k = 0; k < 5; k++) {
        char what[200];
        snprintf(what, sizeof what, "parse_whole %s in [%lld, %lld]", whole[k].text, whole[k].min, whole[k].max);
        EXPECT_EXIT(parse_whole_case, &whole[k], 2, says[k], what);
    }
    EXPECT_EXIT(parse_real_case, "1e31", 2, "--temperature: must be between 0 and 1e+30, got 1e31",
                "parse_real above 1e30");
    EXPECT_EXIT(parse_real_case, "-1", 2, "--temperature: must be at least 0, got -1", "parse_real below 0");
    // OMP_NUM_THREADS as libgomp reads it: a list of whole numbers, blanks around them
    const char *omp_ok[] = {"1", "4", " 4 ", "1024", "4,2"};
    for (int k = 0; k < 5; k++) {
        char what[100];
        snprintf(what, sizeof what, "OMP_NUM_THREADS=\"%s\" accepted", omp_ok[k]);
        EXPECT_EXIT(omp_check_case, (void *)omp_ok[k], 0, "", what);
    }
    const char *omp_bad[] = {"1025", "100000", "0", "", "abc", "4,0", "4,", "-2", "2x", "99999999999999999999999"};
    for (int k = 0; k < 10; k++) {
        char what[100];
        snprintf(what, sizeof what, "OMP_NUM_THREADS=\"%s\" refused", omp_bad[k]);
        EXPECT_EXIT(omp_check_case, (void *)omp_bad[k], 2, "OMP_NUM_THREADS=", what);
    }
}

// OMP_NUM_THREADS beyond MAX_THREADS crashed train, generate and transfer in their first
// parallel region (after opening the log): now one line naming it, exit 2, before any file.
// A value libgomp cannot parse it reports itself as it loads, before main, in a line of
// own ("\nlibgomp: Invalid value ..."): then those lines and ours.
static void test_omp_num_threads(void) {
    const char *values[] = {"100000", "abc", ""};
    for (int v = 0; v < 3; v++) {
        const char *cmds[3][2] = {
            {"train", "train --hidden 8 --embed 4 --batch 2 --seq-len 8 --corpus-bytes 20000 --steps 1 --val-every 0 "
                      "--sample-len 0 --out omp.run"},
            {"generate", "generate m.ckpt --length 5"},
            {"transfer", "transfer featurize -m m.ckpt -o omp.feat --docs 4 builtin:test"}};
        for (int k = 0; k < 3; k++) {
            int rc = test_system("cd %s && OMP_NUM_THREADS='%s' %s/%s > omp.out 2> omp.err", tmp, values[v], bin,
                                 cmds[k][1]);
            int one = test_system("cd %s && [ $(grep -cv -e '^libgomp: Invalid value for environment variable "
                                  "OMP_NUM_THREADS$' -e '^$' omp.err) -eq 1 ] && [ $(wc -l < omp.err) -le %d ] && "
                                  "tail -n 1 omp.err | grep -q \"^error: OMP_NUM_THREADS=%s: expected a whole number "
                                  "from 1 to 1024\"", tmp, v ? 3 : 1, values[v]) == 0;
            int none = test_system("cd %s && [ ! -e omp.run ] && [ ! -e omp.feat ] && "
                                   "[ ! -s omp.out ]", tmp) == 0;
            CHECK(rc == 2 && one && none, "%s with OMP_NUM_THREADS='%s': exit %d, one line naming it, no file written",
                  cmds[k][0], values[v], rc);
        }
    }
    // under a launcher, before MPI starts, the error names the rank and host as later ones do
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    int rc = test_system("cd %s && OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMP_NUM_THREADS=abc %s/train "
                         "--hidden 8 --steps 1 --out omp.run > omp.out 2> omp.err", tmp, bin);
    int named = test_system("cd %s && tail -n 1 omp.err | grep -qF 'error: rank 1 on %s: OMP_NUM_THREADS=abc:'", tmp,
                            host) == 0;
    int one_rank = test_system("cd %s && OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 OMP_NUM_THREADS=abc %s/train "
                               "--hidden 8 > omp.out 2> omp.err; tail -n 1 omp.err | "
                               "grep -q '^error: OMP_NUM_THREADS=abc'", tmp, bin) == 0;
    CHECK(rc == 2 && named && one_rank && test_system("[ ! -e %s/omp.run ]", tmp) == 0,
          "train as rank 1 of 2 with OMP_NUM_THREADS=abc: exit %d, the error names the rank and host (%d); as the only "
          "rank it does not (%d)", rc, named, one_rank);
}

// A header whose sizes wrap (D=2, H=2^30; test_mlstm builds the same), and one beyond
// the limits: refused by every reader alike, naming the file.
static void test_readers_agree(void) {
    char p[4300];
    snprintf(p, sizeof p, "%s/wide.ckpt", tmp);
    int rc = test_system("cd %s && cp m.ckpt wide.ckpt && printf '\\001\\000\\001\\000' | "
                         "dd of=wide.ckpt bs=1 seek=%d conv=notrunc 2>/dev/null", tmp, CKPT_AT_H);  // H = 65537
    CHECK(rc == 0, "wide.ckpt: H = 65537 written into a copy of m.ckpt");
    const char *readers[][2] = {{"generate", "%s/generate %s --length 5"},
                                {"transfer", "%s/transfer featurize -m %s -o wide.feat --docs 4 builtin:test"},
                                {"mlstm_ckpt.py", "/usr/bin/python3 %s/../tools/mlstm_ckpt.py info %s"}};
    int python = test_system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0;
    for (int k = 0; k < 3; k++) {
        if (k == 2 && !python) {
            SKIP("mlstm_ckpt.py not run: /usr/bin/python3 with numpy not found");
            continue;
        }
        char cmd[8600];
        snprintf(cmd, sizeof cmd, readers[k][1], bin, p);
        rc = test_system("cd %s && %s > rd.out 2> rd.err", tmp, cmd);
        int said = test_system("cd %s && [ $(wc -l < rd.err) -eq 1 ] && grep -q 'wide.ckpt: D=4 H=65537, beyond this "
                               "build.s limits (D at most 65536, H at most 65536)' rd.err", tmp) == 0;
        CHECK(rc == 2 && said,
              "%s refuses H = 65537 as the trainer does: exit %d, one line naming the file and the limits",
              readers[k][0], rc);
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--print-wait-env")) return wait_env_main();
    snprintf(bin, sizeof bin, "%s", test_bin_dir());
    snprintf(root, sizeof root, "%s/..", bin);
    const char *base = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/test_tools.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    test_util();
    test_wait_policy();
    test_plots();
    test_transfer_eval_args();
    test_outputs_apart();  // also trains m.ckpt, which the tests below read
    test_omp_num_threads();
    test_readers_agree();
    test_transfer_eval_runs();
    int rc = test_summary("test_tools");
    if (rc == 0) test_system("rm -rf %s", tmp);
    else printf("(files kept in %s)\n", tmp);
    return rc;
}
