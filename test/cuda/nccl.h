// test/cuda/nccl.h: NCCL on the CPU layer, routed to MPI (device memory is host
// memory), so `mpirun -np 2` runs two emulated GPUs and the trainer's glue is tested:
// the unique id must come from ncclGetUniqueId on one rank and reach every other
// rank unchanged (ncclCommInitRank checks), ranks and sizes must match MPI's, and
// the all-reduce is MPI_Allreduce. NCCL itself (rings, transports) is not exercised.
#pragma once
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include "cuda_runtime.h"

typedef enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclSystemError = 2 } ncclResult_t;
typedef enum { ncclFloat = 7, ncclFloat32 = 7, ncclDouble = 8, ncclInt = 2 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct cudacpu_nccl { int rank, size; } *ncclComm_t;

#define CUDACPU_NCCL_MAGIC "cudacpu-nccl-id"
static inline const char *ncclGetErrorString(ncclResult_t r) {
    return r == ncclSuccess ? "no error" : r == ncclInvalidArgument ? "invalid argument" : r == ncclInvalidUsage ? "invalid usage" : "system error";
}
static inline ncclResult_t ncclGetVersion(int *v) { *v = 22300; return ncclSuccess; }
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, CUDACPU_NCCL_MAGIC " %ld %ld", (long)getpid(), (long)time(NULL));
    return ncclSuccess;
}
// Every rank must hold the id rank 0 made (the broadcast worked) and agree on the size.
static inline ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    int size, me;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (nranks != size || rank != me) {
        fprintf(stderr, "cudacpu: ncclCommInitRank(nranks %d, rank %d) but MPI has %d ranks, this is %d\n", nranks, rank, size, me);
        return ncclInvalidArgument;
    }
    ncclUniqueId root = id;
    MPI_Bcast(&root, sizeof root, MPI_BYTE, 0, MPI_COMM_WORLD);
    int ok = strncmp(id.internal, CUDACPU_NCCL_MAGIC, strlen(CUDACPU_NCCL_MAGIC)) == 0 && memcmp(&root, &id, sizeof id) == 0, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        fprintf(stderr, "cudacpu: ncclCommInitRank: rank %d %s\n", rank,
                ok ? "is fine, but another rank's id differs" : "holds an id that is not rank 0's ncclGetUniqueId");
        return ncclInvalidUsage;
    }
    *comm = new cudacpu_nccl{rank, nranks};
    return ncclSuccess;
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t c) { delete c; return ncclSuccess; }
static inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t) {
    if (!comm) return ncclInvalidArgument;
    size_t es = t == ncclDouble ? 8 : 4;
    cudacpu::check_device_range(send, count * es, "ncclAllReduce send buffer", __FILE__, __LINE__);
    cudacpu::check_device_range(recv, count * es, "ncclAllReduce receive buffer", __FILE__, __LINE__);
    if (count > 0x7fffffff) return ncclInvalidArgument;
    MPI_Datatype mt = t == ncclDouble ? MPI_DOUBLE : t == ncclInt ? MPI_INT : MPI_FLOAT;
    int r = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, mt, op == ncclMax ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
    return r == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}
