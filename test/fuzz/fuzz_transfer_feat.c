// tools/transfer.c's features file reader (feats_read): what it accepts must be what
// feats_write writes back byte for byte.
//
// Input: u8 mode, then the file. mode bit 0: write the size fields (H, n) the payload
// length allows (n = 1 + mode>>1 documents), so inputs get past the size check.
#include "fuzz.h"
#define main transfer_main
#include "tools/transfer.c"
#undef main

typedef struct { const char *path; Feats f; } Ctx;
static void run(void *arg) { Ctx *x = (Ctx *)arg; feats_read(x->path, &x->f); }
static void write_back(void *arg) { Ctx *x = (Ctx *)arg; feats_write(fuzz_path("out.feat"), &x->f); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    unsigned mode = fuzz_u8(&in);
    size_t n = in.n;
    fuzz_begin();
    uint8_t *file = (uint8_t *)malloc(n + 1);
    memcpy(file, in.p, n);
    if ((mode & 1) && n >= 32) {  // n docs: 32 + 4n + 4nH bytes
        uint64_t docs = 1 + (mode >> 1), body = n - 32;
        if (body % (4 * docs) == 0 && body / (4 * docs) >= 2) { put32(file + 12, (uint32_t)(body / (4 * docs) - 1)); put64(file + 16, docs); }
    }
    Ctx x;
    memset(&x, 0, sizeof x);
    x.path = fuzz_path("in.feat");
    fuzz_write_file(x.path, file, n);
    int ok = fuzz_call(run, &x);
    if (ok) {
        FUZZ_CHECK(fuzz_call(write_back, &x), "feats_write failed");
        FILE *f = fopen(fuzz_path("out.feat"), "rb");
        uint8_t *back = (uint8_t *)malloc(n + 1);
        size_t got = fread(back, 1, n + 1, f);
        fclose(f);
        // bytes 24..31 are reserved (written 0); the rest must come back exactly
        FUZZ_CHECK(got == n && !memcmp(back, file, 24) && !memcmp(back + 32, file + 32, n - 32), "features file does not round-trip");
        free(back);
        free(x.f.label); free(x.f.x);
    }
    free(file);
    fuzz_end(ok);
    return 0;
}
