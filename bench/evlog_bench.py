"""The event log's cost on the hand-off path (docs/benchmarks.md, "The
event log's cost"): the two quantities issue 14 names, the hand-off
ratio against raw flock and the uncontended acquire, of this tree with
the log on against "today's", the tree without the log.

"Today's" is the same binary with GPUMUTEX_LOG=0: this tree's lease core
with the log's work skipped (no log opened, nothing formatted or
written), so the difference is the log and nothing else. A revision from
before the log differs from this tree by every later change to the lease
core too, which is not the log's cost; GM_BENCH_BASE=<rev> adds that
comparison anyway (its lease core and bench/handoff.c built from `git
archive` in a temporary directory).

Measured on the lock directory's own filesystem (`tmp`, on /tmp like
the default lock directory) and on tmpfs (/dev/shm) where there is one:
the filesystem matters (on ext4 without a journal the claim's inode
allocations cost more the more inodes were deleted in the last minutes,
so runs are interleaved round by round, each in a fresh directory, and
both sides see the same state). The holder of the hand-off leaves
through _exit, as in the issue's figures, and, in a second pair, through
exit(), whose exit record is then on the path. Each run is bench/handoff with 100
hand-offs and 100 uncontended acquires; figures are medians of the
rounds' medians."""

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


def measure(prog, where, n, log, use_exit):
    d = os.path.join(where, "h")
    for x in (d, d + "-u", d + ".flock"):
        shutil.rmtree(x, ignore_errors=True)
    env = dict(os.environ, GPUMUTEX_LOG=log,
               GM_HANDOFF_EXIT="1" if use_exit else "0")
    out = subprocess.run([prog, str(n), d], env=env, capture_output=True,
                         text=True, check=True).stdout
    for x in (d, d + "-u"):
        shutil.rmtree(x, ignore_errors=True)
    v = dict(line.split() for line in out.splitlines())
    return float(v["handoff_ratio_median"]), \
        float(v["acquire_uncontended_median_us"])


def compare(where, sides, rounds, n):
    """Interleaved rounds (the order alternating) of every side; the
    medians of (ratio, acquire) per side."""
    res = {name: [] for name, _, _, _ in sides}
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for name, prog, log, use_exit in order:
            res[name].append(measure(prog, where, n, log, use_exit))
    return {k: (statistics.median(a for a, _ in v),
                statistics.median(b for _, b in v)) for k, v in res.items()}


def run(tmp, row, rounds=8, n=100):
    new = os.path.join(BUILD, "bench", "handoff")
    # The holder leaves through _exit (the measurement), and
    # through exit(), which writes the exit record before the lease goes.
    sides = [("off", new, "0", False), ("on", new, "1", False),
             ("off-exit", new, "0", True), ("on-exit", new, "1", True)]
    ref = os.environ.get("GM_BENCH_BASE")
    if ref:
        try:
            sides.append((ref, build_base(tmp, ref), "1", False))
        except (subprocess.CalledProcessError, OSError) as e:
            print(f"  (GM_BENCH_BASE={ref} left out: cannot build it: {e})")
    places = [(os.path.join(tmp, "evlog"), None)]
    if os.path.isdir("/dev/shm") and fs_type("/dev/shm") == "tmpfs":
        places.append(("/dev/shm", "tmpfs"))
    for where, kind in places:
        if kind is None:
            os.makedirs(where, exist_ok=True)
            kind = fs_type(where)
        else:
            where = os.path.join(where, f"gm-bench-evlog-{os.getpid()}")
            os.makedirs(where, exist_ok=True)
        try:
            med = compare(where, sides, rounds, n)
        finally:
            if kind == "tmpfs" and where.startswith("/dev/shm/"):
                shutil.rmtree(where, ignore_errors=True)
        (r0, a0), (r1, a1) = med["off"], med["on"]
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        row(f"event log on {kind}: hand-off ratio vs raw flock, log off / on",
            f"{r0:.2f} / {r1:.2f}",
            f"({100 * (r1 - r0) / r0:+.1f}%; limit +5%; {rounds} rounds, load {load})")
        row(f"event log on {kind}: uncontended acquire, log off / on",
            f"{a0:.0f} us / {a1:.0f} us",
            f"({100 * (a1 - a0) / a0:+.1f}%; limit +10%)")
        (x0, _), (x1, _) = med["off-exit"], med["on-exit"]
        row(f"event log on {kind}: the same ratio, holder leaving through exit(), log off / on",
            f"{x0:.2f} / {x1:.2f}", f"({100 * (x1 - x0) / x0:+.1f}%)")
        if ref and ref in med:
            rb, ab = med[ref]
            row(f"event log on {kind}: {ref} (log on) / this tree (log on)",
                f"ratio {rb:.2f} / {r1:.2f}, acquire {ab:.0f} / {a1:.0f} us")
