// tools/import_npy.c: the .npy parser and the shape checks over the 15 files, through
// the tool's own main (renamed), then the checkpoint it writes is read back.
//
// Most random file sets fail at the first shape check, so by default the harness
// writes the 15 files itself, consistent with each other: the input gives D, H
// (small, or any 64-bit value), and per file the dtype, order, format version and
// optionally a shape of its own; each file holds exactly the bytes its shape needs in
// 64-bit arithmetic, as the reader computes it, so shapes whose products wrap are
// reachable. Raw mode writes 15 input pieces as they are, for the header parser.
//
// Input: u8 mode (bit 0: raw; bit 1: pass --hidden H, bit 2: --embed D). Raw: 15
// pieces (u16 length + bytes). Generated: D, H (u8 v: v % 16 if v < 128, else a u64
// follows), then per file u8 flags (bit 0: float64, bit 1: Fortran order, bits 2-3:
// version 1-3, bit 4: a shape of its own follows: u8 ndim (1 or 2), u64, u64; bit 5:
// data bytes from the input instead of 0.5) and the data bytes come from the rest.
#include "fuzz.h"
#define main import_npy_main
#include "tools/import_npy.c"
#undef main

#define MAX_FILE_BYTES (1 << 17)  // room for the wrapped products (256 x (2^62 + 64) f4 needs 64 KB)

// Small D and H keep each input fast (files of a few KB); a u64 reaches any shape.
static uint64_t fuzz_dim(FuzzIn *in) { unsigned v = fuzz_u8(in); return v < 128 ? v % 16 : fuzz_u64(in); }

// One generated .npy file: header for `shape`, then data of the size the shape implies.
static void write_npy(const char *path, unsigned flags, int ndim, uint64_t s0, uint64_t s1, FuzzIn *in) {
    int f64 = flags & 1, version = 1 + (int)((flags >> 2) & 3) % 3;
    char dict[256];
    int n = ndim == 1 ? snprintf(dict, sizeof dict, "{'descr': '<f%d', 'fortran_order': %s, 'shape': (%llu,), }", f64 ? 8 : 4,
                                 flags & 2 ? "True" : "False", (unsigned long long)s0)
                      : snprintf(dict, sizeof dict, "{'descr': '<f%d', 'fortran_order': %s, 'shape': (%llu, %llu), }", f64 ? 8 : 4,
                                 flags & 2 ? "True" : "False", (unsigned long long)s0, (unsigned long long)s1);
    size_t pre = version == 1 ? 10 : 12, hlen = (size_t)n + 1;
    while ((pre + hlen) % 64) hlen++;  // spaces, then '\n', to a multiple of 64 as numpy pads
    uint64_t count = ndim == 1 ? s0 : s0 * s1, bytes = count * (f64 ? 8 : 4);  // wraps as a size_t product does
    if (bytes > MAX_FILE_BYTES) bytes = 0;  // too big to write: the reader must reject it
    uint8_t *buf = (uint8_t *)malloc(pre + hlen + (size_t)bytes);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)version; buf[7] = 0;
    if (version == 1) { buf[8] = (uint8_t)hlen; buf[9] = (uint8_t)(hlen >> 8); }
    else put32(buf + 8, (uint32_t)hlen);
    memset(buf + pre, ' ', hlen);
    memcpy(buf + pre, dict, (size_t)n);
    buf[pre + hlen - 1] = '\n';
    uint8_t *d = buf + pre + hlen;
    static const double half64 = 0.5;
    static const float half32 = 0.5f;
    const uint8_t *src = (flags & 32) && in->n ? in->p : f64 ? (const uint8_t *)&half64 : (const uint8_t *)&half32;
    size_t period = (flags & 32) && in->n ? in->n : f64 ? 8 : 4;
    for (size_t i = 0; i < (size_t)bytes; i += period)  // the input's bytes, or 0.5, over and over
        memcpy(d + i, src, (size_t)bytes - i < period ? (size_t)bytes - i : period);
    fuzz_write_file(path, buf, pre + hlen + (size_t)bytes);
    free(buf);
}

typedef struct { int argc; char *argv[8]; int rc; } Ctx;
static void run(void *arg) { Ctx *x = (Ctx *)arg; x->rc = import_npy_main(x->argc, x->argv); }
static void read_back(void *arg) { checkpoint_header(fuzz_path("out.ckpt"), (CkptHeader *)arg); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    unsigned mode = fuzz_u8(&in);
    uint64_t D = 0, H = 0;
    fuzz_begin();
    if (mode & 1) {
        for (int k = 0; k < 15; k++) {
            char name[16];
            size_t n;
            const uint8_t *p = fuzz_piece(&in, &n);
            snprintf(name, sizeof name, "%d.npy", k);
            fuzz_write_file(fuzz_path(name), p, n);
        }
    } else {
        D = fuzz_dim(&in); H = fuzz_dim(&in);
        // the published files' shapes, [in, out] (see the table in tools/import_npy.c)
        const uint64_t shapes[15][2] = {{256, D}, {D, 4 * H}, {H, H}, {H, H}, {H, H}, {H, H}, {D, H}, {H, H},
                                        {4 * H, 0}, {4 * H, 0}, {4 * H, 0}, {H, 0}, {H, 0}, {H, 256}, {256, 0}};
        unsigned flags[15];
        uint64_t s[15][2];
        int ndim[15];
        for (int k = 0; k < 15; k++) {  // all the choices first; the rest of the input is data
            flags[k] = fuzz_u8(&in);
            s[k][0] = shapes[k][0]; s[k][1] = shapes[k][1];
            ndim[k] = shapes[k][1] || k == 0 || k == 1 || k == 6 || k == 13 ? 2 : 1;
            if (flags[k] & 16) { ndim[k] = 1 + fuzz_u8(&in) % 2; s[k][0] = fuzz_u64(&in); s[k][1] = fuzz_u64(&in); }
        }
        for (int k = 0; k < 15; k++) {
            char name[16];
            snprintf(name, sizeof name, "%d.npy", k);
            write_npy(fuzz_path(name), flags[k], ndim[k], s[k][0], s[k][1], &in);
        }
    }
    Ctx x = {4, {"import_npy", "-o", NULL, NULL}, -1};
    char hid[32], emb[32];
    x.argv[2] = (char *)fuzz_path("out.ckpt");
    x.argv[3] = (char *)fuzz_path("");
    if (mode & 2) { snprintf(hid, sizeof hid, "%llu", (unsigned long long)H); x.argv[x.argc++] = "--hidden"; x.argv[x.argc++] = hid; }
    if (mode & 4) { snprintf(emb, sizeof emb, "%llu", (unsigned long long)D); x.argv[x.argc++] = "--embed"; x.argv[x.argc++] = emb; }
    int ok = fuzz_call(run, &x);
    if (ok) {
        FUZZ_CHECK(x.rc == 0, "import_npy returned %d", x.rc);
        CkptHeader hd;
        FUZZ_CHECK(fuzz_call(read_back, &hd), "the checkpoint import_npy wrote does not read back");
        FUZZ_CHECK(hd.cfg.wnorm == 1 && hd.st.G == 1 && hd.st.step == 0, "checkpoint fields");
        if (!(mode & 1)) FUZZ_CHECK((uint64_t)hd.cfg.D == D && (uint64_t)hd.cfg.H == H, "D=%d H=%d from files made with D=%llu H=%llu",
                                    hd.cfg.D, hd.cfg.H, (unsigned long long)D, (unsigned long long)H);
        unlink(fuzz_path("out.ckpt"));
    }
    fuzz_end(ok);
    return 0;
}
