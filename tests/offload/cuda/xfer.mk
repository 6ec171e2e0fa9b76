# tests/offload/cuda/xfer.mk - the copy engine's tests: the fake driver
# (fakedev.c, built as libcuda.so.1 in its own directory) and xfertest,
# the engine (src/offload/cuda/cuapi.c, xfer.c, xpool.c) linked into a test
# program, plain and with ASan/UBSan. tests/offload/cuda/test_xfer.py runs
# them (make check); `make xfer-tests` builds them.
#
# Included by the top-level Makefile (CC, WARN, CFLAGS, SAN_FLAGS, B).

XFER_SAVED_GOAL := $(.DEFAULT_GOAL)

# The fake defines the driver's functions without its header: no
# prototypes to declare them against.
XFER_T    := $(B)/tests/offload/cuda
XFER_SRC  := src/offload/cuda/cuapi.c src/offload/cuda/xfer.c src/offload/cuda/xstage.c \
             src/offload/cuda/xfault.c \
             src/offload/cuda/xpool.c
XFER_HDR  := src/offload/cuda/cuapi.h src/offload/cuda/xfer.h src/offload/cuda/xfer_int.h \
             src/offload/cuda/xfault.h \
             src/offload/cuda/xpool.h src/offload/backend.h \
             src/offload/compat.h $(B)/offload/gen/ops.h
XFER_INC  := -include src/offload/compat.h -Isrc/offload -Isrc/offload/cuda \
             -I$(B)/offload/gen
XFER_BINS := $(XFER_T)/fakedev/libcuda.so.1 $(XFER_T)/xfertest \
             $(XFER_T)/xfertest-san
# The test program: the round trips and main, the prefault workers' part,
# the staging and injected failures' part (xfertest.h is what they share).
XFER_TSRC := tests/offload/cuda/xfertest.c tests/offload/cuda/xfertest-prefault.c \
             tests/offload/cuda/xfertest-stage.c
XFER_THDR := tests/offload/cuda/xfertest.h tests/offload/ntasks.h

.PHONY: xfer-tests
xfer-tests: $(XFER_BINS)
all: xfer-tests

FAKEDEV_SRC := tests/offload/cuda/fakedev.c tests/offload/cuda/fakelog.c
$(XFER_T)/fakedev/libcuda.so.1: $(FAKEDEV_SRC) tests/offload/cuda/fakelog.h
	@mkdir -p $(@D)
	$(CC) $(WARN) -Wno-missing-prototypes $(CFLAGS) -fPIC -shared -fvisibility=hidden \
	    -Wl,-soname,libcuda.so.1 -o $@ $(FAKEDEV_SRC)

$(XFER_T)/xfertest: $(XFER_TSRC) $(XFER_THDR) $(XFER_SRC) $(XFER_HDR)
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -pthread $(XFER_INC) -o $@ \
	    $(XFER_TSRC) $(XFER_SRC) -ldl

$(XFER_T)/xfertest-san: $(XFER_TSRC) $(XFER_THDR) $(XFER_SRC) $(XFER_HDR)
	@mkdir -p $(@D)
	$(CC) $(WARN) $(SAN_FLAGS) -pthread $(XFER_INC) -o $@ \
	    $(XFER_TSRC) $(XFER_SRC) -ldl

# The copy benchmark (bench/offload/xfer_bench.c): built and run on a GPU
# machine; `make xfer-bench` prints its table.
.PHONY: xfer-bench
$(B)/bench/xfer_bench: bench/offload/xfer_bench.c $(XFER_SRC) $(XFER_HDR)
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -pthread $(XFER_INC) -o $@ \
	    bench/offload/xfer_bench.c $(XFER_SRC) -ldl
xfer-bench: $(B)/bench/xfer_bench
	$(B)/bench/xfer_bench

# cppcheck on the engine and its tests (part of `make lint`).
.PHONY: lint-xfer
lint: lint-xfer
lint-xfer: $(B)/offload/gen/ops.h
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
	  --std=c11 --inline-suppr -Isrc/offload -Isrc/offload/cuda \
	  -I$(B)/offload/gen src/offload/cuda/xfer.c src/offload/cuda/xpool.c \
	  src/offload/cuda/xfault.c src/offload/cuda/xstage.c \
	  tests/offload/cuda/fakedev.c tests/offload/cuda/fakelog.c $(XFER_TSRC) \
	  bench/offload/xfer_bench.c

.DEFAULT_GOAL := $(XFER_SAVED_GOAL)
