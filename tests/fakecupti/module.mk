# tests/fakecupti/module.mk - fake CUPTI (libcupti.so.13) for the tests of
# the GPU-time collector; tests/fakecupti/README.md.
#
# Targets:
#   fakecupti                                  the library (phony)
#   build/tests/fakecupti/libcupti.so.13       the fake (SONAME libcupti.so.13)

FAKECUPTI_SAVED_GOAL := $(.DEFAULT_GOAL)
CC ?= cc
FAKECUPTI_DIR   := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
FAKECUPTI_BUILD ?= build/tests/fakecupti

.PHONY: fakecupti
fakecupti: $(FAKECUPTI_BUILD)/libcupti.so.13

$(FAKECUPTI_BUILD)/libcupti.so.13: $(FAKECUPTI_DIR)/fakecupti.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	    -Wmissing-prototypes -fPIC -O2 -g -fvisibility=hidden -shared \
	    -Wl,-soname,libcupti.so.13 -Wl,-Bsymbolic -Wl,-z,defs -o $@ $< \
	    -ldl -lpthread

.DEFAULT_GOAL := $(FAKECUPTI_SAVED_GOAL)
