#!/usr/bin/env python3
"""The agents benchmark: what gpumutex is for, measured.

    agents.py [run] [options]     simulated agents sharing one GPU (default)
    agents.py chain [options]     N jobs started together, back to back

`run`: AGENTS agents loop for WINDOW seconds: think (no GPU, a sleep),
then one experiment, a process of its own (experiment.py): CPU
preparation, GPU work (torch bf16 matmuls), CPU post-processing, exit.
Modes, each its own window, one after another:

  one       one agent alone: the reference for TFLOP/s
  none      AGENTS agents, no arbitration
  queue     AGENTS agents, each experiment under `flock LOCKFILE` (a queue
            command around the whole experiment)
  gpumutex  AGENTS agents, each experiment with LD_PRELOAD of a
            libgpumutex.so; once per --lib NAME=PATH (default
            new=build/libgpumutex.so), so today's and another build's
            library are compared in one run on one machine

Per mode: GPU busy (the union of GPU phases / the window), experiments
finished within the window, median and worst TFLOP/s of an experiment
against the `one` mode's median, GPU phases that overlapped, and every
hand-off's gap (one GPU phase's end -> the next one's start) split into
its parts: the holder's last kernel -> its lease released (the next
grant's doorbell, from the event log) -> the next grant -> the next
job's first kernel done. Experiments still running when the window ends
are killed and not counted.

`chain`: JOBS jobs (default 5) started together, each GPU seconds of
matmuls and no CPU phases, under each --lib: the gaps between one job's
last kernel and the next one's first, split the same way.

--fake: the fake driver (build/tests/fakecuda) instead of torch, for the
smoke run in `make check` (tests/test_agents_bench.py): GPU phases come
from the fake driver's journal there, and TFLOP/s are launches per second.

Results: OUT/agents.json (or chain.json) and a Markdown table on stdout
and in OUT/agents.md (chain.md). Runtime: about (number of modes) x
WINDOW (+ ~10 s a mode); `chain`: about JOBS x (GPU + 5 s) a library.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(REPO, "build")
EXPERIMENT = os.path.join(HERE, "experiment.py")
FAKE_DIR = os.path.join(BUILD, "tests", "fakecuda")


def now():
    return time.monotonic_ns()


def parse_kv(line):
    out = {}
    for f in line.split():
        if "=" in f:
            k, v = f.split("=", 1)
            out[k] = v
    return out


def read_lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [ln for ln in f.read().splitlines() if ln.strip()]
    except FileNotFoundError:
        return []


# ---- launching experiments ----------------------------------------------------

class Setup:
    """How one mode starts an experiment: argv prefix and environment."""

    def __init__(self, o, mode, lib, tmp):
        self.mode, self.lib, self.o = mode, lib, o
        self.tmp = tmp
        self.journal = os.path.join(tmp, "exp.journal")
        self.fakej = os.path.join(tmp, "fake.journal")
        self.lockdir = os.path.join(tmp, "locks")
        self.flockfile = os.path.join(tmp, "queue.lock")
        os.makedirs(self.lockdir, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GPUMUTEX_", "FAKECUDA_"))
               and k not in ("LD_PRELOAD",)}
        if o.fake:
            env["LD_LIBRARY_PATH"] = FAKE_DIR + (
                ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH")
                else "")
            env["FAKECUDA_NUM_DEVICES"] = "1"
            env["FAKECUDA_JOURNAL"] = self.fakej
            if o.fake_mem_dir:
                env["FAKECUDA_MEM_DIR"] = o.fake_mem_dir
        if mode == "gpumutex":
            for spec in o.env or []:
                who, _, var = spec.partition(":")
                if who in (o.lib_name.get(lib), "all"):
                    k, _, v = var.partition("=")
                    env[k] = v
            env["LD_PRELOAD"] = lib
            env["GPUMUTEX_LOCK_DIR"] = self.lockdir
            env["GPUMUTEX_VISIBLE_DEVICES"] = o.device
            env["GPUMUTEX_QUIET"] = "1"
        elif not o.fake:
            env["CUDA_VISIBLE_DEVICES"] = o.device
        self.env = env

    def argv(self, tag, prep, gpu, post):
        a = [sys.executable if self.o.fake else self.o.python, EXPERIMENT, "--journal", self.journal,
             "--tag", tag, "--prep", str(prep), "--gpu", str(gpu),
             "--post", str(post), "--size", str(self.o.size)]
        if self.o.fake:
            a += ["--fake", "--mem", str(self.o.fake_mem)]
        if self.mode == "queue":
            a = ["flock", self.flockfile] + a
        return a


def start(setup, tag, prep, gpu, post):
    return subprocess.Popen(setup.argv(tag, prep, gpu, post), env=setup.env,
                            stdout=subprocess.DEVNULL, start_new_session=True)


def kill(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def agent(setup, idx, t0, deadline, o, runs):
    k = 0
    while True:
        t = now()
        if t >= deadline:
            return
        time.sleep(min(o.think, (deadline - t) / 1e9))
        if now() >= deadline:
            return
        tag = f"a{idx}e{k}"
        k += 1
        launched = now()
        p = start(setup, tag, o.prep, o.gpu, o.post)
        try:
            rc = p.wait(timeout=max(0.0, (deadline - now()) / 1e9))
        except subprocess.TimeoutExpired:
            kill(p)
            rc = None
        runs.append(dict(tag=tag, agent=idx, launched=launched,
                         exited=now(), rc=rc, pid=p.pid))


# ---- reading what happened ------------------------------------------------------

def phases(setup, runs, o):
    """The finished experiments with their own timestamps; under --fake the
    GPU phase is the fake driver's journal (first to last tick of the pid)."""
    exps = {}
    for ln in read_lines(setup.journal):
        kv = parse_kv(ln)
        if kv.get("ev") == "exp":
            exps[kv["tag"]] = kv
    ticks = {}
    if o.fake:
        # Ticks up to the job's own end of its GPU work: a synchronisation
        # the library makes at exit (GPUMUTEX_EXIT_EARLY) is no GPU work.
        for ln in read_lines(setup.fakej):
            kv = parse_kv(ln)
            if kv.get("ev") == "tick":
                ticks.setdefault(kv["pid"], []).append(int(kv["t"]))
    out = []
    for r in runs:
        e = exps.get(r["tag"])
        if r["rc"] != 0 or not e or e.get("ok") != "1":
            continue
        x = dict(r, call=int(e["call"]), begin=int(e["begin"]),
                 end=int(e["end"]), done=int(e["done"]),
                 iters=int(e["iters"]), flop=float(e["flop"]),
                 exp_pid=int(e["pid"]))
        mine = [t for t in ticks.get(e["pid"], []) if t <= x["end"]]
        if o.fake and mine:
            x["gbegin"], x["gend"] = min(mine), max(mine)
        else:
            x["gbegin"], x["gend"] = x["begin"], x["end"]
        secs = max(1, x["end"] - x["begin"]) / 1e9
        x["rate"] = (x["flop"] / 1e12 if x["flop"] else x["iters"]) / secs
        out.append(x)
    out.sort(key=lambda x: x["gbegin"])
    return out


def eventlog(lockdir):
    """grant and exit records of the event log, by pid (mono ns)."""
    grants, exits = {}, {}
    for root, _dirs, files in os.walk(os.path.join(lockdir, "job")):
        for f in files:
            if not f.startswith("events.log"):
                continue
            for ln in read_lines(os.path.join(root, f)):
                kv = parse_kv(ln)
                parts = ln.split()
                if len(parts) < 2 or "pid" not in kv:
                    continue
                if parts[1] == "grant":
                    grants[int(kv["pid"])] = kv
                elif parts[1] == "exit" and kv.get("why") != "give-back":
                    exits[int(kv["pid"])] = kv
    return grants, exits


def union(intervals, lo, hi):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted((max(lo, s), min(hi, e)) for s, e in intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def handoffs(ph, grants, exits):
    """Consecutive GPU phases (a, b), b starting after a ended: the gap and,
    where the event log has them, its parts (ms)."""
    out = []
    for a, b in zip(ph, ph[1:]):
        if b["gbegin"] <= a["gend"]:
            continue
        h = dict(gap=(b["gbegin"] - a["gend"]) / 1e6)
        g = grants.get(b["exp_pid"])
        if g:
            grant = int(g["mono"])
            woke = int(g.get("woke", "0") or 0)
            released = woke if a["gend"] < woke <= grant else None
            ex = exits.get(a["exp_pid"])
            if ex:
                h["holder_exit_record"] = (int(ex["mono"]) - a["gend"]) / 1e6
            if released is not None:
                h["holder_to_release"] = (released - a["gend"]) / 1e6
                h["release_to_grant"] = (grant - released) / 1e6
            else:  # granted without waiting: no hand-off in the log
                h["holder_to_grant"] = (grant - a["gend"]) / 1e6
            h["grant_to_first_kernel"] = (b["gbegin"] - grant) / 1e6
        h["holder_exited"] = (a["exited"] - a["gend"]) / 1e6
        out.append(h)
    return out


def overlaps(ph):
    n = 0
    for i, a in enumerate(ph):
        for b in ph[i + 1:]:
            if b["gbegin"] < a["gend"] and a["gbegin"] < b["gend"]:
                n += 1
    return n


def med(xs):
    return statistics.median(xs) if xs else None


# ---- modes ---------------------------------------------------------------------------

def run_mode(o, mode, label, lib, nagents):
    tmp = tempfile.mkdtemp(prefix=f"agents-{label}-", dir=o.tmp)
    setup = Setup(o, mode, lib, tmp)
    runs = []
    t0 = now()
    deadline = t0 + int(o.window * 1e9)
    threads = [threading.Thread(target=agent,
                                args=(setup, i, t0, deadline, o, runs))
               for i in range(nagents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ph = phases(setup, runs, o)
    ph = [x for x in ph if x["exited"] <= deadline]
    grants, exits = eventlog(setup.lockdir)
    res = dict(label=label, mode=mode, lib=lib, agents=nagents,
               window=o.window, t0=t0,
               busy=union([(x["gbegin"], x["gend"]) for x in ph], t0,
                          deadline) / (deadline - t0),
               finished=len(ph), started=len(runs),
               rates=[x["rate"] for x in ph], overlaps=overlaps(ph),
               handoffs=handoffs(ph, grants, exits) if len(ph) > 1 else [],
               experiments=ph)
    with open(os.path.join(o.out, f"agents-{label}.json"), "w") as f:
        json.dump(res, f, indent=1)
    if not o.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"  {label}: busy {res['busy']:.0%}, finished {res['finished']}, "
          f"overlaps {res['overlaps']}", file=sys.stderr, flush=True)
    return res


def fmt_ms(x):
    return "-" if x is None else f"{x:.0f}"


def split_row(hs):
    keys = ("gap", "holder_to_release", "release_to_grant",
            "grant_to_first_kernel", "holder_exited")
    return " / ".join(fmt_ms(med([h[k] for h in hs if k in h])) for k in keys)


def table(results, solo, unit):
    lines = ["| mode | GPU busy | experiments finished | "
             f"{unit} vs one agent alone (median, worst; below 0.9x) | "
             "overlapping GPU phases | hand-off gap, median ms: total / "
             "holder's last kernel -> release / -> grant / -> next first "
             "kernel (holder's process gone) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        rel = [x / solo for x in r["rates"]] if solo else []
        rs = (f"{med(rel):.2f}x, {min(rel):.2f}x; "
              f"{sum(1 for x in rel if x < 0.9)} of {len(rel)}"
              if rel else "-")
        lines.append(f"| {r['label']} ({r['agents']} agent"
                     f"{'s' if r['agents'] > 1 else ''}) | {r['busy']:.0%} | "
                     f"{r['finished']} | {rs} | {r['overlaps']} | "
                     f"{split_row(r['handoffs']) if r['handoffs'] else '-'} |")
    return "\n".join(lines)


def parse_libs(o):
    """--lib NAME=PATH (repeatable; default new=build/libgpumutex.so). A
    NAME may appear twice with one PATH only once: use a copy of the file
    to run one library under two settings (--env NAME:VAR=VALUE)."""
    libs = []
    for spec in o.lib or [f"new={os.path.join(BUILD, 'libgpumutex.so')}"]:
        name, _, path = spec.rpartition("=")
        name = name or os.path.basename(os.path.dirname(os.path.abspath(path)))
        path = os.path.abspath(path)
        if not os.path.isfile(path):
            sys.exit(f"agents.py: --lib {spec}: no such file")
        libs.append((name, path))
    o.lib_name = {p: n for n, p in libs}
    return libs


def cmd_run(o):
    libs = parse_libs(o)
    results = []
    for mode in o.modes.split(","):
        if mode == "one":
            results.append(run_mode(o, "none", "one agent", None, 1))
        elif mode == "none":
            results.append(run_mode(o, "none", "no arbitration", None,
                                    o.agents))
        elif mode == "queue":
            results.append(run_mode(o, "queue", "flock queue", None,
                                    o.agents))
        elif mode == "gpumutex":
            for name, path in libs:
                results.append(run_mode(o, "gpumutex", f"gpumutex {name}",
                                        path, o.agents))
        else:
            sys.exit(f"agents.py: unknown mode {mode!r}")
    one = [r for r in results if r["label"] == "one agent"]
    solo = o.solo or (med(one[0]["rates"]) if one and one[0]["rates"]
                      else None)
    unit = "launches/s" if o.fake else "TFLOP/s"
    head = (f"{o.agents} agents, {o.window:g} s window each mode; think "
            f"{o.think:g} s, experiment = prep {o.prep:g} s + GPU "
            f"{o.gpu:g} s + post {o.post:g} s"
            + ("" if o.fake else f", bf16 matmuls {o.size}x{o.size}")
            + (f"; one agent alone: {solo:.1f} {unit}" if solo else ""))
    md = head + "\n\n" + table(results, solo, unit) + "\n"
    print(md)
    with open(os.path.join(o.out, "agents.md"), "w") as f:
        f.write(md)
    with open(os.path.join(o.out, "agents.json"), "w") as f:
        json.dump(dict(solo=solo, results=results), f, indent=1)
    return 0


def cmd_chain(o):
    libs = parse_libs(o)
    results = []
    for rep in range(o.reps):
        for name, path in libs:
            tmp = tempfile.mkdtemp(prefix=f"chain-{name}-", dir=o.tmp)
            setup = Setup(o, "gpumutex", path, tmp)
            procs = []
            for i in range(o.jobs):
                tag = f"j{i}"
                launched = now()
                procs.append((tag, launched, start(setup, tag, 0, o.gpu, 0)))
            runs = []
            for tag, launched, p in procs:
                rc = p.wait()
                runs.append(dict(tag=tag, agent=0, launched=launched,
                                 exited=now(), rc=rc, pid=p.pid))
            ph = phases(setup, runs, o)
            grants, exits = eventlog(setup.lockdir)
            hs = handoffs(ph, grants, exits)
            results.append(dict(lib=name, path=path, rep=rep,
                                finished=len(ph), overlaps=overlaps(ph),
                                handoffs=hs))
            print(f"  chain {name} rep {rep}: gaps "
                  + " ".join(fmt_ms(h["gap"]) for h in hs) + " ms",
                  file=sys.stderr, flush=True)
            if not o.keep:
                shutil.rmtree(tmp, ignore_errors=True)
    lines = [f"{o.jobs} jobs started together, each {o.gpu:g} s of "
             + ("fake launches" if o.fake else f"bf16 matmuls {o.size}x{o.size}")
             + f", {o.reps} run(s) per library", "",
             "| library | jobs finished | overlaps | gap median (min-max) ms | "
             "holder's last kernel -> release | -> grant | -> next first "
             "kernel | holder's process gone after its last kernel |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, _ in libs:
        rs = [r for r in results if r["lib"] == name]
        hs = [h for r in rs for h in r["handoffs"]]
        gaps = [h["gap"] for h in hs]

        def m(k, hs=hs):
            return fmt_ms(med([h[k] for h in hs if k in h]))
        rng = f" ({min(gaps):.0f}-{max(gaps):.0f})" if gaps else ""
        lines.append(f"| {name} | {sum(r['finished'] for r in rs)} | "
                     f"{sum(r['overlaps'] for r in rs)} | "
                     f"{fmt_ms(med(gaps))}{rng} | {m('holder_to_release')} | "
                     f"{m('release_to_grant')} | "
                     f"{m('grant_to_first_kernel')} | {m('holder_exited')} |")
    md = "\n".join(lines) + "\n"
    print(md)
    with open(os.path.join(o.out, "chain.md"), "w") as f:
        f.write(md)
    with open(os.path.join(o.out, "chain.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0


def main(argv):
    cmd = "run"
    if argv and argv[0] in ("run", "chain"):
        cmd, argv = argv[0], argv[1:]
    ap = argparse.ArgumentParser(
        prog=f"agents.py {cmd}",
        description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--window", type=float, default=80.0,
                    help="seconds per mode (default 80)")
    ap.add_argument("--think", type=float, default=6.0)
    ap.add_argument("--prep", type=float, default=3.0)
    ap.add_argument("--gpu", type=float, default=5.0 if cmd == "run" else 2.0)
    ap.add_argument("--post", type=float, default=1.0)
    ap.add_argument("--size", type=int, default=8192,
                    help="matrix size (bf16 N x N)")
    ap.add_argument("--modes", default="one,none,queue,gpumutex")
    ap.add_argument("--lib", action="append",
                    help="NAME=PATH of a libgpumutex.so for the gpumutex "
                         "mode and `chain`; repeat to compare builds")
    ap.add_argument("--env", action="append",
                    help="NAME:VAR=VALUE: set VAR for the experiments of "
                         "--lib NAME (NAME all: every library), e.g. "
                         "new:GPUMUTEX_EXIT_EARLY=1")
    ap.add_argument("--jobs", type=int, default=5, help="chain: jobs")
    ap.add_argument("--reps", type=int, default=1, help="chain: runs")
    ap.add_argument("--solo", type=float, default=0.0,
                    help="reference rate when mode `one` is not run")
    ap.add_argument("--device", default="0", help="the GPU index to use")
    ap.add_argument("--python", default=os.environ.get("GPU_PYTHON", "python3"),
                    help="the Python with torch for the experiments "
                         "(default $GPU_PYTHON or python3)")
    ap.add_argument("--out", default=os.environ.get("OUT") or
                    os.path.join(BUILD, "bench-agents"))
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--keep", action="store_true",
                    help="keep the journals and lock directories")
    ap.add_argument("--fake", action="store_true",
                    help="the fake driver instead of torch (smoke run)")
    ap.add_argument("--fake-mem", type=int, default=0,
                    help="--fake: device memory each experiment allocates")
    ap.add_argument("--fake-mem-dir", default="",
                    help="--fake: FAKECUDA_MEM_DIR (shared memory accounting)")
    o = ap.parse_args(argv)
    os.makedirs(o.out, exist_ok=True)
    if o.tmp:
        os.makedirs(o.tmp, exist_ok=True)
    return cmd_chain(o) if cmd == "chain" else cmd_run(o)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
