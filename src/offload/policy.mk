# src/offload/policy.mk - the offload policy's own targets: the
# `gpu-offload` command, and the test programs of tests/offload/
# test_policy*.py, test_olease*.py and test_trace*.py.
#
# Included by the top-level Makefile (`-include src/offload/policy.mk`),
# which defines CC, WARN, FRAME_WARN, CFLAGS, B, LEASE_HDR and builds
# $(B)/liblease.a. The policy's sources go into libgpuoffload.so through
# the frontend's src/offload/module.mk; here they are built a second time,
# into $(B)/offload-policy/, for the test driver, without the frontend.
#
# Targets:
#   $(B)/gpu-offload       the command (run, report, profile, calibrate)
#   $(B)/gpu-offload-calib the calibration workload `calibrate` runs
#                          (calib-workload.c, calib-call.c, calib-canary.c)
#   policy-tests           $(B)/tests/offload/{model-unit,policy-driver,
#                          policy-mt-tsan,calib-unit}
#   lint-policy            cppcheck on the policy's files (part of `make lint`)

POLICY_SAVED_GOAL := $(.DEFAULT_GOAL)

POLICY_SRC  := src/offload/policy.c src/offload/observe.c \
               src/offload/pstate.c src/offload/count.c src/offload/model.c \
               src/offload/profile.c src/offload/olease.c \
               src/offload/trace.c src/offload/onvml.c
POLICY_HDR  := src/offload/policy.h src/offload/pstate.h \
               src/offload/count.h src/offload/model.h \
               src/offload/profile.h src/offload/olease.h \
               src/offload/trace.h src/offload/tracew.h src/offload/onvml.h
POLICY_OBJ  := $(patsubst src/offload/%.c,$(B)/offload-policy/%.o,$(POLICY_SRC))
POLICY_CC    = $(CC) $(WARN) $(FRAME_WARN) $(CFLAGS) -fPIC \
               -fvisibility=hidden -Isrc/lease -Isrc/offload
GPO_CLI_SRC := $(wildcard src/offload/cli/*.c)
GPO_CLI_HDR := $(wildcard src/offload/cli/*.h)
GPO_CALIB_SRC := src/offload/cli/calib-workload.c src/offload/cli/calib-call.c \
                 src/offload/cli/calib-canary.c
GPO_CLI_MAIN := $(filter-out $(GPO_CALIB_SRC),$(GPO_CLI_SRC))

.PHONY: policy-tests
policy-tests: $(B)/tests/offload/model-unit $(B)/tests/offload/policy-driver \
              $(B)/tests/offload/policy-mt-tsan $(B)/tests/offload/calib-unit

all: $(B)/gpu-offload $(B)/gpu-offload-calib policy-tests

$(B)/offload-policy/%.o: src/offload/%.c $(POLICY_HDR) $(LEASE_HDR)
	@mkdir -p $(@D)
	$(POLICY_CC) -c -o $@ $<

$(B)/tests/offload/model-unit: tests/offload/model-unit.c \
		$(B)/offload-policy/model.o $(B)/offload-policy/profile.o
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -Isrc/lease -Isrc/offload -o $@ $^ -lm

$(B)/tests/offload/policy-driver: tests/offload/policy-driver.c \
		$(POLICY_OBJ) $(B)/liblease.a
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -Isrc/lease -Isrc/offload -o $@ $< \
	    $(POLICY_OBJ) $(B)/liblease.a -ldl -lpthread

# The policy and the lease core built with ThreadSanitizer, straight from
# their sources (nothing else of the tree is built so).
$(B)/tests/offload/policy-mt-tsan: tests/offload/policy-mt.c $(POLICY_SRC) \
		$(POLICY_HDR) $(LEASE_SRC) $(LEASE_HDR)
	@mkdir -p $(@D)
	$(CC) $(WARN) -O1 -g -fsanitize=thread -Isrc/lease -Isrc/offload \
	    -o $@ $< $(POLICY_SRC) $(LEASE_SRC) -ldl -lpthread

# The two programs ship: built like gpumutex (the top-level Makefile's
# PROG_CFLAGS, PROG_LINK: glibc 2.17 floor, gated); profile.c and model.c
# are compiled once more, for them.
GPO_CLI_OBJ   := $(patsubst src/%.c,$(B)/prog/%.o,$(GPO_CLI_MAIN)) \
                 $(B)/prog/offload/profile.o $(B)/prog/offload/model.o
GPO_CALIB_OBJ := $(patsubst src/%.c,$(B)/prog/%.o,$(GPO_CALIB_SRC))
$(B)/prog/offload/profile.o $(B)/prog/offload/model.o: PROG_INC = -Isrc/lease -Isrc/offload
# cli_check.c reads the backend ABI (backend.h), which includes the
# generated ops.h.
$(B)/prog/offload/cli/cli_check.o: PROG_INC = -Isrc/lease -Isrc/offload -Isrc/offload/cli -I$(B)/offload/gen
$(B)/prog/offload/cli/cli_check.o: $(B)/offload/gen/.stamp
# calib-workload.c reads the residency minimum (resid.h, which includes the
# backend ABI) as the library does (gm_parse_uint, liblease.a).
$(B)/prog/offload/cli/calib-workload.o: PROG_INC = -Isrc/lease -Isrc/offload -Isrc/offload/cli -I$(B)/offload/gen
$(B)/prog/offload/cli/calib-workload.o: $(B)/offload/gen/.stamp
$(B)/gpu-offload: $(GPO_CLI_OBJ) $(B)/liblease.a $(PROG_COMPAT) tools/gate.sh
	$(PROG_LINK)

# Finds the BLAS and LAPACK at run time (dlopen, RTLD_GLOBAL): the build
# needs no BLAS, and calls go through a preloaded libgpuoffload.so.
$(B)/gpu-offload-calib: $(GPO_CALIB_OBJ) $(B)/liblease.a $(PROG_COMPAT) tools/gate.sh
	$(PROG_LINK)

# The canary rule on synthetic timings (test_calibrate.py).
$(B)/tests/offload/calib-unit: tests/offload/calib-unit.c \
		src/offload/cli/calib-canary.c src/offload/cli/calib-canary.h
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -Isrc/offload/cli -o $@ $< \
	    src/offload/cli/calib-canary.c

.PHONY: lint-policy
lint: lint-policy
lint-policy:
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
	  --std=c11 --inline-suppr -Isrc/lease -Isrc/offload -Isrc/offload/cli \
	  $(POLICY_SRC) src/lease/contend.c src/offload/cli \
	  tests/offload/model-unit.c tests/offload/policy-driver.c

.DEFAULT_GOAL := $(POLICY_SAVED_GOAL)
