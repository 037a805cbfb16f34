// data.h: the training data. Three parts, shared by train.c, train.cu and tools/:
//   1. shards: a 32-byte versioned header and raw bytes, read through mmap
//      (doc/formats.md, "Shard format", is the spec a port implements from);
//   2. streams and the global-batch loader (doc/design.md, "Data and batching"): shards concatenate
//      into one logical byte stream; the G = world*B rows of the global batch each own
//      one of G equal contiguous slices of it;
//   3. the built-in corpus as a stream: corpus.h's seeded review-like English with a 1-5
//      star rating that the text's sentiment agrees with, so the trainers run on a fresh
//      machine with no download and the transfer evaluation has labelled documents offline.
// Documents are framed as in the reference recipe (sentiment-discovery, Radford et al.
// 2017): "\n " before the text, " " after, and no newline inside, so a '\n' byte marks
// exactly the start of a document.
#pragma once
#include "util.h"    // defines: fail, mallocCheck, checksum_*, put32/get32, AtomicFile
#include "corpus.h"  // defines: corpus_document, CORPUS_DOC_MAX
#include <sys/mman.h>
#include <signal.h>
#include <limits.h>

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
    uint64_t checksum;    // the payload's checksum (the header's, compared with the payload when verified at open):
                          // with size, the shard's identity in a run record (harness/run.h, data_identity)
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
// restarting on shards it has already verified). shard_open_fd takes an open descriptor
// (and closes it), `path` naming it in messages.
static inline void shard_open_fd(Shard *sh, int fd, const char *path, int verify) {
    memset(sh, 0, sizeof *sh);
    snprintf(sh->path, sizeof sh->path, "%s", path);
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
        fail("%s: shard version %u is newer than this build reads (%d)\nHINT: update mlstm.c", path, version,
             SHARD_VERSION);
    if (version == 0) fail("%s: bad shard version 0", path);
    if (sh->flags & ~SHARD_FRAMED)
        fail("%s: unknown flag bits 0x%x in the header (version 1 defines bit 0 only; the others must be 0)", path,
             sh->flags & ~SHARD_FRAMED);
    if ((uint64_t)(file_bytes - SHARD_HEADER_BYTES) < size)
        fail("%s: truncated payload: the header says %llu bytes, the file holds %lld", path,
             (unsigned long long)size, (long long)(file_bytes - SHARD_HEADER_BYTES));
    if ((uint64_t)(file_bytes - SHARD_HEADER_BYTES) > size)
        fail("%s: %lld bytes after the payload of %llu bytes (not a shard, or damaged)", path,
             (long long)(file_bytes - SHARD_HEADER_BYTES - (int64_t)size), (unsigned long long)size);
    sh->size = (int64_t)size;
    sh->checksum = checksum;
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
static inline void shard_open(Shard *sh, const char *path, int verify) {
    // O_NONBLOCK: a FIFO must not hang the open; no effect on files
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail("cannot open shard %s: %s", path, strerror(errno));
    shard_open_fd(sh, fd, path, verify);
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
    const char *path = "a data shard",
               *msg = " was truncated or replaced while being read (SIGBUS)\n"
                      "HINT: do not rewrite shards (build/prepare -o the same DIR) while a trainer reads them\n";
    for (int k = 0; k < STREAMS_WATCHED; k++) {
        const Stream *s = streams_watched[k];
        for (int i = 0; s && i < s->n_shards; i++) {
            const char *m = (const char *)s->shards[i].map;
            if (m && (const char *)si->si_addr >= m && (const char *)si->si_addr < m + s->shards[i].map_bytes)
                path = s->shards[i].path;
        }
    }
    static char line[sizeof fail_where + 4096 + 256];  // one write, as fail() makes: ranks' lines never interleave
    size_t n = 0;
    const char *parts[4] = {"error: ", fail_where, path, msg};
    for (int k = 0; k < 4; k++)
        for (const char *c = parts[k]; *c && n < sizeof line; c++) line[n++] = *c;  // no snprintf in a signal handler
    write_all(2, line, n);
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

// The list of paths a stream is being opened from, while it is: a shard that fails ends
// the program (fail) with the caller's list still allocated, and a compiler that knows
// fail never returns may keep the list's only pointer nowhere by then; LeakSanitizer
// (SAN=1) would report it as leaked and change the exit status. A global keeps it seen.
static const char *const *volatile stream_paths_opening;
static inline void stream_open(Stream *s, const char *const *paths, int n, int verify) {
    stream_paths_opening = paths;
    if (n < 1) fail("no shard files given");
    s->n_shards = n;
    s->shards = (Shard *)mallocCheck((size_t)n * sizeof(Shard));
    for (int i = 0; i < n; i++) shard_open(&s->shards[i], paths[i], verify);
    stream_paths_opening = NULL;
    stream_index_(s);
    stream_watch_(s, NULL);
}

// Whether `path` still names the directory open as dfd (the same device and inode).
static inline int dir_still_named(int dfd, const char *path) {
    struct stat a, b;
    return fstat(dfd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Opens <dir>/<split>_000.bin, <split>_001.bin, ... up to the first missing number,
// the files tools/prepare writes. prepare switches a whole directory for another in one
// rename, so the shards are opened through one descriptor of the directory, and if
// `dir` stopped naming that directory meanwhile (the old set's files are removed after
// the switch, so the count could come up short), they are opened again from the new
// one: a stream is one whole set, never a mix of two nor part of one.
#define STREAM_DIR_ATTEMPTS 3
static inline void stream_open_dir(Stream *s, const char *dir, const char *split, int verify) {
    char path[sizeof ((Shard *)0)->path];
    for (int attempt = 1;; attempt++) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) fail("cannot open shard directory %s: %s", dir, strerror(errno));
        int n = 0, cap = 0, missing = 0;
        Shard *shards = NULL;
        for (;; n++) {
            char name[sizeof path];
            if ((size_t)snprintf(name, sizeof name, "%s_%03d.bin", split, n) >= sizeof name ||
                (size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
                fail("shard path too long: %s/%s_%03d.bin", dir, split, n);
            int fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0 && errno == ENOENT) {
                missing = errno;
                break;
            }
            if (fd < 0) fail("cannot open shard %s: %s", path, strerror(errno));
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                shards = (Shard *)realloc(shards, (size_t)cap * sizeof(Shard));
                if (!shards) alloc_failed((size_t)cap, sizeof(Shard), __FILE__, __LINE__);
            }
            shard_open_fd(&shards[n], fd, path, verify);
        }
        int same = dir_still_named(dfd, dir);
        close(dfd);
        if (same) {
            if (n == 0) {
                snprintf(path, sizeof path, "%s/%s_000.bin", dir, split);
                fail("cannot open shard %s: %s\nHINT: make shards with build/prepare", path, strerror(missing));
            }
            s->n_shards = n;
            s->shards = shards;
            stream_index_(s);
            stream_watch_(s, NULL);
            return;
        }
        for (int i = 0; i < n; i++) shard_close(&shards[i]);
        free(shards);
        if (attempt == STREAM_DIR_ATTEMPTS)
            fail("%s was replaced %d times while its shards were being opened (a build/prepare -o %s running?)", dir,
                 attempt, dir);
    }
}

// The shards a user names (the trainers' --train and --val): a directory that
// tools/prepare wrote (its <split>_NNN.bin), or shard files separated by commas.
// `flag` names the setting in messages.
static inline void stream_open_spec(Stream *s, const char *flag, const char *spec, const char *split, int verify) {
    struct stat sb;
    if (stat(spec, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        stream_open_dir(s, spec, split, verify);
        return;
    }
    size_t cap = 1;  // as many paths as there are commas, plus one
    for (const char *c = spec; *c; c++) cap += *c == ',';
    if (cap > INT_MAX) fail("%s: %zu paths, more than a stream takes", flag, cap);
    char *copy = (char *)mallocCheck(strlen(spec) + 1), *save = NULL;
    memcpy(copy, spec, strlen(spec) + 1);
    const char **paths = (const char **)mallocCheck(cap * sizeof *paths);
    int n = 0;
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) paths[n++] = p;
    if (n == 0)
        fail("%s \"%s\": no shard files given (a directory that build/prepare wrote, or shard files separated by "
             "commas)", flag, spec);
    stream_open(s, paths, n, verify);
    free(paths);
    free(copy);
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
    s->shards[0].checksum = checksum_final(checksum_update(CHECKSUM_INIT, data, (size_t)n));
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

// what: the data in the words of its error, "the data" or which split (a trainer names its flag).
static inline void loader_init(Loader *l, const Stream *s, int world, int rank, int B, int T, const char *what) {
    if (world < 1 || rank < 0 || rank >= world) fail("bad rank %d of world %d", rank, world);
    if (B < 1) fail("--batch must be at least 1 (got %d)", B);
    if (T < 1) fail("--seq-len must be at least 1 (got %d)", T);
    int64_t G = (int64_t)world * B;
    l->stream = s;
    l->world = world; l->rank = rank; l->B = B; l->T = T;
    l->slice = s->size > 0 ? (s->size - 1) / G : 0;
    if (l->slice < T)
        fail("%s has %lld bytes, too few for %lld rows of %d+1 bytes (need at least %lld): use a smaller --batch or "
             "--seq-len, or more data", what, (long long)s->size, (long long)G, T, (long long)(G * T + 1));
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
// The built-in corpus (corpus.h) as a stream.

// Fills a stream with exactly n_bytes of framed built-in documents (the last one cut
// short). split 0 = train, 1 = val: the two draw from unrelated random streams.
static inline void corpus_stream(Stream *s, int64_t n_bytes, uint64_t seed, int split) {
    // a bijective mix of seed and split: distinct seeds never share a sequence
    uint64_t rng = checksum_final(seed * 2 + (uint64_t)(split != 0));
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
