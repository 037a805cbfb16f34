// The CPU trainer's guards, run as a user runs it (build/train next to this test): a
// diverged model is never saved over a good checkpoint, outputs never alias inputs, a
// resume continues its own run (the checkpoint's run record), MPI ranks agree on every
// flag, no list of inputs is cut short, and errors name the flag that is at fault.
#include "mlstm.h"
#include "data.h"
#include "test/test.h"

static char dir[] = "/tmp/mlstm_guards_XXXXXX";
static char trainer[4200];
// a tiny model on a small built-in corpus, one thread (as test_train's TINY)
#define TINY_MODEL "--hidden 32 --embed 16 --batch 4 "
#define TINY_REST "--seq-len 16 --corpus-bytes 60000 --val-every 0 --val-steps 2 --sample-len 0 --print-every 1 " \
                  "--threads 1 --lr-schedule legw --lr 3e-3 --base-batch 4 --warmup-steps 3"
#define TINY TINY_MODEL TINY_REST

// Runs the trainer with `args` (a shell fragment), output into dir/<out>; returns its exit status.
static int train(const char *out, const char *fmt, ...) {
    char args[6000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return test_system("cd %s && timeout 120 %s %s > %s 2>&1", dir, trainer, args, out);
}
static int says(const char *out, const char *pattern) {
    return test_system("grep -q -- '%s' %s/%s", pattern, dir, out) == 0;
}
static long size_of(const char *name) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return file_size(p);
}
static int same_bytes(const char *a, const char *b) {
    char p[600], q[600];
    snprintf(p, sizeof p, "%s/%s", dir, a);
    snprintf(q, sizeof q, "%s/%s", dir, b);
    return file_size(p) > 0 && files_equal(p, q);
}

// 1. A diverged model never replaces a checkpoint, and a diverging run says so and exits 2.
static void test_divergence(void) {
    int r0 = train("g.out", TINY " --steps 20 --ckpt g.ckpt --log g.log");
    test_system("cp %s/g.ckpt %s/g.good", dir, dir);
    CHECK(r0 == 0, "divergence: a good run of 20 steps (exit %d)", r0);
    const char *mode[2] = {"", "--fp16"};
    for (int k = 0; k < 2; k++) {
        // a new run over it: the first update sends the weights to ~1e30, and a checkpoint is due after it
        int rc = train("d.out", TINY " %s --lr 1e30 --clip 0 --steps 50 --ckpt-every 1 --overwrite --ckpt g.ckpt "
                       "--log d.log", mode[k]);
        CHECK(rc == 2 && says("d.out", "the model has diverged") && same_bytes("g.ckpt", "g.good"),
              "divergence%s: weights blown up by one update are not saved over the good checkpoint (exit %d)",
              mode[k][0] ? " (FP16)" : "", rc);
    }
    // a learning rate that trains to thousands of bits per character ends with an error, not exit 0
    int rc = train("e.out", TINY " --lr 1e3 --clip 0 --steps 60 --ckpt e.ckpt --log e.log");
    CHECK(rc == 2 && says("e.out", "the model has diverged") && size_of("e.ckpt") < 0,
          "divergence: --lr 1e3 stops with exit %d and no checkpoint (was exit 0 at bpc ~9000)", rc);
    // no checkpoint while steps are skipped: the one due at step 6 (skipped) waits for step 7
    rc = train("s.out", TINY " --fp16 --steps 8 --ckpt-every 1 --inject-overflow 5 --ckpt s.ckpt --log s.log");
    CHECK(rc == 0 && says("s.out", "step      5 | checkpoint") && !says("s.out", "step      6 | checkpoint") &&
              says("s.out", "step      7 | checkpoint"),
          "divergence: no checkpoint after the skipped step 6, the next at step 7 (exit %d)", rc);
}

// 2. Every pair of a run's files is checked for being one file.
static void test_aliases(void) {
    int r0 = train("a.out", TINY " --steps 4 --ckpt m.ckpt --log m.log");
    test_system("cp %s/m.ckpt %s/m.good && ln -s m.ckpt %s/link.ckpt && ln %s/m.ckpt %s/hard.ckpt && "
                "cp %s/m.ckpt %s/m.ckpt.tmp.77", dir, dir, dir, dir, dir, dir, dir);
    CHECK(r0 == 0, "aliases: a first run (exit %d)", r0);
    const char *cases[][3] = {
        {"--resume m.ckpt --steps 8 --ckpt m2.ckpt --log m.ckpt", "--log m.ckpt and --resume m.ckpt are the same file",
         "--log names the resumed checkpoint (was: log lines appended to it)"},
        {"--resume m.ckpt --steps 8 --ckpt m2.ckpt --log link.ckpt", "are the same file", "--log a symlink to --resume"},
        {"--resume m.ckpt --steps 8 --ckpt m2.ckpt --log hard.ckpt", "are the same file", "--log a hard link to --resume"},
        {TINY " --steps 4 --overwrite --ckpt x.ckpt --log x.ckpt", "--ckpt x.ckpt and --log x.ckpt are the same file",
         "--log = --ckpt"},
        {TINY " --steps 4 --overwrite --ckpt y.ckpt --log y.ckpt.lock", "are the same file", "--log = the lock"},
        {TINY " --steps 4 --overwrite --init-from m.ckpt --ckpt m.ckpt --log i.log", "are the same file",
         "--ckpt = --init-from (the weights it starts from)"},
        {TINY " --steps 4 --overwrite --ckpt m.ckpt --log m.ckpt.tmp.77", "a temporary file of --ckpt m.ckpt",
         "--log with the name of a checkpoint temporary"},
        {TINY " --steps 4 --overwrite --train tr_000.bin --val va_000.bin --ckpt tr_000.bin --log t.log",
         "are the same file", "--ckpt = a --train shard"},
        {TINY " --steps 4 --overwrite --train tr_000.bin --val va_000.bin --ckpt z.ckpt --log va_000.bin",
         "are the same file", "--log = a --val shard"},
    };
    uint8_t text[8192];
    for (int i = 0; i < (int)sizeof text; i++) text[i] = (uint8_t)('a' + i % 26);
    char p[600];
    snprintf(p, sizeof p, "%s/tr_000.bin", dir);
    shard_write(p, text, sizeof text, 0);
    snprintf(p, sizeof p, "%s/va_000.bin", dir);
    shard_write(p, text, sizeof text, 0);
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        int rc = train("al.out", "%s", cases[k][0]);
        CHECK(rc == 2 && says("al.out", cases[k][1]) && same_bytes("m.ckpt", "m.good") && size_of("va_000.bin") > 0,
              "aliases: %s: exit %d, the file untouched", cases[k][2], rc);
    }
    CHECK(size_of("x.ckpt") < 0 && size_of("m2.ckpt") < 0, "aliases: the refused runs wrote no checkpoint");
    int rc = train("ok.out", "--resume m.ckpt --steps 6 --ckpt m.ckpt --log m.log");
    CHECK(rc == 0, "aliases: --resume and --ckpt the same file is the way to continue a run (exit %d)", rc);
}

// 4. The checkpoint's run record: a resume continues on the run's data, T and schedule.
static void test_resume_record(void) {
    uint8_t text[40000];
    uint64_t rng = 7;
    for (int i = 0; i < (int)sizeof text; i++) text[i] = (uint8_t)("abcdefgh \n"[rng_next(&rng) % 10]);
    char p[600];
    test_system("mkdir -p %s/data", dir);
    snprintf(p, sizeof p, "%s/data/train_000.bin", dir);
    shard_write(p, text, sizeof text, SHARD_FRAMED);
    snprintf(p, sizeof p, "%s/data/val_000.bin", dir);
    shard_write(p, text, 8000, SHARD_FRAMED);
    const char *run = "--train data --seq-len 32 --lr-schedule puri --lr 1e-3 --decay-steps 40 --clip 0.5 --seed 3 "
                      "--val-every 0 --sample-len 0 --threads 1";
    int r1 = train("r1.out", TINY_MODEL "%s --steps 40 --ckpt j40.ckpt --log j40.log", run);
    int r2 = train("r2.out", TINY_MODEL "%s --steps 20 --ckpt j.ckpt --log j.log", run);
    // doc/training.md's resume: no flag but the checkpoint and the length
    int r3 = train("r3.out", "--resume j.ckpt --steps 40 --log j.log --sample-len 0");  // (a sample draws from the RNG)
    CHECK(r1 == 0 && r2 == 0 && r3 == 0 && says("r3.out", "rows/rank x 1 ranks = 4, T = 32") &&
              says("r3.out", "train data  *| data,") && same_bytes("j.ckpt", "j40.ckpt"),
          "resume record: --resume j.ckpt --steps 40 continues on --train data at T=32 with puri, the checkpoint "
          "equal to 40 steps straight (exits %d %d %d)", r1, r2, r3);
    const char *clash[][2] = {{"--seq-len 64", "--seq-len 64 disagrees with checkpoint j.ckpt, whose run has --seq-len 32"},
                              {"--lr-schedule legw", "whose run has --lr-schedule puri"},
                              {"--lr 2e-3", "--lr 0.002 disagrees with checkpoint j.ckpt, whose run has --lr 0.001"},
                              {"--clip 1", "whose run has --clip 0.5"},
                              {"--fp16", "--fp16 on disagrees"},
                              {"--seed 1", "whose run has --seed 3"},
                              {"--corpus-bytes 60000", "whose run has --corpus-bytes 4000000"},
                              {"--train data2", "--train data2 disagrees"}};
    for (int k = 0; k < (int)(sizeof clash / sizeof clash[0]); k++) {
        int rc = train("rc.out", "--resume j.ckpt --steps 60 %s --ckpt jc.ckpt --log jc.log", clash[k][0]);
        CHECK(rc == 2 && says("rc.out", clash[k][1]), "resume record: %s on a resume is refused naming both values "
              "(exit %d)", clash[k][0], rc);
    }
    int rc = train("ra.out", "--resume j.ckpt --steps 44 --seq-len 32 --lr 1e-3 --threads 2 --print-every 3 "
                   "--ckpt ja.ckpt --log ja.log");
    CHECK(rc == 0, "resume record: agreeing run flags and new invocation flags are accepted (exit %d)", rc);
    rc = test_system("%s --help | grep -A8 'A checkpoint records its run' | grep -q -- '--threads'", trainer);
    CHECK(rc == 0, "resume record: --help lists the flags a resume may give anew");
    // a checkpoint without a record (written from Python, or format version 1): said, not silent
    Mlstm m;
    TrainState st;
    MlstmConfig cfg = {256, 16, 32, 1};
    mlstm_build(&m, cfg, 1, 1);
    real h[4 * 32], c[4 * 32];
    snprintf(p, sizeof p, "%s/j.ckpt", dir);
    checkpoint_load(p, &m, &st, h, c, 4);
    snprintf(p, sizeof p, "%s/norec.ckpt", dir);
    checkpoint_save(p, &m, &st, h, c);
    mlstm_free(&m);
    rc = train("rn.out", TINY_REST " --steps 50 --resume norec.ckpt --log rn.log");
    CHECK(rc == 0 && says("rn.out", "has no run record"), "resume record: a checkpoint without one says so (exit %d)",
          rc);
}

// 3. MPI ranks started with different flags stop before any work, naming the flag.
static void test_ranks_agree(void) {
    const char *mpirun = test_mpirun("ranks");
    if (!mpirun) return;
    const char *cases[][3] = {{"--hidden 16", "--hidden 32", "rank 1 has --hidden 32, rank 0 --hidden 16"},
                              {"--steps 20", "--steps 30", "rank 1 has --steps 30, rank 0 --steps 20"},
                              {"--clip 1", "--clip 0.5", "rank 1 has --clip 0.5, rank 0 --clip 1"},
                              {"--fp16", "", "rank 1 has --fp16 (not set), rank 0 --fp16 on"}};
    for (int k = 0; k < 4; k++) {
        int rc = test_system("cd %s && %s -np 1 %s " TINY_REST " --batch 4 --steps 25 %s --ckpt mp.ckpt --log mp.log : "
                             "-np 1 %s " TINY_REST " --batch 4 --steps 25 %s --ckpt mp.ckpt --log mp.log > mp.out 2>&1",
                             dir, mpirun, trainer, cases[k][0], trainer, cases[k][1]);
        CHECK(rc != 0 && rc != 124 && says("mp.out", cases[k][2]) && size_of("mp.ckpt") < 0,
              "ranks: %s against %s: exit %d before any step, naming it", cases[k][0], cases[k][1], rc);
    }
}

// 5, 8, 9, 11: input lists are never cut, errors name the flag at fault, a closed stdout stays closed.
static void test_inputs_and_errors(void) {
    // 5000 shard paths (the old table held 4096 and dropped the rest)
    int rc = test_system("cd %s && timeout 120 %s " TINY " --steps 1 --train $(yes tr_000.bin | head -n 5000 | paste -sd,) "
                         "--val va_000.bin --ckpt many.ckpt --log many.log > many.out 2>&1", dir, trainer);
    CHECK(rc == 0 && says("many.out", "train data  *| tr_000.bin,.*, 40960000 bytes in 5000 shards"),
          "inputs: --train with 5000 paths reads all 5000 (exit %d)", rc);
    rc = train("sd.out", "-hidden 16");
    CHECK(rc == 2 && says("sd.out", "unknown flag -hidden: flags start with two dashes (--hidden)"),
          "errors: a single-dash flag is named, with the right spelling (exit %d)", rc);
    rc = train("ab.out", "--hid 16");
    CHECK(rc == 2 && says("ab.out", "unknown flag --hid "), "errors: no abbreviated flag names (exit %d)", rc);
    rc = train("cb.out", TINY_MODEL "--corpus-bytes 1099511627776 --steps 1 --ckpt cb.ckpt --log cb.log");
    CHECK(rc == 2 && says("cb.out", "--corpus-bytes 1099511627776: the built-in corpus is made in memory") &&
              !says("cb.out", "--hidden"),
          "errors: a corpus larger than memory names --corpus-bytes, exit %d (was: out of memory, --hidden, exit 1)", rc);
    rc = test_system("cd %s && %s " TINY " --steps 2 --ckpt so.ckpt --log so.log >&- 2> so.err", dir, trainer);
    CHECK(rc == 0 && size_of("so.ckpt.lock") == 0 && size_of("so.ckpt") > 0,
          "stdout closed: the console output does not land in the lock (%ld bytes; exit %d)", size_of("so.ckpt.lock"), rc);
}

int main(void) {
    snprintf(trainer, sizeof trainer, "%s/train", test_bin_dir());  // absolute: the runs cd into dir
    if (access(trainer, X_OK) != 0) { printf("FAIL  %s not built\n", trainer); return 1; }
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_divergence();
    test_aliases();
    test_resume_record();
    test_ranks_agree();
    test_inputs_and_errors();
    if (!getenv("KEEP")) test_system("rm -rf %s", dir);  // KEEP=1: leave the files to look at
    return test_summary("test_train_guards");
}
