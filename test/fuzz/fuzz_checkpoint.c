// Checkpoints (harness/checkpoint.h): checkpoint_open's validation, then checkpoint_read into a
// model built from that header (as transfer's model_open does) and checkpoint_read_run,
// checked against the file's payload and run record, and saved again: checkpoint_save_run
// must write the same payload and record back and a header that reads back the same.
//
// Input: u8 mode, then the file. mode bit 0: make nparams and payload_bytes agree
// with the header's D, H, wnorm and G, computed in 64 bits that wrap (seed wrapping_H:
// D=2, H=2^30 wraps the payload to 9216 bytes, which every reader must refuse); bit 1: cut or zero-pad the payload to
// payload_bytes (when that is at most 64 KB: bigger models only cost time); bit 2:
// write the real checksum. The bits get inputs past the consistency checks to the loader.
#include "fuzz.h"
#include "mlstm.h"
#include "harness/checkpoint.h"  // defines: the checkpoint file (CkptHeader, checkpoint_open/read/load, checkpoint_save_run)

#define MAX_PAD (1 << 16)

typedef struct {
    const char *path, *path2;
    CkptHeader hd, hd2;
    Mlstm m;
    TrainState st;
    real *h, *c;
    uint8_t *run;
} Ctx;

static void load_and_save(void *arg) {
    Ctx *x = (Ctx *)arg;
    FILE *f = checkpoint_open(x->path, &x->hd);
    mlstm_build(&x->m, x->hd.cfg, 1, 1);
    size_t gh = (size_t)x->hd.st.G * x->hd.cfg.H;
    x->h = (real *)mallocCheck(sizeof(real) * gh);
    x->c = (real *)mallocCheck(sizeof(real) * gh);
    checkpoint_read(f, x->path, &x->hd, &x->m, &x->st, x->h, x->c, x->hd.st.G);
    x->run = checkpoint_read_run(f, x->path, &x->hd);
    fclose(f);
    // a version 3 file's run identity was made by an older rule: it is saved as version 3 again
    checkpoint_save_run(x->path2, &x->m, &x->st, x->h, x->c, x->run, x->hd.run_bytes,
                        x->hd.version == 3 ? 3 : CKPT_VERSION);
    checkpoint_header(x->path2, &x->hd2);
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    FUZZ_CHECK(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    uint8_t *b = (uint8_t *)malloc(*n + 1);
    FUZZ_CHECK(fread(b, 1, *n, f) == *n, "cannot read %s", path);
    fclose(f);
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    unsigned mode = fuzz_u8(&in);
    size_t n = in.n;
    fuzz_begin();
    size_t cap = n > CKPT_HEADER_BYTES ? n : CKPT_HEADER_BYTES;
    uint8_t *file = (uint8_t *)calloc(1, cap + MAX_PAD);
    memcpy(file, in.p, n);
    if (n >= CKPT_HEADER_BYTES) {
        MlstmConfig cfg = {(int)get32(file + 16), (int)get32(file + 20), (int)get32(file + 24), (int)get32(file + 28)};
        int G = (int)get32(file + 40);
        if ((mode & 1) && cfg.D > 0 && cfg.H > 0 && G > 0) {  // the sizes a writer computes whose products wrap
            uint64_t np = param_count(&cfg);
            put64(file + 32, np);
            put64(file + 120, 4 * (3 * np + 2 * (uint64_t)G * (uint64_t)cfg.H));
        }
        uint64_t want = get64(file + 120);
        if ((mode & 2) && want <= MAX_PAD) n = CKPT_HEADER_BYTES + (size_t)want;  // calloc'd: zero padding
        if (mode & 4) {
            put64(file + 128, 0);
            put64(file + 128, checksum_final(checksum_update(checksum_update(CHECKSUM_INIT, file, CKPT_HEADER_BYTES),
                                                             file + CKPT_HEADER_BYTES, n - CKPT_HEADER_BYTES)));
        }
    }
    Ctx x;
    memset(&x, 0, sizeof x);
    x.path = fuzz_path("in.ckpt");
    x.path2 = fuzz_path("out.ckpt");
    fuzz_write_file(x.path, file, n);
    int ok = fuzz_call(load_and_save, &x);
    if (ok) {
        // the header as read agrees with itself, and survives a save
        FUZZ_CHECK(x.hd.cfg.V == 256 && x.hd.cfg.D >= 1 && x.hd.cfg.H >= 1 && x.hd.st.G >= 1, "accepted a bad config");
        FUZZ_CHECK(x.hd.cfg.D <= MAX_EMBED && x.hd.cfg.H <= MAX_HIDDEN, "accepted D=%d H=%d, beyond the limits",
                   x.hd.cfg.D, x.hd.cfg.H);
        FUZZ_CHECK(n == CKPT_HEADER_BYTES + x.hd.payload_bytes + x.hd.run_bytes, "file %zu bytes, payload %llu, record %llu", n,
                   (unsigned long long)x.hd.payload_bytes, (unsigned long long)x.hd.run_bytes);
        FUZZ_CHECK(!memcmp(&x.hd.cfg, &x.hd2.cfg, sizeof x.hd.cfg) && x.hd.nparams == x.hd2.nparams &&
                   x.hd.payload_bytes == x.hd2.payload_bytes && x.hd.run_bytes == x.hd2.run_bytes &&
                   x.hd.st.G == x.hd2.st.G && x.hd.st.step == x.hd2.st.step &&
                   x.hd.st.data_step == x.hd2.st.data_step && x.hd.st.rng == x.hd2.st.rng &&
                   x.hd.st.run_id == x.hd2.st.run_id &&
                   !memcmp(x.hd.st.scaler, x.hd2.st.scaler, CKPT_SCALER_BYTES), "the saved header reads back different");
        size_t n2;
        uint8_t *out = read_all(x.path2, &n2);
        FUZZ_CHECK(n2 == n && !memcmp(out + CKPT_HEADER_BYTES, file + CKPT_HEADER_BYTES, n - CKPT_HEADER_BYTES),
                   "the saved payload and record differ from the loaded ones");
        free(out);
        free(x.run);
        free(x.h); free(x.c);
        mlstm_free(&x.m);
    }
    free(file);
    fuzz_end(ok);
    return 0;
}
