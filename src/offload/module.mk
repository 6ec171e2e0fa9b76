# src/offload/module.mk - libgpuoffload.so (the BLAS/LAPACK offloader), its
# generated wrappers, the CPU test backend and the frontend's test helpers.
#
# Included by the top-level Makefile (`-include src/offload/module.mk`),
# which defines CC, WARN, CFLAGS, FRAME_WARN, B, LEASE_HDR and
# $(B)/liblease.a (objects built -fPIC).
#
# Targets:
#   offload                   $(B)/libgpuoffload.so (gated) and
#                             $(B)/libgpuoffload-test.so
#   $(B)/offload/gen/         the generator's output (tools/gen_offload.py
#                             from the table of tools/offload_ops.py):
#                             wrappers.c, ops.c, ops.h, exports.list/.map
#   offload-tests             test programs in $(B)/tests/offload
#   offload-gate              tools/gate.sh on the library as it is now
#   bench-offload-small       the nanoseconds added to a small call (the
#                             first part of `make bench-offload`,
#                             bench/offload/module.mk)
#   lint-offload              cppcheck on the frontend (part of `make lint`)

OFFLOAD_SAVED_GOAL := $(.DEFAULT_GOAL)

OFL_GEN     := $(B)/offload/gen
OFL_GEN_OUT := $(OFL_GEN)/wrappers.c $(OFL_GEN)/ops.c $(OFL_GEN)/ops.h \
               $(OFL_GEN)/exports.list $(OFL_GEN)/exports.map
OFL_SRC     := $(wildcard src/offload/*.c)
OFL_HDR     := $(wildcard src/offload/*.h) $(OFL_GEN)/ops.h
# The generated wrappers.c compiled in OFL_WRAP_PARTS parts, in parallel
# (tools/split_wrappers.py): alone, it is the build's longest compilation.
OFL_WRAP_PARTS := 0 1 2 3
OFL_WRAP_C  := $(patsubst %,$(OFL_GEN)/wrappers-%.c,$(OFL_WRAP_PARTS))
OFL_OBJ     := $(patsubst src/%.c,$(B)/obj/%.o,$(OFL_SRC)) \
               $(patsubst $(OFL_GEN)/%.c,$(B)/obj/offload/gen/%.o,$(OFL_WRAP_C)) \
               $(B)/obj/offload/gen/ops.o
# compat.h binds glibc functions to versions old glibc has (gate rule).
OFL_CFLAGS   = $(WARN) $(FRAME_WARN) $(CFLAGS) -fPIC -fvisibility=hidden \
               -include src/offload/compat.h \
               -Isrc/offload -I$(OFL_GEN) -Isrc/lease
OFL_LIB     := $(B)/libgpuoffload.so
OFL_UNGATED := $(B)/ungated/libgpuoffload.so
OFL_TESTBE  := $(B)/libgpuoffload-test.so
OFL_T       := $(B)/tests/offload
OFL_TSRC    := tests/offload

.PHONY: offload offload-tests offload-gate
offload: $(OFL_LIB) $(OFL_TESTBE)
all: offload

# One rule makes all five files (a stamp, so that make runs it once).
$(OFL_GEN_OUT): $(OFL_GEN)/.stamp
$(OFL_GEN)/.stamp: tools/gen_offload.py tools/offload_ops.py src/offload/exports.list
	@mkdir -p $(OFL_GEN)
	$(PYTHON) tools/gen_offload.py $(OFL_GEN)
	@touch $@

# The parts: one run writes them all (a stamp, as above).
$(OFL_WRAP_C): $(OFL_GEN)/.split
$(OFL_GEN)/.split: $(OFL_GEN)/.stamp tools/split_wrappers.py
	$(PYTHON) tools/split_wrappers.py $(OFL_GEN)/wrappers.c $(words $(OFL_WRAP_PARTS)) $(OFL_GEN)
	@touch $@

$(B)/obj/offload/%.o: src/offload/%.c $(OFL_HDR) $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(OFL_CFLAGS) -c -o $@ $<

# -O1 -g1 (line tables, no variable locations): the build's longest
# compilations (some 1,600 generated functions) in 60 % of their time at
# -O2 -g1, and a third of that at -O2 -g. The wrappers' fast paths are
# short straight-line tests whose inline helpers -O1 still inlines; `make
# bench-offload-small` measures the ns they add to a small call.
$(B)/obj/offload/gen/%.o: $(OFL_GEN)/%.c $(OFL_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(OFL_CFLAGS) -O1 -g1 -c -o $@ $<

# Linked under build/ungated/ and copied to its shipped path only once the
# load gate passed (as libgpumutex.so: src/preload/module.mk).
$(OFL_UNGATED): $(OFL_OBJ) $(B)/liblease.a $(OFL_GEN)/exports.map
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -Wl,-soname,libgpuoffload.so \
	    -Wl,--version-script=$(OFL_GEN)/exports.map -Wl,-z,defs \
	    -o $@ $(OFL_OBJ) $(B)/liblease.a \
	    -Wl,--no-as-needed -l:libdl.so.2 -Wl,--as-needed -lpthread

$(OFL_LIB): $(OFL_UNGATED) tools/gate.sh $(OFL_GEN)/exports.list
	bash tools/gate.sh $< $(OFL_GEN)/exports.list
	cp $< $@

offload-gate: $(OFL_LIB)
	bash tools/gate.sh $(OFL_LIB) $(OFL_GEN)/exports.list

# ---- The CPU test backend (same ABI as the CUDA one) ------------------------
OFL_BE_SRC := $(wildcard $(OFL_TSRC)/backend/*.c)
OFL_BE_HDR := $(wildcard $(OFL_TSRC)/backend/*.h) src/offload/backend.h \
              $(OFL_GEN)/ops.h
# `gpu-offload calibrate` and `run` load it, so it ships like the library:
# the same old-glibc bindings (compat.h), libdl.so.2 kept, and the glibc
# floor checked by the gate (its one export: the ABI entry point). No
# libm: -fno-math-errno makes sqrt an instruction.
$(OFL_TESTBE): $(OFL_BE_SRC) $(OFL_BE_HDR) src/offload/compat.h tools/gate.sh \
                $(OFL_TSRC)/backend/exports.list
	@mkdir -p $(B)/ungated
	$(CC) $(WARN) $(CFLAGS) -fPIC -shared -fvisibility=hidden \
	    -include src/offload/compat.h -Wl,-soname,libgpuoffload-test.so \
	    -Wl,-z,defs \
	    -Isrc/offload -I$(OFL_GEN) -o $(B)/ungated/libgpuoffload-test.so \
	    -fno-math-errno $(OFL_BE_SRC) -Wl,--no-as-needed -l:libdl.so.2 \
	    -Wl,--as-needed
	bash tools/gate.sh $(B)/ungated/libgpuoffload-test.so \
	    $(OFL_TSRC)/backend/exports.list
	cp $(B)/ungated/libgpuoffload-test.so $@

# The same, answering another ABI version (the mismatch test).
$(OFL_T)/libbadabi.so: $(OFL_BE_SRC) $(OFL_BE_HDR)
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -fPIC -shared -fvisibility=hidden \
	    -DGPO_TEST_ABI=99 -Isrc/offload -I$(OFL_GEN) -o $@ $(OFL_BE_SRC) -lm




# ---- Benchmark: the added cost of a small call (docs/offload.md) --------------
# `make bench-offload` (bench/offload/module.mk) runs this part first. It
# links the system's libblas.so.3; where there is none (the GPU machine's
# pip-only Python), it says so and the rest of the benchmark still runs.
.PHONY: bench-offload-small
# With liblapack.so.3 where it links (the LAPACK cases), else BLAS alone.
$(B)/bench/offload_small: bench/offload_small.c
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -DHAVE_LAPACK -o $@ $< -Wl,--no-as-needed \
	    -l:liblapack.so.3 -l:libblas.so.3 -lm -ldl 2>/dev/null || \
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -Wl,--no-as-needed -l:libblas.so.3 -ldl

# BENCH_OFFLOAD_BASE=PATH (another build of the library, e.g. main's)
# adds its column: before and after in one run. The last lines: the same
# calls with the offloader paused (gpu_offload_pause).
bench-offload-small: $(OFL_LIB)
	@if $(MAKE) -s $(B)/bench/offload_small >/dev/null 2>&1; then \
	    $(B)/bench/offload_small > $(B)/bench/offload_small.plain && \
	    LD_PRELOAD=$(abspath $(OFL_LIB)) $(B)/bench/offload_small > $(B)/bench/offload_small.preloaded && \
	    LD_PRELOAD=$(abspath $(OFL_LIB)) BENCH_OFFLOAD_PAUSE=1 $(B)/bench/offload_small > $(B)/bench/offload_small.paused && \
	    if [ -n "$(BENCH_OFFLOAD_BASE)" ]; then \
	    LD_PRELOAD=$(abspath $(BENCH_OFFLOAD_BASE)) $(B)/bench/offload_small > $(B)/bench/offload_small.base && \
	    paste $(B)/bench/offload_small.plain $(B)/bench/offload_small.base $(B)/bench/offload_small.preloaded | \
	    awk '{ printf "%-16s without %6.1f ns, base %6.1f ns (+%.1f), with libgpuoffload.so %6.1f ns: +%.1f ns per call\n", $$1, $$2, $$4, $$4 - $$2, $$6, $$6 - $$2 }'; \
	    else \
	    paste $(B)/bench/offload_small.plain $(B)/bench/offload_small.preloaded | \
	    awk '{ printf "%-16s without %6.1f ns, with libgpuoffload.so %6.1f ns: +%.1f ns per call\n", $$1, $$2, $$4, $$4 - $$2 }'; fi; \
	    paste $(B)/bench/offload_small.plain $(B)/bench/offload_small.paused | \
	    awk '{ printf "%-16s without %6.1f ns, paused %6.1f ns: +%.1f ns per call\n", $$1, $$2, $$4, $$4 - $$2 }'; \
	else echo "bench-offload: the small-call part skipped: bench/offload_small.c does not link (no libblas.so.3)"; fi

# ---- Lint: cppcheck on the frontend's files (part of `make lint`) ----------
OFL_FRONT_SRC := src/offload/front.c src/offload/resolve.c src/offload/gpu.c \
                 src/offload/pause.c \
                 src/offload/verify.c
.PHONY: lint-offload
lint: lint-offload
lint-offload: $(OFL_GEN)/ops.h
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
	  --std=c11 --inline-suppr -Isrc/offload -I$(OFL_GEN) -Isrc/lease \
	  $(OFL_FRONT_SRC) tests/offload/backend tests/offload/opcheck.c tests/offload/opcheck_lapack.c \
	  tests/offload/sblas.c tests/offload/sclient.c tests/offload/sdriver.c \
	  tests/offload/forkcheck.c tests/offload/securecheck.c \
	  tests/offload/threadcheck.c bench/offload_small.c
	$(PYTHON) -m py_compile tools/gen_offload.py tools/offload_ops.py

-include $(OFL_TSRC)/module.mk

.DEFAULT_GOAL := $(OFFLOAD_SAVED_GOAL)
