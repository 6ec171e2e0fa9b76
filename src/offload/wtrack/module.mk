# src/offload/wtrack/module.mk - write tracking for gpu-offload's residency
# (src/offload/wtrack/wtrack.c: async userfaultfd write-protect and
# PAGEMAP_SCAN), its probe and test program.
#
# Included by the top-level Makefile after src/offload/module.mk, whose
# OFL_OBJ gets the tracker's object (built by its pattern rule).
#
# Targets:
#   $(B)/tests/offload/wtprobe   bench/offload/wtrack_probe.c: every case
#                                the residency must see, and with no
#                                argument the timings (tests/offload/
#                                test_wtrack.py runs `--cases`)
#   bench-wtrack                 the probe with its timings (about 15 s
#                                on 2 cores)
#   lint-wtrack                  cppcheck (part of `make lint`)

WTRACK_SAVED_GOAL := $(.DEFAULT_GOAL)

WTRACK_SRC := src/offload/wtrack/wtrack.c
WTRACK_HDR := src/offload/wtrack/wtrack.h
WTRACK_OBJ := $(patsubst src/%.c,$(B)/obj/%.o,$(WTRACK_SRC))
OFL_OBJ    += $(WTRACK_OBJ)
$(OFL_UNGATED): $(WTRACK_OBJ)
$(WTRACK_OBJ): $(WTRACK_HDR) src/offload/pcopy/pcopy.h

# (vma.c: the /proc/self/maps parsing the tracker shares with the copy
# engine.)
$(B)/tests/offload/wtprobe: bench/offload/wtrack_probe.c $(WTRACK_SRC) $(WTRACK_HDR) \
                            src/offload/pcopy/vma.c src/offload/pcopy/pcopy.h
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -pthread -Isrc/offload -o $@ \
	    bench/offload/wtrack_probe.c $(WTRACK_SRC) src/offload/pcopy/vma.c
all: $(B)/tests/offload/wtprobe

.PHONY: bench-wtrack lint-wtrack
bench-wtrack: $(B)/tests/offload/wtprobe
	$(B)/tests/offload/wtprobe

lint: lint-wtrack
lint-wtrack:
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
	  --std=c11 --inline-suppr -Isrc/offload src/offload/wtrack \
	  bench/offload/wtrack_probe.c

.DEFAULT_GOAL := $(WTRACK_SAVED_GOAL)
