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
#include <float.h>
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

// Which process failed, and where, before every error: empty in one process; the
// trainers set it to "rank R on HOST: " when there are several (train.h, dist_init),
// since on a cluster a file can be missing or different on one host only.
static char fail_where[320];

static inline void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: %s", fail_where);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(EXIT_BAD_INPUT);
}

// The sizes a user chooses are checked against the machine's memory where they are read,
// naming the flag; what is left here is an internal failure, and it names no flag it
// cannot know was the cause.
static inline void *malloc_check(size_t size, const char *file, int line) {
    void *p = calloc(1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "error: out of memory allocating %zu bytes at %s:%d\n", size, file, line);
        exit(1);
    }
    return p;
}

// A program started with a standard descriptor closed (`./train >&-`) would hand that
// number to the next file it opens, and its printf would then write into that file (a
// lock, a checkpoint). Each main() calls this first: closed ones are opened on /dev/null.
static inline void std_fds_open(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (got != fd) exit(1);  // cannot happen: the lowest free number is fd; nothing to report to
    }
}

// Whether two paths name one file: the same device and inode when both exist, else the
// same path once the directory part is resolved (a file not yet written).
static inline int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea != eb) return 0;
    char ra[8192], rb[8192];
    const char *paths[2] = {a, b};
    char *out[2] = {ra, rb};
    for (int k = 0; k < 2; k++) {
        char dir[4096];
        const char *slash = strrchr(paths[k], '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else if (slash == paths[k]) snprintf(dir, sizeof dir, "/");
        else if (slash - paths[k] < (long)sizeof dir)
            snprintf(dir, sizeof dir, "%.*s", (int)(slash - paths[k]), paths[k]);
        else return !strcmp(a, b);
        char *real = realpath(dir, NULL);
        if (!real) return !strcmp(a, b);  // a directory not made yet: the names alone
        snprintf(out[k], 8192, "%s/%s", real, slash ? slash + 1 : paths[k]);
        free(real);
    }
    return !strcmp(ra, rb);
}
// An output that is one of the inputs would replace what is being read: refused, naming both.
static inline void refuse_same_file(const char *out_what, const char *out, const char *in_what, const char *in) {
    if (same_file(out, in))
        fail("%s %s and %s %s are the same file: an output must not overwrite an input", out_what, out, in_what, in);
}
#define mallocCheck(size) malloc_check((size), __FILE__, __LINE__)

// ----------------------------------------------------------------------------
// Numbers on command lines: one rule for every flag of every program. A whole number is
// written in digits, a '-' first at most: 1e5, 12x, 0x10, +3 and 2.5 are refused, and the
// range is checked before any narrowing, so 4294967298 is an error and not 2. A real
// number is what strtod reads, all of it, and finite. Each exits 2 naming the flag.

static inline long long parse_whole(const char *flag, const char *text, long long min, long long max) {
    char *end;
    errno = 0;
    long long x = strtoll(text, &end, 10);
    size_t digits = strspn(text + (text[0] == '-'), "0123456789");
    if (!digits || text[(text[0] == '-') + digits] || end == text)
        fail("%s: expected a whole number, got \"%s\"", flag, text);
    if (errno == ERANGE || x < min || x > max) {
        if (max >= 1000000000000000LL)  // no real bound above
            fail("%s: must be at least %lld, got %s", flag, min, text);
        fail("%s: must be between %lld and %lld, got %s", flag, min, max, text);
    }
    return x;
}
static inline double parse_real(const char *flag, const char *text, double min, double max) {
    char *end;
    errno = 0;
    double x = strtod(text, &end);
    if (end == text || *end || errno == ERANGE || !(fabs(x) <= DBL_MAX))
        fail("%s: expected a number, got \"%s\"", flag, text);
    if (x < min || x > max) {
        if (max >= 1e15) fail("%s: must be at least %g, got %s", flag, min, text);
        fail("%s: must be between %g and %g, got %s", flag, min, max, text);
    }
    return x;
}
static inline double parse_positive(const char *flag, const char *text) {
    double x = parse_real(flag, text, -DBL_MAX, DBL_MAX);
    if (!(x > 0)) fail("%s: must be positive, got %s", flag, text);
    return x;
}

// ----------------------------------------------------------------------------
// Command lines of long flags (the trainers, generate): --name value or --name=value,
// names matched whole (getopt_long's abbreviations would let --val mean --val-every
// once a flag is renamed), and "--" ending the flags. A word with one dash is never
// taken for a value-less argument: the caller names it as a misspelt flag.

typedef struct {
    const char *name;   // after the dashes, `len` bytes (not NUL-terminated when `value` is set)
    size_t len;
    const char *value;  // after '=', or NULL
} CliFlag;
typedef enum { CLI_ARGUMENT, CLI_FLAG, CLI_SINGLE_DASH, CLI_END_OF_FLAGS } CliWord;
static inline CliWord cli_word(const char *arg, CliFlag *f) {
    if (!strcmp(arg, "--")) return CLI_END_OF_FLAGS;
    if (arg[0] != '-' || !arg[1]) return CLI_ARGUMENT;  // "-" alone is an argument (standard input)
    if (arg[1] != '-') return CLI_SINGLE_DASH;
    const char *eq = strchr(arg + 2, '=');
    *f = (CliFlag){arg + 2, eq ? (size_t)(eq - arg - 2) : strlen(arg + 2), eq ? eq + 1 : NULL};
    return CLI_FLAG;
}
static inline int cli_is(const CliFlag *f, const char *name) {
    return strlen(name) == f->len && !strncmp(f->name, name, f->len);
}

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
// A double's IEEE-754 bits, for a file field, and back.
static inline uint64_t f64_bits(double x) {
    uint64_t v;
    memcpy(&v, &x, 8);
    return v;
}
static inline double f64_from_bits(uint64_t v) {
    double x;
    memcpy(&x, &v, 8);
    return x;
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
