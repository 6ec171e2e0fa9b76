"""gpu-offload's benchmark (run.py): gpumutex interplay on the real GPU
(issue 16 item 7) and NumPy's and SciPy's own test suites under the
offloader (item 6)."""
import os
import subprocess
import time

import harness as H
import verdict as V

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHJOB = os.path.join(HERE, "torchjob.py")


# ---- gpumutex interplay ------------------------------------------------------

class Jobs:
    """The other job: a PyTorch one under libgpumutex.so on a GPU machine,
    lease-holder (tests/lease/lease-holder.c) in quick mode. Both speak the
    same tokens: `ready`/`granted` ('r' for lease-holder) once they hold."""

    def __init__(self, c, env):
        self.c, self.env = c, env
        self.torch = not c.quick
        self.lh = os.path.join(c.build, "tests", "lease-holder")

    def holder(self):
        if self.torch:
            p = H.Proc([self.c.py, TORCHJOB, "hold"],
                       dict(self.env, LD_PRELOAD=os.path.join(self.c.build, "libgpumutex.so")))
            return p, "ready"
        return H.Proc([self.lh, "--ready-fd", "1", "--wait-fd", "0"], self.env), "r"

    def waiter(self):
        """The job, where its waiting line comes, and its grant token."""
        if self.torch:
            p = H.Proc([self.c.py, TORCHJOB, "once"],
                       dict(self.env, LD_PRELOAD=os.path.join(self.c.build, "libgpumutex.so")))
            return p, (p.err, " waits for "), "granted"
        # Both notes on stdout: fd 3 a copy of it (lease-holder closes
        # each note's descriptor after writing).
        p = H.Proc(["sh", "-c", 'exec "$0" --waiting-fd 3 --ready-fd 1 3>&1', self.lh], self.env)
        return p, (p.out, "w"), "r"


def _start_of(p, torch):
    """When the job began asking for the GPU: its `start` line (torch,
    after its import) or its start (lease-holder asks at once)."""
    return p.out.wait_for("start", 120) if torch else p.t0


def sec_mutex(c):
    locks = os.path.join(c.tmp, "locks")
    subprocess.run([os.path.join(c.build, "gpumutex"), "init", "--lock-dir", locks,
                    "--visible-devices", "0"], capture_output=True)
    gm = {"GPUMUTEX_VISIBLE_DEVICES": "0", "GPUMUTEX_LOCK_DIR": locks,
          "GM_JOURNAL": os.path.join(c.tmp, "gm.journal")}
    env = c.env("cpu", gm)
    j = Jobs(c, env)
    n = c.n(4096, 128)
    res, rows = {}, []

    # 1. A holder: the offloader stays on the CPU and finishes.
    h, tok = j.holder()
    t_ready = h.out.wait_for(tok, 180)
    r1 = c.work("forced", "dgemm:%d" % n, ["--warmup", "0", "--reps", "3"], 120, extra=gm)
    hrc = h.wait(60)
    ok1 = (t_ready is not None and r1["rc"] == 0 and r1["summary"]["offloaded"] == 0
           and r1["summary"]["reasons"].get("no-lease", 0) > 0)
    rows.append(("GPU held by the other job", "exit %s, %d offloaded, reasons %s" % (
        r1["rc"], r1["summary"]["offloaded"], r1["summary"]["reasons"]), "PASS" if ok1 else "**FAIL**"))
    res["held"] = {"ok": ok1, "run": r1, "holder_rc": hrc[0], "holder_said": H.other_lines(hrc[2])[:3]}

    # 2. The GPU free: it offloads.
    r2 = c.work("forced", "dgemm:%d" % n, ["--warmup", "0", "--reps", "3"], 120, extra=gm)
    ok2 = r2["rc"] == 0 and r2["summary"]["offloaded"] > 0
    rows.append(("GPU free", "exit %s, %d offloaded" % (r2["rc"], r2["summary"]["offloaded"]),
                 "PASS" if ok2 else "**FAIL**"))
    res["free"] = {"ok": ok2, "run": r2}

    # The waiter's own start on a free GPU: what its wait is compared with.
    w, _, wtok = j.waiter()
    t_s, t_g = _start_of(w, j.torch), w.out.wait_for(wtok, 120)
    w.wait(30)
    alone = t_g - t_s if t_s and t_g else None
    rows.append(("the waiter alone (GPU free)", "start to grant %s" % H.fmt_s(alone), ""))
    res["alone_s"] = alone

    # 3. A waiter against a busy offloader (calling all the time) and an
    # idle one (holding the lease, no call since its last). Its queue time:
    # from its waiting line to its grant (the line comes as it starts
    # waiting; the grant token after its first work, so this includes the
    # rest of its CUDA start after the grant: an upper bound).
    watch = int(os.environ.get("GPU_OFFLOAD_WATCH_MS", "250"))
    yld = int(os.environ.get("GPU_OFFLOAD_YIELD_MS", "1000"))
    bound = (2 * watch + yld) / 1000.0
    for kind, args, token in (("busy", ["--until-eof"], "gpu"),
                              ("idle", ["--warmup", "1", "--reps", "1", "--hold"], "done")):
        argv = c.prefix("forced") + [c.py, os.path.join(HERE, "work.py"),
                                     "--ops", "dgemm:%d" % n] + args
        o = H.Proc(argv, c.env("forced", gm))
        got = o.out.wait_for(token, 120)
        w, (src, wline), wtok = j.waiter()
        t_start = _start_of(w, j.torch)
        t_grant = w.out.wait_for(wtok, 60)
        t_wait = src.wait_for(wline, 1)
        wr = w.wait(30)
        orc = o.wait(60)
        summ = H.summaries(orc[2])
        total = t_grant - t_start if t_grant and t_start else None
        queued = t_grant - t_wait if t_grant and t_wait else None
        ok = (got is not None and t_grant is not None and orc[0] == 0 and
              (queued is None or queued <= bound + 0.5))
        rows.append(("waiter vs %s offloader" % kind,
                     "%s; start to grant %s (alone: %s); bound %.2f s "
                     "(2 x WATCH %d ms + YIELD %d ms) + a call in flight and the stop; offloader: %d offloaded, exit %s" %
                     ("waiting line to grant %s" % H.fmt_s(queued) if queued is not None else
                      "no waiting line (the GPU was given back before it asked)",
                      H.fmt_s(total), H.fmt_s(alone), bound, watch, yld,
                      summ["offloaded"], orc[0]), "PASS" if ok else "**FAIL**"))
        res[kind] = {"ok": ok, "queued_s": queued, "wait_s": total, "bound_s": bound,
                     "offloader": {"rc": orc[0], "summary": summ, "said": H.other_lines(orc[2])[:5]},
                     "waiter_rc": wr[0], "waiter_said": H.other_lines(wr[2])[:5],
                     "offloader_on_gpu": got is not None}
    c.res["mutex"] = res
    c.note("## gpumutex interplay\n\nThe other job: %s, `GPUMUTEX_VISIBLE_DEVICES=0`, a private lock "
           "directory (`gpumutex init`). The offloader: `%s` (forced, so that it wants the GPU "
           "whenever it may have it). Pass for the waiter: from its waiting line to its grant within "
           "the documented bound + 0.5 s.\n\n" % (
               "`LD_PRELOAD=build/libgpumutex.so python3 bench/offload/torchjob.py hold|once`" if j.torch
               else "build/tests/lease-holder (quick mode: no torch)", r2["cmd"]) +
           H.table(["case", "what happened", ""], rows))


# ---- the test suites ----------------------------------------------------------

def _importable(c, mod):
    return subprocess.run([c.py, "-c", "import " + mod], capture_output=True).returncode == 0


# The whole section's runs end by this many seconds before its end: the
# traces' reports and the report itself.
SUITE_MARGIN = 15


def sec_suites(c):
    mods = [m for m in c.suite_mods if _importable(c, m.split(".")[0])]
    absent = [m for m in c.suite_mods if m not in mods]
    xdist = _importable(c, "xdist")
    modes = ["plain", "forced", "default"]
    runs = [(m, mode) for m in mods for mode in modes]
    cores = len(os.sched_getaffinity(0))
    plan = V.plan_workers(runs, cores, getattr(c, "suite_workers", None)) if xdist else {}
    limit = max(20.0, c.budget.left() - (0 if c.quick else SUITE_MARGIN))
    logs = os.path.join(c.tmp, "suite-logs")
    os.makedirs(logs, exist_ok=True)
    procs = []
    for m, mode in runs:
        tdir = os.path.join(c.tmp, "trace-%s-%s" % (m, mode))
        extra = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        if mode == "forced":
            extra["GPU_OFFLOAD_MIN_FLOPS"] = "0"
        argv = ([] if mode == "plain" else c.prefix("forced" if mode == "forced" else "default", tdir)) + \
            [c.py, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-rfE", "--pyargs", m]
        if plan.get((m, mode), 1) > 1:
            argv += ["-n", str(plan[(m, mode)])]
        if c.quick:
            argv += ["-k", "TestSolve and not TestSolveTriangular"]
        env = c.env("forced" if mode == "forced" else "cpu", extra)
        log = os.path.join(logs, "%s-%s.log" % (m, mode))
        f = open(log, "wb")
        # Output to a file, not a pipe: all of it stays readable when the
        # run is killed at the limit, however much there is.
        p = subprocess.Popen(argv, env=env, cwd=c.tmp, stdin=subprocess.DEVNULL,
                             stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        f.close()
        procs.append((m, mode, tdir, argv, env, log, p, time.monotonic()))
    deadline = time.monotonic() + limit
    ends = {}
    while len(ends) < len(procs) and time.monotonic() < deadline:
        for i, pr in enumerate(procs):
            if i not in ends and pr[6].poll() is not None:
                ends[i] = time.monotonic()
        time.sleep(0.2)
    out, rows = [], []
    for i, (m, mode, tdir, argv, env, log, p, t0) in enumerate(procs):
        rc = p.poll() if i in ends else None
        if rc is None:
            H.kill(p)
        wall = ends.get(i, time.monotonic()) - t0
        with open(log, errors="replace") as f:
            text = f.read()
        cnt = V.pytest_outcomes(text, rc is None)
        tr = H.trace_report(c.cli, tdir, c.env("cpu"), c.budget.cap(60, 5)) if mode != "plain" else {}
        state = ("**cut at %.0f s**" % limit) if rc is None else rc
        done = "%d%s" % (cnt["done"], " of %d" % cnt["items"] if "items" in cnt else "")
        rows.append((m, mode, plan.get((m, mode), 1), state, done, cnt.get("passed", 0),
                     cnt.get("failed", 0), cnt.get("error", 0), cnt.get("skipped", 0),
                     cnt.get("xfailed", 0), tr.get("gpu_calls", "-"), "%.0f s" % wall,
                     ", ".join(cnt["failures"][:8]) + (" ..." if len(cnt["failures"]) > 8 else "")))
        out.append({"module": m, "mode": mode, "workers": plan.get((m, mode), 1), "rc": rc,
                    "cut": rc is None, "counts": cnt, "wall": wall, "trace": tr,
                    "cmd": H.cmdline(argv, env, ["OPENBLAS_NUM_THREADS", "GPU_OFFLOAD_FORCE",
                                                 "GPU_OFFLOAD_MIN_FLOPS"]),
                    "tail": [ln for ln in text.strip().splitlines()[-4:]],
                    # What the library said (its lines other than the
                    # summaries), first ones.
                    "said": [ln for ln in H.other_lines(text) if ln.startswith("gpu-offload:")][:10]})
    c.res["suites"] = out
    c.res["suites_absent"] = absent
    c.res["suites_limit_s"] = limit
    _keep_logs(c, logs)
    c.note("## NumPy's and SciPy's own tests\n\nAll %d runs at once, started together, with one BLAS "
           "thread each and pytest-xdist workers (%s) shared out so that together they use the %d cores "
           "(forced runs get the most: they wait on the GPU); plain = no offloader; forced = "
           "`GPU_OFFLOAD_FORCE=gpu GPU_OFFLOAD_MIN_FLOPS=0` (every GPU-capable call to the GPU); "
           "default = the default level with the profile. One time limit for the whole section: "
           "%.0f s from the start; a run still going then is killed and reported **cut**, with the "
           "counts of the tests it finished (`pytest -v`'s line per test). Tests: done (of collected); "
           "GPU calls: `gpu-offload report` over the run's traces.%s\n\n" % (
               len(runs), "installed" if xdist else "absent: one process each", cores, limit,
               " Quick mode: only `-k TestSolve`." if c.quick else "") +
           ("Not installed, so not run: %s.\n\n" % ", ".join(absent) if absent else "") +
           "\n".join("- %s %s: `%s`" % (o["module"], o["mode"], o["cmd"]) for o in out) + "\n\n" +
           H.table(["suite", "mode", "-n", "exit", "tests", "passed", "failed", "errors", "skipped",
                    "xfailed", "GPU calls", "time", "failures"], rows) +
           "".join("\n\n%s %s: the library said: %s" % (o["module"], o["mode"], "; ".join(
               "`%s`" % ln for ln in o["said"][:3])) for o in out if o["said"]))


def _keep_logs(c, logs):
    """The runs' logs as one file in the output directory (a device run
    brings back few files)."""
    import tarfile
    try:
        with tarfile.open(os.path.join(c.out, "suite-logs.tar.gz"), "w:gz") as t:
            t.add(logs, arcname="suite-logs")
    except OSError as e:
        c.res["suite_logs_error"] = str(e)
