// transfer: the sentiment transfer evaluation of Radford et al. 2017 (and NVIDIA's
// sentiment-discovery): the final cell state c of the language model, read over a
// labelled document from a zero state, is the document's feature vector; an
// L1-regularised logistic regression on it is the classifier; the unit with the
// largest weight is the "sentiment neuron". Three commands (doc/transfer.md):
//
//   build/transfer featurize -m CKPT -o OUT.feat [options] INPUT
//   build/transfer classify [--summary FILE] TRAIN.feat VAL.feat TEST.feat
//   build/transfer heatmap -m CKPT --unit K [--sign S] -o PREFIX [options] INPUT
//
// INPUT (kind from the name, or --format csv|imdb|jsonl|shards|builtin):
//   *.csv            RFC 4180 with a header row (the SST binary files: label,sentence)
//   a directory      the IMDB layout: DIR/pos/*.txt (label 1) and DIR/neg/*.txt (label 0)
//   *.json, *.jsonl  one JSON object per line; text from --text-field, label from
//                    --label-field (defaults: the first of reviewText, text, sentence,
//                    review / overall, label, stars, rating, sentiment)
//   DIR/SPLIT_labels.tsv  shards written by build/prepare: each labelled document of
//                    DIR/SPLIT_*.bin, the label from the labels file ("-" left out)
//   builtin:SPLIT    the built-in corpus (corpus.h), SPLIT train, val or test: --docs
//                    labelled documents from a stream of its own, half of each label;
//                    stars >= 4 positive, <= 2 negative, 3 dropped (--threshold 3)
// Labels must be 0 or 1 unless --threshold X is given: then a rating above X is 1,
// below X is 0, and equal to X is dropped. Text is framed as in training and in
// Radford et al.'s preprocess(): newlines become spaces, surrounding whitespace is
// trimmed, then "\n " + text + " ". An empty document, a missing column or field, or
// a label that is not 0/1 is an error naming file:line (exit 2).
//
// Features file (.feat), little-endian: "MLSTMFEA", u32 version 1, u32 H, u64 n,
// u64 0; then n i32 labels; then n x H f32 features (document-major).
#include "fast.h"   // defines: fast_forward (the CPU trainer's forward) and via it mlstm.h's Mlstm
#include "harness/checkpoint.h"  // defines: checkpoint_load, checkpoint_open, checkpoint_read (the model to run)
#include "data.h"
#include <dirent.h>
#include <limits.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <jansson.h>
#include <linear.h>

// ----------------------------------------------------------------------------
// Labelled documents, framed, in one arena.

typedef struct {
    char *text; size_t n_text, cap_text;  // framed documents back to back
    size_t *off, *len; int *label;
    int n, cap;
} Docs;

typedef struct {
    const char *format, *text_field, *label_field;
    double threshold; int has_threshold;
    int docs;        // builtin: how many labelled documents
    uint64_t seed;   // builtin: which stream
} InputOptions;

static void docs_add(Docs *d, const char *where, const char *text, size_t n, int label) {
    while (n && (text[0] == ' ' || text[0] == '\t' || text[0] == '\n' || text[0] == '\r')) { text++; n--; }
    while (n && (text[n - 1] == ' ' || text[n - 1] == '\t' || text[n - 1] == '\n' || text[n - 1] == '\r')) n--;
    if (n == 0) fail("%s: empty document (no text after trimming whitespace)", where);
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 1024;
        d->off = (size_t *)realloc(d->off, sizeof(size_t) * d->cap);
        d->len = (size_t *)realloc(d->len, sizeof(size_t) * d->cap);
        d->label = (int *)realloc(d->label, sizeof(int) * d->cap);
        if (!d->off || !d->len || !d->label) fail("out of memory reading documents");
    }
    if (d->n_text + n + 3 > d->cap_text) {
        d->cap_text = 2 * (d->n_text + n + 3) + (1 << 20);
        d->text = (char *)realloc(d->text, d->cap_text);
        if (!d->text) fail("out of memory reading documents");
    }
    char *p = d->text + d->n_text;
    p[0] = '\n'; p[1] = ' ';
    for (size_t i = 0; i < n; i++) p[2 + i] = (text[i] == '\n' || text[i] == '\r') ? ' ' : text[i];
    p[n + 2] = ' ';
    d->off[d->n] = d->n_text; d->len[d->n] = n + 3; d->label[d->n] = label;
    d->n++; d->n_text += n + 3;
}

// A label as text -> 0, 1, or -1 (dropped by the threshold). Anything else is fatal.
static int parse_label(const char *where, const char *s, const InputOptions *o) {
    char *end;
    double v = strtod(s, &end);
    while (*end == ' ') end++;
    if (end == s || *end) fail("%s: label \"%s\" is not a number", where, s);
    if (o->has_threshold) return v > o->threshold ? 1 : v < o->threshold ? 0 : -1;
    if (v != 0 && v != 1)
        fail("%s: label \"%s\" is not 0 or 1 (HINT: --threshold X binarises ratings: above X is 1, below 0)", where, s);
    return (int)v;
}

// A whole input file, NUL-terminated, from fd (closed here; `path` names it). Only a
// regular file: a FIFO would hang the read (the open is O_NONBLOCK, so it cannot hang
// there) and a directory is a slip of the path.
static char *read_fd(int fd, const char *path, size_t *n) {
    struct stat sb;
    if (fstat(fd, &sb) != 0) fail("cannot read %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) fail("%s: not a regular file (%s)", path, file_kind(sb.st_mode));
    size_t cap = 1 << 16;
    ssize_t k;
    char *buf = (char *)mallocCheck(cap + 1);
    *n = 0;
    while ((k = read(fd, buf + *n, cap - *n)) != 0) {
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) fail("cannot read %s: %s", path, strerror(errno));
        *n += (size_t)k;
        if (*n == cap) {
            cap *= 2;
            buf = (char *)realloc(buf, cap + 1);
            if (!buf) fail("out of memory reading %s", path);
        }
    }
    close(fd);
    buf[*n] = 0;
    return buf;
}
static char *read_file(const char *path, size_t *n) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail("cannot open %s: %s", path, strerror(errno));
    return read_fd(fd, path, n);
}

// RFC 4180: fields separated by commas, records by CRLF or LF; a quoted field may hold
// commas, newlines and "" for a quote. Parses one record starting at *pos into fields
// (unescaped in place, NUL-terminated) and their lengths (a NUL byte in the text is text,
// as build/prepare keeps it); returns the number of fields, 0 at the end.
#define CSV_MAX_FIELDS 64
static int csv_record(char *buf, size_t n, size_t *pos, long *line, char *fields[CSV_MAX_FIELDS],
                      size_t lens[CSV_MAX_FIELDS], const char *path) {
    size_t i = *pos;
    if (i >= n) return 0;
    long first = *line;
    int nf = 0;
    char *w = buf + i;
    fields[nf++] = w;
    int quoted = 0, was_quoted = 0;
    for (;;) {
        if (i >= n) {
            if (quoted) fail("%s:%ld: unterminated quoted field (the quote is never closed)", path, first);
            break;
        }
        char ch = buf[i++];
        if (quoted) {
            if (ch == '"') {
                if (i < n && buf[i] == '"') { *w++ = '"'; i++; }
                else { quoted = 0; was_quoted = 1; }
            } else { if (ch == '\n') (*line)++; *w++ = ch; }
        } else if (ch == ',') {
            lens[nf - 1] = (size_t)(w - fields[nf - 1]);
            *w++ = 0;
            if (nf == CSV_MAX_FIELDS) fail("%s:%ld: more than %d fields", path, first, CSV_MAX_FIELDS);
            fields[nf++] = w; was_quoted = 0;
        } else if (ch == '\n') { (*line)++; break; }
        else if (ch == '\r' && i < n && buf[i] == '\n') { i++; (*line)++; break; }
        else if (ch == '"' && w == fields[nf - 1] && !was_quoted) quoted = 1;
        else if (was_quoted) fail("%s:%ld: unexpected '%c' after a closing quote", path, first, ch);
        else if (ch == '"') fail("%s:%ld: stray quote inside an unquoted field", path, first);
        else *w++ = ch;
    }
    lens[nf - 1] = (size_t)(w - fields[nf - 1]);
    *w = 0;
    *pos = i;
    return nf;
}

static int find_column(char **hdr, int nf, const char *flag, const char *const *names, int n_names) {
    for (int k = flag ? -1 : 0; k < n_names; k++) {
        const char *want = k < 0 ? flag : names[k];
        for (int i = 0; i < nf; i++)
            if (!strcmp(hdr[i], want)) return i;
        if (k < 0) return -1;
    }
    return -1;
}

static const char *const text_names[] = {"reviewText", "text", "sentence", "review"};
static const char *const label_names[] = {"overall", "label", "stars", "rating", "sentiment"};

static void read_csv(Docs *d, const char *path, const InputOptions *o) {
    size_t n, pos = 0;
    char *buf = read_file(path, &n);
    long line = 1;
    // a UTF-8 byte order mark (spreadsheets write one) is not part of the first name
    if (n >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3)) pos = 3;
    char *hdr[CSV_MAX_FIELDS], *f[CSV_MAX_FIELDS];
    size_t hdr_len[CSV_MAX_FIELDS], f_len[CSV_MAX_FIELDS];
    int nh = csv_record(buf, n, &pos, &line, hdr, hdr_len, path);
    if (nh == 0) fail("%s: empty file, expected a CSV header line (e.g. label,sentence)", path);
    int tc = find_column(hdr, nh, o->text_field, text_names, 4);
    int lc = find_column(hdr, nh, o->label_field, label_names, 5);
    if (tc < 0 || lc < 0) {
        char cols[1024] = "";
        for (int i = 0; i < nh; i++) {
            strncat(cols, i ? "," : "", sizeof cols - strlen(cols) - 1);
            strncat(cols, hdr[i], sizeof cols - strlen(cols) - 1);
        }
        fail("%s:1: no %s column; the header has: %s (HINT: --text-field / --label-field name them)", path,
             tc < 0 ? "text (reviewText, text, sentence, review)" : "label (overall, label, stars, rating, sentiment)",
             cols);
    }
    int nf;
    long rec_line;
    char where[4200];
    while (rec_line = line, (nf = csv_record(buf, n, &pos, &line, f, f_len, path)) > 0) {
        if (nf == 1 && f_len[0] == 0) continue;  // a blank line
        snprintf(where, sizeof where, "%s:%ld", path, rec_line);
        if (nf != nh)  // a field more is as likely a comma the text lost its quotes for as a field less
            fail("%s: %d fields, the header has %d (%s)", where, nf, nh, nf < nh ? "missing column" :
                 "an extra field: a comma in the text needs the field quoted");
        if (strlen(f[lc]) != f_len[lc]) fail("%s: the label holds a NUL byte", where);
        int y = parse_label(where, f[lc], o);
        if (y >= 0) docs_add(d, where, f[tc], f_len[tc], y);
    }
    free(buf);
}

static void read_jsonl(Docs *d, const char *path, const InputOptions *o) {
    size_t n;
    char *buf = read_file(path, &n);
    char where[4200], label[32];
    long line = 0;
    for (char *p = buf, *next; p < buf + n; p = next) {
        char *nl = memchr(p, '\n', (size_t)(buf + n - p));
        next = nl ? nl + 1 : buf + n;
        line++;
        size_t len = (size_t)((nl ? nl : buf + n) - p);
        if (len && p[len - 1] == '\r') len--;
        if (len == 0) continue;
        snprintf(where, sizeof where, "%s:%ld", path, line);
        json_error_t err;
        json_t *root = json_loadb(p, len, 0, &err);
        if (!root && json_error_code(&err) == json_error_numeric_overflow)  // an integer beyond 64 bits (an id)
            root = json_loadb(p, len, JSON_DECODE_INT_AS_REAL, &err);        // fails the line no more: as a real
        if (!root || !json_is_object(root))
            fail("%s: not a JSON object (%s)", where, root ? "another JSON value" : err.text);
        json_t *t = NULL, *l = NULL;
        for (int k = o->text_field ? -1 : 0; k < 4 && !t; k++) {
            t = json_object_get(root, k < 0 ? o->text_field : text_names[k]);
            if (k < 0) break;
        }
        for (int k = o->label_field ? -1 : 0; k < 5 && !l; k++) {
            l = json_object_get(root, k < 0 ? o->label_field : label_names[k]);
            if (k < 0) break;
        }
        if (!json_is_string(t))
            fail("%s: no string text field (%s)", where,
                 o->text_field ? o->text_field : "reviewText, text, sentence, review");
        const char *text_label = label;  // a string whole (it may be long), a number in 32 bytes
        if (json_is_integer(l)) snprintf(label, sizeof label, "%lld", (long long)json_integer_value(l));
        else if (json_is_real(l)) snprintf(label, sizeof label, "%.17g", json_real_value(l));
        else if (json_is_boolean(l)) snprintf(label, sizeof label, "%d", json_is_true(l) ? 1 : 0);
        else if (json_is_string(l)) text_label = json_string_value(l);
        else
            fail("%s: no label field (%s)", where,
                 o->label_field ? o->label_field : "overall, label, stars, rating, sentiment");
        int y = parse_label(where, text_label, o);
        if (y >= 0) docs_add(d, where, json_string_value(t), json_string_length(t), y);
        json_decref(root);
    }
    free(buf);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void read_imdb(Docs *d, const char *dir) {
    for (int y = 1; y >= 0; y--) {  // pos then neg; files sorted by name for a fixed order
        char sub[4200], path[8400];
        snprintf(sub, sizeof sub, "%s/%s", dir, y ? "pos" : "neg");
        DIR *dh = opendir(sub);
        if (!dh)
            fail("cannot open %s: %s (HINT: the IMDB layout is DIR/pos/*.txt and DIR/neg/*.txt)", sub, strerror(errno));
        char **names = NULL;
        int nn = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(dh))) {
            size_t l = strlen(e->d_name);
            if (l < 5 || strcmp(e->d_name + l - 4, ".txt")) continue;
            if (nn == cap) {
                cap = cap ? 2 * cap : 256;
                names = (char **)realloc(names, sizeof(char *) * cap);
                if (!names) fail("out of memory");
            }
            names[nn++] = strdup(e->d_name);
        }
        closedir(dh);
        if (nn == 0) fail("%s has no .txt files", sub);
        qsort(names, (size_t)nn, sizeof(char *), cmp_str);
        for (int i = 0; i < nn; i++) {
            snprintf(path, sizeof path, "%s/%s", sub, names[i]);
            size_t n;
            char *text = read_file(path, &n);
            docs_add(d, path, text, n, y);
            free(text);
            free(names[i]);
        }
        free(names);
    }
}

// Prepared shards: DIR/SPLIT_labels.tsv (doc/formats.md, "Labels side file") names each
// document of the stream DIR/SPLIT_000.bin, ... by offset and length, with its label;
// documents labelled "-" (prepare's inputs without a label) are left out.
static int64_t parse_field(const char *where, const char *what, const char *s, char **end) {
    errno = 0;
    long long v = strtoll(s, end, 10);
    if (*end == s || **end != '\t' || errno || v < 0)
        fail("%s: bad %s field (want a non-negative integer and a tab)", where, what);
    return v;
}

// The labels file and the shards beside it, as one set: the labels are read through a
// descriptor of their directory, and both again if build/prepare switched the directory
// for a new set meanwhile (data.h, stream_open_dir, does the same for the shards alone).
static char *read_labels_and_shards(const char *path, const char *dir, const char *base, const char *split, Stream *s,
                                    size_t *n) {
    for (int attempt = 1;; attempt++) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) fail("cannot open %s: %s", dir, strerror(errno));
        int fd = openat(dfd, base, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        char *buf = NULL;
        if (fd >= 0) {
            buf = read_fd(fd, path, n);
            stream_open_dir(s, dir, split, 1);
        } else if (errno != ENOENT || dir_still_named(dfd, dir)) {
            fail("cannot open %s: %s", path, strerror(errno));
        }
        int same = dir_still_named(dfd, dir);
        close(dfd);
        if (buf && same) return buf;
        if (buf) {
            free(buf);
            stream_free(s);
        }
        if (attempt == STREAM_DIR_ATTEMPTS)
            fail("%s was replaced %d times while %s and its shards were being read (a build/prepare -o %s running?)",
                 dir, attempt, base, dir);
    }
}

static void read_shards(Docs *d, const char *path, const InputOptions *o) {
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    char *dir = slash == path ? strdup("/") : slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
    char *split = strndup(base, strlen(base) - 11);
    if (!dir || !split) fail("out of memory");
    size_t n;
    Stream s;
    char *buf = read_labels_and_shards(path, dir, base, split, &s, &n);
    if (strncmp(buf, "offset\tlength\tlabel\n", 20) != 0)
        fail("%s:1: not a labels file (the header must be offset, length, label separated by tabs)", path);
    char where[4300];
    long line = 1, unlabelled = 0;
    int64_t next_off = 0;  // offsets are contiguous (doc/formats.md): where the next document starts
    uint8_t *doc = NULL;
    size_t cap = 0;
    for (char *p = buf + 20, *next; p < buf + n; p = next) {
        char *nl = memchr(p, '\n', (size_t)(buf + n - p));
        if (!nl) fail("%s:%ld: the last line has no newline (truncated?)", path, line + 1);
        *nl = 0;
        next = nl + 1;
        snprintf(where, sizeof where, "%s:%ld", path, ++line);
        char *end;
        int64_t off = parse_field(where, "offset", p, &end), len = parse_field(where, "length", end + 1, &end);
        const char *label = end + 1;
        if (len < 4 || off > s.size || len > s.size - off)
            fail("%s: document at offset %lld, length %lld is not inside the %lld bytes of %s/%s_*.bin", where,
                 (long long)off, (long long)len, (long long)s.size, dir, split);
        if (off != next_off)
            fail("%s: offset %lld, but the document before ends at %lld: the labels file does not match %s/%s_*.bin "
                 "(a line missing, repeated or out of order?)", where, (long long)off, (long long)next_off, dir, split);
        next_off = off + len;
        if (!strcmp(label, "-")) { unlabelled++; continue; }
        int y = parse_label(where, label, o);
        if (y < 0) continue;
        if ((size_t)len > cap) { cap = (size_t)len; free(doc); doc = (uint8_t *)mallocCheck(cap); }
        stream_read(&s, off, len, doc);
        if (doc[0] != '\n' || doc[1] != ' ')
            fail("%s: offset %lld is not the start of a document in %s/%s_*.bin", where, (long long)off, dir, split);
        docs_add(d, where, (const char *)doc + 2, (size_t)len - 3, y);
    }
    if (next_off != s.size)
        fail("%s: the documents end at byte %lld of the %lld of %s/%s_*.bin: lines are missing at the end", path,
             (long long)next_off, (long long)s.size, dir, split);
    if (unlabelled) fprintf(stderr, "transfer: %s: %ld documents without a label (\"-\") left out\n", path, unlabelled);
    free(doc); free(buf); free(dir); free(split);
    stream_free(&s);
}

// The built-in corpus: a stream per split, unrelated to the trainer's (which mixes
// seed*2 + split); --seed shifts all three.
static void read_builtin(Docs *d, const char *split, const InputOptions *o) {
    int s = !strcmp(split, "train") ? 0 : !strcmp(split, "val") ? 1 : !strcmp(split, "test") ? 2 : -1;
    if (s < 0) fail("builtin:%s: the split must be train, val or test", split);
    uint64_t rng = checksum_final(0x7472616e73666572ULL ^ (o->seed * 4 + (uint64_t)s));
    char text[CORPUS_DOC_MAX], where[64];
    int want[2] = {o->docs / 2, o->docs - o->docs / 2};  // balanced, as SST and IMDB: chance is 50%
    while (d->n < o->docs) {
        size_t len;
        int stars = corpus_document(&rng, text, sizeof text, &len), y = stars >= 4;
        snprintf(where, sizeof where, "builtin:%s document %d", split, d->n);
        if (stars != 3 && want[y] > 0) { docs_add(d, where, text, len, y); want[y]--; }
    }
}

static void read_input(Docs *d, const char *path, const InputOptions *o) {
    memset(d, 0, sizeof *d);
    const char *fmt = o->format;
    struct stat sb;
    size_t l = strlen(path);
    if (!fmt) {
        if (!strncmp(path, "builtin:", 8)) fmt = "builtin";
        else if (l > 11 && !strcmp(path + l - 11, "_labels.tsv")) fmt = "shards";
        else if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) fmt = "imdb";
        else if (l > 4 && !strcmp(path + l - 4, ".csv")) fmt = "csv";
        else if ((l > 5 && !strcmp(path + l - 5, ".json")) || (l > 6 && !strcmp(path + l - 6, ".jsonl"))) fmt = "jsonl";
        else fail("%s: cannot tell the input kind from the name (HINT: --format csv|imdb|jsonl|shards|builtin)", path);
    }
    if (!strcmp(fmt, "csv")) read_csv(d, path, o);
    else if (!strcmp(fmt, "jsonl")) read_jsonl(d, path, o);
    else if (!strcmp(fmt, "imdb")) read_imdb(d, path);
    else if (!strcmp(fmt, "shards")) {
        if (l <= 11 || strcmp(path + l - 11, "_labels.tsv"))
            fail("%s: --format shards reads DIR/SPLIT_labels.tsv", path);
        read_shards(d, path, o);
    }
    else if (!strcmp(fmt, "builtin")) read_builtin(d, strncmp(path, "builtin:", 8) ? path : path + 8, o);
    else fail("--format %s: not one of csv, imdb, jsonl, shards, builtin", fmt);
    if (d->n == 0) fail("%s: no labelled documents", path);
}

// ----------------------------------------------------------------------------
// The model, from a checkpoint, with room for B documents x T steps. It reads text
// with fast.h's forward, the one the CPU trainer runs.

typedef struct {
    Mlstm m;
    FastPacks packs;
} Reader;

static void model_open(Reader *r, const char *ckpt, int B, int T) {
    CkptHeader hd;
    checkpoint_header(ckpt, &hd);
    Mlstm *m = &r->m;
    mlstm_build(m, hd.cfg, B, T);
    fast_packs_build(&r->packs, &hd.cfg, GEMM_FP32);
    size_t gh = (size_t)hd.st.G * hd.cfg.H;
    real *h = (real *)mallocCheck(sizeof(real) * gh), *c = (real *)mallocCheck(sizeof(real) * gh);
    TrainState st;
    checkpoint_load(ckpt, m, &st, h, c, hd.st.G);  // the carried training state is not used: documents start from zero
    free(h); free(c);
}
static void model_close(Reader *r) {
    mlstm_free(&r->m);
    fast_packs_free(&r->packs);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static const Docs *sort_docs;
static int cmp_len_desc(const void *a, const void *b) {  // longest first; ties by index (a stable order)
    int i = *(const int *)a, j = *(const int *)b;
    size_t li = sort_docs->len[i], lj = sort_docs->len[j];
    return li != lj ? (li < lj ? 1 : -1) : (i > j) - (i < j);
}

// Runs documents idx[0..n) as one padded batch (n <= m->B) from a zero state, in
// windows of m->T steps with the state carried between windows. idx is sorted by
// length, longest first, so the documents still running at any step are a prefix of
// the batch: each window runs only those rows, and a document's features are its c
// at its own last byte (the window where it ends). Pad bytes after a shorter
// document's end are spaces; they are never read back. If trace is set (n = 1 then),
// trace[t] = c[unit] after byte t of the document.
static void run_batch(Reader *r, const Docs *d, const int *idx, int n, float *feat /*(n,H)*/,
                      real *h, real *c, uint8_t *in, float *trace, int unit) {
    Mlstm *m = &r->m;
    const int H = m->cfg.H, T = m->T;
    size_t L = d->len[idx[0]];
    memset(h, 0, sizeof(real) * (size_t)n * H);
    memset(c, 0, sizeof(real) * (size_t)n * H);
    int rows = n;
    for (size_t t0 = 0; t0 < L; t0 += (size_t)T) {
        while (rows > 0 && d->len[idx[rows - 1]] <= t0) rows--;  // finished documents drop off the end
        int Tw = (int)(L - t0 < (size_t)T ? L - t0 : (size_t)T);
        for (int b = 0; b < rows; b++) {
            const char *s = d->text + d->off[idx[b]];
            size_t len = d->len[idx[b]];
            for (int t = 0; t < Tw; t++) in[b * Tw + t] = t0 + t < len ? (uint8_t)s[t0 + t] : ' ';
        }
        fast_forward(m, &r->packs, in, in, NULL, h, c, rows, Tw);  // targets unused: the loss is a by-product
        for (int b = 0; b < rows; b++) {
            size_t len = d->len[idx[b]];
            if (len > t0 && len <= t0 + (size_t)Tw) {
                const real *cb = m->cs + ((size_t)(len - t0) * rows + b) * H;  // state after byte len-1
                for (int j = 0; j < H; j++) feat[(size_t)b * H + j] = (float)cb[j];
            }
            if (trace)
                for (int t = 0; t < Tw && t0 + t < len; t++)
                    trace[t0 + t] = (float)m->cs[((size_t)(t + 1) * rows + b) * H + unit];
        }
        memcpy(h, mlstm_h_out(m), sizeof(real) * (size_t)rows * H);
        memcpy(c, mlstm_c_out(m), sizeof(real) * (size_t)rows * H);
    }
}

// ----------------------------------------------------------------------------
// featurize

typedef struct { int n, H; int *label; float *x; } Feats;

static void feats_write(const char *path, const Feats *f) {
    uint8_t hd[32] = {0};
    memcpy(hd, "MLSTMFEA", 8);
    put32(hd + 8, 1); put32(hd + 12, (uint32_t)f->H); put64(hd + 16, (uint64_t)f->n);
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, hd, 32);
    for (int i = 0; i < f->n; i++) { uint8_t b[4]; put32(b, (uint32_t)f->label[i]); atomic_write(&af, b, 4); }
    atomic_write(&af, f->x, sizeof(float) * (size_t)f->n * f->H);
    atomic_commit(&af);
}

static void feats_read(const char *path, Feats *f) {
    size_t n;
    char *buf = read_file(path, &n);
    const uint8_t *p = (const uint8_t *)buf;
    if (n < 32 || memcmp(p, "MLSTMFEA", 8))
        fail("%s is not a features file (HINT: build/transfer featurize writes them)", path);
    if (get32(p + 8) != 1) fail("%s: features file version %u, this build reads 1", path, get32(p + 8));
    f->H = (int)get32(p + 12);
    uint64_t cnt = get64(p + 16);
    if (f->H < 1 || cnt < 1 || cnt > (1u << 30) || n != 32 + cnt * 4 + cnt * 4 * (uint64_t)f->H)
        fail("%s: the size does not match its header (corrupt or truncated)", path);
    f->n = (int)cnt;
    f->label = (int *)mallocCheck(sizeof(int) * f->n);
    f->x = (float *)mallocCheck(sizeof(float) * (size_t)f->n * f->H);
    for (int i = 0; i < f->n; i++) {
        f->label[i] = (int)get32(p + 32 + 4 * i);
        if (f->label[i] != 0 && f->label[i] != 1)
            fail("%s: document %d has label %d, not 0 or 1", path, i, f->label[i]);
    }
    memcpy(f->x, p + 32 + 4 * (size_t)f->n, sizeof(float) * (size_t)f->n * f->H);
    free(buf);
    for (size_t i = 0; i < (size_t)f->n * f->H; i++)  // one NaN would make every fit and threshold meaningless
        if (!isfinite(f->x[i]))
            fail("%s: document %zu, feature %zu is %g, not a finite number (the model gives NaN or Inf)", path,
                 i / f->H, i % f->H, f->x[i]);
}

static void featurize(const char *ckpt, const char *input, const char *out, const InputOptions *o, int B, int T) {
    refuse_same_file("-o", out, "-m", ckpt);
    refuse_same_file("-o", out, "INPUT", input);
    output_check(out);
    Docs d;
    read_input(&d, input, o);
    Reader model;
    model_open(&model, ckpt, B, T);
    const int H = model.m.cfg.H;
    int *idx = (int *)mallocCheck(sizeof(int) * d.n);
    for (int i = 0; i < d.n; i++) idx[i] = i;
    sort_docs = &d;
    qsort(idx, (size_t)d.n, sizeof(int), cmp_len_desc);
    Feats f = {d.n, H, d.label, (float *)mallocCheck(sizeof(float) * (size_t)d.n * H)};
    float *fb = (float *)mallocCheck(sizeof(float) * (size_t)B * H);
    real *h = (real *)mallocCheck(sizeof(real) * (size_t)B * H), *c = (real *)mallocCheck(sizeof(real) * (size_t)B * H);
    uint8_t *in = (uint8_t *)mallocCheck((size_t)B * T);
    double t_start = now_s(), t_print = t_start;
    size_t done_bytes = 0;
    for (int i = 0; i < d.n; i += B) {
        int n = d.n - i < B ? d.n - i : B;
        run_batch(&model, &d, idx + i, n, fb, h, c, in, NULL, 0);
        for (int b = 0; b < n; b++) {
            memcpy(f.x + (size_t)idx[i + b] * H, fb + (size_t)b * H, sizeof(float) * H);
            done_bytes += d.len[idx[i + b]];
        }
        double t = now_s();
        if (t - t_print > 2 || i + n == d.n) {
            double rate = done_bytes / (t - t_start + 1e-9);
            fprintf(stderr, "featurize: %s: %d/%d documents | %.0f chars/s | ETA %.0f s%s", input, i + n, d.n, rate,
                    (d.n_text - done_bytes) / (rate + 1e-9), isatty(2) && i + n < d.n ? "\r" : "\n");
            t_print = t;
        }
    }
    free(fb); free(h); free(c); free(in);
    for (size_t i = 0; i < (size_t)d.n * H; i++)
        if (!isfinite(f.x[i]))
            fail("%s: the features of %s are not finite (document %zu, unit %zu: %g): the model's weights hold NaN or "
                 "Inf, or overflow", ckpt, input, i / H, i % H, f.x[i]);
    feats_write(out, &f);
    int pos = 0;
    for (int i = 0; i < d.n; i++) pos += d.label[i];
    printf("featurize: %s -> %s: %d documents (%d positive, %d negative), %zu chars, H=%d, %.1f s "
           "(batch %d x %d steps)\n", input, out, d.n, pos, d.n - pos, d.n_text, H, now_s() - t_start, B, T);
    free(idx); free(f.x);
    free(d.text); free(d.off); free(d.len); free(d.label);
    model_close(&model);
}

// ----------------------------------------------------------------------------
// classify: liblinear's L1-regularised logistic regression (solver L1R_LR, with a
// bias feature of 1 as sklearn's LogisticRegression(penalty='l1') passes it), on the
// raw features as Radford et al.'s train_with_reg_cv: for each C in 2^-8 ... 2^0 fit
// on train, score on val; the first C with the best val accuracy wins; that fit (on
// train only, as theirs) is scored on test.

typedef struct { struct problem p; struct feature_node *nodes; } Problem;

static void problem_make(Problem *pr, const Feats *f) {
    int H = f->H;
    pr->nodes = (struct feature_node *)mallocCheck(sizeof(struct feature_node) * (size_t)f->n * (H + 2));
    pr->p.l = f->n; pr->p.n = H + 1; pr->p.bias = 1;
    pr->p.y = (double *)mallocCheck(sizeof(double) * f->n);
    pr->p.x = (struct feature_node **)mallocCheck(sizeof(struct feature_node *) * f->n);
    for (int i = 0; i < f->n; i++) {
        struct feature_node *x = pr->nodes + (size_t)i * (H + 2);
        for (int j = 0; j < H; j++) { x[j].index = j + 1; x[j].value = f->x[(size_t)i * H + j]; }
        x[H].index = H + 1; x[H].value = 1;  // the bias feature
        x[H + 1].index = -1;
        pr->p.x[i] = x;
        pr->p.y[i] = f->label[i];
    }
}
static void problem_free(Problem *pr) { free(pr->nodes); free(pr->p.y); free(pr->p.x); }

static double accuracy(const struct model *mdl, const Problem *pr) {
    int ok = 0;
    for (int i = 0; i < pr->p.l; i++) ok += predict(mdl, pr->p.x[i]) == pr->p.y[i];
    return (double)ok / pr->p.l;
}

static void quiet(const char *s) { (void)s; }

// The best single-unit rule "label 1 iff sign * x > threshold", threshold chosen on
// train: every midpoint between consecutive distinct sorted values is tried.
typedef struct { float v; int y; } ValLabel;
static int cmp_vl(const void *a, const void *b) {
    float x = ((const ValLabel *)a)->v, y = ((const ValLabel *)b)->v;
    return (x > y) - (x < y);
}
static double unit_threshold(const Feats *f, int unit, int sign, double *train_acc) {
    ValLabel *vl = (ValLabel *)mallocCheck(sizeof(ValLabel) * f->n);
    int pos = 0;
    for (int i = 0; i < f->n; i++) {
        vl[i].v = sign * f->x[(size_t)i * f->H + unit];
        vl[i].y = f->label[i];
        pos += vl[i].y;
    }
    qsort(vl, (size_t)f->n, sizeof(ValLabel), cmp_vl);
    int best = pos, below_neg = 0, below_pos = 0;  // threshold below everything: all predicted 1
    double thr = vl[0].v - 1;
    for (int i = 0; i < f->n; i++) {
        if (vl[i].y) below_pos++; else below_neg++;
        if (i + 1 < f->n && vl[i + 1].v == vl[i].v) continue;
        int correct = below_neg + (pos - below_pos);  // at or below: 0; above: 1
        if (correct > best) {
            best = correct;
            thr = i + 1 < f->n ? 0.5 * ((double)vl[i].v + vl[i + 1].v) : vl[i].v + 1.0;
        }
    }
    free(vl);
    *train_acc = (double)best / f->n;
    return thr;
}
static double unit_accuracy(const Feats *f, int unit, int sign, double thr) {
    int ok = 0;
    for (int i = 0; i < f->n; i++) ok += ((sign * f->x[(size_t)i * f->H + unit] > thr) ? 1 : 0) == f->label[i];
    return (double)ok / f->n;
}

static void classify(const char *paths[3], const char *summary, double eps) {
    Feats f[3];
    const char *split[3] = {"train", "val", "test"};
    for (int k = 0; k < 3 && summary; k++) refuse_same_file("--summary", summary, split[k], paths[k]);
    if (summary) output_check(summary);
    for (int k = 0; k < 3; k++) {
        feats_read(paths[k], &f[k]);
        if (f[k].H != f[0].H)
            fail("%s has H=%d features but %s has H=%d (made by different models)", paths[k], f[k].H, paths[0], f[0].H);
    }
    int pos = 0;
    for (int i = 0; i < f[0].n; i++) pos += f[0].label[i];
    if (pos == 0 || pos == f[0].n)
        fail("%s: the training split has only one class (%d documents, all %d)", paths[0], f[0].n, pos ? 1 : 0);
    int H = f[0].H;
    Problem pr[3];
    for (int k = 0; k < 3; k++) problem_make(&pr[k], &f[k]);
    set_print_string_function(quiet);
    struct parameter par;
    memset(&par, 0, sizeof par);
    par.solver_type = L1R_LR; par.eps = eps;
    struct model *best = NULL;
    double best_val = -1, best_c = 0;
    printf("classify: L1-regularised logistic regression (liblinear L1R_LR, eps %g), %d train / %d val / %d test, "
           "H=%d\n", eps, f[0].n, f[1].n, f[2].n, H);
    printf("  %-8s %-10s %-10s %s\n", "C", "train acc", "val acc", "features used");
    for (int e = -8; e <= 0; e++) {
        par.C = ldexp(1.0, e);
        const char *err = check_parameter(&pr[0].p, &par);
        if (err) fail("liblinear: %s", err);
        srand(1);  // liblinear's coordinate descent shuffles with rand(): fixed for repeatable numbers
        struct model *mdl = train(&pr[0].p, &par);
        double va = accuracy(mdl, &pr[1]);
        int nnz = 0;
        for (int j = 0; j < H; j++) nnz += mdl->w[j] != 0;
        printf("  2^%-6d %-10.4f %-10.4f %d\n", e, accuracy(mdl, &pr[0]), va, nnz);
        if (va > best_val) { if (best) free_and_destroy_model(&best); best = mdl; best_val = va; best_c = par.C; }
        else free_and_destroy_model(&mdl);
    }
    // w . x > 0 predicts label[0]; flip so that a positive weight means "towards label 1"
    double flip = best->label[0] == 1 ? 1 : -1;
    int nnz = 0, unit = 0;
    for (int j = 0; j < H; j++) {
        nnz += best->w[j] != 0;
        if (fabs(best->w[j]) > fabs(best->w[unit])) unit = j;
    }
    double weight = flip * best->w[unit], test_acc = accuracy(best, &pr[2]), train_acc = accuracy(best, &pr[0]);
    int sign = weight >= 0 ? 1 : -1;
    double unit_train;
    double thr = unit_threshold(&f[0], unit, sign, &unit_train);
    double unit_val = unit_accuracy(&f[1], unit, sign, thr), unit_test = unit_accuracy(&f[2], unit, sign, thr);
    // the best single unit: over every unit and both signs, the rule with the best train accuracy
    int bu = 0, bs = 1;
    double bthr = 0, btrain = -1;
    for (int j = 0; j < H; j++)
        for (int sg = -1; sg <= 1; sg += 2) {
            double tr, th = unit_threshold(&f[0], j, sg, &tr);
            if (tr > btrain) { btrain = tr; bu = j; bs = sg; bthr = th; }
        }
    double bval = unit_accuracy(&f[1], bu, bs, bthr), btest = unit_accuracy(&f[2], bu, bs, bthr);
    printf("chosen C = %g (val accuracy %.4f); fit on train only\n", best_c, best_val);
    printf("test accuracy %.2f%% (%d documents); train %.2f%%\n", 100 * test_acc, f[2].n, 100 * train_acc);
    printf("features used %d of %d\n", nnz, H);
    printf("largest |weight|: unit %d, weight %+.4f (positive: the unit rises with label 1)\n", unit, weight);
    printf("unit %d alone, %s > %.4f means 1 (threshold chosen on train): train %.2f%%, val %.2f%%, test %.2f%%\n",
           unit, sign > 0 ? "c" : "-c", sign * thr, 100 * unit_train, 100 * unit_val, 100 * unit_test);
    printf("best single unit (chosen on train over all units): unit %d, %s > %.4f means 1: train %.2f%%, val %.2f%%, "
           "test %.2f%%\n", bu, bs > 0 ? "c" : "-c", bs * bthr, 100 * btrain, 100 * bval, 100 * btest);
    if (summary) {  // one key=value per line, for scripts and tests
        AtomicFile af;
        atomic_open(&af, summary);
        char s[2048];
        int k = snprintf(s, sizeof s,
                         "C=%g\nval_acc=%.6f\ntest_acc=%.6f\ntrain_acc=%.6f\nfeatures_used=%d\nH=%d\nunit=%d\n"
                         "weight=%.6f\nsign=%d\nunit_threshold=%.6f\nunit_train_acc=%.6f\nunit_val_acc=%.6f\n"
                         "unit_test_acc=%.6f\nn_train=%d\nn_val=%d\nn_test=%d\nbest_unit=%d\nbest_unit_sign=%d\n"
                         "best_unit_threshold=%.6f\nbest_unit_train_acc=%.6f\nbest_unit_val_acc=%.6f\n"
                         "best_unit_test_acc=%.6f\n",
                         best_c, best_val, test_acc, train_acc, nnz, H, unit, weight, sign, thr, unit_train, unit_val,
                         unit_test, f[0].n, f[1].n, f[2].n, bu, bs, bthr, btrain, bval, btest);
        atomic_write(&af, s, (size_t)k);
        atomic_commit(&af);
    }
    free_and_destroy_model(&best);
    for (int k = 0; k < 3; k++) { problem_free(&pr[k]); free(f[k].label); free(f[k].x); }
    (void)split;
}

// ----------------------------------------------------------------------------
// heatmap: the unit's cell value after each character of a few documents (half
// positive, half negative, the first ones no longer than --max-chars), as an HTML
// page (a span per character, red below zero, green above) and a PNG drawn by gnuplot
// (characters on a grid, one block of lines per document). The value is multiplied by
// --sign and has --center (classify's single-unit threshold) subtracted, so that green
// means "this unit alone says positive here" and red "negative"; the colour scale is
// the largest |value| shown.

// Runs `gnuplot -c SCRIPT OUT DATA` without a shell: the two names arrive in the
// script as the string variables ARG1 and ARG2, which gnuplot never parses as commands,
// so backquotes, quotes or @ in them are just characters. The PNG is drawn to a
// temporary name and renamed, whole or nothing, as util.h's AtomicFile writes: through
// a symbolic link, keeping the replaced file's permissions, and never over anything but
// a regular file. Returns NULL, or why there is no PNG.
static const char *run_gnuplot(const char *script, const char *out, const char *data) {
    static char why[128];
    char tmp_png[4300], target[4096];
    struct stat old;
    output_target(out, target, &old);
    snprintf(tmp_png, sizeof tmp_png, "%s.tmp.%ld", target, (long)getpid());
    char *argv[] = {"gnuplot", "-c", (char *)script, tmp_png, (char *)data, NULL};
    pid_t pid;
    int err = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ), ws = 0;
    if (err) { snprintf(why, sizeof why, "cannot run gnuplot: %s", strerror(err)); return why; }
    if (waitpid(pid, &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        unlink(tmp_png);
        snprintf(why, sizeof why, "gnuplot failed (%s %d)", WIFEXITED(ws) ? "exit" : "signal",
                 WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
        return why;
    }
    int fd = open(tmp_png, O_RDONLY | O_CLOEXEC);
    int kept = fd >= 0 && output_keep_attributes(fd, &old) == 0;
    if (fd >= 0) close(fd);
    if (!kept || rename(tmp_png, target) != 0) {
        snprintf(why, sizeof why, "cannot rename the PNG into place: %s", strerror(errno));
        unlink(tmp_png);
        return why;
    }
    return NULL;
}

static void put_html_char(FILE *f, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '<') fputs("&lt;", f);
        else if (ch == '>') fputs("&gt;", f);
        else if (ch == '&') fputs("&amp;", f);
        else if (ch == ' ') fputs("&nbsp;", f);
        else if (ch == 0) fputs("&#xfffd;", f);  // a NUL byte of the text: HTML has no place for it
        else fputc(ch, f);
    }
}

static void heatmap(const char *ckpt, const char *input, const char *prefix, const InputOptions *o, int unit, int sign,
                    double center, int n_reviews, int max_chars, int width) {
    const char *ext[4] = {"html", "dat", "gp", "png"};  // what heatmap (below) and gnuplot write
    for (int k = 0; k < 4; k++) {
        char out[4200];
        snprintf(out, sizeof out, "%s.%s", prefix, ext[k]);
        refuse_same_file("-o", out, "-m", ckpt);
        refuse_same_file("-o", out, "INPUT", input);
        output_check(out);
    }
    Docs d;
    read_input(&d, input, o);
    Reader model;
    model_open(&model, ckpt, 1, 256);
    const int H = model.m.cfg.H;
    if (unit < 0 || unit >= H) fail("--unit %d: the model has units 0..%d", unit, H - 1);
    int *pick = (int *)mallocCheck(sizeof(int) * n_reviews), np = 0;
    int want[2] = {n_reviews / 2, n_reviews - n_reviews / 2};
    for (int i = 0; i < d.n && np < n_reviews; i++)
        if (want[d.label[i]] > 0 && d.len[i] <= (size_t)max_chars + 3) { want[d.label[i]]--; pick[np++] = i; }
    if (np == 0) fail("%s: no document of at most %d characters (HINT: --max-chars)", input, max_chars);
    float **tr = (float **)mallocCheck(sizeof(float *) * np);
    real *h = (real *)mallocCheck(sizeof(real) * H), *c = (real *)mallocCheck(sizeof(real) * H);
    uint8_t *in = (uint8_t *)mallocCheck(256);
    float *fb = (float *)mallocCheck(sizeof(float) * H);
    double vmax = 1e-9;
    for (int r = 0; r < np; r++) {
        tr[r] = (float *)mallocCheck(sizeof(float) * d.len[pick[r]]);
        run_batch(&model, &d, &pick[r], 1, fb, h, c, in, tr[r], unit);
        for (size_t t = 0; t < d.len[pick[r]]; t++) {
            tr[r][t] = (float)(sign * tr[r][t] - center);
            vmax = fabs(tr[r][t]) > vmax ? fabs(tr[r][t]) : vmax;
        }
    }
    // Every file is written whole or not at all (AtomicFile); the names the user chose
    // never reach a shell or gnuplot's parser (run_gnuplot passes them as ARG1, ARG2).
    char path[4200];
    // HTML: the value after each byte colours that byte (after a UTF-8 sequence's last byte for the whole sequence)
    snprintf(path, sizeof path, "%s.html", prefix);
    AtomicFile af;
    atomic_open(&af, path);
    FILE *f = af.f;
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>unit %d</title></head>\n"
               "<body style=\"font-family: monospace; font-size: 15px; max-width: 60em\">\n<h3>Unit %d of ", unit,
            unit);
    put_html_char(f, ckpt, strlen(ckpt));
    fprintf(f, ": cell state after each character</h3>\n"
               "<p>Colour: %sc - (%.4f), the unit's value relative to its single-unit threshold; green: above it "
               "(the unit alone says positive), red: below (negative); full colour at %.3f, the largest |value| shown. "
               "Hover over a character for its value.</p>\n", sign > 0 ? "" : "-", center, vmax);
    for (int r = 0; r < np; r++) {
        const char *s = d.text + d.off[pick[r]];
        size_t len = d.len[pick[r]];
        fprintf(f, "<p><b>label %d</b>, final value %+.3f<br>\n", d.label[pick[r]], tr[r][len - 1]);
        for (size_t t = 2; t < len - 1;) {
            size_t k = 1;
            while (t + k < len - 1 && ((uint8_t)s[t + k] & 0xC0) == 0x80) k++;
            double v = tr[r][t + k - 1] / vmax;
            v = v > 1 ? 1 : v < -1 ? -1 : v;
            int R = v < 0 ? 255 : (int)(255 * (1 - v)), G = v > 0 ? 255 : (int)(255 * (1 + v));
            int Bc = (int)(255 * (1 - fabs(v)));
            if (v > 0) G = (int)(255 - 80 * v);  // a darker green reads better than pure 0,255,0
            fprintf(f, "<span style=\"background:rgb(%d,%d,%d)\" title=\"%.3f\">", R, G, Bc, tr[r][t + k - 1]);
            put_html_char(f, s + t, k);
            fputs("</span>", f);
            t += k;
        }
        fputs("</p>\n", f);
    }
    fputs("</body></html>\n", f);
    if (ferror(f)) { atomic_abort(&af); fail("cannot write %s", path); }
    atomic_commit(&af);
    printf("heatmap: %s\n", path);
    // gnuplot's data: one cell per byte: column, line, value, the character; then the
    // script, which reads the PNG's and the data's names from ARG1 and ARG2
    snprintf(path, sizeof path, "%s.dat", prefix);
    atomic_open(&af, path);
    int line = 0;
    for (int r = 0; r < np; r++) {
        const char *s = d.text + d.off[pick[r]];
        size_t len = d.len[pick[r]];
        for (size_t t = 2; t < len - 1; t++) {
            int col = (int)((t - 2) % (size_t)width);
            if (t > 2 && col == 0) line++;
            char ch = s[t];
            if (ch == '"' || ch == '\\') ch = '\'';
            if ((uint8_t)ch < 32 || (uint8_t)ch > 126) ch = '?';
            fprintf(af.f, "%d %d %.5f \"%c\"\n", col, line, tr[r][t] / vmax, ch);
        }
        line += 2;  // a blank line between documents
    }
    if (ferror(af.f)) { atomic_abort(&af); fail("cannot write %s", path); }
    atomic_commit(&af);
    snprintf(path, sizeof path, "%s.gp", prefix);
    atomic_open(&af, path);
    fprintf(af.f, "# gnuplot -c THIS.gp OUT.png DATA.dat\n"
                  "set terminal pngcairo size %d,%d font \"DejaVu Sans Mono,10\"\nset output ARG1\n"
                  "set title \"unit %d: %sc - (%.2f) after each character (green: the unit says positive, "
                  "red: negative)\"\n"
                  "unset xtics\nunset ytics\nunset border\nset yrange [%d.5:-0.5]\nset xrange [-6:%d.5]\n"
                  "set palette defined (-1 \"#d73027\", 0 \"white\", 1 \"#1a9850\")\nset cbrange [-1:1]\n"
                  "set cbtics (\"neg\" -1, \"0\" 0, \"pos\" 1)\n",
            width * 10 + 220, line * 16 + 80, unit, sign > 0 ? "" : "-", center, line - 1, width - 1);
    line = 0;
    for (int r = 0; r < np; r++) {  // each document's label at the left of its first line
        fprintf(af.f, "set label \"%s\" at -1.5,%d right font \",10\"\n", d.label[pick[r]] ? "pos" : "neg", line);
        line += (int)((d.len[pick[r]] - 4) / (size_t)width) + 2;
    }
    fprintf(af.f, "plot ARG2 using 1:2:(0.5):(0.5):3 with boxxyerror fillstyle solid noborder fc palette notitle, \\\n"
                  "     ARG2 using 1:2:4 with labels font \"DejaVu Sans Mono,9\" notitle\n");
    if (ferror(af.f)) { atomic_abort(&af); fail("cannot write %s", path); }
    atomic_commit(&af);
    char png[4200], dat[4200];
    snprintf(png, sizeof png, "%s.png", prefix);
    snprintf(dat, sizeof dat, "%s.dat", prefix);
    const char *why = run_gnuplot(path, png, dat);
    if (!why) printf("heatmap: %s\n", png);
    else
        printf("heatmap: no PNG: %s; `gnuplot -c %s %s %s` draws it (apt-get install gnuplot-nox)\n", why, path, png,
               dat);
    for (int r = 0; r < np; r++) free(tr[r]);
    free(tr); free(pick); free(h); free(c); free(in); free(fb);
    free(d.text); free(d.off); free(d.len); free(d.label);
    model_close(&model);
}

// ----------------------------------------------------------------------------

static void usage(void) {
    fprintf(stderr,
            "usage:\n"
            "  transfer featurize -m CKPT -o OUT.feat [input options] [--batch B] [--seq-len T] [--threads N] INPUT\n"
            "  transfer classify [--summary FILE] [--eps X] TRAIN.feat VAL.feat TEST.feat\n"
            "  transfer heatmap -m CKPT --unit K [--sign 1|-1] [--center X] -o PREFIX [--reviews N] [--max-chars N] "
            "[--width N] [input options] INPUT\n"
            "CKPT: a checkpoint file, or a run directory (its best model, DIR/" RUN_BEST_CKPT ")\n"
            "INPUT: FILE.csv (label,sentence with a header), DIR (DIR/pos/*.txt, DIR/neg/*.txt), FILE.jsonl,\n"
            "       DIR/SPLIT_labels.tsv (shards of build/prepare), builtin:train|val|test\n"
            "-- ends the flags: the words after it are names, even those that start with '-'\n"
            "input options:\n"
            "  --format F          csv | imdb | jsonl | shards | builtin (default: from the name)\n"
            "  --text-field NAME   CSV column or JSON field of the text\n"
            "  --label-field NAME  CSV column or JSON field of the label\n"
            "  --threshold X       binarise ratings: above X is 1, below X is 0, equal is dropped "
            "(default: labels must be 0/1)\n"
            "  --docs N            builtin: labelled documents (default 2000)\n"
            "  --seed N            builtin: which documents (default 1)\n"
            "featurize: --batch B documents at once (default 64), --seq-len T steps per window (default 64)\n"
            "classify: --eps X liblinear's stopping tolerance (default 1e-4, sklearn's tol)\n"
            "heatmap: --center X is subtracted after --sign (default 0; transfer_eval.sh passes the unit's "
            "threshold);\n"
            "  --reviews N documents, half of each label (default 6), of at most --max-chars N (default 400), "
            "--width N characters a line (default 80)\n");
}

// Flag values: util.h's parse_whole and parse_real, the rule of every program's flags.
int main(int argc, char **argv) {
    std_fds_open();
    file_size_limit_as_error();
    openmp_prefer_passive_wait(argv);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage();
        return argc < 2 ? EXIT_BAD_INPUT : 0;
    }
    const char *cmd = argv[1], *ckpt = NULL, *out = NULL, *summary = NULL, *pos[3] = {NULL, NULL, NULL};
    InputOptions o;
    memset(&o, 0, sizeof o);
    o.docs = 2000; o.seed = 1;
    int B = 64, T = 64, unit = -1, sign = 1, reviews = 6, max_chars = 400, width = 80, npos = 0;
    double eps = 1e-4, center = 0;
    for (int i = 2, end_of_flags = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!end_of_flags && !strcmp(a, "--")) {  // the rest are names, even those that start with '-'
            end_of_flags = 1;
            continue;
        }
        if (end_of_flags || a[0] != '-' || !a[1]) {
            if (npos == 3) fail("too many arguments: %s", a);
            pos[npos++] = a;
            continue;
        }
        if (!strcmp(a, "--help")) { usage(); return 0; }
        if (!v) { usage(); fail("%s needs a value", a); }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) ckpt = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--summary")) summary = v;
        else if (!strcmp(a, "--format")) o.format = v;
        else if (!strcmp(a, "--text-field")) o.text_field = v;
        else if (!strcmp(a, "--label-field")) o.label_field = v;
        else if (!strcmp(a, "--threshold")) { o.threshold = parse_real(a, v, -DBL_MAX, DBL_MAX); o.has_threshold = 1; }
        else if (!strcmp(a, "--docs")) o.docs = (int)parse_whole(a, v, 1, INT_MAX);
        else if (!strcmp(a, "--seed")) o.seed = (uint64_t)parse_whole(a, v, 0, LONG_MAX);
        else if (!strcmp(a, "--batch")) B = (int)parse_whole(a, v, 1, 1 << 16);
        else if (!strcmp(a, "--seq-len")) T = (int)parse_whole(a, v, 1, 1 << 16);
        else if (!strcmp(a, "--unit")) unit = (int)parse_whole(a, v, 0, INT_MAX);
        else if (!strcmp(a, "--sign")) {
            sign = (int)parse_whole(a, v, -1, 1);
            if (!sign) fail("--sign: must be 1 or -1, got 0");
        }
        else if (!strcmp(a, "--center")) center = parse_real(a, v, -DBL_MAX, DBL_MAX);
        else if (!strcmp(a, "--reviews")) reviews = (int)parse_whole(a, v, 1, 10000);
        else if (!strcmp(a, "--max-chars")) max_chars = (int)parse_whole(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--width")) width = (int)parse_whole(a, v, 10, 1000);
        else if (!strcmp(a, "--eps")) eps = parse_positive(a, v);
        else if (!strcmp(a, "--threads")) {
            int n = (int)parse_whole(a, v, 1, MAX_THREADS);
#ifdef _OPENMP
            omp_set_num_threads(n);
#else
            (void)n;
#endif
        }
        else { usage(); fail("unknown flag %s", a); }
    }
    if ((long)B * T > 1L << 24)
        fail("--batch %d x --seq-len %d = %ld steps at once: at most %ld", B, T, (long)B * T, 1L << 24);
    char ckpt_file[4200];
    if (ckpt) ckpt = checkpoint_file(ckpt, ckpt_file, sizeof ckpt_file);  // a run directory: its best.ckpt, so named
    if (!strcmp(cmd, "featurize")) {
        if (!ckpt || !out || npos != 1) { usage(); fail("featurize needs -m CKPT, -o OUT.feat and one INPUT"); }
        featurize(ckpt, pos[0], out, &o, B, T);
    } else if (!strcmp(cmd, "classify")) {
        if (npos != 3) { usage(); fail("classify needs TRAIN.feat VAL.feat TEST.feat"); }
        classify(pos, summary, eps);
    } else if (!strcmp(cmd, "heatmap")) {
        if (!ckpt || !out || npos != 1 || unit < 0) {
            usage();
            fail("heatmap needs -m CKPT, --unit K, -o PREFIX and one INPUT");
        }
        heatmap(ckpt, pos[0], out, &o, unit, sign, center, reviews, max_chars, width);
    } else { usage(); fail("unknown command %s (featurize, classify, heatmap)", cmd); }
    return 0;
}
