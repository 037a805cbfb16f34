// Shards, streams and the global-batch loader (data.h): shard_open's header checks,
// stream_open over 1-3 shards, loader_init and loader_batch, whose bytes and reset
// flags are checked against the shards' payloads read directly.
//
// Input: u8 mode, u8 B, u8 T, u8 world, u8 rank, u16 step, then one piece (u16
// length + bytes) per shard file, header included. mode bits 0-1: shards - 1 (1..3);
// bit 2: write the real payload length into the header, bit 3: the real checksum (so
// inputs get past those checks to the loader), bit 4: shard_open verifies the checksum.
#include "fuzz.h"
#include "data.h"

typedef struct {
    const char *paths[3];
    int n, verify, B, T, world, rank;
    long step;
    Stream s;
    Loader l;
    uint8_t *in, *tg, *rs;  // (B,T) each
} Ctx;

static void open_and_load(void *arg) {
    Ctx *c = (Ctx *)arg;
    stream_open(&c->s, c->paths, c->n, c->verify);
    loader_init(&c->l, &c->s, c->world, c->rank, c->B, c->T, "the data");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    unsigned mode = fuzz_u8(&in);
    Ctx c;
    memset(&c, 0, sizeof c);
    c.n = 1 + (mode & 3) % 3;
    c.verify = (mode >> 4) & 1;
    c.B = 1 + fuzz_u8(&in) % 8;
    c.T = 1 + fuzz_u8(&in) % 32;
    c.world = 1 + fuzz_u8(&in) % 4;
    c.rank = (int)(fuzz_u8(&in) % (unsigned)c.world);
    c.step = (long)fuzz_u16(&in);
    fuzz_begin();
    // the payloads as written, concatenated: the oracle for every byte the loader returns
    uint8_t *all = (uint8_t *)malloc(size + 1);
    int64_t starts[4] = {0};
    size_t n_all = 0;
    for (int i = 0; i < c.n; i++) {
        size_t n;
        const uint8_t *p = fuzz_piece(&in, &n);
        uint8_t *file = (uint8_t *)malloc(n + 1);
        memcpy(file, p, n);
        if (n >= SHARD_HEADER_BYTES) {
            uint64_t len = n - SHARD_HEADER_BYTES;
            if (mode & 4) memcpy(file + 16, &len, 8);
            if (mode & 8) {
                uint64_t sum = checksum_final(checksum_update(CHECKSUM_INIT, file + SHARD_HEADER_BYTES, len));
                memcpy(file + 24, &sum, 8);
            }
            memcpy(all + n_all, file + SHARD_HEADER_BYTES, len);
            n_all += len;
        }
        starts[i + 1] = (int64_t)n_all;
        char name[32];
        snprintf(name, sizeof name, "shard_%d.bin", i);
        c.paths[i] = fuzz_path(name);
        fuzz_write_file(c.paths[i], file, n);
        free(file);
    }
    int ok = fuzz_call(open_and_load, &c);
    if (ok) {
        // opened: each shard's payload is the file's bytes after the header
        FUZZ_CHECK(c.s.size == (int64_t)n_all, "stream size %lld, payloads %zu", (long long)c.s.size, n_all);
        for (int i = 0; i <= c.n; i++) FUZZ_CHECK(c.s.start[i] == starts[i], "shard %d starts at %lld", i, (long long)c.s.start[i]);
        size_t bt = (size_t)c.B * c.T;
        c.in = (uint8_t *)malloc(bt); c.tg = (uint8_t *)malloc(bt); c.rs = (uint8_t *)malloc(bt);
        long spe = loader_steps_per_epoch(&c.l);
        FUZZ_CHECK(spe >= 1 && c.l.slice >= c.T && (int64_t)c.world * c.B * c.l.slice <= c.s.size - 1, "slice %lld, steps %ld",
                   (long long)c.l.slice, spe);
        long steps[3] = {c.step, c.step + 1, spe};  // the last: the first step of the second epoch
        for (int k = 0; k < 3; k++) {
            long pos = steps[k] % spe;
            loader_batch(&c.l, steps[k], c.in, c.tg, c.rs);
            for (int b = 0; b < c.B; b++) {
                int64_t off = ((int64_t)c.rank * c.B + b) * c.l.slice + (int64_t)pos * c.T;
                for (int t = 0; t < c.T; t++) {
                    size_t i = (size_t)b * c.T + t;
                    FUZZ_CHECK(c.in[i] == all[off + t] && c.tg[i] == all[off + t + 1], "row %d step %d", b, t);
                    int shard_start = 0;
                    for (int j = 0; j < c.n; j++) shard_start |= starts[j] == off + t && starts[j] < starts[j + 1];
                    int want = (t == 0 && pos == 0) || shard_start || (c.l.reset_docs && all[off + t] == '\n');
                    FUZZ_CHECK(c.rs[i] == want, "reset[%d][%d] = %d, want %d", b, t, c.rs[i], want);
                }
            }
        }
        free(c.in); free(c.tg); free(c.rs);
        stream_free(&c.s);
    }  // rejected: fuzz_end releases whatever was opened
    free(all);
    fuzz_end(ok);
    return 0;
}
