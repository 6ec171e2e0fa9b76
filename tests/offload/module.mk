# tests/offload/module.mk - the frontend's test programs (included by
# src/offload/module.mk). They link the system's reference BLAS/LAPACK
# (libblas.so.3, liblapack.so.3: python3-numpy's dependencies).

OFL_TCC = $(CC) $(WARN) $(CFLAGS) -Wno-strict-prototypes
OFL_TESTS := $(OFL_T)/opcheck $(OFL_T)/libbadabi.so

offload-tests: $(OFL_TESTS)

$(OFL_T)/opcheck: $(OFL_TSRC)/opcheck.c
	@mkdir -p $(@D)
	$(OFL_TCC) -o $@ $< -Wl,--no-as-needed -l:liblapack.so.3 -l:libblas.so.3 -ldl -lm
