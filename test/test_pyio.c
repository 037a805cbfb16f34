// Models between this project and Python, as a user moves them: tools/mlstm_ckpt.py
// reads a checkpoint that build/train wrote (found next to this test) and writes it
// back equal to the byte, through .npz files with torch blocked from importing (the
// NumPy path), and through a PyTorch state_dict; a checkpoint written from new
// weights loads in this reference and in the trainer; the loss of tools/mlstm_torch.py
// on a fixed batch equals mlstm_forward's here; bad files are refused with exit 2.
// Both with weight norm on and off. Run from the repository root, as `make test` does.
//
// Python: $PYTHON, else the first of python3 and /usr/bin/python3 that has NumPy.
// Without NumPy or torch the parts that need them are skipped, loudly; with
// REQUIRE_TORCH set (CI) a skip is a failure.
#include "mlstm.h"
#include "test/test.h"
#include <libgen.h>

static char dir[] = "/tmp/mlstm_pyio_XXXXXX";
static char trainer[1024], python[1024];
static int have_torch;
// a tiny model on a small built-in corpus (as test_train), lr high enough that 5 steps move the weights
#define TINY "--hidden 32 --embed 16 --batch 4 --seq-len 16 --corpus-bytes 60000 --val-every 0 --val-steps 2 " \
             "--sample-len 0 --print-every 1000 --threads 1 --lr-schedule legw --lr 3e-3 --base-batch 4 --warmup-steps 3 --decay-steps 40"
enum { B = 4, T = 48 };  // the loss batch: the checkpoint's G = 4 rows of carried state, 48 steps through them

// Loss tolerance, relative: 1e-5. FP32's unit roundoff is u = 2^-24 = 6e-8; torch in
// float64 on the same float32 weights gives the exact loss to about 1e-15. The loss is
// the mean of B*T = 192 cross-entropies logsumexp(l) - l_y. The logits are dot products
// of length H = 32 (about sqrt(H) u relative each, H u = 2e-6 at worst) after 48 steps
// of a recurrence whose forget gates (< 1) damp the error carried from step to step;
// each cross-entropy then rounds to a few u times |l| + ln 256, about 1e-6 of the loss
// at worst; the mean (in double in C, in float32 in torch: log2(192) u more) adds no
// more. 1e-5 is ten times that worst case and 100 times the largest difference
// measured (1.3e-7, torch float32; 4e-9 against float64), so it holds for any
// summation order (-march=native, FMA or not, torch's BLAS), while a wrong tensor
// order or gate moves this loss by 1e-4 or more (tried: swapped gains, swapped gates).
#define LOSS_TOL 1e-5

static const char *path(const char *name) {  // dir/name, in one of a few rotating buffers
    static char buf[8][700];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}
static int file_contains(const char *p, const char *needle) {
    static char buf[1 << 16];
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

// The loss mlstm.h computes for the weights of a checkpoint on the batch (B,T), from
// its carried rows 0..B-1 (zero_state: from zeros). The checkpoint must be valid.
static double c_loss(const char *ckpt, const uint8_t *in, const uint8_t *tg, const uint8_t *rs, int zero_state) {
    CkptHeader hd;
    checkpoint_header(ckpt, &hd);
    Mlstm m;
    mlstm_build(&m, hd.cfg, B, T);
    size_t GH = (size_t)hd.st.G * hd.cfg.H;
    real *h = (real *)mallocCheck(GH * sizeof(real)), *c = (real *)mallocCheck(GH * sizeof(real));
    TrainState st;
    checkpoint_load(ckpt, &m, &st, h, c, hd.st.G);
    if (zero_state) { memset(h, 0, GH * sizeof(real)); memset(c, 0, GH * sizeof(real)); }
    double loss = mlstm_forward(&m, in, tg, rs, h, c, B, T);  // rows 0..B-1 of (G,H) are the first B*H values
    mlstm_free(&m);
    free(h); free(c);
    return loss;
}

// The NumPy path with torch unimportable: checkpoint -> .npz -> checkpoint, to the byte.
static void test_numpy_roundtrip(const char *tag) {
    char ck[64], npz[64], back[64], info[64];
    snprintf(ck, sizeof ck, "%s.ckpt", tag); snprintf(npz, sizeof npz, "%s.npz", tag);
    snprintf(back, sizeof back, "%s_back.ckpt", tag); snprintf(info, sizeof info, "%s_info.txt", tag);
    int re = test_system("PYTHONPATH=%s/notorch %s tools/mlstm_ckpt.py export %s %s", dir, python, path(ck), path(npz));
    int ri = test_system("PYTHONPATH=%s/notorch %s tools/mlstm_ckpt.py import %s %s", dir, python, path(npz), path(back));
    int rn = test_system("PYTHONPATH=%s/notorch %s tools/mlstm_ckpt.py info %s > %s", dir, python, path(back), path(info));
    CHECK(re == 0 && ri == 0 && rn == 0, "%s: export, import, info exit 0 without torch (%d %d %d)", tag, re, ri, rn);
    CHECK(file_size(path(ck)) > 0 && files_equal(path(ck), path(back)),
          "%s: checkpoint -> .npz -> checkpoint is equal to the byte (%ld bytes)", tag, file_size(path(ck)));
    CHECK(file_contains(path(info), "D=16 H=32") && file_contains(path(info), "step 5, data step 5, carried state G=4"),
          "%s: info reports the model, steps and rows", tag);
}

// Bad input: exit 2, one line naming the file, nothing written.
static void expect_refused(const char *what, const char *needle, const char *out, const char *fmt, const char *a, const char *b) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    int r = test_system("%s tools/mlstm_ckpt.py %s 2> %s", python, cmd, path("err.txt"));
    long lines = 0;
    FILE *f = fopen(path("err.txt"), "r");
    for (int ch; f && (ch = fgetc(f)) != EOF;) lines += ch == '\n';
    if (f) fclose(f);
    CHECK(r == 2 && lines == 1 && file_contains(path("err.txt"), needle) && file_size(out) < 0,
          "refused: %s: exit %d (want 2), %ld line(s) on stderr containing \"%s\", no %s", what, r, lines, needle, out);
}

static void copy_file(const char *from, const char *to, long keep, long flip) {
    FILE *f = fopen(from, "rb"), *g = fopen(to, "wb");
    long n = 0;
    for (int ch; f && g && (ch = fgetc(f)) != EOF && (keep < 0 || n < keep); n++) fputc(n == flip ? ch ^ 0x40 : ch, g);
    if (f) fclose(f);
    if (g) fclose(g);
}

static void test_bad_input(void) {
    char out[700];
    snprintf(out, sizeof out, "%s", path("never.npz"));
    copy_file(path("a.ckpt"), path("flip.ckpt"), -1, 4000);
    expect_refused("a flipped payload byte", "fails its checksum", out, "export %s %s", path("flip.ckpt"), out);
    copy_file(path("a.ckpt"), path("short.ckpt"), 4000, -1);
    expect_refused("a truncated file", "is truncated", out, "export %s %s", path("short.ckpt"), out);
    copy_file(path("a.ckpt"), path("long.ckpt"), -1, -1);
    FILE *f = fopen(path("long.ckpt"), "ab");
    if (f) { fputc(0, f); fclose(f); }
    expect_refused("a trailing byte", "1 bytes after the payload", out, "export %s %s", path("long.ckpt"), out);
    copy_file(path("a.ckpt"), path("hdr.ckpt"), -1, 24);  // H: 32 -> 96, nparams no longer agrees
    expect_refused("a header that disagrees with itself", "inconsistent header", out, "export %s %s", path("hdr.ckpt"), out);
    expect_refused("another kind of file", "bad magic", out, "export %s %s", "test/fixtures/crosscheck.bin", out);
    expect_refused("a missing file", "no_such.ckpt", out, "export %s %s", path("no_such.ckpt"), out);
    // an .npz whose W_h is transposed: refused, naming the tensor, and no checkpoint appears
    int r = test_system("%s -c 'import sys, numpy as np; z = dict(np.load(sys.argv[1])); "
                        "z[\"params/W_h\"] = z[\"params/W_h\"].T; np.savez(sys.argv[2], **z)' %s %s",
                        python, path("a.npz"), path("bad.npz"));
    CHECK(r == 0, "made an .npz with W_h transposed");
    expect_refused("a transposed W_h", "params['W_h']: shape [32, 128], the model needs [128, 32]", path("bad.ckpt"),
                   "import %s %s", path("bad.npz"), path("bad.ckpt"));
    r = test_system("%s -c 'import sys, numpy as np; z = dict(np.load(sys.argv[1])); "
                    "z[\"params/b\"][3] = np.nan; np.savez(sys.argv[2], **z)' %s %s", python, path("a.npz"), path("nan.npz"));
    CHECK(r == 0, "made an .npz with a NaN in b");
    expect_refused("a NaN weight", "params['b']: contains inf or NaN", path("nan.ckpt"), "import %s %s", path("nan.npz"), path("nan.ckpt"));
    expect_refused("an unknown command", "usage: mlstm_ckpt.py", path("x"), "convert %s %s", path("a.ckpt"), path("x"));
}

// The torch path for one checkpoint: the same loss, state_dict round trip, new weights.
static void test_torch(const char *tag, const char *model_flags, const uint8_t *in, const uint8_t *tg, const uint8_t *rs) {
    char ck[64], same[64], fresh[64], out[64];
    snprintf(ck, sizeof ck, "%s.ckpt", tag); snprintf(same, sizeof same, "%s_same.ckpt", tag);
    snprintf(fresh, sizeof fresh, "%s_new.ckpt", tag); snprintf(out, sizeof out, "%s_torch.txt", tag);
    int r = test_system("%s test/pyio_torch.py %s %s %d %d %s %s > %s", python, path(ck), path("batch.bin"), B, T,
                        path(same), path(fresh), path(out));
    double t32 = NAN, t64 = NAN, n32 = NAN, n64 = NAN;
    FILE *f = fopen(path(out), "r");
    char name[32];
    double v;
    while (f && fscanf(f, "%31s %lf", name, &v) == 2) {
        if (!strcmp(name, "torch32")) t32 = v;
        if (!strcmp(name, "torch64")) t64 = v;
        if (!strcmp(name, "new32")) n32 = v;
        if (!strcmp(name, "new64")) n64 = v;
    }
    if (f) fclose(f);
    CHECK(r == 0 && t64 == t64 && n64 == n64, "%s: test/pyio_torch.py exits 0 and prints its losses (exit %d)", tag, r);
    if (r != 0) return;
    CHECK(files_equal(path(ck), path(same)), "%s: checkpoint -> state_dict -> checkpoint is equal to the byte", tag);
    double c = c_loss(path(ck), in, tg, rs, 0), e64 = fabs(c - t64) / t64, e32 = fabs(c - t32) / t64;
    CHECK(e64 <= LOSS_TOL, "%s: loss C FP32 %.9f vs torch float64 %.9f: rel diff %.2e = %5.1f%% of tolerance %.0e",
          tag, c, t64, e64, 100 * e64 / LOSS_TOL, LOSS_TOL);
    CHECK(e32 <= LOSS_TOL, "%s: loss C FP32 %.9f vs torch float32 %.9f: rel diff %.2e = %5.1f%% of tolerance %.0e",
          tag, c, t32, e32, 100 * e32 / LOSS_TOL, LOSS_TOL);
    // weights written by Python: the trainer resumes from them, and the loss agrees again
    int rt = test_system("%s " TINY " %s --steps 1 --resume %s --ckpt %s --log %s > %s 2>&1", trainer, model_flags,
                         path(fresh), path("resumed.ckpt"), path("resumed.log"), path("resumed.out"));
    CHECK(rt == 0 && file_size(path("resumed.ckpt")) > 0, "%s: ./train --resume loads the checkpoint Python wrote (exit %d)", tag, rt);
    if (rt != 0) return;
    // from a zero state (a fresh checkpoint carries zeros); the old weights' loss from zeros shows they moved
    double cn = c_loss(path(fresh), in, tg, rs, 1), c0 = c_loss(path(ck), in, tg, rs, 1);
    double en = fabs(cn - n64) / n64, en32 = fabs(cn - n32) / n64;
    CHECK(en <= LOSS_TOL && en32 <= LOSS_TOL && fabs(cn - c0) > 1e-3,
          "%s: new weights: loss C %.9f vs torch float64 %.9f, float32 %.9f: rel diff %.2e, %.2e = %5.1f%% of tolerance %.0e "
          "(old weights %.6f)", tag, cn, n64, n32, en, en32, 100 * (en > en32 ? en : en32) / LOSS_TOL, LOSS_TOL, c0);
}

static int find_python(void) {
    const char *cands[] = {getenv("PYTHON"), "python3", "/usr/bin/python3"};
    for (int i = getenv("PYTHON") ? 0 : 1; i < 3; i++) {
        if (test_system("%s -c 'import numpy' > /dev/null 2>&1", cands[i]) == 0) {
            snprintf(python, sizeof python, "%s", cands[i]);
            return 1;
        }
        if (i == 0) break;  // $PYTHON was given: that one or none
    }
    return 0;
}

static void skipped(const char *what) {
    if (getenv("REQUIRE_TORCH")) CHECK(0, "REQUIRE_TORCH is set but %s was skipped", what);
    else SKIP("%s (apt-get install python3-numpy python3-torch; CI sets REQUIRE_TORCH=1 and fails here)", what);
}

int main(int argc, char **argv) {
    (void)argc;
    char self[1024];
    snprintf(self, sizeof self, "%s", argv[0]);
    snprintf(trainer, sizeof trainer, "%s/train", dirname(self));
    if (access("tools/mlstm_ckpt.py", R_OK) != 0 || access("test/pyio_torch.py", R_OK) != 0) {
        CHECK(0, "tools/mlstm_ckpt.py and test/pyio_torch.py not found: run from the repository root (make test does)");
        return test_summary("test_pyio");
    }
    if (!find_python()) {
        char what[1200];
        snprintf(what, sizeof what, "every Python check (no NumPy in %s)", getenv("PYTHON") ? getenv("PYTHON") : "python3 or /usr/bin/python3");
        skipped(what);
        return test_summary("test_pyio");
    }
    have_torch = test_system("%s -c 'import torch' > /dev/null 2>&1", python) == 0;
    printf("python: %s (torch %s)\n", python, have_torch ? "yes" : "no");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    // a stand-in torch that cannot be imported: the NumPy path must not need the real one
    test_system("mkdir -p %s/notorch && echo 'raise ImportError(\"torch blocked by test_pyio\")' > %s/notorch/torch.py", dir, dir);
    CHECK(test_system("PYTHONPATH=%s/notorch %s -c 'import torch' 2> /dev/null", dir, python) != 0,
          "the torch blocker works (import torch fails under it)");

    int ra = test_system("%s " TINY " --steps 5 --ckpt %s --log %s > %s 2>&1", trainer, path("a.ckpt"), path("a.log"), path("a.out"));
    int rn = test_system("%s " TINY " --no-weight-norm --steps 5 --ckpt %s --log %s > %s 2>&1", trainer, path("n.ckpt"),
                         path("n.log"), path("n.out"));
    CHECK(ra == 0 && rn == 0, "./train writes 5-step checkpoints with and without weight norm (exit %d %d)", ra, rn);
    test_numpy_roundtrip("a");
    test_numpy_roundtrip("n");
    test_bad_input();

    if (have_torch) {
        // the fixed batch: bytes of a sentence at a different offset per row, and a few resets
        static const char text[] = "\n This was a wonderful little book; I read it twice and will buy another copy. ";
        uint8_t in[B * T], tg[B * T], rs[B * T];
        size_t L = sizeof text - 1;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                in[b * T + t] = (uint8_t)text[(b * 19 + t) % L];
                tg[b * T + t] = (uint8_t)text[(b * 19 + t + 1) % L];
                rs[b * T + t] = in[b * T + t] == '\n' || (b == 3 && t == 30);  // document starts, and one more
            }
        FILE *f = fopen(path("batch.bin"), "wb");
        if (!f || fwrite(in, 1, sizeof in, f) != sizeof in || fwrite(tg, 1, sizeof tg, f) != sizeof tg ||
            fwrite(rs, 1, sizeof rs, f) != sizeof rs || fclose(f) != 0) { perror("batch.bin"); return 1; }
        test_torch("a", "", in, tg, rs);
        test_torch("n", "--no-weight-norm", in, tg, rs);
    } else {
        skipped("the PyTorch checks (state_dict round trip, equal losses; no torch)");
    }
    test_system("rm -rf %s", dir);
    return test_summary("test_pyio");
}
