// Models between this project and Python, as a user moves them: tools/mlstm_ckpt.py
// reads a checkpoint that build/train wrote (found next to this test) and writes it
// back equal to the byte, run record included, through .npz files with torch blocked
// from importing (the NumPy path), and through a PyTorch state_dict; a record edited
// in the .npz is the one the trainer then resumes by; format version 1 files are read
// and version 5 refused; a checkpoint written from new weights loads in this reference
// and in the trainer; the loss of tools/mlstm_torch.py on a fixed batch equals
// mlstm_forward's here; bad checkpoints, damaged .npz files (test/pyio_npz.py: named
// damages and random ones) and wrong weights given to new() and from_state_dict
// (test/pyio_refuse.py) are refused in one line naming the file or tensor, exit 2;
// FIFOs are refused without a hang, a run directory reads as its best.ckpt, and outputs
// are written through symbolic links.
// Both with weight norm on and off. Run from the repository root, as `make test` does.
//
// Python: $PYTHON, else the first of python3 and /usr/bin/python3 that has NumPy.
// Without NumPy or torch the parts that need them are skipped, loudly; with
// REQUIRE_TORCH set (CI) a skip is a failure. KEEP=1 keeps the temporary directory.
#include "mlstm.h"
#include "harness/checkpoint.h"  // defines: the checkpoint file (CkptHeader, checkpoint_open/read/load, checkpoint_save_run)
#include "test/test.h"

static char dir[] = "/tmp/mlstm_pyio_XXXXXX";
static char trainer[4200], python[1024];
static int have_torch;
// a tiny model on a small built-in corpus (as test_train), lr high enough that 5 steps move the weights
#define TINY "--hidden 32 --embed 16 --batch 4 --seq-len 16 --corpus-bytes 60000 --val-every 0 --val-steps 2 " \
             "--sample-len 0 --print-every 1000 --threads 1 --lr-schedule legw --lr 3e-3 --base-batch 4 " \
             "--warmup-steps 3 --decay-steps 40"
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

static void expect_refused(const char *what, const char *needle, const char *out, const char *fmt, const char *a,
                           const char *b);
static void expect_refused_by(const char *what, const char *needle, const char *named, const char *out,
                              const char *cmd);
static void copy_file(const char *from, const char *to, long keep, long flip);

static uint8_t *read_whole(const char *p, long *n) {  // malloc'd, *n bytes; NULL if unreadable
    FILE *f = fopen(p, "rb");
    *n = file_size(p);
    uint8_t *buf = f && *n >= 0 ? (uint8_t *)mallocCheck((size_t)*n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)*n, f) != (size_t)*n) { free(buf); buf = NULL; }
    if (f) fclose(f);
    return buf;
}

// The run record harness/checkpoint.h reads from a checkpoint (checkpoint_open, checkpoint_read_run),
// malloc'd, *n bytes; NULL when it has none. The checkpoint must be valid.
static uint8_t *c_run_record(const char *ckpt, size_t *n) {
    CkptHeader hd;
    FILE *f = checkpoint_open(ckpt, &hd);
    uint8_t *run = checkpoint_read_run(f, ckpt, &hd);
    fclose(f);
    *n = hd.run_bytes;
    return run;
}

// The trainer's record of the TINY runs below, as train.h writes it (doc/formats.md, "Run record").
#define TINY_RECORD(steps) "corpus-bytes\0" "60000\0" "seq-len\0" "16\0" "steps\0" steps "\0" "clip\0" "1\0"

// The NumPy path with torch unimportable: checkpoint -> .npz -> checkpoint, to the byte.
static void test_numpy_roundtrip(const char *tag) {
    char ck[64], npz[64], back[64], info[64];
    snprintf(ck, sizeof ck, "%s.ckpt", tag); snprintf(npz, sizeof npz, "%s.npz", tag);
    snprintf(back, sizeof back, "%s_back.ckpt", tag); snprintf(info, sizeof info, "%s_info.txt", tag);
    int re = test_system("PYTHONPATH=%s/notorch %s tools/mlstm_ckpt.py export %s %s", dir, python, path(ck), path(npz));
    int ri = test_system("PYTHONPATH=%s/notorch %s tools/mlstm_ckpt.py import %s %s", dir, python, path(npz),
                         path(back));
    int rn = test_system("PYTHONPATH=%s/notorch %s tools/mlstm_ckpt.py info %s > %s", dir, python, path(back),
                         path(info));
    CHECK(re == 0 && ri == 0 && rn == 0, "%s: export, import, info exit 0 without torch (%d %d %d)", tag, re, ri, rn);
    CHECK(file_size(path(ck)) > 0 && files_equal(path(ck), path(back)),
          "%s: checkpoint -> .npz -> checkpoint is equal to the byte (%ld bytes)", tag, file_size(path(ck)));
    CHECK(file_contains(path(info), "format version 4, mLSTM V=256 D=16 H=32") &&
          file_contains(path(info), "step 5, data step 5, carried state G=4"),
          "%s: info reports the format version, the model, steps and rows", tag);
    CHECK(file_contains(path(info), "corpus-bytes=60000 seq-len=16 steps=5 clip=1 seed=1 val-steps=2 "
                                    "lr-schedule=legw"),
          "%s: info shows the run record's settings", tag);
    if (re || ri) return;
    // the record itself: the trainer wrote one, and the imported file holds the same bytes
    size_t n0 = 0, n1 = 0;
    uint8_t *r0 = c_run_record(path(ck), &n0), *r1 = c_run_record(path(back), &n1);
    const char want[] = TINY_RECORD("5");
    CHECK(r0 && n0 > sizeof want && !memcmp(r0, want, sizeof want - 1) && r1 && n1 == n0 && !memcmp(r0, r1, n0),
          "%s: the run record (%zu bytes, from \"corpus-bytes\") comes back from the .npz to the byte (%zu bytes)",
          tag, n0, n1);
    free(r0); free(r1);
}

static void patch32(const char *p, long at, uint32_t v) {
    long n;
    uint8_t *buf = read_whole(p, &n);
    if (buf && at + 4 <= n) put32(buf + at, v), test_write_file(p, buf, (size_t)n);
    free(buf);
}
static void patch64(const char *p, long at, uint64_t v) {
    long n;
    uint8_t *buf = read_whole(p, &n);
    if (buf && at + 8 <= n) put64(buf + at, v), test_write_file(p, buf, (size_t)n);
    free(buf);
}

// A format version 1 file, as the C code before the run record wrote it: the header
// (version 1, bytes 136..255 zero) and the payload of `from`, no record, the checksum
// recomputed here with util.h's function. Returns the payload's size, -1 on failure.
static long make_version1(const char *from, const char *to) {
    long n;
    uint8_t *buf = read_whole(from, &n);
    if (!buf || n < CKPT_HEADER_BYTES) { free(buf); return -1; }
    long payload = (long)get64(buf + CKPT_AT_PAYLOAD);
    put32(buf + CKPT_AT_VERSION, 1);
    memset(buf + CKPT_AT_RUN_BYTES, 0, CKPT_HEADER_BYTES - CKPT_AT_RUN_BYTES);
    put64(buf + CKPT_AT_CHECKSUM, 0);
    uint64_t sum = checksum_update(CHECKSUM_INIT, buf, CKPT_HEADER_BYTES);
    sum = checksum_update(sum, buf + CKPT_HEADER_BYTES, (size_t)payload);
    put64(buf + CKPT_AT_CHECKSUM, checksum_final(sum));
    test_write_file(to, buf, (size_t)(CKPT_HEADER_BYTES + payload));
    free(buf);
    return payload;
}

// One header table, three places: harness/checkpoint.h's ckpt_fields (what C reads and writes),
// tools/mlstm_ckpt.py's _FIELDS (what Python reads and writes) and doc/formats.md's header
// table (what a port reads): the same names, offsets and sizes, and in C and Python the
// same types and the versions that added them.
static void test_header_table(void) {
    FILE *f = fopen(path("fields.txt"), "w");
    static const char *type[] = {"u32", "u64", "f64", "bytes"};
    for (int i = 0; f && i < CKPT_NFIELDS; i++)
        fprintf(f, "%s\t%d\t%d\t%s\t%u\n", ckpt_fields[i].name, ckpt_fields[i].at, ckpt_fields[i].bytes,
                type[ckpt_fields[i].type], ckpt_fields[i].since);
    if (f) fclose(f);
    int rc = test_system(
        "PYTHONPATH=%s/notorch %s - %s doc/formats.md > %s 2>&1 <<'EOF'\n"
        "import re, struct, sys\n"
        "sys.path.insert(0, 'tools')\n"
        "import mlstm_ckpt\n"
        "kind = {'I': 'u32', 'Q': 'u64', 'd': 'f64'}\n"
        "c = [(n, int(a), int(b), t, int(v)) for n, a, b, t, v in (l.rstrip('\\n').split('\\t') for l in open(sys.argv[1]))]\n"
        "py = [(n, a, struct.calcsize('<' + f), kind.get(f, 'bytes'), v) for n, a, f, v in mlstm_ckpt._FIELDS]\n"
        "doc, on = [], False\n"
        "for line in open(sys.argv[2]):\n"
        "    on = on or line.startswith('Header, 256 bytes')\n"
        "    m = re.match(r'\\|\\s*(\\d+)\\s*\\|\\s*(\\d+)\\s*\\|\\s*([^|]+?)\\s*\\|', line) if on else None\n"
        "    if m and m.group(3) != 'reserved': doc.append((m.group(3), int(m.group(1)), int(m.group(2))))\n"
        "    if on and doc and not line.strip(): break\n"
        "bad = [('python', a, b) for a, b in zip(c, py) if a != b] + [('doc', a[:3], b) for a, b in zip(c, doc) if a[:3] != b]\n"
        "if len(c) != len(py) or len(c) != len(doc) or bad:\n"
        "    print('C %%d rows, Python %%d, formats.md %%d; differing: %%s' %% (len(c), len(py), len(doc), bad)); sys.exit(1)\n"
        "print('%%d fields agree' %% len(c))\n"
        "EOF", dir, python, path("fields.txt"), path("fields.out"));
    char line[300] = "";
    FILE *o = fopen(path("fields.out"), "r");
    if (o) { if (!fgets(line, sizeof line, o)) line[0] = 0; fclose(o); }
    line[strcspn(line, "\n")] = 0;
    CHECK(rc == 0, "the checkpoint header's table: harness/checkpoint.h, mlstm_ckpt.py and doc/formats.md agree (%s)", line);
}

// The settings the run identity leaves out: harness/checkpoint.h's CKPT_NOT_IDENTITY is mlstm_ckpt.py's NOT_IDENTITY.
static void test_not_identity(void) {
    char c_list[300] = "";
    for (int k = 0; k < CKPT_N_NOT_IDENTITY; k++)
        snprintf(c_list + strlen(c_list), sizeof c_list - strlen(c_list), "%s%s", k ? " " : "", CKPT_NOT_IDENTITY[k]);
    int rc = test_system("PYTHONPATH=%s/notorch %s -c 'import sys; sys.path.insert(0, \"tools\"); import mlstm_ckpt; "
                         "sys.exit(b\" \".join(mlstm_ckpt.NOT_IDENTITY) != sys.argv[1].encode())' '%s'", dir, python,
                         c_list);
    CHECK(rc == 0, "the run identity leaves out the same settings in C and Python (%s)", c_list);
}

// Version 1 files read (and come back as version 4 with no record); version 5 refused.
static void test_versions(void) {
    long payload = make_version1(path("a.ckpt"), path("v1.ckpt"));
    CkptHeader hd = {0};
    if (payload > 0) checkpoint_header(path("v1.ckpt"), &hd);  // exits on a file the C reader rejects
    CHECK(payload > 0 && hd.run_bytes == 0, "made a format version 1 file that mlstm.h reads (%ld payload bytes)",
          payload);
    int rn = test_system("PYTHONPATH=%s/notorch %s tools/mlstm_ckpt.py info %s > %s", dir, python, path("v1.ckpt"),
                         path("v1_info.txt"));
    CHECK(rn == 0 && file_contains(path("v1_info.txt"), "format version 1, mLSTM") &&
          file_contains(path("v1_info.txt"), "step 5, data step 5, carried state G=4") &&
          file_contains(path("v1_info.txt"), "run record (0 bytes): none"),
          "version 1: info reads it, says its version and shows no run record (exit %d)", rn);
    int re = test_system("PYTHONPATH=%s/notorch %s tools/mlstm_ckpt.py export %s %s", dir, python, path("v1.ckpt"),
                         path("v1.npz"));
    int ri = test_system("PYTHONPATH=%s/notorch %s tools/mlstm_ckpt.py import %s %s", dir, python, path("v1.npz"),
                         path("v1_back.ckpt"));
    long n1, n2;
    uint8_t *b1 = read_whole(path("v1.ckpt"), &n1), *b2 = read_whole(path("v1_back.ckpt"), &n2);
    int same = b1 && b2 && n1 == n2 && !memcmp(b1 + CKPT_HEADER_BYTES, b2 + CKPT_HEADER_BYTES, (size_t)payload);
    same = same && !memcmp(b1 + CKPT_AT_V, b2 + CKPT_AT_V, CKPT_AT_CHECKSUM - CKPT_AT_V);  // V .. payload bytes
    same = same && get32(b2 + CKPT_AT_VERSION) == CKPT_VERSION;
    if (same) checkpoint_header(path("v1_back.ckpt"), &hd);
    CHECK(re == 0 && ri == 0 && same && hd.run_bytes == 0,
          "version 1 -> .npz -> version 4 with no record, header fields and payload equal (exit %d %d)", re, ri);
    free(b1); free(b2);
    char out[700];
    snprintf(out, sizeof out, "%s", path("never.npz"));
    copy_file(path("a.ckpt"), path("v5.ckpt"), -1, -1);
    patch32(path("v5.ckpt"), CKPT_AT_VERSION, 5);
    expect_refused("format version 5", "has format version 5; this build reads versions 1 to 4", out, "export %s %s",
                   path("v5.ckpt"), out);
    copy_file(path("a.ckpt"), path("v1run.ckpt"), -1, -1);
    patch32(path("v1run.ckpt"), CKPT_AT_VERSION, 1);
    expect_refused("version 1 with a run record", "inconsistent header", out, "export %s %s", path("v1run.ckpt"), out);
    copy_file(path("a.ckpt"), path("reserved.ckpt"), -1, -1);
    patch32(path("reserved.ckpt"), 200, 1);
    expect_refused("a reserved header byte set", "inconsistent header", out, "export %s %s", path("reserved.ckpt"), out);
    copy_file(path("a.ckpt"), path("bigrun.ckpt"), -1, -1);
    patch64(path("bigrun.ckpt"), CKPT_AT_RUN_BYTES, (uint64_t)CKPT_MAX_RUN_BYTES + 1);
    expect_refused("a run record over the limit", "inconsistent header", out, "export %s %s", path("bigrun.ckpt"), out);
    long n = file_size(path("a.ckpt"));
    copy_file(path("a.ckpt"), path("shortrun.ckpt"), n - 1, -1);
    char needle[200];
    snprintf(needle, sizeof needle, "is truncated: %ld bytes after the header, the header says %ld",
             n - 1 - CKPT_HEADER_BYTES, n - CKPT_HEADER_BYTES);
    expect_refused("a run record cut short", needle, out, "export %s %s", path("shortrun.ckpt"), out);
    copy_file(path("a.ckpt"), path("fliprun.ckpt"), -1, n - 3);
    expect_refused("a flipped run record byte", "fails its checksum", out, "export %s %s", path("fliprun.ckpt"), out);
}

// A header or run record crafted and its checksum recomputed, so that only the format's
// own rules (doc/formats.md) can refuse it: each is refused by both readers, mlstm.h's
// checkpoint_open (the trainers', generate's, transfer's) and tools/mlstm_ckpt.py's load, in
// one line naming the file; the same file checksummed again unchanged is read by both.
static void open_child(void *p) { checkpoint_header((const char *)p, &(CkptHeader){0}); }
static void test_crafted(void) {
    long n;
    uint8_t *orig = read_whole(path("a.ckpt"), &n);
    if (!orig || n < CKPT_HEADER_BYTES) {
        CHECK(0, "cannot read a.ckpt");
        free(orig);
        return;
    }
    long record = CKPT_HEADER_BYTES + (long)get64(orig + CKPT_AT_PAYLOAD);
    uint8_t *data = (uint8_t *)memmem(orig + record, (size_t)(n - record), RECORD_TRAIN_DATA, sizeof RECORD_TRAIN_DATA);
    long value = data ? (long)(data - orig) + (long)sizeof RECORD_TRAIN_DATA : -1;  // "<bytes> <checksum> <name>\n"
    long sep1 = value < 0 ? -1 : value + (long)strspn((const char *)orig + value, "0123456789"), sep2 = sep1 + 17;
    CHECK(value > 0 && orig[sep1] == ' ' && orig[sep2] == ' ' && orig[n - 2] == '\n',
          "a.ckpt's record holds a train data identity line (at byte %ld)", value);
    if (value <= 0 || orig[sep1] != ' ' || orig[sep2] != ' ' || orig[n - 2] != '\n') {
        free(orig);
        return;
    }
    const char *header = "inconsistent header", *pairs = "is not a list of NUL-terminated name, value pairs",
               *line1 = "the run record's \"train data\" line 1 is not \"<bytes> <checksum: 16 hex digits> <file name>\"",
               *val_line1 = "the run record's \"val data\" line 1 is not \"<bytes> <checksum: 16 hex digits> <file name>\"";
    const char *record_text = (const char *)orig + record;
    const char *seq_len = (const char *)memmem(record_text, (size_t)(n - record), "seq-len\0" "16\0", 11);
    const char *steps = (const char *)memmem(record_text, (size_t)(n - record), "steps\0" "5\0", 8);
    CHECK(seq_len && steps, "a.ckpt's record holds seq-len 16 and steps 5");
    if (!seq_len || !steps) {
        free(orig);
        return;
    }
    long seq_len_digit = (long)(seq_len - (const char *)orig) + 9, steps_digit = (long)(steps - (const char *)orig) + 6;
    uint64_t run_id = get64(orig + CKPT_AT_RUN_ID);
    // the run's identity, made from the record and the header (doc/formats.md, "Run identity"): what a
    // resume may change leaves it as it is (a shard's name, --steps), a defining setting or the data's
    // bytes do not; needle NULL: both readers accept the file
    const char *identity = "is not the identity of its run record and model";
    struct { const char *what; long at; int width; uint64_t value; const char *needle; } cases[] = {
        {"a run identity not its record's", CKPT_AT_RUN_ID, 8, run_id ^ 1, identity},
        {"the record's seq-len 16 made 17 under the same run identity", seq_len_digit, 1, '7', identity},
        {"a shard's checksum in the record changed under the same run identity", sep1 + 1, 1,
         orig[sep1 + 1] == 'a' ? 'b' : 'a', identity},
        {"the run identity 0 (unknown) over a record", CKPT_AT_RUN_ID, 8, 0, NULL},
        {"a shard's name changed in the record (a renamed shard)", sep2 + 1, 1, orig[sep2 + 1] == 'X' ? 'Y' : 'X',
         NULL},
        {"the record's steps 5 made 9 (a resume may change --steps)", steps_digit, 1, '9', NULL},
        {"header size 255", CKPT_AT_HEADER_SIZE, 4, 255, header},
        {"header size 512", CKPT_AT_HEADER_SIZE, 4, 512, header},
        {"a loss scaler byte past its 40 used ones", CKPT_AT_SCALER + CKPT_SCALER_USED, 1, 1, header},
        {"the loss scaler's last byte", CKPT_AT_SCALER + CKPT_SCALER_BYTES - 1, 1, 0x80, header},
        {"a tab between an identity line's size and checksum", sep1, 1, '\t', line1},
        {"an underscore between the checksum and the name", sep2, 1, '_', line1},
        {"an identity line's size with a leading zero", value, 1, '0', line1},
        {"an identity line's checksum in capitals", sep1 + 16, 1, 'F', line1},
        {"the val data identity's last newline a space", n - 2, 1, ' ', val_line1},
        {"the record's last NUL an 'x'", n - 1, 1, 'x', pairs},
    };
    char out[700];
    snprintf(out, sizeof out, "%s", path("never.npz"));
    for (int k = -1; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        uint8_t *buf = (uint8_t *)mallocCheck((size_t)n);
        memcpy(buf, orig, (size_t)n);
        if (k >= 0) {
            if (cases[k].width == 8) put64(buf + cases[k].at, cases[k].value);
            else if (cases[k].width == 4) put32(buf + cases[k].at, (uint32_t)cases[k].value);
            else buf[cases[k].at] = (uint8_t)cases[k].value;
        }
        put64(buf + CKPT_AT_CHECKSUM, 0);
        put64(buf + CKPT_AT_CHECKSUM, checksum_final(checksum_update(CHECKSUM_INIT, buf, (size_t)n)));
        char name[64];
        snprintf(name, sizeof name, "crafted%d.ckpt", k + 1);
        test_write_file(path(name), buf, (size_t)n);
        free(buf);
        if (k < 0 || !cases[k].needle) {
            const char *what = k < 0 ? "the checkpoint checksummed again unchanged" : cases[k].what;
            char said[300];
            snprintf(said, sizeof said, "%s: mlstm.h reads it", what);
            EXPECT_EXIT(open_child, (void *)path(name), 0, "", said);
            int rc = test_system("PYTHONPATH=%s/notorch %s tools/mlstm_ckpt.py info %s > /dev/null", dir, python,
                                 path(name));
            CHECK(rc == 0, "%s: tools/mlstm_ckpt.py reads it (exit %d)", what, rc);
            continue;
        }
        char what[200];
        snprintf(what, sizeof what, "mlstm.h refuses %s (checksum recomputed)", cases[k].what);
        EXPECT_EXIT(open_child, (void *)path(name), 2, cases[k].needle, what);
        snprintf(what, sizeof what, "mlstm_ckpt.py refuses %s (checksum recomputed)", cases[k].what);
        expect_refused(what, cases[k].needle, out, "export %s %s", path(name), out);
    }
    free(orig);
    // and the programs that read it through mlstm.h: the trainer's --resume and --init-from, generate, transfer
    const char *bin = test_bin_dir();
    char crafted[700];
    snprintf(crafted, sizeof crafted, "%s", path("crafted1.ckpt"));
    const char *runs[][2] = {{"train --resume", "%s/train --resume %s --out %s/never_r --steps 9"},
                             {"train --init-from", "%s/train --init-from %s --out %s/never_i --steps 9 " TINY},
                             {"generate", "%s/generate %s --length 5"},
                             {"transfer featurize", "%s/transfer featurize -m %s -o %s/never.feat builtin:val"}};
    for (int k = 0; k < (int)(sizeof runs / sizeof runs[0]); k++) {
        char cmd[2000];
        int at = snprintf(cmd, sizeof cmd, runs[k][1], bin, crafted, dir);
        snprintf(cmd + at, sizeof cmd - (size_t)at, " > /dev/null 2> %s", path("err.txt"));
        int rc = test_system("%s", cmd);
        long lines = 0;
        FILE *f = fopen(path("err.txt"), "r");
        for (int ch; f && (ch = fgetc(f)) != EOF;) lines += ch == '\n';
        if (f) fclose(f);
        int named = file_contains(path("err.txt"), identity) && file_contains(path("err.txt"), crafted);
        CHECK(rc == 2 && lines == 1 && named, "%s refuses a run identity not its record's: exit %d (want 2), %ld "
              "line(s) naming the file", runs[k][0], rc, lines);
    }
}

// The record is the run: edited in the .npz (--steps 5 -> 9), imported, it is what
// mlstm.h reads and what ./train --resume continues by (to step 9 with no --steps).
static void test_record_edit(void) {
    int r = test_system("%s -c 'import sys, numpy as np; z = dict(np.load(sys.argv[1])); "
                        "run = z[\"run\"].tobytes().replace(b\"steps\\0005\\0\", b\"steps\\0009\\0\"); "
                        "z[\"run\"] = np.frombuffer(run, np.uint8); np.savez(sys.argv[2], **z)' %s %s", python,
                        path("a.npz"), path("edit.npz"));
    int ri = test_system("PYTHONPATH=%s/notorch %s tools/mlstm_ckpt.py import %s %s", dir, python, path("edit.npz"),
                         path("edit.ckpt"));
    CHECK(r == 0 && ri == 0, "an .npz with the run record's steps edited to 9 imports (exit %d %d)", r, ri);
    if (r || ri) return;
    size_t n0 = 0, n1 = 0;
    uint8_t *r0 = c_run_record(path("a.ckpt"), &n0), *r1 = c_run_record(path("edit.ckpt"), &n1);
    const char want[] = TINY_RECORD("9");
    size_t k = sizeof want - 1;  // the edited prefix
    int same_rest = r0 && r1 && n0 == n1 && n0 > k && !memcmp(r0 + k, r1 + k, n0 - k);
    CHECK(r1 && !memcmp(r1, want, k) && same_rest, "the C reader reads the edited record, the rest of it unchanged");
    free(r0); free(r1);
    int rt = test_system("%s --resume %s --out %s --val-every 0 --val-steps 2 --sample-len 0 "
                         "--print-every 1000 --threads 1 > %s 2>&1", trainer, path("edit.ckpt"), path("edit_r"),
                         path("edit_r.out"));
    CkptHeader hd = {0};
    if (rt == 0 && file_size(path("edit_r/latest.ckpt")) > 0) checkpoint_header(path("edit_r/latest.ckpt"), &hd);
    CHECK(rt == 0 && hd.st.data_step == 9 && hd.st.step == 9, "./train --resume of it runs to the record's step 9 "
          "(exit %d, data step %llu)", rt, (unsigned long long)hd.st.data_step);
    // a setting that defines the run (--seq-len 16 -> 17) edited under the run's identity: another run, not written
    r = test_system("%s -c 'import sys, numpy as np; z = dict(np.load(sys.argv[1])); "
                    "run = z[\"run\"].tobytes().replace(b\"seq-len\\00016\\0\", b\"seq-len\\00017\\0\"); "
                    "z[\"run\"] = np.frombuffer(run, np.uint8); np.savez(sys.argv[2], **z)' %s %s", python,
                    path("a.npz"), path("edit_t.npz"));
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "tools/mlstm_ckpt.py import %s %s", path("edit_t.npz"), path("edit_t.ckpt"));
    CHECK(r == 0, "an .npz with the run record's seq-len edited to 17 (exit %d)", r);
    expect_refused_by("an .npz whose record's seq-len is not its run identity's", "is not the identity of the run "
                      "record and model", path("edit_t.npz"), path("edit_t.ckpt"), cmd);
}

// A checkpoint the trainer wrote and the same one through export/import resume alike,
// by their records (no run flags given), and as the run would have gone on unbroken.
static void test_resume(const char *tag, const char *model_flags) {
    char ck[64], back[64], r1[3][64], r2[3][64], whole[3][64];  // run directory, its checkpoint, console output
    snprintf(ck, sizeof ck, "%s.ckpt", tag); snprintf(back, sizeof back, "%s_back.ckpt", tag);
    const char *form[3] = {"%s_%s", "%s_%s/latest.ckpt", "%s_%s.out"};
    for (int i = 0; i < 3; i++) {
        snprintf(r1[i], sizeof r1[i], form[i], tag, "r1");
        snprintf(r2[i], sizeof r2[i], form[i], tag, "r2");
        snprintf(whole[i], sizeof whole[i], form[i], tag, "whole");
    }
#define RESUME_FLAGS "--steps 7 --val-every 0 --val-steps 2 --sample-len 0 --print-every 1000 --threads 1"
    int ra = test_system("%s --resume %s --out %s " RESUME_FLAGS " > %s 2>&1", trainer, path(ck), path(r1[0]),
                         path(r1[2]));
    int rb = test_system("%s --resume %s --out %s " RESUME_FLAGS " > %s 2>&1", trainer, path(back), path(r2[0]),
                         path(r2[2]));
    int rw = test_system("%s " TINY " %s --steps 7 --out %s > %s 2>&1", trainer, model_flags, path(whole[0]),
                         path(whole[2]));
    CHECK(ra == 0 && rb == 0 && rw == 0 && !file_contains(path(r1[2]), "no run record") &&
          !file_contains(path(r2[2]), "no run record"),
          "%s: ./train --resume takes the run from the trainer's and the imported checkpoint's records (exit %d %d %d)",
          tag, ra, rb, rw);
    CHECK(file_size(path(r1[1])) > 0 && files_equal(path(r1[1]), path(r2[1])) &&
          files_equal(path(r1[1]), path(whole[1])),
          "%s: both resumed runs write the checkpoint of an unbroken 7-step run, to the byte", tag);
}

// Bad input: exit 2, one line naming the file, nothing written.
// Bad input: exit 2, one line `error: ...` (no traceback) containing needle and naming
// the file `named` (unless NULL), nothing written at `out`. cmd: the script and its arguments.
static void expect_refused_by(const char *what, const char *needle, const char *named, const char *out,
                              const char *cmd) {
    int r = test_system("timeout 60 %s %s 2> %s", python, cmd, path("err.txt"));  // a hang ends, exit 124
    long lines = 0;
    FILE *f = fopen(path("err.txt"), "r");
    for (int ch; f && (ch = fgetc(f)) != EOF;) lines += ch == '\n';
    if (f) fclose(f);
    int names = !named || file_contains(path("err.txt"), named);
    CHECK(r == 2 && lines == 1 && file_contains(path("err.txt"), needle) && names && file_size(out) < 0,
          "refused: %s: exit %d (want 2), %ld line(s) on stderr containing \"%s\"%s%s, no %s", what, r, lines, needle,
          named ? " and " : "", named ? named : "", out);
    if (r != 2 || lines != 1) test_system("head -c 600 %s | sed 's/^/      stderr: /'", path("err.txt"));
}
static void expect_refused(const char *what, const char *needle, const char *out, const char *fmt, const char *a,
                           const char *b) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "tools/mlstm_ckpt.py ");
    snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), fmt, a, b);
    expect_refused_by(what, needle, a, out, cmd);
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
    expect_refused("a header that disagrees with itself", "inconsistent header", out, "export %s %s", path("hdr.ckpt"),
                   out);
    expect_refused("another kind of file", "bad magic", out, "export %s %s", "test/fixtures/crosscheck.bin", out);
    expect_refused("a missing file", "no_such.ckpt", out, "export %s %s", path("no_such.ckpt"), out);
    // an output that is its input: refused before anything is read or written, the file as it was
    copy_file(path("a.ckpt"), path("same.ckpt"), -1, -1);
    int rc = test_system("tools/mlstm_ckpt.py export %s %s/./same.ckpt > %s 2>&1", path("same.ckpt"), dir, path("same.out"));
    CHECK(rc == 2 && test_system("grep -q 'are the same file' %s", path("same.out")) == 0 &&
              files_equal(path("a.ckpt"), path("same.ckpt")),
          "refused: export onto its own input (exit %d), the checkpoint kept", rc);
    // an .npz whose W_h is transposed: refused, naming the tensor, and no checkpoint appears
    int r = test_system("%s -c 'import sys, numpy as np; z = dict(np.load(sys.argv[1])); "
                        "z[\"params/W_h\"] = z[\"params/W_h\"].T; np.savez(sys.argv[2], **z)' %s %s",
                        python, path("a.npz"), path("bad.npz"));
    CHECK(r == 0, "made an .npz with W_h transposed");
    expect_refused("a transposed W_h", "params['W_h']: shape [32, 128], the model needs [128, 32]", path("bad.ckpt"),
                   "import %s %s", path("bad.npz"), path("bad.ckpt"));
    r = test_system("%s -c 'import sys, numpy as np; z = dict(np.load(sys.argv[1])); "
                    "z[\"params/b\"][3] = np.nan; np.savez(sys.argv[2], **z)' %s %s", python, path("a.npz"),
                    path("nan.npz"));
    CHECK(r == 0, "made an .npz with a NaN in b");
    expect_refused("a NaN weight", "params['b']: contains inf or NaN", path("nan.ckpt"), "import %s %s",
                   path("nan.npz"), path("nan.ckpt"));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "tools/mlstm_ckpt.py convert %s %s", path("a.ckpt"), path("x"));
    expect_refused_by("an unknown command", "usage: mlstm_ckpt.py", NULL, path("x"), cmd);
}

// What mlstm_ckpt.py reads and writes are files: a FIFO is refused at once (it hung,
// waiting for a writer), a run directory stands for its best.ckpt, and an output is
// written through a symbolic link, keeping the replaced file's mode, never over a FIFO
// or a directory.
static void test_files(void) {
    test_system("mkfifo %s %s", path("in.fifo"), path("in_npz.fifo"));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "tools/mlstm_ckpt.py info %s", path("in.fifo"));
    expect_refused_by("info on a FIFO (no hang)", "in.fifo is not a regular file (a FIFO)", NULL, path("never.x"), cmd);
    snprintf(cmd, sizeof cmd, "tools/mlstm_ckpt.py import %s %s", path("in_npz.fifo"), path("never.ckpt"));
    expect_refused_by("import from a FIFO (no hang)", "in_npz.fifo is not a regular file (a FIFO)", NULL,
                      path("never.ckpt"), cmd);
    // info into a pipe whose reader has gone (`| head -1`): no traceback
    test_system("(sleep 1; %s tools/mlstm_ckpt.py info %s 2> %s) | true", python, path("a.ckpt"), path("pipe.err"));
    CHECK(file_size(path("pipe.err")) == 0, "info into a closed pipe: nothing on stderr (%ld bytes; was a traceback)",
          file_size(path("pipe.err")));
    // a run directory
    test_system("mkdir -p %s && cp %s %s/best.ckpt", path("run"), path("a.ckpt"), path("run"));
    int rc = test_system("%s tools/mlstm_ckpt.py info %s > %s 2>&1", python, path("run"), path("run.out"));
    CHECK(rc == 0 && file_contains(path("run.out"), "run/best.ckpt: format version 4, mLSTM V=256 D=16 H=32"),
          "info DIR: the run directory's best.ckpt, named so (exit %d)", rc);
    rc = test_system("%s tools/mlstm_ckpt.py export %s %s > /dev/null 2>&1 && cmp -s %s %s", python, path("run"),
                     path("run.npz"), path("run.npz"), path("a.npz"));
    CHECK(rc == 0, "export DIR: the .npz of its best.ckpt");
    test_system("mv %s/best.ckpt %s/latest.ckpt", path("run"), path("run"));
    snprintf(cmd, sizeof cmd, "tools/mlstm_ckpt.py info %s", path("run"));
    expect_refused_by("a run directory without best.ckpt", "run is a run directory without best.ckpt (its best model); "
                      "it has latest.ckpt: give", NULL, path("never.x"), cmd);
    // outputs: through a link, the mode kept; a FIFO or a directory refused
    test_system("mkdir -p %s && cp %s %s/real.ckpt && chmod 600 %s/real.ckpt && ln -sf store/real.ckpt %s",
                path("store"), path("n.ckpt"), path("store"), path("store"), path("link.ckpt"));
    rc = test_system("%s tools/mlstm_ckpt.py import %s %s > /dev/null 2>&1", python, path("a.npz"), path("link.ckpt"));
    CHECK(rc == 0 && test_system("[ -L %s ] && cmp -s %s/real.ckpt %s && [ $(stat -c %%a %s/real.ckpt) = 600 ]",
                                 path("link.ckpt"), path("store"), path("a.ckpt"), path("store")) == 0 &&
          test_system("! ls %s %s | grep -q '\\.tmp\\.'", dir, path("store")) == 0,
          "import onto a symbolic link (exit %d): the link kept, the file it names written, mode 600, "
          "no temporary left", rc);
    snprintf(cmd, sizeof cmd, "tools/mlstm_ckpt.py import %s %s", path("a.npz"), path("in.fifo"));
    expect_refused_by("import onto a FIFO", "in.fifo: it is a FIFO; an output replaces only a regular file", NULL,
                      path("never.x"), cmd);
    snprintf(cmd, sizeof cmd, "tools/mlstm_ckpt.py export %s %s", path("a.ckpt"), path("store"));
    expect_refused_by("export onto a directory", "store: it is a directory", NULL, path("never.x"), cmd);
}

// One case's line from test/pyio_npz.py import or test/pyio_refuse.py in `file`:
// "NAME rc=R lines=L written=W stderr=TEXT" (R = -1: an exception escaped, TEXT its traceback).
typedef struct { int found, rc, lines, written; char err[1500]; } CaseResult;
static CaseResult case_result(const char *file, const char *name) {
    CaseResult c = {0, -9, -1, -1, ""};
    FILE *f = fopen(file, "r");
    static char line[1 << 14];
    size_t n = strlen(name);
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, name, n) || line[n] != ' ') continue;
        char *e = strstr(line, " stderr=");
        c.found = sscanf(line + n, " rc=%d lines=%d written=%d", &c.rc, &c.lines, &c.written) == 3 && e;
        if (e) snprintf(c.err, sizeof c.err, "%s", e + 8);
        c.err[strcspn(c.err, "\n")] = 0;
        break;
    }
    if (f) fclose(f);
    return c;
}
// As expect_refused, for a case run in-process: exit 2, one line `error: ...` containing
// needle (and naming `named` unless NULL), no output written.
static void check_refused_case(const char *what, const CaseResult *c, const char *needle, const char *named) {
    int ok = c->found && c->rc == 2 && c->lines == 1 && !strncmp(c->err, "error: ", 7) && strstr(c->err, needle) &&
             (!named || strstr(c->err, named)) && c->written == 0;
    CHECK(ok, "refused: %s: exit %d (want 2), %d line(s) on stderr containing \"%s\"%s%s, written %d (want 0)", what,
          c->rc, c->lines, needle, named ? " and " : "", named ? named : "", c->written);
    if (!ok) printf("      stderr: %.700s\n", c->err);
}

// Damaged .npz files (test/pyio_npz.py spoils a.npz): each refused naming the file and
// what is wrong with it, with no traceback and nothing written; a few that hold the same
// values in another form are accepted and give back a.ckpt to the byte. Then random
// damage: every one refused as cleanly, or accepted into a valid checkpoint.
static void test_npz_damage(void) {
    static const char *cases[][2] = {
        {"truncated_half", "is not an .npz file"},
        {"truncated_end", "is not an .npz file"},
        {"empty", "is not an .npz file"},
        {"npy_not_npz", "is not an .npz file"},
        {"member_not_npy", "member 'notes.txt' is not an array (.npy)"},
        {"member_garbage", "member 'params/W_h.npy' is damaged"},
        {"member_lying_shape", "member 'h.npy' is damaged"},  // 4 TB asked for: refused before anything is allocated
        {"member_negative_shape", "h: shape [-4, 32], the model needs [G, 32]"},
        {"member_object", "params['E']: dtype object"},
        {"D_float", "D: float64 of shape [], want an integer"},
        {"step_float", "step: float64 of shape [], want an integer"},
        {"rng_string", "rng: <U6 of shape [], want an integer"},
        {"D_1d", "D: int64 of shape [1], want an integer of shape []"},
        {"wnorm_2d", "wnorm: int64 of shape [1, 1], want an integer of shape []"},
        {"step_negative", "step -1 is out of range"},
        {"D_huge", "D 1099511627776 is out of range"},
        {"wnorm_2", "wnorm 2 is out of range"},
        {"scaler_float64", "scaler: float64 of shape [6], want uint8 of shape [48]"},
        {"scaler_short", "scaler: uint8 of shape [40], want uint8 of shape [48]"},
        {"run_int32", "run: int32 of shape ["},  // (the record's length, then ", want uint8")
        {"run_odd", "the run record (17 bytes) is not a list of NUL-terminated name, value pairs"},
        {"h_1d", "h: shape [128], the model needs [G, 32]"},
        {"c_rows", "c: shape [3, 32], the model needs [4, 32]"},
        {"b_complex", "params['b']: dtype complex64"},
        {"b_out_bool", "params['b_out']: dtype bool"},
        {"W_h_transposed", "params['W_h']: shape [32, 128], the model needs [128, 32]"},
        {"adam_v_W_x_transposed", "adam_v['W_x']: shape [16, 128], the model needs [128, 16]"},
        {"extra_key", "has ['junk']"},
        {"extra_param", "has ['params/W_extra']"},
        {"missing_rng", "lacks ['rng']"},
        {"missing_W_h", "lacks ['params/W_h']"},
        {"missing_adam_m_b", "lacks ['adam_m/b']"},
    };
    static const char *same[] = {"ok_fortran_W_h", "ok_float64_h", "ok_int32_D", "ok_compressed"};
    enum { NC = sizeof cases / sizeof cases[0], NS = sizeof same / sizeof same[0] };
    char names[4096] = "";
    for (int i = 0; i < NC; i++) snprintf(names + strlen(names), sizeof names - strlen(names), " %s", cases[i][0]);
    for (int i = 0; i < NS; i++) snprintf(names + strlen(names), sizeof names - strlen(names), " %s", same[i]);
    test_system("mkdir -p %s/dmg", dir);
    int r = test_system("PYTHONPATH=%s/notorch %s test/pyio_npz.py import %s %s/dmg%s ok_no_run > %s", dir, python,
                        path("a.npz"), dir, names, path("dmg.txt"));
    CHECK(r == 0, "test/pyio_npz.py import: %d damaged .npz files made and imported (exit %d)", NC + NS + 1, r);
    for (int i = 0; i < NC; i++) {
        char what[128], npz[700];
        snprintf(what, sizeof what, ".npz %s", cases[i][0]);
        snprintf(npz, sizeof npz, "%s/dmg/dmg_%s.npz", dir, cases[i][0]);
        CaseResult c = case_result(path("dmg.txt"), cases[i][0]);
        check_refused_case(what, &c, cases[i][1], npz);
    }
    for (int i = 0; i < NS; i++) {
        char ck[700];
        snprintf(ck, sizeof ck, "%s/dmg/dmg_%s.ckpt", dir, same[i]);
        CaseResult c = case_result(path("dmg.txt"), same[i]);
        CHECK(c.found && c.rc == 0 && c.lines == 0 && files_equal(ck, path("a.ckpt")),
              ".npz %s: accepted, a.ckpt to the byte (exit %d, stderr \"%.300s\")", same[i], c.rc, c.err);
    }
    // an .npz exported before the run record: a checkpoint without one, otherwise a.ckpt's
    char norun[700];
    snprintf(norun, sizeof norun, "%s/dmg/dmg_ok_no_run.ckpt", dir);
    CaseResult c = case_result(path("dmg.txt"), "ok_no_run");
    size_t n0 = 0, n1 = 1;
    uint8_t *r0 = c_run_record(path("a.ckpt"), &n0), *r1 = c.rc == 0 ? c_run_record(norun, &n1) : NULL;
    CHECK(c.found && c.rc == 0 && r0 && !r1 && n1 == 0 && file_size(norun) == file_size(path("a.ckpt")) - (long)n0,
          ".npz without a run record: accepted, a checkpoint without one (exit %d)", c.rc);
    free(r0); free(r1);
    // random damage, imported in one Python process: 400 cases take about 5 s
    enum { FUZZ_CASES = 400 };
    test_system("mkdir -p %s/fuzz", dir);
    r = test_system("PYTHONPATH=%s/notorch %s test/pyio_npz.py fuzz %s %s %s/fuzz %d 22 > %s", dir, python,
                    path("a.npz"), path("a.ckpt"), dir, FUZZ_CASES, path("fuzz.txt"));
    long n = -1, refused = -1, accepted = -1, same_bytes = -1, bad = -1;
    FILE *f = fopen(path("fuzz.txt"), "r");
    int got = f ? fscanf(f, "cases %ld refused %ld accepted %ld same %ld bad %ld", &n, &refused, &accepted,
                         &same_bytes, &bad) : 0;
    if (f) fclose(f);
    CHECK(r == 0 && got == 5 && n == FUZZ_CASES && bad == 0 && refused + accepted == n && refused > n / 2,
          "%ld damaged .npz files: %ld refused in one line naming the file, %ld accepted into valid checkpoints (%ld "
          "a.ckpt to the byte), %ld neither (no traceback, nothing half-written)", n, refused, accepted, same_bytes,
          bad);
}

// Wrong weights handed to the functions (test/pyio_refuse.py), from a.ckpt and n.ckpt:
// refused naming the tensor. with_torch: the state_dict cases, else new()'s without torch.
static void test_refuse_api(int with_torch) {
    static const char *cases[][3] = {  // case, needle, the checkpoint it applies to ("": both)
        {"new_W_h_transposed", "params['W_h']: shape [32, 128], the model needs [128, 32]", ""},
        {"new_E_narrow", "params['E']: shape [256, 15], the model needs [256, 16]", ""},
        {"sd_W_h_transposed", "state_dict['W_h']: shape [32, 128], the model needs [128, 32]", ""},
        {"sd_E_narrow", "state_dict['E']: shape [256, 15], the model needs [256, 16]", ""},
        {"sd_W_out_short", "state_dict['W_out']: shape [255, 32], the model needs [256, 32]", ""},
        {"sd_extra_key", "state_dict has ['W_extra']", ""},
        {"sd_complex", "state_dict['b']: dtype torch.complex64", ""},
        {"sd_bool", "state_dict['b_out']: dtype torch.bool", ""},
        {"sd_int", "state_dict['E']: dtype torch.int32", ""},
        {"sd_drop_gains", "gains ['g_x', 'g_h', 'g_mx', 'g_mh'], which wnorm=False would drop", "a"},
        {"sd_no_gains", "state_dict lacks ['g_x', 'g_h', 'g_mx', 'g_mh']", "n"},
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    static const char *tags[2] = {"a", "n"};
    char args[4096] = "", sub[64], out[64], blocker[700] = "";
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < NC; i++)
            if ((!strncmp(cases[i][0], "sd_", 3)) == with_torch && (!cases[i][2][0] || !strcmp(cases[i][2], tags[t])))
                snprintf(args + strlen(args), sizeof args - strlen(args), " %s:%s/%s.ckpt:%s", tags[t], dir, tags[t],
                         cases[i][0]);
    snprintf(sub, sizeof sub, "refuse%d", with_torch);
    snprintf(out, sizeof out, "refuse%d.txt", with_torch);
    if (!with_torch) snprintf(blocker, sizeof blocker, "PYTHONPATH=%s/notorch ", dir);  // new() needs NumPy alone
    test_system("mkdir -p %s", path(sub));
    int r = test_system("%s%s test/pyio_refuse.py %s%s > %s", blocker, python, path(sub), args, path(out));
    CHECK(r == 0, "test/pyio_refuse.py ran its %s cases (exit %d)", with_torch ? "state_dict" : "new()", r);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < NC; i++) {
            if ((!strncmp(cases[i][0], "sd_", 3)) != with_torch || (cases[i][2][0] && strcmp(cases[i][2], tags[t])))
                continue;
            char name[128];
            snprintf(name, sizeof name, "%s:%s", tags[t], cases[i][0]);
            CaseResult c = case_result(path(out), name);
            check_refused_case(name, &c, cases[i][1], NULL);
        }
}

// The torch path for one checkpoint: the same loss, state_dict round trip, new weights.
static void test_torch(const char *tag, const char *model_flags, const uint8_t *in, const uint8_t *tg,
                       const uint8_t *rs) {
    char ck[64], same[64], fresh[64], out[64], resumed[3][64];  // the resumed run's checkpoint, directory, output
    snprintf(ck, sizeof ck, "%s.ckpt", tag); snprintf(same, sizeof same, "%s_same.ckpt", tag);
    snprintf(fresh, sizeof fresh, "%s_new.ckpt", tag); snprintf(out, sizeof out, "%s_torch.txt", tag);
    snprintf(resumed[0], sizeof resumed[0], "%s_resumed/latest.ckpt", tag);
    snprintf(resumed[1], sizeof resumed[1], "%s_resumed", tag);
    snprintf(resumed[2], sizeof resumed[2], "%s_resumed.out", tag);
    int r = test_system("%s test/pyio_torch.py %s %s %d %d %s %s > %s", python, path(ck), path("batch.bin"), B, T,
                        path(same), path(fresh), path(out));
    double t32 = NAN, t64 = NAN, n32 = NAN, n64 = NAN, rec = NAN, new_rec = NAN;
    FILE *f = fopen(path(out), "r");
    char name[32];
    double v;
    while (f && fscanf(f, "%31s %lf", name, &v) == 2) {
        if (!strcmp(name, "torch32")) t32 = v;
        if (!strcmp(name, "torch64")) t64 = v;
        if (!strcmp(name, "new32")) n32 = v;
        if (!strcmp(name, "new64")) n64 = v;
        if (!strcmp(name, "record")) rec = v;
        if (!strcmp(name, "new_record")) new_rec = v;
    }
    if (f) fclose(f);
    CHECK(r == 0 && t64 == t64 && n64 == n64, "%s: test/pyio_torch.py exits 0 and prints its losses (exit %d)", tag, r);
    if (r != 0) return;
    CHECK(files_equal(path(ck), path(same)), "%s: checkpoint -> state_dict -> checkpoint is equal to the byte", tag);
    size_t n_run = 0;
    free(c_run_record(path(ck), &n_run));
    CHECK(rec == (double)n_run && n_run > 0 && new_rec == 0,
          "%s: Python reads the trainer's run record (%.0f bytes, C: %zu), new() writes none (%.0f)", tag, rec,
          n_run, new_rec);
    double c = c_loss(path(ck), in, tg, rs, 0), e64 = fabs(c - t64) / t64, e32 = fabs(c - t32) / t64;
    CHECK(e64 <= LOSS_TOL, "%s: loss C FP32 %.9f vs torch float64 %.9f: rel diff %.2e = %5.1f%% of tolerance %.0e",
          tag, c, t64, e64, 100 * e64 / LOSS_TOL, LOSS_TOL);
    CHECK(e32 <= LOSS_TOL, "%s: loss C FP32 %.9f vs torch float32 %.9f: rel diff %.2e = %5.1f%% of tolerance %.0e",
          tag, c, t32, e32, 100 * e32 / LOSS_TOL, LOSS_TOL);
    // weights written by Python: the trainer resumes from them, and the loss agrees again
    // (it has no run record: the command line gives the run's settings, and the trainer says so)
    int rt = test_system("%s " TINY " %s --seed 1 --steps 1 --resume %s --out %s > %s 2>&1", trainer, model_flags,
                         path(fresh), path(resumed[1]), path(resumed[2]));
    CHECK(rt == 0 && file_size(path(resumed[0])) > 0 && file_contains(path(resumed[2]), "has no run record"),
          "%s: ./train --resume loads the checkpoint Python wrote from new weights, without a record (exit %d)", tag,
          rt);
    if (rt != 0) return;
    // from a zero state (a fresh checkpoint carries zeros); the old weights' loss from zeros shows they moved
    double cn = c_loss(path(fresh), in, tg, rs, 1), c0 = c_loss(path(ck), in, tg, rs, 1);
    double en = fabs(cn - n64) / n64, en32 = fabs(cn - n32) / n64;
    CHECK(en <= LOSS_TOL && en32 <= LOSS_TOL && fabs(cn - c0) > 1e-3,
          "%s: new weights: loss C %.9f vs torch float64 %.9f, float32 %.9f: rel diff %.2e, %.2e = %5.1f%% of "
          "tolerance %.0e "
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

int main(void) {
    snprintf(trainer, sizeof trainer, "%s/train", test_bin_dir());
    if (access("tools/mlstm_ckpt.py", R_OK) != 0 || access("test/pyio_torch.py", R_OK) != 0) {
        CHECK(0, "tools/mlstm_ckpt.py and test/pyio_torch.py not found: run from the repository root (make test does)");
        return test_summary("test_pyio");
    }
    if (!find_python()) {
        char what[1200];
        snprintf(what, sizeof what, "every Python check (no NumPy in %s)",
                 getenv("PYTHON") ? getenv("PYTHON") : "python3 or /usr/bin/python3");
        skipped(what);
        return test_summary("test_pyio");
    }
    have_torch = test_system("%s -c 'import torch' > /dev/null 2>&1", python) == 0;
    printf("python: %s (torch %s)\n", python, have_torch ? "yes" : "no");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    // a stand-in torch that cannot be imported: the NumPy path must not need the real one
    test_system("mkdir -p %s/notorch && echo 'raise ImportError(\"torch blocked by test_pyio\")' > %s/notorch/torch.py",
                dir, dir);
    CHECK(test_system("PYTHONPATH=%s/notorch %s -c 'import torch' 2> /dev/null", dir, python) != 0,
          "the torch blocker works (import torch fails under it)");

    int ra = test_system("%s " TINY " --steps 5 --out %s > %s 2>&1 && cp %s/latest.ckpt %s", trainer, path("a"),
                         path("a.out"), path("a"), path("a.ckpt"));
    int rn = test_system("%s " TINY " --no-weight-norm --steps 5 --out %s > %s 2>&1 && cp %s/latest.ckpt %s", trainer,
                         path("n"), path("n.out"), path("n"), path("n.ckpt"));
    CHECK(ra == 0 && rn == 0, "./train writes 5-step checkpoints with and without weight norm (exit %d %d)", ra, rn);
    test_numpy_roundtrip("a");
    test_numpy_roundtrip("n");
    test_header_table();
    test_versions();
    test_not_identity();
    test_crafted();
    test_record_edit();
    test_resume("a", "");
    test_resume("n", "--no-weight-norm");
    test_bad_input();
    test_files();
    test_npz_damage();
    test_refuse_api(0);

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
        test_refuse_api(1);
    } else {
        skipped("the PyTorch checks (state_dict round trip, equal losses; no torch)");
    }
    if (!getenv("KEEP")) test_system("rm -rf %s", dir);
    return test_summary("test_pyio");
}
