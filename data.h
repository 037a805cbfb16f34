// data.h: the training data. Three parts, shared by train.c, train.cu and tools/:
//   1. shards: a 32-byte versioned header and raw bytes, read through mmap
//      (doc/formats.md, "Shard format", is the spec a port implements from);
//   2. streams and the global-batch loader (doc/design.md, "Data and batching"): shards concatenate
//      into one logical byte stream; the G = world*B rows of the global batch each own
//      one of G equal contiguous slices of it;
//   3. the built-in corpus: seeded review-like English with a 1-5 star rating that the
//      text's sentiment agrees with, so the trainers run on a fresh machine with no
//      download and the transfer evaluation has labelled documents offline.
// Documents are framed as in the reference recipe (sentiment-discovery, Radford et al.
// 2017): "\n " before the text, " " after, and no newline inside, so a '\n' byte marks
// exactly the start of a document.
#pragma once
#include "util.h"  // defines: fail, mallocCheck, checksum_*, put32/get32, AtomicFile
#include <sys/mman.h>
#include <signal.h>

// ----------------------------------------------------------------------------
// Shard format, little-endian:
//   offset  0  char[8]  magic "MLSTMSHD"
//   offset  8  u32      version (SHARD_VERSION)
//   offset 12  u32      flags (bit 0: SHARD_FRAMED, the payload is framed documents)
//   offset 16  u64      payload length in bytes
//   offset 24  u64      payload checksum: checksum_final(checksum_update(CHECKSUM_INIT, payload, n))
//   offset 32  payload  raw bytes; the file ends exactly there

#define SHARD_MAGIC "MLSTMSHD"
#define SHARD_VERSION 1
#define SHARD_HEADER_BYTES 32
#define SHARD_FRAMED 1u

typedef struct {
    char path[4096];      // for error messages ("<memory>" for an in-memory stream)
    const uint8_t *data;  // (size,) the payload
    int64_t size;
    uint32_t flags;
    void *map;            // the whole file's mapping, or NULL
    size_t map_bytes;
    uint8_t *owned;       // malloc'd payload this shard frees, or NULL
} Shard;

// Writes a shard in pieces without holding it in memory: the header goes in last
// (payload length and checksum are known only at the end), then the file is committed
// atomically, so a shard appears whole or not at all.
#define SHARD_WRITE_BUFFER (1 << 20)  // a multiple of 8, as checksum_update's chunks must be
typedef struct {
    AtomicFile af;
    uint32_t flags;
    uint64_t size, hash;
    uint8_t *buf;  // (SHARD_WRITE_BUFFER,)
    size_t fill;
} ShardWriter;

static inline void shard_writer_open(ShardWriter *w, const char *path, uint32_t flags) {
    uint8_t zeros[SHARD_HEADER_BYTES] = {0};
    atomic_open(&w->af, path);
    atomic_write(&w->af, zeros, sizeof zeros);  // placeholder, rewritten at close
    w->flags = flags;
    w->size = 0;
    w->hash = CHECKSUM_INIT;
    w->buf = (uint8_t *)mallocCheck(SHARD_WRITE_BUFFER);
    w->fill = 0;
}

static inline void shard_writer_append(ShardWriter *w, const void *data, size_t n) {
    const uint8_t *p = (const uint8_t *)data;
    while (n > 0) {
        size_t k = SHARD_WRITE_BUFFER - w->fill;
        if (k > n) k = n;
        memcpy(w->buf + w->fill, p, k);
        w->fill += k; w->size += k; p += k; n -= k;
        if (w->fill == SHARD_WRITE_BUFFER) {
            w->hash = checksum_update(w->hash, w->buf, w->fill);
            atomic_write(&w->af, w->buf, w->fill);
            w->fill = 0;
        }
    }
}

static inline void shard_header_pack(uint8_t *h /*(32,)*/, uint32_t flags, uint64_t size, uint64_t checksum) {
    uint32_t version = SHARD_VERSION;
    memcpy(h, SHARD_MAGIC, 8);
    memcpy(h + 8, &version, 4);  // the project assumes a little-endian host
    memcpy(h + 12, &flags, 4);
    memcpy(h + 16, &size, 8);
    memcpy(h + 24, &checksum, 8);
}

static inline void shard_writer_close(ShardWriter *w) {
    uint8_t header[SHARD_HEADER_BYTES];
    w->hash = checksum_update(w->hash, w->buf, w->fill);  // the last chunk may have any length
    atomic_write(&w->af, w->buf, w->fill);
    shard_header_pack(header, w->flags, w->size, checksum_final(w->hash));
    if (fseek(w->af.f, 0, SEEK_SET) != 0) {
        atomic_abort(&w->af);
        fail("cannot write %s: %s", w->af.path, strerror(errno));
    }
    atomic_write(&w->af, header, sizeof header);
    atomic_commit(&w->af);
    free(w->buf);
    w->buf = NULL;
}

static inline void shard_write(const char *path, const void *payload, size_t n, uint32_t flags) {
    ShardWriter w;
    shard_writer_open(&w, path, flags);
    shard_writer_append(&w, payload, n);
    shard_writer_close(&w);
}

// Opens and validates a shard; every problem is the user's to fix (exit 2, the message
// names the file). verify = 1 checksums the payload at open (about 5 GB/s on one core,
// plus reading the file); verify = 0 trusts it (the sparse >4 GB test, or a trainer
// restarting on shards it has already verified).
static inline void shard_open(Shard *sh, const char *path, int verify) {
    memset(sh, 0, sizeof *sh);
    snprintf(sh->path, sizeof sh->path, "%s", path);
    int fd = open(path, O_RDONLY | O_NONBLOCK);  // O_NONBLOCK: a FIFO must not hang the open; no effect on files
    if (fd < 0) fail("cannot open shard %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) fail("cannot stat shard %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("%s: not a regular file", path);
    int64_t file_bytes = (int64_t)st.st_size;
    if (file_bytes == 0) fail("%s: empty file (0 bytes), not a shard", path);
    uint8_t h[SHARD_HEADER_BYTES] = {0};
    ssize_t got = pread(fd, h, sizeof h, 0);
    if (got < 0) fail("cannot read shard %s: %s", path, strerror(errno));
    if (got < 8 || memcmp(h, SHARD_MAGIC, 8) != 0)
        fail("%s: not a shard (bad magic; expected \"%s\" in the first 8 bytes)", path, SHARD_MAGIC);
    if (got < SHARD_HEADER_BYTES)
        fail("%s: truncated header (%lld bytes, a shard header has %d)", path, (long long)got, SHARD_HEADER_BYTES);
    uint32_t version;
    uint64_t size, checksum;
    memcpy(&version, h + 8, 4);
    memcpy(&sh->flags, h + 12, 4);
    memcpy(&size, h + 16, 8);
    memcpy(&checksum, h + 24, 8);
    if (version > SHARD_VERSION)
        fail("%s: shard version %u is newer than this build reads (%d)\nHINT: update mlstm.c", path, version, SHARD_VERSION);
    if (version == 0) fail("%s: bad shard version 0", path);
    if (sh->flags & ~SHARD_FRAMED)
        fail("%s: unknown flag bits 0x%x in the header (version 1 defines bit 0 only; the others must be 0)", path, sh->flags & ~SHARD_FRAMED);
    if ((uint64_t)(file_bytes - SHARD_HEADER_BYTES) < size)
        fail("%s: truncated payload: the header says %llu bytes, the file holds %lld", path,
             (unsigned long long)size, (long long)(file_bytes - SHARD_HEADER_BYTES));
    if ((uint64_t)(file_bytes - SHARD_HEADER_BYTES) > size)
        fail("%s: %lld bytes after the payload of %llu bytes (not a shard, or damaged)", path,
             (long long)(file_bytes - SHARD_HEADER_BYTES - (int64_t)size), (unsigned long long)size);
    sh->size = (int64_t)size;
    sh->map_bytes = (size_t)file_bytes;
    sh->map = mmap(NULL, sh->map_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (sh->map == MAP_FAILED) fail("cannot mmap shard %s: %s", path, strerror(errno));
    close(fd);
    sh->data = (const uint8_t *)sh->map + SHARD_HEADER_BYTES;
    if (verify) {
        uint64_t actual = checksum_final(checksum_update(CHECKSUM_INIT, sh->data, (size_t)size));
        if (actual != checksum)
            fail("%s: checksum mismatch (header %016llx, payload %016llx): the file is damaged", path,
                 (unsigned long long)checksum, (unsigned long long)actual);
    }
}

static inline void shard_close(Shard *sh) {
    if (sh->map) munmap(sh->map, sh->map_bytes);
    free(sh->owned);
    memset(sh, 0, sizeof *sh);
}

// ----------------------------------------------------------------------------
// A stream: shards concatenated, addressed by 64-bit offsets.

typedef struct {
    int n_shards;
    Shard *shards;   // (n_shards,)
    int64_t *start;  // (n_shards + 1,) start[i] = offset of shard i in the stream; start[n] = size
    int64_t size;
    int framed;      // every shard holds framed documents: '\n' starts a document
} Stream;

static inline void stream_index_(Stream *s) {
    s->start = (int64_t *)mallocCheck((size_t)(s->n_shards + 1) * sizeof(int64_t));
    s->framed = s->n_shards > 0;
    for (int i = 0; i < s->n_shards; i++) {
        s->start[i + 1] = s->start[i] + s->shards[i].size;
        if (!(s->shards[i].flags & SHARD_FRAMED)) s->framed = 0;
    }
    s->size = s->start[s->n_shards];
}

// A shard is read through mmap, so if its file is truncated while a trainer runs, a
// read past the new end raises SIGBUS instead of returning an error. The handler turns
// that into a message naming the shard (exit 2). Open streams are registered for it.
#define STREAMS_WATCHED 8
static const Stream *volatile streams_watched[STREAMS_WATCHED];
static inline void shard_sigbus_(int sig, siginfo_t *si, void *ctx) {
    (void)sig; (void)ctx;
    const char *path = "a data shard", *msg = " was truncated or replaced while being read (SIGBUS)\n"
                                                 "HINT: do not rewrite shards (build/prepare -o the same DIR) while a trainer reads them\n";
    for (int k = 0; k < STREAMS_WATCHED; k++) {
        const Stream *s = streams_watched[k];
        for (int i = 0; s && i < s->n_shards; i++) {
            const char *m = (const char *)s->shards[i].map;
            if (m && (const char *)si->si_addr >= m && (const char *)si->si_addr < m + s->shards[i].map_bytes) path = s->shards[i].path;
        }
    }
    ssize_t ignored = write(2, "error: ", 7);
    ignored = write(2, fail_where, strlen(fail_where));
    ignored = write(2, path, strlen(path));
    ignored = write(2, msg, strlen(msg));
    (void)ignored;
    _exit(EXIT_BAD_INPUT);
}
static inline void stream_watch_(const Stream *s, const Stream *replace) {
    for (int k = 0; k < STREAMS_WATCHED; k++)
        if (streams_watched[k] == replace) { streams_watched[k] = s; break; }
    if (!s) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = shard_sigbus_;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGBUS, &sa, NULL);
}

static inline void stream_open(Stream *s, const char *const *paths, int n, int verify) {
    if (n < 1) fail("no shard files given");
    s->n_shards = n;
    s->shards = (Shard *)mallocCheck((size_t)n * sizeof(Shard));
    for (int i = 0; i < n; i++) shard_open(&s->shards[i], paths[i], verify);
    stream_index_(s);
    stream_watch_(s, NULL);
}

// Opens <dir>/<split>_000.bin, <split>_001.bin, ... up to the first missing number,
// the files tools/prepare writes.
static inline void stream_open_dir(Stream *s, const char *dir, const char *split, int verify) {
    char path[4096];
    int n = 0;
    for (;; n++) {
        snprintf(path, sizeof path, "%s/%s_%03d.bin", dir, split, n);
        if (access(path, F_OK) != 0) break;
    }
    if (n == 0) {
        snprintf(path, sizeof path, "%s/%s_000.bin", dir, split);
        fail("cannot open shard %s: %s\nHINT: make shards with build/prepare", path, strerror(errno));
    }
    char **paths = (char **)mallocCheck((size_t)n * sizeof(char *));
    for (int i = 0; i < n; i++) {
        paths[i] = (char *)mallocCheck(4096);
        snprintf(paths[i], 4096, "%s/%s_%03d.bin", dir, split, i);
    }
    stream_open(s, (const char *const *)paths, n, verify);
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

// A one-shard stream over a malloc'd buffer; the stream takes ownership of `data`.
static inline void stream_from_memory(Stream *s, uint8_t *data, int64_t n, int framed) {
    s->n_shards = 1;
    s->shards = (Shard *)mallocCheck(sizeof(Shard));
    snprintf(s->shards[0].path, sizeof s->shards[0].path, "<memory>");
    s->shards[0].data = data;
    s->shards[0].owned = data;
    s->shards[0].size = n;
    s->shards[0].flags = framed ? SHARD_FRAMED : 0;
    stream_index_(s);
}

static inline void stream_free(Stream *s) {
    stream_watch_(NULL, s);
    for (int i = 0; i < s->n_shards; i++) shard_close(&s->shards[i]);
    free(s->shards);
    free(s->start);
    memset(s, 0, sizeof *s);
}

// The shard that holds stream offset `off` (0 <= off < size): the last i with
// start[i] <= off, which skips empty shards.
static inline int stream_shard_at(const Stream *s, int64_t off) {
    int lo = 0, hi = s->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->start[mid] <= off) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// Copies n bytes at stream offset off into dst, across shard boundaries.
static inline void stream_read(const Stream *s, int64_t off, int64_t n, uint8_t *dst) {
    if (off < 0 || n < 0 || off + n > s->size) {
        fprintf(stderr, "error: stream_read(%lld, %lld) outside a stream of %lld bytes\n",
                (long long)off, (long long)n, (long long)s->size);
        exit(1);  // a bug, not bad input
    }
    int i = n > 0 ? stream_shard_at(s, off) : 0;
    while (n > 0) {
        int64_t in_shard = off - s->start[i];
        int64_t k = s->shards[i].size - in_shard;
        if (k > n) k = n;
        memcpy(dst, s->shards[i].data + in_shard, (size_t)k);
        dst += k; off += k; n -= k; i++;
    }
}

// ----------------------------------------------------------------------------
// The global-batch loader (doc/design.md, "Data and batching").
//
// G = world*B rows. slice = (N - 1) / G bytes (integer division) for a stream of N
// bytes; row g owns stream bytes [g*slice, (g+1)*slice) as inputs. Step s gives row g
// the T+1 bytes at g*slice + s*T: inputs are the first T, targets the last T (the
// next byte). steps_per_epoch = slice / T, so a row's last target may be the first
// byte of the next slice (one byte of look-ahead; hence N - 1 above). Rank r fills
// rows [r*B, (r+1)*B): 2 ranks of B rows read exactly what 1 rank of 2B rows reads.
//
// Remainder, never an input in any epoch: the last slice % T bytes of each slice and
// the last N - G*slice bytes of the stream (at least the final byte, which is only
// ever a target). When N - 1 is a multiple of G*T every byte but the last is an input
// exactly once per epoch. Epoch e repeats epoch 0 byte for byte (no reshuffling; the
// documents were shuffled once by tools/prepare).
//
// reset[b*T + t] = 1 says: zero the carried (h, c) before input t of row b. It is set
//   - at t = 0 of the first step of each epoch (a row jumps back to its slice start);
//   - where input t is the first byte of a shard (shards are unrelated text);
//   - if reset_docs (default: on when every shard is framed), where input t is '\n',
//     the first byte of a framed document, so each review is read from a zero state,
//     as the transfer evaluation reads it.

typedef struct {
    const Stream *stream;
    int world, rank, B, T;
    int64_t slice;          // bytes per row per epoch
    long steps_per_epoch;
    int reset_docs;         // reset the state at document starts; the trainer may clear it
} Loader;

static inline void loader_init(Loader *l, const Stream *s, int world, int rank, int B, int T) {
    if (world < 1 || rank < 0 || rank >= world) fail("bad rank %d of world %d", rank, world);
    if (B < 1) fail("--batch must be at least 1 (got %d)", B);
    if (T < 1) fail("--seq-len must be at least 1 (got %d)", T);
    int64_t G = (int64_t)world * B;
    l->stream = s;
    l->world = world; l->rank = rank; l->B = B; l->T = T;
    l->slice = s->size > 0 ? (s->size - 1) / G : 0;
    if (l->slice < T)
        fail("the data has %lld bytes, too few for %lld rows of %d+1 bytes (need at least %lld)\n"
             "HINT: use a smaller --batch or --seq-len, or more data",
             (long long)s->size, (long long)G, T, (long long)(G * T + 1));
    l->steps_per_epoch = (long)(l->slice / T);
    l->reset_docs = s->framed;
}

static inline long loader_steps_per_epoch(const Loader *l) { return l->steps_per_epoch; }

// step: the global data step (it counts every batch read, and is the loader's whole
// position in a checkpoint).
static inline void loader_batch(const Loader *l, long step, uint8_t *inputs /*(B,T)*/,
                         uint8_t *targets /*(B,T)*/, uint8_t *reset /*(B,T) or NULL*/) {
    const Stream *s = l->stream;
    int B = l->B, T = l->T;
    long pos = step % l->steps_per_epoch;
    for (int b = 0; b < B; b++) {
        int64_t g = (int64_t)l->rank * B + b;
        int64_t off = g * l->slice + (int64_t)pos * T;
        stream_read(s, off, T, inputs + (size_t)b * T);
        stream_read(s, off + 1, T, targets + (size_t)b * T);
        if (!reset) continue;
        uint8_t *r = reset + (size_t)b * T;
        memset(r, 0, (size_t)T);
        if (pos == 0) r[0] = 1;
        for (int i = stream_shard_at(s, off); i < s->n_shards && s->start[i] < off + T; i++)
            if (s->start[i] >= off) r[s->start[i] - off] = 1;
        if (l->reset_docs) {
            const uint8_t *in = inputs + (size_t)b * T;
            for (int t = 0; t < T; t++) r[t] |= (in[t] == '\n');
        }
    }
}

// ----------------------------------------------------------------------------
// The built-in corpus: review-like English. Each document draws a star rating
// (skewed to 5 like the Amazon reviews), a product category, product, brand, and a
// title, then sentences whose valence (-2..+2) is drawn from a distribution that
// depends on the rating; valence is realised directly ("sturdy"), by negation ("not
// flimsy at all") or by a verb phrase ("broke after 3 weeks"), with intensifiers.
// Random brand names and numbers keep a small model learning for a long time.

#define CORPUS_DOC_MAX 4096  // a document's text is always shorter than this

typedef struct { const char *name; const char *const *products, *const *aspects; int n_products, n_aspects; } CorpusCategory;
#define CORPUS_N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const corpus_kitchen_p[] = {"blender", "coffee maker", "toaster", "kettle", "air fryer", "knife set", "frying pan", "rice cooker", "stand mixer", "food processor", "waffle iron", "spice grinder"};
static const char *const corpus_kitchen_a[] = {"motor", "lid", "blades", "handle", "cord", "buttons", "carafe", "nonstick coating", "timer", "cleanup", "temperature control", "design"};
static const char *const corpus_elec_p[] = {"headphones", "bluetooth speaker", "phone charger", "keyboard", "wireless mouse", "monitor", "tablet", "webcam", "power bank", "router", "smart watch", "earbuds"};
static const char *const corpus_elec_a[] = {"battery life", "sound quality", "screen", "cable", "buttons", "range", "bass", "microphone", "setup", "app", "charging speed", "build quality"};
static const char *const corpus_book_p[] = {"novel", "cookbook", "biography", "thriller", "travel guide", "textbook", "memoir", "short story collection", "fantasy series", "history book", "mystery", "poetry collection"};
static const char *const corpus_book_a[] = {"plot", "characters", "writing", "ending", "pacing", "dialogue", "recipes", "photos", "research", "binding", "first chapter", "narrator"};
static const char *const corpus_out_p[] = {"tent", "backpack", "water bottle", "sleeping bag", "pair of hiking boots", "camping stove", "flashlight", "cooler", "hammock", "rain jacket", "trekking pole", "headlamp"};
static const char *const corpus_out_a[] = {"zipper", "straps", "seams", "weight", "fabric", "insulation", "sole", "lid", "stitching", "pockets", "hood", "waterproofing"};
static const char *const corpus_toy_p[] = {"puzzle", "board game", "doll", "building set", "toy car", "drone", "kite", "card game", "stuffed bear", "train set", "science kit", "play tent"};
static const char *const corpus_toy_a[] = {"pieces", "instructions", "box", "colors", "rules", "paint", "wheels", "remote", "size", "packaging", "replay value", "batteries"};
static const char *const corpus_beauty_p[] = {"shampoo", "face cream", "hair dryer", "razor", "perfume", "lipstick", "sunscreen", "electric toothbrush", "nail polish", "conditioner", "body lotion", "curling iron"};
static const char *const corpus_beauty_a[] = {"scent", "texture", "bottle", "pump", "color", "formula", "brush head", "heat settings", "packaging", "staying power", "ingredients", "price"};
static const char *const corpus_home_p[] = {"vacuum", "desk lamp", "pillow", "shower curtain", "office chair", "bookshelf", "rug", "set of curtains", "mattress", "tower fan", "space heater", "laundry basket"};
static const char *const corpus_home_a[] = {"suction", "filter", "assembly", "cushion", "wheels", "finish", "noise level", "remote", "brightness", "fabric", "instructions", "frame"};
static const char *const corpus_media_p[] = {"album", "movie", "documentary", "box set", "soundtrack", "concert film", "first season", "vinyl record", "audiobook", "anime series"};
static const char *const corpus_media_a[] = {"songs", "acting", "story", "sound quality", "extras", "lyrics", "cinematography", "running time", "soundtrack", "subtitles"};
static const char *const corpus_tool_p[] = {"cordless drill", "screwdriver set", "tape measure", "ladder", "circular saw", "wrench set", "glue gun", "toolbox", "socket set", "stud finder"};
static const char *const corpus_tool_a[] = {"chuck", "battery", "grip", "case", "blade", "torque", "latch", "trigger", "accuracy", "storage"};
static const char *const corpus_pet_p[] = {"dog bed", "cat toy", "leash", "litter box", "bag of dog food", "bird feeder", "aquarium filter", "pet brush", "scratching post", "cat carrier"};
static const char *const corpus_pet_a[] = {"smell", "size", "material", "clasp", "ingredients", "bristles", "base", "door", "cushion", "price"};

#define CORPUS_CAT(name, p, a) {name, p, a, CORPUS_N(p), CORPUS_N(a)}
static const CorpusCategory corpus_categories[] = {
    CORPUS_CAT("kitchen", corpus_kitchen_p, corpus_kitchen_a), CORPUS_CAT("electronics", corpus_elec_p, corpus_elec_a),
    CORPUS_CAT("books", corpus_book_p, corpus_book_a), CORPUS_CAT("outdoors", corpus_out_p, corpus_out_a),
    CORPUS_CAT("toys", corpus_toy_p, corpus_toy_a), CORPUS_CAT("beauty", corpus_beauty_p, corpus_beauty_a),
    CORPUS_CAT("home", corpus_home_p, corpus_home_a), CORPUS_CAT("media", corpus_media_p, corpus_media_a),
    CORPUS_CAT("tools", corpus_tool_p, corpus_tool_a), CORPUS_CAT("pets", corpus_pet_p, corpus_pet_a),
};

// adjectives by valence: strong positive, mild positive, mild negative, strong negative
static const char *const corpus_adj_pos2[] = {"excellent", "amazing", "fantastic", "perfect", "outstanding", "superb", "wonderful", "brilliant", "flawless", "incredible", "top notch", "beautiful"};
static const char *const corpus_adj_pos1[] = {"good", "nice", "solid", "decent", "sturdy", "reliable", "comfortable", "useful", "pleasant", "well made", "easy to use", "better than expected", "fine"};
static const char *const corpus_adj_neg1[] = {"flimsy", "cheap", "weak", "disappointing", "noisy", "awkward", "mediocre", "slow", "uncomfortable", "confusing", "loose", "fragile"};
static const char *const corpus_adj_neg2[] = {"terrible", "awful", "horrible", "useless", "defective", "pathetic", "dreadful", "a complete joke", "garbage", "dangerous", "broken", "worthless"};
static const char *const corpus_int_strong[] = {"absolutely ", "truly ", "simply ", "just ", "totally ", ""};
static const char *const corpus_int_mild[] = {"very ", "really ", "quite ", "pretty ", "super ", "incredibly ", "extremely ", "so ", "fairly ", "", "", ""};
static const char *const corpus_people[] = {"wife", "husband", "son", "daughter", "roommate", "mom", "dad", "best friend", "neighbor", "little brother", "grandmother", "coworker"};
static const char *const corpus_units[] = {"days", "weeks", "months", "uses", "washes", "trips"};
static const char *const corpus_numbers[] = {"two", "three", "four", "five", "six", "2", "3", "4", "5", "6", "7", "10", "12"};
static const char *const corpus_syllables[] = {"zor", "ka", "ven", "tri", "lo", "mex", "ar", "qui", "bel", "on", "sta", "rix", "na", "pol", "dur", "fi", "gen", "tek", "mo", "sun", "ex", "vi", "cor", "la"};

typedef struct { char *p; size_t n, cap; } CorpusText;

static inline void corpus_cat(CorpusText *d, const char *s) {
    for (; *s && d->n + 1 < d->cap; s++) d->p[d->n++] = *s;
    d->p[d->n] = 0;
}
static const char *corpus_pick_(uint64_t *rng, const char *const *a, int n) { return a[rng_next(rng) % (uint64_t)n]; }
#define corpus_pick(rng, a) corpus_pick_((rng), (a), CORPUS_N(a))
static inline int corpus_chance(uint64_t *rng, double p) { return rng_uniform(rng) < p; }

// A template: "%A" aspect, "%V" is/are to agree with it, "%P" product, "%B" brand,
// "%J" adjective phrase of the sentence's valence, "%N %U" a duration, "%R" a person. The first letter of each
// sentence is capitalised.
typedef struct { const char *aspect, *product, *brand; int valence; } CorpusSlots;

static inline void corpus_adjective(CorpusText *d, uint64_t *rng, int valence) {
    // valence is realised directly or, a third of the time for mild valence, by negating
    // the opposite ("not flimsy at all" is mildly positive, "not very good" mildly negative)
    int negate = (valence == 1 || valence == -1) && corpus_chance(rng, 0.33);
    if (negate && valence > 0) { corpus_cat(d, "not "); corpus_cat(d, corpus_pick(rng, corpus_adj_neg1)); if (corpus_chance(rng, 0.5)) corpus_cat(d, " at all"); return; }
    if (negate) { corpus_cat(d, "not "); corpus_cat(d, corpus_chance(rng, 0.5) ? "very " : "that "); corpus_cat(d, corpus_pick(rng, corpus_adj_pos1)); return; }
    if (valence == 2) { corpus_cat(d, corpus_pick(rng, corpus_int_strong)); corpus_cat(d, corpus_pick(rng, corpus_adj_pos2)); }
    else if (valence == 1) { corpus_cat(d, corpus_pick(rng, corpus_int_mild)); corpus_cat(d, corpus_pick(rng, corpus_adj_pos1)); }
    else if (valence == -1) { corpus_cat(d, corpus_pick(rng, corpus_int_mild)); corpus_cat(d, corpus_pick(rng, corpus_adj_neg1)); }
    else { corpus_cat(d, corpus_pick(rng, corpus_int_strong)); corpus_cat(d, corpus_pick(rng, corpus_adj_neg2)); }
}

static inline void corpus_fill(CorpusText *d, uint64_t *rng, const char *tpl, const CorpusSlots *s, int capitalize) {
    size_t sentence_start = d->n;
    for (const char *c = tpl; *c; c++) {
        if (*c != '%') { char one[2] = {*c, 0}; corpus_cat(d, one); continue; }
        switch (*++c) {
            case 'A': corpus_cat(d, s->aspect); break;
            case 'P': corpus_cat(d, s->product); break;
            case 'B': corpus_cat(d, s->brand); break;
            case 'J': corpus_adjective(d, rng, s->valence); break;
            case 'N': corpus_cat(d, corpus_pick(rng, corpus_numbers)); break;
            case 'U': corpus_cat(d, corpus_pick(rng, corpus_units)); break;
            case 'R': corpus_cat(d, corpus_pick(rng, corpus_people)); break;
            case 'V': {  // is/are: "the blades are", "the bass is"
                size_t n = strlen(s->aspect);
                corpus_cat(d, s->aspect[n - 1] == 's' && s->aspect[n - 2] != 's' ? "are" : "is");
                break;
            }
            default: break;
        }
    }
    if (capitalize && d->n > sentence_start && d->p[sentence_start] >= 'a' && d->p[sentence_start] <= 'z') d->p[sentence_start] -= 32;
}

static const char *const corpus_tpl_adj[] = {
    "the %A %V %J. ", "the %A %V %J, if you ask me. ", "honestly, the %A %V %J. ", "I found the %A %J. ",
    "the %A turned out to be %J. ", "for the price, the %A %V %J. ", "my %R thinks the %A %V %J. ",
    "overall the %A %V %J. ", "as for the %A: %J. ", "the %A on this %P %V %J. "};
static const char *const corpus_tpl_pos2[] = {
    "I absolutely love the %A! ", "the %A worked like a charm. ", "the %A exceeded my expectations. ",
    "this %P is worth every penny. ", "%B really got the %A right. ", "my %R loves it too! "};
static const char *const corpus_tpl_pos1[] = {
    "the %A did the job. ", "no complaints about the %A so far. ", "the %A held up after %N %U. ",
    "it works as described. ", "the %A %V what I expected from %B. "};
static const char *const corpus_tpl_neg1[] = {
    "the %A could be better. ", "I wish the %A were better. ", "the %A started to wear after %N %U. ",
    "it does not quite work as described. ", "I expected more from %B. "};
static const char *const corpus_tpl_neg2[] = {
    "the %A stopped working after %N %U. ", "the %A broke the first time I used it. ",
    "I regret buying this %P. ", "%B clearly does not care about the %A. ", "I hate the %A. ",
    "customer service from %B never answered. "};
static const char *const corpus_tpl_open[] = {
    "I bought this %P %N %U ago. ", "I got this %P as a gift for my %R. ",
    "we have been using this %P for %N %U now. ", "this is my second %P from %B. ",
    "I ordered the %B %P after reading the reviews. ", "my %R recommended this %P. ",
    "I needed a new %P and picked this one. "};
static const char *const corpus_title_pos[] = {"Five stars", "Love it!", "Best %P ever", "Great %P", "Highly recommend", "Exactly what I needed", "Wonderful", "Worth it"};
static const char *const corpus_title_mid[] = {"It's okay", "Mixed feelings", "Not bad, not great", "Average %P", "Does the job, mostly", "Three stars"};
static const char *const corpus_title_neg[] = {"One star", "Junk", "Do not buy", "Broke after %N %U", "Waste of money", "Very disappointed", "Returned it"};
static const char *const corpus_close_pos[] = {"I would definitely recommend it.", "Would buy again.", "Highly recommended!", "Five stars from me.", "Great value for the money."};
static const char *const corpus_close_mid[] = {"It is fine for the price.", "Maybe wait for a sale.", "It is okay, I guess.", "Three stars.", "Not sure I would buy it again."};
static const char *const corpus_close_neg[] = {"I would not recommend it.", "Save your money.", "I am returning it.", "Avoid this one.", "One star is too many."};

// Writes one document's text (no framing, no newline) into text (cap >= CORPUS_DOC_MAX),
// sets *len, and returns its star rating 1..5.
static inline int corpus_document(uint64_t *rng, char *text, size_t cap, size_t *len) {
    // P(stars) roughly as in the Amazon reviews: many 5s, some 1s, few in between
    static const double star_cdf[5] = {0.12, 0.20, 0.30, 0.52, 1.0};
    // P(sentence valence -2, -1, +1, +2 | stars): the text's sentiment agrees with the rating
    static const double valence_p[5][4] = {
        {0.60, 0.35, 0.05, 0.00}, {0.20, 0.60, 0.20, 0.00}, {0.05, 0.45, 0.45, 0.05},
        {0.00, 0.20, 0.60, 0.20}, {0.00, 0.05, 0.35, 0.60}};
    static const int valence_of[4] = {-2, -1, 1, 2};
    double u = rng_uniform(rng);
    int stars = 1;
    while (stars < 5 && u >= star_cdf[stars - 1]) stars++;
    const CorpusCategory *cat = &corpus_categories[rng_next(rng) % (uint64_t)CORPUS_N(corpus_categories)];
    char brand[32];
    int nsyl = 2 + (int)(rng_next(rng) % 2);
    brand[0] = 0;
    for (int i = 0; i < nsyl; i++) strcat(brand, corpus_pick(rng, corpus_syllables));
    brand[0] = (char)(brand[0] - 32);
    CorpusSlots slots;
    slots.product = cat->products[rng_next(rng) % (uint64_t)cat->n_products];
    slots.brand = brand;
    slots.aspect = cat->aspects[0];
    slots.valence = stars >= 4 ? 1 : -1;
    CorpusText d;
    d.p = text; d.n = 0; d.cap = cap < CORPUS_DOC_MAX ? cap : CORPUS_DOC_MAX;
    d.p[0] = 0;
    // title, as its own sentence
    const char *title = stars >= 4 ? corpus_pick(rng, corpus_title_pos) : stars == 3 ? corpus_pick(rng, corpus_title_mid) : corpus_pick(rng, corpus_title_neg);
    corpus_fill(&d, rng, title, &slots, 1);
    corpus_cat(&d, d.p[d.n - 1] == '!' ? " " : ". ");
    if (corpus_chance(rng, 0.6)) corpus_fill(&d, rng, corpus_pick(rng, corpus_tpl_open), &slots, 1);
    int n_sentences = 1 + (int)(rng_next(rng) % 5);
    for (int i = 0; i < n_sentences; i++) {
        double v = rng_uniform(rng), acc = 0;
        int k = 0;
        while (k < 3 && v >= (acc += valence_p[stars - 1][k])) k++;
        slots.valence = valence_of[k];
        slots.aspect = cat->aspects[rng_next(rng) % (uint64_t)cat->n_aspects];
        if (corpus_chance(rng, 0.15) && i + 1 < n_sentences) {
            // a contrast: "The lid is sturdy, but the cord is flimsy."
            CorpusSlots other = slots;
            other.valence = -slots.valence;
            int ka = (int)(rng_next(rng) % (uint64_t)(cat->n_aspects - 1));  // any aspect but this one
            other.aspect = cat->aspects[cat->aspects[ka] == slots.aspect ? cat->n_aspects - 1 : ka];
            corpus_fill(&d, rng, "the %A %V %J, ", &slots, 1);
            corpus_fill(&d, rng, corpus_chance(rng, 0.5) ? "but the %A %V %J. " : "although the %A %V %J. ", &other, 0);
            continue;
        }
        const char *tpl;
        if (corpus_chance(rng, 0.6)) tpl = corpus_pick(rng, corpus_tpl_adj);
        else if (slots.valence == 2) tpl = corpus_pick(rng, corpus_tpl_pos2);
        else if (slots.valence == 1) tpl = corpus_pick(rng, corpus_tpl_pos1);
        else if (slots.valence == -1) tpl = corpus_pick(rng, corpus_tpl_neg1);
        else tpl = corpus_pick(rng, corpus_tpl_neg2);
        corpus_fill(&d, rng, tpl, &slots, 1);
    }
    if (corpus_chance(rng, 0.3)) {  // a comparison
        static const char *const compare[5] = {"it is far worse than my old %P. ", "it is worse than my old %P. ",
            "it is about the same as my old %P. ", "it is better than my old %P. ", "it is much better than my old %P. "};
        corpus_fill(&d, rng, compare[stars - 1], &slots, 1);
    }
    if (corpus_chance(rng, 0.15)) {
        static const char *const star_words[5] = {"one star", "two stars", "three stars", "four stars", "five stars"};
        corpus_cat(&d, "I would give it ");
        corpus_cat(&d, star_words[stars - 1]);
        corpus_cat(&d, ". ");
    }
    corpus_cat(&d, stars >= 4 ? corpus_pick(rng, corpus_close_pos) : stars == 3 ? corpus_pick(rng, corpus_close_mid) : corpus_pick(rng, corpus_close_neg));
    *len = d.n;
    return stars;
}

// Fills a stream with exactly n_bytes of framed built-in documents (the last one cut
// short). split 0 = train, 1 = val: the two draw from unrelated random streams.
static inline void corpus_stream(Stream *s, int64_t n_bytes, uint64_t seed, int split) {
    uint64_t rng = checksum_final(seed * 2 + (uint64_t)(split != 0));  // a bijective mix: distinct seeds never share a sequence
    uint8_t *buf = (uint8_t *)mallocCheck((size_t)(n_bytes > 0 ? n_bytes : 1));
    char text[CORPUS_DOC_MAX];
    int64_t n = 0;
    while (n < n_bytes) {
        size_t len;
        corpus_document(&rng, text, sizeof text, &len);
        const char *parts[3] = {"\n ", text, " "};
        size_t lens[3] = {2, len, 1};
        for (int i = 0; i < 3 && n < n_bytes; i++) {
            int64_t k = n_bytes - n < (int64_t)lens[i] ? n_bytes - n : (int64_t)lens[i];
            memcpy(buf + n, parts[i], (size_t)k);
            n += k;
        }
    }
    stream_from_memory(s, buf, n_bytes, 1);
}
