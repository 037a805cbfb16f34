// prepare: turns text into train/val shards for the trainers (doc/design.md, "Data and batching").
//
//   build/prepare [options] -o DIR INPUT...
//   build/prepare --builtin BYTES -o DIR         the built-in corpus, labelled
//
// Inputs (format from the name, after an optional .gz, or --format; plain and gzip
// files alike, by their first bytes):
//   .txt            plain text: each non-empty line is one document, no label
//   .json .jsonl    JSON lines (the Amazon review dumps): one object per line, text from
//                   --text-field (default reviewText), label from --label-field (default
//                   overall); parsed with jansson
//   .csv            RFC 4180 CSV with a header row (the SST files: label,sentence); text
//                   column: --text-field, else the first of reviewText, text, sentence,
//                   review; label column: --label-field, else the first of overall,
//                   label, stars, rating, sentiment
// Each document is framed as in the reference recipe ("\n " + text + " ", newlines
// inside the text become spaces), all documents are shuffled with --seed, the first
// round(val_fraction * n) go to val, the rest to train. Writes DIR/train_000.bin, ...
// (shards of at most --shard-mb, split between documents), DIR/val_000.bin, ..., and
// DIR/train_labels.tsv, DIR/val_labels.tsv (doc/formats.md). The new set of files
// replaces the old one as a whole (see "Output" below); DIR and its parents are
// created. INPUT "-" is standard input (`zcat big.json.gz | prepare -o d -`), JSON
// lines unless --format says otherwise. All documents are held in memory for the
// shuffle (RAM ~ output size).
//
// Bad lines (malformed JSON, a missing text field, invalid UTF-8, a malformed CSV
// record) are skipped and counted, the first few with a warning naming file:line;
// --strict makes the first one fatal. An unterminated CSV quote is always fatal, and so
// is a line (a CSV record) longer than MAX_LINE_BYTES.
#include "data.h"
#include <time.h>
#include <dirent.h>
#include <signal.h>
#include <zlib.h>
#include <jansson.h>

// ----------------------------------------------------------------------------
// The documents, framed, in reading order: one byte arena plus an index.

typedef struct { int64_t offset, length, label; } Doc;  // label: offset into labels, -1 for none

typedef struct {
    uint8_t *bytes; int64_t n_bytes, cap_bytes;  // framed documents back to back
    Doc *docs; int64_t n_docs, cap_docs;
    char *labels; int64_t n_labels, cap_labels;  // NUL-terminated label strings
} Corpus;

static void *grow(void *p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return p;
    int64_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    p = realloc(p, (size_t)c * elem);
    if (!p)  // the user's to fix, as a flag is: exit 2
        fail("out of memory: %lld bytes for the documents read so far (all are held for the shuffle): split the "
             "input and prepare it in parts", (long long)c * (long long)elem);
    *cap = c;
    return p;
}

static void corpus_add(Corpus *c, const char *text, size_t len, const char *label) {
    c->bytes = (uint8_t *)grow(c->bytes, &c->cap_bytes, c->n_bytes + (int64_t)len + 3, 1);
    c->docs = (Doc *)grow(c->docs, &c->cap_docs, c->n_docs + 1, sizeof(Doc));
    Doc *d = &c->docs[c->n_docs++];
    d->offset = c->n_bytes;
    d->length = (int64_t)len + 3;
    uint8_t *p = c->bytes + c->n_bytes;
    p[0] = '\n'; p[1] = ' ';
    memcpy(p + 2, text, len);
    for (size_t i = 0; i < len; i++)  // a '\n' byte marks a document start and nothing else
        if (p[2 + i] == '\n' || p[2 + i] == '\r') p[2 + i] = ' ';
    p[2 + len] = ' ';
    c->n_bytes += d->length;
    d->label = -1;
    if (label) {
        size_t n = strlen(label);
        c->labels = (char *)grow(c->labels, &c->cap_labels, c->n_labels + (int64_t)n + 1, 1);
        d->label = c->n_labels;
        for (size_t i = 0; i <= n; i++)  // a label is one TSV field: no tabs or newlines
            c->labels[c->n_labels + (int64_t)i] =
                (label[i] == '\t' || label[i] == '\n' || label[i] == '\r') ? ' ' : label[i];
        c->n_labels += (int64_t)n + 1;
    }
}

// ----------------------------------------------------------------------------
// Settings, counters, and skipping bad lines.

typedef struct {
    const char *out_dir, *format, *text_field, *label_field;
    int strict;
    uint64_t seed;
    double val_fraction;
    int64_t shard_bytes, builtin_bytes;
} Settings;

enum { SKIP_JSON, SKIP_NO_TEXT, SKIP_UTF8, SKIP_CSV, SKIP_EMPTY, N_SKIP };
static const char *skip_names[N_SKIP] = {"malformed JSON", "no text field", "invalid UTF-8", "malformed CSV",
                                         "empty text"};
static int64_t skipped[N_SKIP];
static int warnings_printed = 0;
#define MAX_WARNINGS 10

static void skip_line(const Settings *cfg, int why, const char *path, long line, const char *detail) {
    if (cfg->strict) fail("%s:%ld: %s: %s (--strict)", path, line, skip_names[why], detail);
    skipped[why]++;
    if (warnings_printed < MAX_WARNINGS)
        fprintf(stderr, "warning: %s:%ld: %s: %s (skipped)\n", path, line, skip_names[why], detail);
    else if (warnings_printed == MAX_WARNINGS)
        fprintf(stderr, "warning: further skipped lines are counted, not shown\n");
    warnings_printed++;
}

// Returns -1 for valid UTF-8, else the offset of the first bad byte. Rejects overlong
// forms, surrogates and code points above U+10FFFF, as RFC 3629 does.
static long utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        int k; unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return (long)i;
        if (i + (size_t)k >= n) return (long)i;  // cut short by the end of the text
        if (s[i + 1] < lo || s[i + 1] > hi) return (long)i;
        for (int j = 2; j <= k; j++) if (s[i + j] < 0x80 || s[i + j] > 0xBF) return (long)i;
        i += (size_t)k + 1;
    }
    return -1;
}

// Checks a document's text and adds it, or skips it with a reason.
static void add_text(Corpus *c, const Settings *cfg, const char *path, long line,
                     const char *text, size_t len, const char *label) {
    if (len == 0) { skip_line(cfg, SKIP_EMPTY, path, line, "the text is empty"); return; }
    long bad = utf8_invalid_at((const unsigned char *)text, len);
    if (bad >= 0) {
        char detail[64];
        snprintf(detail, sizeof detail, "byte 0x%02x at offset %ld of the text", (unsigned char)text[bad], bad);
        skip_line(cfg, SKIP_UTF8, path, line, detail);
        return;
    }
    corpus_add(c, text, len, label);
}

// ----------------------------------------------------------------------------
// Reading lines from a plain or gzip file, with progress.
//
// gzip is inflated here rather than through zlib's gz* layer, which passes bytes after
// the last gzip member over without a word (a file with something appended, or two
// files concatenated of which one is not gzip) and names the file "<fd:N>" in its
// errors. Concatenated gzip members are read as one stream, as gzip -d reads them.

// The longest line (and CSV record) read: the line is held whole, and with no newline in
// sight (a binary file, /dev/zero) the buffer would otherwise grow until memory ran out.
#define MAX_LINE_BYTES (64 << 20)

typedef struct {
    int fd;
    const char *path;
    int gzip;                          // 1: inflated; 0: the bytes as they are
    z_stream z;                        // gzip: the inflater; both: z.next_in/avail_in is unread raw input
    unsigned char *raw; size_t raw_cap;
    int raw_eof, member_done;
    int64_t raw_read;                  // raw bytes read from fd so far
    char *buf; size_t cap, beg, end;
    int eof;
    long line;          // number of the line last returned, from 1
    int64_t bytes;      // uncompressed bytes returned so far
    int64_t next_progress;
} LineReader;

static int64_t bytes_read_total = 0;  // uncompressed, all inputs

// More raw bytes behind the unread ones (moved to the front); sets raw_eof at the end of the file.
static void raw_fill(LineReader *r) {
    if (r->raw_eof) return;
    memmove(r->raw, r->z.next_in, r->z.avail_in);
    r->z.next_in = r->raw;
    for (;;) {
        ssize_t k = read(r->fd, r->raw + r->z.avail_in, r->raw_cap - r->z.avail_in);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) fail("%s: cannot read after line %ld: %s", r->path, r->line, strerror(errno));
        if (k == 0) r->raw_eof = 1;
        r->z.avail_in += (uInt)k;
        r->raw_read += k;
        return;
    }
}

// Up to cap bytes of the file's text into dst; 0 at its end.
static size_t source_read(LineReader *r, char *dst, size_t cap) {
    if (!r->gzip) {
        if (r->z.avail_in == 0) raw_fill(r);
        size_t n = r->z.avail_in < cap ? r->z.avail_in : cap;
        memcpy(dst, r->z.next_in, n);
        r->z.next_in += n;
        r->z.avail_in -= (uInt)n;
        return n;
    }
    r->z.next_out = (unsigned char *)dst;
    r->z.avail_out = (uInt)cap;
    while (r->z.avail_out == cap) {
        if (r->member_done) {  // what follows a gzip member is another member, or the end of the file
            while (r->z.avail_in < 2 && !r->raw_eof) raw_fill(r);
            if (r->z.avail_in == 0) return 0;
            if (r->z.avail_in < 2 || r->z.next_in[0] != 0x1f || r->z.next_in[1] != 0x8b)
                fail("%s: bytes that are not gzip data follow its gzip data (at byte %lld of the file): "
                     "trailing garbage, or a file appended to it", r->path,
                     (long long)(r->raw_read - r->z.avail_in));
            inflateReset(&r->z);
            r->member_done = 0;
        }
        if (r->z.avail_in == 0) raw_fill(r);
        int ret = inflate(&r->z, Z_NO_FLUSH);
        if (ret == Z_STREAM_END) r->member_done = 1;
        else if (ret == Z_MEM_ERROR) fail("%s: out of memory inflating it", r->path);
        else if (ret == Z_BUF_ERROR && r->z.avail_in == 0 && r->raw_eof)
            fail("%s: the gzip data ends early, in line %ld of its text (a truncated file?)", r->path, r->line + 1);
        else if (ret != Z_OK && ret != Z_BUF_ERROR)
            fail("%s: corrupt gzip data at byte %lld of the file, in line %ld of its text: %s", r->path,
                 (long long)(r->raw_read - r->z.avail_in), r->line + 1, r->z.msg ? r->z.msg : "inflate failed");
    }
    return cap - r->z.avail_out;
}

static void line_too_long(const LineReader *r) {
    fail("%s:%ld: a line longer than %d MiB, the most prepare reads as one document (is it text, one document a "
         "line?)", r->path, r->line + 1, MAX_LINE_BYTES >> 20);
}

// The next chunk of the file into the buffer (the unread part moves to the front);
// returns 0 at the end of the file. Called when the unread part holds no newline: it is
// (the start of) one line, refused when longer than MAX_LINE_BYTES.
static int reader_fill(LineReader *r) {
    if (r->eof) return 0;
    memmove(r->buf, r->buf + r->beg, r->end - r->beg);
    r->end -= r->beg; r->beg = 0;
    if (r->end > MAX_LINE_BYTES) line_too_long(r);
    if (r->cap - r->end < (1 << 19)) {
        r->cap *= 2;
        r->buf = (char *)realloc(r->buf, r->cap);
        if (!r->buf) fail("%s: out of memory reading line %ld (%zu bytes)", r->path, r->line + 1, r->cap);
    }
    size_t got = source_read(r, r->buf + r->end, r->cap - r->end - 1);
    if (got == 0) r->eof = 1;
    r->end += got;
    return got > 0;
}

// The compressed formats prepare does not read, by their magic bytes: read as text they
// would be garbage documents. gzip itself, met in what has already been inflated,
// was compressed twice.
static const char *compressed_format(const unsigned char *p, size_t n) {
    static const struct { const char *name, *magic; size_t n; } formats[] = {
        {"bzip2", "BZh", 3}, {"xz", "\xFD" "7zXZ\0", 6}, {"zstd", "\x28\xB5\x2F\xFD", 4},
        {"lz4", "\x04\x22\x4D\x18", 4}, {"zip", "PK\x03\x04", 4}, {"7z", "7z\xBC\xAF\x27\x1C", 6},
        {"gzip", "\x1F\x8B", 2}};
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++)
        if (n >= formats[k].n && !memcmp(p, formats[k].magic, formats[k].n) &&
            (strcmp(formats[k].name, "bzip2") || (n > 3 && p[3] >= '1' && p[3] <= '9')))  // BZh and the block size
            return formats[k].name;
    return NULL;
}

// A FIFO's open waits for a writer to open it, silently: after a second of it, this says so.
static char fifo_wait_note[4200];
static void on_fifo_wait(int sig) {
    (void)sig;
    write_all(2, fifo_wait_note, strlen(fifo_wait_note));
}

// "-" is standard input (`zcat big.json.gz | prepare -o d -`; gzip is read there too).
// A UTF-8 byte order mark at the start (spreadsheets write one) is not text. An input
// named .gz must be gzip data, and data compressed in a format prepare does not read is
// refused under any name: it would be read as text. A FIFO (or `<(zcat x.gz)`) is read as
// it is written, like standard input.
static void reader_open(LineReader *r, const char *path) {
    memset(r, 0, sizeof *r);
    int is_stdin = !strcmp(path, "-");
    r->path = is_stdin ? "<stdin>" : path;
    struct stat st;
    int fifo = !is_stdin && stat(path, &st) == 0 && S_ISFIFO(st.st_mode);
    struct sigaction wait_note = {.sa_handler = on_fifo_wait, .sa_flags = SA_RESTART}, before;
    if (fifo) {
        snprintf(fifo_wait_note, sizeof fifo_wait_note, "prepare: %s is a FIFO: waiting for a writer to open it\n",
                 path);
        sigemptyset(&wait_note.sa_mask);
        sigaction(SIGALRM, &wait_note, &before);
        alarm(1);
    }
    r->fd = is_stdin ? dup(0) : open(path, O_RDONLY | O_CLOEXEC);
    int open_errno = errno;
    if (fifo) {
        alarm(0);
        sigaction(SIGALRM, &before, NULL);
    }
    if (r->fd < 0) fail("cannot open %s: %s", r->path, strerror(open_errno));
    if (fstat(r->fd, &st) == 0 && S_ISDIR(st.st_mode)) fail("cannot read %s: it is a directory", r->path);
    r->raw_cap = 1 << 18;
    r->raw = (unsigned char *)mallocCheck(r->raw_cap);
    r->z.next_in = r->raw;
    while (r->z.avail_in < 2 && !r->raw_eof) raw_fill(r);
    r->gzip = r->z.avail_in >= 2 && r->raw[0] == 0x1f && r->raw[1] == 0x8b;
    if (r->gzip && inflateInit2(&r->z, 15 + 16) != Z_OK)  // 15 + 16: a gzip stream, the largest window
        fail("%s: out of memory starting to inflate it", r->path);
    r->cap = 1 << 20;
    r->buf = (char *)mallocCheck(r->cap);
    r->next_progress = 64LL << 20;
    while (r->end < 8 && reader_fill(r)) {}
    const unsigned char *head = (const unsigned char *)r->buf;
    const char *inner = compressed_format(head, r->end);
    size_t n = strlen(r->path);
    if (!is_stdin && n > 3 && !strcmp(r->path + n - 3, ".gz") && !r->gzip) {
        char what[64];
        snprintf(what, sizeof what, "%s%s", inner ? inner : r->end ? "it does not start with the gzip bytes 1f 8b"
                 : "it is empty", inner ? " data" : "");
        fail("%s: named .gz but not gzip data: %s", r->path, what);
    }
    if (inner)
        fail("%s: %s data%s, which prepare does not read: decompress it first (prepare reads text, and gzip)", r->path,
             inner, r->gzip ? " inside gzip" : "");
    if (r->end >= 3 && !memcmp(r->buf, "\xEF\xBB\xBF", 3)) { r->beg = 3; r->bytes = 3; }
}

// The first byte that is not white space, without consuming it; -1 if there is none
// (within the first MAX_LINE_BYTES).
static int reader_peek(LineReader *r) {
    for (size_t i = r->beg;; i++) {
        if (i - r->beg > MAX_LINE_BYTES) return -1;
        while (i >= r->end) {
            size_t off = i - r->beg;
            if (!reader_fill(r)) return -1;
            i = r->beg + off;
        }
        unsigned char ch = (unsigned char)r->buf[i];
        if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n') return ch;
    }
}

static void reader_close(LineReader *r) {
    bytes_read_total += r->bytes;
    if (r->gzip) inflateEnd(&r->z);
    close(r->fd);
    free(r->raw);
    free(r->buf);
}

// The next line without its "\n" (and "\r"), NUL-terminated; NULL at the end.
static char *reader_line(LineReader *r, size_t *len) {
    for (;;) {
        char *start = r->buf + r->beg;
        char *nl = (char *)memchr(start, '\n', r->end - r->beg);
        if (nl || (r->eof && r->end > r->beg)) {
            size_t n = nl ? (size_t)(nl - start) : r->end - r->beg;
            if (n > MAX_LINE_BYTES) line_too_long(r);
            r->beg += n + (nl ? 1 : 0);
            r->bytes += (int64_t)n + (nl ? 1 : 0);
            if (n > 0 && start[n - 1] == '\r') n--;
            start[n] = 0;  // the buffer always has a spare byte past end
            *len = n;
            r->line++;
            if (r->bytes >= r->next_progress) {
                fprintf(stderr, "prepare: %s: %lld MB, line %ld%s", r->path, (long long)(r->bytes >> 20), r->line,
                        isatty(2) ? "\r" : "\n");
                r->next_progress += 64LL << 20;
            }
            return start;
        }
        if (!reader_fill(r) && r->end == r->beg) return NULL;
    }
}

// ----------------------------------------------------------------------------
// The three input formats.

static void read_text(Corpus *c, const Settings *cfg, LineReader *r) {
    size_t len;
    char *line;
    while ((line = reader_line(r, &len)))
        if (len > 0) add_text(c, cfg, r->path, r->line, line, len, NULL);
}

// A JSON line, decoded. jansson refuses a whole document for one integer beyond 64
// bits in any field (an id, a count); such a line is decoded again with every integer
// as a real (*as_real = 1), so the document is kept.
static json_t *json_line(const char *line, size_t len, json_error_t *err, int *as_real) {
    *as_real = 0;
    json_t *root = json_loadb(line, len, 0, err);
    if (root || json_error_code(err) != json_error_numeric_overflow) return root;
    *as_real = 1;
    return json_loadb(line, len, JSON_DECODE_INT_AS_REAL, err);
}

// A label from JSON, whole: a string as it is, a number as the shortest text that reads
// back as the same value ("5" for 5 and 5.0, "4.5", "0.123456789"), a boolean as 0 or 1;
// num (32 bytes) holds a number's text. NULL when v is none of these, or a number that
// json_line decoded as a real (as_real) beyond 2^53, which is not the integer written.
static const char *json_label(json_t *v, int as_real, char *num) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_boolean(v)) return json_is_true(v) ? "1" : "0";
    if (json_is_integer(v)) snprintf(num, 32, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) {
        double x = json_real_value(v);
        if (as_real && fabs(x) >= 0x1p53) return NULL;
        for (int digits = 1; digits <= 17; digits++) {
            snprintf(num, 32, "%.*g", digits, x);
            if (strtod(num, NULL) == x) break;
        }
    } else return NULL;
    return num;
}

static void read_jsonl(Corpus *c, const Settings *cfg, LineReader *r) {
    const char *path = r->path;
    size_t len;
    char *line;
    char num[32];
    while ((line = reader_line(r, &len))) {
        if (len == 0) continue;
        json_error_t err;
        int as_real;
        json_t *root = json_line(line, len, &err, &as_real);
        if (!root) {
            char detail[256];
            snprintf(detail, sizeof detail, "%s at column %d", err.text, err.column);
            skip_line(cfg, SKIP_JSON, path, r->line, detail);
            continue;
        }
        json_t *text = json_is_object(root) ? json_object_get(root, cfg->text_field) : NULL;
        json_t *lab = json_is_object(root) && cfg->label_field[0] ? json_object_get(root, cfg->label_field) : NULL;
        const char *label = lab ? json_label(lab, as_real, num) : NULL;
        if (!json_is_object(root)) {
            skip_line(cfg, SKIP_JSON, path, r->line, "not a JSON object");
        } else if (!json_is_string(text)) {
            char detail[300];
            snprintf(detail, sizeof detail, "no string field \"%s\"", cfg->text_field);
            skip_line(cfg, SKIP_NO_TEXT, path, r->line, detail);
        } else if (lab && !label && json_is_number(lab)) {
            char detail[300];
            snprintf(detail, sizeof detail, "label \"%s\" is an integer beyond 2^53, which the line's other integer "
                     "beyond 64 bits made a real: not exact", cfg->label_field);
            skip_line(cfg, SKIP_JSON, path, r->line, detail);
        } else {
            // jansson has validated the UTF-8 already
            if (json_string_length(text) == 0) skip_line(cfg, SKIP_EMPTY, path, r->line, "the text is empty");
            else corpus_add(c, json_string_value(text), json_string_length(text), label);
        }
        json_decref(root);
    }
}

// One RFC 4180 record, which may span lines inside quotes. Fields are unescaped into
// f->buf, field i at f->buf + f->start[i], NUL-terminated. Returns 1 for a record, 0 at
// the end of the file, -1 for a malformed record (why says how; the rest of the record
// is skipped). An unterminated quote at the end of the file is fatal: no resync.
typedef struct { char *buf; int64_t n, cap; int64_t *start; int64_t n_fields, cap_fields; long first_line; } CsvRecord;

static void csv_put(CsvRecord *f, char ch) {
    f->buf = (char *)grow(f->buf, &f->cap, f->n + 1, 1);
    f->buf[f->n++] = ch;
}
static void csv_new_field(CsvRecord *f) {
    f->start = (int64_t *)grow(f->start, &f->cap_fields, f->n_fields + 1, sizeof(int64_t));
    f->start[f->n_fields++] = f->n;
}

static int csv_record(LineReader *r, CsvRecord *f, char *why, size_t why_cap) {
    size_t len;
    char *line = reader_line(r, &len);
    if (!line) return 0;
    f->n = 0; f->n_fields = 0; f->first_line = r->line;
    csv_new_field(f);
    int quoted = 0, after_quote = 0, bad = 0;
    size_t i = 0;
    for (;;) {
        if (i == len) {
            if (!quoted) break;
            line = reader_line(r, &len);  // a quoted field goes on to the next line
            if (!line) fail("%s:%ld: unterminated quoted field: the quote opened on line %ld is never closed",
                            r->path, f->first_line, f->first_line);
            if (f->n + (int64_t)len > MAX_LINE_BYTES)  // one record is held whole, as one line is
                fail("%s:%ld: a CSV record longer than %d MiB, the most prepare reads as one document (a quote "
                     "opened on line %ld and never closed?)", r->path, f->first_line, MAX_LINE_BYTES >> 20,
                     f->first_line);
            csv_put(f, '\n');
            i = 0;
            continue;
        }
        char ch = line[i++];
        if (bad) continue;
        if (quoted) {
            if (ch != '"') csv_put(f, ch);
            else if (i < len && line[i] == '"') { csv_put(f, '"'); i++; }
            else { quoted = 0; after_quote = 1; }
        } else if (ch == ',') {
            csv_put(f, 0); csv_new_field(f); after_quote = 0;
        } else if (after_quote) {
            snprintf(why, why_cap, "unexpected '%c' after a closing quote in field %lld", ch, (long long)f->n_fields);
            bad = 1;
        } else if (ch == '"') {
            if (f->n != f->start[f->n_fields - 1]) {
                snprintf(why, why_cap, "stray quote inside unquoted field %lld", (long long)f->n_fields);
                bad = 1;
            } else quoted = 1;
        } else csv_put(f, ch);
    }
    csv_put(f, 0);
    return bad ? -1 : 1;
}

static int csv_column(const CsvRecord *h, const char *flag_value, const char *const *defaults, int n_defaults) {
    for (int k = flag_value ? -1 : 0; k < n_defaults; k++) {
        const char *want = k < 0 ? flag_value : defaults[k];
        for (int64_t i = 0; i < h->n_fields; i++)
            if (strcmp(h->buf + h->start[i], want) == 0) return (int)i;
        if (k < 0) return -1;  // a name given by flag must be there
    }
    return -1;
}

static void read_csv(Corpus *c, const Settings *cfg, LineReader *r, int text_flag_given, int label_flag_given) {
    static const char *const text_names[] = {"reviewText", "text", "sentence", "review"};
    static const char *const label_names[] = {"overall", "label", "stars", "rating", "sentiment"};
    const char *path = r->path;
    CsvRecord f;
    memset(&f, 0, sizeof f);
    char why[128];
    int got = csv_record(r, &f, why, sizeof why);
    if (got == 0) fail("%s: empty file, expected a CSV header line", path);
    if (got < 0) fail("%s:1: malformed CSV header: %s", path, why);
    int text_col = csv_column(&f, text_flag_given ? cfg->text_field : NULL, text_names, 4);
    int label_col = label_flag_given && !cfg->label_field[0]
                        ? -1 : csv_column(&f, label_flag_given ? cfg->label_field : NULL, label_names, 5);
    if (text_col < 0) fail("%s:1: no text column named \"%s\" in the header\nHINT: use --text-field NAME",
                           path, text_flag_given ? cfg->text_field : "reviewText, text, sentence or review");
    if (label_flag_given && cfg->label_field[0] && label_col < 0)
        fail("%s:1: no label column named \"%s\" in the header", path, cfg->label_field);
    int64_t n_columns = f.n_fields;
    while ((got = csv_record(r, &f, why, sizeof why)) != 0) {
        if (got < 0) { skip_line(cfg, SKIP_CSV, path, f.first_line, why); continue; }
        if (f.n_fields == 1 && f.buf[0] == 0) continue;  // a blank line
        if (f.n_fields != n_columns) {
            snprintf(why, sizeof why, "%lld fields, the header has %lld", (long long)f.n_fields, (long long)n_columns);
            skip_line(cfg, SKIP_CSV, path, f.first_line, why);
            continue;
        }
        // a field's length from where the next starts: a NUL byte in the text is text (as build/transfer keeps it)
        const char *text = f.buf + f.start[text_col];
        int64_t end = text_col + 1 < f.n_fields ? f.start[text_col + 1] : f.n;
        size_t len = (size_t)(end - f.start[text_col] - 1);  // less the NUL
        const char *label = label_col >= 0 ? f.buf + f.start[label_col] : NULL;
        int64_t label_end = label_col + 1 < f.n_fields ? f.start[label_col + 1] : f.n;
        if (label && (int64_t)strlen(label) != label_end - f.start[label_col] - 1) {
            skip_line(cfg, SKIP_CSV, path, f.first_line, "the label holds a NUL byte");
            continue;
        }
        add_text(c, cfg, path, f.first_line, text, len, label);
    }
    free(f.buf); free(f.start);
}

static const char *format_of(const char *path) {
    char name[4096];
    snprintf(name, sizeof name, "%s", path);
    size_t n = strlen(name);
    if (n > 3 && strcmp(name + n - 3, ".gz") == 0) name[n -= 3] = 0;
    const char *dot = strrchr(name, '.');
    if (dot && (!strcmp(dot, ".txt") || !strcmp(dot, ".text"))) return "text";
    if (dot && (!strcmp(dot, ".json") || !strcmp(dot, ".jsonl") || !strcmp(dot, ".ndjson"))) return "jsonl";
    if (dot && !strcmp(dot, ".csv")) return "csv";
    fail("cannot tell the format of %s from its name\nHINT: use --format text, jsonl or csv", path);
    return NULL;
}

// ----------------------------------------------------------------------------
// Output. The new set switches in whole. Every shard and labels file is first written
// into a temporary directory beside DIR, <DIR>.prepare.tmp.<pid> (a write that fails
// part way, say on a full disk, or a SIGINT, SIGTERM or SIGHUP, leaves DIR untouched
// and the temporary directory removed at exit); then that directory and DIR trade
// places in one rename (Linux renameat2 RENAME_EXCHANGE; a plain rename when DIR does
// not exist yet), and the old set, now under the temporary name, is removed. A kill at
// any moment leaves DIR holding the old set or the new one, never a mix, and a reader
// that opens DIR's shards through one descriptor of it (data.h, stream_open_dir) gets
// one set whole. A prepare killed with -9 leaves its temporary directory, which the
// next prepare into DIR removes. Where the exchange is not supported (a file system
// without it), DIR is first renamed to <DIR>.prepare.old.<pid> and the new set renamed
// in: a reader in between finds no DIR, and a kill in between is undone by the next
// prepare, which renames the old set back.
//
// So DIR is the set and nothing else: a file in it that prepare does not write would
// go with the old set, and is refused before anything is read; so is an input inside
// DIR, or one that is one of its files under another name (a symbolic or hard link).

// Whether `name` is one of the files of a prepared set (SPLIT_NNN.bin, SPLIT_labels.tsv,
// SPLIT train or val), or one of their temporary files (AtomicFile: NAME.tmp.<pid>).
static int set_file_name(const char *name) {
    const char *rest = !strncmp(name, "train_", 6) ? name + 6 : !strncmp(name, "val_", 4) ? name + 4 : NULL;
    if (!rest) return 0;
    size_t digits = strspn(rest, "0123456789");
    const char *end = !strncmp(rest, "labels.tsv", 10) ? rest + 10
                      : digits >= 3 && !strncmp(rest + digits, ".bin", 4) ? rest + digits + 4 : NULL;
    if (!end) return 0;
    if (!*end) return 1;
    return !strncmp(end, ".tmp.", 5) && end[5] && strspn(end + 5, "0123456789") == strlen(end + 5);
}

// Removes a set's directory: its set files, then the directory. Anything else in it
// stays, and so then does the directory; returns whether it is gone.
static int remove_set_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT;
    struct dirent *e;
    char path[8400];
    while ((e = readdir(d)))
        if (set_file_name(e->d_name)) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    return rmdir(dir) == 0;
}

// Where the output goes: out (DIR resolved, symbolic links and all, so that the switch
// happens where the files are), its parent, its last name, and the two temporary names.
typedef struct { char out[4096], parent[4096], base[1024], tmp[8200], old[8200]; } OutDir;
static OutDir out_dir;
static int staging_made = 0;  // out_dir.tmp exists and is ours to remove at exit

static void remove_staging(void) {
    if (staging_made && !remove_set_dir(out_dir.tmp))
        fprintf(stderr, "warning: %s holds files prepare does not write: left there\n", out_dir.tmp);
    staging_made = 0;
}

// mkdir -p: `-o data/amazon` on a fresh clone creates data/ too
static void make_dirs(const char *dir) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) fail("output directory name too long: %s", dir);
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q) continue;
        char keep = *q;
        *q = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) fail("cannot create output directory %s: %s", p, strerror(errno));
        *q = keep;
        if (!keep) break;
    }
}

// Resolves -o DIR into out_dir, creating DIR's parents (not DIR: the switch puts it
// there). A symbolic link is followed to where it leads (util.h, path_follow_links),
// even to a directory not made yet, so the link stays a link. A DIR that holds the
// current directory is refused: the switch would leave this shell in the removed old one.
static void out_dir_resolve(const char *given) {
    char path[4096], target[4096];
    size_t n = strlen(given);
    while (n > 1 && given[n - 1] == '/') n--;  // "d/" is d
    if (n == 0 || n >= sizeof path) fail("-o \"%s\": not a usable directory name", given);
    memcpy(path, given, n);
    path[n] = 0;
    struct stat st;
    path_follow_links("cannot create output directory", path, target, &st);
    if (st.st_mode && !S_ISDIR(st.st_mode)) fail("output directory %s is not a directory", given);
    char *slash = strrchr(target, '/'), *real = NULL;
    const char *base = slash ? slash + 1 : target;
    if (st.st_mode) real = realpath(target, NULL);
    else if (strcmp(base, ".") && strcmp(base, "..")) {  // a new directory: its parent, made, resolved, then its name
        if (slash && slash != target) {
            *slash = 0;
            make_dirs(target);
            *slash = '/';
        }
        int parent_len = slash ? (slash == target ? 1 : (int)(slash - target)) : 1;  // "/x": "/"; "x": "."
        char parent[4096];
        snprintf(parent, sizeof parent, "%.*s", parent_len, slash ? target : ".");
        char *rp = realpath(parent, NULL);
        if (rp) {
            real = (char *)mallocCheck(strlen(rp) + strlen(base) + 2);
            sprintf(real, "%s%s%s", rp, strcmp(rp, "/") ? "/" : "", base);
            free(rp);
        }
    }
    if (!real) fail("cannot create output directory %s: %s", given, strerror(errno ? errno : ENOENT));
    if (!strcmp(real, "/")) fail("output directory %s: the root directory cannot be switched for another", given);
    if (strlen(real) >= sizeof out_dir.out) fail("output directory name too long: %s", given);
    strcpy(out_dir.out, real);
    free(real);
    char *cwd = realpath(".", NULL);
    size_t no = strlen(out_dir.out);
    if (cwd && !strncmp(cwd, out_dir.out, no) && (cwd[no] == '/' || !cwd[no]))
        fail("-o %s holds the current directory, which the switch would leave removed: run prepare from outside it",
             given);
    free(cwd);
    slash = strrchr(out_dir.out, '/');
    snprintf(out_dir.parent, sizeof out_dir.parent, "%.*s", slash == out_dir.out ? 1 : (int)(slash - out_dir.out),
             out_dir.out);
    if (strlen(slash + 1) >= sizeof out_dir.base) fail("output directory name too long: %s", given);
    strcpy(out_dir.base, slash + 1);
    snprintf(out_dir.tmp, sizeof out_dir.tmp, "%s.prepare.tmp.%ld", out_dir.out, (long)getpid());
    snprintf(out_dir.old, sizeof out_dir.old, "%s.prepare.old.%ld", out_dir.out, (long)getpid());
    if (access(out_dir.parent, W_OK) != 0)
        fail("cannot write to %s, where output directory %s is made: %s", out_dir.parent, given, strerror(errno));
    // the switch renames DIR, and a mount point (a container's data volume) cannot be renamed
    // (EBUSY): said now, not after minutes of work
    struct stat od, pd;
    int mount_root = stat(out_dir.out, &od) == 0 && stat(out_dir.parent, &pd) == 0 && od.st_dev != pd.st_dev;
#ifdef STATX_ATTR_MOUNT_ROOT
    struct statx sx;  // a bind mount of a directory of the same file system too (Linux 5.8)
    if (statx(AT_FDCWD, out_dir.out, 0, STATX_BASIC_STATS, &sx) == 0 &&
        (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT))
        mount_root |= (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
#endif
    if (mount_root)
        fail("-o %s is a mount point, which cannot be renamed, and a new set switches in by renaming its directory: "
             "give a directory inside it (-o %s/data)", given, given);
}

// The temporary directories of prepares into DIR that were killed: <DIR>.prepare.tmp.<pid>
// (a new set not switched in, or the old one switched out) are removed;
// <DIR>.prepare.old.<pid> (the old set, moved aside by the two-rename switch) is renamed
// back when DIR is missing (killed between the renames), else removed. Only names of that
// form whose process is gone, so a prepare running now keeps its own.
static void remove_stale_temporaries(void) {
    DIR *d = opendir(out_dir.parent);
    struct dirent *e;
    size_t nb = strlen(out_dir.base);
    while (d && (e = readdir(d))) {
        const char *s = e->d_name, *pid = s + nb + 13;
        int ours = !strncmp(s, out_dir.base, nb) && (!strncmp(s + nb, ".prepare.tmp.", 13) ||
                                                     !strncmp(s + nb, ".prepare.old.", 13));
        if (!ours) continue;
        if (!*pid || strspn(pid, "0123456789") != strlen(pid) || strlen(pid) > 9) continue;
        long p = atol(pid);
        if (p <= 0 || p == (long)getpid() || kill((pid_t)p, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours
        char path[8400];
        snprintf(path, sizeof path, "%s/%s", out_dir.parent, s);
        struct stat sb;
        if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (s[nb + 9] == 'o' && access(out_dir.out, F_OK) != 0 && errno == ENOENT && rename(path, out_dir.out) == 0) {
            fprintf(stderr, "prepare: %s: the set a killed prepare had moved aside is back\n", out_dir.out);
            continue;
        }
        if (!remove_set_dir(path))
            fprintf(stderr, "warning: %s holds files prepare does not write: left there\n", path);
    }
    if (d) closedir(d);
}

// Refuses what the switch would take away: an input that is one of DIR's files under
// any name (a symbolic or hard link, standard input redirected from it) or lies inside
// DIR, and a file in DIR that is not part of a set.
static void check_out_dir_apart(const char *given, const char *const *inputs, int n_inputs) {
    DIR *d = opendir(out_dir.out);
    struct dirent *e;
    char path[8400];
    for (int pass = 0; pass < 2 && d; pass++, rewinddir(d)) {
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            if (pass == 1 && !set_file_name(e->d_name))
                fail("-o %s holds %s, which is not a file build/prepare writes: the new set replaces the whole "
                     "directory (move it away, or give another -o)", given, e->d_name);
            struct stat out_st, in_st;
            snprintf(path, sizeof path, "%s/%s", out_dir.out, e->d_name);
            for (int i = 0; pass == 0 && i < n_inputs && stat(path, &out_st) == 0; i++) {
                int in = !strcmp(inputs[i], "-") ? fstat(0, &in_st) : stat(inputs[i], &in_st);
                if (in == 0 && in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino)
                    fail("input %s is one of the files -o %s is about to replace (%s): write the shards to another "
                         "directory", !strcmp(inputs[i], "-") ? "<stdin>" : inputs[i], given, e->d_name);
            }
        }
        for (int i = 0; pass == 0 && i < n_inputs; i++) {
            char *real = strcmp(inputs[i], "-") ? realpath(inputs[i], NULL) : NULL;
            size_t no = strlen(out_dir.out);
            if (real && !strncmp(real, out_dir.out, no) && (real[no] == '/' || !real[no]))
                fail("input %s lies inside -o %s, which the new set replaces whole: keep inputs elsewhere", inputs[i],
                     given);
            free(real);
        }
    }
    if (d) closedir(d);
}

static volatile sig_atomic_t interrupted = 0;
static void on_signal(int sig) { interrupted = sig; }

// Writes one split's shards and labels file into the temporary directory; returns the number of shards.
static int64_t write_split(const Corpus *c, const Settings *cfg, const char *split, const int64_t *order, int64_t n) {
    char path[8400];
    ShardWriter w;
    int shard = 0;
    int64_t in_shard = 0, offset = 0;
    snprintf(path, sizeof path, "%s/%s_labels.tsv", out_dir.tmp, split);
    AtomicFile labels;
    atomic_open(&labels, path);
    fprintf(labels.f, "offset\tlength\tlabel\n");
    snprintf(path, sizeof path, "%s/%s_%03d.bin", out_dir.tmp, split, shard);
    shard_writer_open(&w, path, SHARD_FRAMED);
    for (int64_t i = 0; i < n; i++) {
        if (interrupted) {
            atomic_abort(&labels);
            atomic_abort(&w.af);
            fail("interrupted (signal %d) while writing %s: %s is as it was", (int)interrupted, split, cfg->out_dir);
        }
        const Doc *d = &c->docs[order[i]];
        if (in_shard > 0 && in_shard + d->length > cfg->shard_bytes) {  // documents never straddle shards
            shard_writer_close(&w);
            snprintf(path, sizeof path, "%s/%s_%03d.bin", out_dir.tmp, split, ++shard);
            shard_writer_open(&w, path, SHARD_FRAMED);
            in_shard = 0;
        }
        shard_writer_append(&w, c->bytes + d->offset, (size_t)d->length);
        fprintf(labels.f, "%lld\t%lld\t%s\n", (long long)offset, (long long)d->length,
                d->label >= 0 ? c->labels + d->label : "-");
        in_shard += d->length;
        offset += d->length;
    }
    shard_writer_close(&w);
    if (ferror(labels.f)) { atomic_abort(&labels); fail("cannot write %s/%s_labels.tsv", cfg->out_dir, split); }
    atomic_commit(&labels);
    return shard + 1;
}

// The switch: the written set (out_dir.tmp) becomes DIR in one rename, then the old set goes.
static void switch_in(const char *given) {
    struct stat old;
    int there = stat(out_dir.out, &old) == 0;
    if (there && chown(out_dir.tmp, old.st_uid, old.st_gid) != 0) {}  // its owner too, where this process may (root)
    if (there && chmod(out_dir.tmp, old.st_mode & 07777) != 0)  // DIR keeps its permissions
        fail("cannot set the permissions of %s: %s", out_dir.tmp, strerror(errno));
    int exchanged = -1;
#ifdef RENAME_EXCHANGE
    exchanged = renameat2(AT_FDCWD, out_dir.tmp, AT_FDCWD, out_dir.out, RENAME_EXCHANGE) == 0;
    if (!exchanged && errno == ENOENT && rename(out_dir.tmp, out_dir.out) == 0) {  // no DIR yet
        staging_made = 0;
        return;
    }
    if (!exchanged && errno != EINVAL && errno != ENOSYS)  // a file system without the exchange: below
        fail("cannot switch the new set in as %s: %s (%s keeps the old set)", given, strerror(errno), given);
#endif
    if (exchanged == 1) {  // the old set is at out_dir.tmp now
        remove_staging();
        return;
    }
    if (rename(out_dir.out, out_dir.old) != 0) {
        if (errno == ENOENT && rename(out_dir.tmp, out_dir.out) == 0) {
            staging_made = 0;
            return;
        }
        fail("cannot switch the new set in as %s: %s (%s keeps the old set)", given, strerror(errno), given);
    }
    if (rename(out_dir.tmp, out_dir.out) != 0) {
        int e = errno;
        if (rename(out_dir.old, out_dir.out) != 0)
            fail("cannot rename %s back to %s: %s", out_dir.old, given, strerror(errno));
        fail("cannot switch the new set in as %s: %s (%s keeps the old set)", given, strerror(e), given);
    }
    staging_made = 0;
    if (!remove_set_dir(out_dir.old))
        fprintf(stderr, "warning: %s holds files prepare does not write: left there\n", out_dir.old);
}

static void usage(void) {
    fprintf(stderr,
        "usage: prepare [options] -o DIR INPUT...\n"
        "       prepare --builtin BYTES [options] -o DIR\n"
        "  -o, --out DIR          output directory (created with its parents if missing)\n"
        "  INPUT                  a file (.txt .json .jsonl .csv, optionally .gz) or - for standard input "
        "(JSON lines, or --format)\n"
        "  --format F             text, jsonl or csv for every input (default: from each name)\n"
        "  --text-field NAME      JSON/CSV text field (default reviewText; CSV also tries text, sentence, review)\n"
        "  --label-field NAME     JSON/CSV label field, \"\" for none (default overall; CSV also tries label, stars, "
        "rating, sentiment)\n"
        "  --val-fraction F       fraction of documents for val, 0 <= F < 1 (default 0.01)\n"
        "  --seed N               shuffle seed (default 1)\n"
        "  --shard-mb N           largest shard in MB (default 1024; a shard holds at least one document)\n"
        "  --strict               stop at the first bad line instead of skipping it\n"
        "  --builtin BYTES        write about BYTES of the built-in corpus (labels 1-5) instead of reading inputs\n"
        "  --                     the end of the options: every word after it is an INPUT\n"
        "A line (a CSV record) is at most %d MiB; a longer one is refused, naming its file and line.\n",
        MAX_LINE_BYTES >> 20);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}


int main(int argc, char **argv) {
    std_fds_open();
    file_size_limit_as_error();
    Settings cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.text_field = "reviewText"; cfg.label_field = "overall";
    cfg.seed = 1; cfg.val_fraction = 0.01; cfg.shard_bytes = 1024LL << 20; cfg.builtin_bytes = -1;
    int text_flag_given = 0, label_flag_given = 0;
    const char **inputs = (const char **)mallocCheck((size_t)argc * sizeof(char *));
    int n_inputs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        #define VALUE() (has_value ? argv[++i] : (fail("%s needs a value", a), ""))
        if (!strcmp(a, "--")) {  // the end of the options: what follows is inputs, "-x.txt" too
            while (++i < argc) inputs[n_inputs++] = argv[i];
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) cfg.out_dir = VALUE();
        else if (!strcmp(a, "--format")) cfg.format = VALUE();
        else if (!strcmp(a, "--text-field")) { cfg.text_field = VALUE(); text_flag_given = 1; }
        else if (!strcmp(a, "--label-field")) { cfg.label_field = VALUE(); label_flag_given = 1; }
        else if (!strcmp(a, "--strict")) cfg.strict = 1;
        else if (!strcmp(a, "--seed")) cfg.seed = (uint64_t)parse_whole(a, VALUE(), 0, LLONG_MAX);
        else if (!strcmp(a, "--shard-mb"))  // fractions allowed: the tests make tiny shards
            cfg.shard_bytes = (int64_t)(parse_real(a, VALUE(), 1e-6, 1 << 30) * 1048576.0);
        else if (!strcmp(a, "--builtin")) {
            cfg.builtin_bytes = parse_whole(a, VALUE(), 0, LLONG_MAX);
            if (cfg.builtin_bytes > 1LL << 40)
                fail("--builtin %lld: at most %lld bytes (1 TiB; it is all held in memory)",
                     (long long)cfg.builtin_bytes, 1LL << 40);
        }
        else if (!strcmp(a, "--val-fraction")) {
            cfg.val_fraction = parse_real(a, VALUE(), 0, 1);
            if (cfg.val_fraction == 1)
                fail("--val-fraction: must be below 1 (something must be left to train on), got 1");
        }
        else if (a[0] == '-' && a[1]) { usage(); fail("unknown option %s", a); }
        else inputs[n_inputs++] = a;
        #undef VALUE
    }
    if (!cfg.out_dir) { usage(); fail("no output directory (-o DIR)"); }
    if (cfg.builtin_bytes < 0 && n_inputs == 0) { usage(); fail("no input files (or --builtin BYTES)"); }
    if (cfg.builtin_bytes >= 0 && n_inputs > 0) fail("--builtin takes no input files");
    if (cfg.shard_bytes <= 0) fail("--shard-mb is too small");
    if (cfg.format && strcmp(cfg.format, "text") && strcmp(cfg.format, "jsonl") && strcmp(cfg.format, "csv"))
        fail("--format expects text, jsonl or csv, got \"%s\"", cfg.format);
    int n_stdin = 0;
    for (int i = 0; i < n_inputs; i++) {
        n_stdin += !strcmp(inputs[i], "-");
        if (!cfg.format && strcmp(inputs[i], "-")) format_of(inputs[i]);  // fail before reading anything
    }
    if (n_stdin > 1) fail("standard input (-) is given %d times", n_stdin);
    // the output directory must be usable, and apart from the inputs, before we spend minutes reading
    out_dir_resolve(cfg.out_dir);
    remove_stale_temporaries();
    check_out_dir_apart(cfg.out_dir, inputs, n_inputs);
    struct stat st;

    double t0 = now_seconds();
    Corpus c;
    memset(&c, 0, sizeof c);
    int64_t compressed_bytes = 0;
    if (cfg.builtin_bytes >= 0) {
        uint64_t rng = checksum_final(cfg.seed) ^ 0x7072657061726521ULL;  // "prepare!": not corpus_stream's documents
        char text[CORPUS_DOC_MAX], label[8];
        while (c.n_bytes < cfg.builtin_bytes) {
            size_t len;
            snprintf(label, sizeof label, "%d", corpus_document(&rng, text, sizeof text, &len));
            corpus_add(&c, text, len, label);
        }
    }
    for (int i = 0; i < n_inputs; i++) {
        LineReader r;
        reader_open(&r, inputs[i]);
        const char *fmt = cfg.format ? cfg.format : strcmp(inputs[i], "-") ? format_of(inputs[i]) : NULL;
        if (!fmt) {  // standard input has no name to go by: JSON lines start with '{'
            if (reader_peek(&r) != '{')
                fail("<stdin>: cannot tell the format (it does not start with '{' as JSON lines do)\n"
                     "HINT: --format text or csv");
            fmt = "jsonl";
        }
        int64_t before = c.n_docs;
        if (!strcmp(fmt, "text")) read_text(&c, &cfg, &r);
        else if (!strcmp(fmt, "jsonl")) read_jsonl(&c, &cfg, &r);
        else read_csv(&c, &cfg, &r, text_flag_given, label_flag_given);
        if (c.n_docs == before) fprintf(stderr, "warning: %s: no documents\n", r.path);
        reader_close(&r);
        if (strcmp(inputs[i], "-") && stat(inputs[i], &st) == 0) compressed_bytes += st.st_size;
    }
    double t_read = now_seconds() - t0;
    if (c.n_docs == 0) fail("no documents in the input");

    // Fisher-Yates with the seed, then the first n_val documents are val
    int64_t *order = (int64_t *)mallocCheck((size_t)c.n_docs * sizeof(int64_t));
    uint64_t rng = checksum_final(cfg.seed);
    for (int64_t i = 0; i < c.n_docs; i++) order[i] = i;
    for (int64_t i = c.n_docs - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next(&rng) % (uint64_t)(i + 1));
        int64_t t = order[i]; order[i] = order[j]; order[j] = t;
    }
    int64_t n_val = (int64_t)llround(cfg.val_fraction * (double)c.n_docs);
    if (cfg.val_fraction > 0 && n_val == 0 && c.n_docs >= 2) n_val = 1;
    if (n_val >= c.n_docs) n_val = c.n_docs - 1;
    int64_t n_train = c.n_docs - n_val, train_shards = 0, val_shards = 0;
    int64_t val_bytes = 0;
    for (int64_t i = 0; i < n_val; i++) val_bytes += c.docs[order[i]].length;
    // write everything into the temporary directory, then switch it in (see "Output")
    int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int k = 0; k < 3; k++) signal(sigs[k], on_signal);
    if (mkdir(out_dir.tmp, 0777) != 0) fail("cannot create %s: %s", out_dir.tmp, strerror(errno));
    staging_made = 1;
    atexit(remove_staging);
    train_shards = write_split(&c, &cfg, "train", order + n_val, n_train);
    if (n_val > 0) val_shards = write_split(&c, &cfg, "val", order, n_val);
    for (int k = 0; k < 3; k++) signal(sigs[k], SIG_IGN);  // the switch is quick; let it finish
    if (interrupted) fail("interrupted (signal %d): %s is as it was", (int)interrupted, cfg.out_dir);
    switch_in(cfg.out_dir);
    double t_total = now_seconds() - t0;

    // summary
    if (n_inputs > 0) {
        double t = t_read > 0 ? t_read : 1e-9;
        printf("prepare: read %d file%s in %.2f s: %.1f MB on disk (%.1f MB/s), %.1f MB uncompressed (%.1f MB/s)\n",
               n_inputs, n_inputs == 1 ? "" : "s", t_read, compressed_bytes / 1e6, compressed_bytes / 1e6 / t,
               bytes_read_total / 1e6, bytes_read_total / 1e6 / t);
    } else {
        printf("prepare: generated the built-in corpus (seed %llu) in %.2f s\n", (unsigned long long)cfg.seed, t_read);
    }
    printf("prepare: %lld documents: %lld train (%.1f MB, %lld shard%s), %lld val (%.1f MB, %lld shard%s)\n",
           (long long)c.n_docs, (long long)n_train, (c.n_bytes - val_bytes) / 1e6, (long long)train_shards,
           train_shards == 1 ? "" : "s", (long long)n_val, val_bytes / 1e6, (long long)val_shards,
           val_shards == 1 ? "" : "s");
    int64_t total_skipped = 0;
    for (int k = 0; k < N_SKIP; k++) total_skipped += skipped[k];
    printf("prepare: skipped %lld line%s", (long long)total_skipped, total_skipped == 1 ? "" : "s");
    for (int k = 0, first = 1; k < N_SKIP; k++)
        if (skipped[k]) { printf("%s%lld %s", first ? ": " : ", ", (long long)skipped[k], skip_names[k]); first = 0; }
    printf("\nprepare: wrote %s/train_*.bin%s in %.2f s total\n", cfg.out_dir,
           n_val > 0 ? ", val_*.bin and *_labels.tsv" : " and train_labels.tsv", t_total);
    free(order); free(inputs);
    free(c.bytes); free(c.docs); free(c.labels);
    return 0;
}
