# train.cu on the CPU (test/cuda): test/cuda/cudapp rewrites a .cu line for line into
# C++, which compiles against the layer's CUDA headers; every kernel then runs on the
# CPU, thread by thread, and `make test` checks the GPU trainer against mlstm.h.
# Variants: FP16 with cp.async (sm_80) under the lockstep schedule, FP16 with
# synchronous copies (sm_75) warp by warp in reverse, FP32 under both, and the
# GPU_DEBUG build (FP32, lockstep: every launch checked and waited for, no graphs); in
# the SAN build only the first (ASan+UBSan are ~5x slower). test_half checks the float->half
# conversion on all 2^32 inputs; test_cudacpu checks the layer's own reports, the GPU trainer's
# --matmul against the CPU trainer's flags (and against a build without cuBLASLt, train_gpu_nolt,
# at -O0: it only starts), runs the emulated trainer under mpirun -np 2 against -np 1 with
# twice the rows, and feeds test_gpu bad benchmark counts. Every build but train_gpu_nolt has the
# layer's cuBLASLt (-DUSE_CUBLASLT).
CXX ?= g++
CUDACPU := $(BUILD)/cudacpu
CUDACPU_CXXFLAGS := $(if $(filter 1,$(SAN)),$(SANFLAGS),$(OPT)) -std=c++17 -D_GNU_SOURCE -I test/cuda -I . -fno-strict-aliasing \
    -Wall -Wextra -Wno-unknown-pragmas $(if $(filter yes,$(OMP_OK)),-fopenmp) $(if $(filter 1,$(WERROR)),-Werror) \
    -DUSE_CUBLASLT
CUDACPU_MPI := $(if $(MPI_OK),-DUSE_MPI -DUSE_NCCL $(shell $(MPICC) -showme:compile 2>/dev/null))
CUDACPU_MPI_LIBS := $(if $(MPI_OK),$(shell $(MPICC) -showme:link 2>/dev/null))
CUDACPU_HDRS := $(wildcard test/cuda/*.h)
CUDACPU_DEPS := train.cu train_switches.cu harness/gpu_harness.cuh harness/gpu_harness.cu $(wildcard train.c train.h util.h) $(TRAIN_HEADERS) test/test.h $(CUDACPU_HDRS)
ifeq ($(SAN),1)
  CUDACPU_TESTS := $(CUDACPU)/test_gpu.lockstep
else
  CUDACPU_TESTS := $(CUDACPU)/test_gpu.lockstep $(CUDACPU)/test_gpu_sm75.reverse $(CUDACPU)/test_gpu_fp32.lockstep \
                   $(CUDACPU)/test_gpu_fp32.reverse $(CUDACPU)/test_gpu_debug.lockstep $(CUDACPU)/test_half $(CUDACPU)/test_cudacpu
endif
test test-build: $(CUDACPU_TESTS)
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
$(CUDACPU)/train_gpu_nolt: $(CUDACPU)/train.cpp $(CUDACPU)/layer_800.o
	$(CXX) $(filter-out -DUSE_CUBLASLT,$(CUDACPU_CXXFLAGS)) -O0 -D__CUDA_ARCH__=800 $^ -o $@ -lm
$(CUDACPU)/test_cudacpu: $(CUDACPU)/test_cudacpu.cpp $(CUDACPU)/layer_800.o test/test.h | $(CUDACPU)/train_gpu $(CUDACPU)/train_gpu_fp32 \
    $(CUDACPU)/train_gpu_nolt $(BUILD)/train $(CUDACPU)/test_gpu
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
