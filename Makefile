# gpumutex - plain make. `make` builds what ships (the libraries and the
# programs, in parallel), `make check` runs every test, `make demo` shows it
# working, `make install` installs; outputs go to build/.
#
# Rules for a new target (they keep `make` quick and -j correct):
#   - A program or library that ships goes in SHIP_PROGS/SHIP_LIBS (and so
#     in `make`, `make install`, the wheel and `make gate`); everything else
#     (tests, benchmarks) is built only by the targets that run it, and
#     `make all` builds all of it (fragments add theirs with `all: ...`).
#   - A target that runs things lists only what it builds as prerequisites
#     and runs its steps in order in its recipe: make builds prerequisites
#     in parallel, by default (below).
#   - A new source file of a module is taken by its folder's wildcard.
CC      ?= cc
PYTHON  ?= /usr/bin/python3
CFLAGS  ?= -O2 -g
WARN    := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes -Wno-missing-field-initializers
# The library's code (src/lease, src/preload) runs inside cuInit on the
# caller's thread, whose stack can be 16 KiB: no frame may hold big buffers
# (those are static or on the heap; tests/test_preload_adversarial.py,
# test_cuinit_on_a_16k_thread_stack).
FRAME_WARN := -Wframe-larger-than=2048
ALL_CFLAGS = $(WARN) $(FRAME_WARN) $(CFLAGS) -fPIC -fvisibility=hidden -Isrc/lease
# The sanitizer build of the core is also the one with crash points
# (GM_CRASH_AT, see src/lease/internal.h); the shipped library has none.
SAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
             -fno-sanitize-recover=all -DGM_TEST_CRASHPOINTS

B := build

# Parallel by default, one job per CPU: unless -j was given (on the command
# line it wins anyway; in the environment it is a parent make's jobserver)
# or a goal is `clean` (goals on one command line also run in parallel).
NPROC := $(shell nproc 2>/dev/null || echo 2)
ifeq ($(filter -j% --jobserver%,$(shell printenv MAKEFLAGS)),)
ifeq ($(filter clean,$(MAKECMDGOALS)),)
MAKEFLAGS += -j$(NPROC)
endif
endif

# What ships: `make` builds these, `make install` and the wheel carry them,
# `make gate` checks them.
SHIP_PROGS := $(B)/gpumutex $(B)/gpumutex-run $(B)/gpu-offload \
              $(B)/gpu-offload-calib
SHIP_LIBS  := $(B)/libgpumutex.so $(B)/libgpuoffload.so \
              $(B)/libgpuoffload-cuda.so $(B)/libgpuoffload-test.so
# The programs, like the libraries, run on glibc 2.17 or newer wherever
# they were built: old symbol versions (src/compat/compat.h, force-included),
# the start-up function and stat & co. wrapped (src/compat/prog.c), libdl
# and libpthread kept NEEDED (on an old glibc, dlopen & co. live there),
# and the gate (tools/gate.sh --program) before the file reaches build/.
PROG_CFLAGS  = $(WARN) $(CFLAGS) -include src/compat/compat.h -MMD -MP
PROG_LDFLAGS := -Wl,--wrap=__libc_start_main,--wrap=stat,--wrap=lstat \
                -Wl,--wrap=fstat,--wrap=fstatat
PROG_LIBS    := -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0 \
                -Wl,--as-needed
PROG_COMPAT  := $(B)/prog/compat/prog.o
# A program's objects: $(B)/prog/<folder under src>/NAME.o, with the
# folder's include path (a pattern-specific PROG_INC below).
$(B)/prog/%.o: src/%.c src/compat/compat.h
	@mkdir -p $(@D)
	$(CC) $(PROG_CFLAGS) $(PROG_INC) -c -o $@ $<
$(B)/prog/cli/%.o: PROG_INC = -Isrc/lease -Isrc/cli
$(B)/prog/offload/cli/%.o: PROG_INC = -Isrc/lease -Isrc/offload -Isrc/offload/cli
-include $(wildcard $(B)/prog/*/*.d $(B)/prog/*/*/*.d)
# link-and-gate OUTPUT OBJECTS...: linked under $(B)/ungated/, copied to
# OUTPUT once the gate passed.
define PROG_LINK
@mkdir -p $(B)/ungated
$(CC) $(CFLAGS) -o $(B)/ungated/$(@F) $(filter %.o %.a,$^) \
    $(PROG_LDFLAGS) $(PROG_LIBS)
bash tools/gate.sh --program $(B)/ungated/$(@F)
cp $(B)/ungated/$(@F) $@
endef

LEASE_SRC := $(wildcard src/lease/*.c)
LEASE_HDR := $(wildcard src/lease/*.h)
LEASE_OBJ := $(patsubst src/%.c,$(B)/obj/%.o,$(LEASE_SRC))
LEASE_SAN := $(patsubst src/%.c,$(B)/san/%.o,$(LEASE_SRC))

TEST_BINS := $(B)/tests/lease-unit $(B)/tests/lease-holder \
             $(B)/tests/crashshim.so
SAN_BINS  := $(B)/tests/lease-unit-san $(B)/tests/lease-holder-san

# gpumutex: every file of src/cli but gpumutex-run's main.
CLI_SRC := $(filter-out src/cli/gpumutex-run.c,$(wildcard src/cli/*.c))
CLI_OBJ := $(patsubst src/%.c,$(B)/prog/%.o,$(CLI_SRC))
RUN_OBJ := $(B)/prog/cli/run.o $(B)/prog/cli/gpumutex-run.o

# `make`: what ships. `make all`: that, and every test and benchmark
# program (each module's fragment adds its own with `all: ...`).
.DEFAULT_GOAL := ship
.PHONY: all ship
ship: $(SHIP_PROGS) $(SHIP_LIBS)
all: ship $(B)/liblease.a $(TEST_BINS) fakenvml fakecupti

.PHONY: gate portability distro-check fresh-check
# The load gate (glibc floor, NEEDED, exports): docs/portability.md. The
# build already ran it on the way to build/; this target runs it again, on
# every shipped file as it is now.
gate: ship
	bash tools/gate.sh $(B)/libgpumutex.so src/preload/exports.list $(B)/gen/wrap-exports.list
	bash tools/gate.sh $(B)/libgpuoffload.so $(B)/offload/gen/exports.list
	bash tools/gate.sh $(B)/libgpuoffload-cuda.so src/offload/cuda/exports.list
	bash tools/gate.sh $(B)/libgpuoffload-test.so tests/offload/backend/exports.list
	bash tools/gate.sh --program $(SHIP_PROGS)

# Load proof in a Debian bullseye root (glibc 2.31); needs root, debootstrap
# and Debian's package mirror the first time (the root is then cached).
portability: $(B)/libgpumutex.so
	bash tools/portability.sh

# Build and test in a Debian trixie root (gcc 14, glibc 2.41) holding only
# .ci/packages, check the glibc floor of what it built, load that library
# on bullseye, and build it with bullseye's gcc 10: docs/portability.md.
# Needs root, debootstrap and Debian's package mirror the first time.
distro-check:
	bash tools/distro-build.sh

.PHONY: check check-unit check-san check-py clean lint demo \
        bench sanitizer-tests stress

$(B)/obj/%.o: src/%.c $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(B)/san/%.o: src/%.c $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(SAN_FLAGS) -Isrc/lease -c -o $@ $<

$(B)/gpumutex: $(CLI_OBJ) $(B)/liblease.a $(PROG_COMPAT) tools/gate.sh
	$(PROG_LINK)

$(B)/gpumutex-run: $(RUN_OBJ) $(B)/liblease.a $(PROG_COMPAT) tools/gate.sh
	$(PROG_LINK)

$(B)/liblease.a: $(LEASE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/liblease-san.a: $(LEASE_SAN)
	@rm -f $@
	ar rcs $@ $^

$(B)/tests/%: tests/lease/%.c $(B)/liblease.a $(LEASE_HDR) tests/lease/testjournal.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -pthread -Isrc/lease -o $@ $< $(B)/liblease.a

# The core's unit tests: the checks and lease tests, the parsing tests and
# the lock directory's (lease-unit.h is what they share).
LEASE_UNIT_SRC := tests/lease/lease-unit.c tests/lease/unit-parse.c \
                  tests/lease/unit-lockdir.c
$(B)/tests/lease-unit: $(LEASE_UNIT_SRC) tests/lease/lease-unit.h $(B)/liblease.a $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -pthread -Isrc/lease -o $@ $(LEASE_UNIT_SRC) $(B)/liblease.a

# The crash-sweep shim (LD_PRELOAD; tests/test_crash_sweep.py).
$(B)/tests/crashshim.so: tests/stress/crashshim.c
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -fPIC -shared -o $@ $< -ldl

$(B)/tests/%-san: tests/lease/%.c $(B)/liblease-san.a $(LEASE_HDR) tests/lease/testjournal.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(SAN_FLAGS) -pthread -Isrc/lease -o $@ $< $(B)/liblease-san.a

$(B)/tests/lease-unit-san: $(LEASE_UNIT_SRC) tests/lease/lease-unit.h $(B)/liblease-san.a $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(SAN_FLAGS) -pthread -Isrc/lease -o $@ $(LEASE_UNIT_SRC) $(B)/liblease-san.a

# Makefile fragments of the other modules (each defines its own targets).
-include tests/fakecuda/module.mk
-include tests/fakenvml/module.mk
-include tests/fakecupti/module.mk
-include src/preload/module.mk
-include src/offload/module.mk
-include src/offload/pcopy/module.mk
-include src/offload/wtrack/module.mk
-include src/offload/policy.mk
-include src/offload/cuda/module.mk
-include bench/offload/module.mk
-include tests/offload/cuda/xfer.mk
-include tests/offload/cuda/small.mk
-include tests/offload/cuda/gemm.mk
-include tests/offload/cuda/solve.mk

sanitizer-tests: $(SAN_BINS)

check-unit: $(B)/tests/lease-unit
	$(B)/tests/lease-unit

check-san: $(SAN_BINS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 $(B)/tests/lease-unit-san

# pytest runs without this make's MAKEFLAGS: the tests' own `make` calls
# start afresh (parallel by default) instead of on a jobserver they cannot
# reach.
NO_MAKEFLAGS := env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL
check-py: all $(SAN_BINS)
	$(NO_MAKEFLAGS) $(PYTHON) -m pytest -q tests

# `make check` and `make demo` first install what they lack from
# .ci/packages when run as root, else print the apt-get line and stop
# (tools/packages.sh; PACKAGES=no skips that), then build in parallel and
# run their steps one after another.
PACKAGES ?= yes
.PHONY: packages check-run demo-run
packages:
	@PACKAGES=$(PACKAGES) sh tools/packages.sh

check: packages
	+@$(MAKE) --no-print-directory check-run
check-run: all $(SAN_BINS)
	$(B)/tests/lease-unit
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 $(B)/tests/lease-unit-san
	$(NO_MAKEFLAGS) $(PYTHON) -m pytest -q tests

# The slow tests (tests/stress): crash-point sweeps over every C library
# call of a claim, and many users with kills and planted files. A few
# minutes on two cores.
stress: all $(SAN_BINS)
	$(NO_MAKEFLAGS) $(PYTHON) -m pytest -q -m stress tests

$(B)/demo/fakejob: demo/fakejob.c $(B)/tests/fakecuda/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -L$(B)/tests/fakecuda -lcuda

demo: packages
	+@$(MAKE) --no-print-directory demo-run
demo-run: ship fakecuda $(B)/demo/fakejob
	$(PYTHON) demo/demo.py

$(B)/bench/%: bench/%.c $(B)/liblease.a $(LEASE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -pthread -Isrc/lease -o $@ $< $(B)/liblease.a

$(B)/bench/cuprobe_bench: bench/cuprobe_bench.c
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -ldl

bench: all fakecuda $(B)/demo/fakejob $(B)/bench/handoff $(B)/bench/cuprobe_bench
	$(PYTHON) bench/bench.py
	$(PYTHON) bench/gpu_bench.py

# The agents benchmark (bench/agents/agents.py; a GPU machine with torch):
# one agent, no arbitration, a flock queue, gpumutex; then the five-job
# chain. AGENTS_ARGS/CHAIN_ARGS pass options (--window 30, --lib
# old=DIR/libgpumutex.so to compare builds); results under $(AGENTS_OUT).
AGENTS_OUT ?= build/bench-agents
.PHONY: bench-agents
bench-agents: all
	$(PYTHON) bench/agents/agents.py run --out $(AGENTS_OUT) $(AGENTS_ARGS)
	$(PYTHON) bench/agents/agents.py chain --out $(AGENTS_OUT) $(CHAIN_ARGS)

# The GPU scenario set (tests/gpu): needs a machine with an NVIDIA GPU;
# elsewhere it says it skipped. Logs and summary.md go to $(GPU_OUT).
.PHONY: gpu-check
gpu-check: all
	bash tests/gpu/run.sh $${GPU_OUT:-build/gpu-check}
	bash tests/gpu/suspend.sh $${GPU_OUT:-build/gpu-check}/suspend
	bash tests/gpu/gpu_time.sh $${GPU_OUT:-build/gpu-check}/gpu-time

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
	  --std=c11 --inline-suppr -Isrc/lease -Isrc/cli \
	  src/lease src/preload src/cli src/compat tests/lease tests/preload tests/stress \
  tests/fakecupti \
	  bench demo
	shellcheck .ci/run tools/*.sh tests/fakecuda/gen-stubs.sh tests/system/run.sh \
	  tests/system/wheel.sh

clean:
	rm -rf $(B)

# ---- make install / make uninstall ------------------------------------------
# Everything in $(PREFIX)/lib/gpumutex/ (the programs find their libraries
# beside their own path: gpumutex-run, gpu-offload, `gpumutex install
# --system`), the commands linked into $(PREFIX)/bin, the docs in
# $(PREFIX)/share/doc/gpumutex. Each file is written under a temporary name
# and renamed into place, never rewritten where it is: running programs
# (every process, with /etc/ld.so.preload) map the old one.
PREFIX  ?= /usr/local
DESTDIR ?=
GM_LIBDIR = $(DESTDIR)$(PREFIX)/lib/gpumutex
GM_BINDIR = $(DESTDIR)$(PREFIX)/bin
GM_DOCDIR = $(DESTDIR)$(PREFIX)/share/doc/gpumutex
GM_CMDS   := gpumutex gpumutex-run gpu-offload
GM_DOCS    = README.md $(wildcard docs/*.md)
.PHONY: install uninstall
install: ship
	install -d $(GM_LIBDIR) $(GM_BINDIR) $(GM_DOCDIR)
	@set -e; for f in $(SHIP_PROGS) $(SHIP_LIBS); do \
	    n=$$(basename $$f); m=644; case $$n in *.so) ;; *) m=755 ;; esac; \
	    echo "install $$f $(GM_LIBDIR)/$$n"; \
	    install -m $$m $$f $(GM_LIBDIR)/.$$n.new; \
	    mv -f $(GM_LIBDIR)/.$$n.new $(GM_LIBDIR)/$$n; done
	@set -e; for c in $(GM_CMDS); do \
	    echo "ln -s ../lib/gpumutex/$$c $(GM_BINDIR)/$$c"; \
	    ln -sfn ../lib/gpumutex/$$c $(GM_BINDIR)/.$$c.new; \
	    mv -fT $(GM_BINDIR)/.$$c.new $(GM_BINDIR)/$$c; done
	install -m 644 $(GM_DOCS) $(GM_DOCDIR)/

# Refuses while /etc/ld.so.preload names the library (every program would
# then start with a loader error): `gpumutex uninstall --system` first.
uninstall:
	@if [ -z "$(DESTDIR)" ] && [ -f /etc/ld.so.preload ] && \
	    grep -qF "$(PREFIX)/lib/gpumutex/libgpumutex.so" /etc/ld.so.preload; then \
	    echo "make uninstall: /etc/ld.so.preload names $(PREFIX)/lib/gpumutex/libgpumutex.so; run 'gpumutex uninstall --system' first" >&2; \
	    exit 1; fi
	rm -f $(addprefix $(GM_LIBDIR)/,$(notdir $(SHIP_PROGS) $(SHIP_LIBS)))
	rm -f $(addprefix $(GM_BINDIR)/,$(GM_CMDS))
	rm -f $(addprefix $(GM_DOCDIR)/,$(notdir $(GM_DOCS)))
	-rmdir $(GM_LIBDIR) $(GM_DOCDIR) 2>/dev/null

# ---- The acceptance check: the README's two commands on a fresh machine ----
# A Debian root with nothing but make (tools/fresh-check.sh): `make demo`
# and `make check` there must install what they lack and pass. Needs root,
# debootstrap and Debian's package mirror; some 20 minutes on two cores.
fresh-check:
	bash tools/fresh-check.sh
