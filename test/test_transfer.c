// test_transfer: the transfer evaluation (tools/transfer.c) and the importer of the
// published weights (tools/import_npy.c), run as a user runs them:
//   1. a small model trained for a few seconds on the built-in corpus (whose text
//      carries its star rating) gives features on which the L1 logistic regression
//      is clearly above chance, and so is its best single unit; batching documents of
//      different lengths gives the same features as one document at a time;
//   2. weights written in the published [in, out] .npy layout (four W_h blocks, weight
//      norm over the input axis), imported, and run give the same outputs as the same
//      weights built directly, and as an independent double-precision forward written
//      here the way the published encoder.py computes it;
//   3. bad input (missing columns, empty documents, labels not 0/1, shapes that
//      disagree, missing files, FIFOs) exits 2 with a message that says what is wrong;
//      a run directory reads as its best model; outputs go through symbolic links.
#include "mlstm.h"  // defines: Mlstm, mlstm_build, the parameter table (models written for the tests)
#include "harness/checkpoint.h"  // defines: the checkpoint file (CkptHeader, checkpoint_open/read/load, checkpoint_save_run)
#include "data.h"   // defines: Stream, shard readers (prepared shards as input)
#include "test/test.h"

static char bin[4096], tmp[4096];

// Runs a shell command with stderr to a file; checks exit 2 and that stderr says `needle`.
static void expect_fail(const char *needle, const char *what, const char *fmt, ...) {
    char cmd[8192], full[12400], err[4096] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s >/dev/null 2>%s/err.txt", cmd, tmp);
    int rc = test_system("%s", full);
    char path[4200];
    snprintf(path, sizeof path, "%s/err.txt", tmp);
    FILE *f = fopen(path, "r");
    if (f) { size_t n = fread(err, 1, sizeof err - 1, f); err[n] = 0; fclose(f); }
    char *nl = strrchr(err, '\n');
    if (nl && nl[1] == 0) *nl = 0;
    CHECK(rc == 2 && strstr(err, needle), "%s: exit %d (want 2), stderr \"%s\" (want \"%s\")", what, rc, err, needle);
}

static void write_text(const char *name, const char *text) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    test_write_file(path, text, strlen(text));
}

// A features file (tools/transfer.c): "MLSTMFEA", u32 1, u32 H, u64 n, u64 0, n i32 labels, n x H f32.
typedef struct { int n, H; int *label; float *x; } Feats;
static int feats_read(const char *path, Feats *f) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    uint8_t hd[32];
    int ok = fread(hd, 1, 32, fp) == 32 && !memcmp(hd, "MLSTMFEA", 8);
    if (ok) {
        f->H = (int)get32(hd + 12); f->n = (int)get64(hd + 16);
        f->label = (int *)mallocCheck(sizeof(int) * f->n);
        f->x = (float *)mallocCheck(sizeof(float) * (size_t)f->n * f->H);
        uint8_t b[4];
        for (int i = 0; i < f->n && ok; i++) { ok = fread(b, 1, 4, fp) == 4; f->label[i] = (int)get32(b); }
        ok = ok && fread(f->x, sizeof(float), (size_t)f->n * f->H, fp) == (size_t)f->n * f->H;
    }
    fclose(fp);
    return ok;
}

static double summary_value(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, k) && line[k] == '=') v = atof(line + k + 1);
    fclose(f);
    return v;
}

// ----------------------------------------------------------------------------
// 1. the built-in corpus, end to end

static void test_pipeline(void) {
#ifdef SANITIZED  // about 10x slower under ASan+UBSan at -O1: a smaller model and fewer documents, the same checks
    const int H = 32, steps = 60, docs = 150;
#else
    const int H = 64, steps = 150, docs = 400;
#endif
    // one thread: on a shared 2-core machine OpenMP barriers under contention cost more than they give
    int rc = test_system("%s/train --hidden %d --steps %d --corpus-bytes 400000 --sample-len 0 --val-every 0 --print-every 1000 "
                         "--threads 1 --out %s/run >%s/train.out 2>&1", bin, H, steps, tmp, tmp);
    CHECK(rc == 0, "train --hidden %d --steps %d: exit %d (see %s/train.out)", H, steps, rc, tmp);
    const char *split[3] = {"train", "val", "test"};
    for (int k = 0; k < 3; k++) {
        rc = test_system("%s/transfer featurize -m %s/run/latest.ckpt -o %s/%s.feat --docs %d --threads 1 builtin:%s >>%s/transfer.out 2>&1",
                         bin, tmp, tmp, split[k], docs, split[k], tmp);
        CHECK(rc == 0, "featurize builtin:%s: exit %d", split[k], rc);
    }
    rc = test_system("%s/transfer classify --summary %s/summary.txt %s/train.feat %s/val.feat %s/test.feat >%s/classify.out 2>&1",
                     bin, tmp, tmp, tmp, tmp, tmp);
    CHECK(rc == 0, "classify: exit %d", rc);
    char sp[4200];
    snprintf(sp, sizeof sp, "%s/summary.txt", tmp);
    Feats te;
    char fp[4200];
    snprintf(fp, sizeof fp, "%s/test.feat", tmp);
    double majority = 0;
    if (feats_read(fp, &te)) {
        int pos = 0;
        for (int i = 0; i < te.n; i++) pos += te.label[i];
        majority = (double)(pos > te.n - pos ? pos : te.n - pos) / te.n;
        CHECK(te.n == docs && te.H == H && pos == docs / 2, "test.feat: %d documents (%d positive) of %d features (want %d, %d, %d)", te.n, pos, te.H, docs, docs / 2, H);
        free(te.label); free(te.x);
    } else CHECK(0, "cannot read %s", fp);
    double acc = summary_value(sp, "test_acc"), unit_acc = summary_value(sp, "best_unit_test_acc");
    int used = (int)summary_value(sp, "features_used");
    // The splits are balanced: chance is 50%. Measured 2026-11-29: see doc/transfer.md
    // (an untrained model, 1 step, gives about 80% with all units, so 90% needs training).
    CHECK(acc >= 0.90, "built-in corpus, %d steps of H=%d: test accuracy %.4f >= 0.90 (chance %.2f)", steps, H, acc, majority);
    CHECK(unit_acc >= 0.60, "best single unit alone (chosen on train): test accuracy %.4f >= 0.60 (chance %.2f)", unit_acc, majority);
    CHECK(used >= 1 && used <= H, "features used %d in 1..%d", used, H);

    // the heat map of that unit: an HTML page, and a PNG when gnuplot is here
    int unit = (int)summary_value(sp, "unit"), sign = (int)summary_value(sp, "sign");
    rc = test_system("%s/transfer heatmap -m %s/run/latest.ckpt --unit %d --sign %d --center %g --reviews 4 -o %s/heat --docs 40 builtin:test >%s/heat.out 2>&1",
                     bin, tmp, unit, sign, summary_value(sp, "unit_threshold"), tmp, tmp);
    CHECK(rc == 0, "heatmap: exit %d", rc);
    snprintf(fp, sizeof fp, "%s/heat.html", tmp);
    struct stat sb;
    CHECK(stat(fp, &sb) == 0 && sb.st_size > 1000, "heatmap wrote %s (%lld bytes)", fp, (long long)(stat(fp, &sb) == 0 ? sb.st_size : -1));
    if (test_system("command -v gnuplot >/dev/null 2>&1") == 0) {
        snprintf(fp, sizeof fp, "%s/heat.png", tmp);
        CHECK(stat(fp, &sb) == 0 && sb.st_size > 1000, "heatmap drew %s with gnuplot", fp);
    }

    // batching: documents of different lengths, 16 at once in windows of 7 steps, give
    // the features of one document at a time in one long window. The documents are
    // built-in ones written to a CSV, so the test knows each one's length.
    enum { NB = 50 };
    size_t len[NB];
    char csv[4200], text[CORPUS_DOC_MAX];
    snprintf(csv, sizeof csv, "%s/batch.csv", tmp);
    FILE *cf = fopen(csv, "w");
    if (!cf) { perror(csv); exit(1); }
    fputs("label,sentence\n", cf);
    uint64_t rs = 99;
    for (int i = 0; i < NB;) {
        int stars = corpus_document(&rs, text, sizeof text, &len[i]);
        if (stars == 3) continue;
        fprintf(cf, "%d,\"", stars > 3);
        for (size_t k = 0; k < len[i]; k++) { if (text[k] == '"') fputc('"', cf); fputc(text[k], cf); }
        fputs("\"\n", cf);
        len[i++] += 3;  // framed: "\n " + text + " "
    }
    fclose(cf);
    rc = test_system("%s/transfer featurize -m %s/run/latest.ckpt -o %s/b16.feat --batch 16 --seq-len 7 --threads 1 %s >/dev/null 2>&1 && "
                     "%s/transfer featurize -m %s/run/latest.ckpt -o %s/b1.feat --batch 1 --seq-len 512 --threads 1 %s >/dev/null 2>&1",
                     bin, tmp, tmp, csv, bin, tmp, tmp, csv);
    CHECK(rc == 0, "featurize --batch 16 --seq-len 7 and --batch 1 --seq-len 512: exit %d", rc);
    Feats a, b;
    char pa[4200], pb[4200];
    snprintf(pa, sizeof pa, "%s/b16.feat", tmp);
    snprintf(pb, sizeof pb, "%s/b1.feat", tmp);
    if (feats_read(pa, &a) && feats_read(pb, &b) && a.n == b.n && a.n == NB && a.H == b.H) {
        // Tolerance. Both runs do the same FP32 arithmetic but for the order of the sums
        // in the matmuls' dot products: 16 rows take mlstm.h's 4-row kernel, one row the
        // 1-row kernel, and the compiler vectorises each with the -march's vector width
        // and tuning, so a dot product of K = H terms may round differently; such
        // differences grow like sqrt(K) u, u = 2^-24 (Higham, Accuracy and Stability of
        // Numerical Algorithms, sec. 3.1, the probabilistic bound). The feature c is a
        // running sum over the document's L steps (c_t = f c_{t-1} + i u), so each
        // step's difference adds to it: |dc| <= L sqrt(H) u max|c| per document. A
        // batching bug (another row's state, a pad byte read) changes c by a large
        // fraction of |c|. Measured (H=64): 0 with -march=native on AVX-512 and with
        // x86-64-v2/v3 builds; 2.29e-5 on |c| = 76 with -march=znver2 (AVX2), 2% of the bound.
        double worst = 0;  // the largest |diff| as a fraction of its document's bound
        int same_labels = 1, at = 0;
        for (int i = 0; i < a.n; i++) {
            double d = 0, scale = 0;
            same_labels &= a.label[i] == b.label[i];
            for (int j = 0; j < a.H; j++) {
                size_t k = (size_t)i * a.H + j;
                d = fmax(d, fabs(a.x[k] - b.x[k]));
                scale = fmax(scale, fabs(b.x[k]));
            }
            double bound = (double)len[i] * sqrt((double)a.H) * 0x1p-24 * scale;
            if (d / bound > worst) { worst = d / bound; at = i; }
        }
        CHECK(worst <= 1 && same_labels, "batched (16 docs, 7-step windows) vs one at a time: max |diff| %.1f%% of L sqrt(H) u max|c| "
              "(document %d, L = %zu), labels equal %d", 100 * worst, at, len[at], same_labels);
        free(a.label); free(a.x); free(b.label); free(b.x);
    } else CHECK(0, "cannot read %s and %s, or they differ in size", pa, pb);
}

// ----------------------------------------------------------------------------
// 2. the importer. The published layout: [in, out] matrices, W_h as four [H, H]
// blocks (one per gate, joined on axis 1), weight norm over axis 0.

// Writes a .npy file (format 1.0, '<f4' or '<f8', C or Fortran order) of rows x cols
// (cols = 0: 1-D). x is [rows][cols] row-major.
// Opens DIR/INDEX.npy and writes a format 1.0 header with this dtype, order and shape text.
static FILE *npy_header(const char *dir, int index, const char *descr, int fortran, const char *shape) {
    char path[4300], hd[256];
    snprintf(path, sizeof path, "%s/%d.npy", dir, index);
    int n = snprintf(hd, sizeof hd, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, fortran ? "True" : "False", shape);
    while ((10 + n + 1) % 64) hd[n++] = ' ';
    hd[n++] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(n & 255), (uint8_t)(n >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(hd, 1, (size_t)n, f);
    return f;
}

static void npy_write(const char *dir, int index, const double *x, long rows, long cols, int f64, int fortran) {
    char shape[64];
    if (cols) snprintf(shape, sizeof shape, "(%ld, %ld)", rows, cols); else snprintf(shape, sizeof shape, "(%ld,)", rows);
    FILE *f = npy_header(dir, index, f64 ? "<f8" : "<f4", fortran, shape);
    long c = cols ? cols : 1;
    for (long q = 0; q < rows * c; q++) {
        long i = fortran ? q % rows : q / c, j = fortran ? q / rows : q % c;
        double v = x[i * c + j];
        if (f64) fwrite(&v, 8, 1, f);
        else { float s = (float)v; fwrite(&s, 4, 1, f); }
    }
    fclose(f);
}

// The published model's arrays, [in, out], double.
typedef struct { int D, H; double *emb, *wx, *wh, *wmx, *wmh, *b, *gx, *gh, *gmx, *gmh, *wout, *bout; } Published;

static double sigm(double x) { return 1 / (1 + exp(-x)); }

// encoder.py's mlstm(), in double: w = l2_normalize(w, axis 0) * g; m = (x wmx) * (h wmh);
// z = x wx + m wh + b; i, f, o, u = split(z, 4); c = f c + i u; h = o tanh(c).
static void published_forward(const Published *p, const uint8_t *bytes, int T, double *h, double *c, double *logits) {
    int D = p->D, H = p->H;
    double *nx = calloc(4 * H, sizeof(double)), *nh = calloc(4 * H, sizeof(double)), *nmx = calloc(H, sizeof(double)), *nmh = calloc(H, sizeof(double));
    for (int j = 0; j < 4 * H; j++) {
        for (int k = 0; k < D; k++) nx[j] += p->wx[k * 4 * H + j] * p->wx[k * 4 * H + j];
        for (int k = 0; k < H; k++) nh[j] += p->wh[k * 4 * H + j] * p->wh[k * 4 * H + j];
    }
    for (int j = 0; j < H; j++) {
        for (int k = 0; k < D; k++) nmx[j] += p->wmx[k * H + j] * p->wmx[k * H + j];
        for (int k = 0; k < H; k++) nmh[j] += p->wmh[k * H + j] * p->wmh[k * H + j];
    }
    double *z = calloc(4 * H, sizeof(double)), *m = calloc(H, sizeof(double));
    for (int j = 0; j < H; j++) h[j] = c[j] = 0;
    for (int t = 0; t < T; t++) {
        const double *x = p->emb + bytes[t] * D;
        for (int j = 0; j < H; j++) {
            double a = 0, bb = 0;
            for (int k = 0; k < D; k++) a += x[k] * p->wmx[k * H + j];
            for (int k = 0; k < H; k++) bb += h[k] * p->wmh[k * H + j];
            m[j] = a * p->gmx[j] / sqrt(nmx[j]) * bb * p->gmh[j] / sqrt(nmh[j]);
        }
        for (int j = 0; j < 4 * H; j++) {
            double a = 0, bb = 0;
            for (int k = 0; k < D; k++) a += x[k] * p->wx[k * 4 * H + j];
            for (int k = 0; k < H; k++) bb += m[k] * p->wh[k * 4 * H + j];
            z[j] = a * p->gx[j] / sqrt(nx[j]) + bb * p->gh[j] / sqrt(nh[j]) + p->b[j];
        }
        for (int j = 0; j < H; j++) {
            c[j] = sigm(z[H + j]) * c[j] + sigm(z[j]) * tanh(z[3 * H + j]);
            h[j] = sigm(z[2 * H + j]) * tanh(c[j]);
        }
    }
    for (int v = 0; v < 256; v++) {
        logits[v] = p->bout[v];
        for (int k = 0; k < H; k++) logits[v] += h[k] * p->wout[k * 256 + v];
    }
    free(nx); free(nh); free(nmx); free(nmh); free(z); free(m);
}

static void test_import(void) {
    const int D = 5, H = 8;
    uint64_t s = 42;
    Published p = {D, H, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    double **arrs[12] = {&p.emb, &p.wx, &p.wh, &p.wmx, &p.wmh, &p.b, &p.gx, &p.gh, &p.gmx, &p.gmh, &p.wout, &p.bout};
    long sizes[12] = {256L * D, D * 4L * H, H * 4L * H, (long)D * H, (long)H * H, 4L * H, 4L * H, 4L * H, H, H, H * 256L, 256};
    for (int k = 0; k < 12; k++) {
        *arrs[k] = calloc((size_t)sizes[k], sizeof(double));
        for (long i = 0; i < sizes[k]; i++)  // gains around 1..2; the rest like an initialised model, scaled up a little
            (*arrs[k])[i] = (k >= 6 && k <= 9) ? 1 + rng_uniform(&s) : (2 * rng_uniform(&s) - 1) * (k == 0 ? 1.0 : 0.8);
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/npy", tmp);
    test_system("mkdir -p %s", dir);
    npy_write(dir, 0, p.emb, 256, D, 0, 0);
    npy_write(dir, 1, p.wx, D, 4 * H, 0, 0);
    double *blk = calloc((size_t)H * H, sizeof(double));
    for (int g = 0; g < 4; g++) {  // block g: columns [g H, (g+1) H) of wh
        for (int i = 0; i < H; i++)
            for (int j = 0; j < H; j++) blk[i * H + j] = p.wh[i * 4 * H + g * H + j];
        npy_write(dir, 2 + g, blk, H, H, 0, 0);
    }
    npy_write(dir, 6, p.wmx, D, H, 0, 0);
    npy_write(dir, 7, p.wmh, H, H, 0, 1);   // Fortran order: the importer must read it as the same matrix
    npy_write(dir, 8, p.b, 4 * H, 0, 0, 0);
    npy_write(dir, 9, p.gx, 4 * H, 0, 0, 0);
    npy_write(dir, 10, p.gh, 4 * H, 0, 0, 0);
    npy_write(dir, 11, p.gmx, H, 0, 0, 0);
    npy_write(dir, 12, p.gmh, H, 0, 0, 0);
    npy_write(dir, 13, p.wout, H, 256, 1, 0); // float64: converted on import
    npy_write(dir, 14, p.bout, 256, 0, 0, 0);
    int rc = test_system("%s/import_npy --hidden %d --embed %d -o %s/imported.ckpt %s >%s/import.out 2>&1", bin, H, D, tmp, dir, tmp);
    CHECK(rc == 0, "import_npy of a D=%d H=%d model in the published layout: exit %d", D, H, rc);
    // a file-size limit (ulimit -f) is met as a full disk: one line naming the checkpoint, exit 2, no temporary
    int rc_limit = test_system("cd %s && (ulimit -f 1; %s/import_npy -o small.ckpt %s > import_limit.out 2>&1)", tmp,
                               bin, dir);
    CHECK(rc_limit == 2 && test_system("grep -q '^error: cannot write small.ckpt: File too large' %s/import_limit.out",
                                       tmp) == 0 && test_system("ls %s | grep -q '^small[.]ckpt'", tmp) != 0,
          "import_npy under ulimit -f: exit %d (153: SIGXFSZ), the checkpoint named, no temporary left", rc_limit);

    // the same weights built directly: ours[out][in] = theirs[in][out], as floats
    MlstmConfig cfg = {256, D, H, 1};
    Mlstm direct, imported;
    const int T = 37;
    mlstm_build(&direct, cfg, 1, T);
    mlstm_build(&imported, cfg, 1, T);
    real **t = direct.p.t;
    for (int i = 0; i < 256 * D; i++) t[P_E][i] = (float)p.emb[i];
    for (int j = 0; j < 4 * H; j++) {
        for (int k = 0; k < D; k++) t[P_WX][j * D + k] = (float)p.wx[k * 4 * H + j];
        for (int k = 0; k < H; k++) t[P_WH][j * H + k] = (float)p.wh[k * 4 * H + j];
        t[P_B][j] = (float)p.b[j]; t[P_GX][j] = (float)p.gx[j]; t[P_GH][j] = (float)p.gh[j];
    }
    for (int j = 0; j < H; j++) {
        for (int k = 0; k < D; k++) t[P_WMX][j * D + k] = (float)p.wmx[k * H + j];
        for (int k = 0; k < H; k++) t[P_WMH][j * H + k] = (float)p.wmh[k * H + j];
        t[P_GMX][j] = (float)p.gmx[j]; t[P_GMH][j] = (float)p.gmh[j];
    }
    for (int v = 0; v < 256; v++) {
        for (int k = 0; k < H; k++) t[P_WOUT][v * H + k] = (float)p.wout[k * 256 + v];
        t[P_BOUT][v] = (float)p.bout[v];
    }
    char ck[4200];
    snprintf(ck, sizeof ck, "%s/imported.ckpt", tmp);
    TrainState st;
    memset(&st, 0, sizeof st);
    real h0[8] = {0}, c0[8] = {0};
    if (rc == 0) checkpoint_load(ck, &imported, &st, h0, c0, 1);
    CHECK(rc == 0 && st.step == 0 && st.G == 1, "imported checkpoint: step %llu, G %d (want 0, 1)", (unsigned long long)st.step, st.G);
    size_t differ = 0;
    for (size_t i = 0; i < direct.nparams; i++) differ += direct.params[i] != imported.params[i];
    CHECK(differ == 0, "imported parameters equal the directly built ones: %zu of %zu differ", differ, direct.nparams);

    const char *text = "\n This blender is great, I love it! ";
    uint8_t in[64];
    for (int i = 0; i < T; i++) in[i] = (uint8_t)text[i];
    double l1 = mlstm_forward(&direct, in, in + 1, NULL, h0, c0, 1, T - 1);
    double l2 = mlstm_forward(&imported, in, in + 1, NULL, h0, c0, 1, T - 1);
    real *c2 = mlstm_c_out(&imported), *h2 = mlstm_h_out(&imported);
    CHECK(l1 == l2, "loss of the directly built model %.9f == the imported one %.9f", l1, l2);
    // an independent forward in double, written from encoder.py: the final state and logits
    double hr[8], cr[8], lr[256];
    published_forward(&p, in, T - 1, hr, cr, lr);
    // Tolerances: the imported model runs in FP32 on weights rounded to FP32, the
    // reference in double. Each of the T steps rounds dot products of at most K = H
    // terms (errors growing like sqrt(K) u, u = 2^-24, Higham sec. 3.1), and c carries
    // every step's error on: |dc|, |dh| <= T sqrt(H) u max|c| (measured: 2% of it).
    double worst = 0, scale = 0;
    for (int j = 0; j < H; j++) {
        worst = fmax(worst, fmax(fabs(c2[j] - cr[j]), fabs(h2[j] - hr[j])));
        scale = fmax(scale, fabs(cr[j]));
    }
    double bound = (T - 1) * sqrt((double)H) * 0x1p-24 * scale;
    CHECK(worst <= bound && scale > 0.05, "imported model vs encoder.py's math in double: final h, c max |diff| %.3g <= T sqrt(H) u max|c| = %.3g (|c| up to %.3f)",
          worst, bound, scale);
    // the last step's logits: probs are softmax(logits); compare log-ratios against v = 0.
    // A logit sums H terms of h (whose error is bounded above) times weights, and the
    // softmax adds a few u of |logit| of its own:
    // |d log-ratio| <= T sqrt(H) u (sum_k (|w_vk| + |w_0k|) max|c| + |logit_v| + |logit_0| + 1).
    const real *pr = imported.probs + (size_t)(T - 2) * 256;
    double wl = 0, lbound = 0;
    for (int v = 1; v < 256; v++) {
        double wsum = 0;
        for (int k = 0; k < H; k++) wsum += fabs(p.wout[k * 256 + v]) + fabs(p.wout[k * 256]);
        wl = fmax(wl, fabs(log(pr[v] / pr[0]) - (lr[v] - lr[0])));
        lbound = fmax(lbound, (T - 1) * sqrt((double)H) * 0x1p-24 * (wsum * scale + fabs(lr[v]) + fabs(lr[0]) + 1));
    }
    CHECK(wl <= lbound, "output layer: log-probability ratios max |diff| %.3g <= %.3g", wl, lbound);
    mlstm_free(&direct);
    mlstm_free(&imported);

    // bad importer input
    expect_fail("--hidden asks for 16", "import_npy --hidden 16 on an H=8 model", "%s/import_npy --hidden 16 -o %s/x.ckpt %s", bin, tmp, dir);
    double *bad = calloc((size_t)(H + 1) * (H + 1), sizeof(double));
    char dir2[4200];
    snprintf(dir2, sizeof dir2, "%s/npy_bad", tmp);
    test_system("rm -rf %s && cp -r %s %s", dir2, dir, dir2);
    npy_write(dir2, 7, bad, H + 1, H + 1, 0, 0);
    expect_fail("7.npy (W_mh) has shape (9, 9); expected (8, 8)", "import_npy with a W_mh that disagrees with H", "%s/import_npy -o %s/x.ckpt %s", bin, tmp, dir2);
    npy_write(dir2, 7, p.wmh, H, H, 0, 0);
    npy_write(dir2, 3, bad, H, H - 1, 0, 0);
    expect_fail("3.npy (W_h block f) has shape (8, 7)", "import_npy with a W_h block of the wrong width", "%s/import_npy -o %s/x.ckpt %s", bin, tmp, dir2);
    test_system("rm -f %s/14.npy", dir2);
    expect_fail("14.npy: No such file", "import_npy with a file missing", "%s/import_npy -o %s/x.ckpt %s", bin, tmp, dir2);
    write_text("npy_bad/0.npy", "not numpy at all");
    expect_fail("not a .npy file", "import_npy with a file that is not .npy", "%s/import_npy -o %s/x.ckpt %s", bin, tmp, dir2);
    // a shape whose element count wraps past 2^64 (256 x (2^62 + 64) = 2^14 mod 2^64) must
    // not match a small file: the files below are consistent with the wrapped sizes
    test_system("rm -rf %s && cp -r %s %s", dir2, dir, dir2);
    const unsigned long long Dw = (1ULL << 62) + 64;
    char shp[64];
    FILE *nf;
    snprintf(shp, sizeof shp, "(256, %llu)", Dw);
    nf = npy_header(dir2, 0, "<f4", 0, shp);  // 2^14 elements after the wrap
    for (int i = 0; i < 1 << 14; i++) { float z = 0.5f; fwrite(&z, 4, 1, nf); }
    fclose(nf);
    snprintf(shp, sizeof shp, "(%llu, %d)", Dw, 4 * H);
    nf = npy_header(dir2, 1, "<f4", 0, shp);
    for (int i = 0; i < 64 * 4 * H; i++) { float z = 0.5f; fwrite(&z, 4, 1, nf); }
    fclose(nf);
    snprintf(shp, sizeof shp, "(%llu, %d)", Dw, H);
    nf = npy_header(dir2, 6, "<f4", 0, shp);
    for (int i = 0; i < 64 * H; i++) { float z = 0.5f; fwrite(&z, 4, 1, nf); }
    fclose(nf);
    expect_fail("0.npy: shape (256, 4611686018427387968) is too large", "import_npy with D = 2^62 + 64 (a wrapping size)",
                "%s/import_npy -o %s/x.ckpt %s", bin, tmp, dir2);
    test_system("rm -rf %s && cp -r %s %s", dir2, dir, dir2);
    fclose(npy_header(dir2, 0, "<f4", 0, "(256, 0)"));  // and 1.npy, 6.npy consistent with D = 0
    snprintf(shp, sizeof shp, "(0, %d)", 4 * H);
    fclose(npy_header(dir2, 1, "<f4", 0, shp));
    snprintf(shp, sizeof shp, "(0, %d)", H);
    fclose(npy_header(dir2, 6, "<f4", 0, shp));
    expect_fail("0.npy (embedding) has shape (256, 0): D must be", "import_npy with D = 0", "%s/import_npy -o %s/x.ckpt %s", bin, tmp, dir2);
    test_system("rm -rf %s && cp -r %s %s && rm %s/3.npy && mkdir %s/3.npy", dir2, dir, dir2, dir2, dir2);
    expect_fail("3.npy: not a regular file", "import_npy with 3.npy a directory", "%s/import_npy -o %s/x.ckpt %s", bin, tmp, dir2);
    expect_fail("--hidden: expected a whole number, got \"abc\"", "import_npy --hidden abc", "%s/import_npy --hidden abc -o %s/x.ckpt %s", bin, tmp, dir);
    expect_fail("--embed: must be between 1 and 65536, got 4294967301", "import_npy --embed 2^32 + 5",
                "%s/import_npy --embed 4294967301 -o %s/x.ckpt %s", bin, tmp, dir);
    struct stat sb;
    snprintf(ck, sizeof ck, "%s/x.ckpt", tmp);
    CHECK(stat(ck, &sb) != 0, "a failed import leaves no checkpoint behind");
    free(bad); free(blk);
    for (int k = 0; k < 12; k++) free(*arrs[k]);
}

// ----------------------------------------------------------------------------
// 3. the readers, and bad input

static int feats_count(const char *name, int *n_pos) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    Feats f;
    if (!feats_read(path, &f)) return -1;
    *n_pos = 0;
    for (int i = 0; i < f.n; i++) *n_pos += f.label[i];
    free(f.label); free(f.x);
    return f.n;
}

static void test_inputs(void) {
    const char *m = "-m", *T = "transfer featurize";
    int pos = 0, n;
    char ck[4200];
    snprintf(ck, sizeof ck, "%s/imported.ckpt", tmp);  // any model will do: the tiny imported one
    // CSV as RFC 4180: quotes, "" escapes, a newline inside quotes, CRLF, a blank line
    write_text("ok.csv", "label,sentence\r\n1,\"Funny, warm and \"\"smart\"\".\"\r\n0,dull\n\n1,\"two\nlines\"\n");
    int rc = test_system("%s/%s %s %s -o %s/ok.feat %s/ok.csv >/dev/null 2>&1", bin, T, m, ck, tmp, tmp);
    n = feats_count("ok.feat", &pos);
    CHECK(rc == 0 && n == 3 && pos == 2, "RFC 4180 CSV: exit %d, %d documents, %d positive (want 0, 3, 2)", rc, n, pos);
    // JSON lines with 1-5 ratings, binarised at 3: 3 is dropped
    write_text("ok.jsonl", "{\"reviewText\": \"great\", \"overall\": 5.0}\n{\"reviewText\": \"meh\", \"overall\": 3}\n"
                           "{\"reviewText\": \"bad\", \"overall\": 1}\n{\"reviewText\": \"good\", \"overall\": 4}\n");
    rc = test_system("%s/%s %s %s -o %s/okj.feat --threshold 3 %s/ok.jsonl >/dev/null 2>&1", bin, T, m, ck, tmp, tmp);
    n = feats_count("okj.feat", &pos);
    CHECK(rc == 0 && n == 3 && pos == 2, "JSON lines --threshold 3: exit %d, %d documents, %d positive (want 0, 3, 2)", rc, n, pos);
    // IMDB layout
    test_system("mkdir -p %s/imdb/pos %s/imdb/neg", tmp, tmp);
    write_text("imdb/pos/1_9.txt", "A fine film.<br /><br />Loved it.\n");
    write_text("imdb/pos/2_8.txt", "Good.");
    write_text("imdb/neg/3_1.txt", "Awful.");
    rc = test_system("%s/%s %s %s -o %s/oki.feat %s/imdb >/dev/null 2>&1", bin, T, m, ck, tmp, tmp);
    n = feats_count("oki.feat", &pos);
    CHECK(rc == 0 && n == 3 && pos == 2, "IMDB pos/ neg/ layout: exit %d, %d documents, %d positive (want 0, 3, 2)", rc, n, pos);

    // bad input: exit 2 and a message naming the problem
    write_text("nocol.csv", "label,words\n1,hello\n");
    expect_fail("nocol.csv:1: no text (reviewText, text, sentence, review) column; the header has: label,words", "CSV without a text column", "%s/%s %s %s -o %s/x.feat %s/nocol.csv", bin, T, m, ck, tmp, tmp);
    write_text("nolab.csv", "score,sentence\n1,hello\n");
    expect_fail("nolab.csv:1: no label (overall, label, stars, rating, sentiment) column", "CSV without a label column", "%s/%s %s %s -o %s/x.feat %s/nolab.csv", bin, T, m, ck, tmp, tmp);
    write_text("short.csv", "label,sentence\n1,hello\n0\n");
    expect_fail("short.csv:3: 1 fields, the header has 2 (missing column)", "CSV row with a missing column", "%s/%s %s %s -o %s/x.feat %s/short.csv", bin, T, m, ck, tmp, tmp);
    write_text("empty.csv", "label,sentence\n1,hello\n0,\"  \"\n");
    expect_fail("empty.csv:3: empty document", "CSV with an empty document", "%s/%s %s %s -o %s/x.feat %s/empty.csv", bin, T, m, ck, tmp, tmp);
    write_text("lab.csv", "label,sentence\n1,hello\n2,there\n");
    expect_fail("lab.csv:3: label \"2\" is not 0 or 1", "CSV label 2", "%s/%s %s %s -o %s/x.feat %s/lab.csv", bin, T, m, ck, tmp, tmp);
    write_text("labtxt.csv", "label,sentence\npositive,hello\n");
    expect_fail("label \"positive\" is not a number", "CSV label 'positive'", "%s/%s %s %s -o %s/x.feat %s/labtxt.csv", bin, T, m, ck, tmp, tmp);
    write_text("quote.csv", "label,sentence\n1,\"never closed\n");
    expect_fail("quote.csv:2: unterminated quoted field", "CSV with an unterminated quote", "%s/%s %s %s -o %s/x.feat %s/quote.csv", bin, T, m, ck, tmp, tmp);
    expect_fail("ok.jsonl:1: label \"5\" is not 0 or 1", "JSON ratings without --threshold", "%s/%s %s %s -o %s/x.feat %s/ok.jsonl", bin, T, m, ck, tmp, tmp);
    write_text("nolab.jsonl", "{\"text\": \"great\"}\n");
    expect_fail("nolab.jsonl:1: no label field", "JSON line without a label", "%s/%s %s %s -o %s/x.feat %s/nolab.jsonl", bin, T, m, ck, tmp, tmp);
    write_text("empty.jsonl", "{\"text\": \"\", \"label\": 1}\n");
    expect_fail("empty.jsonl:1: empty document", "JSON line with empty text", "%s/%s %s %s -o %s/x.feat %s/empty.jsonl", bin, T, m, ck, tmp, tmp);
    test_system("mkdir -p %s/imdb2/pos", tmp);
    write_text("imdb2/pos/1.txt", "ok");
    expect_fail("imdb2/neg", "IMDB directory without neg/", "%s/%s %s %s -o %s/x.feat %s/imdb2", bin, T, m, ck, tmp, tmp);
    write_text("imdb/neg/4_2.txt", " \n");
    expect_fail("4_2.txt: empty document", "IMDB with an empty review file", "%s/%s %s %s -o %s/x.feat %s/imdb", bin, T, m, ck, tmp, tmp);
    expect_fail("cannot open", "a missing input file", "%s/%s %s %s -o %s/x.feat %s/missing.csv", bin, T, m, ck, tmp, tmp);
    expect_fail("cannot open checkpoint", "a missing checkpoint", "%s/%s %s %s/missing.ckpt -o %s/x.feat %s/ok.csv", bin, T, m, tmp, tmp, tmp);
    expect_fail("builtin:dev: the split must be", "a builtin split that does not exist", "%s/%s %s %s -o %s/x.feat builtin:dev", bin, T, m, ck, tmp);
    // classify: features of two different models; a training split of one class
    expect_fail("made by different models", "classify on features of H=8 and H=64",
                "%s/transfer classify %s/train.feat %s/ok.feat %s/test.feat", bin, tmp, tmp, tmp);
    write_text("one.csv", "label,sentence\n1,a\n1,b\n");
    test_system("%s/%s %s %s -o %s/one.feat %s/one.csv >/dev/null 2>&1", bin, T, m, ck, tmp, tmp);
    expect_fail("only one class", "classify with one class in train", "%s/transfer classify %s/one.feat %s/ok.feat %s/ok.feat", bin, tmp, tmp, tmp);
    expect_fail("not a features file", "classify on a file that is not features", "%s/transfer classify %s/ok.csv %s/ok.feat %s/ok.feat", bin, tmp, tmp, tmp);

    // a UTF-8 byte order mark before the header (spreadsheets write one) is not part of the first column's name
    write_text("bom.csv", "\xEF\xBB\xBFlabel,sentence\n1,good\n0,bad\n");
    rc = test_system("%s/%s %s %s -o %s/bom.feat %s/bom.csv >/dev/null 2>&1", bin, T, m, ck, tmp, tmp);
    n = feats_count("bom.feat", &pos);
    CHECK(rc == 0 && n == 2 && pos == 1, "CSV with a UTF-8 BOM: exit %d, %d documents, %d positive (want 0, 2, 1)", rc, n, pos);

    // A NUL byte is text, in transfer as in build/prepare (a CSV cut the document there, and a leading NUL left it
    // empty): each document's features from the CSV are those from prepare's shards of the same CSV
    static const struct { const char *bytes; size_t n; } nul_csv[2] = {
        {"label,sentence\n1,abc\0zero tail\n", 31}, {"label,sentence\n0,\0leading zero\n", 31}};
    for (int k = 0; k < 2; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/nul%d.csv", tmp, k);
        test_write_file(path, nul_csv[k].bytes, nul_csv[k].n);
        rc = test_system("%s/%s %s %s -o %s/nul%d.feat %s >/dev/null 2>&1 && %s/prepare --val-fraction 0 -o %s/nul%d "
                         "%s >/dev/null 2>&1 && %s/%s %s %s -o %s/nulp%d.feat %s/nul%d/train_labels.tsv >/dev/null 2>&1",
                         bin, T, m, ck, tmp, k, path, bin, tmp, k, path, bin, T, m, ck, tmp, k, tmp, k);
        Feats direct = {0}, prepared = {0};
        char fa[4200], fb[4200];
        snprintf(fa, sizeof fa, "%s/nul%d.feat", tmp, k);
        snprintf(fb, sizeof fb, "%s/nulp%d.feat", tmp, k);
        int same = rc == 0 && feats_read(fa, &direct) && feats_read(fb, &prepared) && direct.n == 1 &&
                   prepared.n == 1 && direct.H == prepared.H &&
                   !memcmp(direct.x, prepared.x, sizeof(float) * (size_t)direct.H);
        CHECK(same, "a NUL byte %s the text: the CSV's features are those of prepare's shards of it (exit %d)",
              k ? "leading" : "inside", rc);
        free(direct.label); free(direct.x); free(prepared.label); free(prepared.x);
    }
    char nul_label[4200];
    snprintf(nul_label, sizeof nul_label, "%s/nullab.csv", tmp);
    test_write_file(nul_label, "label,sentence\n1\0x,text\n", 24);
    expect_fail("nullab.csv:2: the label holds a NUL byte", "CSV label with a NUL byte",
                "%s/%s %s %s -o %s/x.feat %s/nullab.csv", bin, T, m, ck, tmp, tmp);

    // NaN or Inf features are refused, naming the file: one NaN made classify report 50% with thresholds "c > nan"
    char fp[4200];
    snprintf(fp, sizeof fp, "%s/ok.feat", tmp);
    size_t fn = 0;
    FILE *ff = fopen(fp, "rb");
    uint8_t fbuf[4096];
    if (ff) { fn = fread(fbuf, 1, sizeof fbuf, ff); fclose(ff); }
    float qnan = NAN;
    memcpy(fbuf + 32 + 4 * 3 + 4 * 5, &qnan, 4);  // 3 labels, then document 0's feature 5
    snprintf(fp, sizeof fp, "%s/nan.feat", tmp);
    ff = fopen(fp, "wb");
    if (ff) { fwrite(fbuf, 1, fn, ff); fclose(ff); }
    expect_fail("nan.feat: document 0, feature 5 is nan, not a finite number", "classify on features holding a NaN",
                "%s/transfer classify %s/ok.feat %s/nan.feat %s/ok.feat", bin, tmp, tmp, tmp);
    Mlstm nm;
    TrainState nst;
    MlstmConfig ncfg = {256, 5, 8, 1};
    mlstm_build(&nm, ncfg, 1, 1);
    real h8[8] = {0}, c8[8] = {0};
    checkpoint_load(ck, &nm, &nst, h8, c8, 1);
    nm.p.t[P_WMH][3] = NAN;  // a model that computes NaN
    snprintf(fp, sizeof fp, "%s/nan.ckpt", tmp);
    checkpoint_save(fp, &nm, &nst, h8, c8);
    mlstm_free(&nm);
    expect_fail("nan.ckpt", "featurize with a model whose weights hold a NaN", "%s/%s %s %s -o %s/x.feat %s/ok.csv", bin, T, m, fp, tmp, tmp);
    snprintf(fp, sizeof fp, "%s/x.feat", tmp);
    CHECK(access(fp, F_OK) != 0, "and writes no features file");

    // integer flags never wrap or truncate, and a number is the whole value
    const char *bad_flags[][2] = {
        {"--batch 4294967298", "--batch: must be between 1 and 65536, got 4294967298"}, {"--batch 2147483648", "--batch: must be between 1 and 65536"},
        {"--docs 4294967297", "--docs: must be between 1 and 2147483647"}, {"--seq-len 99999999999999999999", "--seq-len: must be between 1 and 65536"},
        {"--threads 100000", "--threads: must be between 1 and 1024, got 100000"}, {"--batch 4096 --seq-len 8192", "--batch 4096 x --seq-len 8192"}};
    for (int k = 0; k < 6; k++)
        expect_fail(bad_flags[k][1], bad_flags[k][0], "%s/%s %s %s %s -o %s/x.feat %s/ok.csv", bin, T, bad_flags[k][0], m, ck, tmp, tmp);
    expect_fail("--eps: expected a number, got \"1e-4junk\"", "classify --eps 1e-4junk", "%s/transfer classify --eps 1e-4junk %s/ok.feat %s/ok.feat %s/ok.feat", bin, tmp, tmp, tmp);
    expect_fail("--sign: expected a whole number, got \"1abc\"", "heatmap --sign 1abc", "%s/transfer heatmap -m %s --unit 0 --sign 1abc -o %s/h %s/ok.csv", bin, ck, tmp, tmp);
    expect_fail("--center: expected a number, got \"nan\"", "heatmap --center nan", "%s/transfer heatmap -m %s --unit 0 --center nan -o %s/h %s/ok.csv", bin, ck, tmp, tmp);
    expect_fail("--threshold: expected a number, got \"inf\"", "featurize --threshold inf", "%s/%s %s %s --threshold inf -o %s/x.feat %s/ok.jsonl", bin, T, m, ck, tmp, tmp);

    // shards made by build/prepare, read through their labels files (ratings 1-5: --threshold 3)
    rc = test_system("%s/prepare --builtin 30000 --val-fraction 0.2 -o %s/prep >/dev/null 2>&1 && "
                     "%s/%s %s %s -o %s/prep.feat --threshold 3 %s/prep/val_labels.tsv >/dev/null 2>&1", bin, tmp, bin, T, m, ck, tmp, tmp);
    int want_n = 0, want_pos = 0;
    snprintf(fp, sizeof fp, "%s/prep/val_labels.tsv", tmp);
    ff = fopen(fp, "r");
    char tl[256];
    while (ff && fgets(tl, sizeof tl, ff)) {
        long long o_, l_;
        int stars;
        if (sscanf(tl, "%lld\t%lld\t%d", &o_, &l_, &stars) == 3 && stars != 3) { want_n++; want_pos += stars > 3; }
    }
    if (ff) fclose(ff);
    n = feats_count("prep.feat", &pos);
    CHECK(rc == 0 && want_n > 5 && n == want_n && pos == want_pos, "prepared shards through val_labels.tsv --threshold 3: exit %d, %d documents, %d positive (want 0, %d, %d)",
          rc, n, pos, want_n, want_pos);
    write_text("prep/bad_labels.tsv", "offset\tlength\tlabel\n0\t99999999\t5\n");
    test_system("cp %s/prep/val_000.bin %s/prep/bad_000.bin", tmp, tmp);
    expect_fail("bad_labels.tsv:2: document at offset 0, length 99999999 is not inside", "a labels file pointing past its shards",
                "%s/%s %s %s -o %s/x.feat --threshold 3 %s/prep/bad_labels.tsv", bin, T, m, ck, tmp, tmp);
    write_text("prep/bad_labels.tsv", "offset\tlength\tlabel\n0\tx\t5\n");
    expect_fail("bad_labels.tsv:2: bad length field", "a labels file with a bad length", "%s/%s %s %s -o %s/x.feat %s/prep/bad_labels.tsv", bin, T, m, ck, tmp, tmp);
    // a damaged copy of the real labels file: a line deleted, a line repeated, the last line gone
    // (each was read as 39 or 41 documents, exit 0); doc/formats.md: offsets are contiguous to the end
    const char *edits[][3] = {{"3d", "bad_labels.tsv:3: offset", "a labels file with a line deleted"},
                              {"3p", "bad_labels.tsv:4: offset", "a labels file with a line repeated"},
                              {"$d", "lines are missing at the end", "a labels file without its last line"}};
    for (int k = 0; k < 3; k++) {
        test_system("sed '%s' %s/prep/val_labels.tsv > %s/prep/bad_labels.tsv", edits[k][0], tmp, tmp);
        expect_fail(edits[k][1], edits[k][2], "%s/%s %s %s -o %s/x.feat --threshold 3 %s/prep/bad_labels.tsv", bin, T, m,
                    ck, tmp, tmp);
    }
}

// What transfer and import_npy read must be files (a FIFO hung them), and is read whole:
// a CSV line with a field more than the header, a JSON label of any length, a JSON
// document with an integer beyond 64 bits in another field; a run directory as the
// model; names that start with '-' after "--".
static void test_files_and_names(void) {
    const char *m = "-m", *T = "transfer featurize";
    char ck[4200];
    snprintf(ck, sizeof ck, "%s/imported.ckpt", tmp);
    test_system("cd %s && mkfifo fifo.ckpt fifo.csv fifo.feat && mkdir -p prep npyfifo && mkfifo prep/fifo_labels.tsv "
                "npyfifo/0.npy", tmp);
    expect_fail("fifo.ckpt is not a regular file (a FIFO)", "a FIFO as the model (no hang)",
                "timeout 20 %s/%s %s %s/fifo.ckpt -o %s/x.feat %s/ok.csv", bin, T, m, tmp, tmp, tmp);
    expect_fail("fifo.csv: not a regular file (a FIFO)", "a FIFO as the CSV input (no hang)",
                "timeout 20 %s/%s %s %s -o %s/x.feat %s/fifo.csv", bin, T, m, ck, tmp, tmp);
    expect_fail("fifo.feat: not a regular file (a FIFO)", "a FIFO as a features file (no hang)",
                "timeout 20 %s/transfer classify %s/ok.feat %s/fifo.feat %s/ok.feat", bin, tmp, tmp, tmp);
    expect_fail("fifo_labels.tsv: not a regular file (a FIFO)", "a FIFO as a labels file (no hang)",
                "timeout 20 %s/%s %s %s -o %s/x.feat --threshold 3 %s/prep/fifo_labels.tsv", bin, T, m, ck, tmp, tmp);
    expect_fail("0.npy: not a regular file (a FIFO)", "import_npy with 0.npy a FIFO (no hang)",
                "timeout 20 %s/import_npy -o %s/x.ckpt %s/npyfifo", bin, tmp, tmp);
    // a field more than the header: an error naming the line (it was dropped silently)
    write_text("extra.csv", "label,sentence\n0,fine\n1,good,extra\n");
    expect_fail("extra.csv:3: 3 fields, the header has 2 (an extra field: a comma in the text needs the field quoted)",
                "a CSV line with a third field", "%s/%s %s %s -o %s/x.feat %s/extra.csv", bin, T, m, ck, tmp, tmp);
    // a label string longer than any buffer is read whole: 0.000...01 (300 digits) is above --threshold 0
    char label[400], line[1200];
    snprintf(label, sizeof label, "0.%0299d1", 0);
    snprintf(line, sizeof line,
             "{\"text\": \"tiny but positive\", \"label\": \"%s\"}\n{\"text\": \"zero\", \"label\": -1}\n"
             "{\"text\": \"big id\", \"label\": 1, \"id\": 123456789012345678901234567890}\n", label);
    write_text("long.jsonl", line);
    int rc = test_system("%s/%s %s %s -o %s/long.feat --threshold 0 %s/long.jsonl > /dev/null 2>&1", bin, T, m, ck, tmp,
                         tmp);
    int pos = 0, n = feats_count("long.feat", &pos);
    CHECK(rc == 0 && n == 3 && pos == 2, "a 302-byte label above the threshold, and a line with an integer beyond 64 "
          "bits in another field: exit %d, %d documents, %d positive (want 0, 3, 2)", rc, n, pos);
    // a run directory is its best model
    test_system("mkdir -p %s/run && cp %s %s/run/best.ckpt", tmp, ck, tmp);
    rc = test_system("%s/%s %s %s/run -o %s/run.feat %s/ok.csv > /dev/null 2>&1 && cmp -s %s/run.feat %s/ok.feat", bin,
                     T, m, tmp, tmp, tmp, tmp, tmp);
    CHECK(rc == 0, "-m DIR: the features of DIR/best.ckpt");
    test_system("mv %s/run/best.ckpt %s/run/latest.ckpt", tmp, tmp);
    expect_fail("run is a run directory without best.ckpt (its best model); it has latest.ckpt: give",
                "-m a run directory without best.ckpt", "%s/%s %s %s/run -o %s/x.feat %s/ok.csv", bin, T, m, tmp, tmp,
                tmp);
    // names that start with '-' after "--"
    rc = test_system("cd %s && cp ok.csv ./-dash.csv && %s/%s %s %s -o -dash.feat -- -dash.csv > /dev/null 2>&1 && "
                     "cmp -s ./-dash.feat ok.feat", tmp, bin, T, m, ck);
    CHECK(rc == 0, "featurize -o -dash.feat -- -dash.csv: the input named -dash.csv read (exit %d)", rc);
    rc = test_system("cd %s && %s/transfer classify --summary -s.txt -- ok.feat ok.feat ./-dash.feat > /dev/null 2>&1 "
                     "&& [ -s ./-s.txt ]", tmp, bin);
    CHECK(rc == 0, "classify --summary -s.txt -- ...: exit %d", rc);
    CHECK(test_system("ls -a %s | grep -q '\\.tmp\\.'", tmp) != 0, "no temporary file left behind");
}

// heatmap: names the user chose never reach gnuplot's or a shell's parser; many
// documents; whole-or-nothing output
static void test_heatmap(void) {
    char ck[4200], fp[4300], csv[8192 * 4];
    snprintf(ck, sizeof ck, "%s/imported.ckpt", tmp);
    size_t k = (size_t)snprintf(csv, sizeof csv, "label,sentence\n");
    for (int i = 0; i < 300; i++) k += (size_t)snprintf(csv + k, sizeof csv - k, "%d,review number %d was %s\n", i % 2, i, i % 2 ? "good" : "bad");
    write_text("many.csv", csv);
    int gnuplot = test_system("command -v gnuplot >/dev/null 2>&1") == 0;
    // a prefix with a backquoted command and a double quote
    int rc = test_system("cd %s && %s/transfer heatmap -m %s --unit 0 --reviews 4 -o 'h`touch PWNED`\"q' many.csv >heat2.out 2>&1",
                         tmp, bin, ck);
    snprintf(fp, sizeof fp, "%s/PWNED", tmp);
    CHECK(rc == 0 && access(fp, F_OK) != 0, "heatmap -o 'h`touch PWNED`\"q': exit %d, the backquoted command did not run", rc);
    snprintf(fp, sizeof fp, "%s/h`touch PWNED`\"q.html", tmp);
    CHECK(file_size(fp) > 500, "and the HTML is there under that name (%ld bytes)", file_size(fp));
    if (gnuplot) {
        snprintf(fp, sizeof fp, "%s/h`touch PWNED`\"q.png", tmp);
        CHECK(file_size(fp) > 1000, "and gnuplot drew the PNG under that name (%ld bytes)", file_size(fp));
    }
    // 300 documents: their labels overflowed a fixed 4 KB buffer of the gnuplot script
    rc = test_system("%s/transfer heatmap -m %s --unit 0 --reviews 300 -o %s/h300 %s/many.csv >%s/heat3.out 2>&1", bin, ck, tmp, tmp, tmp);
    snprintf(fp, sizeof fp, "%s/h300.gp", tmp);
    int labels = 0;
    FILE *f = fopen(fp, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) labels += !strncmp(line, "set label \"", 11);
    if (f) fclose(f);
    CHECK(rc == 0 && labels == 300, "heatmap --reviews 300: exit %d, %d labels in the script (want 300)", rc, labels);
    if (gnuplot) {
        snprintf(fp, sizeof fp, "%s/h300.png", tmp);
        CHECK(file_size(fp) > 1000, "heatmap --reviews 300: gnuplot drew the PNG (%ld bytes)", file_size(fp));
    }
    // a write that fails part way (files limited to 32 KB; the HTML of 300 documents is larger) leaves no HTML
    rc = test_system("trap '' XFSZ; ulimit -f 64; %s/transfer heatmap -m %s --unit 0 --reviews 300 -o %s/hbig %s/many.csv >/dev/null 2>%s/err.txt",
                     bin, ck, tmp, tmp, tmp);
    snprintf(fp, sizeof fp, "%s/hbig.html", tmp);
    CHECK(rc == 2 && access(fp, F_OK) != 0 && test_system("grep -q 'cannot write %s' %s/err.txt", fp, tmp) == 0,
          "heatmap whose HTML cannot be written whole: exit %d (want 2), no hbig.html, the message names it", rc);
    CHECK(test_system("ls %s | grep -q '\\.tmp\\.'", tmp) != 0, "no temporary file left behind");
    // the page and the PNG written through symbolic links, their modes kept
    test_system("cd %s && mkdir -p store && echo x > store/l.html && echo x > store/l.png && "
                "chmod 640 store/l.html store/l.png && ln -sf store/l.html l.html && ln -sf store/l.png l.png", tmp);
    rc = test_system("cd %s && %s/transfer heatmap -m %s --unit 0 --reviews 4 -o l many.csv > /dev/null 2>&1", tmp, bin,
                     ck);
    CHECK(rc == 0 &&
              test_system("cd %s && [ -L l.html ] && [ -L l.png ] && [ $(stat -c %%a store/l.html) = 640 ] && "
                          "[ $(stat -c %%s store/l.html) -gt 500 ] && [ $(stat -c %%a store/l.png) = 640 ]",
                          tmp) == 0 &&
          (!gnuplot || test_system("cd %s && [ $(stat -c %%s store/l.png) -gt 1000 ]", tmp) == 0),
          "heatmap -o l with l.html and l.png links into store/ (mode 640): exit %d, the links kept, the files written "
          "there, modes kept", rc);
    test_system("cd %s && rm -f l.png && mkfifo l.png", tmp);
    expect_fail("l.png: it is a FIFO; an output replaces only a regular file",
                "heatmap whose PNG is a FIFO: refused before any work",
                "cd %s && timeout 20 %s/transfer heatmap -m %s --unit 0 -o l many.csv", tmp, bin, ck);
}

int main(void) {
    snprintf(bin, sizeof bin, "%s", test_bin_dir());
    const char *base = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/test_transfer.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    test_import();
    test_pipeline();
    test_inputs();
    test_files_and_names();
    test_heatmap();
    int rc = test_summary("test_transfer");
    if (rc == 0) test_system("rm -rf %s", tmp);
    else printf("(files kept in %s)\n", tmp);
    return rc;
}
