# mlstm.c build. `make` builds what this machine supports and says what it skipped;
# `make test` builds and runs every test; `make SAN=1 test` does so under ASan+UBSan.
CC      ?= gcc
OPT     ?= -O3 -march=native -ffp-contract=fast  # fused multiply-add in the matmuls (about 15% faster)
CFLAGS  ?= $(OPT)
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -fopenmp-simd -I.
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

# ---- probes: each compiles and runs a tiny program, so "found" means "works here"
PROBE_DIR := $(shell mktemp -d 2>/dev/null || echo /tmp)
OMP_OK := $(shell printf '$(HASH)include <omp.h>\nint main(void){return omp_get_max_threads()<1;}\n' > $(PROBE_DIR)/omp.c && \
            $(CC) -fopenmp $(PROBE_DIR)/omp.c -o $(PROBE_DIR)/omp 2>/dev/null && $(PROBE_DIR)/omp && echo yes)
ifeq ($(OMP_OK),yes)
  CFLAGS += -fopenmp
  OMP_MSG := OpenMP: yes
else
  OMP_MSG := OpenMP: no ($(CC) -fopenmp failed to build or run a test program; building single-threaded)
endif
MPICC ?= mpicc
MPI_OK := $(shell printf '$(HASH)include <mpi.h>\nint main(int c,char**v){MPI_Init(&c,&v);MPI_Finalize();return 0;}\n' > $(PROBE_DIR)/mpi.c && \
            OMPI_CC=$(CC) $(MPICC) $(PROBE_DIR)/mpi.c -o $(PROBE_DIR)/mpi 2>/dev/null && echo yes)
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
NVCC_OK := $(shell [ -n "$(NVCC)" ] && printf '__global__ void k(){}\nint main(){k<<<1,1>>>();return 0;}\n' > $(PROBE_DIR)/k.cu && \
             $(NVCC) -c $(PROBE_DIR)/k.cu -o $(PROBE_DIR)/k.o 2>/dev/null && echo yes)
NCCL_OK := $(shell [ "$(NVCC_OK)" = yes ] && printf '$(HASH)include <nccl.h>\nint main(){int v;return ncclGetVersion(&v)!=ncclSuccess;}\n' > $(PROBE_DIR)/n.cu && \
             $(NVCC) $(PROBE_DIR)/n.cu -lnccl -o $(PROBE_DIR)/n 2>/dev/null && echo yes)
$(shell rm -rf $(PROBE_DIR))

TOOL_LDLIBS_prepare := -ljansson -lz
TOOL_LDLIBS_transfer := -ljansson -llinear
HEADERS := util.h mlstm.h gemm.h data.h schedule.h test/test.h
TESTS   := $(patsubst test/%.c,$(BUILD)/%,$(wildcard test/test_*.c))
# test/test_*.py: run by python3 from the repository root (the performance and scaling models, gpu_check.sh, the
# GPU build's MPI flags)
PY_TESTS := $(wildcard test/test_*.py)
TOOLS   := $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/*.c))

# the CPU trainer: with MPI when mpicc works (it still runs as one process without mpirun)
ifeq ($(MPI_OK),yes)
  TRAIN_CC := OMPI_CC=$(CC) $(MPICC)
  TRAIN_DEFS := -DUSE_MPI
else
  TRAIN_CC := $(CC)
endif
TRAIN_HEADERS := train.h util.h mlstm.h gemm.h data.h schedule.h

.PHONY: all test test-san clean probe run
all: probe train $(TESTS) $(TOOLS)

train: $(BUILD)/train
	cp $< $@.tmp && mv -f $@.tmp $@  # a new file, so a running ./train is not disturbed

$(BUILD)/train: train.c $(TRAIN_HEADERS) | $(BUILD)
	$(TRAIN_CC) $(CFLAGS) $(TRAIN_DEFS) $< -o $@ $(LDLIBS)

# the main command: train the default small model on the built-in corpus (again: it
# replaces out/model.ckpt and out/train.log, which ./train alone refuses to do)
run: train
	./train --overwrite

probe:
	$(SAY) "$(OMP_MSG)"
	$(SAY) "MPI: $(if $(MPI_OK),yes ($(MPICC)),no (skipping the MPI build: $(MPICC) cannot build an MPI program; apt-get install libopenmpi-dev openmpi-bin))"
	$(SAY) "nvcc: $(if $(NVCC_OK),yes ($(NVCC)),no (skipping train.cu and test_gpu.cu: no working nvcc))"
	$(SAY) "NCCL: $(if $(NCCL_OK),yes,no (GPU build is single-process only: nccl.h/libnccl not usable))"

$(BUILD)/%: test/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# test_backend includes train.c (without its main) and calls train_main in-process
$(BUILD)/test_backend: train.c $(TRAIN_HEADERS)
# test_generate includes tools/generate.c (without its main) and runs build/generate and build/train
$(BUILD)/test_generate: tools/generate.c

$(BUILD)/%: tools/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS) $(TOOL_LDLIBS_$*)

$(BUILD):
	mkdir -p $@

test: $(BUILD)/train $(TESTS) $(TOOLS)
	@test/run.sh $(TESTS) $(PY_TESTS) $(CUDACPU_TESTS)

test-san:
	$(MAKE) SAN=1 test

clean:
	rm -rf build build-san train

# ============================================================================
# Fuzzing (test/fuzz/): `make fuzz` builds a libFuzzer harness for every reader of
# files (shards, checkpoints, labels, .npy, prepare's and transfer's inputs) with
# clang -fsanitize=fuzzer,address,undefined and runs each for FUZZ_SECONDS (default
# 60), or FUZZ_RUNS inputs when that is set, one after another, from its committed
# seeds test/fuzz/corpus/<harness>/. Inputs that found new code are kept in
# $(BUILD)/fuzz/corpus/<harness>/, logs and any finding (crash-*, leak-*, timeout-*,
# oom-*) in $(BUILD)/fuzz/. Without a clang that links libFuzzer it says so and
# skips (apt-get install clang libclang-rt-dev); REQUIRE_FUZZ=1 makes that an error.
# `make fuzz-seeds` rewrites the seed files from test/fuzz/make_seeds.c. By hand:
# build/fuzz/fuzz_shard NEWDIR test/fuzz/corpus/shard (libFuzzer adds inputs to the
# first directory: never name the seed directory first).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZERS      := shard checkpoint npy prepare labels transfer_text transfer_feat
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -I. -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Wall -Wextra
ifeq ($(WERROR),1)
  FUZZ_CFLAGS += -Werror
endif
FUZZ_LDLIBS  := -ljansson -lz -llinear -lm
FUZZ_LIMIT   := $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(FUZZ_SECONDS))

.PHONY: fuzz fuzz-run fuzz-seeds
fuzz:
	@d=$$(mktemp -d) && printf 'int LLVMFuzzerTestOneInput(const char *p, unsigned long n) { return p && n > 1 ? 0 : 0; }\n' > $$d/t.c && \
	 if $(FUZZ_CC) -fsanitize=fuzzer,address,undefined $$d/t.c -o $$d/t 2>/dev/null; then rm -rf $$d; $(MAKE) --no-print-directory fuzz-run; \
	 else rm -rf $$d; echo "fuzz: $(FUZZ_CC) cannot build a libFuzzer program (apt-get install clang libclang-rt-dev); skipping the fuzzers"; \
	      [ "$(REQUIRE_FUZZ)" != 1 ]; fi

$(FUZZ_DIR)/fuzz_%: test/fuzz/fuzz_%.c test/fuzz/fuzz.h $(HEADERS) $(wildcard tools/*.c) test/fuzz/fuzz_prepare.c | $(BUILD)
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< -o $@ $(FUZZ_LDLIBS)

# each harness in turn; the first finding stops the run with the end of its log
fuzz-run: $(patsubst %,$(FUZZ_DIR)/fuzz_%,$(FUZZERS))
	@for h in $(FUZZERS); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$h; \
	  if ! $(FUZZ_DIR)/fuzz_$$h $(FUZZ_LIMIT) -timeout=10 -close_fd_mask=3 -print_final_stats=1 \
	       -artifact_prefix=$(FUZZ_DIR)/$$h- $(FUZZ_DIR)/corpus/$$h test/fuzz/corpus/$$h > $(FUZZ_DIR)/$$h.log 2>&1; then \
	    tail -n 40 $(FUZZ_DIR)/$$h.log; echo "fuzz: $$h: FINDING (log $(FUZZ_DIR)/$$h.log, input $(FUZZ_DIR)/$$h-*)"; exit 1; fi; \
	  awk -v h=$$h '/^stat::number_of_executed_units/ { n = $$2 } /^stat::average_exec_per_sec/ { r = $$2 } \
	       /^Done [0-9]+ runs in/ { s = $$5 } END { printf "fuzz: %-13s %9d executions in %4d s (%d/s), no findings\n", h, n, s, r }' $(FUZZ_DIR)/$$h.log; \
	done

fuzz-seeds: $(BUILD)/make_seeds
	$(BUILD)/make_seeds test/fuzz/corpus

$(BUILD)/make_seeds: test/fuzz/make_seeds.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# ============================================================================
# GPU section (train.cu, test/test_gpu.cu): `make gpu`, `make gpu-regs`, `make gpu-mix`.
# One fat binary for sm_75, sm_80 and sm_90, plus compute_90 PTX for newer cards.
# CUDA 13 no longer targets sm_70; for a V100 build with CUDA 12 (WMMA works there,
# cp.async is only compiled for sm_80+):
#   make gpu NVCC=/usr/local/cuda-12/bin/nvcc GPU_ARCHS="-gencode arch=compute_70,code=sm_70"
# Options: NCCL_HOME=DIR (nccl.h and libnccl under DIR/include, DIR/lib),
# USE_CUBLAS=1 (train with cuBLAS's matmul, for comparison), GPU_DEBUG=1 (every launch
# waited for and checked, so a fault names the function that launched the kernel, with
# file and line; the time loops run without CUDA graphs; slower): rebuild with make -B.
# Device code carries line info (-lineinfo) for compute-sanitizer and Nsight.
# MLSTM_NO_GRAPH=1 in the environment runs the time loops without CUDA graphs.
comma := ,
GPU_ARCHS ?= -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
             -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3
NVCCFLAGS += -std=c++17 -I. -D_GNU_SOURCE -lineinfo $(GPU_ARCHS) -Xcompiler -Wall$(comma)-Wextra$(if $(OMP_OK),$(comma)-fopenmp,$(comma)-Wno-unknown-pragmas)
ifeq ($(WERROR),1)
  NVCCFLAGS += -Werror all-warnings -Xcompiler -Werror
endif
GPU_LIBS := -lcublasLt -lcublas
ifneq ($(NCCL_HOME),)
  NCCL_FLAGS := -I$(NCCL_HOME)/include -L$(NCCL_HOME)/lib -Xlinker -rpath=$(NCCL_HOME)/lib
  GPU_PROBE := $(shell mktemp -d 2>/dev/null || echo /tmp)
  NCCL_OK := $(shell [ "$(NVCC_OK)" = yes ] && printf '$(HASH)include <nccl.h>\nint main(){int v;return ncclGetVersion(&v)!=ncclSuccess;}\n' > $(GPU_PROBE)/n.cu && \
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
ifeq ($(USE_CUBLAS),1)
  GPU_DEFS += -DUSE_CUBLAS
endif
ifeq ($(GPU_DEBUG),1)
  GPU_DEFS += -DGPU_DEBUG
endif
GPU_DEPS := train.cu $(TRAIN_HEADERS)
GPU_BINS := train_gpu train_gpu_fp32 $(BUILD)/test_gpu $(BUILD)/test_gpu_fp32

.PHONY: gpu gpu-regs gpu-mix clean-gpu
gpu:
ifeq ($(NVCC_OK),yes)
gpu: $(GPU_BINS)
	$(SAY) "GPU build: $(GPU_BINS) ($(if $(GPU_MPI_CFLAGS),MPI,no MPI), $(if $(filter yes,$(NCCL_OK)),NCCL,no NCCL))"
all: gpu
else
	$(SAY) "nvcc: no working nvcc; skipping the GPU build"
endif

train_gpu: $(GPU_DEPS)
	$(NVCC) $(NVCCFLAGS) $(GPU_DEFS) $< -o $@ $(GPU_LIBS)
train_gpu_fp32: $(GPU_DEPS)
	$(NVCC) $(NVCCFLAGS) $(GPU_DEFS) -DPRECISION_FP32 $< -o $@ $(GPU_LIBS)
$(BUILD)/test_gpu: test/test_gpu.cu $(GPU_DEPS) test/test.h | $(BUILD)
	$(NVCC) $(NVCCFLAGS) $(GPU_DEFS) $< -o $@ $(GPU_LIBS)
$(BUILD)/test_gpu_fp32: test/test_gpu.cu $(GPU_DEPS) test/test.h | $(BUILD)
	$(NVCC) $(NVCCFLAGS) $(GPU_DEFS) -DPRECISION_FP32 $< -o $@ $(GPU_LIBS)

# Registers and spills of every matmul and cell kernel, per precision and arch
# (ptxas -v); fails if any of them spills.
gpu-regs: | $(BUILD)
	@for p in FP16 FP32; do \
	  $(NVCC) $(NVCCFLAGS) $(GPU_DEFS) -DPRECISION_$$p -Xptxas -v -c train.cu -o $(BUILD)/regs.o 2>&1 | \
	  awk -v p=$$p '/Compiling entry function/ { match($$0, /_Z[A-Za-z0-9_]+/); fn = substr($$0, RSTART, RLENGTH); \
	                 match($$0, /sm_[0-9]+/); arch = substr($$0, RSTART, RLENGTH) } \
	       /spill stores/ { n = split($$0, a, ","); st = a[2] + 0; ld = a[3] + 0 } \
	       /Used [0-9]+ registers/ && fn ~ /matmul|cell/ { match($$0, /Used [0-9]+/); \
	                 printf "%s %s regs %3d spill bytes %d/%d  %s\n", p, arch, substr($$0, RSTART + 5, RLENGTH - 5), st, ld, fn }'; \
	done | sed 's/  *_Z/ _Z/' | c++filt | tee $(BUILD)/gpu-regs.txt
	@rm -f $(BUILD)/regs.o
	@test -s $(BUILD)/gpu-regs.txt || { echo "gpu-regs: no ptxas output (is nvcc working?)"; exit 1; }
	@if grep -Eq 'spill bytes ([1-9][0-9]*/|[0-9]+/[1-9])' $(BUILD)/gpu-regs.txt; then echo "gpu-regs: FAIL: spills above"; exit 1; \
	 else echo "gpu-regs: no spills in $$(wc -l < $(BUILD)/gpu-regs.txt) matmul/cell kernel builds"; fi

# The WMMA kernels' instruction mix as nvcc emits it (PTX for sm_90, the FP16 build): per
# kernel the wmma mma and fragment loads (one slab's worth: the slab loop is not unrolled, the
# k16 sub-steps are), the cp.async copies (prologue and loop) and barriers; tools/perf_model.py
# --mix derives the tile's efficiency from the same counts.
gpu-mix: | $(BUILD)
	@$(NVCC) $(filter-out $(GPU_ARCHS),$(NVCCFLAGS)) $(GPU_DEFS) -arch=sm_90 -ptx train.cu -o $(BUILD)/gpu-mix.ptx
	@awk '/\.entry/ { fn = "" } /\.entry _Z[0-9]*matmul_wmma_kernel/ { match($$0, /_Z[A-Za-z0-9_]+/); fn = substr($$0, RSTART, RLENGTH); \
	       order[++n] = fn } fn != "" && /wmma\.mma/ { mma[fn]++ } fn != "" && /wmma\.load\.[ab]/ { ld[fn]++ } \
	       fn != "" && /cp\.async\.cg/ { cp[fn]++ } fn != "" && /bar\.sync|barrier\.sync/ { bar[fn]++ } \
	       END { for (i = 1; i <= n; i++) { f = order[i]; printf "wmma.mma %3d  fragment loads %3d  cp.async %3d  barriers %2d  %s\n", \
	             mma[f], ld[f], cp[f], bar[f], f } }' $(BUILD)/gpu-mix.ptx | c++filt | sed 's/(__half const.*//' | tee $(BUILD)/gpu-mix.txt
	@rm -f $(BUILD)/gpu-mix.ptx
	@test -s $(BUILD)/gpu-mix.txt || { echo "gpu-mix: no WMMA kernel in the PTX (is nvcc working?)"; exit 1; }

# ============================================================================
# train.cu on the CPU (test/cuda): test/cuda/cudapp rewrites a .cu line for line into
# C++, which compiles against the layer's CUDA headers; every kernel then runs on the
# CPU, thread by thread, and `make test` checks the GPU trainer against mlstm.h.
# Variants: FP16 with cp.async (sm_80) under the lockstep schedule, FP16 with
# synchronous copies (sm_75) warp by warp in reverse, FP32 under both, and the
# GPU_DEBUG build (FP32, lockstep: every launch checked and waited for, no graphs); in
# the SAN build only the first (ASan+UBSan are ~5x slower). test_half checks the float->half
# conversion on all 2^32 inputs; test_cudacpu checks the layer's own reports and
# runs the emulated trainer under mpirun -np 2 against -np 1 with twice the rows.
CXX ?= g++
CUDACPU := $(BUILD)/cudacpu
CUDACPU_CXXFLAGS := $(if $(filter 1,$(SAN)),$(SANFLAGS),$(OPT)) -std=c++17 -D_GNU_SOURCE -I test/cuda -I . -fno-strict-aliasing \
    -Wall -Wextra -Wno-unknown-pragmas $(if $(filter yes,$(OMP_OK)),-fopenmp) $(if $(filter 1,$(WERROR)),-Werror)
CUDACPU_MPI := $(if $(MPI_OK),-DUSE_MPI -DUSE_NCCL $(shell $(MPICC) -showme:compile 2>/dev/null))
CUDACPU_MPI_LIBS := $(if $(MPI_OK),$(shell $(MPICC) -showme:link 2>/dev/null))
CUDACPU_HDRS := $(wildcard test/cuda/*.h)
CUDACPU_DEPS := train.cu $(wildcard train.c train.h util.h) $(TRAIN_HEADERS) test/test.h $(CUDACPU_HDRS)
ifeq ($(SAN),1)
  CUDACPU_TESTS := $(CUDACPU)/test_gpu.lockstep
else
  CUDACPU_TESTS := $(CUDACPU)/test_gpu.lockstep $(CUDACPU)/test_gpu_sm75.reverse $(CUDACPU)/test_gpu_fp32.lockstep \
                   $(CUDACPU)/test_gpu_fp32.reverse $(CUDACPU)/test_gpu_debug.lockstep $(CUDACPU)/test_half $(CUDACPU)/test_cudacpu
endif
test: $(CUDACPU_TESTS)
.PHONY: cudacpu
cudacpu: $(CUDACPU_TESTS) $(CUDACPU)/train_gpu $(CUDACPU)/train_gpu_fp32

$(CUDACPU):
	mkdir -p $@
$(CUDACPU)/cudapp: test/cuda/cudapp.c | $(CUDACPU)
	$(CC) -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra $< -o $@
$(CUDACPU)/%.cpp: $(CUDACPU)/cudapp $(CUDACPU_DEPS) $(wildcard test/*.cu test/cuda/*.cu)
	$(CUDACPU)/cudapp -I . $(or $(wildcard test/cuda/$*.cu),$(wildcard test/$*.cu),$*.cu) $@
$(CUDACPU)/layer_%.o: test/cuda/cudacpu.cpp $(CUDACPU_HDRS) | $(CUDACPU)
	$(CXX) $(CUDACPU_CXXFLAGS) -D__CUDA_ARCH__=$* -c $< -o $@
# test_gpu.cpp and train.cpp are rewritten once; each variant compiles them with its flags
$(CUDACPU)/test_gpu: $(CUDACPU)/test_gpu.cpp $(CUDACPU)/layer_800.o
	$(CXX) $(CUDACPU_CXXFLAGS) $(CUDACPU_MPI) -D__CUDA_ARCH__=800 $^ -o $@ $(CUDACPU_MPI_LIBS) -lm
$(CUDACPU)/test_gpu_sm75: $(CUDACPU)/test_gpu.cpp $(CUDACPU)/layer_750.o
	$(CXX) $(CUDACPU_CXXFLAGS) $(CUDACPU_MPI) -D__CUDA_ARCH__=750 $^ -o $@ $(CUDACPU_MPI_LIBS) -lm
$(CUDACPU)/test_gpu_fp32: $(CUDACPU)/test_gpu.cpp $(CUDACPU)/layer_800.o
	$(CXX) $(CUDACPU_CXXFLAGS) $(CUDACPU_MPI) -D__CUDA_ARCH__=800 -DPRECISION_FP32 $^ -o $@ $(CUDACPU_MPI_LIBS) -lm
$(CUDACPU)/test_gpu_debug: $(CUDACPU)/test_gpu.cpp $(CUDACPU)/layer_800.o
	$(CXX) $(CUDACPU_CXXFLAGS) $(CUDACPU_MPI) -D__CUDA_ARCH__=800 -DPRECISION_FP32 -DGPU_DEBUG $^ -o $@ $(CUDACPU_MPI_LIBS) -lm
$(CUDACPU)/train_gpu: $(CUDACPU)/train.cpp $(CUDACPU)/layer_800.o
	$(CXX) $(CUDACPU_CXXFLAGS) $(CUDACPU_MPI) -D__CUDA_ARCH__=800 $^ -o $@ $(CUDACPU_MPI_LIBS) -lm
$(CUDACPU)/train_gpu_fp32: $(CUDACPU)/train.cpp $(CUDACPU)/layer_800.o
	$(CXX) $(CUDACPU_CXXFLAGS) $(CUDACPU_MPI) -D__CUDA_ARCH__=800 -DPRECISION_FP32 $^ -o $@ $(CUDACPU_MPI_LIBS) -lm
$(CUDACPU)/test_cudacpu: $(CUDACPU)/test_cudacpu.cpp $(CUDACPU)/layer_800.o test/test.h | $(CUDACPU)/train_gpu $(CUDACPU)/train_gpu_fp32
	$(CXX) $(CUDACPU_CXXFLAGS) -D__CUDA_ARCH__=800 $(filter %.cpp %.o,$^) -o $@ -lm
$(CUDACPU)/test_half: test/cuda/test_half.cpp test/cuda/cuda_fp16.h test/test.h | $(CUDACPU)
	$(CXX) $(CUDACPU_CXXFLAGS) $< -o $@
# run.sh runs programs without arguments: these name a program, a schedule and --quick
# (the H=4096 shapes of the full suite take hours on a CPU)
CUDACPU_WRAP = @printf '\043!/bin/sh\nOMP_WAIT_POLICY=passive CUDACPU_SCHEDULE=%s exec "$$(dirname "$$0")/%s" --quick "$$@"\n' $(1) $* > $@ && chmod +x $@
$(CUDACPU)/%.lockstep: | $(CUDACPU)
	$(call CUDACPU_WRAP,lockstep)
$(CUDACPU)/%.reverse: | $(CUDACPU)
	$(call CUDACPU_WRAP,reverse)
$(CUDACPU_TESTS): $(CUDACPU)/test_gpu $(if $(filter 1,$(SAN)),,$(CUDACPU)/test_gpu_sm75 $(CUDACPU)/test_gpu_fp32 $(CUDACPU)/test_gpu_debug)

clean: clean-gpu
clean-gpu:
	rm -f train_gpu train_gpu_fp32
