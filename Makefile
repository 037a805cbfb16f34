# mlstm.c build. `make run` builds the CPU trainer and trains the default model; `make`
# builds what this machine supports and says what it skipped; `make test` builds and runs
# every test; `make SAN=1 test` does so under ASan+UBSan; `make gpu` builds train.cu.
# The CUDA-on-CPU layer's rules are in test/cuda/cudacpu.mk, the fuzzers' in test/fuzz/fuzz.mk.
CC      ?= gcc
OPT     ?= -O3 -march=native -ffp-contract=fast  # fused multiply-add in the matmuls (about 15% faster)
CFLAGS  ?= $(OPT)
# -fno-math-errno: nothing reads errno after a math function, and without it sqrtf keeps a
# scalar branch to libm for negative inputs, so Adam's pass (train.c) does not vectorise.
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -fopenmp-simd -fno-math-errno -I.
LDLIBS  += -lm
BUILD   ?= build
ifeq ($(WERROR),1)
  CFLAGS  += -Werror
endif
SANFLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ifeq ($(SAN),1)
  CFLAGS  += $(SANFLAGS)
  BUILD   := build-san
endif
HASH := \#
SAY = @printf '%s\n'

# ---- the CPU trainer: train.c on the headers below, with MPI when mpicc works (it still
# runs as one process without mpirun); the probes further down decide MPI and OpenMP
TRAIN_HEADERS := train.h harness/run.h harness/train_harness.h util.h mlstm.h fast.h gemm.h data.h corpus.h schedule.h
TOOL_LDLIBS_prepare := -ljansson -lz
TOOL_LDLIBS_transfer := -ljansson -llinear
HEADERS := util.h mlstm.h fast.h gemm.h data.h corpus.h schedule.h test/test.h
# the system's tests (test/): C programs, and test/test_*.py run by python3 from the repository root
OTHER_TILE_TESTS := test_gemm test_gemm_bf16  # built again with the other tile (below)
TESTS   := $(patsubst test/%.c,$(BUILD)/%,$(wildcard test/test_*.c)) $(OTHER_TILE_TESTS:%=$(BUILD)/%_other_tile)
PY_TESTS := $(wildcard test/test_*.py)
# the lab's tests (dev/test/): the GPU performance and scaling models, gpu_check.sh's bookkeeping,
# the PyTorch baseline of the benchmarks, the large-batch sweep's harness; make test runs them
# after the system's, make test-lab alone
LAB_TESTS := $(patsubst dev/test/%.c,$(BUILD)/%,$(wildcard dev/test/test_*.c))
LAB_PY_TESTS := $(wildcard dev/test/test_*.py)
TOOLS   := $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/*.c))

.PHONY: all test test-san test-lab clean probe run
all: probe train $(TESTS) $(LAB_TESTS) $(TOOLS)

train: $(BUILD)/train
	cp $< $@.tmp && mv -f $@.tmp $@  # a new file, so a running ./train is not disturbed

$(BUILD)/train: train.c $(TRAIN_HEADERS) | $(BUILD)
	$(TRAIN_CC) $(CFLAGS) $(TRAIN_DEFS) $< -o $@ $(LDLIBS)

# the main command: train the default small model on the built-in corpus (again: it
# replaces the run in out/ (its checkpoints and log), which ./train alone refuses to do)
run: train
	./train --overwrite

# ---- the tools and the tests
$(BUILD)/%: test/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# OTHER_TILE_TESTS again, built with the tile this CPU's build does not use (gemm.h: 8 rows with
# AVX-512, 4 without), so that both tiles' code runs on every machine
GEMM_OTHER_MR := $(if $(findstring __AVX512F__,$(shell $(CC) $(CFLAGS) -dM -E -x c /dev/null 2>/dev/null)),4,8)
$(BUILD)/%_other_tile: test/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) -DGEMM_MR=$(GEMM_OTHER_MR) $< -o $@ $(LDLIBS)

# test_backend includes train.c (without its main) and calls train_main in-process
$(BUILD)/test_backend: train.c $(TRAIN_HEADERS)
# test_generate includes tools/generate.c (without its main) and runs build/generate and build/train
$(BUILD)/test_generate: tools/generate.c

$(BUILD)/%: tools/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS) $(TOOL_LDLIBS_$*)

$(BUILD)/%: dev/test/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

$(BUILD):
	mkdir -p $@

# test_hosts runs the trainer on two hosts made of network namespaces (doc/cluster.md);
# without root or iproute2 it is a counted skip, and REQUIRE_NETNS=1 makes that a failure.
# Not under SAN=1: the trainer code it runs is what test_train's mpirun runs under ASan,
# and what differs (the launch, the TCP transport) is Open MPI's; it would add 24 s.
RUN_HOSTS ?= $(if $(filter 1,$(SAN)),,$(BUILD)/test_hosts)
# test-build: what `make test` runs, built and not run (.ci/run builds it with -j first)
.PHONY: test test-build
test test-build: $(BUILD)/train $(TESTS) $(TOOLS) $(LAB_TESTS)
test:  # (BUILD: test_docs.py reads the trainer's --help there)
	@BUILD=$(BUILD) test/run.sh $(filter-out $(BUILD)/test_hosts,$(TESTS)) $(RUN_HOSTS) $(PY_TESTS) \
	    $(LAB_TESTS) $(LAB_PY_TESTS) --side-by-side $(CUDACPU_TESTS)

test-lab: $(BUILD)/train $(TOOLS) $(LAB_TESTS)
	@test/run.sh $(LAB_TESTS) $(LAB_PY_TESTS)

test-san:
	$(MAKE) SAN=1 test

clean:
	rm -rf build build-san train

# ---- probes: each compiles and runs a tiny program, so "found" means "works here"
PROBE_DIR := $(shell mktemp -d 2>/dev/null || echo /tmp)
OMP_OK := $(shell printf '$(HASH)include <omp.h>\nint main(void){return omp_get_max_threads()<1;}\n' \
            > $(PROBE_DIR)/omp.c && \
            $(CC) -fopenmp $(PROBE_DIR)/omp.c -o $(PROBE_DIR)/omp 2>/dev/null && $(PROBE_DIR)/omp && echo yes)
ifeq ($(OMP_OK),yes)
  CFLAGS += -fopenmp
  OMP_MSG := OpenMP: yes
else
  OMP_MSG := OpenMP: no ($(CC) -fopenmp failed to build or run a test program; building single-threaded)
endif
MPICC ?= mpicc
MPI_OK := $(shell printf '%s\n' '$(HASH)include <mpi.h>' \
            'int main(int c,char**v){MPI_Init(&c,&v);MPI_Finalize();return 0;}' > $(PROBE_DIR)/mpi.c && \
            OMPI_CC=$(CC) $(MPICC) $(PROBE_DIR)/mpi.c -o $(PROBE_DIR)/mpi 2>/dev/null && echo yes)
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
NVCC_OK := $(shell [ -n "$(NVCC)" ] && printf '__global__ void k(){}\nint main(){k<<<1,1>>>();return 0;}\n' \
             > $(PROBE_DIR)/k.cu && \
             $(NVCC) -c $(PROBE_DIR)/k.cu -o $(PROBE_DIR)/k.o 2>/dev/null && echo yes)
# (NO_NCCL=1: as if the system had none; NCCL_HOME, below, still counts)
NCCL_OK := $(shell [ "$(NVCC_OK)" = yes ] && [ "$(NO_NCCL)" != 1 ] && printf '%s\n' '$(HASH)include <nccl.h>' \
             'int main(){int v;return ncclGetVersion(&v)!=ncclSuccess;}' > $(PROBE_DIR)/n.cu && \
             $(NVCC) $(PROBE_DIR)/n.cu -lnccl -o $(PROBE_DIR)/n 2>/dev/null && echo yes)
# cuBLASLt (train.cu's --matmul cublaslt; the default matmuls need none): from the toolkit, from
# CUBLASLT_HOME=DIR (cublasLt.h and libcublasLt under DIR/include, DIR/lib: dev/gpu_check.sh points
# it at pip's wheel), or not at all with NO_CUBLASLT=1 (the build without it, as on an image without)
ifneq ($(CUBLASLT_HOME),)
  CUBLASLT_FLAGS := -I$(CUBLASLT_HOME)/include -L$(CUBLASLT_HOME)/lib -Xlinker -rpath=$(CUBLASLT_HOME)/lib
endif
CUBLASLT_OK := $(shell [ "$(NVCC_OK)" = yes ] && [ "$(NO_CUBLASLT)" != 1 ] && \
             printf '%s\n' '$(HASH)include <cublasLt.h>' \
             'int main(){cublasLtHandle_t h;return cublasLtCreate(&h)!=CUBLAS_STATUS_SUCCESS;}' \
             > $(PROBE_DIR)/lt.cu && \
             $(NVCC) $(CUBLASLT_FLAGS) $(PROBE_DIR)/lt.cu -lcublasLt -o $(PROBE_DIR)/lt 2>/dev/null && echo yes)
CUBLASLT_WHY := $(if $(filter 1,$(NO_CUBLASLT)),NO_CUBLASLT=1,cublasLt.h/libcublasLt not usable$(if \
    $(CUBLASLT_HOME), under $(CUBLASLT_HOME)))
$(shell rm -rf $(PROBE_DIR))
# the CPU trainer: with MPI when mpicc works (it still runs as one process without mpirun)
ifeq ($(MPI_OK),yes)
  TRAIN_CC = OMPI_CC=$(CC) $(MPICC)
  TRAIN_DEFS := -DUSE_MPI
else
  TRAIN_CC = $(CC)
endif

probe:
	$(SAY) "$(OMP_MSG)"
	$(SAY) "MPI: $(if $(MPI_OK),yes ($(MPICC)),no (skipping the MPI build: $(MPICC) cannot build an MPI program; \
	apt-get install libopenmpi-dev openmpi-bin))"
	$(SAY) "nvcc: $(if $(NVCC_OK),yes ($(NVCC)),no (skipping train.cu and test_gpu.cu: no working nvcc))"
	$(SAY) "NCCL: $(if $(NCCL_OK),yes,no (GPU build is single-process only: nccl.h/libnccl not usable))"
	$(SAY) "cuBLASLt: $(if $(CUBLASLT_OK),yes,no (GPU build without --matmul cublaslt: $(CUBLASLT_WHY)))"

include test/fuzz/fuzz.mk

# ============================================================================
# GPU section (train.cu, test/test_gpu.cu): `make gpu`, `make gpu-regs`, `make gpu-mix`.
# One fat binary for sm_75, sm_80 and sm_90, plus compute_90 PTX for newer cards.
# CUDA 13 no longer targets sm_70; for a V100 build with CUDA 12 (WMMA works there,
# cp.async is only compiled for sm_80+):
#   make gpu NVCC=/usr/local/cuda-12/bin/nvcc GPU_ARCHS="-gencode arch=compute_70,code=sm_70"
# Options: NCCL_HOME=DIR (nccl.h and libnccl under DIR/include, DIR/lib), CUBLASLT_HOME=DIR,
# NO_CUBLASLT=1 and NO_NCCL=1 (the probes above),
# GPU_DEBUG=1 (every launch waited for and checked, so a fault names the function that
# launched the kernel, with file and line; the time loops run without CUDA graphs; slower):
# rebuild with make -B.
# Device code carries line info (-lineinfo) for compute-sanitizer and Nsight.
# MLSTM_NO_GRAPH=1 in the environment runs the time loops without CUDA graphs.
comma := ,
GPU_ARCHS ?= -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
             -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3
NVCCFLAGS += -std=c++17 -I. -D_GNU_SOURCE -lineinfo $(GPU_ARCHS) \
             -Xcompiler -Wall$(comma)-Wextra$(if $(OMP_OK),$(comma)-fopenmp,$(comma)-Wno-unknown-pragmas)
ifeq ($(WERROR),1)
  NVCCFLAGS += -Werror all-warnings -Xcompiler -Werror
endif
ifeq ($(CUBLASLT_OK),yes)
  GPU_DEFS += -DUSE_CUBLASLT $(CUBLASLT_FLAGS)
  GPU_LIBS += -lcublasLt
endif
ifneq ($(NCCL_HOME),)
  NCCL_FLAGS := -I$(NCCL_HOME)/include -L$(NCCL_HOME)/lib -Xlinker -rpath=$(NCCL_HOME)/lib
  GPU_PROBE := $(shell mktemp -d 2>/dev/null || echo /tmp)
  NCCL_OK := $(shell [ "$(NVCC_OK)" = yes ] && printf '%s\n' '$(HASH)include <nccl.h>' \
               'int main(){int v;return ncclGetVersion(&v)!=ncclSuccess;}' > $(GPU_PROBE)/n.cu && \
               $(NVCC) $(NCCL_FLAGS) $(GPU_PROBE)/n.cu -lnccl -o $(GPU_PROBE)/n 2>/dev/null && echo yes)
  $(shell rm -rf $(GPU_PROBE))
endif
# The MPI wrapper's flags, as nvcc takes them: -I -L -l -D -U and file names pass as they are;
# -Wl,X goes through -Xlinker X and any other option through -Xcompiler. nvcc refuses host-compiler
# options it does not know ("nvcc fatal: Unknown option '-pthread'"), and Open MPI built from source
# and HPC-X wrappers emit -pthread and -Wl,-rpath,... (Debian's does not). test/test_nvcc_mpi.py
# builds against a wrapper that emits them.
nvcc_host_flags = $(foreach f,$(1),$(if $(filter -I% -L% -l% -D% -U%,$(f)),$(f),$(if $(filter -Wl$(comma)%,$(f)),\
    -Xlinker $(patsubst -Wl$(comma)%,%,$(f)),$(if $(filter -%,$(f)),-Xcompiler $(f),$(f)))))
GPU_MPI_CFLAGS := $(if $(MPI_OK),$(shell $(MPICC) -showme:compile 2>/dev/null))
ifneq ($(GPU_MPI_CFLAGS),)
  GPU_DEFS += -DUSE_MPI $(call nvcc_host_flags,$(GPU_MPI_CFLAGS))
  GPU_LIBS += $(call nvcc_host_flags,$(shell $(MPICC) -showme:link 2>/dev/null))
endif
ifeq ($(NCCL_OK),yes)
  GPU_DEFS += -DUSE_NCCL $(NCCL_FLAGS)
  GPU_LIBS += -lnccl
endif
ifeq ($(GPU_DEBUG),1)
  GPU_DEFS += -DGPU_DEBUG
endif
GPU_DEPS := train.cu train_switches.cu harness/gpu_harness.cuh harness/gpu_harness.cu $(TRAIN_HEADERS)
GPU_BINS := train_gpu train_gpu_fp32 $(BUILD)/test_gpu $(BUILD)/test_gpu_fp32

.PHONY: gpu gpu-regs gpu-mix clean-gpu
gpu:
ifeq ($(NVCC_OK),yes)
gpu: $(GPU_BINS)
	$(SAY) "GPU build: $(GPU_BINS) ($(if $(GPU_MPI_CFLAGS),MPI,no MPI), $(if $(filter yes,$(NCCL_OK)),NCCL,no NCCL), \
	$(if $(filter yes,$(CUBLASLT_OK)),cuBLASLt,no cuBLASLt))"
all: gpu
else
	$(SAY) "nvcc: no working nvcc; skipping the GPU build"
endif

# The trainers' builds keep ptxas's register and spill report in $(BUILD)/ptxas-<binary>.txt (what
# make gpu-regs reads) and show the rest of the compiler's output.
nvcc_keeping_ptxas_report = $(NVCC) $(NVCCFLAGS) -Xptxas -v $(GPU_DEFS) $(1) $< -o $@ $(GPU_LIBS) \
    2> $(BUILD)/ptxas-$@.txt; \
    rc=$$?; grep -v -e '^ptxas info' -e 'bytes stack frame' $(BUILD)/ptxas-$@.txt >&2; exit $$rc
train_gpu: $(GPU_DEPS) | $(BUILD)
	$(call nvcc_keeping_ptxas_report,)
train_gpu_fp32: $(GPU_DEPS) | $(BUILD)
	$(call nvcc_keeping_ptxas_report,-DPRECISION_FP32)
$(BUILD)/test_gpu: test/test_gpu.cu $(GPU_DEPS) test/test.h | $(BUILD)
	$(NVCC) $(NVCCFLAGS) $(GPU_DEFS) $< -o $@ $(GPU_LIBS)
$(BUILD)/test_gpu_fp32: test/test_gpu.cu $(GPU_DEPS) test/test.h | $(BUILD)
	$(NVCC) $(NVCCFLAGS) $(GPU_DEFS) -DPRECISION_FP32 $< -o $@ $(GPU_LIBS)

# Registers and spills of every matmul and cell kernel, per precision and arch (ptxas -v, kept
# by the trainers' builds); fails if any of them spills.
gpu-regs: train_gpu train_gpu_fp32
	@for f in $(BUILD)/ptxas-train_gpu.txt $(BUILD)/ptxas-train_gpu_fp32.txt; do \
	  test -s $$f || { echo "gpu-regs: $$f missing (built before it was kept: make -B gpu)"; exit 1; }; done
	@for p in FP16 FP32; do \
	  f=$(BUILD)/ptxas-train_gpu$$([ $$p = FP32 ] && echo _fp32).txt; \
	  awk -v p=$$p '/Compiling entry function/ { match($$0, /_Z[A-Za-z0-9_]+/); fn = substr($$0, RSTART, RLENGTH); \
	                 match($$0, /sm_[0-9]+/); arch = substr($$0, RSTART, RLENGTH) } \
	       /spill stores/ { n = split($$0, a, ","); st = a[2] + 0; ld = a[3] + 0 } \
	       /Used [0-9]+ registers/ && fn ~ /matmul|cell/ { match($$0, /Used [0-9]+/); \
	                 printf "%s %s regs %3d spill bytes %d/%d  %s\n", p, arch, \
	                        substr($$0, RSTART + 5, RLENGTH - 5), st, ld, fn }' $$f; \
	done | sed 's/  *_Z/ _Z/' | c++filt | tee $(BUILD)/gpu-regs.txt
	@test -s $(BUILD)/gpu-regs.txt || { echo "gpu-regs: no ptxas output (is nvcc working?)"; exit 1; }
	@if grep -Eq 'spill bytes ([1-9][0-9]*/|[0-9]+/[1-9])' $(BUILD)/gpu-regs.txt; then \
	   echo "gpu-regs: FAIL: spills above"; exit 1; \
	 else echo "gpu-regs: no spills in $$(wc -l < $(BUILD)/gpu-regs.txt) matmul/cell kernel builds"; fi

# The WMMA kernels' instruction mix as nvcc emits it (PTX for sm_90, the FP16 build): per
# kernel the wmma mma and fragment loads (one slab's worth: the slab loop is not unrolled, the
# k16 sub-steps are), the cp.async copies (prologue and loop) and barriers; dev/perf_model.py
# --mix derives the tile's efficiency from the same counts.
gpu-mix: | $(BUILD)
	@$(NVCC) $(filter-out $(GPU_ARCHS),$(NVCCFLAGS)) $(GPU_DEFS) -arch=sm_90 -ptx train.cu -o $(BUILD)/gpu-mix.ptx
	@awk '/\.entry/ { fn = "" } \
	       /\.entry _Z[0-9]*matmul_wmma_kernel/ { match($$0, /_Z[A-Za-z0-9_]+/); fn = substr($$0, RSTART, RLENGTH); \
	       order[++n] = fn } fn != "" && /wmma\.mma/ { mma[fn]++ } fn != "" && /wmma\.load\.[ab]/ { ld[fn]++ } \
	       fn != "" && /cp\.async\.cg/ { cp[fn]++ } fn != "" && /bar\.sync|barrier\.sync/ { bar[fn]++ } \
	       END { for (i = 1; i <= n; i++) { f = order[i]; \
	             printf "wmma.mma %3d  fragment loads %3d  cp.async %3d  barriers %2d  %s\n", \
	             mma[f], ld[f], cp[f], bar[f], f } }' $(BUILD)/gpu-mix.ptx \
		| c++filt | sed 's/(__half const.*//' | tee $(BUILD)/gpu-mix.txt
	@rm -f $(BUILD)/gpu-mix.ptx
	@test -s $(BUILD)/gpu-mix.txt || { echo "gpu-mix: no WMMA kernel in the PTX (is nvcc working?)"; exit 1; }

include test/cuda/cudacpu.mk
