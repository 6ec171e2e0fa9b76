"""The child's environment: argument checks and ``environ()``.

Every value is checked here the way the C core (src/lease/config.c) and
``gpumutex-run`` (src/cli/run.c) check it, so that a mistake is an exception
in the caller before anything runs, not a failing ``cuInit`` in the child.
The variables already in the base environment that gpumutex-run would
check are checked too, under their own names.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import (Any, Callable, Dict, List, Optional, Tuple, TypeVar,
                    Union)

from . import _job
from ._paths import library_path

MAX_DEVICES = 64                # GPU indices 0..63 (GM_MAX_DEVICES)
DEFAULT_LOCK_DIR = "/tmp/libgpumutex"
_LOCK_DIR_MAX = 4096 - 64       # strlen(lock dir) must stay below this
_TIMEOUT_MAX = 1000000000       # seconds; the core refuses more (GM_TIMEOUT_MAX)
_TIMEOUT_DIGITS = 18            # digits after the dot the core takes
_RECHECK_MAX = 86400000         # GPUMUTEX_RECHECK_MS upper bound

VISIBLE = "GPUMUTEX_VISIBLE_DEVICES"
NUM = "GPUMUTEX_NUM_DEVICES"
LOCK_DIR = "GPUMUTEX_LOCK_DIR"
TIMEOUT = "GPUMUTEX_TIMEOUT"
QUIET = "GPUMUTEX_QUIET"
JOB = "GPUMUTEX_JOB"
LIBRARY = "GPUMUTEX_LIBRARY"
RECHECK = "GPUMUTEX_RECHECK_MS"
IDLE_SUSPEND = "GPUMUTEX_IDLE_SUSPEND_MS"
GPU_TIME = "GPUMUTEX_GPU_TIME"
GIVE_BACK = "GPUMUTEX_GIVE_BACK_MS"
PLACEHOLDER = "GPUMUTEX_CUDA_PLACEHOLDER"  # the library's (src/preload/gatepriv.h)

T = TypeVar("T")
Devices = Union[str, Iterable[int]]
PathArg = Union[str, "os.PathLike[str]"]

# ASCII digits only (re's [0-9], not str.isdigit, which takes other
# scripts' digits): what gm_parse_uint (src/lease/num.c) takes, with no
# blank, sign or "0x".
_DEVICE_ENTRY = re.compile(r"[0-9]{1,4}")           # gm_parse_devices
_UINT = re.compile(r"[0-9]+")                       # gm_parse_uint, base 10
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")        # gm_job_check
_DECIMAL = re.compile(r"[0-9]+\.?[0-9]*|\.[0-9]+")   # gm_parse_timeout


def _is_int(value: object) -> bool:
    """An integer that is not a bool (True/False are ints to Python)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _type_name(value: object) -> str:
    return type(value).__name__


# ---- Parsers of variable text (same acceptance as the C core) ----------

def parse_devices(name: str, text: str) -> List[int]:
    """``"0,2,3"`` -> ``[0, 2, 3]``, or ValueError naming `name`.

    Non-empty; comma-separated decimal indices from 0 to 63, no blanks, no
    signs, no empty entries, no index twice."""
    if text == "":
        raise ValueError(
            f'{name}="" is empty; expected a comma-separated list of GPU '
            f'indices such as "0,1,2,3"')
    out: List[int] = []
    for entry in text.split(","):
        if entry.startswith(("GPU-", "MIG-")) and len(entry) > 4:
            entry = str(_uuid_index(name, text, entry))
        if not _DEVICE_ENTRY.fullmatch(entry):
            raise ValueError(
                f"{name}={text!r} is not a list of GPU indices; expected "
                f"comma-separated numbers from 0 to {MAX_DEVICES - 1} such "
                f'as "0,1,2,3"')
        index = int(entry)
        if index >= MAX_DEVICES:
            raise ValueError(
                f"{name}={text!r} names GPU {index}; indices must be from 0 "
                f"to {MAX_DEVICES - 1}")
        if index in out:
            raise ValueError(
                f"{name}={text!r} names GPU {index} twice; each index may "
                f"appear once")
        out.append(index)
    return out


def _uuid_index(name: str, text: str, uuid: str) -> int:
    """A GPU named by UUID (or a prefix naming one GPU) -> its NVML index,
    as the C core maps it (src/lease/uuid.c), or ValueError."""
    if uuid.startswith("MIG-"):
        raise ValueError(
            f"{name}={text!r} names a MIG instance ({uuid[:60]}); gpumutex "
            f"leases whole GPUs, so name the GPU (its index or GPU- UUID) "
            f"instead")
    import ctypes
    why = None
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        why = ("NVML (libnvidia-ml.so.1, part of the NVIDIA driver) cannot "
               f"be loaded: {e}")
    found: List[int] = []
    exact = None
    if why is None:
        if nvml.nvmlInit_v2() != 0:
            why = "NVML failed to initialise"
        else:
            count = ctypes.c_uint(0)
            if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
                count.value = 0
            for i in range(min(count.value, MAX_DEVICES)):
                handle = ctypes.c_void_p()
                buf = ctypes.create_string_buffer(96)
                if (nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle))
                        or nvml.nvmlDeviceGetUUID(handle, buf, 96)):
                    continue
                u = buf.value.decode("ascii", "replace")
                if u == uuid:
                    exact = i
                elif u.startswith(uuid):
                    found.append(i)
            nvml.nvmlShutdown()
            if exact is not None:
                return exact
            if not found:
                why = ("no GPU NVML sees has that UUID (`nvidia-smi -L` lists "
                       "them)")
            elif len(found) > 1:
                why = "more than one GPU's UUID starts so; give more of it"
            else:
                return found[0]
    raise ValueError(
        f"{name}={text!r} names a GPU by UUID ({uuid[:60]}), which gpumutex "
        f"maps to an index through NVML: {why}; or use GPU indices")


def parse_num_devices(name: str, text: str, ndevices: int) -> int:
    """A whole decimal number from 1 to `ndevices` (gm_parse_want)."""
    if not _UINT.fullmatch(text):
        raise ValueError(
            f"{name}={text!r} is not a number; expected how many GPUs one "
            f"job needs, a decimal number from 1 to {ndevices}")
    value = int(text)
    if not 1 <= value <= ndevices:
        raise ValueError(
            f"{name}={text!r} is out of range; a job can take from 1 to "
            f"{ndevices} GPUs (the number of managed GPUs)")
    return value


def _timeout_error(name: str, value: object, why: str,
                   hint: str = "") -> ValueError:
    """A refused timeout; the message states the accepted range, as those
    of gm_parse_timeout do."""
    return ValueError(f"{name}={value!r} {why}; expected seconds from 0 to "
                      f"{_TIMEOUT_MAX}{hint}")


def parse_timeout(name: str, text: str) -> float:
    """Seconds from 0 to 1000000000 as gm_parse_timeout takes them: digits
    with an optional fraction ("30", "0.5", ".5", "5."), at most 18 digits
    after the dot; no sign, blank, exponent or "inf"."""
    if (not _DECIMAL.fullmatch(text)
            or len(text.partition(".")[2]) > _TIMEOUT_DIGITS):
        raise _timeout_error(
            name, text, "is not a duration",
            ' as a plain decimal number such as "30" or "0.5" (no sign, '
            'exponent or "inf", at most 18 digits after the dot)')
    # Decimal, not float: 1000000000.000000000000000001 is above the
    # maximum for the core, and would round down to it as a float.
    if Decimal(text) > _TIMEOUT_MAX:
        raise _timeout_error(name, text, "is out of range")
    return float(text)


def check_lock_dir(name: str, text: str) -> str:
    """An absolute path that fits the core's buffer."""
    if (not text.startswith("/") or "\0" in text
            or len(os.fsencode(text)) >= _LOCK_DIR_MAX):
        raise ValueError(
            f"{name}={text!r} is not usable; expected an absolute directory "
            f"path of at most {_LOCK_DIR_MAX - 1} bytes such as "
            f'"{DEFAULT_LOCK_DIR}"')
    return text


def check_quiet(name: str, text: str) -> bool:
    """Exactly "1" (quiet) or "0", as gm_parse_quiet."""
    if text in ("0", "1"):
        return text == "1"
    raise ValueError(
        f"{name}={text!r} is not valid; expected 1 (no waiting line) or 0 "
        f"(print it)")


def check_gpu_time(name: str, text: str) -> bool:
    """Exactly "1" (measure GPU time) or "0", as the library reads it."""
    if text in ("0", "1"):
        return text == "1"
    raise ValueError(
        f"{name}={text!r} is not valid; expected 1 (measure each process's "
        f"GPU time) or 0")


def gpu_time_text(value: object) -> str:
    """The GPUMUTEX_GPU_TIME text for the ``gpu_time`` argument."""
    if not isinstance(value, bool):
        raise TypeError(
            f"gpu_time must be True or False, not {_type_name(value)} "
            f"({value!r})")
    return "1" if value else "0"


def check_recheck_ms(name: str, text: str) -> int:
    """Milliseconds from 0 (never) to 86400000, as the core reads them."""
    if _UINT.fullmatch(text):
        value = int(text)
        if value <= _RECHECK_MAX:
            return value
    raise ValueError(
        f"{name}={text!r} is not valid; expected milliseconds as a decimal "
        f"number from 0 (never) to {_RECHECK_MAX}")


# ---- Keyword arguments -> variable text --------------------------------

def devices_text(visible_devices: Devices) -> str:
    """The GPUMUTEX_VISIBLE_DEVICES text for the `visible_devices` argument:
    a string, checked as it is, or an iterable of ints."""
    name = "visible_devices"
    if isinstance(visible_devices, str):
        parse_devices(name, visible_devices)
        return visible_devices
    if (isinstance(visible_devices, (bytes, bytearray, bool))
            or not isinstance(visible_devices, Iterable)):
        raise TypeError(
            f"{name} must be a string such as \"0,2,3\" or an iterable of "
            f"ints, not {_type_name(visible_devices)} ({visible_devices!r})")
    items = list(visible_devices)
    if not items:
        raise ValueError(
            f"{name}={visible_devices!r} is empty; expected at least one GPU "
            f"index, e.g. [0] or \"0,1\"")
    seen: List[int] = []
    for item in items:
        if not _is_int(item):
            raise TypeError(
                f"{name}={visible_devices!r}: every index must be an int, "
                f"not {_type_name(item)} ({item!r})")
        index = int(item)
        if not 0 <= index < MAX_DEVICES:
            raise ValueError(
                f"{name}={visible_devices!r} names GPU {index}; indices must "
                f"be from 0 to {MAX_DEVICES - 1}")
        if index in seen:
            raise ValueError(
                f"{name}={visible_devices!r} names GPU {index} twice; each "
                f"index may appear once")
        seen.append(index)
    return ",".join(str(i) for i in seen)


def num_devices_value(num_devices: object) -> int:
    """The `num_devices` argument as an int (its range is checked later,
    against the device list)."""
    if not _is_int(num_devices):
        raise TypeError(
            f"num_devices must be an int, not {_type_name(num_devices)} "
            f"({num_devices!r})")
    return int(num_devices)  # type: ignore[call-overload]


def timeout_text(timeout: object) -> str:
    """The GPUMUTEX_TIMEOUT text for the `timeout` argument (seconds)."""
    name = "timeout"
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(
            f"{name} must be a number of seconds (int or float), not "
            f"{_type_name(timeout)} ({timeout!r})")
    if _is_int(timeout):
        value = int(timeout)  # type: ignore[call-overload]
        text = str(value)
    else:
        value = float(timeout)  # type: ignore[arg-type]
        if not math.isfinite(value):
            raise _timeout_error(name, timeout, "is not a finite number",
                                 " (None waits forever)")
        if value == 0:
            value = 0.0  # no "-0.0"
        # Positional notation (the core takes digits and one dot only),
        # with no more fraction digits than it takes: 1e-20 s is 0.
        exact = Decimal(repr(value))
        if exact.as_tuple().exponent < -_TIMEOUT_DIGITS:  # type: ignore
            exact = exact.quantize(Decimal(1).scaleb(-_TIMEOUT_DIGITS))
        text = format(exact, "f")
    if value < 0:
        raise _timeout_error(name, timeout, "is negative",
                             " (0: don't wait; None waits forever)")
    if value > _TIMEOUT_MAX:
        raise _timeout_error(name, timeout, "is out of range",
                             " (None waits forever)")
    return text


def lock_dir_text(lock_dir: object) -> str:
    """The GPUMUTEX_LOCK_DIR text for the `lock_dir` argument."""
    name = "lock_dir"
    if not isinstance(lock_dir, (str, os.PathLike)):
        raise TypeError(
            f"{name} must be a str or os.PathLike path, not "
            f"{_type_name(lock_dir)} ({lock_dir!r})")
    text = os.fspath(lock_dir)
    if not isinstance(text, str):
        raise TypeError(
            f"{name} must be a str path, not {_type_name(text)} ({text!r})")
    if not text.startswith("/"):
        raise ValueError(
            f"{name}={text!r} is not an absolute path; expected e.g. "
            f'"{DEFAULT_LOCK_DIR}"')
    return check_lock_dir(name, text)


def quiet_text(quiet: object) -> str:
    """The GPUMUTEX_QUIET text for the `quiet` argument."""
    if not isinstance(quiet, bool):
        raise TypeError(
            f"quiet must be True or False, not {_type_name(quiet)} "
            f"({quiet!r})")
    return "1" if quiet else "0"


# ---- The library and LD_PRELOAD -----------------------------------------

def preload_library(base: Mapping[str, str]) -> str:
    """The library to preload: $GPUMUTEX_LIBRARY of the base environment
    (as gpumutex-run does), else library_path()."""
    override = base.get(LIBRARY)
    if override:
        path = os.path.realpath(override)
        if not os.path.isfile(path):
            raise ValueError(
                f"{LIBRARY}={override!r} is not a file; unset it to use the "
                f"packaged library")
    else:
        path = library_path()
    if any(c in path for c in ": \t\n"):
        # ld.so splits LD_PRELOAD at ':' and blanks: the child would run
        # without gpumutex, silently.
        raise ValueError(
            f"cannot preload {path!r}: LD_PRELOAD cannot hold a path with "
            f"blanks or ':'; install gpumutex elsewhere or set {LIBRARY} to a "
            f"copy of the library at such a path")
    return path


def with_preload(old: Optional[str], lib: str) -> str:
    """LD_PRELOAD with `lib` first, before the entries already there (which
    ld.so separates by ':' or blanks); unchanged if `lib` is one of them,
    as gpumutex-run does."""
    if not old:
        return lib
    if lib in re.split(r"[: ]+", old):
        return old
    return f"{lib}:{old}"


# ---- environ() ------------------------------------------------------------

def _inherited(check: Callable[..., T], name: str, text: str,
               *args: Any) -> T:
    """check(name, text, *args) for a variable of the base environment; its
    error says where the value came from."""
    try:
        return check(name, text, *args)
    except ValueError as e:
        raise ValueError(f"{e} (inherited: {name} is set in the base "
                         f"environment, env= or os.environ)") from None


def environ(visible_devices: Optional[Devices] = None,
            num_devices: Optional[int] = None,
            lock_dir: Optional[PathArg] = None,
            timeout: Optional[float] = None,
            quiet: Optional[bool] = None,
            env: Optional[Mapping[str, str]] = None,
            *, idle_suspend_ms: Optional[int] = None,
            gpu_time: Optional[bool] = None) -> Dict[str, str]:
    """Return a new dict: the environment a child needs to run under gpumutex.

    ``idle_suspend_ms`` sets GPUMUTEX_IDLE_SUSPEND_MS (0 = never suspend an
    idle job; docs/suspend.md). ``gpu_time=True`` sets GPUMUTEX_GPU_TIME=1:
    each process's measured GPU time goes into the event log
    (docs/preload.md, "GPU time").

    The base is a copy of `env`, or of ``os.environ`` when `env` is None;
    neither is modified. Each argument that is not None sets its variable,
    overriding one already in the base:

    ===================  ==========================  ============================
    argument             variable                    default when neither is set
    ===================  ==========================  ============================
    ``visible_devices``  ``GPUMUTEX_VISIBLE_DEVICES`` required (ValueError)
    ``num_devices``      ``GPUMUTEX_NUM_DEVICES``     1
    ``lock_dir``         ``GPUMUTEX_LOCK_DIR``        ``/tmp/libgpumutex``
    ``timeout``          ``GPUMUTEX_TIMEOUT``         wait forever
    ``quiet``            ``GPUMUTEX_QUIET``           False ("0")
    ===================  ==========================  ============================

    ``GPUMUTEX_JOB`` is set to a fresh random id (each call is a new job),
    except inside a job that holds GPUs now: when the base's
    ``GPUMUTEX_JOB`` names a job of this user with a live lease in the lock
    directory (or one that is taking its lease), that id is kept and the
    child joins that job, since as a new job it would wait for GPUs its own
    caller holds. The library (library_path(), or ``GPUMUTEX_LIBRARY`` if
    the base sets it) is put first in ``LD_PRELOAD``.
    ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` is set unless the base sets it, and,
    unless the base narrows it, ``CUDA_VISIBLE_DEVICES`` to as many GPUs as
    the job will be given (in a pool a placeholder, also put in
    ``GPUMUTEX_CUDA_PLACEHOLDER``, that the library replaces with the
    granted GPUs; docs/preload.md, "Device queries in PyTorch").

    Raises TypeError or ValueError, naming the argument (or the variable of
    the base) and its value, when anything is invalid, and ValueError when
    the child would join its caller's job but its devices or num_devices
    do not fit that job's GPUs.

    >>> env = environ(visible_devices=[0, 1], num_devices=2, env={})
    >>> env["GPUMUTEX_VISIBLE_DEVICES"], env["GPUMUTEX_NUM_DEVICES"]
    ('0,1', '2')
    """
    return child_environ(visible_devices, num_devices, lock_dir, timeout,
                         quiet, env, idle_suspend_ms=idle_suspend_ms,
                         gpu_time=gpu_time)[0]


def idle_suspend_text(value: object) -> str:
    """GPUMUTEX_IDLE_SUSPEND_MS for the ``idle_suspend_ms`` argument: an
    int from 0 (never) to 86400000, or its decimal text."""
    if _is_int(value):
        text = str(int(value))  # type: ignore[call-overload]
    elif isinstance(value, str):
        text = value
    else:
        raise TypeError(f"idle_suspend_ms must be an int, not "
                        f"{_type_name(value)}")
    check_recheck_ms("idle_suspend_ms", text)
    return text


def child_environ(visible_devices: Optional[Devices] = None,
                  num_devices: Optional[int] = None,
                  lock_dir: Optional[PathArg] = None,
                  timeout: Optional[float] = None,
                  quiet: Optional[bool] = None,
                  env: Optional[Mapping[str, str]] = None,
                  *, idle_suspend_ms: Optional[int] = None,
                  gpu_time: Optional[bool] = None
                  ) -> Tuple[Dict[str, str], Optional[str]]:
    """environ(), and the line to print (or None) when the child joins the
    job it is started in."""
    if env is not None and not isinstance(env, Mapping):
        raise TypeError(f"env must be a mapping, not {_type_name(env)}")
    out: Dict[str, str] = dict(os.environ if env is None else env)

    # Each argument on its own first ...
    args: Dict[str, str] = {}
    if visible_devices is not None:
        args[VISIBLE] = devices_text(visible_devices)
    want = None if num_devices is None else num_devices_value(num_devices)
    if lock_dir is not None:
        args[LOCK_DIR] = lock_dir_text(lock_dir)
    if timeout is not None:
        args[TIMEOUT] = timeout_text(timeout)
    if quiet is not None:
        args[QUIET] = quiet_text(quiet)
    if idle_suspend_ms is not None:
        args[IDLE_SUSPEND] = idle_suspend_text(idle_suspend_ms)
    if gpu_time is not None:
        args[GPU_TIME] = gpu_time_text(gpu_time)

    # ... then what the child will see, argument or inherited variable.
    if VISIBLE in args:
        devices = parse_devices("visible_devices", args[VISIBLE])
    elif out.get(VISIBLE):
        devices = _inherited(parse_devices, VISIBLE, out[VISIBLE])
    else:
        # Empty is "not configured" for the library (like unset), which
        # would run the child outside the queue: refused, as gpumutex-run
        # refuses it.
        empty = (f" ({VISIBLE} is set but empty, which means \"not "
                 f"configured\")" if VISIBLE in out else "")
        raise ValueError(
            "visible_devices is required: pass visible_devices= (e.g. \"0,1\" "
            f"or [0, 1]) or set {VISIBLE} in the environment{empty}")
    if want is not None:
        if not 1 <= want <= len(devices):
            raise ValueError(
                f"num_devices={num_devices!r} is out of range; a job can take "
                f"from 1 to {len(devices)} GPUs (the number of visible "
                f"devices)")
        args[NUM] = str(want)
    elif NUM in out:
        want = _inherited(parse_num_devices, NUM, out[NUM], len(devices))
    if LOCK_DIR not in args and LOCK_DIR in out:
        _inherited(check_lock_dir, LOCK_DIR, out[LOCK_DIR])
    if TIMEOUT not in args and TIMEOUT in out:
        _inherited(parse_timeout, TIMEOUT, out[TIMEOUT])
    if QUIET not in args and QUIET in out:
        _inherited(check_quiet, QUIET, out[QUIET])
    if RECHECK in out:
        _inherited(check_recheck_ms, RECHECK, out[RECHECK])
    if IDLE_SUSPEND not in args and IDLE_SUSPEND in out:
        _inherited(check_recheck_ms, IDLE_SUSPEND, out[IDLE_SUSPEND])
    if GIVE_BACK in out:
        _inherited(check_recheck_ms, GIVE_BACK, out[GIVE_BACK])
    if GPU_TIME not in args and GPU_TIME in out:
        _inherited(check_gpu_time, GPU_TIME, out[GPU_TIME])

    lib = preload_library(out)
    out.update(args)
    job, note = _enclosing_job(out, devices, 1 if want is None else want,
                               num_devices is not None)
    out[JOB] = job or secrets.token_hex(16)
    out["LD_PRELOAD"] = with_preload(out.get("LD_PRELOAD"), lib)
    # As gpumutex-run does (src/cli/run.c, device_env): torch's device
    # queries use NVML, and what it counts before CUDA is initialised is
    # as many GPUs as the job will be given: the candidates when as many
    # as wanted; in a pool the first `want` of them, marked as the
    # library's placeholder (no narrowing; replaced at the grant). An
    # inherited CUDA_VISIBLE_DEVICES equal to an inherited placeholder is
    # chosen again; a placeholder that does not match is stale.
    out.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    placeholder = out.pop(PLACEHOLDER, None)
    if ("CUDA_VISIBLE_DEVICES" not in out or
            (placeholder and out["CUDA_VISIBLE_DEVICES"] == placeholder)):
        n = 1 if want is None else want
        ordered = sorted(devices)
        if n < len(ordered):
            ordered = ordered[:n]
            out[PLACEHOLDER] = ",".join(str(d) for d in ordered)
        out["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in ordered)
        out["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return out, (None if out.get(QUIET) == "1" else note)


def _enclosing_job(out: Dict[str, str], devices: List[int], want: int,
                   want_given: bool) -> Tuple[Optional[str], Optional[str]]:
    """The job to keep and a note, when the child is started inside a job
    that holds GPUs now (the base's GPUMUTEX_JOB, gpumutex-run's rule,
    src/cli/run.c): as a new job the child would queue behind its own
    caller's GPUs. (None, None) for a new job."""
    job = out.get(JOB)
    if not job or not _JOB_ID.fullmatch(job):
        return None, None
    state, lease = _job.probe(out.get(LOCK_DIR, DEFAULT_LOCK_DIR), job)
    if state == "none":
        return None, None
    if state == "taking":
        return job, (f"the child runs inside job {job} ({JOB} of the base "
                     f"environment), which is taking its GPUs: it joins that "
                     f"job and shares them instead of waiting for GPUs its "
                     f"own caller will hold; quiet=True hides this line")
    why = _job.join_problem(job, lease, devices, want)
    if why:
        num = f"num_devices={want}" if want_given else f"{NUM}={want}"
        raise ValueError(
            f"the child would run inside job {job} ({JOB} of the base "
            f"environment), which holds GPUs now, so it can only share "
            f"them: as a new job it would wait for GPUs its own caller "
            f"holds (for ever, if the caller waits for it); but {why} "
            f"(devices {','.join(map(str, devices))}, {num}); give it "
            f"settings that fit the job's GPUs, or a base environment "
            f"without {JOB}")
    held = ",".join(map(str, lease))
    s = "" if len(lease) == 1 else "s"
    return job, (f"the child runs inside job {job} ({JOB} of the base "
                 f"environment), which holds GPU{s} {held}: it joins that "
                 f"job and shares its GPUs instead of waiting for GPUs its "
                 f"own caller holds; quiet=True hides this line")
