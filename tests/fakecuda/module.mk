# tests/fakecuda/module.mk - fake NVIDIA driver (libcuda.so.1) for the tests.
#
# Included by the top-level Makefile (run from the repository root); can also
# be used on its own:  make -f tests/fakecuda/module.mk fakecuda
#
# Targets:
#   fakecuda                               everything below (phony)
#   build/tests/fakecuda/libcuda.so.1      the fake driver (SONAME libcuda.so.1)
#   build/tests/fakecuda/libcuda.so        symlink -> libcuda.so.1 (for -lcuda)
#   build/tests/fakecuda/selftest          self-test program
#   fakecuda-clean                         remove build/tests/fakecuda (phony)
#
# Needs only a C compiler, sh, awk and sort: the stubs come from the
# committed stubs.txt, not from the CUDA toolkit.

# Do not let this fragment change the including Makefile's default goal.
FAKECUDA_SAVED_GOAL := $(.DEFAULT_GOAL)

CC ?= cc
FAKECUDA_DIR   := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
FAKECUDA_BUILD ?= build/tests/fakecuda
FAKECUDA_WARN    := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
                    -Wmissing-prototypes
FAKECUDA_CFLAGS  := $(FAKECUDA_WARN) -fPIC -O2 -g -pthread
FAKECUDA_LDFLAGS := -shared -Wl,-soname,libcuda.so.1 \
                    -Wl,--version-script=$(FAKECUDA_DIR)/exports.map \
                    -Wl,-Bsymbolic -Wl,-z,defs
FAKECUDA_LIBS    := -ldl -lpthread

FAKECUDA_LIB      := $(FAKECUDA_BUILD)/libcuda.so.1
FAKECUDA_LINK     := $(FAKECUDA_BUILD)/libcuda.so
FAKECUDA_SELFTEST := $(FAKECUDA_BUILD)/selftest
# The fake's own files (fakecuda.c, devices; context.c, contexts and
# memory; journal.c, the journal; procaddr.c, cuGetProcAddress; fcint.h
# what they share) and the generated stubs.
# Every .c of the folder but the self-test (tools/portability.sh and
# tests/system/scenarios.py build it the same way).
FAKECUDA_SRCS     := $(filter-out $(FAKECUDA_DIR)/selftest.c,$(wildcard $(FAKECUDA_DIR)/*.c))
FAKECUDA_OBJS     := $(patsubst $(FAKECUDA_DIR)/%.c,$(FAKECUDA_BUILD)/%.o,$(FAKECUDA_SRCS)) \
                     $(FAKECUDA_BUILD)/stubs.o

.PHONY: fakecuda fakecuda-clean
fakecuda: $(FAKECUDA_LIB) $(FAKECUDA_LINK) $(FAKECUDA_SELFTEST)

$(FAKECUDA_BUILD)/stubs.c: $(FAKECUDA_DIR)/stubs.txt $(FAKECUDA_DIR)/fakecuda.h \
                           $(FAKECUDA_DIR)/gen-stubs.sh
	@mkdir -p $(@D)
	sh $(FAKECUDA_DIR)/gen-stubs.sh --c $(FAKECUDA_DIR)/stubs.txt \
	    $(FAKECUDA_DIR)/fakecuda.h > $@.tmp
	mv $@.tmp $@

$(FAKECUDA_BUILD)/stubs.o: $(FAKECUDA_BUILD)/stubs.c $(FAKECUDA_DIR)/fakecuda.h
	$(CC) $(FAKECUDA_CFLAGS) -I$(FAKECUDA_DIR) -c -o $@ $<

$(filter-out %/stubs.o,$(FAKECUDA_OBJS)): $(FAKECUDA_BUILD)/%.o: $(FAKECUDA_DIR)/%.c \
                           $(FAKECUDA_DIR)/fakecuda.h $(FAKECUDA_DIR)/fcint.h
	@mkdir -p $(@D)
	$(CC) $(FAKECUDA_CFLAGS) -I$(FAKECUDA_DIR) -c -o $@ $<

$(FAKECUDA_LIB): $(FAKECUDA_OBJS) $(FAKECUDA_DIR)/exports.map
	$(CC) $(FAKECUDA_CFLAGS) $(FAKECUDA_LDFLAGS) -o $@ $(FAKECUDA_OBJS) $(FAKECUDA_LIBS)

$(FAKECUDA_LINK): $(FAKECUDA_LIB)
	ln -sf libcuda.so.1 $@

$(FAKECUDA_SELFTEST): $(FAKECUDA_DIR)/selftest.c $(FAKECUDA_DIR)/fakecuda.h $(FAKECUDA_LINK)
	$(CC) $(FAKECUDA_WARN) -O2 -g -pthread -I$(FAKECUDA_DIR) -o $@ $< \
	    -L$(FAKECUDA_BUILD) -lcuda -Wl,-rpath,'$$ORIGIN' -ldl

fakecuda-clean:
	rm -rf $(FAKECUDA_BUILD)

.DEFAULT_GOAL := $(FAKECUDA_SAVED_GOAL)
