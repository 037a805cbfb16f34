// mlstm.h: the pure-C reference of the multiplicative LSTM language model of
// Krause et al. 2016 as trained at scale by Radford et al. 2017 and Puri et al. 2018.
// It is the truth that every other number in this project is checked against.
// Top to bottom: the config and the parameter layout (one contiguous buffer; the
// table of the four weight-normed matrices), the model's buffers and initialisation,
// the matmuls, the cell and the other pointwise math shared with the GPU, weight
// norm, the forward pass over T steps from a carried state (the model's equations
// stand above it, each tagged with its function), backward through time, Adam, and
// the checkpoint file. Plain C11 and plain loops, libm's exp and tanh; gcc, clang and
// nvcc's host compiler all build it. The CPU trainer runs the same model through
// fast.h, which reuses the pieces of the forward and backward defined here.
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
// Checkpoints (doc/design.md, "Checkpoints"; byte layout in doc/formats.md). A 256-byte
// little-endian header, then FP32 master weights, Adam moments, and the carried
// state of all G rows of the global batch, then the run record: the trainer's
// settings as text, so that a resume continues the same run (train.h). The checksum
// covers the header (with its checksum field zero), the payload and the record.
// Written whole or not at all; read through the one open file that was verified.

#define CKPT_MAGIC "MLSTMCKP"
#define CKPT_VERSION 4  // 2 added the run record, 3 the run's identity and the score, 4 made the identity checkable
#define CKPT_MAX_RUN_BYTES (1u << 30)
#define CKPT_HEADER_BYTES 256
#define CKPT_SCALER_BYTES 48  // the scaler's field; CKPT_SCALER_USED of it are used, the rest 0
#define CKPT_SCALER_USED 40   // schedule.h's LOSS_SCALER_BYTES (train.h asserts the two agree)

// The header, little-endian: the byte offset of each field (doc/formats.md has the table).
enum {
    CKPT_AT_MAGIC = 0,         // char[8] CKPT_MAGIC
    CKPT_AT_VERSION = 8,       // u32 CKPT_VERSION
    CKPT_AT_HEADER_SIZE = 12,  // u32 CKPT_HEADER_BYTES
    CKPT_AT_V = 16,            // u32 vocabulary
    CKPT_AT_D = 20,            // u32 embedding width
    CKPT_AT_H = 24,            // u32 hidden width
    CKPT_AT_WNORM = 28,        // u32 weight norm 0/1
    CKPT_AT_NPARAMS = 32,      // u64 parameter count
    CKPT_AT_G = 40,            // u32 rows of carried state; 44..47 reserved, 0
    CKPT_AT_STEP = 48,         // u64 applied steps
    CKPT_AT_DATA_STEP = 56,    // u64 batches read
    CKPT_AT_RNG = 64,          // u64 the trainer's RNG state
    CKPT_AT_SCALER = 72,       // CKPT_SCALER_BYTES of loss scaler state
    CKPT_AT_PAYLOAD = 120,     // u64 payload bytes
    CKPT_AT_CHECKSUM = 128,    // u64 checksum
    CKPT_AT_RUN_BYTES = 136,   // u64 bytes of the run record after the payload (version 1: reserved, 0)
    CKPT_AT_RUN_ID = 144,      // u64 the run's identity, also on its log's first line (versions 1, 2: 0, unknown)
    CKPT_AT_BEST_BY = 152,     // u32 what the run's best checkpoint is judged by (CkptBestBy); 156..159 reserved, 0
    CKPT_AT_SCORE = 160,       // f64 this checkpoint's score under BEST_BY, lower is better (NaN: not scored)
    CKPT_AT_LOSS_EMA = 168,    // f64 the training loss's moving mean, its state; 176..255 reserved, 0
};

// What makes a checkpoint the run's best (train.h, best_offer): the validation loss,
// or, for a run that validates only at its end, the training loss's moving mean.
typedef enum { CKPT_BEST_BY_NONE = 0, CKPT_BEST_BY_VAL = 1, CKPT_BEST_BY_TRAIN = 2 } CkptBestBy;

typedef struct {
    uint64_t step;       // applied (non-skipped) updates: Adam's step and the schedule's
    uint64_t data_step;  // global batches consumed, skipped ones included: the loader position
    uint64_t rng;        // the trainer's RNG state (sampling)
    int G;               // rows of carried state (world * B)
    uint8_t scaler[CKPT_SCALER_BYTES];  // the loss scaler's serialised state (schedule.h)
    uint64_t run_id;     // the run this checkpoint belongs to (0: unknown, an older file)
    CkptBestBy best_by;  // how the run scores its checkpoints
    double score;        // this one's score (nats), NaN when it was not scored
    double loss_ema;     // the state of the training loss's moving mean, continued by a resume
} TrainState;

typedef struct {
    char magic[8];
    uint32_t version, header_bytes;
    MlstmConfig cfg;
    uint64_t nparams, payload_bytes, run_bytes;
    uint64_t checksum;  // the file's: two ranks that read the same checkpoint have the same
    TrainState st;
} CkptHeader;

// The header's fields, one row each, walked both ways: by the writer (ckpt_header_pack) and
// the reader (ckpt_header_unpack). doc/formats.md's header table and tools/mlstm_ckpt.py's
// _FIELDS are the same rows (test_pyio checks that the three agree). `member`: where the
// value lives in a CkptHeader; `since`: the format version that added the field, which an
// older file reads as 0. A U32 field's member is a 4-byte int, enum or uint32_t.
typedef enum { CKPT_U32, CKPT_U64, CKPT_F64, CKPT_BYTES } CkptFieldType;
typedef struct {
    const char *name;
    int at, bytes;
    CkptFieldType type;
    uint32_t since;
    size_t member;
} CkptField;
#define CKPT_FIELD(name, at, bytes, type, since, member) {name, at, bytes, type, since, offsetof(CkptHeader, member)}
static const CkptField ckpt_fields[] = {
    CKPT_FIELD("magic", CKPT_AT_MAGIC, 8, CKPT_BYTES, 1, magic),
    CKPT_FIELD("version", CKPT_AT_VERSION, 4, CKPT_U32, 1, version),
    CKPT_FIELD("header size", CKPT_AT_HEADER_SIZE, 4, CKPT_U32, 1, header_bytes),
    CKPT_FIELD("V", CKPT_AT_V, 4, CKPT_U32, 1, cfg.V),
    CKPT_FIELD("D", CKPT_AT_D, 4, CKPT_U32, 1, cfg.D),
    CKPT_FIELD("H", CKPT_AT_H, 4, CKPT_U32, 1, cfg.H),
    CKPT_FIELD("weight norm", CKPT_AT_WNORM, 4, CKPT_U32, 1, cfg.wnorm),
    CKPT_FIELD("nparams", CKPT_AT_NPARAMS, 8, CKPT_U64, 1, nparams),
    CKPT_FIELD("G", CKPT_AT_G, 4, CKPT_U32, 1, st.G),
    CKPT_FIELD("step", CKPT_AT_STEP, 8, CKPT_U64, 1, st.step),
    CKPT_FIELD("data step", CKPT_AT_DATA_STEP, 8, CKPT_U64, 1, st.data_step),
    CKPT_FIELD("rng", CKPT_AT_RNG, 8, CKPT_U64, 1, st.rng),
    CKPT_FIELD("loss scaler", CKPT_AT_SCALER, CKPT_SCALER_BYTES, CKPT_BYTES, 1, st.scaler),
    CKPT_FIELD("payload bytes", CKPT_AT_PAYLOAD, 8, CKPT_U64, 1, payload_bytes),
    CKPT_FIELD("checksum", CKPT_AT_CHECKSUM, 8, CKPT_U64, 1, checksum),
    CKPT_FIELD("run record bytes", CKPT_AT_RUN_BYTES, 8, CKPT_U64, 2, run_bytes),
    CKPT_FIELD("run", CKPT_AT_RUN_ID, 8, CKPT_U64, 3, st.run_id),
    CKPT_FIELD("best by", CKPT_AT_BEST_BY, 4, CKPT_U32, 3, st.best_by),
    CKPT_FIELD("score", CKPT_AT_SCORE, 8, CKPT_F64, 3, st.score),
    CKPT_FIELD("loss mean state", CKPT_AT_LOSS_EMA, 8, CKPT_F64, 3, st.loss_ema),
};
#undef CKPT_FIELD
enum { CKPT_NFIELDS = sizeof ckpt_fields / sizeof ckpt_fields[0] };
static_assert(sizeof(int) == 4 && sizeof(CkptBestBy) == 4, "the header's U32 fields are 4-byte members");

static inline void ckpt_header_pack(const CkptHeader *h, uint8_t out[CKPT_HEADER_BYTES]) {
    memset(out, 0, CKPT_HEADER_BYTES);
    for (int i = 0; i < CKPT_NFIELDS; i++) {
        const CkptField *f = &ckpt_fields[i];
        const char *p = (const char *)h + f->member;
        uint32_t u32;
        uint64_t u64;
        double x;
        switch (f->type) {
        case CKPT_U32: memcpy(&u32, p, 4); put32(out + f->at, u32); break;
        case CKPT_U64: memcpy(&u64, p, 8); put64(out + f->at, u64); break;
        case CKPT_F64: memcpy(&x, p, 8); put64(out + f->at, f64_bits(x)); break;
        case CKPT_BYTES: memcpy(out + f->at, p, (size_t)f->bytes); break;
        }
    }
}
// Whether every byte of the header outside the fields of its version is 0, as the format
// says: a byte set there is a corrupt file, or a newer version under an older number.
static inline int ckpt_header_unused_zero(const uint8_t in[CKPT_HEADER_BYTES], uint32_t version) {
    uint8_t used[CKPT_HEADER_BYTES] = {0};
    for (int i = 0; i < CKPT_NFIELDS; i++)
        if (version >= ckpt_fields[i].since) memset(used + ckpt_fields[i].at, 1, (size_t)ckpt_fields[i].bytes);
    for (int i = 0; i < CKPT_HEADER_BYTES; i++)
        if (!used[i] && in[i]) return 0;
    return 1;
}
// The fields of a header whose version is known to be one this build reads.
static inline void ckpt_header_unpack(const uint8_t in[CKPT_HEADER_BYTES], CkptHeader *h) {
    uint32_t version = get32(in + CKPT_AT_VERSION);
    memset(h, 0, sizeof *h);
    for (int i = 0; i < CKPT_NFIELDS; i++) {
        const CkptField *f = &ckpt_fields[i];
        char *p = (char *)h + f->member;
        uint32_t u32 = version >= f->since ? get32(in + f->at) : 0;
        uint64_t u64 = version >= f->since ? get64(in + f->at) : 0;
        double x = f64_from_bits(u64);
        switch (f->type) {
        case CKPT_U32: memcpy(p, &u32, 4); break;
        case CKPT_U64: memcpy(p, &u64, 8); break;
        case CKPT_F64: memcpy(p, &x, 8); break;
        case CKPT_BYTES: memcpy(p, in + f->at, (size_t)f->bytes); break;
        }
    }
}

// Limits of the model's sizes: far beyond the paper's (H=4096, D=64), small enough that
// every size product fits its type with room to spare (4H x H is 2^34 elements). The
// trainers' --hidden and --embed stop there, checkpoint_open refuses a file beyond them
// (so the trainers, generate, transfer and tools/mlstm_ckpt.py refuse the same files),
// and tools/import_npy writes none.
#define MAX_HIDDEN 65536
#define MAX_EMBED 65536

// A run directory (doc/formats.md) holds its checkpoints under these names; a reader
// given the directory reads its best model (checkpoint_file).
#define RUN_BEST_CKPT "best.ckpt"      // the best model of a run directory (the readers' default)
#define RUN_LATEST_CKPT "latest.ckpt"  // where a resume continues

// The parameter count and payload size of a header's model, computed from the file's
// fields and so overflow-checked: 0 when they do not fit 64 bits (no valid file has 0).
// The payload is the weights and both Adam moments (3 nparams) and the carried h and c
// (G x H each), as FP32.
static inline uint64_t ckpt_param_count(const MlstmConfig *c) {
    if (c->V < 0 || c->D < 0 || c->H < 0) return 0;
    size_t rows[NPARAM], cols[NPARAM];
    param_shapes(c, rows, cols);  // each at most 4H, V or D: no product yet
    uint64_t n = 0, k;
    for (int i = 0; i < NPARAM; i++)
        if (!mul_u64(rows[i], cols[i], &k) || !add_u64(n, k, &n)) return 0;
    return n;
}
static inline uint64_t ckpt_payload_bytes(const MlstmConfig *c, uint64_t nparams, int G) {
    uint64_t state, weights, floats, bytes;
    if (G < 0 || c->H < 0 || !mul_u64(2 * (uint64_t)G, (uint64_t)c->H, &state) || !mul_u64(3, nparams, &weights) ||
        !add_u64(weights, state, &floats) || !mul_u64(4, floats, &bytes))
        return 0;
    return bytes;
}

// The checksum runs over the file's 8-byte words (checksum_update's chunks other than
// the last must be whole words), and an array of odd length ends inside one: its last
// float waits in `pending` for the next array's first (an odd H, or H(D+H), hit this).
typedef struct { uint64_t h; float pending; int has_pending; } CkptSum;

// Writes a real array as FP32, feeding the checksum.
#define CKPT_CHUNK 4096
static inline void ckpt_write_f32(AtomicFile *af, CkptSum *s, const real *x, size_t n) {
    float buf[1 + CKPT_CHUNK];  // buf[0]: the float carried in, if any
    for (size_t i = 0; i < n; i += CKPT_CHUNK) {
        size_t k = n - i < CKPT_CHUNK ? n - i : CKPT_CHUNK;
        size_t m = (size_t)s->has_pending;
        buf[0] = s->pending;
        for (size_t j = 0; j < k; j++) buf[m + j] = (float)x[i + j];
        atomic_write(af, buf + m, k * 4);
        m += k;
        s->has_pending = (int)(m & 1);
        if (s->has_pending) s->pending = buf[m - 1];
        s->h = checksum_update(s->h, buf, (m - (m & 1)) * 4);
    }
}

// The run record's data identity (doc/formats.md, "Run record"): the values of these two
// names are one line per shard, "<bytes> <checksum, 16 hex digits> <file name>\n" (run.h,
// data_identity, writes them).
#define RECORD_TRAIN_DATA "train data"
#define RECORD_VAL_DATA "val data"
#define RECORD_NAME_MAX 200  // the most bytes of a shard's file name an identity line keeps

// Whether `line` (up to its '\n') is one identity line exactly as data_identity writes it:
// the size in digits without a leading zero, within int64; one space; 16 lowercase hex
// digits; one space; 1 to RECORD_NAME_MAX bytes of name; '\n'. Returns its length, 0 if not.
static inline size_t ckpt_identity_line(const char *line) {
    size_t digits = strspn(line, "0123456789");
    if (!digits || digits > 19 || (digits > 1 && line[0] == '0') || line[digits] != ' ') return 0;
    errno = 0;
    if (strtoull(line, NULL, 10) > (unsigned long long)INT64_MAX || errno) return 0;
    const char *sum = line + digits + 1;
    if (strspn(sum, "0123456789abcdef") != 16 || sum[16] != ' ') return 0;
    const char *name = sum + 17;
    size_t len = strcspn(name, "\n");
    if (!len || len > RECORD_NAME_MAX || name[len] != '\n') return 0;
    return (size_t)(name + len + 1 - line);
}

// What is wrong with a run record of n bytes, in why (cap bytes), or 0 when nothing is: it
// is whole NUL-terminated name, value pairs, no name empty, and each data identity one or
// more identity lines. Every reader checks it (checkpoint_open; tools/mlstm_ckpt.py's load).
static inline int ckpt_record_invalid(const uint8_t *run, uint64_t n, char *why, size_t cap) {
    const char *text = (const char *)run;
    if (n && run[n - 1] != 0) {
        snprintf(why, cap, "the run record (%llu bytes) is not a list of NUL-terminated name, value pairs",
                 (unsigned long long)n);
        return 1;
    }
    for (uint64_t at = 0; at < n;) {
        const char *name = text + at;
        at += strlen(name) + 1;
        const char *value = text + at;
        if (at >= n || !name[0]) {
            snprintf(why, cap, "the run record (%llu bytes) is not a list of NUL-terminated name, value pairs%s",
                     (unsigned long long)n, at < n ? " (an empty name)" : "");
            return 1;
        }
        at += strlen(value) + 1;
        if (strcmp(name, RECORD_TRAIN_DATA) && strcmp(name, RECORD_VAL_DATA)) continue;
        int line = 1;
        for (const char *p = value;; line++) {
            size_t len = ckpt_identity_line(p);
            if (!len) {
                snprintf(why, cap, "the run record's \"%s\" line %d is not \"<bytes> <checksum: 16 hex digits> "
                         "<file name>\" as the trainer writes it", name, line);
                return 1;
            }
            p += len;
            if (!*p) break;
        }
    }
    return 0;
}

// The run's identity (the header's `run`, format version 4 on; doc/formats.md, "Run identity"),
// made from the checkpoint alone, so that every reader can recompute it: the checksum of the
// record's name, value pairs in their order, less those a resume may change
// (CKPT_NOT_IDENTITY: where the data is, the run's length, what a validation reads), with
// each data identity line cut to its size and checksum (data renamed or moved is the same
// data), then D, H, weight norm and G as u32. run: (n,) a record that ckpt_record_invalid
// accepts. Never 0, which means "unknown".
static const char *const CKPT_NOT_IDENTITY[] = {"train", "val", "steps", "val-steps", "val-batch"};
enum { CKPT_N_NOT_IDENTITY = sizeof CKPT_NOT_IDENTITY / sizeof CKPT_NOT_IDENTITY[0] };
static inline uint64_t ckpt_run_identity(const uint8_t *run, uint64_t n, const MlstmConfig *cfg, int G) {
    uint8_t *canon = (uint8_t *)mallocCheck(n + 16), *out = canon;
    const char *text = (const char *)run;
    for (uint64_t at = 0; at < n;) {
        const char *name = text + at, *value = name + strlen(name) + 1;
        size_t name_bytes = strlen(name) + 1, value_bytes = strlen(value) + 1;
        at += name_bytes + value_bytes;
        int kept = 1;
        for (int i = 0; i < CKPT_N_NOT_IDENTITY; i++) kept = kept && strcmp(name, CKPT_NOT_IDENTITY[i]);
        if (!kept) continue;
        memcpy(out, name, name_bytes), out += name_bytes;
        if (strcmp(name, RECORD_TRAIN_DATA) && strcmp(name, RECORD_VAL_DATA)) {
            memcpy(out, value, value_bytes), out += value_bytes;
            continue;
        }
        for (const char *line = value; *line; line += ckpt_identity_line(line)) {  // "<bytes> <checksum> <name>\n"
            size_t size_and_sum = strspn(line, "0123456789") + 1 + 16;
            memcpy(out, line, size_and_sum), out += size_and_sum;
            *out++ = '\n';
        }
        *out++ = 0;
    }
    put32(out, (uint32_t)cfg->D), put32(out + 4, (uint32_t)cfg->H);
    put32(out + 8, (uint32_t)cfg->wnorm), put32(out + 12, (uint32_t)G);
    uint64_t h = checksum_final(checksum_update(CHECKSUM_INIT, canon, (size_t)(out + 16 - canon)));
    free(canon);
    return h ? h : 1;
}

// h, c: (G,H) carried state of the whole global batch; run: (run_bytes,) the run record, or NULL.
// version: CKPT_VERSION, or 3 for a run whose identity was made before version 4 (run.h, run_id_continued).
static inline void checkpoint_save_run(const char *path, const Mlstm *m, const TrainState *st, const real *h,
                                       const real *c, const uint8_t *run, size_t run_bytes, uint32_t version) {
    char why[300];
    if (run_bytes > CKPT_MAX_RUN_BYTES) fail("cannot write %s: a run record of %zu bytes (a bug)", path, run_bytes);
    if (version != CKPT_VERSION && version != 3) fail("cannot write %s: format version %u (a bug)", path, version);
    if (version >= 4 && st->run_id && run_bytes &&
        (ckpt_record_invalid(run, run_bytes, why, sizeof why) ||
         ckpt_run_identity(run, run_bytes, &m->cfg, st->G) != st->run_id))
        fail("cannot write %s: run %016llx is not the identity of its run record and model (a bug)", path,
             (unsigned long long)st->run_id);
    CkptHeader header = {{0}, version, CKPT_HEADER_BYTES, m->cfg, m->nparams, 0, run_bytes, 0, *st};
    memcpy(header.magic, CKPT_MAGIC, 8);
    header.payload_bytes = ckpt_payload_bytes(&m->cfg, m->nparams, st->G);
    uint8_t hd[CKPT_HEADER_BYTES];
    ckpt_header_pack(&header, hd);
    // the checksum is computed with its own field zero, then patched in
    AtomicFile af;
    atomic_open(&af, path);
    CkptSum sum = {checksum_update(CHECKSUM_INIT, hd, CKPT_HEADER_BYTES), 0, 0};
    atomic_write(&af, hd, CKPT_HEADER_BYTES);
    ckpt_write_f32(&af, &sum, m->params, m->nparams);
    ckpt_write_f32(&af, &sum, m->adam_m, m->nparams);
    ckpt_write_f32(&af, &sum, m->adam_v, m->nparams);
    ckpt_write_f32(&af, &sum, h, (size_t)st->G * m->cfg.H);
    ckpt_write_f32(&af, &sum, c, (size_t)st->G * m->cfg.H);
    atomic_write(&af, run, run_bytes);
    // the last chunk: the float the payload left half a word open, if any, then the record
    uint8_t *tail = (uint8_t *)mallocCheck(4 + run_bytes);
    size_t n_tail = 0;
    if (sum.has_pending) memcpy(tail, &sum.pending, 4), n_tail = 4;
    if (run_bytes) memcpy(tail + n_tail, run, run_bytes);
    sum.h = checksum_update(sum.h, tail, n_tail + run_bytes);
    free(tail);
    put64(hd + CKPT_AT_CHECKSUM, checksum_final(sum.h));
    if (fseek(af.f, CKPT_AT_CHECKSUM, SEEK_SET) != 0) {
        atomic_abort(&af);
        fail("cannot write %s: seek failed", path);
    }
    atomic_write(&af, hd + CKPT_AT_CHECKSUM, 8);
    atomic_commit(&af);
}
static inline void checkpoint_save(const char *path, const Mlstm *m, const TrainState *st, const real *h,
                                   const real *c) {
    checkpoint_save_run(path, m, st, h, c, NULL, 0, CKPT_VERSION);
}

// A checkpoint argument (generate, transfer, the trainers' --init-from,
// tools/mlstm_ckpt.py) names a checkpoint file or a run directory, which stands for
// its best model, DIR/best.ckpt. Returns the file to read: path itself, or that name
// written into `file` (cap bytes). A directory without best.ckpt is an error naming it
// and saying whether its latest.ckpt is there to be given instead.
static inline const char *checkpoint_file(const char *path, char *file, size_t cap) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return path;
    size_t n = strlen(path);
    const char *sep = n && path[n - 1] == '/' ? "" : "/";
    if ((size_t)snprintf(file, cap, "%s%s%s", path, sep, RUN_BEST_CKPT) >= cap)
        fail("checkpoint path too long: %s", path);
    if (lstat(file, &sb) == 0 || errno != ENOENT) return file;  // there (checkpoint_open checks what it is)
    char latest[4200];
    snprintf(latest, sizeof latest, "%s%s%s", path, sep, RUN_LATEST_CKPT);
    if (lstat(latest, &sb) == 0)
        fail("%s is a run directory without %s (its best model); it has %s: give %s to read that", path,
             RUN_BEST_CKPT, RUN_LATEST_CKPT, latest);
    fail("%s is a directory without %s or %s: not a run directory (give a checkpoint file)", path, RUN_BEST_CKPT,
         RUN_LATEST_CKPT);
    return NULL;
}

// The run record of an open checkpoint whose checksum matched: (run_bytes + 1,) malloc'd, NUL-terminated
// past its end; NULL when the file has none (version 1, or written by tools/mlstm_ckpt.py new).
static inline uint8_t *checkpoint_read_run(FILE *f, const char *path, const CkptHeader *hd) {
    if (!hd->run_bytes) return NULL;
    uint8_t *run = (uint8_t *)mallocCheck(hd->run_bytes + 1);
    if (fseeko(f, (off_t)(CKPT_HEADER_BYTES + hd->payload_bytes), SEEK_SET) != 0 ||
        fread(run, 1, hd->run_bytes, f) != hd->run_bytes)
        fail("cannot read checkpoint %s: its run record", path);
    return run;
}

// Opens a checkpoint and validates its header and checksum (the whole file is read
// once). Any problem is fatal with a message naming the file (DIR/best.ckpt for a run
// directory, checkpoint_file). The weights are then read from the returned file
// (checkpoint_read), never from the path again: a file put in its place meanwhile is
// not read unverified. The sizes are checked against this build's limits before any
// size is computed from them, and the computed ones against overflow, so a header
// cannot make a payload size wrap to the size of a small file.
static inline FILE *checkpoint_open(const char *path_given, CkptHeader *out) {
    char resolved[4200];
    const char *path = checkpoint_file(path_given, resolved, sizeof resolved);
    // O_NONBLOCK: opening a FIFO would wait for a writer forever; on a file it changes nothing
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail("cannot open checkpoint %s: %s", path, strerror(errno));
    struct stat sb;
    memset(&sb, 0, sizeof sb);
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        fail("checkpoint %s is not a regular file (%s)", path, file_kind(sb.st_mode));
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) fail("cannot open checkpoint %s: %s", path, strerror(errno));
    uint8_t hd[CKPT_HEADER_BYTES];
    size_t got = fread(hd, 1, CKPT_HEADER_BYTES, f);
    if (got >= 8 && memcmp(hd + CKPT_AT_MAGIC, CKPT_MAGIC, 8) != 0) {
        fclose(f);
        fail("%s is not an mlstm checkpoint (bad magic)", path);
    }
    if (got < CKPT_HEADER_BYTES) {
        fclose(f);
        fail("checkpoint %s is truncated: %zu bytes, the header alone is %d", path, got, CKPT_HEADER_BYTES);
    }
    uint32_t version = get32(hd + CKPT_AT_VERSION);
    if (version < 1 || version > CKPT_VERSION) {
        fclose(f);
        fail("checkpoint %s has format version %u; this build reads versions 1 to %d", path, version, CKPT_VERSION);
    }
    uint32_t D = get32(hd + CKPT_AT_D), H = get32(hd + CKPT_AT_H);
    if (D > MAX_EMBED || H > MAX_HIDDEN) {
        fclose(f);
        fail("checkpoint %s: D=%u H=%u, beyond this build's limits (D at most %d, H at most %d)", path, D, H,
             MAX_EMBED, MAX_HIDDEN);
    }
    ckpt_header_unpack(hd, out);
    uint32_t best_by = out->st.best_by;
    uint64_t want_sum = out->checksum;
    // a score and the loss mean are losses in nats: never below 0 (a score may be NaN: not scored)
    int sane = best_by <= CKPT_BEST_BY_TRAIN && isfinite(out->st.loss_ema) && out->st.loss_ema >= 0 &&
               !(out->st.score < 0) && out->cfg.V == 256 &&
               out->cfg.D >= 1 && out->cfg.H >= 1 && out->st.G >= 1 && !(out->cfg.wnorm & ~1) &&
               out->header_bytes == CKPT_HEADER_BYTES;
    for (int i = CKPT_SCALER_USED; i < CKPT_SCALER_BYTES; i++) sane = sane && out->st.scaler[i] == 0;
    sane = sane && out->nparams == ckpt_param_count(&out->cfg) && out->nparams;
    sane = sane && out->payload_bytes == ckpt_payload_bytes(&out->cfg, out->nparams, out->st.G) && out->payload_bytes;
    sane = sane && out->run_bytes <= CKPT_MAX_RUN_BYTES && ckpt_header_unused_zero(hd, version);
    if (!sane) {
        fclose(f);
        fail("checkpoint %s has an inconsistent header (corrupt file)", path);
    }
    put64(hd + CKPT_AT_CHECKSUM, 0);
    uint64_t sum = checksum_update(CHECKSUM_INIT, hd, CKPT_HEADER_BYTES), total = 0;
    static uint8_t buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) {
        sum = checksum_update(sum, buf, k);
        total += k;
    }
    uint64_t want = out->payload_bytes + out->run_bytes;
    int bad = total < want ? 1 : total > want ? 2 : checksum_final(sum) != want_sum ? 3 : 0;
    if (bad) fclose(f);
    if (bad == 1)
        fail("checkpoint %s is truncated: %llu bytes after the header, the header says %llu", path,
             (unsigned long long)total, (unsigned long long)want);
    if (bad == 2)
        fail("checkpoint %s has %llu bytes after the payload and run record (corrupt file)", path,
             (unsigned long long)(total - want));
    if (bad == 3) fail("checkpoint %s fails its checksum (corrupt file)", path);
    uint8_t *run = checkpoint_read_run(f, path, out);
    char why[300];
    int invalid = ckpt_record_invalid(run, out->run_bytes, why, sizeof why);
    // version 4 on: a run identity must be its record's and header's (earlier ones were made otherwise)
    uint64_t identity = invalid || version < 4 || !out->st.run_id || !run ? 0
                      : ckpt_run_identity(run, out->run_bytes, &out->cfg, out->st.G);
    free(run);
    if (invalid) {
        fclose(f);
        fail("checkpoint %s: %s (corrupt file)", path, why);
    }
    if (identity && identity != out->st.run_id) {
        fclose(f);
        fail("checkpoint %s: its run %016llx is not the identity of its run record and model (%016llx): an edited "
             "or corrupt file", path, (unsigned long long)out->st.run_id, (unsigned long long)identity);
    }
    return f;
}
// Validation alone (the header fields for the caller), the file closed again.
static inline void checkpoint_header(const char *path, CkptHeader *out) { fclose(checkpoint_open(path, out)); }

static inline void ckpt_read_f32(FILE *f, real *x, size_t n) {
    float buf[CKPT_CHUNK];
    for (size_t i = 0; i < n; i += CKPT_CHUNK) {
        size_t k = n - i < CKPT_CHUNK ? n - i : CKPT_CHUNK;
        if (fread(buf, 4, k, f) != k) fail("checkpoint changed while being read");
        for (size_t j = 0; j < k; j++) x[i + j] = buf[j];
    }
}

// Reads an open, verified checkpoint (checkpoint_open) into a model built with the
// config the command line asks for, and the carried state of G rows into h, c (G,H).
// A different config or G is an error that names both.
static inline void checkpoint_read(FILE *f, const char *path, const CkptHeader *hd_in, Mlstm *m, TrainState *st,
                                   real *h, real *c, int G) {
    CkptHeader hd = *hd_in;
    const MlstmConfig *w = &m->cfg;
    if (hd.cfg.D != w->D || hd.cfg.H != w->H || hd.cfg.wnorm != w->wnorm)
        fail("checkpoint %s is a model with D=%d H=%d weight-norm=%d; "
             "the command line asks for D=%d H=%d weight-norm=%d",
             path, hd.cfg.D, hd.cfg.H, hd.cfg.wnorm, w->D, w->H, w->wnorm);
    if (hd.st.G != G)
        fail("checkpoint %s carries state for a global batch of %d rows; "
             "the command line asks for %d (world x --batch)", path, hd.st.G, G);
    if (fseek(f, CKPT_HEADER_BYTES, SEEK_SET) != 0) fail("cannot read checkpoint %s", path);
    ckpt_read_f32(f, m->params, m->nparams);
    ckpt_read_f32(f, m->adam_m, m->nparams);
    ckpt_read_f32(f, m->adam_v, m->nparams);
    ckpt_read_f32(f, h, (size_t)G * w->H);
    ckpt_read_f32(f, c, (size_t)G * w->H);
    *st = hd.st;
}
// Opens, verifies and reads in one go.
static inline void checkpoint_load(const char *path_given, Mlstm *m, TrainState *st, real *h, real *c, int G) {
    char resolved[4200];
    const char *path = checkpoint_file(path_given, resolved, sizeof resolved);
    CkptHeader hd;
    FILE *f = checkpoint_open(path, &hd);
    checkpoint_read(f, path, &hd, m, st, h, c, G);
    fclose(f);
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
