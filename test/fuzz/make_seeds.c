// The fuzzers' seed corpora: a few small valid inputs per harness, in the input
// layout each harness's header comment describes, made with the project's own
// writers (shard_write, checkpoint_save) so they follow the formats exactly.
//
//   make fuzz-seeds      (build/make_seeds test/fuzz/corpus; the output is committed)
#include "mlstm.h"
#include "harness/checkpoint.h"  // defines: the checkpoint file (CkptHeader, checkpoint_open/read/load, checkpoint_save_run)
#include "data.h"

static const char *root;
static uint8_t buf[1 << 20];
static size_t len;

static void put(const void *p, size_t n) {
    if (len + n > sizeof buf) fail("make_seeds: a seed over %zu bytes", sizeof buf);
    memcpy(buf + len, p, n);
    len += n;
}
static void put8(unsigned v) { uint8_t b = (uint8_t)v; put(&b, 1); }
static void put16(unsigned v) { put8(v & 255); put8(v >> 8); }
static void put64le(uint64_t v) { uint8_t b[8]; put64(b, v); put(b, 8); }
static void puts_(const char *s) { put(s, strlen(s)); }
static void piece(const void *p, size_t n) { put16((unsigned)n); put(p, n); }

static void save(const char *harness, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", root, harness);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/%s/%s", root, harness, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) fail("cannot write %s", path);
    len = 0;
}

static size_t slurp(const char *path, uint8_t *out, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) fail("cannot read %s", path);
    size_t n = fread(out, 1, cap, f);
    fclose(f);
    unlink(path);
    return n;
}

static const char docs[] = "\n Great blender, works well. \n Broke after 2 days. \n Ok. ";

static void shard_seeds(void) {
    static uint8_t file[4096];
    const char *tmp = "make_seeds_shard.tmp";
    // mode 0x1c: fix the size and checksum, verify; then B=2, T=4, world 1, rank 0, step 0
    for (int n = 1; n <= 3; n++) {
        put8(0x1c | (unsigned)(n - 1)); put8(1); put8(3); put8(0); put8(0); put16(0);
        for (int i = 0; i < n; i++) {
            size_t a = (sizeof docs - 1) * (size_t)i / n, b = (sizeof docs - 1) * (size_t)(i + 1) / n;
            shard_write(tmp, docs + a, b - a, SHARD_FRAMED);
            piece(file, slurp(tmp, file, sizeof file));
        }
        char name[32];
        snprintf(name, sizeof name, "framed_%d_shards", n);
        save("shard", name);
    }
    // the header exactly as written, unframed, no fix-ups: world 2, rank 1, step 3
    put8(0x10); put8(0); put8(1); put8(1); put8(1); put16(3);
    shard_write(tmp, "0123456789abcdefghij", 20, 0);
    piece(file, slurp(tmp, file, sizeof file));
    save("shard", "unframed");
}

static void checkpoint_seeds(void) {
    static uint8_t file[1 << 16];
    const char *tmp = "make_seeds_ckpt.tmp";
    for (int wnorm = 0; wnorm <= 1; wnorm++) {
        MlstmConfig cfg = {256, 1, 1, wnorm};
        Mlstm m;
        mlstm_build(&m, cfg, 1, 1);
        mlstm_init(&m, 1);
        TrainState st;
        memset(&st, 0, sizeof st);
        st.G = 1 + wnorm; st.step = 7; st.data_step = 9; st.rng = 11;
        real h[2] = {0.25f, -1}, c[2] = {0.5f, 2};
        static const char run[] = "seq-len\0" "16\0" "steps\0" "9\0";  // weight norm on: a run record too
        size_t run_bytes = wnorm ? sizeof run - 1 : 0;  // whole pairs: without the literal's own final NUL
        if (wnorm) st.run_id = ckpt_run_identity((const uint8_t *)run, run_bytes, &cfg, st.G);
        checkpoint_save_run(tmp, &m, &st, h, c, (const uint8_t *)run, run_bytes, CKPT_VERSION);
        mlstm_free(&m);
        put8(0);
        put(file, slurp(tmp, file, sizeof file));
        save("checkpoint", wnorm ? "wnorm_G2_run" : "plain_G1");
    }
    // D=2, H=2^30, G=2^29-420: nparams about 5 x 2^60, and 4 (3 nparams + 2GH) wraps to
    // 9216 bytes in 64 bits; mode 7 writes those sizes, pads the payload to them and puts
    // the real checksum: accepted before the limits, and transfer asked for 2^63 bytes
    uint8_t hd[CKPT_HEADER_BYTES] = {0};
    memcpy(hd, CKPT_MAGIC, 8);
    put32(hd + CKPT_AT_VERSION, CKPT_VERSION);
    put32(hd + CKPT_AT_HEADER_SIZE, CKPT_HEADER_BYTES);
    put32(hd + CKPT_AT_V, 256);
    put32(hd + CKPT_AT_D, 2);
    put32(hd + CKPT_AT_H, 1u << 30);
    put32(hd + CKPT_AT_WNORM, 1);
    put32(hd + CKPT_AT_G, (1u << 29) - 420);
    put8(7);
    put(hd, sizeof hd);
    save("checkpoint", "wrapping_H");
}

// a .npy file: header for the shape, count float32 values
static size_t npy(uint8_t *out, int ndim, long s0, long s1) {
    char dict[128];
    int n = ndim == 1 ? snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%ld,), }", s0)
                      : snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%ld, %ld), }", s0, s1);
    size_t hlen = (size_t)n + 1;
    while ((10 + hlen) % 64) hlen++;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (uint8_t)hlen; out[9] = 0;
    memset(out + 10, ' ', hlen);
    memcpy(out + 10, dict, (size_t)n);
    out[10 + hlen - 1] = '\n';
    size_t count = (size_t)s0 * (ndim == 2 ? (size_t)s1 : 1);
    for (size_t i = 0; i < count; i++) { float v = 0.25f * (float)(i % 7) - 0.5f; memcpy(out + 10 + hlen + 4 * i, &v, 4); }
    return 10 + hlen + 4 * count;
}

static void npy_seeds(void) {
    // generated mode, D=2 H=1: default flags; then float64 + Fortran + version 2/3 mixes; then data from the input
    unsigned variants[3][2] = {{0, 0}, {0x01 | 0x02 | 0x04, 0x08}, {0x20, 0x20 | 0x01}};
    for (int v = 0; v < 3; v++) {
        put8(v == 1 ? 6 : 0); put8(2); put8(1);
        for (int k = 0; k < 15; k++) put8(variants[v][k & 1]);
        if (v == 2) for (int i = 0; i < 16; i++) put8(0x3e);  // 0x3e3e3e3e: a float near 0.19
        char name[32];
        snprintf(name, sizeof name, "generated_%d", v);
        save("npy", name);
    }
    // D = 2^62 + 64: 256 x D and 4 x D wrap to a few KB in 64 bits, so every size check
    // on those products passes unless it is checked for overflow (without that check, a heap overflow)
    put8(0); put8(0x80); put64le((1ULL << 62) + 64); put8(1);
    for (int k = 0; k < 15; k++) put8(0);
    save("npy", "wrapping_D");
    // raw mode: the 15 files of a D=2, H=1 model as they are
    static uint8_t f[8192];
    const long D = 2, H = 1;
    const long shapes[15][3] = {{2, 256, D}, {2, D, 4 * H}, {2, H, H}, {2, H, H}, {2, H, H}, {2, H, H}, {2, D, H}, {2, H, H},
                                {1, 4 * H, 0}, {1, 4 * H, 0}, {1, 4 * H, 0}, {1, H, 0}, {1, H, 0}, {2, H, 256}, {1, 256, 0}};
    put8(1);
    for (int k = 0; k < 15; k++) piece(f, npy(f, (int)shapes[k][0], shapes[k][1], shapes[k][2]));
    save("npy", "raw");
}

// prepare and labels: u8 mode, u8 fields, [labels: u8 shard bytes], the file
static void prepare_seed(const char *name, unsigned mode, unsigned fields, const char *text) {
    for (int labels = 0; labels <= 1; labels++) {
        put8(mode); put8(fields);
        if (labels) put8(40);
        puts_(text);
        save(labels ? "labels" : "prepare", name);
    }
}

static void prepare_seeds(void) {
    prepare_seed("text", 0, 0, "A fine kettle.\nIt broke\r\n\nthird line, no newline at the end");
    prepare_seed("text_gzip", 4, 0, "gzipped line one\ngzipped line two\n");
    prepare_seed("jsonl", 1, 0, "{\"reviewText\": \"Great \\u00e9 product\", \"overall\": 5.0}\n"
                                "{\"reviewText\": \"bad\\nthing\", \"overall\": 1}\n{\"summary\": \"no text\"}\nnot json\n");
    prepare_seed("jsonl_fields", 1 | 16 | 32, 0x5 << 4 | 1, "{\"text\": \"hi there\", \"label\": \"pos\\titive\"}\n{\"text\": \"x\", \"label\": true}\n");
    prepare_seed("csv", 2, 0, "label,sentence\n1,\"good, really \"\"good\"\"\"\n0,bad\n\n0,\"two\nlines\"\n1,a,extra\n");
    prepare_seed("csv_gzip_strict", 2 | 4 | 8, 0, "overall,reviewText\n5,fine\n1,awful\n");
}

static void transfer_seeds(void) {
    // transfer_text: u8 mode, u8 fields, u8 threshold, the file
    put8(0); put8(0); put8(0);
    puts_("label,sentence\n1,\"a good, \"\"fun\"\" film\"\n0,  dull  \r\n\n1,great\n");
    save("transfer_text", "csv");
    put8(8); put8(0); put8(5);
    puts_("rating,review,extra\n5,loved it,x\n1,hated it,y\n2.5,on the threshold,z\n");
    save("transfer_text", "csv_threshold");
    put8(1); put8(0); put8(0);
    puts_("{\"text\": \"nice\", \"label\": 1}\n{\"reviewText\": \" meh \", \"overall\": 0.0, \"text\": \"t\"}\r\n\n{\"sentence\": \"ok\", \"sentiment\": false}\n");
    save("transfer_text", "jsonl");
    put8(1 | 2 | 4 | 8); put8(0x4 << 4 | 3); put8(6);
    puts_("{\"review\": \"five\", \"overall\": \"5\"}\n{\"review\": \"one\", \"overall\": 1.5}\n");
    save("transfer_text", "jsonl_fields_threshold");
    // transfer_feat: u8 mode, then a features file of n documents x H
    for (int n = 1; n <= 3; n += 2) {
        const int H = 3;
        uint8_t hd[32] = {0};
        memcpy(hd, "MLSTMFEA", 8);
        put32(hd + 8, 1); put32(hd + 12, H); put64(hd + 16, (uint64_t)n);
        put8(0); put(hd, 32);
        for (int i = 0; i < n; i++) { uint8_t b[4]; put32(b, (uint32_t)(i & 1)); put(b, 4); }
        for (int i = 0; i < n * H; i++) { float v = 0.1f * (float)i - 0.3f; put(&v, 4); }
        save("transfer_feat", n == 1 ? "one_doc" : "three_docs");
    }
}

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: make_seeds CORPUS_DIR");
    root = argv[1];
    mkdir(root, 0777);
    shard_seeds();
    checkpoint_seeds();
    npy_seeds();
    prepare_seeds();
    transfer_seeds();
    printf("make_seeds: seeds written under %s\n", root);
    return 0;
}
