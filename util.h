// util.h: what every part of the project needs and none of it is about the model:
// one-line errors (fail, exit 2) and the allocation check, the 64-bit checksum of
// checkpoints and shards, little-endian file fields, the seeded RNG, whole-or-nothing
// output files, and the process-level OpenMP setup a program's main() may call.
// data.h, schedule.h and mlstm.h include it; it includes nothing of the project.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <stdarg.h>
#ifdef __cplusplus
#include <cmath>
using std::isfinite;  // C's classification macros, for the headers compiled as C++
using std::isinf;
using std::isnan;
#else
#include <math.h>
#endif
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>
#ifdef _OPENMP
#include <omp.h>  // omp_set_num_threads and the like, for the programs and tests (the headers need only the pragmas)
#endif

// ----------------------------------------------------------------------------
// Errors. Bad input (a flag, a file) is the user's to fix: say what and where,
// exit 2, and leave nothing half-written. Internal failures (out of memory) exit 1.

#define EXIT_BAD_INPUT 2

static inline void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(EXIT_BAD_INPUT);
}

static inline void *malloc_check(size_t size, const char *file, int line) {
    void *p = calloc(1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "error: out of memory allocating %zu bytes at %s:%d\n"
                        "HINT: use a smaller --hidden, --batch or --seq-len\n", size, file, line);
        exit(1);
    }
    return p;
}
#define mallocCheck(size) malloc_check((size), __FILE__, __LINE__)

// ----------------------------------------------------------------------------
// A 64-bit checksum for checkpoints and data shards: FNV-1a's multiply-xor over
// 8-byte little-endian words (fast enough for tens of GB), then a final mix.
// Streaming: pass the previous result as `h` (start with CHECKSUM_INIT). Chunks
// other than the last must be a multiple of 8 bytes long.

#define CHECKSUM_INIT 0xcbf29ce484222325ULL
static inline uint64_t checksum_update(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);  // the project assumes a little-endian host
        h = (h ^ w) * 0x100000001b3ULL;
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = (h ^ w ^ ((uint64_t)(n - i) << 56)) * 0x100000001b3ULL;
    }
    return h;
}
static inline uint64_t checksum_final(uint64_t h) {  // murmur3's finaliser spreads every bit
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

// OpenMP threads that wait spin by default (libgomp), and when another process
// shares the cores a spinning thread steals the time its partner needs: seen here,
// 2 threads at 780 chars/s against 6,100 with passive waiting, with one other busy
// process on 2 cores. Passive waiting costs little because the time loops have no
// per-step barrier. The runtime reads the policy when it loads, before main, so a
// program that has not been given one sets it and executes itself again, once.
// Process-level: only a program's main() calls it (train.c, train.cu, tools/transfer.c),
// never a library function, so a test or tool that includes these headers is never
// restarted behind its back.
static inline void openmp_prefer_passive_wait(char **argv) {
#ifdef _OPENMP
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);  // returns only if that failed: then carry on as we are
#else
    (void)argv;
#endif
}

// Little-endian fields of the file formats (doc/formats.md), whatever the host.
static inline void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static inline uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

// ----------------------------------------------------------------------------
// Random numbers: splitmix64, one 64-bit state that goes into the checkpoint.

static inline uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }  // [0, 1)
static inline double rng_normal(uint64_t *s) {  // Box-Muller; one draw per call keeps the stream simple
    double u1 = 1.0 - rng_uniform(s), u2 = rng_uniform(s);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// ----------------------------------------------------------------------------
// Whole-or-nothing output files: write to "<path>.tmp.<pid>", then flush, fsync
// and rename over the final name. A crash or kill -9 at any point leaves either
// the previous file or the new one, never a torn file.

typedef struct { FILE *f; char path[4096], tmp[4200]; } AtomicFile;

static inline void atomic_open(AtomicFile *af, const char *path) {
    size_t n = strlen(path);
    if (n >= sizeof af->path) fail("output path too long: %s", path);
    memcpy(af->path, path, n + 1);
    snprintf(af->tmp, sizeof af->tmp, "%s.tmp.%ld", af->path, (long)getpid());
    af->f = fopen(af->tmp, "wb");
    if (!af->f) fail("cannot write %s: %s", path, strerror(errno));
}
static inline void atomic_write(AtomicFile *af, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, af->f) != n) {
        int e = errno;
        fclose(af->f);
        unlink(af->tmp);
        fail("cannot write %s: %s", af->path, strerror(e));
    }
}
static inline void atomic_abort(AtomicFile *af) {
    fclose(af->f);
    unlink(af->tmp);
}
static inline void atomic_commit(AtomicFile *af) {
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) {
        int e = errno;
        atomic_abort(af);
        fail("cannot write %s: %s", af->path, strerror(e));
    }
    fclose(af->f);
    if (rename(af->tmp, af->path) != 0) {
        int e = errno;
        unlink(af->tmp);
        fail("cannot rename %s to %s: %s", af->tmp, af->path, strerror(e));
    }
}
