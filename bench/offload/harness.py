"""Helpers of the gpu-offload benchmark (bench/offload/run.py): the time
budget, running a process and reading its output as it comes, the
library's summary line and `gpu-offload report`, pytest's counts, and the
markdown report. Standard library only: the harness runs under any
python3; the workload (work.py) under the one with numpy."""
import os
import re
import shlex
import statistics
import subprocess
import threading
import time


class Budget:
    """A total time budget shared out to sections in order: a section gets
    its share of the total plus what earlier sections left unused, never
    past the overall deadline."""

    def __init__(self, total):
        self.total = total
        self.t0 = time.monotonic()
        self.deadline = self.t0 + total
        self.planned = 0.0
        self.section_end = self.deadline

    def section(self, share):
        self.planned += share * self.total
        self.section_end = min(self.deadline, self.t0 + self.planned)
        return self.left()

    def left(self):
        """Seconds left in the current section."""
        return max(0.0, self.section_end - time.monotonic())

    def overall(self):
        return max(0.0, self.deadline - time.monotonic())


class Reader(threading.Thread):
    """Reads a pipe to EOF in the background, keeping the text and when
    each piece arrived, so that the harness can wait for a token (a line
    or lease-holder's one-byte notes) and know when it came."""

    def __init__(self, f):
        super().__init__(daemon=True)
        self.fd = f.fileno()
        self.text = ""
        self.chunks = []            # (monotonic time, end offset in text)
        self.cv = threading.Condition()
        self.eof = False
        self.start()

    def run(self):
        while True:
            try:
                b = os.read(self.fd, 65536)
            except OSError:
                b = b""
            with self.cv:
                if not b:
                    self.eof = True
                    self.cv.notify_all()
                    return
                self.text += b.decode(errors="replace")
                self.chunks.append((time.monotonic(), len(self.text)))
                self.cv.notify_all()

    def wait_for(self, token, timeout):
        """The time `token` arrived, or None after `timeout` or at EOF."""
        end = time.monotonic() + timeout
        with self.cv:
            while True:
                i = self.text.find(token)
                if i >= 0:
                    for t, off in self.chunks:
                        if off >= i + len(token):
                            return t
                if self.eof or time.monotonic() >= end:
                    return None
                self.cv.wait(max(0.01, end - time.monotonic()))

    def finish(self, timeout=5):
        self.join(timeout)
        return self.text


class Proc:
    """A started process with both outputs read in the background."""

    def __init__(self, argv, env, stdin=True, cwd=None):
        self.argv = argv
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(argv, env=env, cwd=cwd,
                                  stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        self.out = Reader(self.p.stdout)
        self.err = Reader(self.p.stderr)

    def close_stdin(self):
        if self.p.stdin:
            try:
                self.p.stdin.close()
            except OSError:
                pass

    def wait(self, timeout):
        """(rc, stdout, stderr, wall); rc None when it was killed at the
        timeout (the whole process group)."""
        self.close_stdin()
        try:
            rc = self.p.wait(timeout=max(0.1, timeout))
        except subprocess.TimeoutExpired:
            kill(self.p)
            rc = None
        wall = time.monotonic() - self.t0
        return rc, self.out.finish(), self.err.finish(), wall


def kill(p):
    try:
        os.killpg(p.pid, 9)
    except OSError:
        pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def run(argv, env, timeout, cwd=None):
    """Run to the end: (rc or None on timeout, stdout, stderr, wall)."""
    return Proc(argv, env, stdin=False, cwd=cwd).wait(timeout)


SUMMARY = re.compile(
    r"gpu-offload: summary: (\d+) calls seen, (\d+) decided, (\d+) offloaded "
    r"\(GPU ([\d.]+) s, start-up ([\d.]+) s\), predicted time saved (-?[\d.]+) s; "
    r"reasons:(.*)")


def summaries(stderr):
    """The library's exit summaries in a stderr text, summed (a process
    tree prints one per process)."""
    tot = {"processes": 0, "seen": 0, "decided": 0, "offloaded": 0,
           "gpu_s": 0.0, "startup_s": 0.0, "saved_s": 0.0, "reasons": {}}
    for m in SUMMARY.finditer(stderr):
        tot["processes"] += 1
        for k, g in (("seen", 1), ("decided", 2), ("offloaded", 3)):
            tot[k] += int(m.group(g))
        for k, g in (("gpu_s", 4), ("startup_s", 5), ("saved_s", 6)):
            tot[k] += float(m.group(g))
        for kv in m.group(7).split():
            k, _, v = kv.partition("=")
            tot["reasons"][k] = tot["reasons"].get(k, 0) + int(v or 0)
    return tot


def other_lines(stderr):
    """stderr less the summaries: what else the library (or anyone) said."""
    return [ln for ln in stderr.splitlines()
            if ln.strip() and not ln.startswith("gpu-offload: summary:")]


REPORT_HEAD = re.compile(
    r": (\d+) processes, (\d+) calls; GPU started (\d+) times \(([\d.]+) s "
    r"start-up\), given back (\d+) times, kept for the process (\d+) times, "
    r"(\d+) leases refused")


def trace_report(cli, tdir, env):
    """`gpu-offload report DIR` read back: totals and GPU calls."""
    rc, out, err, _ = run([cli, "report", tdir], env, 60)
    r = {"rc": rc, "processes": 0, "calls": 0, "starts": 0, "gpu_calls": 0,
         "cpu_calls": 0, "given_back": 0, "refused": 0}
    m = REPORT_HEAD.search(out)
    if m:
        r.update(processes=int(m.group(1)), calls=int(m.group(2)),
                 starts=int(m.group(3)), given_back=int(m.group(5)),
                 refused=int(m.group(7)))
    for ln in out.splitlines()[2:]:
        f = ln.split()
        if len(f) >= 9 and f[1].isdigit():
            r["cpu_calls"] += int(f[3])
            r["gpu_calls"] += int(f[5])
    if rc != 0:
        r["error"] = err.strip()[-300:]
    return r


PYTEST_FINAL = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+) in [\d.]+s")
PYTEST_PROGRESS = re.compile(r"^[.FsEXx]+(\s+\[\s*\d+%\])?$")
PYTEST_WORDS = {"errors": "error", "warnings": "warning"}


def pytest_counts(out, timed_out):
    """passed/failed/skipped/... from pytest -q output; from the progress
    characters when the run was cut short (no final line)."""
    c = {}
    final = None
    for ln in out.splitlines():
        m = PYTEST_FINAL.match(ln.strip())
        if m:
            final = m.group(1)
    if final and not timed_out:
        for part in final.split(","):
            n, word = part.split()
            c[PYTEST_WORDS.get(word, word)] = int(n)
    else:
        names = {".": "passed", "F": "failed", "s": "skipped", "E": "error",
                 "x": "xfailed", "X": "xpassed"}
        for ln in out.splitlines():
            if PYTEST_PROGRESS.match(ln.strip()):
                for ch in ln.split()[0]:
                    c[names[ch]] = c.get(names[ch], 0) + 1
        c["partial"] = True
    c["failures"] = sorted({ln.split()[1] for ln in out.splitlines()
                            if ln.startswith(("FAILED ", "ERROR "))
                            and len(ln.split()) > 1})
    return c


def med(xs):
    return statistics.median(xs) if xs else None


def cmdline(argv, env=None, keys=()):
    """A shell line for the report: the given variables, then the argv."""
    pre = ["%s=%s" % (k, shlex.quote(env[k])) for k in keys if env and k in env]
    return " ".join(pre + [shlex.quote(a) for a in argv])


def fmt_s(x):
    if x is None:
        return "-"
    if x >= 1:
        return "%.2f s" % x
    if x >= 1e-3:
        return "%.1f ms" % (x * 1e3)
    return "%.0f us" % (x * 1e6)


def fmt_x(x):
    return "-" if x is None else ("%.2fx" % x if x < 100 else "%.0fx" % x)


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)
