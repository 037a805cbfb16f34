// The reference's bookkeeping: the parameter count of the published model, the
// buffer layout, determinism across thread counts, and the checkpoint file:
// save then load reproduces every byte, and each bad file fails clearly.
#include "mlstm.h"
#include "harness/checkpoint.h"  // defines: the checkpoint file (CkptHeader, checkpoint_open/read/load, checkpoint_save_run)
#include "test/test.h"
#include <limits.h>

static char dir[] = "/tmp/mlstm_test_XXXXXX";
static char path[512];
static MlstmConfig cfg = {256, 8, 12, 1};
enum { G = 3 };

// A model, state and TrainState with recognisable values.
static void make(Mlstm *m, real *h, real *c, TrainState *st, uint64_t seed) {
    mlstm_build(m, cfg, G, 4);
    mlstm_init(m, seed);
    uint64_t s = seed;
    for (size_t i = 0; i < m->nparams; i++) { m->adam_m[i] = (real)rng_normal(&s); m->adam_v[i] = (real)rng_uniform(&s); }
    for (int i = 0; i < G * cfg.H; i++) { h[i] = (real)rng_normal(&s); c[i] = (real)rng_normal(&s); }
    memset(st, 0, sizeof *st);
    st->step = 1234; st->data_step = 1300; st->rng = 0xdeadbeefcafef00dULL; st->G = G;
    for (int i = 0; i < CKPT_SCALER_USED; i++) st->scaler[i] = (uint8_t)(i * 7 + 1);  // the rest must stay 0
}

static void copy_file(const char *from, const char *to, long nbytes) {  // nbytes < 0: all
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int ch; long n = 0;
    while ((nbytes < 0 || n < nbytes) && (ch = fgetc(a)) != EOF) { fputc(ch, b); n++; }
    fclose(a); fclose(b);
}
static void poke(const char *p, long off, const void *bytes, size_t n) {
    FILE *f = fopen(p, "r+b");
    fseek(f, off, SEEK_SET); fwrite(bytes, 1, n, f); fclose(f);
}

// bad-file cases, each run in a child process by EXPECT_EXIT
static void load_as(void *arg) {
    const char *p = (const char *)arg;
    Mlstm m; real h[G * 12], c[G * 12]; TrainState st;
    mlstm_build(&m, cfg, G, 4);
    checkpoint_load(p, &m, &st, h, c, G);
    mlstm_free(&m);
}
static void load_other_config(void *arg) {
    Mlstm m; real h[G * 16], c[G * 16]; TrainState st;
    MlstmConfig other = {256, 8, 16, 1};
    mlstm_build(&m, other, G, 4);
    checkpoint_load((const char *)arg, &m, &st, h, c, G);
}
static void load_other_batch(void *arg) {
    Mlstm m; real h[4 * 12], c[4 * 12]; TrainState st;
    mlstm_build(&m, cfg, 4, 4);
    checkpoint_load((const char *)arg, &m, &st, h, c, 4);
}

// H=3, D=2, no weight norm, G=1: an odd number of parameters and of state values, so
// the arrays do not end on the checksum's 8-byte words (found by test/fuzz/fuzz_checkpoint)
static void load_odd(void *arg) {
    Mlstm m; real h[3], c[3]; TrainState st;
    mlstm_build(&m, (MlstmConfig){256, 2, 3, 0}, 1, 1);
    checkpoint_load((const char *)arg, &m, &st, h, c, 1);
    mlstm_free(&m);
}

static Mlstm *saved_model; static TrainState *saved_state; static real *saved_h, *saved_c;
static void save_to(void *arg) { checkpoint_save((const char *)arg, saved_model, saved_state, saved_h, saved_c); }
static const char *saved_run;
static size_t saved_run_bytes;
static void save_run_to(void *arg) {
    checkpoint_save_run((const char *)arg, saved_model, saved_state, saved_h, saved_c, (const uint8_t *)saved_run,
                        saved_run_bytes, CKPT_VERSION);
}
static void save_to_pipe_stdin(void *arg) {  // standard input a pipe, as /dev/stdin is in `... | prog`
    int fds[2];
    if (pipe(fds) != 0 || dup2(fds[0], 0) < 0) exit(99);
    save_to(arg);
}
static void open_header(void *arg) {  // checkpoint_open alone; a hang ends as SIGALRM
    alarm(10);
    CkptHeader hd;
    fclose(checkpoint_open((const char *)arg, &hd));
}
static void alloc_huge(void *arg) { free(mlstm_alloc(*(size_t *)arg)); }

// ASan would abort an allocation of 2^62 bytes instead of failing it as malloc does
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

// A header that passes every check of a reader whose sizes wrap: D=2, H=2^30 and
// G=2^29-420 make nparams about 5 x 2^60 and 4 (3 nparams + 2GH) = 9216 modulo 2^64;
// then a payload of that many bytes and the checksum a writer would compute.
static void write_wrapping(const char *p) {
    uint8_t hd[CKPT_HEADER_BYTES] = {0}, payload[9216] = {0};
    uint64_t H = 1ULL << 30, D = 2, G = (1ULL << 29) - 420;
    uint64_t np = 256 * D + 4 * H * D + 4 * H + 4 * H * H + 4 * H + H * D + H + H * H + H + 4 * H + 256 * H + 256;
    uint64_t bytes = 4 * (3 * np + 2 * G * H);  // wraps, on purpose
    memcpy(hd, CKPT_MAGIC, 8);
    put32(hd + CKPT_AT_VERSION, CKPT_VERSION); put32(hd + CKPT_AT_HEADER_SIZE, CKPT_HEADER_BYTES);
    put32(hd + CKPT_AT_V, 256); put32(hd + CKPT_AT_D, (uint32_t)D); put32(hd + CKPT_AT_H, (uint32_t)H);
    put32(hd + CKPT_AT_WNORM, 1); put64(hd + CKPT_AT_NPARAMS, np); put32(hd + CKPT_AT_G, (uint32_t)G);
    put64(hd + CKPT_AT_PAYLOAD, bytes);
    size_t n = bytes < sizeof payload ? (size_t)bytes : 0;
    uint64_t sum = checksum_update(checksum_update(CHECKSUM_INIT, hd, sizeof hd), payload, n);
    put64(hd + CKPT_AT_CHECKSUM, checksum_final(sum));
    FILE *f = fopen(p, "wb");
    fwrite(hd, 1, sizeof hd, f);
    fwrite(payload, 1, n, f);
    fclose(f);
}

int main(void) {
    // 1. the published 4096-unit model (Radford et al. 2017): 86,319,360 parameters
    MlstmConfig big = {256, 64, 4096, 1}, big_nown = {256, 64, 4096, 0};
    CHECK(param_count(&big) == 86319360, "H=4096 D=64 with weight norm has %zu parameters (86,319,360)", param_count(&big));
    CHECK(param_count(&big_nown) == 86319360 - 10 * 4096, "without weight norm the 10H gains go: %zu", param_count(&big_nown));
    ParamTable pt;
    param_table(&pt, &big, NULL);
    CHECK(pt.t[P_BOUT] - pt.t[P_E] + pt.n[P_BOUT] == 86319360 && pt.n[P_WH] == 4 * 4096 * 4096 && pt.t[P_GX] - pt.t[P_WX] == 4 * 4096 * 64,
          "the pointer table covers the buffer in the documented order");

    // 2. the output does not depend on the number of threads (fixed reduction order)
#ifdef _OPENMP
    {
        Mlstm m; mlstm_build(&m, (MlstmConfig){256, 16, 40, 1}, 5, 6); mlstm_init(&m, 3);
        uint8_t in[30], tg[30]; real h0[200] = {0}, c0[200] = {0};
        for (int i = 0; i < 30; i++) { in[i] = (uint8_t)(i * 37); tg[i] = (uint8_t)(i * 11); }
        omp_set_num_threads(1);
        mlstm_forward(&m, in, tg, NULL, h0, c0, 5, 6); mlstm_backward(&m, 1);
        real *g1 = (real *)mallocCheck(m.nparams * sizeof(real));
        memcpy(g1, m.grads, m.nparams * sizeof(real));
        omp_set_num_threads(2);
        mlstm_forward(&m, in, tg, NULL, h0, c0, 5, 6); mlstm_backward(&m, 1);
        CHECK(memcmp(g1, m.grads, m.nparams * sizeof(real)) == 0, "gradients are bit-identical with 1 and 2 threads");
        free(g1); mlstm_free(&m);
    }
#endif

    // 3. checkpoint: save, load, save again gives the same bytes and the same values
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    char p2[600], bad[600];
    snprintf(path, sizeof path, "%s/a.ckpt", dir);
    snprintf(p2, sizeof p2, "%s/b.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    Mlstm m1, m2;
    real h1[G * 12], c1[G * 12], h2[G * 12], c2[G * 12];
    TrainState s1, s2;
    make(&m1, h1, c1, &s1, 11);
    checkpoint_save(path, &m1, &s1, h1, c1);
    long want = CKPT_HEADER_BYTES + 4 * (3 * (long)m1.nparams + 2 * G * 12);
    CHECK(file_size(path) == want, "checkpoint is %ld bytes (header + 3 x params + 2 x state = %ld)", file_size(path), want);
    mlstm_build(&m2, cfg, G, 4);
    checkpoint_load(path, &m2, &s2, h2, c2, G);
    CHECK(memcmp(m1.params, m2.params, m1.nparams * sizeof(real)) == 0 && memcmp(m1.adam_m, m2.adam_m, m1.nparams * sizeof(real)) == 0 &&
          memcmp(m1.adam_v, m2.adam_v, m1.nparams * sizeof(real)) == 0, "load restores weights and Adam moments exactly");
    CHECK(memcmp(h1, h2, sizeof h1) == 0 && memcmp(c1, c2, sizeof c1) == 0, "load restores the carried state exactly");
    CHECK(s2.step == 1234 && s2.data_step == 1300 && s2.rng == s1.rng && s2.G == G && memcmp(s1.scaler, s2.scaler, CKPT_SCALER_BYTES) == 0,
          "load restores step, data position, RNG, loss scaler bytes");
    checkpoint_save(p2, &m2, &s2, h2, c2);
    CHECK(files_equal(path, p2), "save -> load -> save reproduces every byte");
    CHECK(test_system("[ $(ls %s | grep -c '\\.tmp\\.') -eq 0 ]", dir) == 0, "no temporary file is left behind");

    // 4. each bad file: a clear message naming the file, exit status 2
    char missing[600];
    snprintf(missing, sizeof missing, "%s/missing.ckpt", dir);
    EXPECT_EXIT(load_as, missing, 2, "cannot open checkpoint", "missing file");
    copy_file(path, bad, 100);
    EXPECT_EXIT(load_as, bad, 2, "is truncated: 100 bytes", "file shorter than the header");
    copy_file(path, bad, want - 10);
    EXPECT_EXIT(load_as, bad, 2, "is truncated: 81206 bytes after the header, the header says 81216", "truncated payload");
    copy_file(path, bad, -1); poke(bad, 0, "NOTACKPT", 8);
    EXPECT_EXIT(load_as, bad, 2, "not an mlstm checkpoint (bad magic)", "wrong magic");
    copy_file(path, bad, -1); { uint8_t v[4] = {5, 0, 0, 0}; poke(bad, 8, v, 4); }
    EXPECT_EXIT(load_as, bad, 2, "format version 5; this build reads versions 1 to 4", "other version");
    copy_file(path, bad, -1); { uint8_t x = 0x5a; poke(bad, want - 1, &x, 1); }
    EXPECT_EXIT(load_as, bad, 2, "fails its checksum", "one flipped payload byte");
    copy_file(path, bad, -1); { uint8_t x = 0x01; poke(bad, 49, &x, 1); }
    EXPECT_EXIT(load_as, bad, 2, "fails its checksum", "one flipped header byte (the step)");
    EXPECT_EXIT(load_other_config, path, 2, "model with D=8 H=12 weight-norm=1; the command line asks for D=8 H=16", "other config");
    EXPECT_EXIT(load_other_batch, path, 2, "global batch of 3 rows; the command line asks for 4", "other global batch");
    EXPECT_EXIT(load_as, bad, 2, bad, "the message names the file");
    saved_model = &m1; saved_state = &s1; saved_h = h1; saved_c = c1;
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.ckpt", dir);
    EXPECT_EXIT(save_to, bad, 2, "cannot write", "saving into a missing directory");
    // 5. sizes whose arrays end inside an 8-byte word of the checksum
    {
        Mlstm m; real h[3] = {1, 2, 3}, c[3] = {4, 5, 6}; TrainState st;
        mlstm_build(&m, (MlstmConfig){256, 2, 3, 0}, 1, 1);
        mlstm_init(&m, 5);
        memset(&st, 0, sizeof st);
        st.G = 1;
        snprintf(bad, sizeof bad, "%s/odd.ckpt", dir);
        checkpoint_save(bad, &m, &st, h, c);
        EXPECT_EXIT(load_odd, bad, 0, "", "a checkpoint of H=3 D=2 (odd parameter and state counts) loads back: its checksum matches");
        mlstm_free(&m);
    }
    // 6. the run record: saved after the payload under the checksum, read back as written
    {
        static const char run[] = "seq-len\0" "32\0" "train\0" "dat\0";  // 21 bytes, odd: ends inside a word
        const size_t run_n = sizeof run - 1;  // whole pairs: without the literal's own final NUL
        snprintf(bad, sizeof bad, "%s/run.ckpt", dir);
        checkpoint_save_run(bad, &m1, &s1, h1, c1, (const uint8_t *)run, run_n, CKPT_VERSION);
        CkptHeader hd;
        FILE *f = checkpoint_open(bad, &hd);
        uint8_t *got = checkpoint_read_run(f, bad, &hd);
        CHECK(hd.run_bytes == run_n && got && !memcmp(got, run, run_n) && file_size(bad) == want + (long)run_n,
              "the run record (%zu bytes) is saved after the payload and read back", run_n);
        free(got);
        fclose(f);
        copy_file(bad, p2, -1); { uint8_t x = 'S'; poke(p2, want, &x, 1); }
        EXPECT_EXIT(load_as, p2, 2, "fails its checksum", "one flipped byte of the run record");
        copy_file(path, p2, -1); { uint8_t v[4] = {1, 0, 0, 0}, n[8] = {5}; poke(p2, 8, v, 4); poke(p2, CKPT_AT_RUN_BYTES, n, 8); }
        EXPECT_EXIT(load_as, p2, 2, "inconsistent header", "a version-1 file with a run record size");
        copy_file(path, p2, -1); { uint8_t v[4] = {1, 0, 0, 0}; poke(p2, 8, v, 4); }
        EXPECT_EXIT(load_as, p2, 2, "fails its checksum", "a version-1 header under a later version's checksum");
        copy_file(path, p2, -1); { uint8_t x = 1; poke(p2, 200, &x, 1); }
        EXPECT_EXIT(load_as, p2, 2, "inconsistent header", "a reserved header byte set (byte 200)");
    }
    // 6b. the run's identity (doc/formats.md, "Run identity"): what a resume may change
    // (the data's names and places, --steps, what a validation reads) leaves it as it is;
    // a defining setting, a shard's bytes or checksum, the model or the global batch changes it
    {
#define ID_REC(seq, name, sum) "seq-len\0" seq "\0" "train data\0" "300 " sum " " name "\n\0"
        static const char base[] = ID_REC("16", "train_000.bin", "0123456789abcdef"),
                          moved[] = "train\0/new/place\0" ID_REC("16", "a.bin", "0123456789abcdef")
                                    "steps\0" "99\0" "val-steps\0" "3\0" "val-batch\0" "8\0",
                          other_t[] = ID_REC("17", "train_000.bin", "0123456789abcdef"),
                          other_sum[] = ID_REC("16", "train_000.bin", "0123456789abcdee");
#undef ID_REC
        MlstmConfig shape = {256, 8, 12, 1}, wider = {256, 8, 13, 1};
#define ID(rec, c, g) ckpt_run_identity((const uint8_t *)rec, sizeof rec - 1, &c, g)
        uint64_t id = ID(base, shape, 3);
        CHECK(id == ID(moved, shape, 3), "the run identity: the same for data renamed and moved, another --steps, "
              "--val-steps, --val-batch");
        CHECK(id != ID(other_t, shape, 3) && id != ID(other_sum, shape, 3) && id != ID(base, wider, 3) &&
              id != ID(base, shape, 4) && id != 0,
              "the run identity: another --seq-len, shard checksum, H or G is another run");
#undef ID
        saved_model = &m1; saved_state = &s1; saved_h = h1; saved_c = c1;
        s1.run_id = id + 1;  // not this record's: the writer refuses it rather than write a file every reader refuses
        snprintf(bad, sizeof bad, "%s/wrong_id.ckpt", dir);
        saved_run = base;
        saved_run_bytes = sizeof base - 1;
        EXPECT_EXIT(save_run_to, bad, 2, "is not the identity of its run record and model (a bug)",
                    "a run identity that is not its record's is not written");
        s1.run_id = 0;
    }
    // 7. what was verified is what is read: a checkpoint put in the file's place between
    // checkpoint_open and checkpoint_read is not read (tools/generate and the trainer read so)
    {
        Mlstm m3; real h3[G * 12], c3[G * 12]; TrainState s3;
        make(&m3, h3, c3, &s3, 99);
        snprintf(bad, sizeof bad, "%s/other.ckpt", dir);
        checkpoint_save(bad, &m3, &s3, h3, c3);
        CkptHeader hd;
        FILE *f = checkpoint_open(path, &hd);
        CHECK(rename(bad, path) == 0, "another checkpoint renamed over the opened one");
        checkpoint_read(f, path, &hd, &m2, &s2, h2, c2, G);
        fclose(f);
        CHECK(memcmp(m1.params, m2.params, m1.nparams * sizeof(real)) == 0,
              "checkpoint_read reads the verified file, not the one now at its path");
        mlstm_free(&m3);
    }
    // 8. sizes from a header: within this build's limits (every reader applies them in
    // checkpoint_open), and computed without wrapping (the D=2, H=2^30 file was accepted,
    // and transfer then asked for 2^63 bytes)
    {
        snprintf(bad, sizeof bad, "%s/wrap.ckpt", dir);
        write_wrapping(bad);
        MlstmConfig wc = {256, 2, 1 << 30, 1};
        uint64_t wnp = ckpt_param_count(&wc);
        CHECK(wnp > 0 && ckpt_payload_bytes(&wc, wnp, (1 << 29) - 420) == 0,
              "D=2 H=2^30 G=2^29-420: %llu parameters, a payload size that does not fit 64 bits (0)",
              (unsigned long long)wnp);
        MlstmConfig huge = {256, 1, INT_MAX, 1};
        CHECK(ckpt_param_count(&huge) == 0, "H=2^31-1: the parameter count does not fit 64 bits (0)");
        EXPECT_EXIT(open_header, bad, 2,
                    "D=2 H=1073741824, beyond this build's limits (D at most 65536, H at most 65536)",
                    "a header whose payload size wraps to 9216 bytes, under a valid checksum");
        copy_file(path, p2, -1);
        { uint8_t v[4]; put32(v, MAX_HIDDEN + 1); poke(p2, CKPT_AT_H, v, 4); }
        EXPECT_EXIT(open_header, p2, 2, "H=65537, beyond this build's limits", "H = MAX_HIDDEN + 1");
        copy_file(path, p2, -1);
        { uint8_t v[4]; put32(v, 0xffffffffu); poke(p2, CKPT_AT_D, v, 4); }
        EXPECT_EXIT(open_header, p2, 2, "D=4294967295 H=12, beyond this build's limits",
                    "D = 2^32 - 1 (negative as an int)");
        copy_file(path, p2, -1);
        { uint8_t v[4]; put32(v, 0x80000000u); poke(p2, CKPT_AT_G, v, 4); }
        EXPECT_EXIT(open_header, p2, 2, "inconsistent header", "G = 2^31 (negative as an int)");
        // a score or loss mean below 0 is no loss: a best.ckpt scored -5 would never be replaced
        copy_file(path, p2, -1);
        { uint8_t v[8]; put64(v, f64_bits(-5.0)); poke(p2, CKPT_AT_SCORE, v, 8); }
        EXPECT_EXIT(open_header, p2, 2, "inconsistent header", "a score of -5 nats");
        copy_file(path, p2, -1);
        { uint8_t v[8]; put64(v, f64_bits(-5.0)); poke(p2, CKPT_AT_LOSS_EMA, v, 8); }
        EXPECT_EXIT(open_header, p2, 2, "inconsistent header", "a loss mean state of -5 nats");
    }
    // 9. what is read must be a checkpoint file: a FIFO is refused at once (it would
    // wait for a writer), and a run directory stands for its best model, DIR/best.ckpt
    {
        snprintf(bad, sizeof bad, "%s/fifo.ckpt", dir);
        test_system("mkfifo %s", bad);
        EXPECT_EXIT(open_header, bad, 2, "fifo.ckpt is not a regular file (a FIFO)", "a FIFO: refused, no hang");
        char run[600], want[1400];
        snprintf(run, sizeof run, "%s/run", dir);
        test_system("mkdir -p %s && cp %s %s/best.ckpt", run, path, run);
        EXPECT_EXIT(load_as, run, 0, "", "a run directory loads as its best.ckpt");
        test_system("mv %s/best.ckpt %s/latest.ckpt", run, run);
        snprintf(want, sizeof want,
                 "%s is a run directory without best.ckpt (its best model); it has latest.ckpt: give %s/latest.ckpt "
                 "to read that", run, run);
        EXPECT_EXIT(load_as, run, 2, want, "a run directory without best.ckpt but with latest.ckpt");
        test_system("rm %s/latest.ckpt", run);
        snprintf(want, sizeof want, "%s is a directory without best.ckpt or latest.ckpt: not a run directory", run);
        EXPECT_EXIT(load_as, run, 2, want, "a directory with neither");
        snprintf(want, sizeof want, "checkpoint %s/best.ckpt is truncated", run);
        test_system("head -c 1000 %s > %s/best.ckpt", path, run);
        EXPECT_EXIT(load_as, run, 2, want, "the messages name the file read, DIR/best.ckpt");
    }
    // 10. an output is written through a symbolic link (the link stays, the file it names is
    // replaced, with its mode); a FIFO, a directory or a device is never replaced
    {
        char real[600], link[600], p3[700], ref[600];
        snprintf(ref, sizeof ref, "%s/ref.ckpt", dir);
        checkpoint_save(ref, &m1, &s1, h1, c1);
        snprintf(real, sizeof real, "%s/store/real.ckpt", dir);
        snprintf(link, sizeof link, "%s/latest.ckpt", dir);
        test_system("mkdir -p %s/store && echo old > %s && chmod 600 %s && ln -sf store/real.ckpt %s", dir, real, real,
                    link);
        checkpoint_save(link, &m1, &s1, h1, c1);
        struct stat ls, rs;
        memset(&rs, 0, sizeof rs);
        int is_link = lstat(link, &ls) == 0 && S_ISLNK(ls.st_mode), there = stat(real, &rs) == 0;
        CHECK(is_link && there && files_equal(real, ref) && (rs.st_mode & 0777) == 0600,
              "save through a link: the link stays a link (%d), the file it names is the checkpoint, "
              "mode 0600 kept (%o)", is_link, (unsigned)(rs.st_mode & 0777));
        snprintf(p3, sizeof p3, "%s/chain.ckpt", dir);  // a link to a link to a file not written yet
        test_system("ln -sf latest2.ckpt %s && ln -sf store/new.ckpt %s/latest2.ckpt", p3, dir);
        checkpoint_save(p3, &m1, &s1, h1, c1);
        snprintf(real, sizeof real, "%s/store/new.ckpt", dir);
        CHECK(lstat(p3, &ls) == 0 && S_ISLNK(ls.st_mode) && files_equal(real, ref),
              "a link to a link to a missing file: the file is created where the links lead");
        CHECK(test_system("[ $(find %s -name '*.tmp.*' | wc -l) -eq 0 ]", dir) == 0, "no temporary file left anywhere");
        snprintf(p3, sizeof p3, "%s/out.fifo", dir);
        test_system("mkfifo %s", p3);
        EXPECT_EXIT(save_to, p3, 2, "out.fifo: it is a FIFO; an output replaces only a regular file",
                    "saving onto a FIFO");
        CHECK(lstat(p3, &ls) == 0 && S_ISFIFO(ls.st_mode), "and the FIFO is still a FIFO");
        snprintf(p3, sizeof p3, "%s/store", dir);
        EXPECT_EXIT(save_to, p3, 2, "store: it is a directory", "saving onto a directory");
        snprintf(p3, sizeof p3, "%s/stdin.ckpt", dir);  // as --ckpt /dev/stdin is, when standard input is a pipe
        test_system("ln -sf /proc/self/fd/0 %s", p3);
        EXPECT_EXIT(save_to_pipe_stdin, p3, 2, "stdin.ckpt: it is a FIFO", "saving onto a link to a pipe (/dev/stdin)");
        CHECK(lstat(p3, &ls) == 0 && S_ISLNK(ls.st_mode), "and the link is still a link");
    }
    // 11. out of memory names the size asked for (was 9223372036854775807 bytes whatever it was), exit 2: a
    // limit of the machine, the user's to change
    {
        size_t n = (size_t)1 << 60;
        EXPECT_EXIT(alloc_huge, &n, 2, "out of memory allocating 4611686018427387904 bytes",
                    "mlstm_alloc of 2^60 floats");
        n = SIZE_MAX / 2;
        EXPECT_EXIT(alloc_huge, &n, 2, "elements of 4 bytes at", "mlstm_alloc of more floats than the address space");
    }
    mlstm_free(&m1); mlstm_free(&m2);
    test_system("rm -rf %s", dir);
    return test_summary("test_mlstm");
}
