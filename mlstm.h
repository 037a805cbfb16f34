// mlstm.h: the pure-C reference of the multiplicative LSTM language model of
// Krause et al. 2016 as trained at scale by Radford et al. 2017 and Puri et al. 2018.
// It is the truth that every other number in this project is checked against.
// Top to bottom: the config and the parameter layout (one contiguous buffer; the
// table of the four weight-normed matrices), the model's buffers and initialisation,
// the matmuls, the cell and the other pointwise math shared with the GPU, weight
// norm, the forward pass over T steps from a carried state (the model's equations
// stand above it, each tagged with its function), backward through time, Adam, and
// sampling a byte (the file that holds a model is harness/checkpoint.h's). Plain C11 and
// plain loops, libm's exp and tanh; gcc, clang and nvcc's host compiler all build it. The
// CPU trainer runs the same model through fast.h, which reuses the pieces of the forward
// and backward defined here.
// Define MLSTM_REAL as double before including it to build the same code in double
// precision (the gradient check does).
#pragma once
#include "util.h"     // defines: fail, mallocCheck, checksum_*, put32/get32, rng_*, AtomicFile
#include <assert.h>  // static_assert
#include <stddef.h>  // offsetof
#ifdef __cplusplus
#include <cmath>
#else
#include <tgmath.h>  // exp, tanh, sqrt in the precision of `real`
#endif

#ifndef MLSTM_REAL
#define MLSTM_REAL float
#endif
typedef MLSTM_REAL real;

// ----------------------------------------------------------------------------
// Config and the parameter layout (doc/design.md, "The model"). Weights are row-major
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
    for (int i = 0; i < NPARAM; i++) {
        rows[i] = r[i];
        cols[i] = k[i];
    }
}
static inline size_t param_count(const MlstmConfig *c) {
    size_t rows[NPARAM], cols[NPARAM], n = 0;
    param_shapes(c, rows, cols);
    for (int i = 0; i < NPARAM; i++) n += rows[i] * cols[i];
    return n;
}
// Forward FLOPs per character (doc/design.md, "The model"); training is about 3x this.
static inline double flops_per_char(const MlstmConfig *c) {
    double D = c->D, H = c->H, V = c->V;
    return 2.0 * (5 * H * D + 5 * H * H + V * H);
}

// A pointer table into one buffer: t[P_WX] etc. Used for parameters and gradients alike.
typedef struct {
    real *t[NPARAM];
    size_t n[NPARAM];
} ParamTable;
static inline void param_table(ParamTable *pt, const MlstmConfig *c, real *base) {
    size_t rows[NPARAM], cols[NPARAM], off = 0;
    param_shapes(c, rows, cols);
    for (int i = 0; i < NPARAM; i++) {
        pt->t[i] = base + off;
        pt->n[i] = rows[i] * cols[i];
        off += pt->n[i];
    }
}

// The four matrices of the cell, the ones weight norm applies to, as one table that
// every place handling them loops over: the direction V (parameter), its gain
// (parameter + 1), rows x cols, where the matrix starts in a buffer holding all four
// back to back (the effective weights and their gradients), and where its row norms
// start in `norms` (10H: x 4H, h 4H, mx H, mh H).
enum { WN_X, WN_H, WN_MX, WN_MH, NWN };
typedef struct {
    int param, gain;   // P_WX, P_GX etc.
    size_t rows, cols;
    size_t offset;     // in the (weightnorm_elems,) buffer of all four
    size_t norm_offset;
} WnMat;
static inline void weightnorm_mats(const MlstmConfig *c, WnMat wn[NWN]) {
    static const int params[NWN] = {P_WX, P_WH, P_WMX, P_WMH};
    size_t rows[NPARAM], cols[NPARAM], offset = 0, norm_offset = 0;
    param_shapes(c, rows, cols);
    for (int k = 0; k < NWN; k++) {
        int p = params[k];
        wn[k] = (WnMat){p, p + 1, rows[p], cols[p], offset, norm_offset};
        offset += rows[p] * cols[p];
        norm_offset += rows[p];
    }
}
// Elements of all four matrices (4HD + 4HH + HD + HH), and rows of all four (10H).
static inline size_t weightnorm_elems(const MlstmConfig *c) {
    WnMat wn[NWN];
    weightnorm_mats(c, wn);
    return wn[NWN - 1].offset + wn[NWN - 1].rows * wn[NWN - 1].cols;
}
static inline size_t weightnorm_rows(const MlstmConfig *c) {
    WnMat wn[NWN];
    weightnorm_mats(c, wn);
    return wn[NWN - 1].norm_offset + wn[NWN - 1].rows;
}

// ----------------------------------------------------------------------------
// The model: parameters, gradients, Adam moments, effective weights and every
// activation the backward pass needs, all allocated once for at most B rows and
// T steps. Activations are time-major, (T, B, ...), so the input projections and
// the weight gradients are single matmuls over all T*B rows. `m` is always an
// Mlstm in this file; the activation m_t is `mt`.

typedef struct {
    MlstmConfig cfg;
    int B, T;                 // capacity: rows and time steps
    size_t nparams;
    real *params, *grads;     // (nparams,) each; params are the FP32 master weights
    real *adam_m, *adam_v;    // (nparams,) Adam moments
    ParamTable p, g;          // named views of params and grads
    // effective weights W[WN_X] (4H,D), W[WN_H] (4H,H), W[WN_MX] (H,D), W[WN_MH] (H,H): with
    // weight norm computed from (V, g) into one buffer; without, they alias the params
    real *W[NWN];
    real *dW[NWN];            // their gradients (alias grads without weight norm)
    real *norms;              // (10H,) ||V_j|| of every normalised row, at WnMat.norm_offset
    // forward activations
    const uint8_t *inputs, *targets, *reset;  // (B,T) each, kept from forward for backward
    int b, t;                 // rows and steps of the last forward
    real *xe;                 // (T,B,D) embedded inputs
    union {                   // (T,B,4H), one buffer under the name of what it holds at each point:
        real *z;              //   the pre-activations: e W_x^T + b, to which step t adds m_t W_h^T;
        real *gates;          //   from cell_forward on, in place, the gates i,f,o,u that backward reads
    };
    real *mx, *mh;            // (T,B,H) e W_mx^T and h_{t-1} W_mh^T
    real *mt;                 // (T,B,H) m_t, their product
    real *hs, *cs;            // (T+1,B,H) state entering step t at index t (index 0: carried in; T: out)
    union {                   // (T,B,V), likewise:
        real *logits;         //   h W_out^T + b_out;
        real *probs;          //   from softmax_xent on, in place, their softmax;
        real *dlogits;        //   from backward_begin on, in place, d(loss)/d(logits)
    };
    double *losses;           // (T*B,) cross-entropy of each prediction
    // backward
    real *dz;                 // (T,B,4H) gradient of the gate pre-activations
    real *dmx, *dmh;          // (T,B,H)
    real *dhs;                // (T,B,H) gradient into h_t from the output layer
    real *dh, *dc;            // (B,H) running gradients of the time loop
    real *dm;                 // (B,H) gradient of m_t, one step
    real *dxe;                // (T,B,D)
    real *dh0, *dc0;          // (B,H) gradient into the carried-in state
} Mlstm;

// ----------------------------------------------------------------------------
// Construction and initialisation

// 64-byte aligned and zeroed: vector loops then split the same way in every run,
// whatever else the process allocated first, so results repeat bit for bit.
static inline real *mlstm_alloc(size_t n) {
    void *p = NULL;
    if (n > (SIZE_MAX - 63) / sizeof(real)) alloc_failed(n, sizeof(real), __FILE__, __LINE__);
    size_t bytes = (n * sizeof(real) + 63) / 64 * 64;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) alloc_failed(bytes, 1, __FILE__, __LINE__);
    memset(p, 0, bytes);
    return (real *)p;
}

static inline void mlstm_build(Mlstm *m, MlstmConfig cfg, int B, int T) {
    memset(m, 0, sizeof *m);
    if (cfg.V != 256 || cfg.D < 1 || cfg.H < 1 || B < 1 || T < 1)
        fail("bad model size V=%d D=%d H=%d B=%d T=%d (V must be 256, the rest positive)", cfg.V, cfg.D, cfg.H, B, T);
    m->cfg = cfg;
    m->B = B;
    m->T = T;
    size_t V = cfg.V, D = cfg.D, H = cfg.H, BT = (size_t)B * T;
    m->nparams = param_count(&cfg);
    m->params = mlstm_alloc(m->nparams);
    m->grads = mlstm_alloc(m->nparams);
    m->adam_m = mlstm_alloc(m->nparams);
    m->adam_v = mlstm_alloc(m->nparams);
    param_table(&m->p, &cfg, m->params);
    param_table(&m->g, &cfg, m->grads);
    WnMat wn[NWN];
    weightnorm_mats(&cfg, wn);
    size_t nW = weightnorm_elems(&cfg);
    real *w = cfg.wnorm ? mlstm_alloc(2 * nW) : NULL;  // the effective weights, then their gradients
    for (int k = 0; k < NWN; k++) {
        m->W[k] = cfg.wnorm ? w + wn[k].offset : m->p.t[wn[k].param];
        m->dW[k] = cfg.wnorm ? w + nW + wn[k].offset : m->g.t[wn[k].param];
    }
    if (cfg.wnorm) m->norms = mlstm_alloc(weightnorm_rows(&cfg));
    m->xe = mlstm_alloc(BT * D);
    m->gates = mlstm_alloc(BT * 4 * H);
    m->mx = mlstm_alloc(BT * H);
    m->mh = mlstm_alloc(BT * H);
    m->mt = mlstm_alloc(BT * H);
    m->hs = mlstm_alloc(BT * H + B * H);
    m->cs = mlstm_alloc(BT * H + B * H);
    m->probs = mlstm_alloc(BT * V);
    m->losses = (double *)mallocCheck(BT * sizeof(double));
    m->dz = mlstm_alloc(BT * 4 * H);
    m->dmx = mlstm_alloc(BT * H);
    m->dmh = mlstm_alloc(BT * H);
    m->dhs = mlstm_alloc(BT * H);
    m->dh = mlstm_alloc(B * H);
    m->dc = mlstm_alloc(B * H);
    m->dm = mlstm_alloc(B * H);
    m->dxe = mlstm_alloc(BT * D);
    m->dh0 = mlstm_alloc(B * H);
    m->dc0 = mlstm_alloc(B * H);
}

static inline void mlstm_free(Mlstm *m) {
    real *bufs[] = {m->params, m->grads, m->adam_m, m->adam_v, m->norms, m->xe, m->gates, m->mx, m->mh, m->mt,
                    m->hs, m->cs, m->probs, m->dz, m->dmx, m->dmh, m->dhs, m->dh, m->dc, m->dm, m->dxe,
                    m->dh0, m->dc0};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    if (m->cfg.wnorm) free(m->W[WN_X]);  // the start of the one buffer of all four
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
            for (size_t j = 0; j < rows[id]; j++) {  // the gain after V: param + 1
                const real *v = m->p.t[id] + j * cols[id];
                double n2 = 0;
                for (size_t q = 0; q < cols[id]; q++) n2 += (double)v[q] * v[q];
                m->p.t[id + 1][j] = (real)sqrt(n2);
            }
    }
    memset(m->adam_m, 0, m->nparams * sizeof(real));
    memset(m->adam_v, 0, m->nparams * sizeof(real));
}

// ----------------------------------------------------------------------------
// Matmuls: the three layouts the model needs (the same three the GPU trainer writes
// with tensor cores, and fast.h with gemm.h), as plain loops. Each output element is
// computed by one thread in a fixed order, so results do not depend on the number of
// threads.
//
// Every matmul of the project (these, gemm.h's, train.cu's) gives its sizes in one order,
// (rows, cols, depth): the output is rows x cols, each element a sum over depth (BLAS's
// M, N, K). Whether the output is overwritten or added to is said by name.
typedef enum { MATMUL_SET, MATMUL_ADD } MatmulInto;

// Whether a loop of `work` multiply-adds (or elements) is worth waking the threads for:
// at the tests' small sizes a parallel region costs more than the loop (tens of
// microseconds on a loaded machine). Which thread computes an element never changes it.
static inline int worth_threads(double work) { return work >= 65536; }

// out (N,O) = [out +] in (N,K) . W (O,K)^T [+ bias (O,)]: one dot product per element
static inline void matmul_nt(real *out, const real *in, const real *W, const real *bias, int N, int O, int K,
                             MatmulInto into) {
    #pragma omp parallel for schedule(static) if (worth_threads((double)N * K * O))
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            const real *x = in + (size_t)n * K, *w = W + (size_t)o * K;
            real a = 0;
            #pragma omp simd reduction(+ : a)
            for (int k = 0; k < K; k++) a += x[k] * w[k];
            real *y = out + (size_t)n * O + o;
            *y = (into == MATMUL_ADD ? *y : 0) + a + (bias ? bias[o] : 0);
        }
}

// dIn (N,K) = [dIn +] dOut (N,O) . W (O,K): the rows of W, scaled and added
static inline void matmul_nn(real *dIn, const real *dOut, const real *W, int N, int K, int O, MatmulInto into) {
    #pragma omp parallel for schedule(static) if (worth_threads((double)N * K * O))
    for (int n = 0; n < N; n++) {
        real *y = dIn + (size_t)n * K;
        if (into == MATMUL_SET) memset(y, 0, sizeof(real) * K);
        for (int o = 0; o < O; o++) {
            const real a = dOut[(size_t)n * O + o], *w = W + (size_t)o * K;
            #pragma omp simd
            for (int k = 0; k < K; k++) y[k] += a * w[k];
        }
    }
}

// dW (O,K) += dOut (N,O)^T . in (N,K), summed over the N rows in order
static inline void matmul_tn(real *dW, const real *dOut, const real *in, int O, int K, int N) {
    #pragma omp parallel for schedule(static) if (worth_threads((double)N * K * O))
    for (int o = 0; o < O; o++) {
        real *y = dW + (size_t)o * K;
        for (int n = 0; n < N; n++) {
            const real a = dOut[(size_t)n * O + o], *x = in + (size_t)n * K;
            #pragma omp simd
            for (int k = 0; k < K; k++) y[k] += a * x[k];
        }
    }
}

// ----------------------------------------------------------------------------
// Pointwise math, one definition for the CPU and the GPU (train.cu compiles
// these as __host__ __device__). On the CPU they are always inlined: fast.h's
// vectorised cell loop calls cell_backward_given_tanh, and `omp simd` needs the call
// inlined (clang declined that where a program also called the function elsewhere).
#ifdef __CUDACC__
#define HOSTDEV __host__ __device__
#else
#define HOSTDEV __attribute__((always_inline))
#endif
static inline HOSTDEV real sigmoid(real x) { return 1 / (1 + exp(-x)); }

// One mLSTM cell update for one unit (doc/design.md, "The model", gate order i, f, o, u).
// z: pre-activations in, gates out (i,f,o,u at stride H); returns c, writes h.
static inline HOSTDEV real cell_forward(real *z, size_t H, real c_prev, real *h) {
    real i = sigmoid(z[0]);
    real f = sigmoid(z[H]);
    real o = sigmoid(z[2 * H]);
    real u = tanh(z[3 * H]);
    z[0] = i;
    z[H] = f;
    z[2 * H] = o;
    z[3 * H] = u;
    real c = f * c_prev + i * u;
    *h = o * tanh(c);
    return c;
}
// Its backward: gates g (i,f,o,u at stride H), tanh_c = tanh(c_t), dh and dc flowing
// into this step's outputs; writes dz (stride H) and returns the gradient into c_prev.
static inline HOSTDEV real cell_backward_given_tanh(const real *g, size_t H, real c_prev, real tanh_c, real dh,
                                                    real dc, real *dz) {
    real i = g[0], f = g[H], o = g[2 * H], u = g[3 * H], tc = tanh_c;
    dc += dh * o * (1 - tc * tc);
    dz[0] = dc * u * i * (1 - i);
    dz[H] = dc * c_prev * f * (1 - f);
    dz[2 * H] = dh * tc * o * (1 - o);
    dz[3 * H] = dc * i * (1 - u * u);
    return dc * f;
}
// The same from c_t: tanh(c_t) is recomputed, not stored (fast.h passes its own tanh).
static inline HOSTDEV real cell_backward(const real *g, size_t H, real c_prev, real c, real dh, real dc, real *dz) {
    return cell_backward_given_tanh(g, H, c_prev, tanh(c), dh, dc, dz);
}

// Weight norm of one row j, once the row's sums are done (the CPU sums a row
// serially, the GPU across a warp), with n = ||V[j,:]||:
//   forward   W[j,k] = scale V[j,k],  scale = g[j] / n
//   backward  dg[j] = (dW[j,:] . V[j,:]) / n,  dV[j,k] = scale (dW[j,k] - dg[j] V[j,k] / n)
static inline HOSTDEV real weightnorm_scale(real g, real n) { return g / n; }
static inline HOSTDEV real weightnorm_dv(real scale, real dw, real dg, real v, real n) {
    return scale * (dw - dg * v / n);
}

// ----------------------------------------------------------------------------
// Weight norm on the CPU, one row per iteration: the row's sums here, the rest in
// weightnorm_scale / weightnorm_dv above. One call per matrix of the WnMat table.

static inline void weightnorm_forward(real *W, real *norms, const real *Vd, const real *g, int rows, int cols) {
    #pragma omp parallel for schedule(static) if (worth_threads((double)rows * cols))
    for (int j = 0; j < rows; j++) {
        const real *v = Vd + (size_t)j * cols;
        real n2 = 0;
        for (int k = 0; k < cols; k++) n2 += v[k] * v[k];
        real n = sqrt(n2);
        real s = weightnorm_scale(g[j], n);
        norms[j] = n;
        for (int k = 0; k < cols; k++) W[(size_t)j * cols + k] = s * v[k];
    }
}
static inline void weightnorm_backward(real *dV, real *dg, const real *dW, const real *Vd, const real *g,
                                       const real *norms, int rows, int cols) {
    #pragma omp parallel for schedule(static) if (worth_threads((double)rows * cols))
    for (int j = 0; j < rows; j++) {
        const real *v = Vd + (size_t)j * cols, *dw = dW + (size_t)j * cols;
        real n = norms[j], dot = 0;
        for (int k = 0; k < cols; k++) dot += dw[k] * v[k];
        real dgj = dot / n;
        real s = weightnorm_scale(g[j], n);
        dg[j] += dgj;
        for (int k = 0; k < cols; k++) dV[(size_t)j * cols + k] += weightnorm_dv(s, dw[k], dgj, v[k], n);
    }
}

// ----------------------------------------------------------------------------
// The forward pass. The model's equations (doc/design.md, "The model"), for one row
// with input bytes x_t and the state (h_0, c_0) carried in, each tagged with the
// function that computes it (y = x W^T throughout; * is the element-wise product):
//
//   W   = g V / ||V||, per row of W_x, W_h, W_mx, W_mh     forward_begin: weightnorm_forward
//   e_t = E[x_t]                                           forward_begin: the embedding gather
//   e_t W_x^T + b  and  e_t W_mx^T, all t at once          mlstm_forward: matmul_nt before the time loop
//   m_t = (e_t W_mx^T) * (h_{t-1} W_mh^T)                  time loop: matmul_nt, then mt_product
//   z_t = e_t W_x^T + m_t W_h^T + b                        time loop: matmul_nt(..., MATMUL_ADD)
//   i = sigmoid(z_i), f = sigmoid(z_f), o = sigmoid(z_o)   cell_forward
//   u = tanh(z_u)                                          cell_forward
//   c_t = f * c_{t-1} + i * u,  h_t = o * tanh(c_t)        cell_forward
//   p_t = softmax(h_t W_out^T + b_out)                     matmul_nt after the time loop, softmax_xent
//   loss = mean over t, b of -log p_t[x_{t+1}]             softmax_xent; summed in order, in double
//
// Gate order along the 4H rows of W_x, W_h, b and z: i, f, o, u (input, forget,
// output, candidate), as in Radford et al.'s TensorFlow code. PyTorch's LSTM and
// the PyTorch mLSTM of sentiment-discovery order them i, f, u, o: weights ported
// from there swap the last two quarters.
//
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

// What comes before the input projections: the batch kept for backward, W = g V / ||V||
// for the four cell matrices, e_t = E[x_t] time-major (xe[t,b,:] = E[inputs[b,t],:]),
// and the carried state as hs[0], cs[0].
static inline void forward_begin(Mlstm *m, const uint8_t *inputs, const uint8_t *targets, const uint8_t *reset,
                                 const real *h0, const real *c0, int B, int T) {
    const MlstmConfig *c = &m->cfg;
    if (B > m->B || T > m->T) fail("mlstm_forward: B=%d T=%d exceed the buffers' B=%d T=%d", B, T, m->B, m->T);
    m->inputs = inputs;
    m->targets = targets;
    m->reset = reset;
    m->b = B;
    m->t = T;
    if (c->wnorm) {
        WnMat wn[NWN];
        weightnorm_mats(c, wn);
        for (int k = 0; k < NWN; k++)
            weightnorm_forward(m->W[k], m->norms + wn[k].norm_offset, m->p.t[wn[k].param], m->p.t[wn[k].gain],
                               (int)wn[k].rows, (int)wn[k].cols);
    }
    for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++) {
            const real *row = m->p.t[P_E] + (size_t)inputs[b * T + t] * c->D;
            memcpy(m->xe + ((size_t)t * B + b) * c->D, row, c->D * sizeof(real));
        }
    memcpy(m->hs, h0, sizeof(real) * B * c->H);
    memcpy(m->cs, c0, sizeof(real) * B * c->H);
}

// m_t = (e_t W_mx^T) * (h_{t-1} W_mh^T) for rows [b0, b1) of step t, once mh holds
// h_{t-1} W_mh^T; a row reset before step t has h_{t-1} = 0, so its mh is zeroed.
static inline void mt_product(Mlstm *m, int t, int b0, int b1) {
    const int H = m->cfg.H;
    const size_t s = (size_t)t * m->b * H;  // offset of step t in (T,B,H) arrays
    for (int b = b0; b < b1; b++) {
        real *mh = m->mh + s + (size_t)b * H, *mt = m->mt + s + (size_t)b * H;
        const real *mx = m->mx + s + (size_t)b * H;
        if (is_reset(m, b, t)) memset(mh, 0, H * sizeof(real));
        for (int j = 0; j < H; j++) mt[j] = mx[j] * mh[j];
    }
}

// Softmax over the logits, in place (they become probs), and the mean cross-entropy: the
// per-prediction losses, then one sum in a fixed order (an OpenMP reduction adds
// the threads' parts in the order they finish, which would change the last bits).
static inline double softmax_xent(Mlstm *m) {
    const int B = m->b, T = m->t, N = B * T, V = m->cfg.V;
    #pragma omp parallel for schedule(static) if (worth_threads((double)N * V))
    for (int n = 0; n < N; n++) {
        real *p = m->logits + (size_t)n * V, mx = p[0], sum = 0;
        int t = n / B, b = n % B;
        for (int v = 1; v < V; v++) mx = p[v] > mx ? p[v] : mx;
        real target_logit = p[m->targets[b * T + t]];
        for (int v = 0; v < V; v++) {
            p[v] = exp(p[v] - mx);
            sum += p[v];
        }
        for (int v = 0; v < V; v++) p[v] /= sum;
        m->losses[n] = (double)mx + log((double)sum) - (double)target_logit;  // -log softmax, without log(0)
    }
    double loss = 0;
    for (int n = 0; n < N; n++) loss += m->losses[n];
    return loss / N;
}

static inline double mlstm_forward(Mlstm *m, const uint8_t *inputs, const uint8_t *targets, const uint8_t *reset,
                                   const real *h0, const real *c0, int B, int T) {
    forward_begin(m, inputs, targets, reset, h0, c0, B, T);
    const int D = m->cfg.D, H = m->cfg.H, V = m->cfg.V, N = B * T;
    matmul_nt(m->z, m->xe, m->W[WN_X], m->p.t[P_B], N, 4 * H, D, MATMUL_SET);  // e W_x^T + b   (N,4H)
    matmul_nt(m->mx, m->xe, m->W[WN_MX], NULL, N, H, D, MATMUL_SET);               // e W_mx^T      (N,H)
    for (int t = 0; t < T; t++) {
        const size_t s = (size_t)t * B * H;  // offset of step t in (T,B,H) arrays; hs, cs + s: the state entering it
        real *z = m->z + 4 * s;              // holds e W_x^T + b; becomes z_t, then the gates
        matmul_nt(m->mh + s, m->hs + s, m->W[WN_MH], NULL, B, H, H, MATMUL_SET);  // h_{t-1} W_mh^T   (B,H)
        mt_product(m, t, 0, B);                                                   // m_t
        matmul_nt(z, m->mt + s, m->W[WN_H], NULL, B, 4 * H, H, MATMUL_ADD);       // z_t += m_t W_h^T   (B,4H)
        for (int b = 0; b < B; b++)
            for (int j = 0; j < H; j++) {
                const size_t i = s + (size_t)b * H + j, out = i + (size_t)B * H;  // the state in, out
                real c_prev = is_reset(m, b, t) ? 0 : m->cs[i];                    // a boundary: h = c = 0
                m->cs[out] = cell_forward(z + (size_t)b * 4 * H + j, H, c_prev, &m->hs[out]);
            }
    }
    matmul_nt(m->logits, m->hs + (size_t)B * H, m->p.t[P_WOUT], m->p.t[P_BOUT], N, V, H, MATMUL_SET);  // (N,V)
    return softmax_xent(m);
}

// ----------------------------------------------------------------------------
// Backward through time for the last forward. Seeds d(loss)/d(loss) = scale (the
// loss scale S of doc/design.md, "The training step"; 1 in FP32), overwrites
// m->grads with scale * d(mean loss)/d(params), and writes scale * d(loss)/d(h0, c0) into
// m->dh0, m->dc0. The weight gradients are single products over all T*B rows
// after the time loop; inside the loop only the two (B,H)x(H,*) products remain.

// Zeroes the gradients and the running dh, dc, and turns probs into the gradient of
// the logits, in place: dlogits = (p - onehot) * scale / N.
static inline void backward_begin(Mlstm *m, real scale) {
    const int B = m->b, T = m->t, N = B * T, V = m->cfg.V;
    memset(m->grads, 0, m->nparams * sizeof(real));
    if (m->cfg.wnorm) memset(m->dW[WN_X], 0, sizeof(real) * weightnorm_elems(&m->cfg));  // all four, back to back
    memset(m->dh, 0, sizeof(real) * B * m->cfg.H);
    memset(m->dc, 0, sizeof(real) * B * m->cfg.H);
    real s = scale / N;
    #pragma omp parallel for schedule(static) if (worth_threads((double)N * V))
    for (int n = 0; n < N; n++) {
        real *p = m->probs + (size_t)n * V;
        p[m->targets[(n % B) * T + n / B]] -= 1;
        for (int v = 0; v < V; v++) p[v] *= s;
    }
}

// A bias's gradient: db (O,) += the column sums of d (N,O), rows in order.
static inline void bias_grad(real *db, const real *d, int N, int O) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) db[o] += d[(size_t)n * O + o];
}

// Step t's dm = d(loss)/d(m_t) into both factors of m_t, rows [b0, b1): dmx = dm * mh,
// dmh = dm * mx. After a reset mh = 0 and h_{t-1} is a constant zero: dmh = 0.
static inline void mt_backward(Mlstm *m, int t, int b0, int b1) {
    const int H = m->cfg.H;
    const size_t s = (size_t)t * m->b * H;
    for (int b = b0; b < b1; b++)
        for (int j = 0; j < H; j++) {
            size_t i = (size_t)b * H + j;
            m->dmx[s + i] = m->dm[i] * m->mh[s + i];
            m->dmh[s + i] = is_reset(m, b, t) ? 0 : m->dm[i] * m->mx[s + i];
        }
}

// What comes after the weight gradients and dxe: the gradient into the carried state,
// dxe scattered into the rows of E, and dW into the gradients of V and g.
static inline void backward_end(Mlstm *m) {
    const MlstmConfig *c = &m->cfg;
    const int B = m->b, T = m->t, D = c->D;
    memcpy(m->dh0, m->dh, sizeof(real) * B * c->H);
    memcpy(m->dc0, m->dc, sizeof(real) * B * c->H);
    for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++) {
            real *dE = m->g.t[P_E] + (size_t)m->inputs[b * T + t] * D;
            const real *d = m->dxe + ((size_t)t * B + b) * D;
            for (int k = 0; k < D; k++) dE[k] += d[k];
        }
    if (c->wnorm) {
        WnMat wn[NWN];
        weightnorm_mats(c, wn);
        for (int k = 0; k < NWN; k++)
            weightnorm_backward(m->g.t[wn[k].param], m->g.t[wn[k].gain], m->dW[k], m->p.t[wn[k].param],
                                m->p.t[wn[k].gain], m->norms + wn[k].norm_offset, (int)wn[k].rows, (int)wn[k].cols);
    }
}

static inline void mlstm_backward(Mlstm *m, real scale) {
    const int D = m->cfg.D, H = m->cfg.H, V = m->cfg.V, B = m->b, T = m->t, N = B * T;
    backward_begin(m, scale);
    matmul_tn(m->g.t[P_WOUT], m->dlogits, m->hs + (size_t)B * H, V, H, N);  // dW_out = dlogits^T h
    bias_grad(m->g.t[P_BOUT], m->dlogits, N, V);
    matmul_nn(m->dhs, m->dlogits, m->p.t[P_WOUT], N, H, V, MATMUL_SET);     // dh_t from the output layer
    for (int t = T - 1; t >= 0; t--) {  // the time loop, last step first
        const size_t s = (size_t)t * B * H;
        real *dz = m->dz + 4 * s;
        for (int b = 0; b < B; b++)
            for (int j = 0; j < H; j++) {
                const size_t r = (size_t)b * H + j, i = s + r;
                const int keep = !is_reset(m, b, t);
                real dh = m->dh[r] + m->dhs[i];  // from step t+1 and from the output layer
                real dc = cell_backward(m->gates + 4 * s + (size_t)b * 4 * H + j, H, keep ? m->cs[i] : 0,
                                        m->cs[i + (size_t)B * H], dh, m->dc[r], dz + (size_t)b * 4 * H + j);
                m->dc[r] = keep ? dc : 0;  // a reset cuts the state: nothing flows back
            }
        matmul_nn(m->dm, dz, m->W[WN_H], B, H, 4 * H, MATMUL_SET);       // dm = dz W_h   (B,H)
        mt_backward(m, t, 0, B);
        matmul_nn(m->dh, m->dmh + s, m->W[WN_MH], B, H, H, MATMUL_SET);  // dh_{t-1} = dmh W_mh
    }
    // weight gradients over all T*B rows. hs[0..T-1] are the states entering each
    // step; where a row was reset its dmh is zero, so dW_mh needs no special case.
    matmul_tn(m->dW[WN_H], m->dz, m->mt, 4 * H, H, N);    // dW_h  = dz^T m
    matmul_tn(m->dW[WN_X], m->dz, m->xe, 4 * H, D, N);    // dW_x  = dz^T e
    matmul_tn(m->dW[WN_MX], m->dmx, m->xe, H, D, N);      // dW_mx = dmx^T e
    matmul_tn(m->dW[WN_MH], m->dmh, m->hs, H, H, N);      // dW_mh = dmh^T h_{t-1}
    bias_grad(m->g.t[P_B], m->dz, N, 4 * H);
    matmul_nn(m->dxe, m->dz, m->W[WN_X], N, D, 4 * H, MATMUL_SET);  // dxe = dz W_x + dmx W_mx
    matmul_nn(m->dxe, m->dmx, m->W[WN_MX], N, D, H, MATMUL_ADD);
    backward_end(m);
}

// ----------------------------------------------------------------------------
// Adam (Kingma and Ba 2015) on the master weights, no weight decay. step is the
// 1-based count of applied updates (the bias correction); grads are already
// unscaled and clipped by the caller.

typedef struct {
    double lr, beta1, beta2, eps;
} AdamConfig;
static const AdamConfig adam_defaults = {5e-4, 0.9, 0.999, 1e-8};

// The constants of update number `step`, the bias corrections folded in:
// lr_t = lr / (1 - beta1^step), rbc2 = 1 / sqrt(1 - beta2^step).
typedef struct {
    real lr_t, b1, b2, eps, rbc2;
} AdamStep;
static inline AdamStep adam_step(AdamConfig a, long step) {
    double bc1 = 1 - pow(a.beta1, (double)step);
    double bc2 = 1 - pow(a.beta2, (double)step);
    AdamStep s = {(real)(a.lr / bc1), (real)a.beta1, (real)a.beta2, (real)a.eps, (real)(1 / sqrt(bc2))};
    return s;
}
// One parameter's update from its gradient g: one definition for the CPU and the
// GPU (train.cu's Adam kernel calls it after unscaling and clipping g).
static inline HOSTDEV void adam_element(real *param, real *mom1, real *mom2, real g, AdamStep s) {
    *mom1 = s.b1 * *mom1 + (1 - s.b1) * g;
    *mom2 = s.b2 * *mom2 + (1 - s.b2) * g * g;
    *param -= s.lr_t * *mom1 / (sqrt(*mom2) * s.rbc2 + s.eps);
}

// Adam step number `step` over n parameters, each gradient times grad_factor first (a trainer's
// unscale and clip, Puri et al.'s step 7, rounded as a stored gradient is; 1 for none).
static inline void adam_update(real *params, const real *grads, real grad_factor, real *mom1, real *mom2, size_t n,
                               AdamConfig a, long step) {
    AdamStep s = adam_step(a, step);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) adam_element(&params[i], &mom1[i], &mom2[i], grads[i] * grad_factor, s);
}

// Global L2 norm of a gradient buffer, in double: fixed chunks summed in order,
// so the clip factor (and so the weights) do not depend on the threads.
#define GRAD_NORM_CHUNKS 256
static inline double grad_norm(const real *g, size_t n) {
    double part[GRAD_NORM_CHUNKS] = {0}, s = 0;
    size_t chunk = (n + GRAD_NORM_CHUNKS - 1) / GRAD_NORM_CHUNKS;
    #pragma omp parallel for schedule(static)
    for (int c = 0; c < GRAD_NORM_CHUNKS; c++) {
        size_t i1 = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        for (size_t i = c * chunk; i < i1; i++) part[c] += (double)g[i] * g[i];
    }
    for (int c = 0; c < GRAD_NORM_CHUNKS; c++) s += part[c];
    return sqrt(s);
}

// ----------------------------------------------------------------------------
// Sampling the next byte. The distribution is softmax(scores / temperature), cut to
// the top_k most likely bytes (0: no cut), then to the smallest set of most likely
// bytes whose probability, renormalised after the top-k cut, reaches top_p (nucleus
// sampling, Holtzman et al. 2020; 1: no cut), and renormalised. scores are logits or
// log-probabilities: softmax does not change when a constant is added to all.
//
// Computed in double with the largest score subtracted, so the most likely byte has
// weight exp(0) = 1 at any temperature: a tiny temperature degenerates to the argmax
// (raising probabilities to the power 1/temperature instead underflows them all to 0
// and draws byte 0, NUL), temperature 0 is the argmax by definition, and a score of
// -inf (a probability that underflowed to 0) has weight 0 and is never drawn. Ties
// for the largest score are drawn with equal chance.
//
// Returns -1 when there is no distribution to draw from: a score is NaN or +inf, or
// every score is -inf. A model whose weights or state hold NaN/Inf gets there; the
// caller reports it (generate exits with an error, the trainer's sample stops) and
// never prints a byte the model did not mean.

typedef struct {
    double temperature;  // >= 0; 0: the most likely byte
    int top_k;           // 0: off
    double top_p;        // (0, 1]; 1: off
} SamplerConfig;

typedef struct {
    double w;
    int v;
} SampleWeight;
static inline int sample_weight_order(const void *a, const void *b) {  // largest weight first, then lowest byte
    const SampleWeight *x = (const SampleWeight *)a, *y = (const SampleWeight *)b;
    if (x->w != y->w) return x->w > y->w ? -1 : 1;
    return x->v - y->v;
}

// scores: (V,) with V <= 256. rng: the caller's splitmix64 state, one draw per call.
static inline int sample_byte(const real *scores, int V, SamplerConfig s, uint64_t *rng) {
    SampleWeight cand[256];
    double mx = -INFINITY;
    for (int v = 0; v < V; v++) {
        double x = (double)scores[v];
        if (x != x || x == INFINITY) return -1;
        if (x > mx) mx = x;
    }
    if (mx == -INFINITY) return -1;
    for (int v = 0; v < V; v++) {
        double d = (double)scores[v] - mx;  // <= 0; exactly 0 for the largest
        double w = d == -INFINITY ? 0 : s.temperature > 0 ? exp(d / s.temperature) : d == 0;
        cand[v] = (SampleWeight){w, v};
    }
    int n = V;
    if ((s.top_k > 0 && s.top_k < V) || s.top_p < 1) {
        qsort(cand, V, sizeof cand[0], sample_weight_order);
        if (s.top_k > 0 && s.top_k < n) n = s.top_k;
        if (s.top_p < 1) {
            double total = 0, cum = 0;
            for (int i = 0; i < n; i++) total += cand[i].w;
            int keep = 0;
            while (keep < n && (keep == 0 || cum < s.top_p * total)) cum += cand[keep++].w;
            n = keep;
        }
    }
    double sum = 0;
    for (int i = 0; i < n; i++) sum += cand[i].w;  // >= 1: the largest score is among them
    double r = rng_uniform(rng) * sum;               // [0, sum)
    int pick = -1;
    for (int i = 0; i < n; i++) {
        if (cand[i].w <= 0) continue;  // never a byte of zero probability, even when rounding runs past the end
        pick = cand[i].v;
        if (r < cand[i].w) break;
        r -= cand[i].w;
    }
    return pick;
}
