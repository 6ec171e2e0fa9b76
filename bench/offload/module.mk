# bench/offload/module.mk - `make bench-offload`: gpu-offload against numpy's
# own BLAS (and NVBLAS) on a GPU machine, every figure of docs/benchmarks.md
# "gpu-offload on the H200" in one run (bench/offload/run.py).
#
# Included by the top-level Makefile. First the nanoseconds added to a small
# call (bench-offload-small, src/offload/module.mk), then the harness, which
# uses what `make all` built (libgpuoffload.so, the backend, gpu-offload,
# libgpumutex.so, gpumutex, lease-holder) and builds nothing itself.
#
#   BENCH_OUT=DIR       report.md and results.json (default build/bench-offload)
#   BENCH_BUDGET=S      seconds for the harness (default 400: with `make all`
#                       it fits in 8 minutes on the H200); the harness ends
#                       within it
#   BENCH_ARGS=...      more options of run.py (--quick, --profile P,
#                       --sections a,b, --section-s sweep=300, --reps R,
#                       --python PY, ...); docs/benchmarks.md has the two
#                       calls of a full run on a 600 s device limit
# Without an NVIDIA GPU the harness runs its quick mode (the CPU test
# backend, tiny sizes): the report then holds no figures.

BENCH_OUT    ?= $(B)/bench-offload
BENCH_BUDGET ?= 400
BENCH_ARGS   ?=

.PHONY: bench-offload
# The small-call part after the build, never beside it under -j (timings).
bench-offload: all
	@$(MAKE) -s bench-offload-small
	$(PYTHON) bench/offload/run.py --out $(BENCH_OUT) --budget $(BENCH_BUDGET) $(BENCH_ARGS)

# numpy's np.linalg.solve phase by phase (bench/offload/solve_phases.c):
# `build/bench/solve_phases LIB [N [REPS]]`, under `gpu-offload run` or
# plain; docs/benchmarks.md has the H200 figures. bench/offload/solve_device.sh
# measures it on the GPU machine with the solve pipeline on and off.
$(B)/bench/solve_phases: bench/offload/solve_phases.c
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -ldl
all: $(B)/bench/solve_phases

# What a wrapper's entry costs a call, on a BLAS loaded at run time (the
# GPU machine has no system BLAS to link): `build/bench/entry_cost LIB
# [CALLS]`, plain and preloaded paused; the in-process sweep's bound
# (bench/offload/inproc.py) where offload_small is not built.
$(B)/bench/entry_cost: bench/offload/entry_cost.c
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -ldl
all: $(B)/bench/entry_cost

# What the decision costs a call kept on the CPU (bench/offload/decide_cost.c
# on a dgemm_ that returns at once, decide_stub.c): paused against active
# in one process, without a profile and with the H200 one.
$(B)/bench/libdecidestub.so: bench/offload/decide_stub.c
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -shared -fPIC -o $@ $<
$(B)/bench/decide_cost: bench/offload/decide_cost.c $(B)/bench/libdecidestub.so
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -L$(B)/bench -ldecidestub \
	    -Wl,-rpath,'$$ORIGIN' -ldl
all: $(B)/bench/decide_cost

.PHONY: bench-offload-decide
bench-offload-decide: all
	@for p in none docs/profile-h200.txt; do \
	    echo "== GPU_OFFLOAD_PROFILE=$$p"; \
	    GPU_OFFLOAD_PROFILE=$$p GPU_OFFLOAD_LIBRARY=$(B)/bench/libdecidestub.so \
	    GPU_OFFLOAD_BACKEND=$(B)/libgpuoffload-test.so \
	    LD_PRELOAD=$(CURDIR)/$(B)/libgpuoffload.so $(B)/bench/decide_cost 128; \
	done
