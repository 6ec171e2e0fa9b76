#!/usr/bin/env python3
"""gpumutex demo: six CUDA jobs of different sizes contend for two GPUs.

Without a GPU (the usual case on a build machine) the jobs are small
driver-API programs (demo/fakejob.c) running on the project's fake NVIDIA
driver (tests/fakecuda), which journals which physical GPU each process
used and when. Each job is started with `gpumutex-run` and knows nothing
about gpumutex. The demo prints what happens as it happens, then a
timeline of who held which GPU when, checked from the driver's journal.

On a machine where nvidia-smi works and PyTorch imports, the jobs are
short PyTorch matmul loops on the real GPUs 0 and 1 (or 0 alone).

Run it with `make demo`."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
import journal as J  # noqa: E402

RUN = os.path.join(BUILD, "gpumutex-run")
JOBS = [  # (name, GPUs wanted, work in ms)
    ("train-a", 1, 600), ("sweep-b", 2, 400), ("eval-c", 1, 300),
    ("train-d", 1, 500), ("bench-e", 2, 300), ("probe-f", 1, 200),
]

TORCH_JOB = r"""
import os, sys, time, torch
ms = int(sys.argv[1]); x = torch.randn(2048, 2048, device="cuda")
end = time.monotonic() + ms / 1000
while time.monotonic() < end:
    y = x @ x
torch.cuda.synchronize()
"""


def real_gpus():
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                             text=True, timeout=20)
        import importlib.util
        if out.returncode != 0 or not importlib.util.find_spec("torch"):
            return 0
        return len([ln for ln in out.stdout.splitlines() if ln.startswith("GPU ")])
    except Exception:
        return 0


def show_report(lockdir):
    """The report of this run (`gpumutex report`), and its picture."""
    out = os.path.join(BUILD, "demo")
    os.makedirs(out, exist_ok=True)
    svg, html = os.path.join(out, "report.svg"), os.path.join(out, "report.html")
    print("\nThe report of this run (gpumutex report --since 1h):\n", flush=True)
    r = subprocess.run([os.path.join(BUILD, "gpumutex"), "report", "--lock-dir",
                        lockdir, "--since", "1h", "--svg", svg, "--html", html])
    print(f"\nPicture of this run: {svg} (and the page {html})", flush=True)
    return r.returncode


def read_grants(lockdir):
    """The grant records of the event log (docs/report.md)."""
    out = []
    for root, _dirs, files in os.walk(os.path.join(lockdir, "job")):
        if "events.log" not in files:
            continue
        with open(os.path.join(root, "events.log"), errors="replace") as f:
            for ln in f:
                if not ln.endswith("\n") or not ln.startswith("gm1 grant "):
                    continue
                out.append(dict(kv.split("=", 1) for kv in ln.split()[2:]
                                if "=" in kv and not kv.startswith("cmd=")))
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="gpumutex-demo-")
    journal = os.path.join(tmp, "journal")
    lockdir = os.path.join(tmp, "locks")
    ngpu = real_gpus()
    gpus = "0,1" if ngpu != 1 else "0"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMUTEX_")}
    if ngpu:
        print(f"gpumutex demo on real GPUs ({gpus}) with PyTorch jobs\n")
        cmd = lambda ms: [sys.executable, "-c", TORCH_JOB, str(ms)]  # noqa
    else:
        fake = os.path.join(BUILD, "tests", "fakecuda")
        env.update(LD_LIBRARY_PATH=fake, FAKECUDA_NUM_DEVICES="2",
                   FAKECUDA_JOURNAL=journal)
        print("gpumutex demo: 6 jobs, 2 GPUs, fake NVIDIA driver "
              "(no GPU here)\n")
        cmd = lambda ms: [os.path.join(BUILD, "demo", "fakejob"), str(ms)]  # noqa
    t0 = time.monotonic_ns()
    procs = {}
    for name, want, ms in JOBS:
        want = min(want, len(gpus.split(",")))
        argv = [RUN, "--visible-devices", gpus, "--num-devices", str(want),
                "--lock-dir", lockdir, "--", *cmd(ms)]
        p = subprocess.Popen(argv, env=env)
        procs[p.pid] = (name, p)
        print(f"   start  {name:8} (pid {p.pid}) needs {want} GPU"
              f"{'s' if want > 1 else ''}: gpumutex-run --num-devices {want}"
              f" -- {os.path.basename(cmd(ms)[0])} ...", flush=True)
    if ngpu:
        codes = [p.wait() for _, p in procs.values()]
        print("\nAll jobs finished:", "ok" if not any(codes) else codes)
        show_report(lockdir)
        shutil.rmtree(tmp, ignore_errors=True)
        return 1 if any(codes) else 0
    # Two sources, merged in time order: the fake driver's journal (what
    # each process did with the driver) and gpumutex's event log (when
    # each job was granted its GPUs: at its first GPU call, not at
    # cuInit, unless it asked for some GPUs of a pool, whose choice the
    # driver must know in cuInit).
    shown, grants = set(), {}
    while True:
        done = all(p.poll() is not None for _, p in procs.values())
        lines = []
        events = (J.parse(journal, complete_only=True)
                  if os.path.exists(journal) else [])
        for i, e in enumerate(events):
            if e["ev"] in ("init", "begin", "end"):
                lines.append((e.t, ("j", i), int(e["pid"]), e["ev"], e))
        for g in read_grants(lockdir):
            grants[int(g["pid"])] = g
            lines.append((int(g["mono"]), ("g", g["pid"]), int(g["pid"]),
                          "grant", g))
        for t, key, pid, ev, e in sorted(lines, key=lambda x: x[0]):
            if key in shown or (not done and t > time.monotonic_ns() - 50e6):
                continue
            shown.add(key)
            name = procs.get(pid, ("?",))[0]
            ms = (t - t0) / 1e6
            if ev == "init":
                print(f"{ms:7.0f} ms  {name:8} cuInit returned "
                      f"(CUDA_VISIBLE_DEVICES={e['cvd']})", flush=True)
            elif ev == "grant":
                waited = int(e["waited"]) / 1e6
                print(f"{ms:7.0f} ms  {name:8} gpumutex granted GPU "
                      f"{e['dev']} (waited {waited:.0f} ms)", flush=True)
            elif ev == "begin":
                print(f"{ms:7.0f} ms  {name:8} first GPU work on GPU "
                      f"{e['dev']}", flush=True)
            else:
                print(f"{ms:7.0f} ms  {name:8} done with GPU {e['dev']}",
                      flush=True)
        if done:
            break
        time.sleep(0.02)  # display refresh only
    codes = {procs[pid][0]: p.returncode for pid, (_, p) in procs.items()}
    ev = J.parse(journal)
    J.check_exclusive(ev)
    letter = {n: "ABCDEF"[i] for i, (n, _, _) in enumerate(JOBS)}
    print("\nTimeline of the fake driver's journal (one column = 50 ms, "
          "'.' = idle):")
    end = max(e.t for e in ev)
    hold = J.holdings(ev)
    for dev in (0, 1):
        row = []
        for k in range(int((end - t0) / 50e6) + 1):
            t = t0 + k * 50e6 + 25e6
            who = "."
            for (d, owner), pts in hold.items():
                if d == dev and pts[0][0] <= t <= pts[-1][0]:
                    who = letter[procs[int(pts[0][1]["pid"])][0]]
            row.append(who)
        print(f"  GPU {dev} |{''.join(row)}|")
    print("  " + ", ".join(f"{letter[n]}={n}" for n, _, _ in JOBS))
    print("\nNo two jobs ever used one GPU at the same time (checked from the "
          "driver's journal),\nand 2-GPU jobs got both GPUs at once.")
    gs = [(g, procs.get(pid, ("?",))[0]) for pid, g in grants.items()]
    arrival = [n for _, n in sorted(gs, key=lambda x: int(x[0]["arrived"]))]
    served = [n for _, n in sorted(gs, key=lambda x: int(x[0]["mono"]))]
    print("Asked for GPUs (first GPU call, or cuInit in a pool): "
          + ", ".join(arrival))
    print("Served (granted):                                     "
          + ", ".join(served))
    if served != arrival:
        print("A job asking for GPUs that were free went ahead of one "
              "waiting for GPUs still held\n(a 2-GPU job waits for both; "
              "docs/design.md, \"Fairness policy\").")
    rc = show_report(lockdir)
    shutil.rmtree(tmp, ignore_errors=True)
    bad = {n: c for n, c in codes.items() if c}
    if bad:
        print("jobs failed:", bad)
    return 1 if bad or rc else 0


if __name__ == "__main__":
    sys.exit(main())
