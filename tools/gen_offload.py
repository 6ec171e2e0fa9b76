#!/usr/bin/python3
"""gen_offload.py OUTDIR - generate libgpuoffload.so's wrappers from one table.

The table (OPS, in tools/offload_ops.py) is the only description of the
intercepted BLAS and LAPACK operations: each entry gives the operation's
stable number, its precisions, its Fortran argument list (per precision
class where they differ), its CBLAS argument list (BLAS only), the work in
flops, and its device operands (shape, leading dimension, whether each is
read and/or written, and how verify mode compares it). From it this
writes, into OUTDIR:

  ops.h        GPO_OP_* numbers (part of the backend ABI, src/offload/backend.h)
  ops.c        per operation: name, describe() (flops, operands, options)
  wrappers.c   every exported wrapper: 4 precisions x Fortran/CBLAS x
               standard, scipy_ and scipy_*_64_ names
  exports.list the exported names, one a line (tools/gate.sh): the
               wrappers' and the library's own (src/offload/exports.list)
  exports.map  the linker version script exporting exactly those

Only /usr/bin/python3's standard library is used; the output is not
committed (the build runs this).
"""
import re
import os
import sys

from offload_ops import CBLAS_NAME, CT, OPS, SCHEMES


# ---- Generation ----------------------------------------------------------------

def parse(args):
    out = []
    for tok in args.split():
        if ":" in tok:
            name, kind = tok.split(":")
        else:
            name, kind = tok, tok
        out.append((name, kind))
    return out


def ctype(kind, p, i64, by_value):
    """C parameter type of one argument."""
    it = "int64_t" if i64 else "int"
    cplx = p in "cz"
    el = {"s": "float", "d": "double", "c": "float", "z": "double"}[p]
    if kind in ("c",):
        return "const char *"
    if kind in ("i", "ld", "inc", "lw"):
        return it if by_value else f"const {it} *"
    if kind == "info":
        return f"{it} *"
    if kind == "s":
        if by_value and not cplx:
            return el
        return f"const {el} *" if not by_value else "const void *"
    if kind == "sr":
        return el if by_value else f"const {el} *"
    if kind in ("a", "r"):
        return f"{el} *" if not by_value else "void *"
    if kind == "p":
        return f"{it} *"
    if kind in ("layout", "e"):
        return "int"
    raise ValueError(kind)


def gen_wrapper(op, p, scheme, cblas, w):
    fname_t, cname_t, i64 = scheme
    base = op.names[p]
    if cblas:
        nm = CBLAS_NAME.get(op.name, "{n}").format(n=base)
        name = cname_t.format(n=nm)
        args = parse(op.cargs[p])
        by_value = True
    else:
        name = fname_t.format(n=base)
        args = parse(op.fargs[p])
        by_value = False
    it = "int64_t" if i64 else "int"
    params = []
    for a, k in args:
        t = ctype(k, p, i64, by_value)
        params.append(f"{t}{'' if t.endswith('*') else ' '}{a}")
    strs = [a for a, k in args if k == "c"]
    for s in strs:
        params.append(f"size_t l_{s}")
    ret = op.ret.get(p, "void")
    if ret == "INT":
        ret = "size_t" if cblas else it
    if cblas and op.name in ("dotu", "dotc"):
        ret = "void"
    plist = ", ".join(params)
    names = ", ".join([a for a, _ in args] + [f"l_{s}" for s in strs])
    cplx = p in "cz"
    # Two functions: the exported wrapper is the light path alone (small
    # frame, no call of ours on it); the full path is a separate function
    # it calls otherwise, with the call site, so that the light path pays
    # none of the full path's stack frame and saved registers.
    full = f"{name}__full"
    site_p = f"{plist}, const void *site" if plist else "const void *site"
    light = []
    light.append(f"typedef {ret} (*{name}__real_t)({plist});")
    light.append(f"static struct gpo_fn {name}__fn = {{ \"{name}\", {op.num}, '{p}', "
                 f"{1 if cblas else 0}, {1 if i64 else 0}, {{{{0, 0}}}} }};")
    light.append(f"static __attribute__((noinline)) {ret} {full}({site_p});")
    light.append(f"GPO_EXPORT {ret} {name}({plist});")
    light.append(f"{ret} {name}({plist})")
    light.append("{")
    # The light path (frontend.h): a nested call of any operation, a
    # workspace query, a call below the size threshold (numpy makes one
    # ?copy per matrix column) go straight to the CPU library, counted;
    # everything inlined, no call of ours. The reason is the full path's
    # (gpo_run): nested first, then the query, then the size.
    d = "" if by_value else "*"
    if op.measure:
        # As the full path's light check always had it: the table's flops
        # without the complex factor.
        fl = re.sub(r"\b([mnk])\b", lambda m_: f"(double)({d}{m_.group(1)})",
                    op.flops)
        lim = "gpo_fast_copy_min" if op.name == "copy" else "gpo_fast_min"
        why0 = f"{fl} < {lim} ? GPO_R_SMALL : 0"
    else:
        # The flops of the normalised call (describe_<op>), from the
        # caller's arguments: upper-case option letters (CBLAS enums
        # mapped), dimensions as doubles, 0 for what the op lacks.
        dims = {a: f"(double)({d}{a})" for a, k in args if k == "i"}
        opts = [f"gpo_upper(*{a})" if k == "c" else f"gpo_cblas_opt({a})"
                for a, k in args if k in ("c", "e")]
        opts += ["0"] * (4 - len(opts))
        fl = (f"gpo__flops_{op.name}(" +
              ", ".join(dims.get(x, "0.0") for x in ("m", "n", "k", "nrhs")) +
              ", " + ", ".join(opts) + f", {1 if cplx else 0})")
        small = f"{fl} < gpo_fast_min ? GPO_R_SMALL : 0"
        if cblas and op.name in ("symm", "hemm", "trmm", "trsm"):
            # gpo_run maps a row-major call first (the other side, m and
            # n swapped): the same flops for valid options only, so such
            # a call takes the full path.
            small = f"layout == 101 ? 0 : {small}"
        q = [f"(int64_t){d}{a} == -1" for a, k in args if k == "lw"]
        if q:
            small = f"({' || '.join(q)}) ? GPO_R_WORKSPACE : {small}"
        why0 = small
    call = f"real({names})"
    call_full = f"{full}({names + ', ' if names else ''}__builtin_return_address(0))"
    ret_full = f"\t\t{call_full};\n\t\treturn;" if ret == "void" else f"\t\treturn {call_full};"
    light.append("\tstruct gpo_tls *t = &gpo_tls;")
    light.append("\tunsigned g = gpo_fast_gate();")
    light.append(f"\t{name}__real_t real;")
    light.append("\tunsigned why;")
    # Nested: its own calls are nested already (the depth is above 0), so
    # it need not raise the depth and the real function is a tail call (no
    # frame of ours, no copy of stack arguments). Nothing here calls out:
    # a cache miss or a fold due (left 0) takes the full path, which
    # resolves and counts the same call the same way.
    # The gate (count.h) is read once: nested calls go straight through
    # paused or not, the others when it is 0 (open, not paused).
    light.append("\tif (t->depth > 0) {")
    light.append("\t\tif ((g & GPO_FAST_SHUT) == 0 && !t->quiet && t->left != 0 &&")
    light.append(f"\t\t    (real = ({name}__real_t)gpo_fast_cached(&{name}__fn, "
                 "__builtin_return_address(0))) != NULL) {")
    light.append("\t\t\tt->n[GPO_R_NESTED]++;")
    light.append("\t\t\tt->left--;")
    if ret == "void":
        light.append(f"\t\t\t{call};")
        light.append("\t\t\treturn;")
    else:
        light.append(f"\t\t\treturn {call};")
    light.append("\t\t}")
    light.append(ret_full)
    light.append("\t}")
    def raised(test, reason):
        """`if (test && the real function is cached)`: count `reason`,
        call it with the depth raised, return its result."""
        light.append(f"\tif ({test} &&")
        light.append(f"\t    (real = ({name}__real_t)gpo_fast_cached(&{name}__fn, "
                     "__builtin_return_address(0))) != NULL) {")
        light.append(f"\t\tt->n[{reason}]++;")
        light.append("\t\tt->left--;")
        light.append("\t\tt->depth++;")
        if ret == "void":
            light.append(f"\t\t{call};")
            light.append("\t\tt->depth--;")
            light.append("\t\treturn;")
        else:
            light.append(f"\t\t{ret} lr = {call};")
            light.append("\t\tt->depth--;")
            light.append("\t\treturn lr;")
        light.append("\t}")
    # Not nested: the CPU library's own calls must see the depth raised.
    raised(f"g == 0 && !t->quiet && t->left != 0 && (why = ({why0})) != 0", "why")
    # Paused (src/offload/pause.c), gate otherwise open: any call, of
    # any size, is the CPU library's (no copy engine), counted paused,
    # the depth raised as above. After the active test, which it costs
    # nothing: a call that passes that one never gets here.
    raised("g == GPO_FAST_PAUSED && !t->quiet && t->left != 0", "GPO_R_PAUSED")
    light.append(ret_full.replace("\t\t", "\t"))
    light.append("}")
    w.append("\n".join(light) + "\n")

    body = []
    body.append(f"static {ret} {full}({site_p})")
    body.append("{")
    body.append(f"\ttypedef {name}__real_t real_t;")
    body.append(f"\tstruct gpo_fn *const fnp = &{name}__fn;")
    body.append("\tstruct gpo_ctx gx;")
    if ret != "void":
        body.append(f"\t{ret} r = 0;")
    body.append("\treal_t real = (real_t)gpo_begin(fnp, &gx, site);")
    body.append("\tif (gx.state == GPO_ST_FILL) {")
    # Fill the normalised arguments.
    ci = 0
    bi = {b[0]: i for i, b in enumerate(op.bufs)}
    lws = 0
    for a, k in args:
        deref = "" if by_value else "*"
        if k == "c":
            body.append(f"\t\tgx.a.opt[{ci}] = gpo_upper(*{a});")
            ci += 1
        elif k == "e":
            body.append(f"\t\tgx.a.opt[{ci}] = gpo_cblas_opt({a});")
            ci += 1
        elif k == "layout":
            body.append(f"\t\tgx.a.layout = {a};")
        elif k == "i":
            body.append(f"\t\tgx.a.{a} = (int64_t){deref}{a};")
        elif k == "ld":
            buf = a[2:]
            if buf in bi:
                body.append(f"\t\tgx.a.ld[{bi[buf]}] = (int64_t){deref}{a};")
        elif k == "inc":
            # A vector operand's increment is its leading dimension
            # (offload_ops.py: 1 row, len columns).
            buf = a[3:]
            if buf in bi:
                body.append(f"\t\tgx.a.ld[{bi[buf]}] = (int64_t){deref}{a};")
        elif k == "lw":
            body.append(f"\t\tif ((int64_t){deref}{a} == -1) gx.a.query = 1;")
            lws += 1
        elif k == "s":
            if by_value and not cplx:
                body.append(f"\t\tgx.a.{a}[0] = (double){a};")
            else:
                src = a if not by_value else f"((const {CT[p]} *){a})"
                body.append(f"\t\tgx.a.{a}[0] = (double){src}[0];")
                if cplx:
                    body.append(f"\t\tgx.a.{a}[1] = (double){src}[1];")
        elif k == "sr":
            body.append(f"\t\tgx.a.{a}[0] = (double){deref}{a};")
        elif k in ("a", "r", "p"):
            if a in bi:
                body.append(f"\t\tgx.a.buf[{bi[a]}] = (void *){a};")
        elif k == "info":
            body.append(f"\t\tgx.a.info = {a};")
    body.append("\t\tgpo_run(fnp, &gx);")
    done = "gx.state != GPO_ST_DONE"
    if op.name == "copy":
        # The CPU copy engine (src/offload/pcopy/) takes the strided
        # calls that qualify; the CPU library is then not called.
        d = "" if by_value else "*"
        esz = {"s": 4, "d": 8, "c": 8, "z": 16}[p]
        body.append(f"\t\tif (real)\n\t\t\tgpo_copy_call(&gx, (int64_t){d}n, x, "
                    f"(int64_t){d}incx, y, (int64_t){d}incy, {esz});")
        done += " && gx.state != GPO_ST_COPIED"
    body.append("\t}")
    call = f"real({names})"
    body.append(f"\tif ({done}) {{")
    body.append("\t\tif (real) {")
    body.append("\t\t\tgpo_cpu_before(&gx);")
    body.append(f"\t\t\t{'r = ' if ret != 'void' else ''}{call};")
    body.append("\t\t\tgpo_cpu_after(&gx);")
    body.append("\t\t}")
    if lws:
        # After a GPU run: the workspace sizes LAPACK reports in work(1)
        # (and rwork(1), iwork(1)) come from the CPU library's own query.
        qnames = []
        for a, k in args:
            if k == "lw":
                qnames.append("&q")
            elif k == "info":
                qnames.append("&qi")
            else:
                qnames.append(a)
        qnames += [f"l_{s}" for s in strs]
        body.append("\t} else if (real) {")
        body.append(f"\t\t{it} q = -1, qi = 0;")
        body.append(f"\t\treal({', '.join(qnames)});")
        body.append("\t\t(void)qi;")
    body.append("\t}")
    body.append("\tgpo_end(fnp, &gx);")
    if ret != "void":
        body.append("\treturn r;")
    body.append("}")
    w.append("\n".join(body) + "\n")
    return name


def gen_flops(op):
    """The light path's flops of op: describe_<op>'s (gen_ops) formula on
    the normalised values, with the same complex factor."""
    return (f"static inline double gpo__flops_{op.name}(double m, double n, "
            "double k, double nrhs, char o0, char o1, char o2, char o3, int cplx)\n{\n"
            "\t(void)m; (void)n; (void)k; (void)nrhs;\n"
            "\t(void)o0; (void)o1; (void)o2; (void)o3;\n"
            f"\treturn ({op.flops}) * (cplx ? 4.0 : 1.0);\n}}\n")


def gen_ops(w):
    w.append("/* Generated by tools/gen_offload.py from its table: do not edit. */\n")
    w.append('#include "frontend.h"\n')
    w.append("#define m ((double)a->m)\n#define n ((double)a->n)\n"
             "#define k ((double)a->k)\n#define nrhs ((double)a->nrhs)\n"
             "#define o0 (a->opt[0])\n#define o1 (a->opt[1])\n"
             "#define o2 (a->opt[2])\n#define o3 (a->opt[3])\n"
             "#define cplx (a->prec == 'c' || a->prec == 'z')\n"
             "#define beta_nz (a->beta[0] != 0 || a->beta[1] != 0)\n")
    for op in OPS:
        w.append(f"static void describe_{op.name}(const struct gpo_args *a, struct gpo_shape *s)\n{{")
        w.append(f"\ts->flops = ({op.flops}) * (cplx ? 4.0 : 1.0);")
        w.append(f"\ts->nbuf = {len(op.bufs)};")
        for i, (nm, kind, rows, cols, i_, o_, cmp) in enumerate(op.bufs):
            w.append(f"\ts->b[{i}].kind = '{kind}';")
            w.append(f"\ts->b[{i}].rows = (int64_t)({rows});")
            w.append(f"\ts->b[{i}].cols = (int64_t)({cols});")
            w.append(f"\ts->b[{i}].in = (uint8_t)({i_});")
            w.append(f"\ts->b[{i}].out = (uint8_t)({o_});")
            w.append(f"\ts->b[{i}].cmp = GPO_CMP_{cmp.upper()};")
            w.append(f"\ts->b[{i}].name = \"{nm}\";")
            has_ld = any(a in ("ld" + nm, "inc" + nm)
                         for a, _ in parse(list(op.fargs.values())[0]))
            w.append(f"\ts->b[{i}].has_ld = {1 if has_ld else 0};")
        w.append(f"\ts->gpu_ok = (uint8_t)({op.gpu_if});")
        w.append("}\n")
    for x in ("m", "n", "k", "nrhs", "o0", "o1", "o2", "o3", "cplx", "beta_nz"):
        w.append(f"#undef {x}")
    w.append("\nconst struct gpo_opdesc gpo_opdesc[GPO_OP_MAX] = {")
    for op in OPS:
        opts = op.opts
        w.append(f"\t[{op.num}] = {{ \"{op.name}\", {op.level}, {1 if op.measure else 0}, "
                 f"{1 if op.bufs else 0}, \"{opts}\", describe_{op.name} }},")
    w.append("};\n")
    w.append("const char *gpo_op_name(unsigned op)\n{\n"
             "\treturn op < GPO_OP_MAX && gpo_opdesc[op].name ? gpo_opdesc[op].name : \"?\";\n}\n")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    # ops.h
    h = ["/* Generated by tools/gen_offload.py from its table: do not edit.",
         " * The operation numbers are stable (the backend ABI and traces",
         " * carry them): new operations take new numbers. */",
         "#ifndef GPUOFFLOAD_OPS_H", "#define GPUOFFLOAD_OPS_H"]
    for op in OPS:
        h.append(f"#define GPO_OP_{op.name.upper()} {op.num}")
    h.append(f"#define GPO_OP_MAX {max(o.num for o in OPS) + 1}")
    h.append("#endif\n")
    w = ["/* Generated by tools/gen_offload.py from its table: do not edit. */",
         '#include "frontend.h"', ""]
    names = []
    for op in OPS:
        if not op.measure:
            w.append(gen_flops(op))
        for p in op.precs:
            for scheme in SCHEMES:
                names.append(gen_wrapper(op, p, scheme, False, w))
                if op.cargs is not None:
                    names.append(gen_wrapper(op, p, scheme, True, w))
    assert len(names) == len(set(names)), "duplicate wrapper names"
    # The library's own exports (src/offload/exports.list: the pause
    # switch), in the same list and map.
    own = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                       "src", "offload", "exports.list")
    with open(own) as f:
        extra = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    assert not set(extra) & set(names), "an own export is a wrapper name"
    nwrap = len(names)
    names = names + extra
    o = []
    gen_ops(o)
    files = {
        "ops.h": "\n".join(h),
        "ops.c": "\n".join(o) + "\n",
        "wrappers.c": "\n".join(w) + "\n",
        "exports.list": "# Generated by tools/gen_offload.py: libgpuoffload.so's exports.\n"
                        + "\n".join(sorted(names)) + "\n",
        "exports.map": "/* Generated by tools/gen_offload.py. */\n{\n\tglobal:\n"
                       + "".join(f"\t\t{n};\n" for n in sorted(names))
                       + "\tlocal:\n\t\t*;\n};\n",
    }
    for fn, text in files.items():
        path = os.path.join(out, fn)
        old = None
        if os.path.exists(path):
            with open(path) as f:
                old = f.read()
        if old != text:  # keep timestamps when nothing changed
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)
    print(f"gen_offload: {nwrap} wrappers of {len(OPS)} operations and "
          f"{len(names) - nwrap} own exports in {out}")


if __name__ == "__main__":
    main()
