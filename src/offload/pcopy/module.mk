# src/offload/pcopy/module.mk - the CPU copy engine of libgpuoffload.so
# (pcopy.c, and call.c behind the generated ?copy wrappers), its tests
# and its benchmark.
#
# Included by the top-level Makefile after src/offload/module.mk, whose
# OFL_OBJ (linked by its recipe, expanded when it runs) gets the engine's
# objects, built by its pattern rule with the library's flags.
#
# Targets:
#   pcopy-tests   $(B)/tests/offload/pcopy/{libfcopy.so,copycheck,pcunit,
#                 pcunit-san,pcunit-tsan,pchuge,pchuge-san} (tests/offload/test_pcopy.py)
#   bench-copy    bench/offload/copy_bench.c: gather and scatter of a
#                 4096x4096 matrix through the wrappers, engine off and on
#   lint-pcopy    cppcheck on the engine and its tests (part of `make lint`)

PCOPY_SAVED_GOAL := $(.DEFAULT_GOAL)

PCOPY_SRC := src/offload/pcopy/pcopy.c src/offload/pcopy/ahead.c src/offload/pcopy/vma.c src/offload/pcopy/call.c
PCOPY_HDR := src/offload/pcopy/pcopy.h src/offload/pcopy/ahead.h
PCOPY_OBJ := $(patsubst src/%.c,$(B)/obj/%.o,$(PCOPY_SRC))
OFL_OBJ   += $(PCOPY_OBJ)
$(OFL_UNGATED): $(PCOPY_OBJ)
$(PCOPY_OBJ): $(PCOPY_HDR)

PCOPY_T   := $(B)/tests/offload/pcopy
PCOPY_TS  := tests/offload/pcopy
# The engine alone, for the sanitizer builds: it needs gm_parse_uint and
# the frontend's header (ops.h: generated).
PCOPY_UNIT_SRC := $(PCOPY_TS)/pcunit.c $(PCOPY_TS)/msgstub.c src/offload/pcopy/pcopy.c src/offload/pcopy/ahead.c src/offload/pcopy/vma.c src/lease/num.c
PCOPY_UNIT_DEP := $(PCOPY_UNIT_SRC) $(PCOPY_TS)/copyref.h $(PCOPY_HDR) src/offload/frontend.h $(OFL_GEN)/ops.h
PCOPY_UNIT_INC := -include src/offload/compat.h -Isrc/offload -Isrc/offload/pcopy \
                  -I$(OFL_GEN) -Isrc/lease

.PHONY: pcopy-tests bench-copy lint-pcopy
pcopy-tests: $(PCOPY_T)/libfcopy.so $(PCOPY_T)/copycheck $(PCOPY_T)/pcunit \
             $(PCOPY_T)/pcunit-san $(PCOPY_T)/pcunit-tsan $(PCOPY_T)/pchuge \
             $(PCOPY_T)/pchuge-san
all: pcopy-tests

$(PCOPY_T)/libfcopy.so: $(PCOPY_TS)/fcopy.c
	@mkdir -p $(@D)
	$(CC) $(WARN) -Wno-missing-prototypes $(CFLAGS) -fPIC -shared \
	    -Wl,-soname,libfcopy.so -o $@ $<

$(PCOPY_T)/copycheck: $(PCOPY_TS)/copycheck.c $(PCOPY_TS)/copyref.h tests/offload/ntasks.h \
                     $(PCOPY_T)/libfcopy.so
	$(CC) $(WARN) $(CFLAGS) -pthread -o $@ $< -L$(PCOPY_T) -lfcopy \
	    -Wl,-rpath,'$$ORIGIN' -ldl

$(PCOPY_T)/pcunit: $(PCOPY_UNIT_DEP)
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -pthread $(PCOPY_UNIT_INC) -o $@ $(PCOPY_UNIT_SRC)

# The huge-page hint seen in /proc/self/smaps (pchuge.c).
PCOPY_HUGE_SRC := $(PCOPY_TS)/pchuge.c $(PCOPY_TS)/msgstub.c src/offload/pcopy/pcopy.c src/offload/pcopy/ahead.c src/offload/pcopy/vma.c src/lease/num.c
$(PCOPY_T)/pchuge: $(PCOPY_HUGE_SRC) $(PCOPY_HDR) src/offload/frontend.h $(OFL_GEN)/ops.h
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -pthread $(PCOPY_UNIT_INC) -o $@ $(PCOPY_HUGE_SRC)
$(PCOPY_T)/pchuge-san: $(PCOPY_HUGE_SRC) $(PCOPY_HDR) src/offload/frontend.h $(OFL_GEN)/ops.h
	@mkdir -p $(@D)
	$(CC) $(WARN) $(SAN_FLAGS) -pthread $(PCOPY_UNIT_INC) -o $@ $(PCOPY_HUGE_SRC)

$(PCOPY_T)/pcunit-san: $(PCOPY_UNIT_DEP)
	@mkdir -p $(@D)
	$(CC) $(WARN) $(SAN_FLAGS) -pthread $(PCOPY_UNIT_INC) -o $@ $(PCOPY_UNIT_SRC)

$(PCOPY_T)/pcunit-tsan: $(PCOPY_UNIT_DEP)
	@mkdir -p $(@D)
	$(CC) $(WARN) -O1 -g -fsanitize=thread -DPCUNIT_NO_FORK -DPCUNIT_REPS=1 \
	    -pthread $(PCOPY_UNIT_INC) -o $@ $(PCOPY_UNIT_SRC)

# ---- Benchmark ----------------------------------------------------------------
# Finds a CPU BLAS at run time (COPY_BENCH_BLAS, else libblas.so.3, else
# numpy's bundled OpenBLAS): the GPU machine has no system BLAS.
$(B)/bench/copy_bench: bench/offload/copy_bench.c
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -ldl

bench-copy: $(B)/bench/copy_bench $(OFL_LIB)
	$(B)/bench/copy_bench --lib $(abspath $(OFL_LIB))

lint: lint-pcopy
lint-pcopy: $(OFL_GEN)/ops.h
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
	  --std=c11 --inline-suppr -Isrc/offload -Isrc/offload/pcopy -I$(OFL_GEN) \
	  -Isrc/lease src/offload/pcopy $(PCOPY_TS) bench/offload/copy_bench.c

.DEFAULT_GOAL := $(PCOPY_SAVED_GOAL)
