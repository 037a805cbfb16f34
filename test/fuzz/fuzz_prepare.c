// tools/prepare.c's readers: plain text, JSON lines and CSV, each plain or gzip (zlib
// reads both). Every document they accept must be framed ("\n " + text + " ", no
// newline inside), back to back in the arena, with a label free of tabs and newlines.
// With FUZZ_LABELS (fuzz_labels.c) the documents then go through write_split, and the
// shards and train_labels.tsv it writes are read back and checked against
// doc/formats.md ("Labels side file") and the documents.
//
// Input: u8 mode, u8 fields, [FUZZ_LABELS: u8 shard bytes], then the file. mode bits
// 0-1: text, jsonl, csv, csv; bit 2: gzip the file; bit 3: --strict; bit 4:
// --text-field given, bit 5: --label-field given, named by fields' low and high nibble.
#define FUZZ_SETUP() mkdir(fuzz_path("out"), 0777)  // where write_split writes (FUZZ_LABELS)
#include "fuzz.h"
#define main prepare_main
#include "tools/prepare.c"
#undef main

static const char *const field_names[16] = {"reviewText", "text", "sentence", "review", "overall", "label", "stars",
                                            "rating", "sentiment", "", "a", "b", "x,y", "\"", "summary", "reviewText "};

typedef struct {
    const char *path;
    int format, text_given, label_given;
    Settings cfg;
    Corpus c;
    int64_t *order, n_shards;
} Ctx;

static void read_input(void *arg) {
    Ctx *x = (Ctx *)arg;
    LineReader r;  // on a fail() part way, fuzz.h releases the reader's buffers and its inflater
    reader_open(&r, x->path);
    if (x->format == 0) read_text(&x->c, &x->cfg, &r);
    else if (x->format == 1) read_jsonl(&x->c, &x->cfg, &r);
    else read_csv(&x->c, &x->cfg, &r, x->text_given, x->label_given);
    reader_close(&r);
}

#ifdef FUZZ_LABELS
static void write_train(void *arg) {
    Ctx *x = (Ctx *)arg;
    // as prepare's main does: write into a temporary directory beside out, then switch it in
    out_dir_resolve(x->cfg.out_dir);
    if (mkdir(out_dir.tmp, 0777) != 0) fail("cannot create %s", out_dir.tmp);
    staging_made = 1;
    x->n_shards = write_split(&x->c, &x->cfg, "train", x->order, x->c.n_docs);
    switch_in(x->cfg.out_dir);
}

typedef struct { Stream s; const char *dir; } Reopen;
static void reopen(void *arg) { Reopen *r = (Reopen *)arg; stream_open_dir(&r->s, r->dir, "train", 1); }

// Reads DIR/train_labels.tsv and the train shards back; the documents in the stream
// are the corpus's in x->order.
static void check_output(Ctx *x) {
    Reopen r;
    memset(&r, 0, sizeof r);
    r.dir = x->cfg.out_dir;
    FUZZ_CHECK(fuzz_call(reopen, &r), "the shards prepare wrote do not open");
    FUZZ_CHECK(r.s.framed && r.s.n_shards == x->n_shards, "%d shards, framed %d", r.s.n_shards, r.s.framed);
    FILE *f = fopen(fuzz_path("out/train_labels.tsv"), "rb");
    FUZZ_CHECK(f, "no train_labels.tsv");
    char *line = NULL;
    size_t cap = 0;
    ssize_t len = getline(&line, &cap, f);  // getline's buffer is libc's: freed with (free)
    FUZZ_CHECK(len == 20 && !strcmp(line, "offset\tlength\tlabel\n"), "header line %s", line);
    int64_t expect_off = 0, k = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        FUZZ_CHECK(k < x->c.n_docs, "more lines than documents");
        FUZZ_CHECK(line[len - 1] == '\n' && (size_t)len == strlen(line), "line %lld is not one text line", (long long)k + 2);
        line[len - 1] = 0;
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        FUZZ_CHECK(t2 && !strchr(t2 + 1, '\t'), "line %lld has not 3 fields", (long long)k + 2);
        char *e1, *e2;
        long long off = strtoll(line, &e1, 10), n = strtoll(t1 + 1, &e2, 10);
        FUZZ_CHECK(e1 == t1 && e2 == t2 && off == expect_off && n >= 4, "line %lld: offset %lld length %lld", (long long)k + 2, off, n);
        const Doc *d = &x->c.docs[x->order[k]];
        FUZZ_CHECK(n == d->length && off + n <= r.s.size, "length %lld of %lld", n, (long long)d->length);
        uint8_t *doc = (uint8_t *)malloc((size_t)n);
        stream_read(&r.s, off, n, doc);
        FUZZ_CHECK(!memcmp(doc, x->c.bytes + d->offset, (size_t)n), "document %lld differs in the stream", (long long)k);
        free(doc);
        const char *want = d->label >= 0 ? x->c.labels + d->label : "-";
        FUZZ_CHECK(!strcmp(t2 + 1, want), "label \"%s\", want \"%s\"", t2 + 1, want);
        expect_off = off + n;
        k++;
    }
    FUZZ_CHECK(k == x->c.n_docs && expect_off == r.s.size, "%lld lines for %lld documents; %lld of %lld bytes",
               (long long)k, (long long)x->c.n_docs, (long long)expect_off, (long long)r.s.size);
    (free)(line);
    fclose(f);
    stream_free(&r.s);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    unsigned mode = fuzz_u8(&in), fields = fuzz_u8(&in);
    Ctx x;
    memset(&x, 0, sizeof x);
    x.format = (int)(mode & 3) > 2 ? 2 : (int)(mode & 3);
    x.text_given = (mode >> 4) & 1;
    x.label_given = (mode >> 5) & 1;
    x.cfg.strict = (mode >> 3) & 1;
    x.cfg.text_field = x.text_given ? field_names[fields & 15] : "reviewText";
    x.cfg.label_field = x.label_given ? field_names[fields >> 4] : "overall";
    x.cfg.out_dir = fuzz_path("out");
#ifdef FUZZ_LABELS
    x.cfg.shard_bytes = 16 * (1 + fuzz_u8(&in));  // small shards, so documents fall into several
#endif
    static const char *const names[2][3] = {{"in.txt", "in.jsonl", "in.csv"}, {"in.txt.gz", "in.jsonl.gz", "in.csv.gz"}};
    x.path = fuzz_path(names[(mode >> 2) & 1][x.format]);  // gzip files by other names: fuzz_write_file skips unchanged files
    fuzz_begin();
    if (mode & 4) {
        gzFile g = gzopen(x.path, "wb");
        FUZZ_CHECK(g && (in.n == 0 || gzwrite(g, in.p, (unsigned)in.n) == (int)in.n) && gzclose(g) == Z_OK, "gzip %s", x.path);
    } else {
        fuzz_write_file(x.path, in.p, in.n);
    }
    int ok = fuzz_call(read_input, &x);
    if (ok) {
        const Corpus *c = &x.c;
        int64_t expect = 0;
        for (int64_t i = 0; i < c->n_docs; i++) {
            const Doc *d = &c->docs[i];
            const uint8_t *p = c->bytes + d->offset;
            FUZZ_CHECK(d->offset == expect && d->length >= 4, "document %lld at %lld, length %lld", (long long)i,
                       (long long)d->offset, (long long)d->length);
            FUZZ_CHECK(p[0] == '\n' && p[1] == ' ' && p[d->length - 1] == ' ' && !memchr(p + 1, '\n', (size_t)d->length - 1) &&
                       !memchr(p, '\r', (size_t)d->length), "document %lld is not framed", (long long)i);
            if (d->label >= 0) {
                const char *l = c->labels + d->label;
                FUZZ_CHECK(d->label < c->n_labels && !strpbrk(l, "\t\n\r"), "label of document %lld", (long long)i);
            }
            expect += d->length;
        }
        FUZZ_CHECK(expect == c->n_bytes, "the arena holds %lld bytes, the documents %lld", (long long)c->n_bytes, (long long)expect);
#ifdef FUZZ_LABELS
        if (c->n_docs > 0) {
            x.order = (int64_t *)malloc(sizeof(int64_t) * (size_t)c->n_docs);
            for (int64_t i = 0; i < c->n_docs; i++) x.order[i] = c->n_docs - 1 - i;  // not reading order
            FUZZ_CHECK(fuzz_call(write_train, &x), "write_split failed");
            check_output(&x);
            free(x.order);
        }
#endif
        free(x.c.bytes); free(x.c.docs); free(x.c.labels);
    }
    fuzz_end(ok);
    return 0;
}
