# tests/fakenvml/module.mk - fake NVIDIA management library
# (libnvidia-ml.so.1) for the tests; tests/fakenvml/README.md.
#
# Targets:
#   fakenvml                                   the library (phony)
#   build/tests/fakenvml/libnvidia-ml.so.1     the fake (SONAME libnvidia-ml.so.1)
# The fake lies in a directory of its own, so that a test puts it in
# LD_LIBRARY_PATH (NVML "present") or leaves it out ("absent").

FAKENVML_SAVED_GOAL := $(.DEFAULT_GOAL)
CC ?= cc
FAKENVML_DIR   := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
FAKENVML_BUILD ?= build/tests/fakenvml

.PHONY: fakenvml
fakenvml: $(FAKENVML_BUILD)/libnvidia-ml.so.1

$(FAKENVML_BUILD)/libnvidia-ml.so.1: $(FAKENVML_DIR)/fakenvml.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	    -Wmissing-prototypes -fPIC -O2 -g -fvisibility=hidden -shared \
	    -Wl,-soname,libnvidia-ml.so.1 -Wl,-z,defs -o $@ $<

.DEFAULT_GOAL := $(FAKENVML_SAVED_GOAL)
