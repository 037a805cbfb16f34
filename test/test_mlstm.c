// The reference's bookkeeping: the parameter count of the published model, the
// buffer layout, determinism across thread counts, and the checkpoint file:
// save then load reproduces every byte, and each bad file fails clearly.
#include "mlstm.h"
#include "test/test.h"

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
    for (int i = 0; i < CKPT_SCALER_BYTES; i++) st->scaler[i] = (uint8_t)(i * 7 + 1);
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
    copy_file(path, bad, -1); { uint8_t v[4] = {4, 0, 0, 0}; poke(bad, 8, v, 4); }
    EXPECT_EXIT(load_as, bad, 2, "format version 4; this build reads versions 1 to 3", "other version");
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
        static const char run[] = "seq-len\0" "32\0" "train\0" "data\0";  // odd length: ends inside a word
        snprintf(bad, sizeof bad, "%s/run.ckpt", dir);
        checkpoint_save_run(bad, &m1, &s1, h1, c1, (const uint8_t *)run, sizeof run);
        CkptHeader hd;
        FILE *f = checkpoint_open(bad, &hd);
        uint8_t *got = checkpoint_read_run(f, bad, &hd);
        CHECK(hd.run_bytes == sizeof run && got && !memcmp(got, run, sizeof run) && file_size(bad) == want + (long)sizeof run,
              "the run record (%zu bytes) is saved after the payload and read back", sizeof run);
        free(got);
        fclose(f);
        copy_file(bad, p2, -1); { uint8_t x = 'S'; poke(p2, want, &x, 1); }
        EXPECT_EXIT(load_as, p2, 2, "fails its checksum", "one flipped byte of the run record");
        copy_file(path, p2, -1); { uint8_t v[4] = {1, 0, 0, 0}, n[8] = {5}; poke(p2, 8, v, 4); poke(p2, CKPT_AT_RUN_BYTES, n, 8); }
        EXPECT_EXIT(load_as, p2, 2, "inconsistent header", "a version-1 file with a run record size");
        copy_file(path, p2, -1); { uint8_t v[4] = {1, 0, 0, 0}; poke(p2, 8, v, 4); }
        EXPECT_EXIT(load_as, p2, 2, "fails its checksum", "a version-1 header under a version-2 checksum");
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
    mlstm_free(&m1); mlstm_free(&m2);
    test_system("rm -rf %s", dir);
    return test_summary("test_mlstm");
}
