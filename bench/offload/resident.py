"""The benchmark's resident section (run.py `resident`): workloads that
call BLAS again and again on the same operands (docs/offload-residency.md),
side by side: the CPU, `gpu-offload run` at the default level with
residency off (GPU_OFFLOAD_RESIDENT=0) and on. Each workload is timed
inside its process after a warm-up (reswork.py); the three contenders'
check values must agree (relative 1e-6), else the row fails whatever the
speed. Targets (issue 31, item 5): matvec >= 10x the CPU and >= 5x
residency off; cg >= 5x the CPU; ridge and pca >= 2x residency off.
Matrix-vector products (matvec, cg: numpy's `A @ x`, cblas_dgemv) reach
the GPU once A is resident and the profile has gemv curves
(docs/offload-residency.md, "The model, and level 2"); without those
curves their rows show it (ratios near 1, `model-cpu` in the reasons)."""
import json
import os

import harness as H

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "reswork.py")

# (workload, args full, args quick, target vs CPU, target vs residency off)
WORK = [("matvec", (8192, 100), (256, 10), 10.0, 5.0),
        ("cg", (8192, 200), (256, 10), 5.0, None),
        ("ridge", (16384, 4096), (512, 64), None, 2.0),
        ("pca", (16384, 4096), (512, 64), None, 2.0)]
MODES = (("cpu", "CPU", None), ("default", "offload, residency off",
                                 {"GPU_OFFLOAD_RESIDENT": "0"}),
         ("default", "offload, residency on", {"GPU_OFFLOAD_RESIDENT": "1"}))


def one(c, mode, extra, args):
    env = c.env(mode, extra)
    argv = c.prefix(mode) + [c.py, WORKER] + [str(a) for a in args]
    rc, out, err, wall = H.run(argv, env, c.budget.cap(300))
    js = {}
    for ln in reversed(out.splitlines()):
        if ln.startswith("{"):
            js = json.loads(ln)
            break
    return {"rc": rc, "js": js, "summary": H.summaries(err), "wall": wall,
            "resident": [ln for ln in err.splitlines() if "residency:" in ln][-1:],
            "err": H.other_lines(err)[:5],
            "cmd": H.cmdline(argv, env, sorted(extra or {}))}


def _agree(a, b):
    return a is not None and b is not None and abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def sec_resident(c):
    rows, res = [], []
    for name, full, quick, t_cpu, t_off in WORK:
        args = [name] + [str(v) for v in (quick if c.quick else full)]
        if c.budget.left() < 10:
            rows.append((name, "-", "-", "-", "-", "-", "skipped: the section's budget was spent"))
            continue
        got = []
        for mode, label, extra in MODES:
            got.append(one(c, mode, extra, args))
        skip = next((g["js"]["skip"] for g in got if g["js"].get("skip")), None)
        if skip:
            rows.append((name, "-", "-", "-", "-", "-", "skipped: " + skip))
            res.append({"workload": name, "skip": skip})
            continue
        s = [g["js"].get("s") if g["rc"] == 0 else None for g in got]
        chk = [g["js"].get("check") for g in got]
        same = _agree(chk[0], chk[1]) and _agree(chk[0], chk[2])
        x_cpu = s[0] / s[2] if s[0] and s[2] else None
        x_off = s[1] / s[2] if s[1] and s[2] else None
        verdict = []
        if not same:
            verdict.append("**RESULTS DIFFER** %s" % chk)
        if not c.quick:
            if t_cpu:
                verdict.append("vs CPU %s (target %.0fx)" % (
                    "ok" if x_cpu and x_cpu >= t_cpu else "**below**", t_cpu))
            if t_off:
                verdict.append("vs residency off %s (target %.0fx)" % (
                    "ok" if x_off and x_off >= t_off else "**below**", t_off))
        reasons = ", ".join("%s=%d" % kv for kv in sorted(
            ((got[2]["summary"] or {}).get("reasons") or {}).items()))
        rows.append((" ".join(args), H.fmt_s(s[0]), H.fmt_s(s[1]), H.fmt_s(s[2]),
                     "%.2fx" % x_cpu if x_cpu else "-", "%.2fx" % x_off if x_off else "-",
                     "; ".join(verdict + [r for r in got[2]["resident"]] +
                               (["reasons: " + reasons] if reasons else []))))
        res.append({"workload": name, "args": args, "s": s, "check": chk, "same": same,
                    "x_cpu": x_cpu, "x_off": x_off, "targets": [t_cpu, t_off],
                    "cmds": [g["cmd"] for g in got], "summaries": [g["summary"] for g in got],
                    "residency": got[2]["resident"], "err": [g["err"] for g in got]})
    c.res["resident"] = res
    c.note("## Residency: operands kept on the GPU\n\nEach workload once per contender, "
           "timed inside the process after a warm-up (bench/offload/reswork.py): the CPU, "
           "`gpu-offload run` at the default level with `GPU_OFFLOAD_RESIDENT=0`, and "
           "with residency on; the three results must agree. Ratios: CPU / on and "
           "off / on.\n\n" +
           H.table(["workload", "CPU", "offload, residency off", "offload, residency on",
                    "vs CPU", "vs off", "verdict"], rows))
