"""Journal lines for the GPU scenario jobs (tests/gpu/*.py).

Same format as tests/lib/journal.py reads: one event a line, `key=value`
fields, each line appended with one write(2) to $GM_JOURNAL opened with
O_APPEND, `t` in CLOCK_MONOTONIC nanoseconds (time.monotonic_ns()), so
lines of all processes of a run can be compared.

  begin  dev cvd order pycvd [pre init]  first CUDA work done and synchronised
  tick   dev                             still using the GPU (synchronised)
  end    dev                             last CUDA work synchronised
  result ok=0|1 [key=value ...]          the job's own check of its results
  info   ...                             anything else worth keeping

Every line also has `tag` ($GM_TAG, the job's name in tests/gpu/run.sh) and
`role` (main, child-torch, worker0, ...). `cvd` and `order` are read from
the C environment (what the driver saw), `pycvd` from os.environ (what
Python code sees; libgpumutex.so updates it after the gate).
"""

import ctypes
import os
import time

_libc = ctypes.CDLL(None)
_libc.getenv.restype = ctypes.c_char_p
_libc.getenv.argtypes = [ctypes.c_char_p]
_fd = None
ROLE = os.environ.get("GM_ROLE", "main")


def now():
    return time.monotonic_ns()


def cenv(name):
    """The C environment's value (os.environ is a start-up snapshot)."""
    v = _libc.getenv(name.encode())
    return None if v is None else v.decode(errors="replace")


def _clean(v):
    s = str(v)
    for c in " \t\n\r=":
        s = s.replace(c, "_")
    return s or "-"


def write(ev, t=None, **kw):
    global _fd
    if _fd is None:
        _fd = os.open(os.environ["GM_JOURNAL"],
                      os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                      0o666)
    fields = {"ev": ev, "pid": os.getpid(),
              "job": cenv("GPUMUTEX_JOB") or "-",
              "tag": os.environ.get("GM_TAG", "-"), "role": ROLE}
    fields.update(kw)
    fields["t"] = now() if t is None else t
    line = " ".join(f"{k}={_clean(v)}" for k, v in fields.items()) + "\n"
    os.write(_fd, line.encode())


def _dev():
    cvd = cenv("CUDA_VISIBLE_DEVICES")
    first = (cvd or "").split(",")[0]
    return int(first) if first.isdigit() else 0


def begin(t=None, **kw):
    write("begin", t=t, dev=_dev(), cvd=cenv("CUDA_VISIBLE_DEVICES"),
          order=cenv("CUDA_DEVICE_ORDER"),
          pycvd=os.environ.get("CUDA_VISIBLE_DEVICES"), **kw)


def tick(t=None, **kw):
    write("tick", t=t, dev=_dev(), **kw)


def end(t=None, **kw):
    write("end", t=t, dev=_dev(), **kw)


def result(ok, **kw):
    write("result", ok=int(bool(ok)), **kw)
    return 0 if ok else 1


def info(**kw):
    write("info", **kw)
