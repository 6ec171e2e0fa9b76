"""The event log's cost on the hand-off path (docs/benchmarks.md, "The
event log's cost"): the two quantities issue 14 names, the hand-off
ratio against raw flock and the uncontended acquire, of this tree with
the log on against "today's", the tree without the log.

"Today's" is the same binary with GPUMUTEX_LOG=0: this tree's lease core
with the log's work skipped (no log opened, nothing formatted or
written), so the difference is the log and nothing else. bench/handoff
runs both in one process (GM_HANDOFF_AB=1), alternating log off and on
hand-off by hand-off, so the machine's noise (this one is shared) hits
both sides alike. A revision from before the log differs from this tree
by every later change to the lease core too, which is not the log's
cost; GM_BENCH_BASE=<rev> adds that revision, log off and on the same
way (its lease core from `git archive`, built in a temporary directory
with this tree's bench/handoff.c), e.g. the tree before a change to the
log. Standalone: python3 bench/evlog_bench.py [ROUNDS [N]].

Measured on the lock directory's own filesystem (`tmp`, on /tmp like
the default lock directory) and on tmpfs (/dev/shm) where there is one:
the filesystem matters (on ext4 without a journal the claim's inode
allocations cost more the more inodes were deleted in the last minute,
so each run is in a fresh directory and the runs of several sides
alternate). The holder of the hand-off leaves through _exit, as in the
issue's figures, and, in a second run, through exit(), whose exit
record is then on the path. Each run is 100 hand-offs and 100
uncontended acquires per side; the ratio is the median over the rounds
of gpumutex's hand-off medians over that of flock's, the acquire the
median of the rounds' medians; "paired" is the median of the
differences log on minus off of adjacent hand-offs (and acquires),
as a share of the log-off figure, the estimate least moved by the
machine's drift."""

import os
import shutil
import statistics
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")


def fs_type(path):
    """The type of the filesystem `path` is on (from /proc/self/mountinfo)."""
    path = os.path.realpath(path)
    best, kind = "", "?"
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                mnt = left.split()[4].replace("\\040", " ")
                inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best):
                    best, kind = mnt, right.split()[0]
    except OSError:
        pass
    return kind


def build_base(tmp, ref):
    """bench/handoff built on revision `ref`'s lease core: with this tree's
    bench/handoff.c (the same instrument on both sides) when it compiles
    there, else with the revision's own."""
    src = os.path.join(tmp, "base-src")
    os.makedirs(src, exist_ok=True)
    arch = subprocess.run(["git", "-C", REPO, "archive", ref, "src/lease",
                           "bench/handoff.c"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", src], input=arch.stdout, check=True)
    out = os.path.join(tmp, "handoff-base")
    lease = sorted(os.path.join(src, "src", "lease", f)
                   for f in os.listdir(os.path.join(src, "src", "lease"))
                   if f.endswith(".c"))
    cc = ["cc", "-std=c11", "-O2", "-g", "-pthread",
          "-I" + os.path.join(src, "src", "lease"), "-o", out]
    for harness in (os.path.join(REPO, "bench", "handoff.c"),
                    os.path.join(src, "bench", "handoff.c")):
        if subprocess.run(cc + [harness] + lease,
                          capture_output=True).returncode == 0:
            return out
    raise OSError(f"cannot build bench/handoff on {ref}'s lease core")


def measure(prog, where, n, use_exit):
    """One bench/handoff run in GM_HANDOFF_AB mode (log off and on,
    interleaved hand-off by hand-off) in a fresh directory: per side
    (gpumutex's hand-off median, flock's, the uncontended acquire)."""
    d = os.path.join(where, "h")
    for x in (d, d + "-u", d + ".flock"):
        shutil.rmtree(x, ignore_errors=True)
    env = dict(os.environ, GM_HANDOFF_AB="1",
               GM_HANDOFF_EXIT="1" if use_exit else "0")
    out = subprocess.run([prog, str(n), d], env=env, capture_output=True,
                         text=True, check=True).stdout
    for x in (d, d + "-u"):
        shutil.rmtree(x, ignore_errors=True)
    v = dict(line.split() for line in out.splitlines())
    res = {log: (float(v[f"handoff_gpumutex_log{log}_exit_median_us"]),
                 float(v["handoff_flock_exit_median_us"]),
                 float(v[f"acquire_uncontended_log{log}_median_us"]))
           for log in (0, 1)}
    res["delta"] = (float(v["handoff_log_paired_delta_median_us"]), 0.0,
                    float(v["acquire_log_paired_delta_median_us"]))
    return res


def compare(where, sides, rounds, n):
    """Interleaved rounds (the order alternating) of every side; per side
    and log setting the hand-off ratio (the median over the rounds of
    gpumutex's hand-off over the median of flock's: a single round's
    flock median is as noisy as the difference measured) and the median
    uncontended acquire."""
    res = {(name, log): [] for name, _, _ in sides for log in (0, 1, "delta")}
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for name, prog, use_exit in order:
            for log, v in measure(prog, where, n, use_exit).items():
                res[(name, log)].append(v)
    med = statistics.median
    out = {}
    for (name, log), v in res.items():
        if log == "delta":
            # The paired differences as a share of the log-off side.
            off = res[(name, 0)]
            out[(name, log)] = (med(d for d, _, _ in v) / med(g for g, _, _ in off),
                                med(a for _, _, a in v) / med(a for _, _, a in off))
        else:
            out[(name, log)] = (med(g for g, _, _ in v) / med(f for _, f, _ in v),
                                med(a for _, _, a in v))
    return out


def pct(a, b):
    return f"{100 * (b - a) / a:+.1f}%"


def run(tmp, row, rounds=8, n=100):
    new = os.path.join(BUILD, "bench", "handoff")
    # The holder leaves through _exit (the measurement), and
    # through exit(), which writes the exit record before the lease goes.
    sides = [("this tree", new, False), ("this tree, exit()", new, True)]
    ref = os.environ.get("GM_BENCH_BASE")
    if ref:
        try:
            base = build_base(tmp, ref)
            sides += [(ref, base, False), (f"{ref}, exit()", base, True)]
        except (subprocess.CalledProcessError, OSError) as e:
            print(f"  (GM_BENCH_BASE={ref} left out: {e})")
    places = [(os.path.join(tmp, "evlog"), None)]
    if os.path.isdir("/dev/shm") and fs_type("/dev/shm") == "tmpfs":
        places.append((os.path.join("/dev/shm", f"gm-bench-evlog-{os.getpid()}"),
                       "tmpfs"))
    for where, kind in places:
        os.makedirs(where, exist_ok=True)
        kind = kind or fs_type(where)
        try:
            med = compare(where, sides, rounds, n)
        finally:
            if kind == "tmpfs":
                shutil.rmtree(where, ignore_errors=True)
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        for name, _, use_exit in sides:
            (r0, a0), (r1, a1) = med[(name, 0)], med[(name, 1)]
            dr, da = med[(name, "delta")]
            paired = f"paired {100 * dr:+.1f}%"
            if not use_exit:
                row(f"event log on {kind}, {name}: hand-off ratio vs raw flock, log off / on",
                    f"{r0:.2f} / {r1:.2f}",
                    f"({pct(r0, r1)}, {paired}; limit +5%; {rounds} rounds of {n}, load {load})")
                row(f"event log on {kind}, {name}: uncontended acquire, log off / on",
                    f"{a0:.0f} us / {a1:.0f} us",
                    f"({pct(a0, a1)}, paired {100 * da:+.1f}%; limit +10%)")
            else:
                row(f"event log on {kind}, {name}: hand-off ratio, holder leaving through exit(), log off / on",
                    f"{r0:.2f} / {r1:.2f}", f"({pct(r0, r1)}, {paired})")


if __name__ == "__main__":
    import sys
    import tempfile
    t = tempfile.mkdtemp(prefix="gm-bench-evlog-")
    try:
        run(t, lambda name, value, note="": print(f"  {name}: {value} {note}",
                                                    flush=True),
            rounds=int(sys.argv[1]) if len(sys.argv) > 1 else 8,
            n=int(sys.argv[2]) if len(sys.argv) > 2 else 100)
    finally:
        shutil.rmtree(t, ignore_errors=True)
