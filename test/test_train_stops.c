// Runs cut short from outside, run as a user runs them (build/train and build/prepare next to
// this test): a run directory taken away while its trainer runs (removed, renamed, replaced by
// another run's, by a link), a validation cut by a signal and made up by the resume, a file-size
// limit, a memory limit, a full stdout and a diverged run: each ends in one line naming what
// happened, exit 2, with no other run's files touched and nothing half-written.
#include "mlstm.h"
#include "test/test.h"

static char dir[] = "/tmp/mlstm_stops_XXXXXX";
static char trainer[4200], prepare[4200];
#define TINY "--hidden 32 --embed 16 --batch 4 --seq-len 16 --corpus-bytes 60000 --sample-len 0 --threads 1 " \
             "--print-every 1000 --val-every 0"
// validation that takes long enough (about 0.6 s) to be signalled while it runs
#define V "--hidden 64 --batch 8 --seq-len 16 --corpus-bytes 8000000 --sample-len 0 --val-every 50 --steps 200 " \
          "--decay-steps 200 --threads 1 --print-every 1000"

// ASan reserves terabytes of address space for its shadow and cannot start under ulimit -v (SAN=1
// builds): there the same allocations fail by its allocator's own limit, and the thread stacks by
// a size beyond any address space.
#ifdef SANITIZED
#define MEMORY_LIMIT "ASAN_OPTIONS=$ASAN_OPTIONS:allocator_may_return_null=1:max_allocation_size_mb=200 "
#define STACK_LIMIT "OMP_STACKSIZE=100000000G "
#else
#define MEMORY_LIMIT "ulimit -v 1000000; "
#define STACK_LIMIT "ulimit -v 400000; OMP_STACKSIZE=1G "
#endif

static int says(const char *out, const char *pattern) { return test_dir_says(dir, out, pattern); }
static long size_of(const char *name) { return test_dir_size(dir, name); }
static int same_bytes(const char *a, const char *b) { return test_dir_same_bytes(dir, a, b); }
static int temporaries_in(const char *sub) { return test_system("ls %s/%s | grep -q '[.]tmp[.]'", dir, sub) == 0; }

// 1. A run's directory taken away while it trains: removed, renamed away, replaced by another
// run's directory or by a link to one, or its lock removed. The trainer (a long run, its first
// checkpoint at its end) writes nothing into what --out names now, and stops: exit 2, one line.
static void test_directory_taken(void) {
    // another run's directory, its files kept to compare
    test_system("cd %s && %s " TINY " --steps 5 --seed 9 --out other > other.out 2>&1 && cp -r other other.keep", dir,
                trainer);
    const struct { const char *name, *action, *kept; } cases[] = {
        {"removed (another trainer starts there)", "rm -rf rx; %s " TINY " --steps 3 --seed 9 --out rx > b.out 2>&1",
         "the directory it locked was removed"},
        {"renamed away", "mv rx ry", "this run.s files are in /.*/ry"},
        {"replaced by a copy of another run's directory", "rm -rf rx; cp -r other rx", "it locked was removed"},
        {"replaced by a link to another run's directory", "mv rx ry; ln -s other rx", "this run.s files are in /.*/ry"},
        {"its lock removed", "rm rx/lock", "this run.s files are in /.*/rx"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char action[1000];
        snprintf(action, sizeof action, cases[k].action, trainer);
        test_system("cd %s && rm -rf rx ry other && cp -r other.keep other", dir);
        int rc = test_system("cd %s && (timeout 120 %s " TINY " --steps 1000000 --out rx > a.out 2>&1 & pid=$!; "
                             "for i in $(seq 3000); do grep -q '^train 20 ' rx/train.log 2>/dev/null && break; "
                             "sleep 0.01; done; %s; wait $pid)", dir, trainer, action);
        int b_whole = k != 0 || (size_of("rx/latest.ckpt") > 0 && says("rx/train.log", "^train 3 ") &&
                                 !says("rx/train.log", "^train 20 "));
        int other_whole = same_bytes("other/latest.ckpt", "other.keep/latest.ckpt") &&
                          same_bytes("other/train.log", "other.keep/train.log") && !temporaries_in("other");
        CHECK(rc == 2 && says("a.out", "^error: --out rx is no longer the directory this trainer locked") &&
                  test_system("grep -q -- '%s' %s/a.out", cases[k].kept, dir) == 0 && b_whole && other_whole,
              "--out %s while its trainer runs: exit %d, one line, nothing written into what rx names now",
              cases[k].name, rc);
    }
    // the order: A's directory removed, B started there, A signalled: A's checkpoint never lands in B's
    test_system("cd %s && rm -rf rx", dir);
    int rc = test_system("cd %s && (timeout 120 %s " TINY " --steps 1000000 --out rx > a.out 2>&1 & pa=$!; "
                         "for i in $(seq 3000); do grep -q '^train 20 ' rx/train.log 2>/dev/null && break; sleep 0.01; "
                         "done; rm -rf rx; %s " TINY " --steps 1000000 --ckpt-every 10 --seed 9 --out rx "
                         "> b.out 2>&1 & pb=$!; for i in $(seq 3000); do grep -q '^train 30 ' rx/train.log 2>/dev/null "
                         "&& break; sleep 0.01; done; kill -TERM $pa 2>/dev/null; wait $pa; rc=$?; "
                         "{ kill -KILL $pb; wait $pb; } 2>/dev/null; exit $rc)",
                         dir, trainer, trainer);
    int resumes = test_system("cd %s && %s --resume rx --steps 1000000000 --threads 1 > r.out 2>&1 & pid=$!; sleep 1; "
                              "kill -TERM $pid; wait $pid", dir, trainer) == 0;
    CHECK(rc == 2 && says("a.out", "no longer the directory this trainer locked") && resumes,
          "the issue's run A whose directory B took: A exits %d without writing there, and B's run resumes", rc);
}

// 2. A validation cut short by a signal, at a step inside the run and at its last step: the
// resume runs it before its first step, so the run ends with the uninterrupted run's val lines,
// best.ckpt and latest.ckpt, byte for byte; the advice printed at the stop is a command that works.
static void test_validation_cut(void) {
    test_system("cd %s && %s " V " --out vu > vu.out 2>&1", dir, trainer);
    const long at[2] = {100, 200};
    for (int k = 0; k < 2; k++) {
        char run[16];
        snprintf(run, sizeof run, "v%ld", at[k]);
        int r1 = test_system("cd %s && (%s " V " --out %s > %s.out 2>&1 & pid=$!; for i in $(seq 60000); do "
                             "grep -q '^train %ld ' %s/train.log 2>/dev/null && break; sleep 0.005; done; "
                             "kill -TERM $pid; wait $pid)", dir, trainer, run, run, at[k], run);
        char out[40], latest[40], best[40];
        snprintf(out, sizeof out, "%s.out", run);
        int cut = test_system("grep -q '^# val %ld cut short' %s/%s/train.log", at[k], dir, run) == 0;
        int advised = test_system("grep -q '^stopped at step %ld; continue with --resume %s$' %s/%s", at[k], run, dir,
                                  out) == 0;
        int r2 = test_system("cd %s && %s --resume %s " V " > %s.2.out 2>&1", dir, trainer, run, run);
        snprintf(latest, sizeof latest, "%s/latest.ckpt", run);
        snprintf(best, sizeof best, "%s/best.ckpt", run);
        int same_val = test_system("cd %s && grep '^val\\|^#' vu/train.log > vu.val && grep '^val\\|^#' %s/train.log "
                                   "> %s.val && cmp -s vu.val %s.val", dir, run, run, run) == 0;
        CHECK(r1 == 0 && cut && advised && r2 == 0 && same_val && same_bytes(best, "vu/best.ckpt") &&
                  same_bytes(latest, "vu/latest.ckpt"),
              "validation at step %ld cut by SIGTERM (marked %d, advised %d): --resume %s (exit %d) logs the "
              "uninterrupted run's val lines (%d), best.ckpt and latest.ckpt byte for byte", at[k], cut, advised, run,
              r2, same_val);
    }
    int r3 = test_system("cd %s && %s --resume v200 " V " > v200.3.out 2>&1", dir, trainer);
    CHECK(r3 == 2 && says("v200.3.out", "nothing to train"), "and once made up, the run has nothing left (exit %d)",
          r3);
}

// 3. A file-size limit (ulimit -f, in a child shell) is met like a full disk: one line naming the
// file, exit 2, no temporary left; not SIGXFSZ (exit 153, no message).
static void test_file_size_limit(void) {
    int rc = test_system("cd %s && (ulimit -f 20; %s " TINY " --steps 3 --out fz > fz.out 2>&1)", dir, trainer);
    CHECK(rc == 2 && says("fz.out", "^error: cannot write fz/latest.ckpt: File too large") && !temporaries_in("fz"),
          "train under ulimit -f: exit %d (153: SIGXFSZ), the checkpoint named, no temporary left", rc);
    rc = test_system("cd %s && (ulimit -f 1; %s --builtin 400000 -o pz > pz.out 2>&1)", dir, prepare);
    CHECK(rc == 2 && says("pz.out", "^error: cannot write .*pz.*/train_000.bin: File too large") &&
              test_system("ls %s | grep -q '^pz[.]prepare\\|^pz$'", dir) != 0,
          "prepare under ulimit -f: exit %d (153: SIGXFSZ), the shard named, no temporary left", rc);
    // the tools that write from a checkpoint: transfer's features file, generate's stdout
    test_system("cd %s && %s " TINY " --steps 3 --out fzok > fzok.out 2>&1", dir, trainer);
    rc = test_system("cd %s && (ulimit -f 1; %s/transfer featurize -m fzok/latest.ckpt -o fz.feat --docs 400 "
                     "builtin:train > tz.out 2>&1)", dir, test_bin_dir());
    CHECK(rc == 2 && says("tz.out", "fz.feat.*File too large") && test_system("ls %s | grep -q '^fz[.]feat'", dir) != 0,
          "transfer featurize under ulimit -f: exit %d (153: SIGXFSZ), the features file named, no temporary left",
          rc);
    rc = test_system("cd %s && (ulimit -f 1; %s/generate fzok/latest.ckpt --length 100000 > gz.txt 2> gz.out)", dir,
                     test_bin_dir());
    CHECK(rc == 2 && says("gz.out", "stdout.*File too large"),
          "generate under ulimit -f: exit %d (153: SIGXFSZ), stdout named", rc);
}

// 4. Out of memory under a memory limit (ulimit -v) is one line and exit 2, as a full disk is; so are
// threads that cannot start.
static void test_memory_limit(void) {
    int rc = test_system("cd %s && (" MEMORY_LIMIT "%s --hidden 4096 --steps 1 --threads 1 --out big > big.out "
                         "2>&1)", dir, trainer);
    // (one line of ours; ASan's allocator warns of the failure too in a SAN=1 build)
    CHECK(rc == 2 && says("big.out", "^error: out of memory allocating") &&
              test_system("grep -v AddressSanitizer %s/big.out | wc -l | grep -qx 1", dir) == 0,
          "--hidden 4096 under a memory limit (%s): exit %d (was 1), one line", MEMORY_LIMIT, rc);
    // threads whose stacks do not fit the limit: libgomp's line, exit 2, no run directory
    rc = test_system("cd %s && (" STACK_LIMIT "%s " TINY " --threads 2 --steps 1 --out ts "
                     "> ts.out 2>&1)", dir, trainer);
    CHECK(rc == 2 && says("ts.out", "Thread creation failed") && size_of("ts") < 0,
          "OpenMP threads that cannot start (%s): exit %d (was 1), libgomp says why, no run directory", STACK_LIMIT,
          rc);
}

// 5. Messages: a full stdout said as what it is, a diverged loss shown without "nan", and a
// directory a diverged new run leaves says the command that goes on.
static void test_messages(void) {
    int rc = test_system("cd %s && %s " TINY " --steps 3 --out fu > /dev/full 2> fu.err", dir, trainer);
    CHECK(rc == 0 && says("fu.err", "stdout cannot be written (No space left on device)") &&
              !says("fu.err", "its reader exited") && size_of("fu/latest.ckpt") > 0,
          "stdout on /dev/full: said as a full device, not a reader that exited (exit %d)", rc);
    rc = test_system("cd %s && %s " TINY " --steps 5 --lr 1e300 --out dv > dv.out 2>&1", dir, trainer);
    CHECK(rc == 2 && says("dv.out", "^error: step [0-9]*: the training loss is NaN (the weights hold inf or NaN)") &&
              !says("dv.out", "error: .*nan") && says("dv.out", "dv keeps this run.s log, which a new run there "
                                                                "replaces with --overwrite"),
          "--lr 1e300: the diverged loss said in words, and what a new run there needs (exit %d)", rc);
    int r2 = test_system("cd %s && %s " TINY " --steps 5 --out dv > dv2.out 2>&1", dir, trainer);
    int r3 = test_system("cd %s && %s " TINY " --steps 5 --out dv --overwrite > dv3.out 2>&1", dir, trainer);
    CHECK(r2 == 2 && says("dv2.out", "holds the log of a run that wrote no checkpoint (dv/train.log): there is nothing "
                                     "to resume; add --overwrite") && r3 == 0 && size_of("dv/latest.ckpt") > 0,
          "after it, a plain run there names --overwrite (exit %d), which goes on (exit %d)", r2, r3);
}

int main(void) {
    snprintf(trainer, sizeof trainer, "%s/train", test_bin_dir());  // absolute: the runs cd into dir
    snprintf(prepare, sizeof prepare, "%s/prepare", test_bin_dir());
    if (access(trainer, X_OK) != 0 || access(prepare, X_OK) != 0) {
        printf("FAIL  %s or %s not built\n", trainer, prepare);
        return 1;
    }
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_directory_taken();
    test_validation_cut();
    test_file_size_limit();
    test_memory_limit();
    test_messages();
    if (!getenv("KEEP")) test_system("rm -rf %s", dir);  // KEEP=1: leave the files to look at
    return test_summary("test_train_stops");
}
