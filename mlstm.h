// mlstm.h: the pure-C reference of the multiplicative LSTM language model of
// Krause et al. 2016 as trained at scale by Radford et al. 2017 and Puri et al. 2018.
// It is the truth that every other number in this project is checked against:
// config, one contiguous parameter buffer, initialisation, forward over T steps
// from a carried state, mean cross-entropy, backward through time (weight norm
// included), Adam, and the checkpoint file. Plain C11; gcc, clang and nvcc's host
// compiler all build it. Define MLSTM_REAL as double before including it to build
// the same code in double precision (the gradient check does).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <stdarg.h>
#ifdef __cplusplus
#include <cmath>
#else
#include <tgmath.h>  // exp, tanh, sqrt in the precision of `real`
#endif
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef MLSTM_REAL
#define MLSTM_REAL float
#if !defined(__CUDACC__) && !defined(MLSTM_PLAIN)  // gemm.h hook 1: FP32 on the CPU takes gemm.h's matmuls
#define MLSTM_FAST 1                                 // (-DMLSTM_PLAIN keeps the plain loops)
#endif
#endif
typedef MLSTM_REAL real;

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
    h ^= h >> 33; h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

// OpenMP threads that wait spin by default (libgomp), and when another process
// shares the cores a spinning thread steals the time its partner needs: seen here,
// 2 threads at 780 chars/s against 6,100 with passive waiting, with one other busy
// process on 2 cores. Passive waiting costs little because the time loops have no
// per-step barrier. The runtime reads the policy when it loads, before main, so a
// program that has not been given one sets it and executes itself again, once.
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
static inline void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static inline uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

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
        fclose(af->f); unlink(af->tmp);
        fail("cannot write %s: %s", af->path, strerror(e));
    }
}
static inline void atomic_abort(AtomicFile *af) { fclose(af->f); unlink(af->tmp); }
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

// ----------------------------------------------------------------------------
// Config and the parameter layout (DESIGN section 2). Weights are row-major
// [out, in], so y = x W^T. Weight norm (Salimans and Kingma 2016), on in the
// reference models, stores a direction V and a gain g per output row of W_x,
// W_h, W_mx, W_mh; the matrix the cell uses is W[j,:] = g[j] V[j,:] / ||V[j,:]||.

typedef struct {
    int V;      // vocabulary: bytes, 256
    int D;      // embedding width (64 in the paper)
    int H;      // hidden width (4096 in the paper)
    int wnorm;  // 1: weight norm on the four recurrent-cell matrices
} MlstmConfig;

// The single contiguous buffer, in this order (also the checkpoint order).
enum { P_E, P_WX, P_GX, P_WH, P_GH, P_WMX, P_GMX, P_WMH, P_GMH, P_B, P_WOUT, P_BOUT, NPARAM };
static const char *const param_names[NPARAM] = {
    "E", "W_x", "g_x", "W_h", "g_h", "W_mx", "g_mx", "W_mh", "g_mh", "b", "W_out", "b_out"};

// rows x cols of each tensor; a gain is [rows] and absent (0) without weight norm.
static inline void param_shapes(const MlstmConfig *c, size_t rows[NPARAM], size_t cols[NPARAM]) {
    size_t V = c->V, D = c->D, H = c->H, g = c->wnorm ? 1 : 0;
    size_t r[NPARAM] = {V, 4 * H, 4 * H * g, 4 * H, 4 * H * g, H, H * g, H, H * g, 4 * H, V, V};
    size_t k[NPARAM] = {D, D, 1, H, 1, D, 1, H, 1, 1, H, 1};
    for (int i = 0; i < NPARAM; i++) { rows[i] = r[i]; cols[i] = k[i]; }
}
static inline size_t param_count(const MlstmConfig *c) {
    size_t rows[NPARAM], cols[NPARAM], n = 0;
    param_shapes(c, rows, cols);
    for (int i = 0; i < NPARAM; i++) n += rows[i] * cols[i];
    return n;
}
// Forward FLOPs per character (DESIGN section 2); training is about 3x this.
static inline double flops_per_char(const MlstmConfig *c) {
    double D = c->D, H = c->H, V = c->V;
    return 2.0 * (5 * H * D + 5 * H * H + V * H);
}

// A pointer table into one buffer: t[P_WX] etc. Used for parameters and gradients alike.
typedef struct { real *t[NPARAM]; size_t n[NPARAM]; } ParamTable;
static inline void param_table(ParamTable *pt, const MlstmConfig *c, real *base) {
    size_t rows[NPARAM], cols[NPARAM], off = 0;
    param_shapes(c, rows, cols);
    for (int i = 0; i < NPARAM; i++) { pt->t[i] = base + off; pt->n[i] = rows[i] * cols[i]; off += pt->n[i]; }
}

// ----------------------------------------------------------------------------
// The model: parameters, gradients, Adam moments, effective weights and every
// activation the backward pass needs, all allocated once for at most B rows and
// T steps. Activations are time-major, (T, B, ...), so the input projections and
// the weight gradients are single matmuls over all T*B rows.

typedef struct {
    MlstmConfig cfg;
    int B, T;                 // capacity: rows and time steps
    size_t nparams;
    real *params, *grads;     // (nparams,) each; params are the FP32 master weights
    real *adam_m, *adam_v;    // (nparams,) Adam moments
    ParamTable p, g;          // named views of params and grads
    // effective weights: with weight norm these are computed from (V, g); without, they alias the params
    real *Wx, *Wh, *Wmx, *Wmh;     // (4H,D) (4H,H) (H,D) (H,H)
    real *dWx, *dWh, *dWmx, *dWmh; // their gradients (alias grads without weight norm)
    real *norms;              // (10H,) ||V_j|| of every normalised row: x 4H, h 4H, mx H, mh H
    // forward activations
    const uint8_t *inputs, *targets, *reset;  // (B,T) each, kept from forward for backward
    int b, t;                 // rows and steps of the last forward
    real *xe;                 // (T,B,D) embedded inputs
    real *zx;                 // (T,B,4H) x W_x^T + b, then z; holds gate activations i,f,o,u after the step
    real *mx, *mh, *m;        // (T,B,H) e W_mx^T, h_{t-1} W_mh^T, their product
    real *hs, *cs;            // (T+1,B,H) state entering step t at index t (index 0: carried in; T: out)
    real *probs;              // (T,B,V) softmax, then dlogits in backward
    double *losses;           // (T*B,) cross-entropy of each prediction
    // backward
    real *dz;                 // (T,B,4H) gradient of the gate pre-activations
    real *dmx, *dmh;          // (T,B,H)
    real *dhs;                // (T,B,H) gradient into h_t from the output layer
    real *dh, *dc, *dm;       // (B,H) running gradients, and dm of one step
    real *dxe;                // (T,B,D)
    real *dh0, *dc0;          // (B,H) gradient into the carried-in state
    real *pack_h, *pack_mh;   // gemm.h hook 3: W_h and W_mh packed for the time loops (fast path only)
} Mlstm;

// ----------------------------------------------------------------------------
// Matmuls. Three layouts cover the model (the same three the GPU trainer writes
// with tensor cores). Each comes as a serial kernel over a block of rows, and a
// parallel wrapper over all rows. Every output element is computed by one thread
// in a fixed order, so results do not depend on the number of threads (bit-exact
// resume, MPI ranks vs one process).

// out[n0:n1, :] (N,O) = [out +] in (N,K) . W (O,K)^T [+ bias (O,)]
// Four rows at a time share each load of a W row (dot products along K).
static inline void mm_nt_rows(real *out, const real *in, const real *W, const real *bias, int n0, int n1,
                              int K, int O, int accumulate) {
    int n = n0;
    for (; n + 4 <= n1; n += 4) {
        const real *x0 = in + (size_t)n * K, *x1 = x0 + K, *x2 = x1 + K, *x3 = x2 + K;
        for (int o = 0; o < O; o++) {
            const real *w = W + (size_t)o * K;
            real a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            #pragma omp simd reduction(+ : a0, a1, a2, a3)
            for (int k = 0; k < K; k++) { a0 += x0[k] * w[k]; a1 += x1[k] * w[k]; a2 += x2[k] * w[k]; a3 += x3[k] * w[k]; }
            real bo = bias ? bias[o] : 0, *y = out + (size_t)n * O + o;
            y[0] = (accumulate ? y[0] : 0) + a0 + bo;
            y[O] = (accumulate ? y[O] : 0) + a1 + bo;
            y[2 * (size_t)O] = (accumulate ? y[2 * (size_t)O] : 0) + a2 + bo;
            y[3 * (size_t)O] = (accumulate ? y[3 * (size_t)O] : 0) + a3 + bo;
        }
    }
    for (; n < n1; n++) {
        const real *x = in + (size_t)n * K;
        for (int o = 0; o < O; o++) {
            const real *w = W + (size_t)o * K;
            real a = 0;
            #pragma omp simd reduction(+ : a)
            for (int k = 0; k < K; k++) a += x[k] * w[k];
            real *y = out + (size_t)n * O + o;
            *y = (accumulate ? *y : 0) + a + (bias ? bias[o] : 0);
        }
    }
}
static inline void matmul_nt(real *out, const real *in, const real *W, const real *bias, int N, int K, int O, int accumulate) {
    #pragma omp parallel for schedule(static)
    for (int n0 = 0; n0 < N; n0 += 16) mm_nt_rows(out, in, W, bias, n0, n0 + 16 < N ? n0 + 16 : N, K, O, accumulate);
}

// dIn[n0:n1, :] (N,K) = [dIn +] dOut (N,O) . W (O,K): rows of W scaled and added
// (axpy along K), four rows of dIn per pass over W.
static inline void mm_nn_rows(real *dIn, const real *dOut, const real *W, int n0, int n1, int O, int K, int accumulate) {
    if (!accumulate) memset(dIn + (size_t)n0 * K, 0, sizeof(real) * (size_t)(n1 - n0) * K);
    for (int n = n0; n < n1; n += 4) {
        int r = n1 - n < 4 ? n1 - n : 4;
        real *y0 = dIn + (size_t)n * K;
        const real *d = dOut + (size_t)n * O;
        for (int o = 0; o < O; o++) {
            const real *w = W + (size_t)o * K;
            if (r == 4) {
                real a0 = d[o], a1 = d[O + o], a2 = d[2 * (size_t)O + o], a3 = d[3 * (size_t)O + o];
                real *y1 = y0 + K, *y2 = y1 + K, *y3 = y2 + K;
                #pragma omp simd
                for (int k = 0; k < K; k++) { y0[k] += a0 * w[k]; y1[k] += a1 * w[k]; y2[k] += a2 * w[k]; y3[k] += a3 * w[k]; }
            } else {
                for (int i = 0; i < r; i++) {
                    real a = d[(size_t)i * O + o], *y = y0 + (size_t)i * K;
                    #pragma omp simd
                    for (int k = 0; k < K; k++) y[k] += a * w[k];
                }
            }
        }
    }
}
static inline void matmul_nn(real *dIn, const real *dOut, const real *W, int N, int O, int K, int accumulate) {
    #pragma omp parallel for schedule(static)
    for (int n0 = 0; n0 < N; n0 += 16) mm_nn_rows(dIn, dOut, W, n0, n0 + 16 < N ? n0 + 16 : N, O, K, accumulate);
}

// dW (O,K) += dOut (N,O)^T . in (N,K), summed over all N rows in order
static inline void matmul_tn(real *dW, const real *dOut, const real *in, int N, int O, int K) {
    #pragma omp parallel for schedule(static)
    for (int o = 0; o < O; o++) {
        real *y = dW + (size_t)o * K;
        for (int n = 0; n < N; n++) {
            real a = dOut[(size_t)n * O + o];
            if (a == 0) continue;
            const real *x = in + (size_t)n * K;
            #pragma omp simd
            for (int k = 0; k < K; k++) y[k] += a * x[k];
        }
    }
}

// The rows [b0, b1) of B that this thread owns inside a parallel region. The time
// loops split the batch by rows: rows are independent through time, so each thread
// runs all T steps of its rows with no barrier per step. Splits fall on multiples
// of 4, so a row takes the same kernel path (4-row block or remainder) whatever
// the number of threads.
static inline void thread_rows(int B, int *b0, int *b1) {
#ifdef _OPENMP
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
#else
    int nt = 1, id = 0;
#endif
    int groups = (B + 3) / 4;
    *b0 = (int)((long)groups * id / nt) * 4;
    *b1 = (int)((long)groups * (id + 1) / nt) * 4;
    if (*b1 > B) *b1 = B;
    if (*b0 > B) *b0 = B;
}

// gemm.h hook 2: which matmuls the model runs. MATMUL_*_ROWS are the time loops' products
// on the rows of one thread; their weight is packed by gemm.h (hooks 5, 6) in FP32, plain otherwise.
#ifdef MLSTM_FAST
#include "gemm.h"
#define MATMUL_NT gemm_nt
#define MATMUL_NN gemm_nn
#define MATMUL_TN gemm_tn
#define MATMUL_NT_ROWS gemm_nt_rows_packed
#define MATMUL_NN_ROWS gemm_nn_rows_packed
#else
#define MATMUL_NT matmul_nt
#define MATMUL_NN matmul_nn
#define MATMUL_TN matmul_tn
#define MATMUL_NT_ROWS(out, in, W, n0, n1, K, O, acc) mm_nt_rows(out, in, W, NULL, n0, n1, K, O, acc)
#define MATMUL_NN_ROWS mm_nn_rows
#endif

// ----------------------------------------------------------------------------
// Pointwise math, one definition for the CPU and the GPU (train.cu compiles
// these as __host__ __device__).
#ifdef __CUDACC__
#define HOSTDEV __host__ __device__
#else
#define HOSTDEV
#endif
// gemm.h hook 7: exp and tanh of the cell. In the FP32 fast path they are plain
// arithmetic, so the cell loops vectorise (glibc's expf and tanhf are calls, and
// tanhf goes through expm1f: a quarter of the step at H=256); the plain build and
// the GPU keep the library's. test_gemm checks both on a grid against double.
// e^x: x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts, n*hi exact, so r is
// exact to a rounding), e^r by its Taylor series to r^7 (the next term is 5e-9 of
// it), times 2^n put straight into the exponent bits. x is clamped to [-87, 88],
// where e^x stays a normal float (a NaN passes through: the comparisons are false).
static inline HOSTDEV real expr(real x) {
#if defined(MLSTM_FAST) && !defined(__CUDA_ARCH__)
    x = x < -87 ? -87 : x > 88 ? 88 : x;
    float t = x * 1.44269504f + 12582912.0f, n = t - 12582912.0f;  // 1.5*2^23: t's low bits hold n = round(x/ln2)
    float r = x - n * 0.693145751953125f - n * 1.428606765330187e-6f;
    float p = 1 + r * (1 + r * (1 / 2.f + r * (1 / 6.f + r * (1 / 24.f + r * (1 / 120.f + r * (1 / 720.f + r * (1 / 5040.f)))))));
    uint32_t tb, e;
    memcpy(&tb, &t, 4);
    e = (tb - 0x4b400000u + 127u) << 23;  // the bits of 2^n
    float s;
    memcpy(&s, &e, 4);
    return p * s;
#else
    return exp(x);
#endif
}
static inline HOSTDEV real sigmoidr(real x) { return 1 / (1 + expr(-x)); }
// tanh: |x| < 0.5, its Taylor series to x^17 (the next term is < 3e-9 of tanh
// there); above, 1 - 2/(1 + e^{2|x|}), where tanh > 0.46 so the subtraction loses
// at most a bit. Within 3 ulp of tanh.
static inline HOSTDEV real tanhr(real x) {
#if defined(MLSTM_FAST) && !defined(__CUDA_ARCH__)
    real a = x < 0 ? -x : x, r;
    if (a < (real)0.5) {
        real x2 = x * x;
        r = x * (1 + x2 * (-1 / (real)3 + x2 * (2 / (real)15 + x2 * (-17 / (real)315 + x2 * (62 / (real)2835 +
            x2 * (-1382 / (real)155925 + x2 * (21844 / (real)6081075 + x2 * (-929569 / (real)638512875 +
            x2 * (6404582 / (real)10854718875)))))))));
    } else {
        r = 1 - 2 / (1 + expr(2 * a));
        r = x < 0 ? -r : r;
    }
    return r;
#else
    return tanh(x);
#endif
}

// One mLSTM cell update for one unit (DESIGN section 2, gate order i, f, o, u).
// z: pre-activations in, gates out (i,f,o,u at stride H); returns c, writes h.
static inline HOSTDEV real cell_forward(real *z, size_t H, real c_prev, real *h) {
    real i = sigmoidr(z[0]), f = sigmoidr(z[H]), o = sigmoidr(z[2 * H]), u = tanhr(z[3 * H]);
    z[0] = i; z[H] = f; z[2 * H] = o; z[3 * H] = u;
    real c = f * c_prev + i * u;
    *h = o * tanhr(c);
    return c;
}
// Its backward: gates g (i,f,o,u at stride H), dh and dc flowing into this step's
// outputs; writes dz (stride H) and returns the gradient into c_prev.
static inline HOSTDEV real cell_backward(const real *g, size_t H, real c_prev, real c, real dh, real dc, real *dz) {
    real i = g[0], f = g[H], o = g[2 * H], u = g[3 * H], tc = tanhr(c);
    dc += dh * o * (1 - tc * tc);
    dz[0] = dc * u * i * (1 - i);
    dz[H] = dc * c_prev * f * (1 - f);
    dz[2 * H] = dh * tc * o * (1 - o);
    dz[3 * H] = dc * i * (1 - u * u);
    return dc * f;
}

// ----------------------------------------------------------------------------
// Construction and initialisation

// 64-byte aligned and zeroed: vector loops then split the same way in every run,
// whatever else the process allocated first, so results repeat bit for bit.
static inline real *mlstm_alloc(size_t n) {
    void *p = NULL;
    size_t bytes = (n * sizeof(real) + 63) / 64 * 64;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) p = mallocCheck((size_t)-1 / 2);  // reports and exits
    memset(p, 0, bytes);
    return (real *)p;
}

static inline void mlstm_build(Mlstm *m, MlstmConfig cfg, int B, int T) {
    memset(m, 0, sizeof *m);
    if (cfg.V != 256 || cfg.D < 1 || cfg.H < 1 || B < 1 || T < 1)
        fail("bad model size V=%d D=%d H=%d B=%d T=%d (V must be 256, the rest positive)", cfg.V, cfg.D, cfg.H, B, T);
    m->cfg = cfg; m->B = B; m->T = T;
    size_t V = cfg.V, D = cfg.D, H = cfg.H, BT = (size_t)B * T;
    m->nparams = param_count(&cfg);
    m->params = mlstm_alloc(m->nparams); m->grads = mlstm_alloc(m->nparams);
    m->adam_m = mlstm_alloc(m->nparams); m->adam_v = mlstm_alloc(m->nparams);
    param_table(&m->p, &cfg, m->params);
    param_table(&m->g, &cfg, m->grads);
    if (cfg.wnorm) {
        size_t nW = 4 * H * D + 4 * H * H + H * D + H * H;
        real *w = mlstm_alloc(2 * nW);
        m->Wx = w; m->Wh = m->Wx + 4 * H * D; m->Wmx = m->Wh + 4 * H * H; m->Wmh = m->Wmx + H * D;
        m->dWx = w + nW; m->dWh = m->dWx + 4 * H * D; m->dWmx = m->dWh + 4 * H * H; m->dWmh = m->dWmx + H * D;
        m->norms = mlstm_alloc(10 * H);
    } else {
        m->Wx = m->p.t[P_WX]; m->Wh = m->p.t[P_WH]; m->Wmx = m->p.t[P_WMX]; m->Wmh = m->p.t[P_WMH];
        m->dWx = m->g.t[P_WX]; m->dWh = m->g.t[P_WH]; m->dWmx = m->g.t[P_WMX]; m->dWmh = m->g.t[P_WMH];
    }
    m->xe = mlstm_alloc(BT * D);
    m->zx = mlstm_alloc(BT * 4 * H);
    m->mx = mlstm_alloc(BT * H); m->mh = mlstm_alloc(BT * H); m->m = mlstm_alloc(BT * H);
    m->hs = mlstm_alloc(BT * H + B * H); m->cs = mlstm_alloc(BT * H + B * H);
    m->probs = mlstm_alloc(BT * V);
    m->losses = (double *)mallocCheck(BT * sizeof(double));
    m->dz = mlstm_alloc(BT * 4 * H);
    m->dmx = mlstm_alloc(BT * H); m->dmh = mlstm_alloc(BT * H); m->dhs = mlstm_alloc(BT * H);
    m->dh = mlstm_alloc(B * H); m->dc = mlstm_alloc(B * H); m->dm = mlstm_alloc(B * H);
    m->dxe = mlstm_alloc(BT * D);
    m->dh0 = mlstm_alloc(B * H); m->dc0 = mlstm_alloc(B * H);
#ifdef MLSTM_FAST  // gemm.h hook 4: room for W_h (and W_mh) packed either way round
    size_t ph = gemm_packed_floats(H, 4 * H) > gemm_packed_floats(4 * H, H) ? gemm_packed_floats(H, 4 * H) : gemm_packed_floats(4 * H, H);
    m->pack_h = mlstm_alloc(ph); m->pack_mh = mlstm_alloc(gemm_packed_floats(H, H));
#endif
}

static inline void mlstm_free(Mlstm *m) {
    real *bufs[] = {m->params, m->grads, m->adam_m, m->adam_v, m->norms, m->xe, m->zx, m->mx, m->mh, m->m,
                    m->hs, m->cs, m->probs, m->dz, m->dmx, m->dmh, m->dhs, m->dh, m->dc, m->dm, m->dxe, m->dh0, m->dc0,
                    m->pack_h, m->pack_mh};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    if (m->cfg.wnorm) free(m->Wx);
    free(m->losses);
    memset(m, 0, sizeof *m);
}

// Initialisation (seeded, splitmix64): E ~ N(0, 1) like torch.nn.Embedding; every
// matrix ~ U(-1/sqrt(in), 1/sqrt(in)) with in = its input width (PyTorch's Linear
// and LSTM default scale); gains g = the initial row norms, so W starts equal to
// V (Salimans and Kingma 2016); biases b and b_out zero. Adam moments zero.
static inline void mlstm_init(Mlstm *m, uint64_t seed) {
    const MlstmConfig *c = &m->cfg;
    uint64_t s = seed;
    size_t rows[NPARAM], cols[NPARAM];
    param_shapes(c, rows, cols);
    memset(m->params, 0, m->nparams * sizeof(real));
    for (size_t i = 0; i < m->p.n[P_E]; i++) m->p.t[P_E][i] = (real)rng_normal(&s);
    const int mats[] = {P_WX, P_WH, P_WMX, P_WMH, P_WOUT};
    for (int k = 0; k < 5; k++) {
        int id = mats[k];
        double a = 1.0 / sqrt((double)cols[id]);
        for (size_t i = 0; i < m->p.n[id]; i++) m->p.t[id][i] = (real)(a * (2 * rng_uniform(&s) - 1));
        if (c->wnorm && id != P_WOUT)
            for (size_t j = 0; j < rows[id]; j++) {
                double n2 = 0;
                for (size_t q = 0; q < cols[id]; q++) n2 += (double)m->p.t[id][j * cols[id] + q] * m->p.t[id][j * cols[id] + q];
                m->p.t[id + 1][j] = (real)sqrt(n2);
            }
    }
    memset(m->adam_m, 0, m->nparams * sizeof(real));
    memset(m->adam_v, 0, m->nparams * sizeof(real));
}

// ----------------------------------------------------------------------------
// Weight norm: W[j,:] = g[j] V[j,:] / ||V[j,:]||, and its backward
// dg[j] = dW[j,:].V[j,:] / ||V_j||,  dV[j,:] = (g[j]/||V_j||) (dW[j,:] - dg[j] V[j,:]/||V_j||).

static inline void weightnorm_forward(real *W, real *norms, const real *Vd, const real *g, int rows, int cols) {
    #pragma omp parallel for schedule(static)
    for (int j = 0; j < rows; j++) {
        const real *v = Vd + (size_t)j * cols;
        real n2 = 0;
        for (int k = 0; k < cols; k++) n2 += v[k] * v[k];
        real n = sqrt(n2), s = g[j] / n;
        norms[j] = n;
        for (int k = 0; k < cols; k++) W[(size_t)j * cols + k] = s * v[k];
    }
}
static inline void weightnorm_backward(real *dV, real *dg, const real *dW, const real *Vd, const real *g, const real *norms,
                                int rows, int cols) {
    #pragma omp parallel for schedule(static)
    for (int j = 0; j < rows; j++) {
        const real *v = Vd + (size_t)j * cols, *dw = dW + (size_t)j * cols;
        real n = norms[j], dot = 0;
        for (int k = 0; k < cols; k++) dot += dw[k] * v[k];
        real dgj = dot / n, s = g[j] / n;
        dg[j] += dgj;
        for (int k = 0; k < cols; k++) dV[(size_t)j * cols + k] += s * (dw[k] - dgj * v[k] / n);
    }
}

// ----------------------------------------------------------------------------
// Forward over T steps.
// inputs, targets: (B,T) bytes, row-major (inputs[b*T+t]); reset: (B,T) or NULL,
// reset[b*T+t] = 1 zeroes row b's state before step t (a document boundary).
// h0, c0: (B,H) carried-in state. Returns the mean cross-entropy (nats) over all
// B*T predictions; the state after the last step is at mlstm_h_out / mlstm_c_out.

static inline real *mlstm_h_out(Mlstm *m) { return m->hs + (size_t)m->t * m->b * m->cfg.H; }
static inline real *mlstm_c_out(Mlstm *m) { return m->cs + (size_t)m->t * m->b * m->cfg.H; }

// reset[b*T+t]: row b's state is zeroed before step t. The stored hs/cs keep the
// values the previous step produced (the output layer needs them); each use of
// the state entering step t checks the mask instead.
static inline int is_reset(const Mlstm *m, int b, int t) { return m->reset && m->reset[b * m->t + t]; }

static inline double mlstm_forward(Mlstm *m, const uint8_t *inputs, const uint8_t *targets, const uint8_t *reset,
                            const real *h0, const real *c0, int B, int T) {
    const MlstmConfig *c = &m->cfg;
    if (B > m->B || T > m->T) fail("mlstm_forward: B=%d T=%d exceed the buffers' B=%d T=%d", B, T, m->B, m->T);
    const int D = c->D, H = c->H, V = c->V, N = B * T;
    m->inputs = inputs; m->targets = targets; m->reset = reset; m->b = B; m->t = T;
    if (c->wnorm) {  // W = g V / ||V|| for the four cell matrices
        weightnorm_forward(m->Wx, m->norms, m->p.t[P_WX], m->p.t[P_GX], 4 * H, D);
        weightnorm_forward(m->Wh, m->norms + 4 * H, m->p.t[P_WH], m->p.t[P_GH], 4 * H, H);
        weightnorm_forward(m->Wmx, m->norms + 8 * H, m->p.t[P_WMX], m->p.t[P_GMX], H, D);
        weightnorm_forward(m->Wmh, m->norms + 9 * H, m->p.t[P_WMH], m->p.t[P_GMH], H, H);
    }
    // embedding gather, time-major: xe[t,b,:] = E[inputs[b,t],:]
    for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++)
            memcpy(m->xe + ((size_t)t * B + b) * D, m->p.t[P_E] + (size_t)inputs[b * T + t] * D, D * sizeof(real));
    // input projections for all T steps at once: zx = e W_x^T + b (N,4H), mx = e W_mx^T (N,H)
    MATMUL_NT(m->zx, m->xe, m->Wx, m->p.t[P_B], N, D, 4 * H, 0);
    MATMUL_NT(m->mx, m->xe, m->Wmx, NULL, N, D, H, 0);
    memcpy(m->hs, h0, sizeof(real) * B * H);
    memcpy(m->cs, c0, sizeof(real) * B * H);
    const real *Wmh = m->Wmh, *Wh = m->Wh;  // the weights as the time loop reads them
#ifdef MLSTM_FAST  // gemm.h hook 5: packed once, used by all T steps
    gemm_pack_nt(m->pack_mh, m->Wmh, H, H); gemm_pack_nt(m->pack_h, m->Wh, 4 * H, H);
    Wmh = m->pack_mh; Wh = m->pack_h;
#endif
    #pragma omp parallel
    {
        int b0, b1;
        thread_rows(B, &b0, &b1);
        for (int t = 0; t < T; t++) {
            const size_t s = (size_t)t * B * H;  // offset of step t in (T,B,H) arrays
            const real *hp = m->hs + s, *cp = m->cs + s, *mx = m->mx + s;
            real *mh = m->mh + s, *mm = m->m + s, *hn = m->hs + s + (size_t)B * H, *cn = m->cs + s + (size_t)B * H;
            real *z = m->zx + (size_t)t * B * 4 * H;
            MATMUL_NT_ROWS(mh, hp, Wmh, b0, b1, H, H, 0);                  // h_{t-1} W_mh^T   (B,H)
            for (int b = b0; b < b1; b++) {
                real *mhb = mh + (size_t)b * H;
                if (is_reset(m, b, t)) memset(mhb, 0, H * sizeof(real));  // a boundary: h = c = 0
                for (int j = 0; j < H; j++) mm[(size_t)b * H + j] = mx[(size_t)b * H + j] * mhb[j];  // m = (W_mx e) * (W_mh h)
            }
            MATMUL_NT_ROWS(z, mm, Wh, b0, b1, H, 4 * H, 1);                // z += m_t W_h^T   (B,4H)
            for (int b = b0; b < b1; b++) {  // gemm.h hook 8: row pointers and a simd loop, so the cell vectorises
                const int keep = !is_reset(m, b, t);
                const real *cpb = cp + (size_t)b * H;
                real *zb = z + (size_t)b * 4 * H, *cnb = cn + (size_t)b * H, *hnb = hn + (size_t)b * H;
                #pragma omp simd
                for (int j = 0; j < H; j++) {
                    real c_prev = cpb[j];
                    cnb[j] = cell_forward(zb + j, H, keep ? c_prev : 0, &hnb[j]);
                }
            }
        }
    }
    // output layer and softmax over all T*B rows; the loss accumulates in double
    MATMUL_NT(m->probs, m->hs + (size_t)B * H, m->p.t[P_WOUT], m->p.t[P_BOUT], N, H, V, 0);
    double loss = 0;
    // per-prediction losses, then one sum in a fixed order (an OpenMP reduction adds
    // the threads' parts in the order they finish, which would change the last bits)
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        real *p = m->probs + (size_t)n * V, mx = p[0], sum = 0;
        int t = n / B, b = n % B;
        for (int v = 1; v < V; v++) mx = p[v] > mx ? p[v] : mx;
        real target_logit = p[targets[b * T + t]];
        for (int v = 0; v < V; v++) { p[v] = exp(p[v] - mx); sum += p[v]; }
        for (int v = 0; v < V; v++) p[v] /= sum;
        m->losses[n] = (double)mx + log((double)sum) - (double)target_logit;  // -log softmax, without log(0)
    }
    for (int n = 0; n < N; n++) loss += m->losses[n];
    return loss / N;
}

// ----------------------------------------------------------------------------
// Backward through time for the last forward. Seeds d(loss)/d(loss) = scale
// (the loss scale S of DESIGN section 3; 1 in FP32), overwrites m->grads with
// scale * d(mean loss)/d(params), and writes scale * d(loss)/d(h0, c0) into
// m->dh0, m->dc0. The weight gradients are single products over all T*B rows
// after the time loop; inside the loop only the two (B,H)x(H,*) products remain.

static inline void mlstm_backward(Mlstm *m, real scale) {
    const MlstmConfig *c = &m->cfg;
    const int D = c->D, H = c->H, V = c->V, B = m->b, T = m->t, N = B * T;
    memset(m->grads, 0, m->nparams * sizeof(real));
    if (c->wnorm) memset(m->dWx, 0, sizeof(real) * ((size_t)4 * H * D + (size_t)4 * H * H + (size_t)H * D + (size_t)H * H));
    // softmax + cross-entropy: dlogits = (p - onehot) * scale / N, in place of probs
    real s = scale / N;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        real *p = m->probs + (size_t)n * V;
        p[m->targets[(n % B) * T + n / B]] -= 1;
        for (int v = 0; v < V; v++) p[v] *= s;
    }
    MATMUL_TN(m->g.t[P_WOUT], m->probs, m->hs + (size_t)B * H, N, V, H);  // dW_out = dlogits^T h
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) m->g.t[P_BOUT][v] += m->probs[(size_t)n * V + v];
    MATMUL_NN(m->dhs, m->probs, m->p.t[P_WOUT], N, V, H, 0);              // dh_t from the output layer
    // the time loop, last step first
    memset(m->dh, 0, sizeof(real) * B * H);
    memset(m->dc, 0, sizeof(real) * B * H);
    const real *Wmh = m->Wmh, *Wh = m->Wh;  // the weights as the time loop reads them
#ifdef MLSTM_FAST  // gemm.h hook 6: packed once (the other way round from forward), used by all T steps
    gemm_pack_nn(m->pack_mh, m->Wmh, H, H); gemm_pack_nn(m->pack_h, m->Wh, 4 * H, H);
    Wmh = m->pack_mh; Wh = m->pack_h;
#endif
    #pragma omp parallel
    {
        int b0, b1;
        thread_rows(B, &b0, &b1);
        for (int t = T - 1; t >= 0; t--) {
            const size_t s = (size_t)t * B * H;
            const real *gates = m->zx + (size_t)t * B * 4 * H, *cp = m->cs + s, *cn = cp + (size_t)B * H;
            const real *dhs = m->dhs + s, *mx = m->mx + s, *mh = m->mh + s;
            real *dz = m->dz + (size_t)t * B * 4 * H, *dmx = m->dmx + s, *dmh = m->dmh + s;
            for (int b = b0; b < b1; b++) {  // gemm.h hook 8: row pointers and a simd loop, so the cell vectorises
                const int keep = !is_reset(m, b, t);
                const size_t r = (size_t)b * H, r4 = (size_t)b * 4 * H;
                const real *gb = gates + r4, *cpb = cp + r, *cnb = cn + r, *dhsb = dhs + r, *dhb = m->dh + r;
                real *dcb = m->dc + r, *dzb = dz + r4;
                #pragma omp simd
                for (int j = 0; j < H; j++) {
                    real c_prev = cpb[j];
                    real dc = cell_backward(gb + j, H, keep ? c_prev : 0, cnb[j], dhb[j] + dhsb[j], dcb[j], dzb + j);
                    dcb[j] = keep ? dc : 0;  // a reset cuts the state: nothing flows back
                }
            }
            MATMUL_NN_ROWS(m->dm, dz, Wh, b0, b1, 4 * H, H, 0);          // dm = dz W_h   (B,H)
            for (int b = b0; b < b1; b++)
                for (int j = 0; j < H; j++) {  // after a reset mh = 0 and h_{t-1} is a constant zero
                    size_t i = (size_t)b * H + j;
                    dmx[i] = m->dm[i] * mh[i];
                    dmh[i] = is_reset(m, b, t) ? 0 : m->dm[i] * mx[i];
                }
            MATMUL_NN_ROWS(m->dh, dmh, Wmh, b0, b1, H, H, 0);            // dh_{t-1} = dmh W_mh
        }
    }
    memcpy(m->dh0, m->dh, sizeof(real) * B * H);
    memcpy(m->dc0, m->dc, sizeof(real) * B * H);
    // weight gradients over all T*B rows. hs[0..T-1] are the states entering each
    // step; where a row was reset its dmh is zero, so dW_mh needs no special case.
    MATMUL_TN(m->dWh, m->dz, m->m, N, 4 * H, H);     // dW_h  = dz^T m
    MATMUL_TN(m->dWx, m->dz, m->xe, N, 4 * H, D);    // dW_x  = dz^T e
    MATMUL_TN(m->dWmx, m->dmx, m->xe, N, H, D);      // dW_mx = dmx^T e
    MATMUL_TN(m->dWmh, m->dmh, m->hs, N, H, H);      // dW_mh = dmh^T h_{t-1}
    for (int n = 0; n < N; n++)
        for (int j = 0; j < 4 * H; j++) m->g.t[P_B][j] += m->dz[(size_t)n * 4 * H + j];
    // embedding: scatter-add dxe = dz W_x + dmx W_mx into the rows of E
    MATMUL_NN(m->dxe, m->dz, m->Wx, N, 4 * H, D, 0);
    MATMUL_NN(m->dxe, m->dmx, m->Wmx, N, H, D, 1);
    for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++) {
            real *dE = m->g.t[P_E] + (size_t)m->inputs[b * T + t] * D;
            const real *d = m->dxe + ((size_t)t * B + b) * D;
            for (int k = 0; k < D; k++) dE[k] += d[k];
        }
    if (c->wnorm) {
        weightnorm_backward(m->g.t[P_WX], m->g.t[P_GX], m->dWx, m->p.t[P_WX], m->p.t[P_GX], m->norms, 4 * H, D);
        weightnorm_backward(m->g.t[P_WH], m->g.t[P_GH], m->dWh, m->p.t[P_WH], m->p.t[P_GH], m->norms + 4 * H, 4 * H, H);
        weightnorm_backward(m->g.t[P_WMX], m->g.t[P_GMX], m->dWmx, m->p.t[P_WMX], m->p.t[P_GMX], m->norms + 8 * H, H, D);
        weightnorm_backward(m->g.t[P_WMH], m->g.t[P_GMH], m->dWmh, m->p.t[P_WMH], m->p.t[P_GMH], m->norms + 9 * H, H, H);
    }
}

// ----------------------------------------------------------------------------
// Adam (Kingma and Ba 2015) on the master weights, no weight decay. step is the
// 1-based count of applied updates (the bias correction); grads are already
// unscaled and clipped by the caller.

typedef struct { double lr, beta1, beta2, eps; } AdamConfig;
static const AdamConfig adam_defaults = {5e-4, 0.9, 0.999, 1e-8};

static inline void adam_update(real *params, const real *grads, real *mom1, real *mom2, size_t n, AdamConfig a, long step) {
    double bc1 = 1 - pow(a.beta1, (double)step), bc2 = 1 - pow(a.beta2, (double)step);
    real lr_t = (real)(a.lr / bc1), b1 = (real)a.beta1, b2 = (real)a.beta2;
    real eps = (real)a.eps, rbc2 = (real)(1 / sqrt(bc2));
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        real g = grads[i];
        mom1[i] = b1 * mom1[i] + (1 - b1) * g;
        mom2[i] = b2 * mom2[i] + (1 - b2) * g * g;
        params[i] -= lr_t * mom1[i] / (sqrt(mom2[i]) * rbc2 + eps);
    }
}

// Global L2 norm of a gradient buffer, accumulated in double.
// Global L2 norm of a gradient buffer, in double: 256 fixed chunks summed in
// order, so the clip factor (and so the weights) do not depend on the threads.
static inline double grad_norm(const real *g, size_t n) {
    double part[256] = {0}, s = 0;
    size_t chunk = (n + 255) / 256;
    #pragma omp parallel for schedule(static)
    for (int c = 0; c < 256; c++) {
        size_t i1 = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        for (size_t i = c * chunk; i < i1; i++) part[c] += (double)g[i] * g[i];
    }
    for (int c = 0; c < 256; c++) s += part[c];
    return sqrt(s);
}

// ----------------------------------------------------------------------------
// Checkpoints (DESIGN section 7; byte layout in doc/formats.md). A 256-byte
// little-endian header, then FP32 master weights, Adam moments, and the carried
// state of all G rows of the global batch. The checksum covers the header (with
// its checksum field zero) and the payload. Written whole or not at all.

#define CKPT_MAGIC "MLSTMCKP"
#define CKPT_VERSION 1
#define CKPT_HEADER_BYTES 256
#define CKPT_SCALER_BYTES 48

typedef struct {
    uint64_t step;       // applied (non-skipped) updates: Adam's step and the schedule's
    uint64_t data_step;  // global batches consumed, skipped ones included: the loader position
    uint64_t rng;        // the trainer's RNG state (sampling)
    int G;               // rows of carried state (world * B)
    uint8_t scaler[CKPT_SCALER_BYTES];  // the loss scaler's serialised state (schedule.h)
} TrainState;

typedef struct {
    MlstmConfig cfg;
    uint64_t nparams, payload_bytes;
    TrainState st;
} CkptHeader;


static inline uint64_t ckpt_payload_bytes(const MlstmConfig *c, uint64_t nparams, int G) {
    return 4 * (3 * nparams + 2 * (uint64_t)G * c->H);
}

// Writes a real array as FP32, feeding the checksum.
static inline void ckpt_write_f32(AtomicFile *af, uint64_t *h, const real *x, size_t n) {
    float buf[4096];
    for (size_t i = 0; i < n; i += 4096) {
        size_t k = n - i < 4096 ? n - i : 4096;
        for (size_t j = 0; j < k; j++) buf[j] = (float)x[i + j];
        *h = checksum_update(*h, buf, k * 4);
        atomic_write(af, buf, k * 4);
    }
}

// h, c: (G,H) carried state of the whole global batch.
static inline void checkpoint_save(const char *path, const Mlstm *m, const TrainState *st, const real *h, const real *c) {
    uint8_t hd[CKPT_HEADER_BYTES] = {0};
    memcpy(hd, CKPT_MAGIC, 8);
    put32(hd + 8, CKPT_VERSION); put32(hd + 12, CKPT_HEADER_BYTES);
    put32(hd + 16, m->cfg.V); put32(hd + 20, m->cfg.D); put32(hd + 24, m->cfg.H); put32(hd + 28, m->cfg.wnorm);
    put64(hd + 32, m->nparams); put32(hd + 40, st->G);
    put64(hd + 48, st->step); put64(hd + 56, st->data_step); put64(hd + 64, st->rng);
    memcpy(hd + 72, st->scaler, CKPT_SCALER_BYTES);
    put64(hd + 120, ckpt_payload_bytes(&m->cfg, m->nparams, st->G));
    // the checksum (bytes 128..135) is computed with its own field zero, then patched in
    AtomicFile af;
    atomic_open(&af, path);
    uint64_t sum = checksum_update(CHECKSUM_INIT, hd, CKPT_HEADER_BYTES);
    atomic_write(&af, hd, CKPT_HEADER_BYTES);
    ckpt_write_f32(&af, &sum, m->params, m->nparams);
    ckpt_write_f32(&af, &sum, m->adam_m, m->nparams);
    ckpt_write_f32(&af, &sum, m->adam_v, m->nparams);
    ckpt_write_f32(&af, &sum, h, (size_t)st->G * m->cfg.H);
    ckpt_write_f32(&af, &sum, c, (size_t)st->G * m->cfg.H);
    put64(hd + 128, checksum_final(sum));
    if (fseek(af.f, 128, SEEK_SET) != 0) { atomic_abort(&af); fail("cannot write %s: seek failed", path); }
    atomic_write(&af, hd + 128, 8);
    atomic_commit(&af);
}

// Reads and validates a checkpoint's header and checksum (the whole file is read
// once). Any problem is fatal with a message naming the file.
static inline void checkpoint_header(const char *path, CkptHeader *out) {
    FILE *f = fopen(path, "rb");
    if (!f) fail("cannot open checkpoint %s: %s", path, strerror(errno));
    uint8_t hd[CKPT_HEADER_BYTES];
    size_t got = fread(hd, 1, CKPT_HEADER_BYTES, f);
    if (got >= 8 && memcmp(hd, CKPT_MAGIC, 8) != 0) { fclose(f); fail("%s is not an mlstm checkpoint (bad magic)", path); }
    if (got < CKPT_HEADER_BYTES) { fclose(f); fail("checkpoint %s is truncated: %zu bytes, the header alone is %d", path, got, CKPT_HEADER_BYTES); }
    uint32_t version = get32(hd + 8);
    if (version != CKPT_VERSION) { fclose(f); fail("checkpoint %s has format version %u; this build reads version %d", path, version, CKPT_VERSION); }
    out->cfg.V = (int)get32(hd + 16); out->cfg.D = (int)get32(hd + 20); out->cfg.H = (int)get32(hd + 24); out->cfg.wnorm = (int)get32(hd + 28);
    out->nparams = get64(hd + 32);
    out->st.G = (int)get32(hd + 40);
    out->st.step = get64(hd + 48); out->st.data_step = get64(hd + 56); out->st.rng = get64(hd + 64);
    memcpy(out->st.scaler, hd + 72, CKPT_SCALER_BYTES);
    out->payload_bytes = get64(hd + 120);
    uint64_t want_sum = get64(hd + 128);
    if (out->cfg.V != 256 || out->cfg.D < 1 || out->cfg.H < 1 || out->st.G < 1 || (out->cfg.wnorm & ~1) ||
        out->nparams != param_count(&out->cfg) || out->payload_bytes != ckpt_payload_bytes(&out->cfg, out->nparams, out->st.G)) {
        fclose(f); fail("checkpoint %s has an inconsistent header (corrupt file)", path);
    }
    put64(hd + 128, 0);
    uint64_t sum = checksum_update(CHECKSUM_INIT, hd, CKPT_HEADER_BYTES), total = 0;
    static uint8_t buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) { sum = checksum_update(sum, buf, k); total += k; }
    fclose(f);
    if (total < out->payload_bytes)
        fail("checkpoint %s is truncated: payload %llu bytes, the header says %llu", path,
             (unsigned long long)total, (unsigned long long)out->payload_bytes);
    if (total > out->payload_bytes)
        fail("checkpoint %s has %llu bytes after the payload (corrupt file)", path, (unsigned long long)(total - out->payload_bytes));
    if (checksum_final(sum) != want_sum) fail("checkpoint %s fails its checksum (corrupt file)", path);
}

static inline void ckpt_read_f32(FILE *f, real *x, size_t n) {
    float buf[4096];
    for (size_t i = 0; i < n; i += 4096) {
        size_t k = n - i < 4096 ? n - i : 4096;
        if (fread(buf, 4, k, f) != k) fail("checkpoint changed while being read");
        for (size_t j = 0; j < k; j++) x[i + j] = buf[j];
    }
}

// Loads a checkpoint into a model built with the config the command line asks
// for, and the carried state of G rows into h, c (G,H). A different config or G
// is an error that names both.
static inline void checkpoint_load(const char *path, Mlstm *m, TrainState *st, real *h, real *c, int G) {
    CkptHeader hd;
    checkpoint_header(path, &hd);
    const MlstmConfig *w = &m->cfg;
    if (hd.cfg.D != w->D || hd.cfg.H != w->H || hd.cfg.wnorm != w->wnorm)
        fail("checkpoint %s is a model with D=%d H=%d weight-norm=%d; the command line asks for D=%d H=%d weight-norm=%d",
             path, hd.cfg.D, hd.cfg.H, hd.cfg.wnorm, w->D, w->H, w->wnorm);
    if (hd.st.G != G)
        fail("checkpoint %s carries state for a global batch of %d rows; the command line asks for %d (world x --batch)",
             path, hd.st.G, G);
    FILE *f = fopen(path, "rb");
    if (!f || fseek(f, CKPT_HEADER_BYTES, SEEK_SET) != 0) fail("cannot read checkpoint %s", path);
    ckpt_read_f32(f, m->params, m->nparams);
    ckpt_read_f32(f, m->adam_m, m->nparams);
    ckpt_read_f32(f, m->adam_v, m->nparams);
    ckpt_read_f32(f, h, (size_t)G * w->H);
    ckpt_read_f32(f, c, (size_t)G * w->H);
    fclose(f);
    *st = hd.st;
}
