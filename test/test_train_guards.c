// The CPU trainer's guards, run as a user runs it (build/train next to this test): a run
// is one directory whose parts are tied by content, not by names. A worse model never
// replaces the best one, a log is only written by its own run, a resume continues on the
// run's own data (known by its checksums, wherever it now is), MPI ranks agree on every
// flag and every byte they read, outputs never alias inputs and keep what they replace,
// signals and a closed stdout stop a run with its checkpoint, and errors name the flag.
#include "mlstm.h"
#include "harness/checkpoint.h"  // defines: the checkpoint file (CkptHeader, checkpoint_open/read/load, checkpoint_save_run)
#include "data.h"
#include "test/test.h"

static char dir[] = "/tmp/mlstm_guards_XXXXXX";
static char trainer[4200];
// a tiny model on a small built-in corpus, one thread (as test_train's TINY)
#define TINY_MODEL "--hidden 32 --embed 16 --batch 4 "
#define TINY_REST "--seq-len 16 --corpus-bytes 60000 --val-every 0 --val-steps 2 --sample-len 0 --print-every 1 " \
                  "--threads 1 --lr-schedule legw --lr 3e-3 --base-batch 4 --warmup-steps 3"
#define TINY TINY_MODEL TINY_REST
#define TINY_REST_2T "--seq-len 16 --corpus-bytes 60000 --val-every 0 --sample-len 0 --threads 2"

// Runs the trainer with `args` (a shell fragment) in dir, output into dir/<out>; returns its exit status.
static int train(const char *out, const char *fmt, ...) {
    char args[6000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return test_system("cd %s && timeout 120 %s %s > %s 2>&1", dir, trainer, args, out);
}
static int says(const char *out, const char *pattern) { return test_dir_says(dir, out, pattern); }
static long size_of(const char *name) { return test_dir_size(dir, name); }
static int same_bytes(const char *a, const char *b) { return test_dir_same_bytes(dir, a, b); }
static CkptHeader header_of(const char *name) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CkptHeader hd;
    memset(&hd, 0, sizeof hd);
    if (file_size(p) > 0) checkpoint_header(p, &hd);
    return hd;
}
// A checkpoint's version and run identity set, the checksum computed again: as an earlier version wrote it.
static void restamp(const char *name, uint32_t version, uint64_t run_id) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    long n = file_size(p);
    FILE *f = fopen(p, "rb");
    uint8_t *buf = n >= CKPT_HEADER_BYTES ? (uint8_t *)mallocCheck((size_t)n) : NULL;
    int ok = f && buf && fread(buf, 1, (size_t)n, f) == (size_t)n;
    if (f) fclose(f);
    if (ok) {
        put32(buf + CKPT_AT_VERSION, version);
        put64(buf + CKPT_AT_RUN_ID, run_id);
        put64(buf + CKPT_AT_CHECKSUM, 0);
        put64(buf + CKPT_AT_CHECKSUM, checksum_final(checksum_update(CHECKSUM_INIT, buf, (size_t)n)));
        test_write_file(p, buf, (size_t)n);
    }
    CHECK(ok, "restamped %s as version %u, run %016llx", name, version, (unsigned long long)run_id);
    free(buf);
}

// Two checkpoints hold the same training state: header and payload (weights, Adam's moments, the
// carried state) equal byte for byte, but for the checksum and the run record's length: the records
// after the payload may name the data's place differently.
static int same_state(const char *a, const char *b) {
    CkptHeader ha = header_of(a);
    size_t n = CKPT_HEADER_BYTES + (size_t)ha.payload_bytes;
    uint8_t *x = (uint8_t *)mallocCheck(n), *y = (uint8_t *)mallocCheck(n);
    char p[600], q[600];
    snprintf(p, sizeof p, "%s/%s", dir, a);
    snprintf(q, sizeof q, "%s/%s", dir, b);
    FILE *f = fopen(p, "rb"), *g = fopen(q, "rb");
    int same = f && g && fread(x, 1, n, f) == n && fread(y, 1, n, g) == n;
    if (same) memset(x + CKPT_AT_CHECKSUM, 0, 16), memset(y + CKPT_AT_CHECKSUM, 0, 16);  // and CKPT_AT_RUN_BYTES
    same = same && ha.payload_bytes > 0 && !memcmp(x, y, n);
    if (f) fclose(f);
    if (g) fclose(g);
    free(x);
    free(y);
    return same;
}
// Writes a shard of n pseudo-random letters (seed) at dir/<name>.
static void make_shard(const char *name, size_t n, uint64_t seed) {
    uint8_t *text = (uint8_t *)mallocCheck(n);
    for (size_t i = 0; i < n; i++) text[i] = (uint8_t)("abcdefgh \n"[rng_next(&seed) % 10]);
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    shard_write(p, text, n, SHARD_FRAMED);
    free(text);
}

// 1. A diverged model is never saved, and a worse model never replaces the best one.
static void test_best(void) {
    // a run that validates at 3.38 at step 20, then a resume at a rate that climbs to divergence
    const char *run = "--hidden 64 --batch 16 --seq-len 32 --corpus-bytes 400000 --val-every 10 --ckpt-every 10 "
                      "--lr-schedule constant --lr 3 --warmup-steps 120 --threads 1 --sample-len 0";
    int r1 = train("b1.out", "%s --steps 20 --out e", run);
    test_system("cp %s/e/best.ckpt %s/e.best", dir, dir);
    CkptHeader b = header_of("e/best.ckpt");
    int r2 = train("b2.out", "--resume e --steps 60 --val-every 10 --ckpt-every 10 --threads 1 --sample-len 0");
    CkptHeader l = header_of("e/latest.ckpt");
    CHECK(r1 == 0 && r2 == 2 && says("b2.out", "the model has diverged") && same_bytes("e/best.ckpt", "e.best") &&
              b.st.data_step == 20 && b.st.best_by == CKPT_BEST_BY_VAL && l.st.data_step == 40,
          "best: worse validations (steps 30, 40) and a divergence leave best.ckpt at step %llu (%.3f bpc), latest at "
          "step %llu (exits %d %d)", (unsigned long long)b.st.data_step, b.st.score / M_LN2,
          (unsigned long long)l.st.data_step, r1, r2);
    CHECK(says("b2.out", "e/best.ckpt keeps step 20 (validation loss [0-9.]* bits per character)"), "best: the divergence message names the "
          "best checkpoint that stays");
    // with no validation, best is the lowest training-loss moving mean among the checkpoints:
    // recomputed here from the log's losses (6 decimals: the means agree to ~1e-6). A checkpoint
    // every 5 steps: the mean turns up a few steps before the divergence (at step 45), and which
    // checkpoint catches its lowest point should not hang on the last bits of the arithmetic
    int r3 = train("b3.out", "%s --val-every 0 --ckpt-every 5 --steps 60 --out nv", run);
    char p[600];
    snprintf(p, sizeof p, "%s/nv/train.log", dir);
    FILE *f = fopen(p, "r");
    double ema = 0, best = INFINITY, loss, x;
    long step, best_step = -1;
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "train %ld %lf %lf %lf", &step, &x, &x, &loss) == 4) {
            ema = 0.99 * ema + 0.01 * loss;
            double mean = ema / (1 - pow(0.99, (double)step));
            if (step % 5 == 0 && mean < best) best = mean, best_step = step;
        }
    if (f) fclose(f);
    CkptHeader nb = header_of("nv/best.ckpt"), nl = header_of("nv/latest.ckpt");
    CHECK(r3 == 2 && nb.st.best_by == CKPT_BEST_BY_TRAIN && (long)nb.st.data_step == best_step && best_step < 45 &&
              fabs(nb.st.score - best) < 1e-5 * best && nl.st.data_step > nb.st.data_step,
          "best without validation: best.ckpt is the checkpoint of the lowest training-loss moving mean, step %llu "
          "(%.4f nats; the log says step %ld, %.4f), latest at step %llu", (unsigned long long)nb.st.data_step,
          nb.st.score, best_step, best, (unsigned long long)nl.st.data_step);
    // an overwriting run that diverges at once leaves the earlier run's checkpoints as they were
    int r4 = train("g.out", TINY " --steps 20 --out g");
    test_system("cd %s && cp g/latest.ckpt g.latest && cp g/best.ckpt g.best && cp g/train.log g.log", dir);
    const char *mode[2] = {"", "--fp16"};
    for (int k = 0; k < 2; k++) {
        // the first update sends the weights to ~1e30, and a checkpoint is due after it
        int rc = train("d.out", TINY " %s --lr 1e30 --clip 0 --steps 50 --ckpt-every 1 --overwrite --out g", mode[k]);
        CHECK(r4 == 0 && rc == 2 && says("d.out", "the model has diverged") && same_bytes("g/latest.ckpt", "g.latest") &&
                  same_bytes("g/best.ckpt", "g.best") && same_bytes("g/train.log", "g.log") &&
                  test_system("ls %s/g | grep -q tmp", dir) != 0,
              "divergence%s: weights blown up by one update are not saved over the earlier run, whose log stays "
              "and no file of the new run is left (exit %d)", mode[k][0] ? " (FP16)" : "", rc);
    }
    int r5 = train("g2.out", "--resume g --steps 24");
    CHECK(r5 == 0 && test_system("[ $(grep -c '^train' %s/g/train.log) = 24 ]", dir) == 0,
          "divergence: the earlier run continues after the failed --overwrite, in its own log (exit %d)", r5);
    // best.ckpt's score and the ones it is compared with are over the same validation batches and rows:
    // a resume takes the run's --val-steps and --val-batch, and refuses others
    int v1 = train("vs1.out", TINY " --val-every 2 --steps 4 --out vs");
    int v2 = train("vs2.out", "--resume vs --steps 6 --val-steps 0");
    int v3 = train("vs3.out", "--resume vs --steps 6 --val-batch 8");
    int v4 = train("vs4.out", "--resume vs --steps 6 --val-steps 2");
    int v5 = train("vs5.out", TINY " --steps 4 --out vt");  // judged by the training loss: validation is free
    int v6 = train("vs6.out", "--resume vt --steps 6 --val-steps 0 --val-batch 8");
    CHECK(v1 == 0 && v2 == 2 && says("vs2.out", "--val-steps 0 disagrees with checkpoint vs/latest.ckpt, whose run has "
                                                "--val-steps 2") &&
              v3 == 2 && says("vs3.out", "--val-batch 8 disagrees") && v4 == 0 && v5 == 0 && v6 == 0,
          "best: a resume that would score on other validation batches or rows is refused, unless the run is judged "
          "by its training loss (exits %d %d %d %d %d %d)", v1, v2, v3, v4, v5, v6);
    // a learning rate that trains to thousands of bits per character ends with an error, not exit 0
    int rc = train("e.out", TINY " --lr 1e3 --clip 0 --steps 60 --out lr");
    CHECK(rc == 2 && says("e.out", "the model has diverged") && size_of("lr/latest.ckpt") < 0,
          "divergence: --lr 1e3 stops with exit %d and no checkpoint", rc);
    // no checkpoint while steps are skipped: the one due at step 6 (skipped) waits for step 7
    rc = train("s.out", TINY " --fp16 --steps 8 --ckpt-every 1 --inject-overflow 6 --out s");
    CHECK(rc == 0 && says("s.out", "step      5 | checkpoint") && !says("s.out", "step      6 | checkpoint") &&
              says("s.out", "step      7 | checkpoint"),
          "divergence: no checkpoint after the skipped step 6, the next at step 7 (exit %d)", rc);
}

// 2. A log belongs to its run: its first line names the run, and nothing else is ever appended to or cut.
static void test_log_owner(void) {
    int r1 = train("l1.out", TINY " --steps 8 --ckpt-every 4 --out la");
    int r2 = train("l2.out", TINY " --steps 8 --seed 2 --out lb");
    test_system("cp %s/lb/train.log %s/lb.log && cp %s/la/train.log %s/la.log && cp %s/lb/train.log %s/la/train.log",
                dir, dir, dir, dir, dir, dir);
    int rc = train("l3.out", "--resume la --steps 12");
    CHECK(r1 == 0 && r2 == 0 && rc == 2 && says("l3.out", "la/train.log belongs to run") &&
              same_bytes("la/train.log", "lb.log"),
          "log: another run's log in the directory is refused on resume, and left as it was (exit %d)", rc);
    // a file that is not a training log (here a checkpoint) is never appended to, cut or replaced
    test_system("cp %s/la/latest.ckpt %s/la/train.log && cp %s/la/latest.ckpt %s/la.ckpt", dir, dir, dir, dir);
    rc = train("l4.out", "--resume la --steps 12");
    int r5 = train("l5.out", TINY " --steps 4 --overwrite --out la");
    CHECK(rc == 2 && says("l4.out", "la/train.log is not a training log") && r5 == 2 &&
              says("l5.out", "la/train.log is not a training log, so --overwrite does not replace it") &&
              same_bytes("la/train.log", "la.ckpt"),
          "log: a checkpoint named train.log is neither appended to (resume, exit %d) nor replaced (--overwrite, "
          "exit %d)", rc, r5);
    // a directory that holds only a log (a run stopped before its first checkpoint) has nothing to resume;
    // one whose latest.ckpt names no run (an older file) cannot be continued there: neither is told to resume
    test_system("mkdir -p %s/lo %s/old && cp %s/la.log %s/lo/train.log && cp %s/la.log %s/old/train.log", dir, dir, dir,
                dir, dir, dir);
    int r6 = train("l7.out", TINY " --steps 4 --out lo");
    char src[600], dst[600];
    snprintf(src, sizeof src, "%s/la/latest.ckpt", dir);
    snprintf(dst, sizeof dst, "%s/old/latest.ckpt", dir);
    CkptHeader hd;
    FILE *f = checkpoint_open(src, &hd);
    Mlstm m;
    mlstm_build(&m, hd.cfg, 1, 1);
    size_t state = sizeof(real) * hd.st.G * hd.cfg.H;
    real *h = (real *)mallocCheck(state), *c = (real *)mallocCheck(state);
    TrainState st;
    checkpoint_read(f, src, &hd, &m, &st, h, c, hd.st.G);
    uint8_t *record = checkpoint_read_run(f, src, &hd);
    fclose(f);
    st.run_id = 0;
    checkpoint_save_run(dst, &m, &st, h, c, record, hd.run_bytes, CKPT_VERSION);
    st.run_id = hd.st.run_id;  // a run's identity, but no record: the command line defines the run
    snprintf(dst, sizeof dst, "%s/norec_in", dir);
    mkdir(dst, 0777);
    snprintf(dst, sizeof dst, "%s/norec_in/latest.ckpt", dir);
    checkpoint_save(dst, &m, &st, h, c);
    st.run_id = 0;
    static const char beyond[] = "seq-len\0" "100000000";  // a value this build's limits refuse
    snprintf(dst, sizeof dst, "%s/beyond.ckpt", dir);
    checkpoint_save_run(dst, &m, &st, h, c, (const uint8_t *)beyond, sizeof beyond, CKPT_VERSION);
    static const char switch_off[] = "no-reset-docs\0" "off";  // a switch is recorded as "on" or not at all
    snprintf(dst, sizeof dst, "%s/switch.ckpt", dir);
    checkpoint_save_run(dst, &m, &st, h, c, (const uint8_t *)switch_off, sizeof switch_off, CKPT_VERSION);
    mlstm_free(&m);
    free(h);
    free(c);
    free(record);
    int r7 = train("l8.out", "--resume old --steps 12");
    CHECK(r6 == 2 && says("l7.out", "holds the log of a run that wrote no checkpoint (lo/train.log): there is "
                          "nothing to resume; add --overwrite") &&
              !says("l7.out", "--resume") && r7 == 2 && says("l8.out", "old/latest.ckpt names no run") &&
              !says("l8.out", "continue it with --resume old"),
          "log: a directory with only a log, or whose latest.ckpt names no run, is refused without advice to resume it "
          "(exits %d %d)", r6, r7);
    // a version 3 run (its identity made by an earlier rule, which no reader checks) continues in its directory
    // under that identity, writing version 3; a version 4 checkpoint without a record cannot continue there
    test_system("mkdir %s/v3 && cp %s/la/latest.ckpt %s/la/best.ckpt %s/v3/ && sed '1s/run [0-9a-f]*$/run "
                "0123456789abcdef/' %s/la.log > %s/v3/train.log && cp %s/la.log %s/norec_in/train.log", dir, dir, dir,
                dir, dir, dir, dir, dir);
    restamp("v3/latest.ckpt", 3, 0x0123456789abcdefULL);
    restamp("v3/best.ckpt", 3, 0x0123456789abcdefULL);
    int r9 = train("l12.out", "--resume v3 --steps 12");
    CkptHeader v3 = header_of("v3/latest.ckpt"), v3best = header_of("v3/best.ckpt");
    int same_log = test_system("head -n 1 %s/v3/train.log | grep -q 'run 0123456789abcdef$'", dir) == 0;
    CHECK(r9 == 0 && v3.st.data_step == 12 && v3.version == 3 && v3.st.run_id == 0x0123456789abcdefULL &&
              v3best.st.run_id == v3.st.run_id && same_log,
          "log: a version 3 run continues in its directory under its identity, written as version 3 (exit %d, "
          "version %u)", r9, v3.version);
    int r10 = train("l13.out", TINY_REST " --seed 1 --resume norec_in --steps 12");
    CHECK(r10 == 2 && says("l13.out", "norec_in/latest.ckpt has no run record, so its run [0-9a-f]* is not the one the "
                                      "command line defines: it cannot be continued in its directory"),
          "log: a version 4 checkpoint without a record is not continued in its directory (exit %d)", r10);
    int r8 = train("l10.out", "--resume beyond.ckpt --steps 12 --out by");
    CHECK(r8 == 2 && says("l10.out", "error: checkpoint .*beyond.ckpt, its run record: --seq-len: must be between"),
          "record: a recorded value this build refuses names the checkpoint, not only the flag (exit %d)", r8);
    r8 = train("l11.out", "--resume switch.ckpt --steps 12 --out sw");
    CHECK(r8 == 2 && says("l11.out", "error: checkpoint .*switch.ckpt, its run record: --no-reset-docs: a switch, "
                                     "recorded as \"on\", got \"off\""),
          "record: a switch recorded with a value other than \"on\" is refused, naming the checkpoint (exit %d)", r8);
    // its own log continues: a resume cuts the lines after the checkpoint (step 8) and appends
    test_system("cp %s/la.log %s/la/train.log && echo 'train 9 cut short' >> %s/la/train.log", dir, dir, dir);
    rc = train("l6.out", "--resume la --steps 12");
    CHECK(rc == 0 && test_system("[ $(grep -c '^train' %s/la/train.log) = 12 ] && ! grep -q 'cut short' %s/la/train.log "
                                 "&& head -n 1 %s/la/train.log | grep -q '^# mlstm.c training log of run '", dir, dir, dir) == 0,
          "log: the run's own log is cut back to the checkpoint and continued, 12 steps once each (exit %d)", rc);
    // a first line cut short (a full disk while it was written) names no run, not a run of its hex digits
    test_system("cp -r %s/la %s/lc && printf '# mlstm.c training log of run 393d' > %s/lc/train.log", dir, dir, dir);
    rc = train("l9.out", "--resume lc --steps 16");
    CHECK(rc == 2 && says("l9.out", "lc/train.log is not a training log") && !says("l9.out", "belongs to run"),
          "log: a log whose first line is cut is not taken for another run's (exit %d)", rc);
}

// 3. Data is known by content: a resume refuses changed bytes at the same path and follows the data
// wherever it is; a checkpoint with no record needs the run's settings given.
static void test_data_identity(void) {
    test_system("mkdir -p %s/data", dir);
    make_shard("data/train_000.bin", 40000, 7);
    make_shard("data/val_000.bin", 8000, 8);
    const char *run = "--train data --seq-len 32 --lr-schedule puri --lr 1e-3 --decay-steps 40 --clip 0.5 --seed 3 "
                      "--val-every 0 --sample-len 0 --threads 1";
    int r1 = train("r1.out", TINY_MODEL "%s --steps 40 --out j40", run);
    int r2 = train("r2.out", TINY_MODEL "%s --steps 20 --out j", run);
    test_system("cp -r %s/j %s/j.copy && cp -r %s/j %s/j.moved && cp -r %s/j %s/j.abs", dir, dir, dir, dir, dir, dir);
    // doc/training.md's resume: no flag but the run and the length
    int r3 = train("r3.out", "--resume j --steps 40 --sample-len 0");  // (a sample draws from the RNG)
    CHECK(r1 == 0 && r2 == 0 && r3 == 0 && says("r3.out", "rows/rank x 1 ranks = 4, T = 32") &&
              same_bytes("j/latest.ckpt", "j40/latest.ckpt"),
          "data: --resume j --steps 40 continues on the run's data at T=32 with puri, the checkpoint equal to 40 "
          "steps straight (exits %d %d %d)", r1, r2, r3);
    // the same bytes named another way: through a symlink, from another directory (the record's absolute path)
    test_system("ln -s data %s/data.link", dir);
    int r4 = train("r4.out", "--resume j.copy --train data.link --steps 40 --sample-len 0");
    int r5 = test_system("cd / && timeout 120 %s --resume %s/j.abs --steps 40 --sample-len 0 > %s/r5.out 2>&1", trainer,
                         dir, dir);
    CHECK(r4 == 0 && r5 == 0 && same_bytes("j.copy/latest.ckpt", "j40/latest.ckpt") &&
              same_bytes("j.abs/latest.ckpt", "j40/latest.ckpt"),
          "data: the same shards through a symlink, and from another directory, resume to the same bytes (exits %d %d)",
          r4, r5);
    // moved: said, and the new place given resumes
    test_system("mv %s/data %s/data.new && rm %s/data.link", dir, dir, dir);
    int r6 = train("r6.out", "--resume j.moved --steps 40 --sample-len 0");
    int r7 = train("r7.out", "--resume j.moved --train data.new --steps 40 --sample-len 0");
    CHECK(r6 == 2 && says("r6.out", "training data (--train .*/data) is not there") && r7 == 0 &&
              same_state("j.moved/latest.ckpt", "j40/latest.ckpt"),
          "data: moved, a resume names the missing data (exit %d) and resumes where --train says it is now (exit %d)",
          r6, r7);
    // renamed: the same bytes under other names continue the run in its directory, its identity (on its log,
    // latest.ckpt and best.ckpt) kept, the record holding the new names; every reader checks that identity
    test_system("cp -r %s/j.moved %s/j.renamed && mkdir %s/renamed && cp %s/data.new/train_000.bin %s/renamed/a.bin && "
                "cp %s/data.new/val_000.bin %s/renamed/v.bin", dir, dir, dir, dir, dir, dir, dir);
    int r9 = train("r9.out", "--resume j.renamed --train renamed/a.bin --val renamed/v.bin --steps 50 --sample-len 0");
    CkptHeader h40 = header_of("j.moved/latest.ckpt"), h50 = header_of("j.renamed/latest.ckpt"),
               best = header_of("j.renamed/best.ckpt");
    int log_named = test_system("head -n 1 %s/j.renamed/train.log | grep -q 'run %016llx$' && grep -aq 'a.bin' "
                                "%s/j.renamed/latest.ckpt", dir, (unsigned long long)h40.st.run_id, dir) == 0;
    CHECK(r9 == 0 && h50.st.data_step == 50 && h50.version == CKPT_VERSION && h50.st.run_id == h40.st.run_id &&
              best.st.run_id == h40.st.run_id && log_named,
          "data: renamed shards continue the run in its directory under its identity %016llx, the record naming them "
          "(exit %d)", (unsigned long long)h40.st.run_id, r9);
    // changed bytes at the same path (same size): refused naming the shard, nothing written
    make_shard("data.new/val_000.bin", 8000, 99);
    test_system("cp %s/j.moved/latest.ckpt %s/jm.keep", dir, dir);
    int r8 = train("r8.out", "--resume j.moved --train data.new --steps 60 --sample-len 0");
    CHECK(r8 == 2 && says("r8.out", "is not the data of the run in checkpoint") &&
              says("r8.out", "checkpoint j.moved/latest.ckpt: its shard 0 (val_000.bin) holds") &&
              !says("r8.out", "it has shard") && same_bytes("j.moved/latest.ckpt", "jm.keep"),
          "data: a shard with other bytes at the same path is refused, naming it (exit %d)", r8);
    make_shard("data.new/val_000.bin", 8000, 8);
    const char *clash[][2] = {{"--seq-len 64", "--seq-len 64 disagrees with checkpoint j/latest.ckpt, whose run has "
                                               "--seq-len 32"},
                              {"--lr-schedule legw", "whose run has --lr-schedule puri"},
                              {"--lr 2e-3", "--lr 0.002 disagrees with checkpoint j/latest.ckpt, whose run has --lr 0.001"},
                              {"--clip 1", "whose run has --clip 0.5"},
                              {"--fp16", "--fp16 on disagrees"},
                              {"--seed 1", "whose run has --seed 3"},
                              {"--corpus-bytes 60000", "whose run has --corpus-bytes 4000000"}};
    for (int k = 0; k < (int)(sizeof clash / sizeof clash[0]); k++) {
        int rc = train("rc.out", "--resume j --train data.new --steps 60 %s --out jc", clash[k][0]);
        CHECK(rc == 2 && says("rc.out", clash[k][1]), "data: %s on a resume is refused naming both values (exit %d)",
              clash[k][0], rc);
    }
    int rc = train("ra.out", "--resume j --train data.new --steps 44 --seq-len 32 --lr 1e-3 --threads 2 --print-every 3 "
                   "--out ja");
    CHECK(rc == 0 && size_of("ja/latest.ckpt") > 0 && same_bytes("j/latest.ckpt", "j40/latest.ckpt"),
          "data: agreeing run flags and new invocation flags are accepted; a resume into another --out leaves the "
          "run's own directory as it was (exit %d)", rc);
    rc = test_system("%s --help | grep -A8 'A run is a directory' | grep -q -- '--threads'", trainer);
    CHECK(rc == 0, "data: --help lists the flags a resume may give anew");
    // a checkpoint without a record (written from Python, or format version 1) names the settings it needs
    Mlstm m;
    TrainState st;
    MlstmConfig cfg = {256, 16, 32, 1};
    mlstm_build(&m, cfg, 1, 1);
    real h[4 * 32], c[4 * 32];
    char p[600];
    snprintf(p, sizeof p, "%s/j/latest.ckpt", dir);
    checkpoint_load(p, &m, &st, h, c, 4);
    snprintf(p, sizeof p, "%s/norec.ckpt", dir);
    checkpoint_save(p, &m, &st, h, c);
    mlstm_free(&m);
    test_system("cp %s/norec.ckpt %s/norec.keep", dir, dir);
    rc = train("rn.out", "--steps 50 --resume norec.ckpt --out rn");
    int rc2 = train("rn2.out", "--steps 50 --resume norec.ckpt --train data.new --seq-len 32 --lr-schedule puri "
                    "--lr 1e-3 --decay-steps 40 --clip 0.5 --seed 3 --out rn2 --sample-len 0 --threads 1");
    CHECK(rc == 2 && says("rn.out", "has no run record") && says("rn.out", "give the data (--train, or --corpus-bytes), "
                                                                           "--seq-len, --lr-schedule") &&
              rc2 == 0 && same_bytes("norec.ckpt", "norec.keep") && size_of("rn2/latest.ckpt") > 0,
          "data: a checkpoint with no record needs the data, --seq-len and --lr-schedule (exit %d), then continues "
          "into --out, the file itself untouched (exit %d)", rc, rc2);
}

// 4. Every pair of a run's inputs and outputs is checked for being one file; outputs keep what they replace.
static void test_outputs_apart(void) {
    int r0 = train("a.out", TINY " --steps 4 --out m");
    test_system("cp %s/m/latest.ckpt %s/m.good && cp %s/m/best.ckpt %s/m.best && ln -s m/latest.ckpt %s/link.ckpt",
                dir, dir, dir, dir, dir);
    CHECK(r0 == 0, "aliases: a first run (exit %d)", r0);
    make_shard("tr_000.bin", 8192, 3);
    make_shard("va_000.bin", 8192, 4);
    test_system("mkdir -p %s/sh && ln %s/tr_000.bin %s/sh/best.ckpt", dir, dir, dir);
    const char *cases[][3] = {
        {TINY " --steps 4 --overwrite --init-from link.ckpt --out m", "is m/latest.ckpt",
         "--init-from (a symlink) = --out's latest.ckpt"},
        {"--resume m/best.ckpt --steps 8 --overwrite --out m", "--resume m/best.ckpt is m/best.ckpt",
         "--resume the best.ckpt of --out, which a new run there would replace"},
        {TINY " --steps 4 --overwrite --init-from m --out m", "--init-from m/best.ckpt is m/best.ckpt",
         "--init-from the run directory --out itself (its best.ckpt, which the new run would replace)"},
        {TINY " --steps 4 --overwrite --train tr_000.bin --val va_000.bin --out sh",
         "sh/best.ckpt is not a checkpoint, so --overwrite does not replace it", "a --train shard hard-linked as best.ckpt"},
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        int rc = train("al.out", "%s", cases[k][0]);
        CHECK(rc == 2 && says("al.out", cases[k][1]) && same_bytes("m/latest.ckpt", "m.good") &&
                  same_bytes("m/best.ckpt", "m.best") &&
                  same_bytes("sh/best.ckpt", "tr_000.bin"),
              "aliases: %s: exit %d, the file untouched", cases[k][2], rc);
    }
    // a checkpoint that is a symlink is written through it; a replaced file keeps its mode
    test_system("mkdir -p %s/store && cp -r %s/m %s/ml && mv %s/ml/latest.ckpt %s/store/real.ckpt && "
                "ln -s ../store/real.ckpt %s/ml/latest.ckpt && chmod 600 %s/m/latest.ckpt",
                dir, dir, dir, dir, dir, dir, dir);
    int r1 = train("sl.out", "--resume ml --steps 6");
    int r2 = train("sm.out", "--resume m --steps 6");
    CkptHeader hd = header_of("store/real.ckpt");
    CHECK(r1 == 0 && test_system("[ -L %s/ml/latest.ckpt ]", dir) == 0 && hd.st.data_step == 6,
          "outputs: latest.ckpt a symlink: the file it names is the one replaced, the link stays (exit %d, step %llu)",
          r1, (unsigned long long)hd.st.data_step);
    CHECK(r2 == 0 && test_system("[ \"$(stat -c %%a %s/m/latest.ckpt)\" = 600 ]", dir) == 0,
          "outputs: a replaced checkpoint keeps its mode 0600 (exit %d)", r2);
}

// 5. MPI ranks started with different flags, or reading other bytes or another checkpoint under the
// same names (two hosts with different copies: here two working directories), stop before any work.
static void test_ranks_agree(void) {
    const char *mpirun = test_mpirun("ranks");
    if (!mpirun) return;
    const char *cases[][3] = {{"--hidden 16", "--hidden 32", "rank 1 has --hidden 32, rank 0 --hidden 16"},
                              {"--steps 20", "--steps 30", "rank 1 has --steps 30, rank 0 --steps 20"},
                              {"--clip 1", "--clip 0.5", "rank 1 has --clip 0.5, rank 0 --clip 1"},
                              {"--fp16", "", "rank 1 has --fp16 off, rank 0 --fp16 on"}};
    for (int k = 0; k < 4; k++) {
        int rc = test_system("cd %s && %s -np 1 %s " TINY_REST " --batch 4 --steps 25 %s --out mp : "
                             "-np 1 %s " TINY_REST " --batch 4 --steps 25 %s --out mp > mp.out 2>&1",
                             dir, mpirun, trainer, cases[k][0], trainer, cases[k][1]);
        CHECK(rc != 0 && rc != 124 && says("mp.out", cases[k][2]) && size_of("mp/latest.ckpt") < 0,
              "ranks: %s against %s: exit %d before any step, naming it", cases[k][0], cases[k][1], rc);
    }
    // the same names, other bytes: each rank in its own directory
    test_system("mkdir -p %s/h0/d %s/h1/d", dir, dir);
    make_shard("h0/d/train_000.bin", 20000, 11);
    make_shard("h0/d/val_000.bin", 4000, 12);
    make_shard("h1/d/train_000.bin", 20000, 13);
    make_shard("h1/d/val_000.bin", 4000, 12);
    int rc = test_system("cd %s && %s -np 1 --wdir %s/h0 %s " TINY_MODEL TINY_REST " --train d --steps 5 --out o : "
                         "-np 1 --wdir %s/h1 %s " TINY_MODEL TINY_REST " --train d --steps 5 --out o > hd.out 2>&1",
                         dir, mpirun, dir, trainer, dir, trainer);
    CHECK(rc != 0 && rc != 124 && says("hd.out", "rank 1 reads other train data than rank 0: its shard 0 (train_000.bin)") &&
              size_of("h0/o/latest.ckpt") < 0,
          "ranks: shards of the same size but other bytes are refused before any step, naming the rank and the shard "
          "(exit %d)", rc);
    // the same --resume path, other checkpoints (two steps of one run)
    test_system("cp %s/h0/d/train_000.bin %s/h1/d/", dir, dir);
    int r1 = test_system("cd %s/h0 && %s " TINY " --train d --steps 4 --out r > r.out 2>&1", dir, trainer);
    int r2 = test_system("cd %s/h1 && %s " TINY " --train d --steps 2 --out r > r.out 2>&1", dir, trainer);
    rc = test_system("cd %s && %s -np 1 --wdir %s/h0 %s " TINY_REST " --batch 2 --train d --resume r --steps 8 : "
                     "-np 1 --wdir %s/h1 %s " TINY_REST " --batch 2 --train d --resume r --steps 8 > hr.out 2>&1",
                     dir, mpirun, dir, trainer, dir, trainer);
    CHECK(r1 == 0 && r2 == 0 && rc != 0 && rc != 124 && says("hr.out", "rank 1.s checkpoint (--resume) is not rank 0.s (r/latest.ckpt with checksum"),
          "ranks: other checkpoints at the same --resume path are refused before any step, naming the rank (exit %d)", rc);
}

// 6. Signals and pipes: SIGHUP stops like SIGTERM, also when it arrives twice at once (timeout
// passes it on to the trainer and to its process group: one event, two signals); a closed stdout
// stops the run with its checkpoint; a signal during a write to a slow reader does not fail the write.
static void test_signals_and_pipes(void) {
    int rc = test_system("cd %s && (timeout 120 %s " TINY " --steps 100000 --out hup > hup.out 2>&1 & pid=$!; "
                         "for i in $(seq 3000); do grep -q '^train' hup/train.log 2>/dev/null && break; sleep 0.02; done; "
                         "kill -HUP $pid; kill -HUP $pid; wait $pid)", dir, trainer);
    CkptHeader hd = header_of("hup/latest.ckpt");
    CHECK(rc == 0 && hd.st.data_step > 0 && says("hup.out", "continue with --resume hup"),
          "SIGHUP: the run stops after its step with a checkpoint at step %llu, exit %d", (unsigned long long)hd.st.data_step,
          rc);
    rc = test_system("cd %s && bash -c 'timeout 120 %s " TINY " --steps 100000 --print-every 1 --out pipe 2> pipe.err | "
                     "head -n 30 > /dev/null; exit ${PIPESTATUS[0]}'", dir, trainer);
    hd = header_of("pipe/latest.ckpt");
    CHECK(rc == 0 && hd.st.data_step > 0 && hd.st.data_step < 1000 && says("pipe.err", "stdout is closed"),
          "./train | head: the run stops with a checkpoint at step %llu, exit %d", (unsigned long long)hd.st.data_step, rc);
    // one request delivered twice in a few milliseconds (timeout(1) signals its command and its process
    // group; a closing terminal reaches a job through the kernel and its shell) is one signal, not two
    // (a model whose step takes a few hundred ms, so the second comes while the first waits for it)
    rc = test_system("cd %s && (%s " TINY " --hidden 256 --batch 64 --seq-len 64 --corpus-bytes 2000000 --steps 100000 "
                     "--out hup2 > hup2.out 2>&1 & pid=$!; "
                     "for i in $(seq 400); do grep -q '^train' hup2/train.log 2>/dev/null && break; sleep 0.02; done; "
                     "python3 -c 'import os, signal, sys, time; p = int(sys.argv[1]); os.kill(p, signal.SIGHUP); "
                     "time.sleep(0.02); os.kill(p, signal.SIGHUP)' $pid; wait $pid)", dir, trainer);
    hd = header_of("hup2/latest.ckpt");
    CHECK(rc == 0 && hd.st.data_step > 0 && !says("hup2.out", "second signal"),
          "SIGHUP twice 20 ms apart: one stop, a checkpoint at step %llu, exit %d", (unsigned long long)hd.st.data_step,
          rc);
    // stdout a pipe whose reader has gone before the trainer prints its settings: the run still stops
    // with a checkpoint after its first step (signals are caught before the run directory is made)
    rc = test_system("cd %s && python3 -c 'import os, subprocess, sys; r, w = os.pipe(); os.close(r); "
                     "sys.exit(subprocess.call(sys.argv[1:], stdout=w))' timeout 120 %s " TINY " --steps 50 "
                     "--out early 2> early.err", dir, trainer);
    hd = header_of("early/latest.ckpt");
    CHECK(rc == 0 && hd.st.data_step == 1 && says("early.err", "stdout is closed"),
          "stdout closed before the settings table: a checkpoint at step %llu, exit %d (not 141 with only a log)",
          (unsigned long long)hd.st.data_step, rc);
    // a slow reader on stdout and Ctrl-C once training runs (its first line in the log; the reader
    // still asleep, so writes wait on a full pipe): the interrupted write goes on (SA_RESTART)
    rc = test_system("cd %s && bash -c '%s " TINY " --steps 100000 --print-every 1 --out slow 2> slow.err "
                     "> >(sleep 3; cat > /dev/null) & pid=$!; "
                     "for i in $(seq 3000); do grep -q ^train slow/train.log 2>/dev/null && break; sleep 0.02; done; "
                     "kill -INT $pid; wait $pid'", dir, trainer);
    hd = header_of("slow/latest.ckpt");
    CHECK(rc == 0 && !says("slow.err", "Interrupted system call") && hd.st.data_step > 0,
          "SIGINT while stdout waits on a slow reader: no \"Interrupted system call\", a checkpoint at step %llu",
          (unsigned long long)hd.st.data_step);
}

// 7. Input lists are never cut, errors name the flag at fault, a closed stdout stays closed.
static void test_inputs_and_errors(void) {
    // 5000 shard paths (the old table held 4096 and dropped the rest)
    int rc = test_system("cd %s && timeout 120 %s " TINY " --steps 1 --train $(yes tr_000.bin | head -n 5000 | paste -sd,) "
                         "--val va_000.bin --out many > many.out 2>&1", dir, trainer);
    CHECK(rc == 0 && says("many.out", "train data  *| tr_000.bin,.*, 40960000 bytes in 5000 shards"),
          "inputs: --train with 5000 paths reads all 5000 (exit %d)", rc);
    rc = train("sd.out", "-hidden 16");
    CHECK(rc == 2 && says("sd.out", "unknown flag -hidden: flags start with two dashes (--hidden)"),
          "errors: a single-dash flag is named, with the right spelling (exit %d)", rc);
    rc = train("ab.out", "--hid 16");
    CHECK(rc == 2 && says("ab.out", "unknown flag --hid "), "errors: no abbreviated flag names (exit %d)", rc);
    rc = train("cb.out", TINY_MODEL "--corpus-bytes 1099511627776 --steps 1 --out cb");
    CHECK(rc == 2 && says("cb.out", "--corpus-bytes 1099511627776: the built-in corpus is made in memory") &&
              !says("cb.out", "--hidden"),
          "errors: a corpus larger than memory names --corpus-bytes, exit %d (was: out of memory, --hidden, exit 1)", rc);
    // a checkpoint name that is a loop of symbolic links is named with what is wrong, not as missing
    test_system("cd %s && ln -s loop1 loop2 && ln -s loop2 loop1 && mkdir -p lp && ln -s ../loop1 lp/latest.ckpt", dir);
    rc = train("lp.out", "--resume lp --steps 6");
    CHECK(rc == 2 && says("lp.out", "--resume lp: lp/latest.ckpt: Too many levels of symbolic links"),
          "errors: latest.ckpt a loop of symbolic links is named as one (exit %d)", rc);
    test_system("mkdir -p %s/idir/best.ckpt", dir);
    rc = train("id.out", TINY " --steps 1 --init-from idir --out id");
    CHECK(rc == 2 && says("id.out", "--init-from idir/best.ckpt: a directory, not a checkpoint file"),
          "errors: a run directory whose best.ckpt is a directory is named as such (exit %d)", rc);
    rc = train("te.out", TINY " --steps 1 --train '' --out te");
    CHECK(rc == 2 && says("te.out", "--train: empty path"), "errors: --train '' names the flag (exit %d)", rc);
    // threads that cannot start (a stack beyond any address space) end the run before its directory is made
    rc = test_system("cd %s && OMP_STACKSIZE=100000000G timeout 120 %s " TINY_MODEL TINY_REST_2T " --steps 1 --out ss "
                     "> ss.out 2>&1", dir, trainer);
    CHECK(rc != 0 && says("ss.out", "Thread creation failed") && size_of("ss") < 0,
          "errors: OpenMP threads that cannot start: exit %d, libgomp says so, no run directory (%ld)", rc,
          size_of("ss"));
    rc = test_system("cd %s && %s " TINY " --steps 2 --out so >&- 2> so.err", dir, trainer);
    CHECK(rc == 0 && size_of("so/lock") == 0 && size_of("so/latest.ckpt") > 0,
          "stdout closed: the console output does not land in the lock (%ld bytes; exit %d)", size_of("so/lock"), rc);
}

int main(void) {
    snprintf(trainer, sizeof trainer, "%s/train", test_bin_dir());  // absolute: the runs cd into dir
    if (access(trainer, X_OK) != 0) { printf("FAIL  %s not built\n", trainer); return 1; }
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_best();
    test_log_owner();
    test_data_identity();
    test_outputs_apart();
    test_ranks_agree();
    test_signals_and_pipes();
    test_inputs_and_errors();
    if (!getenv("KEEP")) test_system("rm -rf %s", dir);  // KEEP=1: leave the files to look at
    return test_summary("test_train_guards");
}
