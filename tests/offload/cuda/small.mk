# tests/offload/cuda/small.mk - what the tests of a small call's cost
# (tests/offload/cuda/test_small_calls.py) need: the fake driver
# (xfer.mk's fakedev, libcuda.so.1) with stand-ins for cuBLAS and cuSOLVER
# next to it (fakesolver.c and fakelin.c, under both sonames), and smallcalls, a loop of
# one small BLAS/LAPACK call linked with the system's libraries.
# `make small-tests` builds them.
#
# Included by the top-level Makefile (CC, WARN, CFLAGS, B).

SMALL_SAVED_GOAL := $(.DEFAULT_GOAL)

SMALL_FD   := $(B)/tests/offload/cuda/fakedev
SMALL_LIBS := $(SMALL_FD)/libcublas.so.13 $(SMALL_FD)/libcusolver.so.12

SMALL_SOLVER := tests/offload/cuda/fakesolver.c tests/offload/cuda/fakelin.c
$(SMALL_LIBS): $(SMALL_SOLVER) tests/offload/cuda/fakesolver.h $(SMALL_FD)/libcuda.so.1
	$(CC) $(WARN) $(CFLAGS) -fPIC -shared -fvisibility=hidden \
	    -Wl,-soname,$(@F) -o $@ $(SMALL_SOLVER) -L$(SMALL_FD) -l:libcuda.so.1 -lm

$(B)/tests/offload/smallcalls: tests/offload/cuda/smallcalls.c
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -Wl,--no-as-needed -l:liblapack.so.3 \
	    -l:libblas.so.3 -lm

.PHONY: small-tests
small-tests: $(SMALL_LIBS) $(B)/tests/offload/smallcalls

.DEFAULT_GOAL := $(SMALL_SAVED_GOAL)
