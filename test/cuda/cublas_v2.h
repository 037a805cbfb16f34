// test/cuda/cublas_v2.h: cublasGemmEx on the CPU layer, as a plain host product in
// double (column-major, as cuBLAS): the reference the hand-written matmul is compared with.
#pragma once
#include "cuda_runtime.h"
#include "cuda_fp16.h"

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 } cublasStatus_t;
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2 } cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef struct cublas_context { cudaStream_t stream; } *cublasHandle_t;

static inline cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = new cublas_context{nullptr}; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { h->stream = s; return CUBLAS_STATUS_SUCCESS; }

// C (m,n) = alpha op(A) (m,k) op(B) (k,n) + beta C, column-major with leading dimensions.
static inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                                          cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                                          cublasComputeType_t, cublasGemmAlgo_t) {
    if (ct != CUDA_R_32F || (at != CUDA_R_32F && at != CUDA_R_16F) || bt != at) return CUBLAS_STATUS_NOT_SUPPORTED;
    cudaStreamCaptureStatus cs;  // the product runs at once: it cannot be recorded into a graph here
    if (cudaStreamIsCapturing(h->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t es = at == CUDA_R_16F ? 2 : 4;
    cudacpu::check_device_range(A, ((size_t)(ta == CUBLAS_OP_N ? k : m) - 1) * lda * es + es, "cublasGemmEx A", __FILE__, __LINE__);
    cudacpu::check_device_range(B, ((size_t)(tb == CUBLAS_OP_N ? n : k) - 1) * ldb * es + es, "cublasGemmEx B", __FILE__, __LINE__);
    cudacpu::check_device_range(C, ((size_t)n - 1) * ldc * 4 + 4, "cublasGemmEx C", __FILE__, __LINE__);
    const float al = *(const float *)alpha, be = *(const float *)beta;
    auto get = [&](const void *p, size_t i) { return at == CUDA_R_16F ? (double)(float)((const __half *)p)[i] : (double)((const float *)p)[i]; };
    float *c = (float *)C;
    #pragma omp parallel for schedule(static)
    for (int j = 0; j < n; j++) {
        double *col = new double[k];  // op(B)[:, j]
        for (int q = 0; q < k; q++) col[q] = get(B, tb == CUBLAS_OP_N ? (size_t)j * ldb + q : (size_t)q * ldb + j);
        for (int i = 0; i < m; i++) {
            double s = 0;
            if (ta == CUBLAS_OP_T)
                for (int q = 0; q < k; q++) s += get(A, (size_t)i * lda + q) * col[q];
            else
                for (int q = 0; q < k; q++) s += get(A, (size_t)q * lda + i) * col[q];
            float *o = c + (size_t)j * ldc + i;
            *o = (float)(al * s + (be != 0 ? be * *o : 0.0));
        }
        delete[] col;
    }
    return CUBLAS_STATUS_SUCCESS;
}
