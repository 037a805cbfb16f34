// import_npy: the published mLSTM weights of Radford et al. 2017 into this project's
// checkpoint format, so transfer (tools/transfer.c) runs on them.
//
//   build/import_npy [--hidden H] [--embed D] -o OUT.ckpt DIR
//
// DIR holds the 15 files of openai/generating-reviews-discovering-sentiment, model/0.npy
// ... model/14.npy. Their order and axes, read from that repository's encoder.py (the
// order of its tf.get_variable calls, which load_params feeds from the list of files;
// `params[2] = np.concatenate(params[2:6], axis=1)` joins four files into W_h):
//
//   file   name          shape ([in, out], TF's x @ w)   becomes (ours, [out, in])
//   0      embedding w   [256, D]                        E      [256, D]  (as is)
//   1      wx            [D, 4H]                         W_x    [4H, D]
//   2..5   wh, 4 blocks  [H, H] each, joined on axis 1   W_h    [4H, H]   (block k = gate k)
//   6      wmx           [D, H]                          W_mx   [H, D]
//   7      wmh           [H, H]                          W_mh   [H, H]
//   8      b             [4H]                            b
//   9..12  gx gh gmx gmh [4H] [4H] [H] [H]               g_x g_h g_mx g_mh
//   13     out w         [H, 256]                        W_out  [256, H]
//   14     out b         [256]                           b_out
//
// Gate order i, f, o, u (tf.split of z into 4 along axis 1), as ours. Weight norm:
// tf.nn.l2_normalize(w, dim=0) * g normalises each output column over the input axis,
// which after the transpose is our per-output-row W[j,:] = g[j] V[j,:] / ||V[j,:]||, so
// the files' w is stored as our direction V and g as our gain, unchanged. The output
// layer has no weight norm there (out_wn=False) nor here. The checkpoint gets weight
// norm on, step 0, zero Adam moments, one row of zero carried state (G = 1) and the
// FP32 loss scaler (S = 1), so `train --resume` could also fine-tune it.
//
// Every shape is checked against D and H (from 0.npy and 1.npy) and against --embed
// and --hidden when given; a mismatch names the file, exits 2, and writes nothing.
// .npy: format versions 1-3, little-endian float32 or float64, C or Fortran order.
#include "mlstm.h"
#include "harness/checkpoint.h"  // defines: checkpoint_save_run, CkptHeader, TrainState (the file it writes)
#include "schedule.h"
#include <limits.h>

typedef struct {
    char path[4200];
    uint8_t *raw;       // the whole file
    const uint8_t *data;
    int ndim;
    long shape[2];
    int f64, fortran;
} Npy;

// Parses a .npy file (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html):
// "\x93NUMPY", major, minor, header length (u16 in v1, u32 in v2/v3), a Python dict
// literal with descr, fortran_order and shape, padding, then the raw array.
static void npy_load(Npy *a, const char *dir, int index) {
    memset(a, 0, sizeof *a);
    snprintf(a->path, sizeof a->path, "%s/%d.npy", dir, index);
    int fd = open(a->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // O_NONBLOCK: a FIFO must not hang the open
    if (fd < 0)
        fail("cannot open %s: %s\nHINT: DIR must hold 0.npy ... 14.npy (model/ of "
             "openai/generating-reviews-discovering-sentiment)", a->path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) fail("cannot read %s: %s", a->path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) fail("%s: not a regular file (%s)", a->path, file_kind(sb.st_mode));
    FILE *f = fdopen(fd, "rb");
    if (!f) fail("cannot read %s: %s", a->path, strerror(errno));
    long size = (long)sb.st_size;
    a->raw = (uint8_t *)mallocCheck((size_t)size + 1);
    if (fread(a->raw, 1, (size_t)size, f) != (size_t)size)
        fail("cannot read %s: %s", a->path, ferror(f) ? strerror(errno) : "it is shorter than its size");
    fclose(f);
    if (size < 10 || memcmp(a->raw, "\x93NUMPY", 6) != 0) fail("%s is not a .npy file (bad magic)", a->path);
    int major = a->raw[6];
    size_t hlen = 0, hstart = 0;
    if (major == 1) { hlen = a->raw[8] | (size_t)a->raw[9] << 8; hstart = 10; }
    else if (major == 2 || major == 3) {
        if (size < 12) fail("%s is truncated", a->path);
        hlen = get32(a->raw + 8); hstart = 12;
    } else fail("%s: .npy format version %d is not supported (1, 2, 3 are)", a->path, major);
    if (hstart + hlen > (size_t)size) fail("%s is truncated inside its header", a->path);
    char *hd = (char *)mallocCheck(hlen + 1);
    memcpy(hd, a->raw + hstart, hlen);
    const char *d = strstr(hd, "'descr':"), *fo = strstr(hd, "'fortran_order':"), *sh = strstr(hd, "'shape':");
    if (!d || !fo || !sh) fail("%s: the header has no descr, fortran_order or shape: %s", a->path, hd);
    d = strchr(d + 8, '\'');
    if (!d) fail("%s: cannot read descr in %s", a->path, hd);
    if (!strncmp(d, "'<f4'", 5) || !strncmp(d, "'=f4'", 5)) a->f64 = 0;
    else if (!strncmp(d, "'<f8'", 5) || !strncmp(d, "'=f8'", 5)) a->f64 = 1;
    else fail("%s: dtype %.6s is not supported (little-endian float32 or float64 are)", a->path, d);
    fo += 16;
    while (*fo == ' ') fo++;
    a->fortran = !strncmp(fo, "True", 4);
    sh = strchr(sh, '(');
    if (!sh) fail("%s: cannot read the shape in %s", a->path, hd);
    sh++;
    for (;;) {
        while (*sh == ' ' || *sh == ',') sh++;
        if (*sh == ')') break;
        char *end;
        errno = 0;
        long v = strtol(sh, &end, 10);
        if (end == sh || v < 0 || errno) fail("%s: cannot read the shape in %s", a->path, hd);
        if (a->ndim == 2) fail("%s: %d or more dimensions; the published files have 1 or 2", a->path, 3);
        a->shape[a->ndim++] = v;
        sh = end;
    }
    if (a->ndim == 0) fail("%s: a scalar; the published files are 1- or 2-dimensional", a->path);
    // the element count and byte size, overflow-checked: a shape whose product wraps
    // would otherwise match a small file and be read far out of bounds
    size_t n = 0, bytes = 0;
    if (__builtin_mul_overflow((size_t)a->shape[0], a->ndim == 2 ? (size_t)a->shape[1] : 1, &n) ||
        __builtin_mul_overflow(n, (size_t)(a->f64 ? 8 : 4), &bytes))
        fail("%s: shape (%ld, %ld) is too large (its byte size overflows 64 bits)", a->path, a->shape[0],
             a->ndim == 2 ? a->shape[1] : 1L);
    if ((size_t)size - hstart - hlen != bytes)
        fail("%s: %zu bytes of data, its shape needs %zu (truncated or corrupt)", a->path, (size_t)size - hstart - hlen,
             bytes);
    free(hd);
    a->data = a->raw + hstart + hlen;
}

// Element [i][j] (j = 0 for 1-D) as a float, whatever the dtype and order.
static inline float npy_at(const Npy *a, long i, long j) {
    size_t k = a->ndim == 1 ? (size_t)i : a->fortran ? (size_t)j * a->shape[0] + i : (size_t)i * a->shape[1] + j;
    if (a->f64) { double v; memcpy(&v, a->data + 8 * k, 8); return (float)v; }
    float v;
    memcpy(&v, a->data + 4 * k, 4);
    return v;
}

static const char *const file_names[15] = {"embedding", "W_x", "W_h block i", "W_h block f", "W_h block o",
                                           "W_h block u", "W_mx", "W_mh", "b", "g_x", "g_h", "g_mx", "g_mh", "W_out",
                                           "b_out"};

static void expect_shape(const Npy *a, int index, long r, long c, const char *why) {
    int ok = c < 0 ? a->ndim == 1 && a->shape[0] == r : a->ndim == 2 && a->shape[0] == r && a->shape[1] == c;
    if (ok) return;
    char got[64], want[64];
    if (a->ndim == 1) snprintf(got, sizeof got, "(%ld,)", a->shape[0]);
    else snprintf(got, sizeof got, "(%ld, %ld)", a->shape[0], a->shape[1]);
    if (c < 0) snprintf(want, sizeof want, "(%ld,)", r);
    else snprintf(want, sizeof want, "(%ld, %ld)", r, c);
    fail("%s (%s) has shape %s; expected %s %s", a->path, file_names[index], got, want, why);
}

// --hidden and --embed: a whole positive int, nothing after it (atol read "abc" as 0)

static void usage(void) {
    fprintf(stderr, "usage: import_npy [--hidden H] [--embed D] -o OUT.ckpt DIR\n"
                    "  DIR: the 15 files 0.npy ... 14.npy of the published mLSTM (Radford et al. 2017)\n"
                    "  --hidden H, --embed D: fail unless the files hold this shape\n");
}

int main(int argc, char **argv) {
    std_fds_open();
    file_size_limit_as_error();
    const char *out = NULL, *dir = NULL;
    long want_h = 0, want_d = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(); return 0; }
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--hidden") && i + 1 < argc)
            want_h = parse_whole("--hidden", argv[++i], 1, MAX_HIDDEN);
        else if (!strcmp(argv[i], "--embed") && i + 1 < argc) want_d = parse_whole("--embed", argv[++i], 1, MAX_EMBED);
        else if (argv[i][0] == '-') { usage(); fail("unknown flag or missing value: %s", argv[i]); }
        else if (!dir) dir = argv[i];
        else { usage(); fail("more than one input directory: %s and %s", dir, argv[i]); }
    }
    if (!out || !dir) { usage(); fail("need -o OUT.ckpt and DIR"); }
    output_check(out);  // before reading hundreds of MB
    Npy a[15];
    for (int k = 0; k < 15; k++) {
        char in[4200];
        snprintf(in, sizeof in, "%s/%d.npy", dir, k);
        refuse_same_file("-o", out, "input", in);
        npy_load(&a[k], dir, k);
    }
    if (a[0].ndim != 2 || a[0].shape[0] != 256)
        expect_shape(&a[0], 0, 256, a[0].ndim == 2 ? a[0].shape[1] : 64, "(256 bytes x D)");
    long D = a[0].shape[1];
    if (D < 1 || D > MAX_EMBED) fail("%s (embedding) has shape (256, %ld): D must be 1 to %d", a[0].path, D, MAX_EMBED);
    if (a[1].ndim != 2 || a[1].shape[0] != D || a[1].shape[1] % 4 != 0 || a[1].shape[1] == 0)
        expect_shape(&a[1], 1, D, 4 * (a[1].ndim == 2 && a[1].shape[1] >= 4 ? a[1].shape[1] / 4 : 1),
                     "(D from 0.npy x 4H)");
    long H = a[1].shape[1] / 4;
    if (H > MAX_HIDDEN)
        fail("%s (W_x) has shape (%ld, %ld): H = %ld is more than %d", a[1].path, D, a[1].shape[1], H, MAX_HIDDEN);
    if (want_d && want_d != D) fail("%s holds a model with D=%ld; --embed asks for %ld", dir, D, want_d);
    if (want_h && want_h != H) fail("%s holds a model with H=%ld (from 1.npy); --hidden asks for %ld", dir, H, want_h);
    char why[128];
    snprintf(why, sizeof why, "(D=%ld from 0.npy, H=%ld from 1.npy)", D, H);
    for (int k = 2; k < 6; k++) expect_shape(&a[k], k, H, H, why);
    expect_shape(&a[6], 6, D, H, why);
    expect_shape(&a[7], 7, H, H, why);
    expect_shape(&a[8], 8, 4 * H, -1, why);
    expect_shape(&a[9], 9, 4 * H, -1, why);
    expect_shape(&a[10], 10, 4 * H, -1, why);
    expect_shape(&a[11], 11, H, -1, why);
    expect_shape(&a[12], 12, H, -1, why);
    expect_shape(&a[13], 13, H, 256, why);
    expect_shape(&a[14], 14, 256, -1, why);

    MlstmConfig cfg = {256, (int)D, (int)H, 1};
    Mlstm m;
    mlstm_build(&m, cfg, 1, 1);
    real **t = m.p.t;
    for (long v = 0; v < 256; v++)
        for (long k = 0; k < D; k++) t[P_E][v * D + k] = npy_at(&a[0], v, k);
    for (long j = 0; j < 4 * H; j++) {  // transposes: ours[out][in] = theirs[in][out]
        for (long k = 0; k < D; k++) t[P_WX][j * D + k] = npy_at(&a[1], k, j);
        const Npy *blk = &a[2 + j / H];  // W_h = concat(2..5, axis=1): column j is column j%H of block j/H
        for (long k = 0; k < H; k++) t[P_WH][j * H + k] = npy_at(blk, k, j % H);
        t[P_B][j] = npy_at(&a[8], j, 0);
        t[P_GX][j] = npy_at(&a[9], j, 0);
        t[P_GH][j] = npy_at(&a[10], j, 0);
    }
    for (long j = 0; j < H; j++) {
        for (long k = 0; k < D; k++) t[P_WMX][j * D + k] = npy_at(&a[6], k, j);
        for (long k = 0; k < H; k++) t[P_WMH][j * H + k] = npy_at(&a[7], k, j);
        t[P_GMX][j] = npy_at(&a[11], j, 0);
        t[P_GMH][j] = npy_at(&a[12], j, 0);
    }
    for (long v = 0; v < 256; v++) {
        for (long k = 0; k < H; k++) t[P_WOUT][v * H + k] = npy_at(&a[13], k, v);
        t[P_BOUT][v] = npy_at(&a[14], v, 0);
    }
    for (size_t i = 0; i < m.nparams; i++)
        if (!isfinite(m.params[i])) fail("%s: the weights contain inf or NaN (parameter %zu)", dir, i);
    TrainState st;
    memset(&st, 0, sizeof st);
    st.G = 1;
    LossScaler ls;
    loss_scaler_init(&ls, 0);
    loss_scaler_serialize(&ls, st.scaler);
    real *zero = (real *)mallocCheck(sizeof(real) * (size_t)H);
    checkpoint_save(out, &m, &st, zero, zero);
    printf("import_npy: %s -> %s: D=%ld H=%ld, %zu parameters, weight norm on\n", dir, out, D, H, m.nparams);
    free(zero);
    for (int k = 0; k < 15; k++) free(a[k].raw);
    mlstm_free(&m);
    return 0;
}
