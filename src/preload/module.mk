# src/preload/module.mk - the preload library, gpumutex-run, and the helper
# programs of tests/test_preload*.py and tests/test_gpumutex_run.py.
#
# Included by the top-level Makefile (`-include src/preload/module.mk`),
# which defines CC, WARN, CFLAGS, B, LEASE_HDR and builds $(B)/liblease.a.
#
# Targets:
#   preload                    $(B)/libgpumutex.so and $(B)/gpumutex-run (phony)
#   $(B)/libgpumutex.so        the preload library (SONAME libgpumutex.so),
#                              copied there from $(B)/ungated/ once gated
#   $(B)/gpumutex-run          the CLI (its rule: the top-level Makefile,
#                              with the other shipped programs)
#   preload-tests              C helpers of the tests, in $(B)/tests/preload
#                              (needs the fake driver: `make fakecuda`)
#   preload-nvcc               the same probe built by nvcc, static and shared
#                              cudart (needs /usr/local/cuda/bin/nvcc)
#   cupti-abi                  src/preload/cuptiapi.h checked against the
#                              toolkit's CUPTI headers (needs them)

PRELOAD_SAVED_GOAL := $(.DEFAULT_GOAL)

PRELOAD_SRC     := $(wildcard src/preload/*.c)
PRELOAD_HDR     := $(wildcard src/preload/*.h)
PRELOAD_OBJ     := $(patsubst src/%.c,$(B)/obj/%.o,$(PRELOAD_SRC))
# The driver wrappers, generated from the committed name and policy tables
# (tools/gen-wrappers.sh; docs/preload.md, "When the lease is taken").
PRELOAD_WRAP_C  := $(B)/gen/wrappers.c
PRELOAD_WRAP_X  := $(B)/gen/wrap-exports.list
PRELOAD_WRAP_O  := $(B)/obj/gen/wrappers.o
PRELOAD_OBJ     += $(PRELOAD_WRAP_O)
PRELOAD_CFLAGS   = $(WARN) $(FRAME_WARN) $(CFLAGS) -fPIC -fvisibility=hidden -Isrc/lease
PRELOAD_LDFLAGS := -shared -Wl,-soname,libgpumutex.so \
                   -Wl,--version-script=src/preload/exports.map -Wl,-z,defs
# libdl.so.2 holds dlopen & co. before glibc 2.34 and is an empty stub
# after; it stays in DT_NEEDED so that a library built here loads on an older
# glibc (see src/preload/compat.h). Nothing needs libpthread on either.
PRELOAD_LIBS    := -Wl,--no-as-needed -l:libdl.so.2 -Wl,--as-needed -lpthread
PRELOAD_LIB     := $(B)/libgpumutex.so
PRELOAD_UNGATED := $(B)/ungated/libgpumutex.so
PRELOAD_RUN     := $(B)/gpumutex-run

.PHONY: preload preload-tests preload-nvcc
preload: $(PRELOAD_LIB) $(PRELOAD_RUN)

$(B)/obj/preload/%.o: src/preload/%.c $(PRELOAD_HDR) $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PRELOAD_CFLAGS) -c -o $@ $<

# One run writes both files. A rule with both as targets would be two
# rules to make, and under -j the two runs would move each other's
# temporary files away (tests/test_make_parallel.py): the export list
# follows the source, made again only when it alone is missing.
PRELOAD_GEN = sh tools/gen-wrappers.sh src/preload/driver-names.txt \
	    src/preload/driver-policy.txt $(PRELOAD_WRAP_C) $(PRELOAD_WRAP_X)
$(PRELOAD_WRAP_C): src/preload/driver-names.txt \
		src/preload/driver-policy.txt tools/gen-wrappers.sh
	@mkdir -p $(B)/gen
	$(PRELOAD_GEN)

$(PRELOAD_WRAP_X): $(PRELOAD_WRAP_C)
	@test -f $@ || $(PRELOAD_GEN)

$(PRELOAD_WRAP_O): $(PRELOAD_WRAP_C) src/preload/wrap.h src/preload/resolve.h
	@mkdir -p $(dir $@)
	$(CC) $(PRELOAD_CFLAGS) -Isrc/preload -c -o $@ $<

# Linked under build/ungated/ and copied to its shipped path only once the
# load gate passed, so that nothing (make demo, make check, the wheel)
# ever preloads a library that would not load on an older glibc.
$(PRELOAD_UNGATED): $(PRELOAD_OBJ) $(B)/liblease.a src/preload/exports.map
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PRELOAD_LDFLAGS) -o $@ $(PRELOAD_OBJ) $(B)/liblease.a \
	    $(PRELOAD_LIBS)

$(PRELOAD_LIB): $(PRELOAD_UNGATED) tools/gate.sh src/preload/exports.list \
		$(PRELOAD_WRAP_X)
	bash tools/gate.sh $< src/preload/exports.list $(PRELOAD_WRAP_X)
	cp $< $@

# ---- Test helpers -----------------------------------------------------------

PRELOAD_T     := $(B)/tests/preload
PRELOAD_TSRC  := tests/preload
PRELOAD_FAKE  := $(B)/tests/fakecuda
PRELOAD_TCC    = $(CC) $(WARN) $(CFLAGS)
PRELOAD_TESTS := $(PRELOAD_T)/cuprobe $(PRELOAD_T)/culinked \
                 $(PRELOAD_T)/nextprobe $(PRELOAD_T)/cunames \
                 $(PRELOAD_T)/libgilhold.so $(PRELOAD_T)/vcuda/libcuda.so.1 \
                 $(PRELOAD_T)/nogpa/libcuda.so.1 $(PRELOAD_T)/decline \
                 $(PRELOAD_T)/hello-static $(PRELOAD_T)/smallstack \
                 $(PRELOAD_T)/nsprobe $(PRELOAD_T)/libnsdep.so \
                 $(PRELOAD_T)/nsedge $(PRELOAD_T)/lazyprobe \
                 $(PRELOAD_T)/exitjob $(PRELOAD_T)/gtprobe \
                 $(PRELOAD_T)/gtprobe-linked $(PRELOAD_T)/libgtprof.so

preload-tests: $(PRELOAD_TESTS)

$(PRELOAD_T)/cuprobe: $(PRELOAD_TSRC)/cuprobe.c
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -o $@ $< -ldl -lpthread

$(PRELOAD_T)/decline: $(PRELOAD_TSRC)/decline.c $(PRELOAD_FAKE)/libcuda.so
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -o $@ $< -L$(PRELOAD_FAKE) -lcuda \
	    -Wl,-rpath,'$$ORIGIN/../fakecuda'

# A statically linked program: the dynamic linker (and so LD_PRELOAD)
# never runs for it.
$(PRELOAD_T)/hello-static: $(PRELOAD_TSRC)/hello-static.c
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -static -o $@ $<

# Linked with -lcuda against the fake driver: the PLT path.
$(PRELOAD_T)/culinked: $(PRELOAD_TSRC)/culinked.c $(PRELOAD_FAKE)/libcuda.so
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -o $@ $< -L$(PRELOAD_FAKE) -lcuda \
	    -Wl,-rpath,'$$ORIGIN/../fakecuda'

# Queries and first device work along every lookup path (linked with -lcuda
# for the PLT path): tests/test_lazy_lease.py.
$(PRELOAD_T)/lazyprobe: $(PRELOAD_TSRC)/lazyprobe.c $(PRELOAD_FAKE)/libcuda.so
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -o $@ $< -L$(PRELOAD_FAKE) -lcuda \
	    -Wl,-rpath,'$$ORIGIN/../fakecuda' -ldl -lpthread

# A job that holds memory and waits at its exit (tests/test_exit_early.py).
$(PRELOAD_T)/exitjob: $(PRELOAD_TSRC)/exitjob.c $(PRELOAD_FAKE)/libcuda.so
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -o $@ $< -L$(PRELOAD_FAKE) -lcuda \
	    -Wl,-rpath,'$$ORIGIN/../fakecuda'

# A CUDA job that plays a profiler too (tests/test_gputime.py): CUPTI
# through dlopen/dlsym, or (gtprobe-linked) through its PLT, linked with
# the fake CUPTI (make fakecupti).
$(PRELOAD_T)/gtprobe: $(PRELOAD_TSRC)/gtprobe.c
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -o $@ $< -ldl -Wl,--enable-new-dtags,-rpath,'$$ORIGIN'

# gtprobe's "local": a profiler library linked with (fake) CUPTI, found by
# gtprobe through its RUNPATH ($$ORIGIN).
$(PRELOAD_T)/libgtprof.so: $(PRELOAD_TSRC)/gtprof.c \
		$(B)/tests/fakecupti/libcupti.so.13
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -fPIC -shared -Wl,-soname,libgtprof.so -o $@ $< \
	    $(B)/tests/fakecupti/libcupti.so.13 \
	    -Wl,-rpath,'$$ORIGIN/../fakecupti'

$(PRELOAD_T)/gtprobe-linked: $(PRELOAD_TSRC)/gtprobe.c \
		$(B)/tests/fakecupti/libcupti.so.13
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -DGTPROBE_LINKED -o $@ $< -ldl \
	    $(B)/tests/fakecupti/libcupti.so.13 \
	    -Wl,-rpath,'$$ORIGIN/../fakecupti'

# cuInit from a thread with a 16 KiB stack (through dlsym, and as bound by
# the dynamic linker).
$(PRELOAD_T)/smallstack: $(PRELOAD_TSRC)/smallstack.c $(PRELOAD_FAKE)/libcuda.so
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -o $@ $< -L$(PRELOAD_FAKE) -lcuda \
	    -Wl,-rpath,'$$ORIGIN/../fakecuda' -ldl -lpthread

# dlmopen into new link-map namespaces. nsprobe finds libnsdep.so and
# libnexttwo.so by its RUNPATH ($$ORIGIN); libnsdep.so is linked with -lcuda.
$(PRELOAD_T)/nsprobe: $(PRELOAD_TSRC)/nsprobe.c $(PRELOAD_T)/libnsdep.so \
                      $(PRELOAD_T)/libnexttwo.so
	$(PRELOAD_TCC) -o $@ $< -Wl,--enable-new-dtags,-rpath,'$$ORIGIN' -ldl

# nsedge: one name (libnsdup.so) in two places, nsa/ on libnsa.so's RUNPATH
# and nsb/ on nsedge's.
$(PRELOAD_T)/nsedge: $(PRELOAD_TSRC)/nsedge.c $(PRELOAD_T)/libnsa.so \
                     $(PRELOAD_T)/nsb/libnsdup.so $(PRELOAD_T)/libnexttwo.so
	$(PRELOAD_TCC) -o $@ $< \
	    -Wl,--enable-new-dtags,-rpath,'$$ORIGIN:$$ORIGIN/nsb' -ldl

$(PRELOAD_T)/nsa/libnsdup.so $(PRELOAD_T)/nsb/libnsdup.so: \
		$(PRELOAD_TSRC)/nsdup.c
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -fPIC -shared -Wl,-soname,libnsdup.so \
	    -DWHICH=$(if $(findstring /nsa/,$@),1,2) -o $@ $<

$(PRELOAD_T)/libnsa.so: $(PRELOAD_TSRC)/nsa.c $(PRELOAD_T)/nsa/libnsdup.so
	$(PRELOAD_TCC) -fPIC -shared -Wl,-soname,libnsa.so -o $@ $< \
	    -L$(PRELOAD_T)/nsa -lnsdup -Wl,--enable-new-dtags,-rpath,'$$ORIGIN/nsa'

$(PRELOAD_T)/libnsdep.so: $(PRELOAD_TSRC)/nsdep.c $(PRELOAD_FAKE)/libcuda.so
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -fPIC -shared -Wl,-soname,libnsdep.so -o $@ $< \
	    -L$(PRELOAD_FAKE) -lcuda -Wl,-rpath,'$$ORIGIN/../fakecuda'

$(PRELOAD_T)/libnextshim.so: $(PRELOAD_TSRC)/nextshim.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -Wall -Wextra -Werror $(CFLAGS) -fPIC -shared \
	    -Wl,-soname,libnextshim.so -o $@ $< -ldl

$(PRELOAD_T)/libnexttwo.so: $(PRELOAD_TSRC)/nexttwo.c
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -fPIC -shared -Wl,-soname,libnexttwo.so -o $@ $<

$(PRELOAD_T)/nextprobe: $(PRELOAD_TSRC)/nextprobe.c $(PRELOAD_T)/libnextshim.so \
                        $(PRELOAD_T)/libnexttwo.so
	$(PRELOAD_TCC) -o $@ $< -L$(PRELOAD_T) -Wl,--no-as-needed -lnextshim \
	    -lnexttwo -Wl,-rpath,'$$ORIGIN' -ldl

$(PRELOAD_T)/libcunames.so: $(PRELOAD_TSRC)/cunames-lib.c
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -fPIC -shared -Wl,-soname,libcunames.so -o $@ $<

$(PRELOAD_T)/cunames: $(PRELOAD_TSRC)/cunames.c $(PRELOAD_T)/libcunames.so
	$(PRELOAD_TCC) -o $@ $< -L$(PRELOAD_T) -Wl,--no-as-needed -lcunames \
	    -Wl,-rpath,'$$ORIGIN' -ldl

# Not linked with libpython: loaded by ctypes.PyDLL, it finds the driver
# with dlopen like everything else.
$(PRELOAD_T)/libgilhold.so: $(PRELOAD_TSRC)/gilhold.c
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -fPIC -shared -o $@ $< -ldl -lpthread

# The fake driver again, with its names under a symbol version, so that
# dlvsym(h, "cuInit", "CUDA_TEST_1") can find the driver's cuInit.
$(PRELOAD_T)/vcuda/libcuda.so.1: $(FAKECUDA_OBJS) \
                                 $(PRELOAD_TSRC)/vcuda.map
	@mkdir -p $(@D)
	$(CC) -shared -pthread -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic \
	    -Wl,--version-script=$(PRELOAD_TSRC)/vcuda.map -o $@ \
	    $(FAKECUDA_OBJS) -ldl -lpthread

# And without cuGetProcAddress*: the CUDA runtime's dlsym fallback. (The
# fake's FAKECUDA_NO_GETPROCADDRESS=1 makes the functions fail, but CUDA
# 13's cudart then gives up before cuInit instead of falling back.)
$(PRELOAD_T)/nogpa/libcuda.so.1: $(FAKECUDA_OBJS) \
                                 $(PRELOAD_TSRC)/nogpa.map
	@mkdir -p $(@D)
	$(CC) -shared -pthread -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic \
	    -Wl,--version-script=$(PRELOAD_TSRC)/nogpa.map -o $@ \
	    $(FAKECUDA_OBJS) -ldl -lpthread

# src/preload/cuptiapi.h against the toolkit's CUPTI headers (where they
# are installed): a compile-time check, tests/preload/cuptiabi.c.
CUPTI_INCLUDE ?= $(firstword $(wildcard /usr/local/cuda/extras/CUPTI/include \
                   /usr/local/cuda/targets/x86_64-linux/include) \
                   /usr/local/cuda/include)
.PHONY: cupti-abi
cupti-abi: $(PRELOAD_T)/cuptiabi
	$(PRELOAD_T)/cuptiabi
$(PRELOAD_T)/cuptiabi: $(PRELOAD_TSRC)/cuptiabi.c src/preload/cuptiapi.h
	@mkdir -p $(@D)
	$(PRELOAD_TCC) -Wno-strict-prototypes -Isrc/preload \
	    -isystem $(CUPTI_INCLUDE) -isystem /usr/local/cuda/include -o $@ $<

PRELOAD_NVCC ?= /usr/local/cuda/bin/nvcc
preload-nvcc: $(PRELOAD_T)/cudart-static $(PRELOAD_T)/cudart-shared

$(PRELOAD_T)/cudart-static: $(PRELOAD_TSRC)/cudart_probe.cu
	@mkdir -p $(@D)
	$(PRELOAD_NVCC) -o $@ $<

$(PRELOAD_T)/cudart-shared: $(PRELOAD_TSRC)/cudart_probe.cu
	@mkdir -p $(@D)
	$(PRELOAD_NVCC) --cudart shared -o $@ $< \
	    -Xlinker -rpath -Xlinker $(dir $(PRELOAD_NVCC))../lib64

.DEFAULT_GOAL := $(PRELOAD_SAVED_GOAL)
