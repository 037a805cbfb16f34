# mlstm.c build. `make` builds what this machine supports and says what it skipped;
# `make test` builds and runs every test; `make SAN=1 test` does so under ASan+UBSan.
CC      ?= gcc
OPT     ?= -O3 -march=native
CFLAGS  ?= $(OPT)
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -fopenmp-simd -I.
LDLIBS  += -lm
BUILD   ?= build
ifeq ($(WERROR),1)
  CFLAGS  += -Werror
endif
ifeq ($(SAN),1)
  CFLAGS  += -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
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
HEADERS := mlstm.h $(wildcard data.h schedule.h test/test.h)
TESTS   := $(patsubst test/%.c,$(BUILD)/%,$(wildcard test/test_*.c))
TOOLS   := $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/*.c))

# the CPU trainer: with MPI when mpicc works (it still runs as one process without mpirun)
ifeq ($(MPI_OK),yes)
  TRAIN_CC := OMPI_CC=$(CC) $(MPICC)
  TRAIN_DEFS := -DUSE_MPI
else
  TRAIN_CC := $(CC)
endif
TRAIN_HEADERS := mlstm.h data.h schedule.h

.PHONY: all test test-san clean probe run
all: probe train $(TESTS) $(TOOLS)

train: $(BUILD)/train
	cp $< $@

$(BUILD)/train: train.c $(TRAIN_HEADERS) | $(BUILD)
	$(TRAIN_CC) $(CFLAGS) $(TRAIN_DEFS) $< -o $@ $(LDLIBS)

# the main command: train the default small model on the built-in corpus
run: train
	./train

probe:
	$(SAY) "$(OMP_MSG)"
	$(SAY) "MPI: $(if $(MPI_OK),yes ($(MPICC)),no (skipping the MPI build: $(MPICC) cannot build an MPI program; apt-get install libopenmpi-dev openmpi-bin))"
	$(SAY) "nvcc: $(if $(NVCC_OK),yes ($(NVCC)),no (skipping train.cu and test_gpu.cu: no working nvcc))"
	$(SAY) "NCCL: $(if $(NCCL_OK),yes,no (GPU build is single-process only: nccl.h/libnccl not usable))"

$(BUILD)/%: test/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

$(BUILD)/%: tools/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS) $(TOOL_LDLIBS_$*)

$(BUILD):
	mkdir -p $@

test: $(BUILD)/train $(TESTS) $(TOOLS)
	@test/run.sh $(TESTS)

test-san:
	$(MAKE) SAN=1 test

clean:
	rm -rf build build-san train
