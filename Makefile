# gpumutex - plain make. `make` builds, `make check` runs every test,
# `make demo` shows it working. Outputs go to build/.

CC      ?= cc
PYTHON  ?= /usr/bin/python3
CFLAGS  ?= -O2 -g
WARN    := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes -Wno-missing-field-initializers
# The library's code (src/lease, src/preload) runs inside cuInit on the
# caller's thread, whose stack can be 16 KiB: no frame may hold big buffers
# (those are static or on the heap; tests/test_preload_adversarial.py,
# test_cuinit_on_a_16k_thread_stack).
FRAME_WARN := -Wframe-larger-than=2048
ALL_CFLAGS = $(WARN) $(FRAME_WARN) $(CFLAGS) -fPIC -fvisibility=hidden -Isrc/lease
# The sanitizer build of the core is also the one with crash points
# (GM_CRASH_AT, see src/lease/internal.h); the shipped library has none.
SAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
             -fno-sanitize-recover=all -DGM_TEST_CRASHPOINTS

B := build

LEASE_SRC := $(wildcard src/lease/*.c)
LEASE_HDR := $(wildcard src/lease/*.h)
LEASE_OBJ := $(patsubst src/%.c,$(B)/obj/%.o,$(LEASE_SRC))
LEASE_SAN := $(patsubst src/%.c,$(B)/san/%.o,$(LEASE_SRC))

TEST_BINS := $(B)/tests/lease-unit $(B)/tests/lease-holder \
             $(B)/tests/crashshim.so
SAN_BINS  := $(B)/tests/lease-unit-san $(B)/tests/lease-holder-san

CLI_SRC := src/cli/gpumutex.c src/cli/status.c src/cli/run.c \
           src/cli/install.c src/cli/sysfile.c src/cli/doctor.c \
           src/cli/evlog.c src/cli/log.c src/cli/report.c src/cli/report_json.c src/cli/svg.c \
           src/cli/nvml.c src/cli/sample.c src/cli/metrics.c src/cli/metrics_http.c \
           src/cli/idle.c src/cli/report_susp.c
CLI_HDR := $(wildcard src/cli/*.h)

# `make`: everything a user runs (the library, gpumutex, gpumutex-run) and
# the test programs. The library is gated as it is built (src/preload/module.mk).
.DEFAULT_GOAL := all
.PHONY: all
all: $(B)/liblease.a $(TEST_BINS) $(B)/gpumutex $(B)/libgpumutex.so \
     $(B)/gpumutex-run fakenvml

.PHONY: gate portability distro-check
# The load gate (glibc floor, NEEDED, exports): docs/portability.md. The
# build already ran it on the way to build/libgpumutex.so; this target runs
# it again, on the file as it is now.
gate: $(B)/libgpumutex.so
	bash tools/gate.sh $(B)/libgpumutex.so src/preload/exports.list $(B)/gen/wrap-exports.list

# Load proof in a Debian bullseye root (glibc 2.31); needs root, debootstrap
# and Debian's package mirror the first time (the root is then cached).
portability: $(B)/libgpumutex.so
	bash tools/portability.sh

# Build and test in a Debian trixie root (gcc 14, glibc 2.41) holding only
# .ci/packages, check the glibc floor of what it built, load that library
# on bullseye, and build it with bullseye's gcc 10: docs/portability.md.
# Needs root, debootstrap and Debian's package mirror the first time.
distro-check:
	bash tools/distro-build.sh

.PHONY: check check-unit check-san check-py clean lint demo \
        bench sanitizer-tests stress

$(B)/obj/%.o: src/%.c $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(B)/san/%.o: src/%.c $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(SAN_FLAGS) -Isrc/lease -c -o $@ $<

$(B)/gpumutex: $(CLI_SRC) $(CLI_HDR) $(B)/liblease.a
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -Isrc/lease -Isrc/cli -o $@ $(CLI_SRC) $(B)/liblease.a -ldl

$(B)/liblease.a: $(LEASE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/liblease-san.a: $(LEASE_SAN)
	@rm -f $@
	ar rcs $@ $^

$(B)/tests/%: tests/lease/%.c $(B)/liblease.a $(LEASE_HDR) tests/lease/testjournal.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -pthread -Isrc/lease -o $@ $< $(B)/liblease.a

# The core's unit tests: the checks and lease tests, the parsing tests and
# the lock directory's (lease-unit.h is what they share).
LEASE_UNIT_SRC := tests/lease/lease-unit.c tests/lease/unit-parse.c \
                  tests/lease/unit-lockdir.c
$(B)/tests/lease-unit: $(LEASE_UNIT_SRC) tests/lease/lease-unit.h $(B)/liblease.a $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -pthread -Isrc/lease -o $@ $(LEASE_UNIT_SRC) $(B)/liblease.a

# The crash-sweep shim (LD_PRELOAD; tests/test_crash_sweep.py).
$(B)/tests/crashshim.so: tests/stress/crashshim.c
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -fPIC -shared -o $@ $< -ldl

$(B)/tests/%-san: tests/lease/%.c $(B)/liblease-san.a $(LEASE_HDR) tests/lease/testjournal.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(SAN_FLAGS) -pthread -Isrc/lease -o $@ $< $(B)/liblease-san.a

$(B)/tests/lease-unit-san: $(LEASE_UNIT_SRC) tests/lease/lease-unit.h $(B)/liblease-san.a $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(SAN_FLAGS) -pthread -Isrc/lease -o $@ $(LEASE_UNIT_SRC) $(B)/liblease-san.a

# Makefile fragments of the other modules (each defines its own targets).
-include tests/fakecuda/module.mk
-include tests/fakenvml/module.mk
-include src/preload/module.mk
-include src/offload/module.mk
-include src/offload/pcopy/module.mk
-include src/offload/policy.mk
-include src/offload/cuda/module.mk
-include bench/offload/module.mk
-include tests/offload/cuda/xfer.mk
-include tests/offload/cuda/small.mk
-include tests/offload/cuda/gemm.mk
-include tests/offload/cuda/solve.mk

sanitizer-tests: $(SAN_BINS)

check-unit: $(B)/tests/lease-unit
	$(B)/tests/lease-unit

check-san: $(SAN_BINS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 $(B)/tests/lease-unit-san

check-py: all $(SAN_BINS)
	$(PYTHON) -m pytest -q tests

check: check-unit check-san check-py

# The slow tests (tests/stress): crash-point sweeps over every C library
# call of a claim, and many users with kills and planted files. A few
# minutes on two cores.
stress: all $(SAN_BINS)
	$(PYTHON) -m pytest -q -m stress tests

$(B)/demo/fakejob: demo/fakejob.c $(B)/tests/fakecuda/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -L$(B)/tests/fakecuda -lcuda

demo: all fakecuda $(B)/demo/fakejob
	$(PYTHON) demo/demo.py

$(B)/bench/%: bench/%.c $(B)/liblease.a $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -pthread -Isrc/lease -o $@ $< $(B)/liblease.a

$(B)/bench/cuprobe_bench: bench/cuprobe_bench.c
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -ldl

bench: all fakecuda $(B)/demo/fakejob $(B)/bench/handoff $(B)/bench/cuprobe_bench
	$(PYTHON) bench/bench.py
	$(PYTHON) bench/gpu_bench.py

# The agents benchmark (bench/agents/agents.py; a GPU machine with torch):
# one agent, no arbitration, a flock queue, gpumutex; then the five-job
# chain. AGENTS_ARGS/CHAIN_ARGS pass options (--window 30, --lib
# old=DIR/libgpumutex.so to compare builds); results under $(AGENTS_OUT).
AGENTS_OUT ?= build/bench-agents
.PHONY: bench-agents
bench-agents: all
	$(PYTHON) bench/agents/agents.py run --out $(AGENTS_OUT) $(AGENTS_ARGS)
	$(PYTHON) bench/agents/agents.py chain --out $(AGENTS_OUT) $(CHAIN_ARGS)

# The GPU scenario set (tests/gpu): needs a machine with an NVIDIA GPU;
# elsewhere it says it skipped. Logs and summary.md go to $(GPU_OUT).
.PHONY: gpu-check
gpu-check: all
	bash tests/gpu/run.sh $${GPU_OUT:-build/gpu-check}

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
	  --std=c11 --inline-suppr -Isrc/lease -Isrc/cli \
	  src/lease src/preload src/cli tests/lease tests/preload tests/stress \
	  bench demo
	shellcheck .ci/run tools/*.sh tests/fakecuda/gen-stubs.sh tests/system/run.sh

clean:
	rm -rf $(B)
