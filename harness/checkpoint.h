// harness/checkpoint.h: the checkpoint file, its format, writer and reader. Not in the papers:
// what lets a run stop and continue, and a model travel to the tools. mlstm.h is the model it
// holds; doc/formats.md has the byte layout.
#pragma once
#include "mlstm.h"  // defines: Mlstm, MlstmConfig, param_count, real; and via it util.h's AtomicFile, checksum_*

// Checkpoints (doc/design.md, "Checkpoints"; byte layout in doc/formats.md). A 256-byte
// little-endian header, then FP32 master weights, Adam moments, and the carried
// state of all G rows of the global batch, then the run record: the trainer's
// settings as text, so that a resume continues the same run (train.h). The checksum
// covers the header (with its checksum field zero), the payload and the record.
// Written whole or not at all; read through the one open file that was verified.

#define CKPT_MAGIC "MLSTMCKP"
#define CKPT_VERSION 4  // 2 added the run record, 3 the run's identity and the score, 4 made the identity checkable
#define CKPT_MAX_RUN_BYTES (1u << 30)
#define CKPT_HEADER_BYTES 256
#define CKPT_SCALER_BYTES 48  // the scaler's field; CKPT_SCALER_USED of it are used, the rest 0
#define CKPT_SCALER_USED 40   // schedule.h's LOSS_SCALER_BYTES (harness/train_harness.h asserts the two agree)

// The header, little-endian: the byte offset of each field (doc/formats.md has the table).
enum {
    CKPT_AT_MAGIC = 0,         // char[8] CKPT_MAGIC
    CKPT_AT_VERSION = 8,       // u32 CKPT_VERSION
    CKPT_AT_HEADER_SIZE = 12,  // u32 CKPT_HEADER_BYTES
    CKPT_AT_V = 16,            // u32 vocabulary
    CKPT_AT_D = 20,            // u32 embedding width
    CKPT_AT_H = 24,            // u32 hidden width
    CKPT_AT_WNORM = 28,        // u32 weight norm 0/1
    CKPT_AT_NPARAMS = 32,      // u64 parameter count
    CKPT_AT_G = 40,            // u32 rows of carried state; 44..47 reserved, 0
    CKPT_AT_STEP = 48,         // u64 applied steps
    CKPT_AT_DATA_STEP = 56,    // u64 batches read
    CKPT_AT_RNG = 64,          // u64 the trainer's RNG state
    CKPT_AT_SCALER = 72,       // CKPT_SCALER_BYTES of loss scaler state
    CKPT_AT_PAYLOAD = 120,     // u64 payload bytes
    CKPT_AT_CHECKSUM = 128,    // u64 checksum
    CKPT_AT_RUN_BYTES = 136,   // u64 bytes of the run record after the payload (version 1: reserved, 0)
    CKPT_AT_RUN_ID = 144,      // u64 the run's identity, also on its log's first line (versions 1, 2: 0, unknown)
    CKPT_AT_BEST_BY = 152,     // u32 what the run's best checkpoint is judged by (CkptBestBy); 156..159 reserved, 0
    CKPT_AT_SCORE = 160,       // f64 this checkpoint's score under BEST_BY, lower is better (NaN: not scored)
    CKPT_AT_LOSS_EMA = 168,    // f64 the training loss's moving mean, its state; 176..255 reserved, 0
};

// What makes a checkpoint the run's best (train.h, best_offer): the validation loss,
// or, for a run that validates only at its end, the training loss's moving mean.
typedef enum { CKPT_BEST_BY_NONE = 0, CKPT_BEST_BY_VAL = 1, CKPT_BEST_BY_TRAIN = 2 } CkptBestBy;

typedef struct {
    uint64_t step;       // applied (non-skipped) updates: Adam's step and the schedule's
    uint64_t data_step;  // global batches consumed, skipped ones included: the loader position
    uint64_t rng;        // the trainer's RNG state (sampling)
    int G;               // rows of carried state (world * B)
    uint8_t scaler[CKPT_SCALER_BYTES];  // the loss scaler's serialised state (schedule.h)
    uint64_t run_id;     // the run this checkpoint belongs to (0: unknown, an older file)
    CkptBestBy best_by;  // how the run scores its checkpoints
    double score;        // this one's score (nats), NaN when it was not scored
    double loss_ema;     // the state of the training loss's moving mean, continued by a resume
} TrainState;

typedef struct {
    char magic[8];
    uint32_t version, header_bytes;
    MlstmConfig cfg;
    uint64_t nparams, payload_bytes, run_bytes;
    uint64_t checksum;  // the file's: two ranks that read the same checkpoint have the same
    TrainState st;
} CkptHeader;

// The header's fields, one row each, walked both ways: by the writer (ckpt_header_pack) and
// the reader (ckpt_header_unpack). doc/formats.md's header table and tools/mlstm_ckpt.py's
// _FIELDS are the same rows (test_pyio checks that the three agree). `member`: where the
// value lives in a CkptHeader; `since`: the format version that added the field, which an
// older file reads as 0. A U32 field's member is a 4-byte int, enum or uint32_t.
typedef enum { CKPT_U32, CKPT_U64, CKPT_F64, CKPT_BYTES } CkptFieldType;
typedef struct {
    const char *name;
    int at, bytes;
    CkptFieldType type;
    uint32_t since;
    size_t member;
} CkptField;
#define CKPT_FIELD(name, at, bytes, type, since, member) {name, at, bytes, type, since, offsetof(CkptHeader, member)}
static const CkptField ckpt_fields[] = {
    CKPT_FIELD("magic", CKPT_AT_MAGIC, 8, CKPT_BYTES, 1, magic),
    CKPT_FIELD("version", CKPT_AT_VERSION, 4, CKPT_U32, 1, version),
    CKPT_FIELD("header size", CKPT_AT_HEADER_SIZE, 4, CKPT_U32, 1, header_bytes),
    CKPT_FIELD("V", CKPT_AT_V, 4, CKPT_U32, 1, cfg.V),
    CKPT_FIELD("D", CKPT_AT_D, 4, CKPT_U32, 1, cfg.D),
    CKPT_FIELD("H", CKPT_AT_H, 4, CKPT_U32, 1, cfg.H),
    CKPT_FIELD("weight norm", CKPT_AT_WNORM, 4, CKPT_U32, 1, cfg.wnorm),
    CKPT_FIELD("nparams", CKPT_AT_NPARAMS, 8, CKPT_U64, 1, nparams),
    CKPT_FIELD("G", CKPT_AT_G, 4, CKPT_U32, 1, st.G),
    CKPT_FIELD("step", CKPT_AT_STEP, 8, CKPT_U64, 1, st.step),
    CKPT_FIELD("data step", CKPT_AT_DATA_STEP, 8, CKPT_U64, 1, st.data_step),
    CKPT_FIELD("rng", CKPT_AT_RNG, 8, CKPT_U64, 1, st.rng),
    CKPT_FIELD("loss scaler", CKPT_AT_SCALER, CKPT_SCALER_BYTES, CKPT_BYTES, 1, st.scaler),
    CKPT_FIELD("payload bytes", CKPT_AT_PAYLOAD, 8, CKPT_U64, 1, payload_bytes),
    CKPT_FIELD("checksum", CKPT_AT_CHECKSUM, 8, CKPT_U64, 1, checksum),
    CKPT_FIELD("run record bytes", CKPT_AT_RUN_BYTES, 8, CKPT_U64, 2, run_bytes),
    CKPT_FIELD("run", CKPT_AT_RUN_ID, 8, CKPT_U64, 3, st.run_id),
    CKPT_FIELD("best by", CKPT_AT_BEST_BY, 4, CKPT_U32, 3, st.best_by),
    CKPT_FIELD("score", CKPT_AT_SCORE, 8, CKPT_F64, 3, st.score),
    CKPT_FIELD("loss mean state", CKPT_AT_LOSS_EMA, 8, CKPT_F64, 3, st.loss_ema),
};
#undef CKPT_FIELD
enum { CKPT_NFIELDS = sizeof ckpt_fields / sizeof ckpt_fields[0] };
static_assert(sizeof(int) == 4 && sizeof(CkptBestBy) == 4, "the header's U32 fields are 4-byte members");

static inline void ckpt_header_pack(const CkptHeader *h, uint8_t out[CKPT_HEADER_BYTES]) {
    memset(out, 0, CKPT_HEADER_BYTES);
    for (int i = 0; i < CKPT_NFIELDS; i++) {
        const CkptField *f = &ckpt_fields[i];
        const char *p = (const char *)h + f->member;
        uint32_t u32;
        uint64_t u64;
        double x;
        switch (f->type) {
        case CKPT_U32: memcpy(&u32, p, 4); put32(out + f->at, u32); break;
        case CKPT_U64: memcpy(&u64, p, 8); put64(out + f->at, u64); break;
        case CKPT_F64: memcpy(&x, p, 8); put64(out + f->at, f64_bits(x)); break;
        case CKPT_BYTES: memcpy(out + f->at, p, (size_t)f->bytes); break;
        }
    }
}
// Whether every byte of the header outside the fields of its version is 0, as the format
// says: a byte set there is a corrupt file, or a newer version under an older number.
static inline int ckpt_header_unused_zero(const uint8_t in[CKPT_HEADER_BYTES], uint32_t version) {
    uint8_t used[CKPT_HEADER_BYTES] = {0};
    for (int i = 0; i < CKPT_NFIELDS; i++)
        if (version >= ckpt_fields[i].since) memset(used + ckpt_fields[i].at, 1, (size_t)ckpt_fields[i].bytes);
    for (int i = 0; i < CKPT_HEADER_BYTES; i++)
        if (!used[i] && in[i]) return 0;
    return 1;
}
// The fields of a header whose version is known to be one this build reads.
static inline void ckpt_header_unpack(const uint8_t in[CKPT_HEADER_BYTES], CkptHeader *h) {
    uint32_t version = get32(in + CKPT_AT_VERSION);
    memset(h, 0, sizeof *h);
    for (int i = 0; i < CKPT_NFIELDS; i++) {
        const CkptField *f = &ckpt_fields[i];
        char *p = (char *)h + f->member;
        uint32_t u32 = version >= f->since ? get32(in + f->at) : 0;
        uint64_t u64 = version >= f->since ? get64(in + f->at) : 0;
        double x = f64_from_bits(u64);
        switch (f->type) {
        case CKPT_U32: memcpy(p, &u32, 4); break;
        case CKPT_U64: memcpy(p, &u64, 8); break;
        case CKPT_F64: memcpy(p, &x, 8); break;
        case CKPT_BYTES: memcpy(p, in + f->at, (size_t)f->bytes); break;
        }
    }
}

// Limits of the model's sizes: far beyond the paper's (H=4096, D=64), small enough that
// every size product fits its type with room to spare (4H x H is 2^34 elements). The
// trainers' --hidden and --embed stop there, checkpoint_open refuses a file beyond them
// (so the trainers, generate, transfer and tools/mlstm_ckpt.py refuse the same files),
// and tools/import_npy writes none.
#define MAX_HIDDEN 65536
#define MAX_EMBED 65536

// A run directory (doc/formats.md) holds its checkpoints under these names; a reader
// given the directory reads its best model (checkpoint_file).
#define RUN_BEST_CKPT "best.ckpt"      // the best model of a run directory (the readers' default)
#define RUN_LATEST_CKPT "latest.ckpt"  // where a resume continues

// The parameter count and payload size of a header's model, computed from the file's
// fields and so overflow-checked: 0 when they do not fit 64 bits (no valid file has 0).
// The payload is the weights and both Adam moments (3 nparams) and the carried h and c
// (G x H each), as FP32.
static inline uint64_t ckpt_param_count(const MlstmConfig *c) {
    if (c->V < 0 || c->D < 0 || c->H < 0) return 0;
    size_t rows[NPARAM], cols[NPARAM];
    param_shapes(c, rows, cols);  // each at most 4H, V or D: no product yet
    uint64_t n = 0, k;
    for (int i = 0; i < NPARAM; i++)
        if (!mul_u64(rows[i], cols[i], &k) || !add_u64(n, k, &n)) return 0;
    return n;
}
static inline uint64_t ckpt_payload_bytes(const MlstmConfig *c, uint64_t nparams, int G) {
    uint64_t state, weights, floats, bytes;
    if (G < 0 || c->H < 0 || !mul_u64(2 * (uint64_t)G, (uint64_t)c->H, &state) || !mul_u64(3, nparams, &weights) ||
        !add_u64(weights, state, &floats) || !mul_u64(4, floats, &bytes))
        return 0;
    return bytes;
}

// The checksum runs over the file's 8-byte words (checksum_update's chunks other than
// the last must be whole words), and an array of odd length ends inside one: its last
// float waits in `pending` for the next array's first (an odd H, or H(D+H), hit this).
typedef struct { uint64_t h; float pending; int has_pending; } CkptSum;

// Writes a real array as FP32, feeding the checksum.
#define CKPT_CHUNK 4096
static inline void ckpt_write_f32(AtomicFile *af, CkptSum *s, const real *x, size_t n) {
    float buf[1 + CKPT_CHUNK];  // buf[0]: the float carried in, if any
    for (size_t i = 0; i < n; i += CKPT_CHUNK) {
        size_t k = n - i < CKPT_CHUNK ? n - i : CKPT_CHUNK;
        size_t m = (size_t)s->has_pending;
        buf[0] = s->pending;
        for (size_t j = 0; j < k; j++) buf[m + j] = (float)x[i + j];
        atomic_write(af, buf + m, k * 4);
        m += k;
        s->has_pending = (int)(m & 1);
        if (s->has_pending) s->pending = buf[m - 1];
        s->h = checksum_update(s->h, buf, (m - (m & 1)) * 4);
    }
}

// The run record's data identity (doc/formats.md, "Run record"): the values of these two
// names are one line per shard, "<bytes> <checksum, 16 hex digits> <file name>\n" (run.h,
// data_identity, writes them).
#define RECORD_TRAIN_DATA "train data"
#define RECORD_VAL_DATA "val data"
#define RECORD_NAME_MAX 200  // the most bytes of a shard's file name an identity line keeps

// Whether `line` (up to its '\n') is one identity line exactly as data_identity writes it:
// the size in digits without a leading zero, within int64; one space; 16 lowercase hex
// digits; one space; 1 to RECORD_NAME_MAX bytes of name; '\n'. Returns its length, 0 if not.
static inline size_t ckpt_identity_line(const char *line) {
    size_t digits = strspn(line, "0123456789");
    if (!digits || digits > 19 || (digits > 1 && line[0] == '0') || line[digits] != ' ') return 0;
    errno = 0;
    if (strtoull(line, NULL, 10) > (unsigned long long)INT64_MAX || errno) return 0;
    const char *sum = line + digits + 1;
    if (strspn(sum, "0123456789abcdef") != 16 || sum[16] != ' ') return 0;
    const char *name = sum + 17;
    size_t len = strcspn(name, "\n");
    if (!len || len > RECORD_NAME_MAX || name[len] != '\n') return 0;
    return (size_t)(name + len + 1 - line);
}

// What is wrong with a run record of n bytes, in why (cap bytes), or 0 when nothing is: it
// is whole NUL-terminated name, value pairs, no name empty, and each data identity one or
// more identity lines. Every reader checks it (checkpoint_open; tools/mlstm_ckpt.py's load).
static inline int ckpt_record_invalid(const uint8_t *run, uint64_t n, char *why, size_t cap) {
    const char *text = (const char *)run;
    if (n && run[n - 1] != 0) {
        snprintf(why, cap, "the run record (%llu bytes) is not a list of NUL-terminated name, value pairs",
                 (unsigned long long)n);
        return 1;
    }
    for (uint64_t at = 0; at < n;) {
        const char *name = text + at;
        at += strlen(name) + 1;
        const char *value = text + at;
        if (at >= n || !name[0]) {
            snprintf(why, cap, "the run record (%llu bytes) is not a list of NUL-terminated name, value pairs%s",
                     (unsigned long long)n, at < n ? " (an empty name)" : "");
            return 1;
        }
        at += strlen(value) + 1;
        if (strcmp(name, RECORD_TRAIN_DATA) && strcmp(name, RECORD_VAL_DATA)) continue;
        int line = 1;
        for (const char *p = value;; line++) {
            size_t len = ckpt_identity_line(p);
            if (!len) {
                snprintf(why, cap, "the run record's \"%s\" line %d is not \"<bytes> <checksum: 16 hex digits> "
                         "<file name>\" as the trainer writes it", name, line);
                return 1;
            }
            p += len;
            if (!*p) break;
        }
    }
    return 0;
}

// The run's identity (the header's `run`, format version 4 on; doc/formats.md, "Run identity"),
// made from the checkpoint alone, so that every reader can recompute it: the checksum of the
// record's name, value pairs in their order, less those a resume may change
// (CKPT_NOT_IDENTITY: where the data is, the run's length, what a validation reads), with
// each data identity line cut to its size and checksum (data renamed or moved is the same
// data), then D, H, weight norm and G as u32. run: (n,) a record that ckpt_record_invalid
// accepts. Never 0, which means "unknown".
static const char *const CKPT_NOT_IDENTITY[] = {"train", "val", "steps", "val-steps", "val-batch"};
enum { CKPT_N_NOT_IDENTITY = sizeof CKPT_NOT_IDENTITY / sizeof CKPT_NOT_IDENTITY[0] };
static inline uint64_t ckpt_run_identity(const uint8_t *run, uint64_t n, const MlstmConfig *cfg, int G) {
    uint8_t *canon = (uint8_t *)mallocCheck(n + 16), *out = canon;
    const char *text = (const char *)run;
    for (uint64_t at = 0; at < n;) {
        const char *name = text + at, *value = name + strlen(name) + 1;
        size_t name_bytes = strlen(name) + 1, value_bytes = strlen(value) + 1;
        at += name_bytes + value_bytes;
        int kept = 1;
        for (int i = 0; i < CKPT_N_NOT_IDENTITY; i++) kept = kept && strcmp(name, CKPT_NOT_IDENTITY[i]);
        if (!kept) continue;
        memcpy(out, name, name_bytes), out += name_bytes;
        if (strcmp(name, RECORD_TRAIN_DATA) && strcmp(name, RECORD_VAL_DATA)) {
            memcpy(out, value, value_bytes), out += value_bytes;
            continue;
        }
        for (const char *line = value; *line; line += ckpt_identity_line(line)) {  // "<bytes> <checksum> <name>\n"
            size_t size_and_sum = strspn(line, "0123456789") + 1 + 16;
            memcpy(out, line, size_and_sum), out += size_and_sum;
            *out++ = '\n';
        }
        *out++ = 0;
    }
    put32(out, (uint32_t)cfg->D), put32(out + 4, (uint32_t)cfg->H);
    put32(out + 8, (uint32_t)cfg->wnorm), put32(out + 12, (uint32_t)G);
    uint64_t h = checksum_final(checksum_update(CHECKSUM_INIT, canon, (size_t)(out + 16 - canon)));
    free(canon);
    return h ? h : 1;
}

// h, c: (G,H) carried state of the whole global batch; run: (run_bytes,) the run record, or NULL.
// version: CKPT_VERSION, or 3 for a run whose identity was made before version 4 (run.h, run_id_continued).
static inline void checkpoint_save_run(const char *path, const Mlstm *m, const TrainState *st, const real *h,
                                       const real *c, const uint8_t *run, size_t run_bytes, uint32_t version) {
    char why[300];
    if (run_bytes > CKPT_MAX_RUN_BYTES) fail("cannot write %s: a run record of %zu bytes (a bug)", path, run_bytes);
    if (version != CKPT_VERSION && version != 3) fail("cannot write %s: format version %u (a bug)", path, version);
    if (version >= 4 && st->run_id && run_bytes &&
        (ckpt_record_invalid(run, run_bytes, why, sizeof why) ||
         ckpt_run_identity(run, run_bytes, &m->cfg, st->G) != st->run_id))
        fail("cannot write %s: run %016llx is not the identity of its run record and model (a bug)", path,
             (unsigned long long)st->run_id);
    CkptHeader header = {{0}, version, CKPT_HEADER_BYTES, m->cfg, m->nparams, 0, run_bytes, 0, *st};
    memcpy(header.magic, CKPT_MAGIC, 8);
    header.payload_bytes = ckpt_payload_bytes(&m->cfg, m->nparams, st->G);
    uint8_t hd[CKPT_HEADER_BYTES];
    ckpt_header_pack(&header, hd);
    // the checksum is computed with its own field zero, then patched in
    AtomicFile af;
    atomic_open(&af, path);
    CkptSum sum = {checksum_update(CHECKSUM_INIT, hd, CKPT_HEADER_BYTES), 0, 0};
    atomic_write(&af, hd, CKPT_HEADER_BYTES);
    ckpt_write_f32(&af, &sum, m->params, m->nparams);
    ckpt_write_f32(&af, &sum, m->adam_m, m->nparams);
    ckpt_write_f32(&af, &sum, m->adam_v, m->nparams);
    ckpt_write_f32(&af, &sum, h, (size_t)st->G * m->cfg.H);
    ckpt_write_f32(&af, &sum, c, (size_t)st->G * m->cfg.H);
    atomic_write(&af, run, run_bytes);
    // the last chunk: the float the payload left half a word open, if any, then the record
    uint8_t *tail = (uint8_t *)mallocCheck(4 + run_bytes);
    size_t n_tail = 0;
    if (sum.has_pending) memcpy(tail, &sum.pending, 4), n_tail = 4;
    if (run_bytes) memcpy(tail + n_tail, run, run_bytes);
    sum.h = checksum_update(sum.h, tail, n_tail + run_bytes);
    free(tail);
    put64(hd + CKPT_AT_CHECKSUM, checksum_final(sum.h));
    if (fseek(af.f, CKPT_AT_CHECKSUM, SEEK_SET) != 0) {
        atomic_abort(&af);
        fail("cannot write %s: seek failed", path);
    }
    atomic_write(&af, hd + CKPT_AT_CHECKSUM, 8);
    atomic_commit(&af);
}
static inline void checkpoint_save(const char *path, const Mlstm *m, const TrainState *st, const real *h,
                                   const real *c) {
    checkpoint_save_run(path, m, st, h, c, NULL, 0, CKPT_VERSION);
}

// A checkpoint argument (generate, transfer, the trainers' --init-from,
// tools/mlstm_ckpt.py) names a checkpoint file or a run directory, which stands for
// its best model, DIR/best.ckpt. Returns the file to read: path itself, or that name
// written into `file` (cap bytes). A directory without best.ckpt is an error naming it
// and saying whether its latest.ckpt is there to be given instead.
static inline const char *checkpoint_file(const char *path, char *file, size_t cap) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return path;
    size_t n = strlen(path);
    const char *sep = n && path[n - 1] == '/' ? "" : "/";
    if ((size_t)snprintf(file, cap, "%s%s%s", path, sep, RUN_BEST_CKPT) >= cap)
        fail("checkpoint path too long: %s", path);
    if (lstat(file, &sb) == 0 || errno != ENOENT) return file;  // there (checkpoint_open checks what it is)
    char latest[4200];
    snprintf(latest, sizeof latest, "%s%s%s", path, sep, RUN_LATEST_CKPT);
    if (lstat(latest, &sb) == 0)
        fail("%s is a run directory without %s (its best model); it has %s: give %s to read that", path,
             RUN_BEST_CKPT, RUN_LATEST_CKPT, latest);
    fail("%s is a directory without %s or %s: not a run directory (give a checkpoint file)", path, RUN_BEST_CKPT,
         RUN_LATEST_CKPT);
    return NULL;
}

// The run record of an open checkpoint whose checksum matched: (run_bytes + 1,) malloc'd, NUL-terminated
// past its end; NULL when the file has none (version 1, or written by tools/mlstm_ckpt.py new).
static inline uint8_t *checkpoint_read_run(FILE *f, const char *path, const CkptHeader *hd) {
    if (!hd->run_bytes) return NULL;
    uint8_t *run = (uint8_t *)mallocCheck(hd->run_bytes + 1);
    if (fseeko(f, (off_t)(CKPT_HEADER_BYTES + hd->payload_bytes), SEEK_SET) != 0 ||
        fread(run, 1, hd->run_bytes, f) != hd->run_bytes)
        fail("cannot read checkpoint %s: its run record", path);
    return run;
}

// Opens a checkpoint and validates its header and checksum (the whole file is read
// once). Any problem is fatal with a message naming the file (DIR/best.ckpt for a run
// directory, checkpoint_file). The weights are then read from the returned file
// (checkpoint_read), never from the path again: a file put in its place meanwhile is
// not read unverified. The sizes are checked against this build's limits before any
// size is computed from them, and the computed ones against overflow, so a header
// cannot make a payload size wrap to the size of a small file.
static inline FILE *checkpoint_open(const char *path_given, CkptHeader *out) {
    char resolved[4200];
    const char *path = checkpoint_file(path_given, resolved, sizeof resolved);
    // O_NONBLOCK: opening a FIFO would wait for a writer forever; on a file it changes nothing
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail("cannot open checkpoint %s: %s", path, strerror(errno));
    struct stat sb;
    memset(&sb, 0, sizeof sb);
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        fail("checkpoint %s is not a regular file (%s)", path, file_kind(sb.st_mode));
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) fail("cannot open checkpoint %s: %s", path, strerror(errno));
    uint8_t hd[CKPT_HEADER_BYTES];
    size_t got = fread(hd, 1, CKPT_HEADER_BYTES, f);
    if (got >= 8 && memcmp(hd + CKPT_AT_MAGIC, CKPT_MAGIC, 8) != 0) {
        fclose(f);
        fail("%s is not an mlstm checkpoint (bad magic)", path);
    }
    if (got < CKPT_HEADER_BYTES) {
        fclose(f);
        fail("checkpoint %s is truncated: %zu bytes, the header alone is %d", path, got, CKPT_HEADER_BYTES);
    }
    uint32_t version = get32(hd + CKPT_AT_VERSION);
    if (version < 1 || version > CKPT_VERSION) {
        fclose(f);
        fail("checkpoint %s has format version %u; this build reads versions 1 to %d", path, version, CKPT_VERSION);
    }
    uint32_t D = get32(hd + CKPT_AT_D), H = get32(hd + CKPT_AT_H);
    if (D > MAX_EMBED || H > MAX_HIDDEN) {
        fclose(f);
        fail("checkpoint %s: D=%u H=%u, beyond this build's limits (D at most %d, H at most %d)", path, D, H,
             MAX_EMBED, MAX_HIDDEN);
    }
    ckpt_header_unpack(hd, out);
    uint32_t best_by = out->st.best_by;
    uint64_t want_sum = out->checksum;
    // a score and the loss mean are losses in nats: never below 0 (a score may be NaN: not scored)
    int sane = best_by <= CKPT_BEST_BY_TRAIN && isfinite(out->st.loss_ema) && out->st.loss_ema >= 0 &&
               !(out->st.score < 0) && out->cfg.V == 256 &&
               out->cfg.D >= 1 && out->cfg.H >= 1 && out->st.G >= 1 && !(out->cfg.wnorm & ~1) &&
               out->header_bytes == CKPT_HEADER_BYTES;
    for (int i = CKPT_SCALER_USED; i < CKPT_SCALER_BYTES; i++) sane = sane && out->st.scaler[i] == 0;
    sane = sane && out->nparams == ckpt_param_count(&out->cfg) && out->nparams;
    sane = sane && out->payload_bytes == ckpt_payload_bytes(&out->cfg, out->nparams, out->st.G) && out->payload_bytes;
    sane = sane && out->run_bytes <= CKPT_MAX_RUN_BYTES && ckpt_header_unused_zero(hd, version);
    if (!sane) {
        fclose(f);
        fail("checkpoint %s has an inconsistent header (corrupt file)", path);
    }
    put64(hd + CKPT_AT_CHECKSUM, 0);
    uint64_t sum = checksum_update(CHECKSUM_INIT, hd, CKPT_HEADER_BYTES), total = 0;
    static uint8_t buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) {
        sum = checksum_update(sum, buf, k);
        total += k;
    }
    uint64_t want = out->payload_bytes + out->run_bytes;
    int bad = total < want ? 1 : total > want ? 2 : checksum_final(sum) != want_sum ? 3 : 0;
    if (bad) fclose(f);
    if (bad == 1)
        fail("checkpoint %s is truncated: %llu bytes after the header, the header says %llu", path,
             (unsigned long long)total, (unsigned long long)want);
    if (bad == 2)
        fail("checkpoint %s has %llu bytes after the payload and run record (corrupt file)", path,
             (unsigned long long)(total - want));
    if (bad == 3) fail("checkpoint %s fails its checksum (corrupt file)", path);
    uint8_t *run = checkpoint_read_run(f, path, out);
    char why[300];
    int invalid = ckpt_record_invalid(run, out->run_bytes, why, sizeof why);
    // version 4 on: a run identity must be its record's and header's (earlier ones were made otherwise)
    uint64_t identity = invalid || version < 4 || !out->st.run_id || !run ? 0
                      : ckpt_run_identity(run, out->run_bytes, &out->cfg, out->st.G);
    free(run);
    if (invalid) {
        fclose(f);
        fail("checkpoint %s: %s (corrupt file)", path, why);
    }
    if (identity && identity != out->st.run_id) {
        fclose(f);
        fail("checkpoint %s: its run %016llx is not the identity of its run record and model (%016llx): an edited "
             "or corrupt file", path, (unsigned long long)out->st.run_id, (unsigned long long)identity);
    }
    return f;
}
// Validation alone (the header fields for the caller), the file closed again.
static inline void checkpoint_header(const char *path, CkptHeader *out) { fclose(checkpoint_open(path, out)); }

static inline void ckpt_read_f32(FILE *f, real *x, size_t n) {
    float buf[CKPT_CHUNK];
    for (size_t i = 0; i < n; i += CKPT_CHUNK) {
        size_t k = n - i < CKPT_CHUNK ? n - i : CKPT_CHUNK;
        if (fread(buf, 4, k, f) != k) fail("checkpoint changed while being read");
        for (size_t j = 0; j < k; j++) x[i + j] = buf[j];
    }
}

// Reads an open, verified checkpoint (checkpoint_open) into a model built with the
// config the command line asks for, and the carried state of G rows into h, c (G,H).
// A different config or G is an error that names both.
static inline void checkpoint_read(FILE *f, const char *path, const CkptHeader *hd_in, Mlstm *m, TrainState *st,
                                   real *h, real *c, int G) {
    CkptHeader hd = *hd_in;
    const MlstmConfig *w = &m->cfg;
    if (hd.cfg.D != w->D || hd.cfg.H != w->H || hd.cfg.wnorm != w->wnorm)
        fail("checkpoint %s is a model with D=%d H=%d weight-norm=%d; "
             "the command line asks for D=%d H=%d weight-norm=%d",
             path, hd.cfg.D, hd.cfg.H, hd.cfg.wnorm, w->D, w->H, w->wnorm);
    if (hd.st.G != G)
        fail("checkpoint %s carries state for a global batch of %d rows; "
             "the command line asks for %d (world x --batch)", path, hd.st.G, G);
    if (fseek(f, CKPT_HEADER_BYTES, SEEK_SET) != 0) fail("cannot read checkpoint %s", path);
    ckpt_read_f32(f, m->params, m->nparams);
    ckpt_read_f32(f, m->adam_m, m->nparams);
    ckpt_read_f32(f, m->adam_v, m->nparams);
    ckpt_read_f32(f, h, (size_t)G * w->H);
    ckpt_read_f32(f, c, (size_t)G * w->H);
    *st = hd.st;
}
// Opens, verifies and reads in one go.
static inline void checkpoint_load(const char *path_given, Mlstm *m, TrainState *st, real *h, real *c, int G) {
    char resolved[4200];
    const char *path = checkpoint_file(path_given, resolved, sizeof resolved);
    CkptHeader hd;
    FILE *f = checkpoint_open(path, &hd);
    checkpoint_read(f, path, &hd, m, st, h, c, G);
    fclose(f);
}
