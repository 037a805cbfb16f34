// tools/transfer.c's labelled-document readers: CSV and JSON lines (read_input with
// --format csv or jsonl). Every document accepted must be framed ("\n " + trimmed
// text + " ", no newline inside) with label 0 or 1, back to back in the arena.
//
// Input: u8 mode, u8 fields, u8 threshold, then the file. mode bit 0: jsonl, else
// csv; bit 1: --text-field, bit 2: --label-field, named by fields' low and high
// nibble; bit 3: --threshold (the threshold byte / 2, so 2.5 is reachable).
#include "fuzz.h"
#define main transfer_main
#include "tools/transfer.c"
#undef main

static const char *const field_names[16] = {"reviewText", "text", "sentence", "review", "overall", "label", "stars",
                                            "rating", "sentiment", "", "a", "b", "x,y", "\"", "summary", "text "};

typedef struct { const char *path; InputOptions o; Docs d; } Ctx;
static void run(void *arg) { Ctx *x = (Ctx *)arg; read_input(&x->d, x->path, &x->o); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    unsigned mode = fuzz_u8(&in), fields = fuzz_u8(&in), thr = fuzz_u8(&in);
    Ctx x;
    memset(&x, 0, sizeof x);
    x.o.format = mode & 1 ? "jsonl" : "csv";
    if (mode & 2) x.o.text_field = field_names[fields & 15];
    if (mode & 4) x.o.label_field = field_names[fields >> 4];
    if (mode & 8) { x.o.has_threshold = 1; x.o.threshold = thr / 2.0; }
    x.path = fuzz_path(mode & 1 ? "in.jsonl" : "in.csv");
    fuzz_begin();
    fuzz_write_file(x.path, in.p, in.n);
    int ok = fuzz_call(run, &x);
    if (ok) {
        const Docs *d = &x.d;
        size_t expect = 0;
        FUZZ_CHECK(d->n >= 1, "read_input returned no documents");
        for (int i = 0; i < d->n; i++) {
            const char *p = d->text + d->off[i];
            size_t n = d->len[i];
            FUZZ_CHECK(d->off[i] == expect && n >= 4 && (d->label[i] == 0 || d->label[i] == 1), "document %d: offset %zu length %zu label %d",
                       i, d->off[i], n, d->label[i]);
            FUZZ_CHECK(p[0] == '\n' && p[1] == ' ' && p[n - 1] == ' ' && !memchr(p + 1, '\n', n - 1) && !memchr(p, '\r', n) &&
                       p[2] != ' ' && p[2] != '\t' && p[n - 2] != ' ' && p[n - 2] != '\t', "document %d is not framed and trimmed", i);
            expect += n;
        }
        FUZZ_CHECK(expect == d->n_text, "the arena holds %zu bytes, the documents %zu", d->n_text, expect);
        free(x.d.text); free(x.d.off); free(x.d.len); free(x.d.label);
    }
    fuzz_end(ok);
    return 0;
}
