"""The event log's cost on the hand-off path (docs/benchmarks.md): the
hand-off ratio against raw flock and the uncontended acquire of this
tree, against the same of another revision (GM_BENCH_BASE, default
main), built from `git archive` in a temporary directory and measured
interleaved, round by round, in one run."""

import os
import statistics
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")


def build_base(tmp, ref):
    src = os.path.join(tmp, "base-src")
    os.makedirs(src, exist_ok=True)
    arch = subprocess.run(["git", "-C", REPO, "archive", ref, "src/lease",
                           "bench/handoff.c"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", src], input=arch.stdout, check=True)
    out = os.path.join(tmp, "handoff-base")
    lease = sorted(os.path.join(src, "src", "lease", f)
                   for f in os.listdir(os.path.join(src, "src", "lease"))
                   if f.endswith(".c"))
    subprocess.run(["cc", "-std=c11", "-O2", "-g", "-pthread",
                    "-I" + os.path.join(src, "src", "lease"), "-o", out,
                    os.path.join(src, "bench", "handoff.c")] + lease,
                   check=True)
    return out


def measure(prog, tmp, n):
    out = subprocess.run([prog, str(n), os.path.join(tmp, "h")],
                         capture_output=True, text=True, check=True).stdout
    v = dict(line.split() for line in out.splitlines())
    return float(v["handoff_ratio_median"]), \
        float(v["acquire_uncontended_median_us"])


def run(tmp, row, rounds=6, n=100):
    ref = os.environ.get("GM_BENCH_BASE", "main")
    try:
        base = build_base(tmp, ref)
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"  (event log benchmark skipped: cannot build {ref}: {e})")
        return
    new = os.path.join(BUILD, "bench", "handoff")
    res = {"base": [], "new": []}
    for _ in range(rounds):
        for name, prog in (("base", base), ("new", new)):
            res[name].append(measure(prog, tmp, n))
    med = {k: (statistics.median(r for r, _ in v),
               statistics.median(a for _, a in v)) for k, v in res.items()}
    (rb, ab), (rn, an) = med["base"], med["new"]
    row(f"hand-off ratio vs raw flock, {ref} / this tree (event log on)",
        f"{rb:.2f} / {rn:.2f}", f"({100 * (rn - rb) / rb:+.1f}%; limit +5%)")
    row(f"uncontended acquire, {ref} / this tree (event log on)",
        f"{ab:.0f} us / {an:.0f} us", f"({100 * (an - ab) / ab:+.1f}%; limit +10%)")
