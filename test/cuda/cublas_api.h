// test/cuda/cublas_api.h: the cuBLAS types cuBLASLt's interface uses (the real cublasLt.h
// includes cublas_api.h for them too), for the CPU layer's cublasLt.h.
#pragma once
#include "cuda_runtime.h"
#include "cuda_fp16.h"

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 } cublasStatus_t;
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2 } cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
