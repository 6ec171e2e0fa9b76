# src/offload/cuda/module.mk - libgpuoffload-cuda.so, the CUDA backend of
# gpu-offload (docs/offload.md, "The CUDA backend"), and its tests' helpers.
#
# Included by the top-level Makefile after src/offload/module.mk (which
# defines OFL_GEN, OFL_HDR and the generated ops.h this needs).
#
# Built from this tree alone: CUDA, cuBLAS and cuSOLVER are declared in
# cuapi.h and blasapi.h and dlopen()ed at run time, so no toolkit is
# needed and nothing but libc/libdl is NEEDED. As the frontend: compat.h
# force-included (old symbol versions), -fvisibility=hidden with one
# export (exports.list, exports.map), -z defs, and the load gate
# (tools/gate.sh) before the library is copied to its shipped path, next
# to libgpuoffload.so, where the frontend looks for it.
#
# Targets:
#   offload-cuda         $(B)/libgpuoffload-cuda.so (gated); part of `all`
#   offload-cuda-gate    tools/gate.sh on it as it is now
#   offload-cuda-abi     $(B)/tests/offload/cuda-abicheck: cuapi.h and
#                        blasapi.h against the toolkit's headers (built only
#                        where cuda.h is found: CUDA_INCLUDE)
#   offload-cuda-fakelibs stand-ins for cuBLAS/cuSOLVER (the search's tests)
#   offload-cuda-poolunit the pool against a stand-in driver table
#   offload-cuda-xsmallunit the small-operand arena against one
#   lint-offload-cuda    cppcheck on it (part of `make lint`)

CUDA_BE_SAVED_GOAL := $(.DEFAULT_GOAL)

CUDA_BE_SRC    := $(wildcard src/offload/cuda/*.c)
CUDA_BE_HDR    := $(wildcard src/offload/cuda/*.h) src/offload/backend.h \
                  src/offload/compat.h $(OFL_GEN)/ops.h
CUDA_BE_OBJ    := $(patsubst src/%.c,$(B)/obj/%.o,$(CUDA_BE_SRC))
CUDA_BE_LIB    := $(B)/libgpuoffload-cuda.so
CUDA_BE_UNGATED := $(B)/ungated/libgpuoffload-cuda.so
CUDA_BE_CFLAGS  = $(WARN) $(FRAME_WARN) $(CFLAGS) -fPIC -fvisibility=hidden \
                  -include src/offload/compat.h \
                  -Isrc/offload/cuda -Isrc/offload -I$(OFL_GEN)

.PHONY: offload-cuda offload-cuda-gate offload-cuda-abi
offload-cuda: $(CUDA_BE_LIB)
all: offload-cuda

$(B)/obj/offload/cuda/%.o: src/offload/cuda/%.c $(CUDA_BE_HDR)
	@mkdir -p $(@D)
	$(CC) $(CUDA_BE_CFLAGS) -c -o $@ $<

$(B)/offload/cuda-exports.map: src/offload/cuda/exports.list
	@mkdir -p $(@D)
	{ echo '{ global:'; sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)$$/  \1;/p' $<; \
	  echo 'local: *; };'; } > $@

# libdl.so.2 is kept (--no-as-needed) for the reason src/offload/module.mk
# gives: dlopen@GLIBC_2.2.5 lives there on the old glibc the gate allows.
$(CUDA_BE_UNGATED): $(CUDA_BE_OBJ) $(B)/offload/cuda-exports.map
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -Wl,-soname,libgpuoffload-cuda.so \
	    -Wl,--version-script=$(B)/offload/cuda-exports.map -Wl,-z,defs \
	    -o $@ $(CUDA_BE_OBJ) -Wl,--no-as-needed -l:libdl.so.2 -Wl,--as-needed \
	    -lpthread

$(CUDA_BE_LIB): $(CUDA_BE_UNGATED) tools/gate.sh src/offload/cuda/exports.list
	bash tools/gate.sh $< src/offload/cuda/exports.list
	cp $< $@

offload-cuda-gate: $(CUDA_BE_LIB)
	bash tools/gate.sh $(CUDA_BE_LIB) src/offload/cuda/exports.list

# The declarations against the toolkit (tests/offload/cuda/abicheck.c):
# a compile-time check; the program only prints the versions it saw.
# (-isystem, -Wno-strict-prototypes: cusolverDn.h has `f();` declarations.)
CUDA_INCLUDE ?= /usr/local/cuda/include
$(B)/tests/offload/cuda-abicheck: tests/offload/cuda/abicheck.c $(CUDA_BE_HDR)
	@mkdir -p $(@D)
	$(CC) $(WARN) -Wno-strict-prototypes $(CFLAGS) -Isrc/offload/cuda \
	    -Isrc/offload -I$(OFL_GEN) -isystem $(CUDA_INCLUDE) -o $@ $<
offload-cuda-abi: $(B)/tests/offload/cuda-abicheck

.DEFAULT_GOAL := $(CUDA_BE_SAVED_GOAL)

# Stand-ins for cuBLAS and cuSOLVER (tests/offload/cuda/fakelibs.c) for the
# tests of the library search (test_offload_cuda.py).
# (module.so: an object of no interest to the search, for a site-packages
# directory.)
CUDA_FAKELIBS := $(B)/tests/offload/cuda-fake/libcublas.so.13 \
                 $(B)/tests/offload/cuda-fake/libcusolver.so.12 \
                 $(B)/tests/offload/cuda-fake/module.so
$(CUDA_FAKELIBS): tests/offload/cuda/fakelibs.c
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -fPIC -shared -Wl,-soname,$(@F) -o $@ $<
.PHONY: offload-cuda-fakelibs
offload-cuda-fakelibs: $(CUDA_FAKELIBS)

# The pool against a stand-in driver table (tests/offload/cuda/poolunit.c).
$(B)/tests/offload/cuda-poolunit: tests/offload/cuda/poolunit.c src/offload/cuda/pool.c $(CUDA_BE_HDR)
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -pthread -Isrc/offload/cuda -Isrc/offload -I$(OFL_GEN) \
	    -o $@ tests/offload/cuda/poolunit.c src/offload/cuda/pool.c
.PHONY: offload-cuda-poolunit
offload-cuda-poolunit: $(B)/tests/offload/cuda-poolunit

# The small-operand arena against a stand-in driver table
# (tests/offload/cuda/xsmallunit.c).
$(B)/tests/offload/cuda-xsmallunit: tests/offload/cuda/xsmallunit.c src/offload/cuda/xsmall.c $(CUDA_BE_HDR)
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -Isrc/offload/cuda -Isrc/offload -I$(OFL_GEN) \
	    -o $@ tests/offload/cuda/xsmallunit.c src/offload/cuda/xsmall.c
.PHONY: offload-cuda-xsmallunit
offload-cuda-xsmallunit: $(B)/tests/offload/cuda-xsmallunit

# cppcheck on the backend (part of `make lint`).
.PHONY: lint-offload-cuda
lint: lint-offload-cuda
lint-offload-cuda: $(OFL_GEN)/ops.h
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
	  --std=c11 --inline-suppr -Isrc/offload/cuda -Isrc/offload -I$(OFL_GEN) \
	  src/offload/cuda tests/offload/cuda/poolunit.c tests/offload/cuda/xsmallunit.c \
	  tests/offload/cuda/fakelibs.c
