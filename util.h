// util.h: what every part of the project needs and none of it is about the model:
// one-line errors (fail, exit 2) and the allocation check, the 64-bit checksum of
// checkpoints and shards, overflow-checked sizes and little-endian fields of files, the
// seeded RNG, whole-or-nothing output files, and the process-level OpenMP setup (and
// check) a program's main() calls.
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
#include <signal.h>
#ifdef _OPENMP
#include <omp.h>  // omp_set_num_threads and the like, for the programs and tests (the headers need only the pragmas)
#endif

// ----------------------------------------------------------------------------
// Errors. Bad input (a flag, a file) and a limit of the machine (its memory, a full disk,
// a file-size limit) are the user's to fix: say what and where, exit 2, and leave nothing
// half-written. Internal failures (a bug) exit 1.

#define EXIT_BAD_INPUT 2

// Which process failed, and where, before every error: empty in one process; the
// trainers set it to "rank R on HOST: " when there are several (train.h, dist_init; before
// MPI starts, fail_where_from_launcher), since on a cluster a file can be missing or
// different on one host only.
static char fail_where[320];

// All n bytes to fd, after a short write or a signal too.
static inline void write_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

// "error: <fail_where><message>\n", formatted whole and handed to stderr in one write:
// stderr is unbuffered, so printed piece by piece each piece would be a write of its
// own, and the errors of several ranks sharing a terminal or a log would interleave
// mid-line. Exits with `status` (EXIT_BAD_INPUT, or 1 for an internal failure).
static inline void fail_with_status(int status, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    char small[4096], *msg = small;
    size_t head = (size_t)snprintf(small, sizeof small, "error: %s", fail_where);  // < 330 bytes
    int body = vsnprintf(small + head, sizeof small - head, fmt, ap);
    size_t n = head + (body > 0 ? (size_t)body : 0);
    if (n + 1 >= sizeof small) {  // a long message: formatted again into a buffer that holds it
        msg = (char *)malloc(n + 2);
        if (msg) {
            memcpy(msg, small, head);
            vsnprintf(msg + head, n - head + 1, fmt, again);
        } else {
            msg = small;  // no memory for it either: what fits
            n = sizeof small - 2;
        }
    }
    va_end(again);
    msg[n] = '\n';
    write_all(2, msg, n + 1);
    exit(status);
}
static inline void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_with_status(EXIT_BAD_INPUT, fmt, ap);
}
static inline void fail_internal(const char *fmt, ...) {  // not the user's to fix: exit 1
    va_list ap;
    va_start(ap, fmt);
    fail_with_status(1, fmt, ap);
}

// The sizes a user chooses are checked against the machine's memory where they are read,
// naming the flag; what is left here is a memory limit the process runs under (ulimit -v,
// a container's) or memory other processes hold, the user's to change like a full disk
// (exit 2). It names no flag it cannot know was the cause, only the size asked for: count
// elements of elem bytes.
static inline void alloc_failed(size_t count, size_t elem, const char *file, int line) {
    if (elem && count > SIZE_MAX / elem)
        fail("out of memory: %zu elements of %zu bytes at %s:%d are more than the address space", count, elem, file,
             line);
    fail("out of memory allocating %zu bytes at %s:%d (a smaller model or input, or a higher memory limit)",
         count * elem, file, line);
}
static inline void *malloc_check(size_t size, const char *file, int line) {
    void *p = calloc(1, size ? size : 1);
    if (!p) alloc_failed(size, 1, file, line);
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

// A file-size limit (ulimit -f) is met like a full disk: by default the kernel kills the
// process with SIGXFSZ, mid-write, with no message and its temporary file left behind.
// Ignored, the write that would pass the limit fails with EFBIG, which the writers report
// (naming the file, exit 2) after removing their temporary. Each main() calls this with
// std_fds_open.
static inline void file_size_limit_as_error(void) { signal(SIGXFSZ, SIG_IGN); }

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
// number is what strtod reads, all of it, and finite; one a double cannot hold (1e400,
// 1e-320) is out of range. Each exits 2 naming the flag.

static inline long long parse_whole(const char *flag, const char *text, long long min, long long max) {
    char *end;
    errno = 0;
    long long x = strtoll(text, &end, 10);
    size_t digits = strspn(text + (text[0] == '-'), "0123456789");
    if (!digits || text[(text[0] == '-') + digits] || end == text)
        fail("%s: expected a whole number, got \"%s\"", flag, text);
    if (errno == ERANGE || x < min || x > max) {
        int below = errno == ERANGE ? text[0] == '-' : x < min;
        if (below && max >= 1000000000000000LL)  // no bound above that a user would meet
            fail("%s: must be at least %lld, got %s", flag, min, text);
        fail("%s: must be between %lld and %lld, got %s", flag, min, max, text);
    }
    return x;
}
static inline double parse_real(const char *flag, const char *text, double min, double max) {
    char *end;
    errno = 0;
    double x = strtod(text, &end);
    if (end == text || *end || (errno != ERANGE && !(fabs(x) <= DBL_MAX)))  // inf and nan are not numbers here
        fail("%s: expected a number, got \"%s\"", flag, text);
    if (errno == ERANGE)  // a number, but beyond what a double holds (1e400), or too close to 0 for it (1e-320)
        fail("%s: %s is out of range: a number's size must be 0 or between %g and %g", flag, text, DBL_MIN, DBL_MAX);
    if (x < min || x > max) {
        if (x < min && max >= 1e15) fail("%s: must be at least %g, got %s", flag, min, text);
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

// The most OpenMP threads a program runs (--threads, OMP_NUM_THREADS): beyond this
// libgomp fails to create its thread stacks.
#define MAX_THREADS 1024

// The "rank R on HOST: " before every error of a process among several.
static inline void fail_where_set(long rank, const char *host) {
    snprintf(fail_where, sizeof fail_where, "rank %ld on %.256s: ", rank, host);
}
// An error before MPI starts names the rank and host the launcher gave the process, as
// dist_init's do after it (train.h): the launchers' variables, where there are several ranks.
static inline void fail_where_from_launcher(void) {
    const char *r = getenv("OMPI_COMM_WORLD_RANK"), *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!r) r = getenv("PMIX_RANK");
    if (!r) r = getenv("PMI_RANK");
    if (!n) n = getenv("PMI_SIZE");
    char host[256];
    if (!r || fail_where[0] || (n && atol(n) < 2) || gethostname(host, sizeof host) != 0) return;
    host[sizeof host - 1] = 0;
    fail_where_set(atol(r), host);
}

// OMP_NUM_THREADS is read by the OpenMP runtime, which no flag parser sees: beyond
// MAX_THREADS the first parallel region would crash (segfault), and a value libgomp
// cannot parse (empty, 0, "abc") it ignores with a warning and runs on all cores. Checked as a
// flag is: each number of the list (one per nesting level, "4,2"; blanks around a
// number allowed, as libgomp allows them) within 1..MAX_THREADS, else one line naming
// it, exit 2, before any file is opened.
static inline void omp_num_threads_check(void) {
    const char *v = getenv("OMP_NUM_THREADS");
    if (!v) return;
    fail_where_from_launcher();  // (only an error prints it)
    char item[64];
    for (const char *p = v;; p++) {
        size_t n = strcspn(p, ",");
        while (n && (*p == ' ' || *p == '\t')) p++, n--;
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
        if (n >= sizeof item) fail("OMP_NUM_THREADS=%s: expected whole numbers from 1 to %d", v, MAX_THREADS);
        memcpy(item, p, n);
        item[n] = 0;
        char *end;
        errno = 0;
        long long x = strtoll(item, &end, 10);
        if (!n || strspn(item, "0123456789") != n || errno || x < 1 || x > MAX_THREADS)
            fail("OMP_NUM_THREADS=%s: expected %s from 1 to %d (the threads per nesting level)", v,
                 strchr(v, ',') ? "whole numbers" : "a whole number", MAX_THREADS);
        p = strchr(p, ',');
        if (!p) break;
    }
}

// OpenMP threads that wait spin by default (libgomp), and when another process
// shares the cores a spinning thread steals the time its partner needs: seen here,
// 2 threads at 780 chars/s against 6,100 with passive waiting, with one other busy
// process on 2 cores. Passive waiting costs little because the time loops have no
// per-step barrier. A thread that sleeps at once, though, must be woken for each of
// the thirty or so parallel regions of a step, which on a VM can take tens of
// microseconds: libgomp's threads first spin GOMP_SPINCOUNT = 3000 times (about 30 us at
// its own estimate of 100,000 a millisecond), short enough to cost nothing measurable
// with a busy process beside them (dev/bench/cpu-perf.md). The runtime reads these
// when it loads, before main, so a program that has not been given a policy sets
// them (a spin count the user set stays) and executes itself again, once.
// Process-level: only a program's main() calls it (train.c, train.cu, tools/generate.c,
// tools/transfer.c), never a library function, so a test or tool that includes these
// headers is never restarted behind its back. It checks OMP_NUM_THREADS first
// (omp_num_threads_check), so every program that runs parallel loops checks it.
static inline void openmp_prefer_passive_wait(char **argv) {
    omp_num_threads_check();
#ifdef _OPENMP
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("GOMP_SPINCOUNT", "3000", 0);
    execv("/proc/self/exe", argv);  // returns only if that failed: then carry on as we are
#else
    (void)argv;
#endif
}

// Sizes computed from a file's fields, where a product can wrap: a * b (a + b) into *out,
// or 0 when it does not fit 64 bits. A wrapped size would match a small file and be read
// (or allocated) as the small number it wrapped to.
static inline int mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}
static inline int add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (b > UINT64_MAX - a) return 0;
    *out = a + b;
    return 1;
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
// Whole-or-nothing output files: write to "<target>.tmp.<pid>", then flush, fsync
// and rename over the target. A crash or kill -9 at any point leaves either the
// previous file or the new one, never a torn file. The target is the file the path
// names: a symbolic link is written through (followed link by link to the file it
// names, which need not exist yet), so the link stays a link and the file it names is
// the one replaced, with its permission bits; renaming over the link itself would
// leave that file stale. Only a regular file is replaced: a directory, a FIFO or a
// device (/dev/stdin) is refused, exit 2, naming the path.

typedef struct { FILE *f; char path[4096], target[4096], tmp[4200]; } AtomicFile;

static inline const char *file_kind(mode_t mode) {
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

// The file `path` names once its symbolic links are followed, link by link (a relative
// link is relative to the link's directory), into target (4096 bytes), even when that
// file does not exist yet; *st: its lstat, st_mode 0 when it does not exist. Fails
// ("<doing> <path>: why") on a loop of links or one that cannot be read.
static inline void path_follow_links(const char *doing, const char *path, char *target, struct stat *st) {
    memset(st, 0, sizeof *st);
    if (snprintf(target, 4096, "%s", path) >= 4096) fail("path too long: %s", path);
    for (int links = 0;; links++) {
        if (lstat(target, st) != 0) {
            if (errno == ENOENT) {  // not there yet (its directory is checked when it is made)
                memset(st, 0, sizeof *st);
                return;
            }
            fail("%s %s: %s", doing, path, strerror(errno));
        }
        if (!S_ISLNK(st->st_mode)) return;
        char link[4096], next[8200];
        ssize_t k = readlink(target, link, sizeof link - 1);
        if (links == 40 || k < 0 || (size_t)k == sizeof link - 1)
            fail("%s %s: cannot follow its symbolic link %s (%s)", doing, path, target,
                 links == 40 ? "too many levels of links" : k < 0 ? strerror(errno) : "the link is too long");
        link[k] = 0;
        const char *slash = strrchr(target, '/');
        if (link[0] == '/' || !slash) snprintf(next, sizeof next, "%s", link);
        else snprintf(next, sizeof next, "%.*s/%s", (int)(slash - target), target, link);
        if (strlen(next) >= 4096) fail("path too long: %s (the file its link names)", path);
        memcpy(target, next, strlen(next) + 1);
    }
}

// The file writing `path` replaces, into target (4096 bytes): path_follow_links's, which
// must be a regular file if it exists; *old: its status, st_mode 0 when it does not exist.
static inline void output_target(const char *path, char *target, struct stat *old) {
    if (stat(path, old) == 0 && !S_ISREG(old->st_mode))
        fail("cannot write %s: it is %s; an output replaces only a regular file", path, file_kind(old->st_mode));
    path_follow_links("cannot write", path, target, old);
    if (old->st_mode && !S_ISREG(old->st_mode))
        fail("cannot write %s: it is %s; an output replaces only a regular file", path, file_kind(old->st_mode));
}

// The checks atomic_open makes, made ahead of minutes of work that a refusal at the end would waste.
static inline void output_check(const char *path) {
    char target[4096];
    struct stat old;
    output_target(path, target, &old);
}

// A new file about to replace `old` (from output_target) takes its owner and group
// where this process may give them (root; a member of the group) and its permission
// bits (0600 stays 0600). Returns 0, or -1 with errno when the bits cannot be set.
static inline int output_keep_attributes(int fd, const struct stat *old) {
    if (!old->st_mode) return 0;  // nothing replaced
    if (fchown(fd, old->st_uid, (gid_t)-1) != 0) {}
    if (fchown(fd, (uid_t)-1, old->st_gid) != 0) {}
    return fchmod(fd, old->st_mode & 0777);
}

static inline void atomic_open(AtomicFile *af, const char *path) {
    size_t n = strlen(path);
    if (n >= sizeof af->path) fail("output path too long: %s", path);
    memcpy(af->path, path, n + 1);
    struct stat old;
    output_target(path, af->target, &old);
    snprintf(af->tmp, sizeof af->tmp, "%s.tmp.%ld", af->target, (long)getpid());
    // O_EXCL: never through a link or file put at the temporary name; one left there by
    // a process with this pid before is stale, and replaced
    const int create = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
    int fd = open(af->tmp, create, 0666);
    if (fd < 0 && errno == EEXIST && unlink(af->tmp) == 0) fd = open(af->tmp, create, 0666);
    if (fd < 0) fail("cannot write %s: %s", path, strerror(errno));
    af->f = output_keep_attributes(fd, &old) == 0 ? fdopen(fd, "wb") : NULL;
    if (!af->f) {
        int e = errno;
        close(fd);
        unlink(af->tmp);
        fail("cannot write %s: %s", path, strerror(e));
    }
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
    if (rename(af->tmp, af->target) != 0) {
        int e = errno;
        unlink(af->tmp);
        fail("cannot rename %s to %s: %s", af->tmp, af->target, strerror(e));
    }
}
