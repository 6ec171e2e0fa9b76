# tests/offload/module.mk - the frontend's test programs (included by
# src/offload/module.mk). They link the system's reference BLAS/LAPACK
# (libblas.so.3, liblapack.so.3: python3-numpy's dependencies).

OFL_TCC = $(CC) $(WARN) $(CFLAGS) -Wno-strict-prototypes
OFL_TESTS := $(OFL_T)/opcheck $(OFL_T)/libbadabi.so $(OFL_T)/forkcheck \
             $(OFL_T)/securecheck $(OFL_T)/threadcheck $(OFL_T)/sitecheck \
             $(OFL_T)/forkrace $(OFL_T)/countcheck \
             $(OFL_T)/libdlcount.so $(OFL_T)/pausecheck \
             $(OFL_T)/liblockcount.so $(OFL_T)/lockcheck \
             $(OFL_T)/residcheck $(OFL_T)/gemvcheck

$(OFL_T)/opcheck: $(OFL_TSRC)/opcheck.c $(OFL_TSRC)/opcheck_lapack.c $(OFL_TSRC)/opcheck.h
	@mkdir -p $(@D)
	$(OFL_TCC) -o $@ $(filter %.c,$^) -Wl,--no-as-needed -l:liblapack.so.3 -l:libblas.so.3 -ldl -lm

$(OFL_T)/securecheck: $(OFL_TSRC)/securecheck.c
	@mkdir -p $(@D)
	$(OFL_TCC) -o $@ $< -Wl,--no-as-needed -l:libblas.so.3 -ldl -lm

$(OFL_T)/threadcheck: $(OFL_TSRC)/threadcheck.c
	@mkdir -p $(@D)
	$(OFL_TCC) -pthread -o $@ $< -Wl,--no-as-needed -l:libblas.so.3 -ldl -lm

# residcheck: residency's cases (test_offload_resident.py).
$(OFL_T)/residcheck: $(OFL_TSRC)/residcheck.c
	@mkdir -p $(@D)
	$(OFL_TCC) -pthread -o $@ $< -Wl,--no-as-needed -l:libblas.so.3 -ldl -lm

# gemvcheck: gemv under residency (test_offload_gemv.py).
$(OFL_T)/gemvcheck: $(OFL_TSRC)/gemvcheck.c
	@mkdir -p $(@D)
	$(OFL_TCC) -o $@ $< -Wl,--no-as-needed -l:libblas.so.3 -ldl -lm

$(OFL_T)/forkrace: $(OFL_TSRC)/forkrace.c
	@mkdir -p $(@D)
	$(OFL_TCC) -pthread -o $@ $< -Wl,--no-as-needed -l:libblas.so.3 -ldl

# countcheck's calls: libcountlib.so's two LAPACK names call BLAS through
# the PLT (nested calls of known number).
$(OFL_T)/libcountlib.so: $(OFL_TSRC)/countlib.c
	@mkdir -p $(@D)
	$(OFL_TCC) -fPIC -shared -Wl,-soname,$(@F) -o $@ $< \
	    -Wl,--no-as-needed -l:libblas.so.3
$(OFL_T)/countcheck: $(OFL_TSRC)/countcheck.c $(OFL_T)/libcountlib.so
	$(OFL_TCC) -pthread -o $@ $< -L$(OFL_T) -lcountlib \
	    -Wl,-rpath,'$$ORIGIN' -Wl,--no-as-needed -l:libblas.so.3

# pausecheck's CPU library is libpauselib.so (counts the calls reaching it).
$(OFL_T)/libpauselib.so: $(OFL_TSRC)/pauselib.c
	@mkdir -p $(@D)
	$(OFL_TCC) -fPIC -shared -Wl,-soname,$(@F) -o $@ $<
$(OFL_T)/pausecheck: $(OFL_TSRC)/pausecheck.c $(OFL_T)/libpauselib.so
	$(OFL_TCC) -pthread -o $@ $< -L$(OFL_T) -lpauselib \
	    -Wl,-rpath,'$$ORIGIN' -ldl

# lockcheck (the calls that stay on the CPU take no shared lock) counts
# through liblockcount.so, preloaded; its CPU library is libpauselib.so.
$(OFL_T)/liblockcount.so: $(OFL_TSRC)/lockcount.c
	@mkdir -p $(@D)
	$(OFL_TCC) -fPIC -shared -o $@ $< -ldl -pthread
$(OFL_T)/lockcheck: $(OFL_TSRC)/lockcheck.c $(OFL_T)/libpauselib.so
	$(OFL_TCC) -pthread -o $@ $< -L$(OFL_T) -lpauselib \
	    -Wl,-rpath,'$$ORIGIN' -ldl

# The whole library built with ThreadSanitizer straight from its sources
# (the copy engine, the write tracker and the lease core included), and
# pausecheck built so too, so that libtsan is loaded first (the library's
# __tsan_ calls bind to it): test_offload_pause.py runs pausecheck's cases under it. Not in
# offload-tests (the generated wrappers take long to build so): the test
# builds `offload-tsan-tests`.
OFL_TSAN_SRC = $(OFL_SRC) $(wildcard src/offload/pcopy/*.c) \
               $(wildcard src/offload/wtrack/*.c) $(OFL_GEN)/wrappers.c \
               $(OFL_GEN)/ops.c $(LEASE_SRC)
.PHONY: offload-tsan-tests
offload-tsan-tests: $(OFL_T)/tsan/libgpuoffload.so $(OFL_T)/tsan/pausecheck
$(OFL_T)/tsan/libgpuoffload.so: $(OFL_TSAN_SRC) $(OFL_HDR) $(LEASE_HDR) \
                                $(wildcard src/offload/pcopy/*.h) \
                                $(wildcard src/offload/wtrack/*.h) $(OFL_GEN)/exports.map
	@mkdir -p $(@D)
	$(CC) $(WARN) -O1 -g -fsanitize=thread -fPIC -shared -fvisibility=hidden \
	    -include src/offload/compat.h -Isrc/offload -I$(OFL_GEN) -Isrc/lease \
	    -Wl,--version-script=$(OFL_GEN)/exports.map -o $@ $(OFL_TSAN_SRC) \
	    -ldl -lpthread
$(OFL_T)/tsan/pausecheck: $(OFL_TSRC)/pausecheck.c $(OFL_T)/libpauselib.so
	@mkdir -p $(@D)
	$(OFL_TCC) -O1 -fsanitize=thread -pthread -o $@ $< -L$(OFL_T) -lpauselib \
	    -Wl,-rpath,'$$ORIGIN/..' -ldl

$(OFL_T)/sitecheck: $(OFL_TSRC)/sitecheck.c
	@mkdir -p $(@D)
	$(OFL_TCC) -O1 -o $@ $< -Wl,--no-as-needed -l:libblas.so.3

$(OFL_T)/libdlcount.so: $(OFL_TSRC)/dlcount.c
	@mkdir -p $(@D)
	$(OFL_TCC) -fPIC -shared -o $@ $< -ldl

$(OFL_T)/forkcheck: $(OFL_TSRC)/forkcheck.c
	@mkdir -p $(@D)
	$(OFL_TCC) -o $@ $< -Wl,--no-as-needed -l:libblas.so.3 -ldl -lm

# The Fortran programs (gfortran): fcheck on the system's LAPACK/BLAS;
# flenmain on libflen.so, which records the hidden string lengths.
OFL_FC ?= gfortran
OFL_FTESTS := $(OFL_T)/fcheck $(OFL_T)/flenmain
.PHONY: offload-ftests
offload-ftests: $(OFL_FTESTS)

$(OFL_T)/fcheck: $(OFL_TSRC)/fcheck.f90
	@mkdir -p $(@D)
	$(OFL_FC) -O1 -J $(@D) -o $@ $< -Wl,--no-as-needed -l:liblapack.so.3 -l:libblas.so.3

$(OFL_T)/libflen.so: $(OFL_TSRC)/flen.f90
	@mkdir -p $(@D)
	$(OFL_FC) -O1 -J $(@D) -fPIC -shared -o $@ $<

$(OFL_T)/flenmain: $(OFL_TSRC)/flenmain.f90 $(OFL_T)/libflen.so
	$(OFL_FC) -O1 -J $(@D) -o $@ $< -L$(OFL_T) -lflen -Wl,-rpath,'$$ORIGIN'

# The scipy_* / scipy_*_64_ names behind an RTLD_LOCAL load: sdriver
# dlopen()s libsclient.so, which is linked with libsblas.so.
# libsclientb.so and libsblasb.so are second copies under other names:
# each client's calls must reach its own library (per-call-site lookup).
OFL_TESTS += $(OFL_T)/sdriver $(OFL_T)/libsclient.so $(OFL_T)/libsclientb.so
$(OFL_T)/libsblas.so $(OFL_T)/libsblasb.so: $(OFL_TSRC)/sblas.c
	@mkdir -p $(@D)
	$(OFL_TCC) -fPIC -shared -Wl,-soname,$(@F) -o $@ $<
$(OFL_T)/libsclient.so: $(OFL_TSRC)/sclient.c $(OFL_T)/libsblas.so
	$(OFL_TCC) -fPIC -shared -Wl,-soname,$(@F) -o $@ $< \
	    -L$(OFL_T) -lsblas -Wl,-rpath,'$$ORIGIN' -lm
$(OFL_T)/libsclientb.so: $(OFL_TSRC)/sclient.c $(OFL_T)/libsblasb.so
	$(OFL_TCC) -fPIC -shared -Wl,-soname,$(@F) -o $@ $< \
	    -L$(OFL_T) -lsblasb -Wl,-rpath,'$$ORIGIN' -lm
$(OFL_T)/sdriver: $(OFL_TSRC)/sdriver.c
	@mkdir -p $(@D)
	$(OFL_TCC) -o $@ $< -ldl -Wl,-rpath,'$$ORIGIN'

offload-tests: $(OFL_TESTS)
