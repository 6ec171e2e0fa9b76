# tests/offload/cuda/solve.mk - what the tests of the CUDA backend's solve
# pipeline (tests/offload/cuda/test_solve_pipeline.py) need beyond
# small.mk's stand-ins: solvepipe, calls of ?gesv_/?posv_ (and of their
# scipy_*_64_ names, from libsolve64.so, which calls the system's LP64
# LAPACK) whose results are exact. `make solve-tests` builds them.
#
# Included by the top-level Makefile (CC, WARN, CFLAGS, B).

SOLVEP_SAVED_GOAL := $(.DEFAULT_GOAL)

$(B)/tests/offload/libsolve64.so: tests/offload/cuda/solve64.c
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -fPIC -shared -Wl,-soname,$(@F) -o $@ $< \
	    -Wl,--no-as-needed -l:liblapack.so.3

$(B)/tests/offload/solvepipe: tests/offload/cuda/solvepipe.c tests/offload/cuda/pipeval.h $(B)/tests/offload/libsolve64.so
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -L$(B)/tests/offload \
	    -Wl,--no-as-needed -l:libsolve64.so -l:liblapack.so.3 -lm \
	    -Wl,-rpath,'$$ORIGIN'

.PHONY: solve-tests
solve-tests: $(B)/tests/offload/solvepipe

.DEFAULT_GOAL := $(SOLVEP_SAVED_GOAL)
