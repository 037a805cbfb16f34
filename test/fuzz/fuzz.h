// test/fuzz/fuzz.h: what every libFuzzer harness in test/fuzz/ shares. Include it
// first, then the project's header or tool (.c) under test.
//
// Surviving fail(). A reader reports bad input the way the programs must: fail()
// prints one line and calls exit(2). A fuzzer has to go on with the next input, so
// this header renames exit() (a macro, defined after every system header is in) to
// fuzz_exit(): inside fuzz_call(), exit(2) jumps back to the harness (longjmp) and
// the input counts as rejected; any other exit code (exit(1): an internal bug such as
// stream_read out of range) aborts, so libFuzzer reports it with the input that did it.
// An allocation a crafted size makes huge never gets as far as util.h's out-of-memory
// exit (2): libFuzzer reports any malloc past -malloc_limit_mb (by default its
// -rss_limit_mb, 2 GB) as a finding itself. No project file changes for the fuzzer.
//
// Clean-up. A jump out of a reader skips its clean-up, and a million leaked buffers,
// descriptors or mappings would stop the fuzzer, so the same renaming tracks what the
// code under test acquires during one input (malloc and friends, posix_memalign,
// jansson's and zlib's inflater's allocations, FILE* from fopen and fdopen, descriptors from open
// and openat, gzFile, mmap) and fuzz_end() releases what is left. What is still held after a
// reader *returned* normally (and the harness freed what the reader handed it) is a
// leak: that aborts too.
//
// Files. fuzz_path() names a file in a private temporary directory (under $TMPDIR,
// else /dev/shm, else /tmp), created at start-up and removed at exit (after a
// finding or a kill, by the next run). FUZZ_VERBOSE=1 says whether each input was
// accepted or rejected, to check that seeds get past the readers.
#pragma once
// every system header the project's code includes, or may soon, comes in before the
// renaming below, so the renaming never touches a declaration
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <libgen.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <string.h>
#include <stdarg.h>
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <dirent.h>
#include <time.h>
#include <setjmp.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/types.h>
#ifdef __cplusplus
#include <cmath>
#else
#include <tgmath.h>
#endif
#include <zlib.h>
#include <jansson.h>

// ----------------------------------------------------------------------------
// Tracked resources: an open-addressing set of (kind, handle) per live resource.

enum { FZ_MEM = 1, FZ_FILE, FZ_FD, FZ_GZ, FZ_MAP };
typedef struct { int kind; uintptr_t key; size_t len; } FuzzRes;  // len: mmap length
#define FZ_SLOTS (1 << 16)  // far more than one input ever holds at once
static FuzzRes fz_res[FZ_SLOTS];
static uint32_t fz_touched[FZ_SLOTS];  // slots used during this input, so clearing is cheap
static int fz_live = 0, fz_n_touched = 0;
static int fz_tracking = 0;   // between fuzz_begin and fuzz_end
static jmp_buf fz_jmp;
static int fz_in_call = 0;    // inside fuzz_call: exit(2) jumps back
static char fz_dir[4096];
static int fz_verbose = 0;    // FUZZ_VERBOSE=1: say for each input whether it was accepted

static inline size_t fz_slot(int kind, uintptr_t key) {
    uint64_t h = ((uint64_t)key ^ ((uint64_t)kind << 60)) * 0x9e3779b97f4a7c15ULL;
    return (size_t)(h >> 48) & (FZ_SLOTS - 1);
}
static inline void fz_add(int kind, uintptr_t key, size_t len) {
    if (!fz_tracking) return;
    if (fz_live >= FZ_SLOTS / 2) { fprintf(stderr, "fuzz: more than %d live resources\n", FZ_SLOTS / 2); abort(); }
    size_t i = fz_slot(kind, key);
    while (fz_res[i].kind > 0) i = (i + 1) & (FZ_SLOTS - 1);  // kind -1 (deleted) slots are reused
    if (fz_res[i].kind == 0) fz_touched[fz_n_touched++] = (uint32_t)i;
    fz_res[i] = (FuzzRes){kind, key, len};
    fz_live++;
}
// 1 if it was tracked; *len gets its len
static inline int fz_remove(int kind, uintptr_t key, size_t *len) {
    for (size_t i = fz_slot(kind, key); fz_res[i].kind != 0; i = (i + 1) & (FZ_SLOTS - 1))
        if (fz_res[i].kind == kind && fz_res[i].key == key) {
            if (len) *len = fz_res[i].len;
            fz_res[i].kind = -1; fz_live--;
            return 1;
        }
    return 0;
}

// Big blocks (the readers' 1 MB line and shard buffers) are kept for the next input
// instead of freed: fresh pages for a 1 MB calloc on every input took most of the run
// time (page faults, zeroing). A kept block is poisoned, so ASan still reports a use
// after free of one (as use-after-poison).
#define FZ_BIG (1 << 16)
#define FZ_CACHE 8
static struct { void *p; size_t n; } fz_cache[FZ_CACHE];
static int fz_cached = 0;
void __asan_poison_memory_region(void const volatile *addr, size_t size);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
static inline void *fz_big_take(size_t n, size_t align) {
    if (n < FZ_BIG) return NULL;
    for (int i = 0; i < fz_cached; i++)
        if (fz_cache[i].n == n && (uintptr_t)fz_cache[i].p % align == 0) {
            void *p = fz_cache[i].p;
            fz_cache[i] = fz_cache[--fz_cached];
            __asan_unpoison_memory_region(p, n);
            return p;
        }
    return NULL;
}
static inline void fz_release(void *p, size_t n) {  // n: the block's size, 0 if unknown
    if (n >= FZ_BIG && fz_cached < FZ_CACHE) {
        __asan_poison_memory_region(p, n);
        fz_cache[fz_cached].p = p; fz_cache[fz_cached].n = n; fz_cached++;
    } else {
        (free)(p);
    }
}

static inline void *fuzz_malloc(size_t n) {
    void *p = fz_big_take(n, 1);
    if (!p) p = (malloc)(n);
    if (p) fz_add(FZ_MEM, (uintptr_t)p, n);
    return p;
}
static inline void *fuzz_calloc(size_t n, size_t k) {
    void *p = k && n <= SIZE_MAX / k ? fz_big_take(n * k, 1) : NULL;
    if (p) memset(p, 0, n * k);
    else p = (calloc)(n, k);
    if (p) fz_add(FZ_MEM, (uintptr_t)p, n * k);
    return p;
}
static inline void fuzz_free(void *p) {
    size_t n = 0;
    if (p) fz_release(p, fz_remove(FZ_MEM, (uintptr_t)p, &n) ? n : 0);
}
static inline void *fuzz_realloc(void *p, size_t n) {
    void *q = (realloc)(p, n);
    if (q || n == 0) { if (p) fz_remove(FZ_MEM, (uintptr_t)p, NULL); if (q) fz_add(FZ_MEM, (uintptr_t)q, n); }
    return q;
}
static inline char *fuzz_strdup(const char *s) { char *p = (strdup)(s); if (p) fz_add(FZ_MEM, (uintptr_t)p, 0); return p; }
static inline int fuzz_posix_memalign(void **p, size_t a, size_t n) {
    int r = 0;
    if (!(*p = fz_big_take(n, a))) r = (posix_memalign)(p, a, n);
    if (r == 0) fz_add(FZ_MEM, (uintptr_t)*p, n);
    return r;
}
static inline FILE *fuzz_fopen(const char *path, const char *mode) { FILE *f = (fopen)(path, mode); if (f) fz_add(FZ_FILE, (uintptr_t)f, 0); return f; }
static inline int fuzz_fclose(FILE *f) { fz_remove(FZ_FILE, (uintptr_t)f, NULL); return (fclose)(f); }
static inline int fuzz_open(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & O_CREAT) { va_list ap; va_start(ap, flags); mode = (mode_t)va_arg(ap, int); va_end(ap); }
    int fd = (open)(path, flags, mode);
    if (fd >= 0) fz_add(FZ_FD, (uintptr_t)fd, 0);
    return fd;
}
static inline int fuzz_openat(int dfd, const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & O_CREAT) { va_list ap; va_start(ap, flags); mode = (mode_t)va_arg(ap, int); va_end(ap); }
    int fd = (openat)(dfd, path, flags, mode);
    if (fd >= 0) fz_add(FZ_FD, (uintptr_t)fd, 0);
    return fd;
}
static inline int fuzz_close(int fd) { fz_remove(FZ_FD, (uintptr_t)fd, NULL); return (close)(fd); }
// fdopen takes over the descriptor (fclose closes it): it becomes a FILE of ours
static inline FILE *fuzz_fdopen(int fd, const char *mode) {
    FILE *f = (fdopen)(fd, mode);
    if (f) {
        fz_remove(FZ_FD, (uintptr_t)fd, NULL);
        fz_add(FZ_FILE, (uintptr_t)f, 0);
    }
    return f;
}
static inline gzFile fuzz_gzopen(const char *path, const char *mode) { gzFile g = (gzopen)(path, mode); if (g) fz_add(FZ_GZ, (uintptr_t)g, 0); return g; }
// gzdopen takes over the descriptor (gzclose closes it): it stops being an open fd of ours
static inline gzFile fuzz_gzdopen(int fd, const char *mode) {
    gzFile g = (gzdopen)(fd, mode);
    if (g) {
        fz_remove(FZ_FD, (uintptr_t)fd, NULL);
        fz_add(FZ_GZ, (uintptr_t)g, 0);
    }
    return g;
}
static inline int fuzz_gzclose(gzFile g) { fz_remove(FZ_GZ, (uintptr_t)g, NULL); return (gzclose)(g); }
static inline void *fuzz_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = (mmap)(a, len, prot, flags, fd, off);
    if (p != MAP_FAILED) fz_add(FZ_MAP, (uintptr_t)p, len);
    return p;
}
static inline int fuzz_munmap(void *p, size_t len) { fz_remove(FZ_MAP, (uintptr_t)p, NULL); return (munmap)(p, len); }

static inline void fuzz_exit(int code) {
    if (code == 2 && fz_in_call) longjmp(fz_jmp, 1);
    fprintf(stderr, "fuzz: exit(%d) %s: reported as a finding\n", code,
            code == 2 ? "outside fuzz_call" : "is not the bad-input exit (2): an internal error or out of memory");
    abort();
}

// jansson's allocations are tracked too (a parse abandoned by fail() leaks its tree)
static void *fz_json_malloc(size_t n) { return fuzz_malloc(n); }
static void fz_json_free(void *p) { fuzz_free(p); }
// and zlib's inflater's (prepare inflates gzip itself; a fail() mid-stream skips its inflateEnd): the stream's
// allocator, set as inflateInit2 starts it
static voidpf fz_z_alloc(voidpf opaque, uInt items, uInt size) { (void)opaque; return fuzz_calloc(items, size); }
static void fz_z_free(voidpf opaque, voidpf p) { (void)opaque; fuzz_free(p); }
static inline int fuzz_inflateInit2(z_streamp z, int window_bits) {
    z->zalloc = fz_z_alloc;
    z->zfree = fz_z_free;
    z->opaque = Z_NULL;
    return inflateInit2_(z, window_bits, ZLIB_VERSION, (int)sizeof(z_stream));
}

// The renaming. Function-like macros: only calls are renamed.
#define malloc(n) fuzz_malloc(n)
#define calloc(n, k) fuzz_calloc(n, k)
#define realloc(p, n) fuzz_realloc(p, n)
#define free(p) fuzz_free(p)
#define strdup(s) fuzz_strdup(s)
#define posix_memalign(p, a, n) fuzz_posix_memalign(p, a, n)
#define fopen(p, m) fuzz_fopen(p, m)
#define fclose(f) fuzz_fclose(f)
#define open(...) fuzz_open(__VA_ARGS__)
#define openat(...) fuzz_openat(__VA_ARGS__)
#define close(fd) fuzz_close(fd)
#define fdopen(fd, m) fuzz_fdopen(fd, m)
#define gzopen(p, m) fuzz_gzopen(p, m)
#define gzdopen(fd, m) fuzz_gzdopen(fd, m)
#define gzclose(g) fuzz_gzclose(g)
#undef inflateInit2
#define inflateInit2(z, window_bits) fuzz_inflateInit2(z, window_bits)
#define mmap(a, l, p, f, d, o) fuzz_mmap(a, l, p, f, d, o)
#define munmap(p, l) fuzz_munmap(p, l)
#define exit(code) fuzz_exit(code)

// ----------------------------------------------------------------------------
// One input: fuzz_begin(); ... fuzz_call(fn, arg) ...; fuzz_end(returned).

static inline void fuzz_begin(void) { fz_tracking = 1; }

// Runs fn(arg): 1 if it returned, 0 if it rejected the input with exit(2).
static inline int fuzz_call(void (*fn)(void *), void *arg) {
    fz_in_call = 1;
    if (setjmp(fz_jmp)) { fz_in_call = 0; return 0; }
    fn(arg);
    fz_in_call = 0;
    return 1;
}

// Releases what is still held; if the code under test returned normally, anything
// held is a leak (the harness frees what the reader gave it before calling this).
static inline void fuzz_end(int returned) {
    int leaked = fz_live;
    if (fz_verbose) fprintf(stderr, "fuzz: input %s\n", returned ? "accepted" : "rejected");
    fz_tracking = 0;
    for (int k = 0; k < fz_n_touched; k++) {
        FuzzRes *r = &fz_res[fz_touched[k]];
        if (r->kind == FZ_MEM) fz_release((void *)r->key, r->len);
        else if (r->kind == FZ_FILE) (fclose)((FILE *)r->key);
        else if (r->kind == FZ_FD) (close)((int)r->key);
        else if (r->kind == FZ_GZ) (gzclose)((gzFile)r->key);
        else if (r->kind == FZ_MAP) (munmap)((void *)r->key, r->len);
        r->kind = 0;
    }
    fz_live = fz_n_touched = 0;
    if (returned && leaked) { fprintf(stderr, "fuzz: %d resources leaked by code that returned normally\n", leaked); abort(); }
}

// ----------------------------------------------------------------------------
// Files and input helpers.

static void fz_rmtree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        char p[8192];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", path, e->d_name);
                if (unlink(p) != 0) fz_rmtree(p);
            }
        closedir(d);
    }
    rmdir(path);
}
static void fz_remove_dir(void) { if (fz_dir[0]) fz_rmtree(fz_dir); fz_dir[0] = 0; }

// Creates the private directory, <tmp>/mlstm-fuzz-<pid>-XXXXXX; called from
// LLVMFuzzerInitialize. A finding or a kill ends the process without atexit, so the
// directories of processes that are gone are removed here first.
static inline void fuzz_init(void) {
    // /dev/shm when there is one: a disk-backed /tmp made the harnesses 15x slower here
    const char *t = getenv("TMPDIR");
    if (!t || !*t) t = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    DIR *d = opendir(t);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long pid;
        if (sscanf(e->d_name, "mlstm-fuzz-%ld-", &pid) == 1 && pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            snprintf(fz_dir, sizeof fz_dir, "%s/%s", t, e->d_name);
            fz_rmtree(fz_dir);
        }
    }
    if (d) closedir(d);
    snprintf(fz_dir, sizeof fz_dir, "%s/mlstm-fuzz-%ld-XXXXXX", t, (long)getpid());
    if (!mkdtemp(fz_dir)) { fprintf(stderr, "fuzz: cannot create %s: %s\n", fz_dir, strerror(errno)); abort(); }
    atexit(fz_remove_dir);
    json_set_alloc_funcs(fz_json_malloc, fz_json_free);
    fz_verbose = getenv("FUZZ_VERBOSE") != NULL;
}

// "<tmpdir>/name" in a static buffer (one of four, so a few can be live at once)
static inline const char *fuzz_path(const char *name) {
    static char bufs[4][4200];
    static int k = 0;
    char *b = bufs[k++ & 3];
    snprintf(b, sizeof bufs[0], "%s/%s", fz_dir, name);
    return b;
}

// Writes a file, unless it already holds exactly these bytes from the last call: the
// .npy harness writes 15 files per input and most stay the same between inputs.
static inline void fuzz_write_file(const char *path, const void *data, size_t n) {
    static struct { char path[4200]; uint8_t *bytes; size_t n; } last[32];
    int k = 0;
    while (k < 32 && last[k].bytes && strcmp(last[k].path, path)) k++;
    if (k < 32 && last[k].bytes && last[k].n == n && !memcmp(last[k].bytes, data, n)) return;
    FILE *f = (fopen)(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || (fclose)(f) != 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
        abort();
    }
    if (k == 32) return;  // more than 32 names: no memory of this one
    snprintf(last[k].path, sizeof last[k].path, "%s", path);
    last[k].bytes = (uint8_t *)(realloc)(last[k].bytes, n + 1);
    if (!last[k].bytes) abort();
    memcpy(last[k].bytes, data, n);
    last[k].n = n;
}

// A cursor over the input, as libFuzzer's FuzzedDataProvider: reads past the end give 0.
typedef struct { const uint8_t *p; size_t n; } FuzzIn;
static inline unsigned fuzz_u8(FuzzIn *in) { if (!in->n) return 0; in->n--; return *in->p++; }
static inline unsigned fuzz_u16(FuzzIn *in) { unsigned a = fuzz_u8(in); return a | fuzz_u8(in) << 8; }
static inline uint64_t fuzz_u64(FuzzIn *in) { uint64_t v = 0; for (int i = 0; i < 8; i++) v |= (uint64_t)fuzz_u8(in) << (8 * i); return v; }
// The next min(n, left) bytes.
static inline const uint8_t *fuzz_bytes(FuzzIn *in, size_t *n) {
    if (*n > in->n) *n = in->n;
    const uint8_t *p = in->p;
    in->p += *n; in->n -= *n;
    return p;
}
// A piece: u16 length, then that many bytes (fewer at the end of the input).
static inline const uint8_t *fuzz_piece(FuzzIn *in, size_t *n) { *n = fuzz_u16(in); return fuzz_bytes(in, n); }

#define FUZZ_CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "fuzz: check failed: %s: ", #cond); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); abort(); } } while (0)

// libFuzzer calls this once, before the first input. A harness with more to set up
// defines FUZZ_SETUP() before including this file.
#ifndef FUZZ_SETUP
#define FUZZ_SETUP() ((void)0)
#endif
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    fuzz_init();
    FUZZ_SETUP();
    return 0;
}
