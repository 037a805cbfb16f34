// The CPU trainer in-process: train.c included without its main, train_main called
// as a function. Checks that the loop (train.h) never re-executes its process (the
// OpenMP wait-policy setup belongs to a program's main, not to the library), that
// the in-process run writes the same checkpoint bytes as the build/train program,
// and the CPU backend's side of the contract in train.h (precision, host copies).
#define main train_cpu_main  // the trainer whole, its main renamed: this file has its own
#include "train.c"  // defines: the CPU backend (model_*), train_main and all it includes
#undef main
#include "test/test.h"

static char dir[] = "/tmp/mlstm_backend_XXXXXX";
#define TINY_ARGS "--hidden", "32", "--embed", "16", "--batch", "4", "--seq-len", "16", "--corpus-bytes", "60000", \
                  "--val-every", "0", "--val-steps", "2", "--sample-len", "0", "--print-every", "1000", "--threads", "1", \
                  "--steps", "6"
#define TINY_FLAGS "--hidden 32 --embed 16 --batch 4 --seq-len 16 --corpus-bytes 60000 --val-every 0 --val-steps 2 " \
                   "--sample-len 0 --print-every 1000 --threads 1 --steps 6"

// train_main with OMP_WAIT_POLICY unset: a library that re-executed /proc/self/exe
// here would restart this test with the trainer's flags (see main).
static void test_no_reexec(const char *trainer) {
    char out[600], ckpt[600];
    snprintf(out, sizeof out, "%s/a", dir);
    snprintf(ckpt, sizeof ckpt, "%s/a/latest.ckpt", dir);
    unsetenv("OMP_WAIT_POLICY");
    const char *args[] = {"train", TINY_ARGS, "--out", out, NULL};
    int argc = (int)(sizeof args / sizeof args[0]) - 1;
    optind = 0;  // getopt_long starts afresh
    fflush(stdout);
    int saved = dup(1);
    if (!freopen("/dev/null", "w", stdout)) return;  // the trainer's progress table
    int rc = train_main(argc, (char **)args);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    CHECK(rc == 0 && file_size(ckpt) > 0, "train_main in-process: returns 0 without re-executing the test, writes %s", ckpt);
    int r = test_system("%s " TINY_FLAGS " --out %s/b > %s/b.out 2>&1", trainer, dir, dir);
    char b[600];
    snprintf(b, sizeof b, "%s/b/latest.ckpt", dir);
    CHECK(r == 0 && files_equal(ckpt, b), "train_main in-process and the build/train program write byte-identical checkpoints");
    // a second train_main in the same process (test_gpu resumes so) resumes into the same
    // directory: the first released its lock when it returned
    const char *again[] = {"train", TINY_ARGS, "--steps", "8", "--resume", out, NULL};
    argc = (int)(sizeof again / sizeof again[0]) - 1;
    optind = 0;
    fflush(stdout);
    saved = dup(1);
    if (!freopen("/dev/null", "w", stdout)) return;
    rc = train_main(argc, (char **)again);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    CHECK(rc == 0, "a second train_main in the same process resumes into the files of the first (its lock was released)");
}

// The CPU backend: --fp16 is the loss-scaling protocol it offers, and its host views are the
// model itself, so a change to them is what the next step computes from.
static void test_cpu_backend(void) {
    Options o;
    options_defaults(&o);
    Precision p32 = model_precision(&o);
    o.fp16 = 1;
    Precision p16 = model_precision(&o);
    CHECK(p32.fp16 == 0 && !strcmp(p32.description, "FP32"), "CPU backend: FP32 without --fp16 (%s)", p32.description);
    CHECK(p16.fp16 == 1 && strstr(p16.description, "loss scaling") && p16.max_loss_scale == INFINITY,
          "CPU backend: --fp16 runs the loss scaling, its scale uncapped (%s, cap %g)", p16.description,
          p16.max_loss_scale);
    MlstmConfig cfg = {256, 8, 16, 1};
    int B = 4, T = 5;
    o.model = cfg;
    o.T = T;
    o.seed = 3;
    Model *md = model_create(&o, B);
    uint8_t in[20], tg[20];
    for (int i = 0; i < B * T; i++) {
        in[i] = (uint8_t)('a' + i % 7);
        tg[i] = (uint8_t)('a' + (i + 1) % 7);
    }
    real *h, *c;
    model_state(md, &h, &c);
    int zero = 1;
    for (int i = 0; i < B * cfg.H; i++) zero &= h[i] == 0 && c[i] == 0;
    double l1 = model_step(md, in, tg, NULL, 1.0);
    model_state(md, &h, &c);
    int moved = 0;
    for (int i = 0; i < B * cfg.H; i++) moved |= h[i] != 0;
    CHECK(zero && moved, "CPU backend: the carried state starts at zero and model_step advances it");
    // overwrite the host state with zeros (a resume) and step again on the same batch: the same loss
    memset(h, 0, sizeof(real) * B * cfg.H);
    memset(c, 0, sizeof(real) * B * cfg.H);
    model_loaded(md);
    double l2 = model_step(md, in, tg, NULL, 1.0);
    CHECK(l1 == l2, "CPU backend: after model_loaded the step starts from the host state (loss %.9f = %.9f)", l2, l1);
    model_free(md);
}

// model_check's one pass (the norm is finite exactly when every gradient is) and model_apply's
// (the factor applied inside Adam's pass) against the two passes each they stand for.
static void test_cpu_check_apply(void) {
    Options o;
    options_defaults(&o);
    o.model = (MlstmConfig){256, 8, 16, 1};
    o.T = 4;
    o.seed = 5;
    Model *md = model_create(&o, 2);
    Mlstm *m = &md->m;
    size_t n = m->nparams, last = n - 1;
    uint64_t s = 9;
    for (size_t i = 0; i < n; i++) m->grads[i] = (float)(rng_uniform(&s) - 0.5);
    m->grads[0] = FLT_MAX, m->grads[1] = -FLT_MAX;  // finite: no inf from the squares in double
    GradientCheck c = model_check(md);
    CHECK(!c.overflow && c.norm == grad_norm(m->grads, n) && c.norm > FLT_MAX,
          "CPU backend: model_check passes +-FLT_MAX gradients, norm %g = grad_norm's", c.norm);
    const float odd[] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        float keep = m->grads[last];
        m->grads[last] = odd[k];
        GradientCheck o = model_check(md);
        CHECK(o.overflow && o.norm == 0, "CPU backend: model_check flags one gradient of %g among %zu", odd[k], n);
        m->grads[last] = keep;
    }
    for (size_t i = 0; i < n; i++) m->grads[i] = (float)(rng_uniform(&s) - 0.5);
    float *p = mlstm_alloc(n), *m1 = mlstm_alloc(n), *m2 = mlstm_alloc(n), *g = mlstm_alloc(n);
    memcpy(p, m->params, n * 4), memcpy(m1, m->adam_m, n * 4), memcpy(m2, m->adam_v, n * 4);
    const double factor = 0.37, lr = 2e-3;
    for (int step = 1; step <= 2; step++) {  // the second with non-zero moments
        for (size_t i = 0; i < n; i++) g[i] = m->grads[i] * (real)factor;
        AdamConfig a = adam_defaults;
        a.lr = lr;
        adam_update(p, g, 1, m1, m2, n, a, step);
        model_apply(md, factor, lr, step);
    }
    int same = !memcmp(p, m->params, n * 4) && !memcmp(m1, m->adam_m, n * 4) && !memcmp(m2, m->adam_v, n * 4);
    CHECK(same, "CPU backend: model_apply = gradients times the factor, then adam_update, bit for bit (two steps)");
    free(p); free(m1); free(m2); free(g);
    model_free(md);
}

// The signal handler: one event delivered twice at once (a terminal's hangup reaches the whole
// process group, and timeout or mpirun passes it on too) is one request to stop; a second signal
// later (SIGNAL_REPEAT_S) exits at once, 128 + its number. Each case in a child, as it may _exit.
static int handler_child(int wait_us) {
    pid_t p = fork();
    if (p == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2);  // the second signal's message
        stop_requested = 0;
        on_signal(SIGHUP);
        usleep((useconds_t)wait_us);
        on_signal(SIGHUP);
        _exit(stop_requested == 1 ? 0 : 3);
    }
    int st = 0;
    if (p < 0 || waitpid(p, &st, 0) != p) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}
static void test_second_signal(void) {
    int now = handler_child(0), later = handler_child(1100000);
    CHECK(now == 0, "two SIGHUPs at once: one request to stop, the run goes on to its checkpoint (child exit %d)", now);
    CHECK(later == 128 + SIGHUP, "a second SIGHUP 1.1 s after the first exits at once: exit %d (want %d)", later,
          128 + SIGHUP);
}

// A resume reads its run's latest.ckpt before it takes the directory's lock. The trainer that held
// the lock may replace that file and end in between: the resume must then stop before it cuts
// the log back to the older step and overwrites the newer checkpoint. run_dir_open, given the
// identity of the file as read, is where the two meet.
typedef struct {
    const char *out, *latest;
    struct stat as_read;
} ResumeRace;
static void resume_race_open(void *arg) {
    ResumeRace *rr = (ResumeRace *)arg;
    Options o;
    memset(&o, 0, sizeof o);
    o.out = o.resume = rr->out;
    Stream none;
    memset(&none, 0, sizeof none);
    RunDir d;
    memset(&d, 0, sizeof d);
    char log[700];
    uint64_t run_id = 0;
    snprintf(log, sizeof log, "%s/%s", rr->out, RUN_LOG);
    log_owner(log, &run_id);
    run_dir_open(&d, &o, 1, run_id, 6, rr->latest, &rr->as_read, &none, &none);
    run_dir_close(&d);
}
static void test_resume_race(void) {
    char out[600], latest[700], log[700], log_before[700];
    snprintf(out, sizeof out, "%s/race", dir);
    snprintf(latest, sizeof latest, "%s/%s", out, RUN_LATEST_CKPT);
    snprintf(log, sizeof log, "%s/%s", out, RUN_LOG);
    snprintf(log_before, sizeof log_before, "%s/race.log", dir);
    ResumeRace rr = {out, latest, {0}};
    int ok = test_system("cp -r %s/a %s", dir, out) == 0 && stat(latest, &rr.as_read) == 0;
    EXPECT_EXIT(resume_race_open, &rr, 0, "", "a resume whose latest.ckpt is as it read it opens its directory");
    // replaced the way a trainer writes it: a new file renamed over the old (so a new inode)
    ok = ok && test_system("cp %s %s && cp %s %s.new && mv %s.new %s", log, log_before, latest, latest, latest,
                           latest) == 0;
    EXPECT_EXIT(resume_race_open, &rr, 2, "was replaced after this trainer read it",
                "a resume whose latest.ckpt was replaced after its read stops");
    CHECK(ok && files_equal(log, log_before), "the stopped resume leaves the run's log as it was");
}

// The run's identity (harness/checkpoint.h, ckpt_run_identity) leaves out exactly the recorded settings a resume
// may change (run.h's RunRule: all but RUN_DEFINING), so that a run continued in its directory, its
// record written anew, keeps the identity its log and best.ckpt carry.
static void test_identity_rules(void) {
    int agree = 1, excluded = 0;
    for (int i = 0; i < NFLAGS; i++) {
        int out = 0;
        for (int k = 0; k < CKPT_N_NOT_IDENTITY; k++) out |= !strcmp(flags[i].name, CKPT_NOT_IDENTITY[k]);
        int may_change = flag_recorded(i) && flags[i].on_resume != RUN_DEFINING;
        if (out != may_change)
            printf("      --%s: %s\n", flags[i].name,
                   out ? "left out of the identity, but defining" : "may change on a resume, but in the identity");
        agree &= out == may_change;
        excluded += out;
    }
    CHECK(agree && excluded == CKPT_N_NOT_IDENTITY, "the run identity leaves out the %d recorded settings a resume may "
          "change, and only those", excluded);
}

int main(int argc, char **argv) {
    if (argc > 1) {  // only a re-executed test gets arguments: the trainer's (stdout may be /dev/null here)
        fprintf(stderr, "FAIL  test_backend was re-executed with the trainer's flags (%s ...)\n", argv[1]);
        fprintf(stderr, "test_backend: 0 passed, 1 failed\n");
        return 1;
    }
    char trainer[4200];
    snprintf(trainer, sizeof trainer, "%s/train", test_bin_dir());
    if (access(trainer, X_OK) != 0) {
        printf("FAIL  %s not built\n", trainer);
        return 1;
    }
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_identity_rules();
    test_no_reexec(trainer);
    test_resume_race();
    test_cpu_backend();
    test_cpu_check_apply();
    test_second_signal();
    test_system("rm -rf %s", dir);
    return test_summary("test_backend");
}
