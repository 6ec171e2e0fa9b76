"""offload_ops.py - the table of libgpuoffload.so's operations (OPS), the
name schemes (SCHEMES), and the few names that differ (CBLAS_NAME).

The only description of the intercepted BLAS and LAPACK operations:
tools/gen_offload.py generates the wrappers, the operation table and the
export list from it (its docstring lists what it writes). Apart from the
generator because this is what changes when an operation is added, and the
generator's C templates what changes when the wrappers do.

Only /usr/bin/python3's standard library is used.
"""

# ---- The table ---------------------------------------------------------------
#
# Fortran argument kinds (one token each, "name:kind"):
#   c   CHARACTER*1 option (a hidden length is appended at the end)
#   i   INTEGER dimension (m, n, k, nrhs)
#   ld  INTEGER leading dimension of the operand named after "ld"
#   inc INTEGER increment
#   lw  INTEGER workspace length (lwork, lrwork, liwork: -1 is a query)
#   s   scalar of the precision      sr  real scalar of the precision
#   a   array of the precision       r   real array of the precision
#   p   INTEGER array (pivots, iwork)
#   info INTEGER output
# CBLAS lists use the same kinds, passed by value where CBLAS does
# (dimensions, real scalars), plus "layout" (the CblasRowMajor/ColMajor
# enum) and "e" (an enum option: trans, uplo, side, diag).
#
# Operands: (argument, element kind M|R|I, rows, cols, in, out, compare)
# in C expressions of the normalised call (m, n, k, nrhs; o0..o3 the
# options in order, upper case). compare: val (compare values), vec
# (vectors, defined up to a phase: not compared), piv (exact), lu (only
# when the pivots agree). gesvd's and gesdd's A is in-out and not compared:
# LAPACK destroys it (jobs other than 'O'), and callers test that it did
# (SciPy's overwrite_a tests: the memory was reused), so the GPU's
# destroyed A comes back too. beta_nz: beta is not zero (gemm, symm, hemm
# read C only then, gemv y: with beta = 0, it is a pure output, never
# copied in and copied out straight into the caller's memory). A vector
# (gemv's x, y) is 1 row of len columns, its increment the "ld".

class Op:
    def __init__(self, num, name, level, precs, fargs, flops, bufs=(),
                 cargs=None, names=None, measure=False, opts="", gpu_if="1",
                 ret=None):
        self.num, self.name, self.level, self.precs = num, name, level, precs
        self.fargs = fargs if isinstance(fargs, dict) else {p: fargs for p in precs}
        for p in precs:
            for k in list(self.fargs):
                if p in k and len(k) > 1:
                    self.fargs[p] = self.fargs[k]
        self.cargs = None
        if cargs is not None:
            self.cargs = cargs if isinstance(cargs, dict) else {p: cargs for p in precs}
            for p in precs:
                for k in list(self.cargs):
                    if p in k and len(k) > 1:
                        self.cargs[p] = self.cargs[k]
        self.flops, self.bufs, self.measure = flops, bufs, measure
        self.names = names or {p: p + name for p in precs}
        self.opts = opts          # allowed letters per option, "|"-separated
        self.gpu_if = gpu_if      # extra condition for the GPU path
        self.ret = ret or {}      # Fortran function result type per prec


L3 = 3
OPS = [
    # ---- BLAS level 3 -------------------------------------------------------
    Op(1, "gemm", L3, "sdcz",
       "transa:c transb:c m:i n:i k:i alpha:s a:a lda:ld b:a ldb:ld beta:s c:a ldc:ld",
       "2.0*m*n*k",
       [("a", "M", "o0=='N'?m:k", "o0=='N'?k:m", "1", "0", "val"),
        ("b", "M", "o1=='N'?k:n", "o1=='N'?n:k", "1", "0", "val"),
        ("c", "M", "m", "n", "beta_nz", "1", "val")],
       cargs="layout transa:e transb:e m:i n:i k:i alpha:s a:a lda:ld b:a ldb:ld beta:s c:a ldc:ld",
       opts="NTC|NTC"),
    Op(2, "symm", L3, "sdcz",
       "side:c uplo:c m:i n:i alpha:s a:a lda:ld b:a ldb:ld beta:s c:a ldc:ld",
       "2.0*(o0=='L'?m:n)*m*n",
       [("a", "M", "o0=='L'?m:n", "o0=='L'?m:n", "1", "0", "val"),
        ("b", "M", "m", "n", "1", "0", "val"),
        ("c", "M", "m", "n", "beta_nz", "1", "val")],
       cargs="layout side:e uplo:e m:i n:i alpha:s a:a lda:ld b:a ldb:ld beta:s c:a ldc:ld",
       opts="LR|UL"),
    Op(3, "hemm", L3, "cz",
       "side:c uplo:c m:i n:i alpha:s a:a lda:ld b:a ldb:ld beta:s c:a ldc:ld",
       "2.0*(o0=='L'?m:n)*m*n",
       [("a", "M", "o0=='L'?m:n", "o0=='L'?m:n", "1", "0", "val"),
        ("b", "M", "m", "n", "1", "0", "val"),
        ("c", "M", "m", "n", "beta_nz", "1", "val")],
       cargs="layout side:e uplo:e m:i n:i alpha:s a:a lda:ld b:a ldb:ld beta:s c:a ldc:ld",
       opts="LR|UL"),
    Op(4, "syrk", L3, "sdcz",
       "uplo:c trans:c n:i k:i alpha:s a:a lda:ld beta:s c:a ldc:ld",
       "1.0*n*(n+1)*k",
       [("a", "M", "o1=='N'?n:k", "o1=='N'?k:n", "1", "0", "val"),
        ("c", "M", "n", "n", "1", "1", "val")],
       cargs="layout uplo:e trans:e n:i k:i alpha:s a:a lda:ld beta:s c:a ldc:ld",
       opts="UL|NTC", gpu_if="!(cplx && o1=='C')"),
    Op(5, "herk", L3, "cz",
       "uplo:c trans:c n:i k:i alpha:sr a:a lda:ld beta:sr c:a ldc:ld",
       "1.0*n*(n+1)*k",
       [("a", "M", "o1=='N'?n:k", "o1=='N'?k:n", "1", "0", "val"),
        ("c", "M", "n", "n", "1", "1", "val")],
       cargs="layout uplo:e trans:e n:i k:i alpha:sr a:a lda:ld beta:sr c:a ldc:ld",
       opts="UL|NC"),
    Op(6, "syr2k", L3, "sdcz",
       "uplo:c trans:c n:i k:i alpha:s a:a lda:ld b:a ldb:ld beta:s c:a ldc:ld",
       "2.0*n*(n+1)*k",
       [("a", "M", "o1=='N'?n:k", "o1=='N'?k:n", "1", "0", "val"),
        ("b", "M", "o1=='N'?n:k", "o1=='N'?k:n", "1", "0", "val"),
        ("c", "M", "n", "n", "1", "1", "val")],
       cargs="layout uplo:e trans:e n:i k:i alpha:s a:a lda:ld b:a ldb:ld beta:s c:a ldc:ld",
       opts="UL|NTC", gpu_if="!(cplx && o1=='C')"),
    Op(7, "her2k", L3, "cz",
       "uplo:c trans:c n:i k:i alpha:s a:a lda:ld b:a ldb:ld beta:sr c:a ldc:ld",
       "2.0*n*(n+1)*k",
       [("a", "M", "o1=='N'?n:k", "o1=='N'?k:n", "1", "0", "val"),
        ("b", "M", "o1=='N'?n:k", "o1=='N'?k:n", "1", "0", "val"),
        ("c", "M", "n", "n", "1", "1", "val")],
       cargs="layout uplo:e trans:e n:i k:i alpha:s a:a lda:ld b:a ldb:ld beta:sr c:a ldc:ld",
       opts="UL|NC"),
    Op(8, "trmm", L3, "sdcz",
       "side:c uplo:c transa:c diag:c m:i n:i alpha:s a:a lda:ld b:a ldb:ld",
       "1.0*(o0=='L'?m:n)*m*n",
       [("a", "M", "o0=='L'?m:n", "o0=='L'?m:n", "1", "0", "val"),
        ("b", "M", "m", "n", "1", "1", "val")],
       cargs="layout side:e uplo:e transa:e diag:e m:i n:i alpha:s a:a lda:ld b:a ldb:ld",
       opts="LR|UL|NTC|NU"),
    Op(9, "trsm", L3, "sdcz",
       "side:c uplo:c transa:c diag:c m:i n:i alpha:s a:a lda:ld b:a ldb:ld",
       "1.0*(o0=='L'?m:n)*m*n",
       [("a", "M", "o0=='L'?m:n", "o0=='L'?m:n", "1", "0", "val"),
        ("b", "M", "m", "n", "1", "1", "val")],
       cargs="layout side:e uplo:e transa:e diag:e m:i n:i alpha:s a:a lda:ld b:a ldb:ld",
       opts="LR|UL|NTC|NU"),
    # ---- BLAS level 2: offloaded only with its matrix resident ---------------
    # (docs/offload-residency.md, "The model, and level 2"). A vector is an
    # operand of 1 row and len columns whose leading dimension is its
    # increment (incx:inc fills ld of x): the copies move its elements
    # alone, and the device copy keeps the increment. A negative or zero
    # increment is no valid leading dimension: the CPU runs such calls.
    Op(20, "gemv", 2, "sdcz",
       "trans:c m:i n:i alpha:s a:a lda:ld x:a incx:inc beta:s y:a incy:inc",
       "2.0*m*n",
       [("a", "M", "m", "n", "1", "0", "val"),
        ("x", "M", "1", "o0=='N'?n:m", "1", "0", "val"),
        ("y", "M", "1", "o0=='N'?m:n", "beta_nz", "1", "val")],
       cargs="layout trans:e m:i n:i alpha:s a:a lda:ld x:a incx:inc beta:s y:a incy:inc",
       opts="NTC"),
    # ---- BLAS level 1: measured, never offloaded -----------------------------
    Op(21, "axpy", 1, "sdcz", "n:i alpha:s x:a incx:inc y:a incy:inc", "2.0*n",
       cargs="n:i alpha:s x:a incx:inc y:a incy:inc", measure=True),
    Op(22, "scal", 1, "sdcz", "n:i alpha:s x:a incx:inc", "1.0*n",
       cargs="n:i alpha:s x:a incx:inc", measure=True),
    Op(23, "copy", 1, "sdcz", "n:i x:a incx:inc y:a incy:inc", "1.0*n",
       cargs="n:i x:a incx:inc y:a incy:inc", measure=True),
    Op(24, "dot", 1, "sd", "n:i x:a incx:inc y:a incy:inc", "2.0*n",
       cargs="n:i x:a incx:inc y:a incy:inc", measure=True,
       ret={"s": "float", "d": "double"}),
    Op(25, "dotu", 1, "cz", "n:i x:a incx:inc y:a incy:inc", "2.0*n",
       cargs="n:i x:a incx:inc y:a incy:inc dotu:a", measure=True,
       ret={"c": "float _Complex", "z": "double _Complex"}),
    Op(26, "dotc", 1, "cz", "n:i x:a incx:inc y:a incy:inc", "2.0*n",
       cargs="n:i x:a incx:inc y:a incy:inc dotc:a", measure=True,
       ret={"c": "float _Complex", "z": "double _Complex"}),
    Op(27, "nrm2", 1, "sdcz", "n:i x:a incx:inc", "2.0*n",
       cargs="n:i x:a incx:inc", measure=True,
       names={"s": "snrm2", "d": "dnrm2", "c": "scnrm2", "z": "dznrm2"},
       ret={"s": "float", "d": "double", "c": "float", "z": "double"}),
    Op(28, "asum", 1, "sdcz", "n:i x:a incx:inc", "1.0*n",
       cargs="n:i x:a incx:inc", measure=True,
       names={"s": "sasum", "d": "dasum", "c": "scasum", "z": "dzasum"},
       ret={"s": "float", "d": "double", "c": "float", "z": "double"}),
    Op(29, "iamax", 1, "sdcz", "n:i x:a incx:inc", "1.0*n",
       cargs="n:i x:a incx:inc", measure=True,
       names={"s": "isamax", "d": "idamax", "c": "icamax", "z": "izamax"},
       ret={p: "INT" for p in "sdcz"}),
    # ---- LAPACK ----------------------------------------------------------------
    Op(40, "getrf", 4, "sdcz", "m:i n:i a:a lda:ld ipiv:p info:info",
       "(m>=n ? 1.0*m*n*n-1.0*n*n*n/3 : 1.0*n*m*m-1.0*m*m*m/3)",
       [("a", "M", "m", "n", "1", "1", "lu"),
        ("ipiv", "I", "(m<n?m:n)", "1", "0", "1", "piv")]),
    Op(41, "getrs", 4, "sdcz",
       "trans:c n:i nrhs:i a:a lda:ld ipiv:p b:a ldb:ld info:info",
       "2.0*n*n*nrhs",
       [("a", "M", "n", "n", "1", "0", "val"),
        ("ipiv", "I", "n", "1", "1", "0", "piv"),
        ("b", "M", "n", "nrhs", "1", "1", "val")], opts="NTC"),
    Op(42, "gesv", 4, "sdcz",
       "n:i nrhs:i a:a lda:ld ipiv:p b:a ldb:ld info:info",
       "2.0*n*n*n/3+2.0*n*n*nrhs",
       [("a", "M", "n", "n", "1", "1", "lu"),
        ("ipiv", "I", "n", "1", "0", "1", "piv"),
        ("b", "M", "n", "nrhs", "1", "1", "val")]),
    Op(43, "potrf", 4, "sdcz", "uplo:c n:i a:a lda:ld info:info",
       "1.0*n*n*n/3",
       [("a", "M", "n", "n", "1", "1", "val")], opts="UL"),
    Op(44, "potrs", 4, "sdcz",
       "uplo:c n:i nrhs:i a:a lda:ld b:a ldb:ld info:info",
       "2.0*n*n*nrhs",
       [("a", "M", "n", "n", "1", "0", "val"),
        ("b", "M", "n", "nrhs", "1", "1", "val")], opts="UL"),
    Op(45, "posv", 4, "sdcz",
       "uplo:c n:i nrhs:i a:a lda:ld b:a ldb:ld info:info",
       "1.0*n*n*n/3+2.0*n*n*nrhs",
       [("a", "M", "n", "n", "1", "1", "val"),
        ("b", "M", "n", "nrhs", "1", "1", "val")], opts="UL"),
    Op(46, "syev", 4, "sd",
       "jobz:c uplo:c n:i a:a lda:ld w:r work:a lwork:lw info:info",
       "(o0=='V' ? 9.0 : 4.0/3)*n*n*n",
       [("a", "M", "n", "n", "1", "o0=='V'", "vec"),
        ("w", "R", "n", "1", "0", "1", "val")], opts="NV|UL"),
    Op(47, "heev", 4, "cz",
       "jobz:c uplo:c n:i a:a lda:ld w:r work:a lwork:lw rwork:r info:info",
       "(o0=='V' ? 9.0 : 4.0/3)*n*n*n",
       [("a", "M", "n", "n", "1", "o0=='V'", "vec"),
        ("w", "R", "n", "1", "0", "1", "val")], opts="NV|UL"),
    Op(48, "syevd", 4, "sd",
       "jobz:c uplo:c n:i a:a lda:ld w:r work:a lwork:lw iwork:p liwork:lw info:info",
       "(o0=='V' ? 9.0 : 4.0/3)*n*n*n",
       [("a", "M", "n", "n", "1", "o0=='V'", "vec"),
        ("w", "R", "n", "1", "0", "1", "val")], opts="NV|UL"),
    Op(49, "heevd", 4, "cz",
       "jobz:c uplo:c n:i a:a lda:ld w:r work:a lwork:lw rwork:r lrwork:lw iwork:p liwork:lw info:info",
       "(o0=='V' ? 9.0 : 4.0/3)*n*n*n",
       [("a", "M", "n", "n", "1", "o0=='V'", "vec"),
        ("w", "R", "n", "1", "0", "1", "val")], opts="NV|UL"),
    Op(50, "gesvd", 4, "sdcz",
       {"sd": "jobu:c jobvt:c m:i n:i a:a lda:ld s:r u:a ldu:ld vt:a ldvt:ld work:a lwork:lw info:info",
        "cz": "jobu:c jobvt:c m:i n:i a:a lda:ld s:r u:a ldu:ld vt:a ldvt:ld work:a lwork:lw rwork:r info:info"},
       "4.0*m*n*(m<n?m:n)+((o0!='N'||o1!='N') ? 8.0*(m<n?m:n)*(m<n?m:n)*(m<n?m:n) : 0)",
       [("a", "M", "m", "n", "1", "1", "vec"),
        ("s", "R", "(m<n?m:n)", "1", "0", "1", "val"),
        ("u", "M", "o0=='N'?0:m", "o0=='A'?m:o0=='S'?(m<n?m:n):0", "0", "1", "vec"),
        ("vt", "M", "o1=='A'?n:o1=='S'?(m<n?m:n):0", "o1=='N'?0:n", "0", "1", "vec")],
       opts="ASNO|ASNO", gpu_if="o0!='O' && o1!='O'"),
    Op(51, "gesdd", 4, "sdcz",
       {"sd": "jobz:c m:i n:i a:a lda:ld s:r u:a ldu:ld vt:a ldvt:ld work:a lwork:lw iwork:p info:info",
        "cz": "jobz:c m:i n:i a:a lda:ld s:r u:a ldu:ld vt:a ldvt:ld work:a lwork:lw rwork:r iwork:p info:info"},
       "4.0*m*n*(m<n?m:n)+(o0!='N' ? 8.0*(m<n?m:n)*(m<n?m:n)*(m<n?m:n) : 0)",
       [("a", "M", "m", "n", "1", "1", "vec"),
        ("s", "R", "(m<n?m:n)", "1", "0", "1", "val"),
        ("u", "M", "o0=='N'?0:m", "o0=='A'?m:o0=='S'?(m<n?m:n):0", "0", "1", "vec"),
        ("vt", "M", "o0=='A'?n:o0=='S'?(m<n?m:n):0", "o0=='N'?0:n", "0", "1", "vec")],
       opts="ASNO", gpu_if="o0!='O'"),
    Op(52, "geqrf", 4, "sdcz", "m:i n:i a:a lda:ld tau:a work:a lwork:lw info:info",
       "(m>=n ? 2.0*m*n*n-2.0*n*n*n/3 : 2.0*n*m*m-2.0*m*m*m/3)",
       [("a", "M", "m", "n", "1", "1", "val"),
        ("tau", "M", "(m<n?m:n)", "1", "0", "1", "val")]),
    Op(53, "gels", 4, "sdcz",
       "trans:c m:i n:i nrhs:i a:a lda:ld b:a ldb:ld work:a lwork:lw info:info",
       "(m>=n ? 2.0*m*n*n-2.0*n*n*n/3 : 2.0*n*m*m-2.0*m*m*m/3)+4.0*m*n*nrhs",
       [("a", "M", "m", "n", "1", "1", "val"),
        ("b", "M", "(m>n?m:n)", "nrhs", "1", "1", "val")], opts="NTC"),
]

SCHEMES = [  # (Fortran name, CBLAS name, 64-bit integers)
    ("{n}_", "cblas_{n}", False),
    ("scipy_{n}_", "scipy_cblas_{n}", False),
    ("scipy_{n}_64_", "scipy_cblas_{n}64_", True),
]
# CBLAS names that differ from cblas_<fortran name>: complex dots return
# through a pointer.
CBLAS_NAME = {"dotu": "{n}_sub", "dotc": "{n}_sub"}

CT = {"s": "float", "d": "double", "c": "float", "z": "double"}  # component
