"""Helpers of the gpu-offload benchmark (bench/offload/run.py): the time
budget, running a process and reading its output as it comes, the
library's summary line and `gpu-offload report`, and the
markdown report. Standard library only: the harness runs under any
python3; the workload (work.py) under the one with numpy."""
import os
import re
import shlex
import statistics
import struct
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

    def section(self, seconds):
        """Start a section planned to take `seconds` (verdict.plan_sections)
        after the earlier ones' plans: it ends when their plans and its
        own have passed, so time they left unused is its too."""
        self.planned += seconds
        self.section_end = min(self.deadline, self.t0 + self.planned)
        return self.left()

    def cap(self, timeout, floor=1.0):
        """A process's time limit: `timeout`, never past the overall
        deadline (less a second to write the report), at least `floor`."""
        return max(floor, min(timeout, self.overall() - 1.0))

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

    def line_from(self, offset, timeout):
        """The next whole line at or after `offset`, and the offset after
        it; (None, offset) after `timeout` or at EOF."""
        end = time.monotonic() + timeout
        with self.cv:
            while True:
                i = self.text.find("\n", offset)
                if i >= 0:
                    return self.text[offset:i], i + 1
                if self.eof or time.monotonic() >= end:
                    return None, offset
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

    def send(self, line):
        """A line to the process's stdin; False when it is gone."""
        try:
            self.p.stdin.write((line + "\n").encode())
            self.p.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def next_json(self, timeout):
        """The next stdout line that is a JSON object, or None (timeout,
        EOF, or a line that is not JSON)."""
        import json
        while True:
            ln, self._off = self.out.line_from(getattr(self, "_off", 0), timeout)
            if ln is None:
                return None
            if ln.startswith("{"):
                try:
                    return json.loads(ln)
                except ValueError:
                    return None

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
    """stderr less the summaries (and their residency line): what else
    the library (or anyone) said."""
    return [ln for ln in stderr.splitlines()
            if ln.strip() and not ln.startswith(("gpu-offload: summary:",
                                                 "gpu-offload: residency:"))]


REPORT_HEAD = re.compile(
    r": (\d+) processes, (\d+) calls; GPU started (\d+) times \(([\d.]+) s "
    r"start-up\), given back (\d+) times, kept for the process (\d+) times, "
    r"(\d+) leases refused")


def trace_report(cli, tdir, env, timeout=60):
    """`gpu-offload report DIR` read back: totals and GPU calls."""
    rc, out, err, _ = run([cli, "report", tdir], env, timeout)
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


# The trace's layout (src/offload/trace.h, the one definition): a 64-byte
# header, then 320-byte records; the fields read here and their offsets.
TRACE_HEAD, TRACE_REC = 64, 320
_REC = struct.Struct("<qqBBBc")          # t_ns, dur_ns, kind, device, decided, prec
_REASON = struct.Struct("<H")            # at 26
_COPY = struct.Struct("<dd")             # copy_in_s, copy_out_s at 128


def read_traces(tdir):
    """The call records of every trace file in tdir (little-endian, this
    version's layout; another is skipped): dicts with t_ns, dur_s,
    device (0 CPU, 1 GPU), reason (policy.h's number), op, copy_s."""
    recs = []
    for name in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
        if not (name.startswith("gpo-") and name.endswith(".trace")):
            continue
        with open(os.path.join(tdir, name), "rb") as f:
            data = f.read()
        if (data[:8] != b"GPOTRACE" or struct.unpack_from("<III", data, 8) !=
                (1, TRACE_REC, 0x01020304)):
            continue
        for off in range(TRACE_HEAD, len(data) - TRACE_REC + 1, TRACE_REC):
            t, dur, kind, dev, _, prec = _REC.unpack_from(data, off)
            if kind != 0:
                continue
            ci, co = _COPY.unpack_from(data, off + 128)
            recs.append({"t_ns": t, "dur_s": dur / 1e9, "device": dev,
                         "reason": _REASON.unpack_from(data, off + 26)[0],
                         "op": prec.decode(errors="replace") +
                         data[off + 40:off + 56].split(b"\0")[0].decode(errors="replace"),
                         "copy_s": ci + co})
    return recs


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
