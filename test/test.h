// test/test.h: a tiny test harness. Each test program prints one line per check
// ("ok" or "FAIL" with the numbers, "skip" with the reason) and ends with
// "<name>: N passed, N failed" (", N skipped" added when some part was skipped);
// test/run.sh adds those up into the final line of `make test`.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <unistd.h>
#include <sys/wait.h>
#include <sys/stat.h>

// SANITIZED: defined in an AddressSanitizer build (make SAN=1; gcc's macro, clang's feature), where
// a test shrinks its work (about 10x slower) or replaces ulimit -v (the shadow memory does not fit).
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

static int test_passed = 0, test_failed = 0, test_skipped = 0;

// CHECK(cond, fmt, ...): records one check; the message says what was compared.
#define CHECK(cond, ...) test_check((cond) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)
static inline void test_check(int ok, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf(ok ? "ok    " : "FAIL  ");
    vprintf(fmt, ap);
    if (!ok) printf("   (%s:%d)", file, line);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (ok) test_passed++; else test_failed++;
}

// SKIP(fmt, ...): a part that this machine cannot run (a missing tool, no privileges):
// the reason on a "skip" line, and counted, so that the summary shows it.
#define SKIP(...) test_skip(__VA_ARGS__)
static inline void test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("skip  ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    test_skipped++;
}

// Ends a test program: the summary line and the exit status.
static inline int test_summary(const char *name) {
    printf("%s: %d passed, %d failed", name, test_passed, test_failed);
    if (test_skipped) printf(", %d skipped", test_skipped);
    printf("\n");
    return test_failed ? 1 : 0;
}

// Runs fn(arg) in a child process and checks that it exits with `status` and that
// its stderr contains `needle`. This is how tests check that bad input gives a clear
// message and a non-zero exit without killing the test program.
#define EXPECT_EXIT(fn, arg, status, needle, what) \
    test_expect_exit((fn), (arg), (status), (needle), (what), __FILE__, __LINE__)
static inline void test_expect_exit(void (*fn)(void *), void *arg, int status, const char *needle,
                             const char *what, const char *file, int line) {
    char buf[4096] = {0};
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(1); }
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn(arg);
        exit(0);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    close(fds[0]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    char *nl = strchr(buf, '\n');
    if (nl && nl[1] == 0) *nl = 0;
    test_check(code == status && strstr(buf, needle) != NULL, file, line,
               "%s: exit %d (want %d), stderr \"%s\" (want \"%s\")", what, code, status, buf, needle);
}

// The directory this test program is in (build/, build-san/, ...), absolute: where make put the
// trainer and the tools the test runs.
static inline const char *test_bin_dir(void) {
    static char dir[4096];
    if (!dir[0]) {
        ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
        if (n <= 0 || !strchr(dir, '/')) {
            perror("readlink /proc/self/exe");
            exit(1);
        }
        dir[n] = 0;
        *strrchr(dir, '/') = 0;
    }
    return dir;
}

// Runs a shell command, returns its exit status (-1 if it did not exit normally).
// Tests use it to check whole programs (trainers, tools) as a user runs them.
static inline int test_system(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    fflush(stdout);
    int ws = system(cmd);
    return (ws != -1 && WIFEXITED(ws)) ? WEXITSTATUS(ws) : -1;
}

// The mpirun the trainer's MPI tests run, or NULL when there is none: then the part is a
// counted skip, or a failure under REQUIRE_MPI (CI). Open MPI as root, oversubscribed (more
// ranks than cores), and with LeakSanitizer off: Open MPI's plugins leak at exit, which a
// SAN=1 build would report as the trainer's.
static inline const char *test_mpirun(const char *what) {
    if (test_system("command -v mpirun > /dev/null") == 0)
        return "ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
               "OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 mpirun";
    if (getenv("REQUIRE_MPI")) CHECK(0, "%s: mpirun not found but REQUIRE_MPI is set", what);
    else SKIP("%s: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)", what);
    return NULL;
}

// Files: written whole (a test cannot go on without its file: exit 1 naming it), size in
// bytes (-1 if missing), and byte-for-byte equality (checkpoints).
static inline void test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) { perror(path); exit(1); }
}
static inline long file_size(const char *p) { struct stat sb; return stat(p, &sb) == 0 ? (long)sb.st_size : -1; }
static inline int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    while (eq) { int x = fgetc(fa), y = fgetc(fb); if (x != y) eq = 0; if (x == EOF || y == EOF) break; }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

// The same in a test's scratch directory, by name: whether an output file there matches a grep
// pattern, a file's size, and two files equal (and not empty or missing).
static inline int test_dir_says(const char *dir, const char *out, const char *pattern) {
    return test_system("grep -q -- '%s' %s/%s", pattern, dir, out) == 0;
}
static inline long test_dir_size(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return file_size(p);
}
static inline int test_dir_same_bytes(const char *dir, const char *a, const char *b) {
    char p[4200], q[4200];
    snprintf(p, sizeof p, "%s/%s", dir, a);
    snprintf(q, sizeof q, "%s/%s", dir, b);
    return file_size(p) > 0 && files_equal(p, q);
}
