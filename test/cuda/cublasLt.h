// test/cuda/cublasLt.h: the part of cuBLASLt train.cu uses (--matmul cublaslt), on the CPU layer.
// cublasLtMatmul is a host product, column-major as cuBLASLt: D = alpha op(A) op(B) + beta C, then
// the bias epilogue (a bias per row of D), rounded into D's type. The sum over k is an FP32
// accumulator that truncates (rounds toward zero) after every product, as tensor cores add
// (Fasi et al. 2021, "Numerical behavior of NVIDIA tensor cores"), walking k from the last to
// the first: the other order, and the other rounding, of the hand-written kernel's, so the two
// differ as much as two FP32 accumulators can (test_gpu argues its tolerance from that).
// CUDACPU_LT_REFUSE=MODE[:K] makes the heuristic refuse every problem (of depth K): MODE status
// (CUBLAS_STATUS_NOT_SUPPORTED), none (success, no algorithm) or state (an algorithm whose state
// is CUBLAS_STATUS_NOT_SUPPORTED), the three ways cuBLASLt says it has nothing for a shape. It is submitted
// to its stream like a launch, so a capturing stream records it into the graph (cuBLASLt's
// kernels are captured on a GPU; the replay computes it then). Checked, as a GPU would fail or
// misbehave: every layout's rows, columns and leading dimension against its matrix, operand types,
// C of D's shape and type, a bias of D's type (cuBLAS 13's cublasLt.h: bias elements have D's type
// outside IMMA and FP8 kernels, which this layer does not have), each operand inside one device
// allocation, an algorithm from cublasLtMatmulAlgoGetHeuristic for these descriptors, the
// workspace it asked for, and each pointer at least as aligned as the algorithm was chosen for:
// the preferences' CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES (256 unless set) for A, B, C and D,
// the alignment of the bias pointer the heuristic was given for the bias.
// CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET is kept in the descriptor and changes nothing here.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cublas_api.h"

typedef struct cublaslt_context {
    int live;
} *cublasLtHandle_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = 15,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;
typedef enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4 } cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;
typedef struct cublaslt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epilogue;
    const void *bias;
    cudaDataType_t bias_type;
    int sm_target;
    long serial;  // bumped by every change, so an algorithm belongs to one state of the descriptor
} *cublasLtMatmulDesc_t;
typedef struct cublaslt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
} *cublasLtMatrixLayout_t;
typedef struct cublaslt_pref {
    uint64_t max_workspace;
    uint32_t min_align[4];  // A, B, C, D (bytes)
} *cublasLtMatmulPreference_t;
typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;  // data[0]: the descriptor it was found for, data[1]: its serial, data[2..6]: the
                         // alignments it needs of A, B, C, D and the bias
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = new cublaslt_context{1};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c,
                                                      cudaDataType_t s) {
    if (c != CUBLAS_COMPUTE_32F || s != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = new cublaslt_desc{c, s, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, (cudaDataType_t)-1, 0, 0};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                            const void *v, size_t n) {
    if (a != CUBLASLT_MATMUL_DESC_BIAS_POINTER) d->serial++;  // (a new bias pointer keeps the algorithm)
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        if (n != sizeof(int32_t)) break;
        d->ta = (cublasOperation_t)*(const int32_t *)v;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (n != sizeof(int32_t)) break;
        d->tb = (cublasOperation_t)*(const int32_t *)v;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (n != sizeof(uint32_t)) break;
        d->epilogue = (cublasLtEpilogue_t)*(const uint32_t *)v;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (n != sizeof(void *)) break;
        memcpy(&d->bias, v, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (n != sizeof(int32_t)) break;
        d->bias_type = (cudaDataType_t)*(const int32_t *)v;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET:
        if (n != sizeof(int32_t) || *(const int32_t *)v < 0) break;
        d->sm_target = *(const int32_t *)v;
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}
static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t rows,
                                                        uint64_t cols, int64_t ld) {
    if ((t != CUDA_R_16F && t != CUDA_R_32F) || ld < (int64_t)rows || rows < 1 || cols < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    *l = new cublaslt_layout{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new cublaslt_pref{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                                  cublasLtMatmulPreferenceAttributes_t a, const void *v,
                                                                  size_t n) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && n == sizeof(uint64_t)) {
        p->max_workspace = *(const uint64_t *)v;
        return CUBLAS_STATUS_SUCCESS;
    }
    const uint32_t al = n == sizeof(uint32_t) ? *(const uint32_t *)v : 0;
    if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES && al &&
        !(al & (al - 1))) {
        p->min_align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = al;
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

namespace cudacpu {
// The shapes of op(A) (m,k), op(B) (k,n), C and D (m,n) must agree; types as cuBLASLt takes them:
// A and B the same (FP16 or FP32), D FP16 or FP32, C as D, a bias of D's type (-1, unset, means it).
static inline bool lt_shapes_ok(const cublaslt_desc *d, const cublaslt_layout *a, const cublaslt_layout *b,
                                const cublaslt_layout *c, const cublaslt_layout *dd) {
    uint64_t m = d->ta == CUBLAS_OP_N ? a->rows : a->cols, k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t kb = d->tb == CUBLAS_OP_N ? b->rows : b->cols, n = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    return k == kb && c->rows == m && c->cols == n && dd->rows == m && dd->cols == n && a->type == b->type &&
           c->type == dd->type && c->ld == dd->ld &&
           (d->epilogue == CUBLASLT_EPILOGUE_DEFAULT ||
            (d->epilogue == CUBLASLT_EPILOGUE_BIAS && (d->bias_type == dd->type || (int)d->bias_type == -1)));
}
// The largest power of two up to 256 that divides the address.
static inline uint32_t lt_aligned_to(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a /= 2;
    return a;
}
static inline size_t lt_bytes(const cublaslt_layout *l) {
    return ((size_t)(l->cols - 1) * l->ld + l->rows) * (l->type == CUDA_R_16F ? 2 : 4);
}
}  // namespace cudacpu

namespace cudacpu {
// CUDACPU_LT_REFUSE's mode for a problem of depth k: 0 (not refused), 's', 'n' or 't'.
static inline char lt_refusal(uint64_t k) {
    const char *v = getenv("CUDACPU_LT_REFUSE");
    if (!v || !*v) return 0;
    const char *colon = strchr(v, ':');
    const size_t n = colon ? (size_t)(colon - v) : strlen(v);
    const char mode = n == 6 && !strncmp(v, "status", n) ? 's' : n == 4 && !strncmp(v, "none", n) ? 'n'
                      : n == 5 && !strncmp(v, "state", n) ? 't' : 0;
    if (!mode) {
        fprintf(stderr, "cudacpu: CUDACPU_LT_REFUSE=%s: expected status, none or state, then :K or nothing\n", v);
        exit(2);
    }
    return !colon || strtoull(colon + 1, NULL, 10) == k ? mode : 0;
}
// a + b in FP32, rounded toward zero (a tensor core's accumulator)
static inline float lt_add_toward_zero(float a, double b) {
    const double d = (double)a + b;
    float f = (float)d;
    if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.f);
    return f;
}
}  // namespace cudacpu

// One algorithm for any supported problem, asking for no workspace; none for an unsupported one
// (or a refused one, CUDACPU_LT_REFUSE).
static inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d,
                                                            cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                                            cublasLtMatmulPreference_t pref, int requested,
                                                            cublasLtMatmulHeuristicResult_t *results, int *returned) {
    *returned = 0;
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    if (!cudacpu::lt_shapes_ok(d, a, b, c, dd)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const char refusal = cudacpu::lt_refusal(d->ta == CUBLAS_OP_N ? a->cols : a->rows);
    if (refusal == 's') return CUBLAS_STATUS_NOT_SUPPORTED;
    if (refusal == 'n') return CUBLAS_STATUS_SUCCESS;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = (uint64_t)(uintptr_t)d;
    results[0].algo.data[1] = (uint64_t)d->serial;
    for (int i = 0; i < 4; i++) results[0].algo.data[2 + i] = pref->min_align[i];
    results[0].algo.data[6] = d->epilogue == CUBLASLT_EPILOGUE_BIAS ? cudacpu::lt_aligned_to(d->bias) : 0;
    results[0].workspaceSize = 0;
    results[0].state = refusal == 't' ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                                            const void *A, cublasLtMatrixLayout_t la, const void *B,
                                            cublasLtMatrixLayout_t lb, const void *beta, const void *C,
                                            cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                                            const cublasLtMatmulAlgo_t *algo, void *workspace, size_t ws_bytes,
                                            cudaStream_t s) {
    if (!h || !h->live || !cudacpu::lt_shapes_ok(d, la, lb, lc, ld)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!algo || algo->data[0] != (uint64_t)(uintptr_t)d || algo->data[1] != (uint64_t)d->serial) {
        fprintf(stderr,
                "cudacpu: cublasLtMatmul: the algorithm was not found for this descriptor "
                "(cublasLtMatmulAlgoGetHeuristic)\n");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const void *ptrs[5] = {A, B, C, D, d->bias};
    const char *names[5] = {"A", "B", "C", "D", "the bias"};
    for (int i = 0; i < 5; i++)
        if (algo->data[2 + i] && (i < 4 || d->epilogue == CUBLASLT_EPILOGUE_BIAS) &&
            cudacpu::lt_aligned_to(ptrs[i]) < algo->data[2 + i]) {
            fprintf(stderr,
                    "cudacpu: cublasLtMatmul: %s at %p is aligned to %u bytes; its algorithm was chosen for %u "
                    "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES; the bias: its pointer at the heuristic)\n",
                    names[i], ptrs[i], cudacpu::lt_aligned_to(ptrs[i]), (unsigned)algo->data[2 + i]);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    (void)workspace;
    (void)ws_bytes;  // the heuristic asked for none
    const cublaslt_desc dc = *d;  // as at the call (a graph keeps it)
    const cublaslt_layout a = *la, b = *lb, c = *lc, dl = *ld;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    auto check = [=]() {
        cudacpu::check_device_range(A, cudacpu::lt_bytes(&a), "cublasLtMatmul A", __FILE__, __LINE__);
        cudacpu::check_device_range(B, cudacpu::lt_bytes(&b), "cublasLtMatmul B", __FILE__, __LINE__);
        cudacpu::check_device_range(D, cudacpu::lt_bytes(&dl), "cublasLtMatmul D", __FILE__, __LINE__);
        if (be != 0) cudacpu::check_device_range(C, cudacpu::lt_bytes(&c), "cublasLtMatmul C", __FILE__, __LINE__);
        if (dc.epilogue == CUBLASLT_EPILOGUE_BIAS)
            cudacpu::check_device_range(dc.bias, dl.rows * (dl.type == CUDA_R_16F ? 2 : 4), "cublasLtMatmul bias",
                                        __FILE__, __LINE__);
        return 0;
    };
    auto op = [=]() {
        check();
        const int m = (int)dl.rows, n = (int)dl.cols, k = (int)(dc.ta == CUBLAS_OP_N ? a.cols : a.rows);
        auto get = [](const void *p, cudaDataType_t t, size_t i) {
            return t == CUDA_R_16F ? (double)(float)((const __half *)p)[i] : (double)((const float *)p)[i];
        };
        auto ai = [&](int i, int q) {
            return dc.ta == CUBLAS_OP_N ? (size_t)q * a.ld + i : (size_t)i * a.ld + q;
        };  // op(A)[i,q]
        auto bi = [&](int q, int j) {
            return dc.tb == CUBLAS_OP_N ? (size_t)j * b.ld + q : (size_t)q * b.ld + j;
        };  // op(B)[q,j]
#pragma omp parallel for schedule(static)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float sum = 0.f;  // (a product of two FP16 or two FP32 values is exact in double)
                for (int q = k - 1; q >= 0; q--)
                    sum = cudacpu::lt_add_toward_zero(sum, get(A, a.type, ai(i, q)) * get(B, b.type, bi(q, j)));
                size_t o = (size_t)j * dl.ld + i;
                double v = al * sum + (be != 0 ? be * get(C, c.type, (size_t)j * c.ld + i) : 0.0);
                if (dc.epilogue == CUBLASLT_EPILOGUE_BIAS) v += get(dc.bias, dl.type, i);  // (the bias has D's type)
                if (dl.type == CUDA_R_16F)
                    ((__half *)D)[o] = __half((float)v);
                else
                    ((float *)D)[o] = (float)v;
            }
        return 0;
    };
    int e = cudacpu::submit(s, "cublasLtMatmul", __FILE__, __LINE__, check, op);
    return e ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS;
}
