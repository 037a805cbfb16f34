# Fuzzing (test/fuzz/): `make fuzz` builds a libFuzzer harness for every reader of
# files (shards, checkpoints, labels, .npy, prepare's and transfer's inputs) with
# clang -fsanitize=fuzzer,address,undefined and runs each for FUZZ_SECONDS (default
# 60), or FUZZ_RUNS inputs when that is set, one after another (with make -j, that many
# at once), from its committed seeds test/fuzz/corpus/<harness>/. Inputs that found new
# code are kept in $(BUILD)/fuzz/corpus/<harness>/, logs and any finding (crash-*, leak-*,
# timeout-*, oom-*) in $(BUILD)/fuzz/. Without a clang that links libFuzzer it says so and
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

.PHONY: fuzz fuzz-run fuzz-seeds  # (not fuzz-run-%: make applies no pattern rule to a phony target)
fuzz:
	@d=$$(mktemp -d) && printf 'int LLVMFuzzerTestOneInput(const char *p, unsigned long n) { return p && n > 1 ? 0 : 0; }\n' > $$d/t.c && \
	 if $(FUZZ_CC) -fsanitize=fuzzer,address,undefined $$d/t.c -o $$d/t 2>/dev/null; then rm -rf $$d; $(MAKE) --no-print-directory fuzz-run; \
	 else rm -rf $$d; echo "fuzz: $(FUZZ_CC) cannot build a libFuzzer program (apt-get install clang libclang-rt-dev); skipping the fuzzers"; \
	      [ "$(REQUIRE_FUZZ)" != 1 ]; fi

$(FUZZ_DIR)/fuzz_%: test/fuzz/fuzz_%.c test/fuzz/fuzz.h $(HEADERS) $(wildcard tools/*.c) test/fuzz/fuzz_prepare.c | $(BUILD)
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< -o $@ $(FUZZ_LDLIBS)

# each harness a target of its own (make -j runs several at once); a finding fails it with the end of its log
fuzz-run: $(patsubst %,$(FUZZ_DIR)/fuzz_%,$(FUZZERS)) $(patsubst %,fuzz-run-%,$(FUZZERS))  # (the harnesses named: kept)
fuzz-run-%: $(FUZZ_DIR)/fuzz_%
	@mkdir -p $(FUZZ_DIR)/corpus/$*
	@if ! $< $(FUZZ_LIMIT) -timeout=10 -close_fd_mask=3 -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/$*- \
	       $(FUZZ_DIR)/corpus/$* test/fuzz/corpus/$* > $(FUZZ_DIR)/$*.log 2>&1; then \
	  tail -n 40 $(FUZZ_DIR)/$*.log; echo "fuzz: $*: FINDING (log $(FUZZ_DIR)/$*.log, input $(FUZZ_DIR)/$*-*)"; exit 1; fi
	@awk -v h=$* '/^stat::number_of_executed_units/ { n = $$2 } /^stat::average_exec_per_sec/ { r = $$2 } \
	     /^Done [0-9]+ runs in/ { s = $$5 } END { printf "fuzz: %-13s %9d executions in %4d s (%d/s), no findings\n", h, n, s, r }' \
	     $(FUZZ_DIR)/$*.log

fuzz-seeds: $(BUILD)/make_seeds
	$(BUILD)/make_seeds test/fuzz/corpus

$(BUILD)/make_seeds: test/fuzz/make_seeds.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)
