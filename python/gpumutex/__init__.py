"""gpumutex: make CUDA processes take turns on shared GPUs.

Run a command with ``libgpumutex.so`` preloaded: its first ``cuInit`` (and
that of every process it starts) waits its turn in a fair queue for
exclusive use of GPUs; processes that never initialise CUDA never wait.

    import gpumutex

    gpumutex.run(["python", "train.py"], visible_devices="0,1,2,3", check=True)
    gpumutex.system("python train.py", visible_devices=[0, 1, 2, 3])

The keyword arguments (``visible_devices``, ``num_devices``, ``lock_dir``,
``timeout``, ``quiet``, and keyword-only ``idle_suspend_ms`` and
``gpu_time``) set
gpumutex's variables in the child's environment
only, never in the caller's ``os.environ``. Everything is checked before
anything runs: a bad value raises TypeError or ValueError naming it.
See docs/python.md.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any, Dict, Optional, Sequence, Union

from ._config import Devices, PathArg, child_environ, environ
from ._paths import library_path
from ._observe import events, status

__version__ = "0.1.0"

__all__ = ["run", "system", "Popen", "environ", "library_path",
           "status", "events",
           "__version__"]

_Args = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]",
              Sequence[Union[str, bytes, "os.PathLike[str]",
                             "os.PathLike[bytes]"]]]


def _child_env(kwargs: Dict[str, Any], visible_devices: Optional[Devices],
               num_devices: Optional[int], lock_dir: Optional[PathArg],
               timeout: Optional[float], quiet: Optional[bool]) -> None:
    """Replace kwargs["env"] by the gpumutex environment built over it;
    say so on stderr when the child joins the job it is started in.
    ``idle_suspend_ms`` and ``gpu_time`` (keyword only, in every function)
    are taken out of kwargs here: GPUMUTEX_IDLE_SUSPEND_MS and
    GPUMUTEX_GPU_TIME."""
    idle = kwargs.pop("idle_suspend_ms", None)
    gpu_time = kwargs.pop("gpu_time", None)
    kwargs["env"], note = child_environ(visible_devices, num_devices,
                                        lock_dir, timeout, quiet,
                                        kwargs.get("env"),
                                        idle_suspend_ms=idle,
                                        gpu_time=gpu_time)
    if note:
        sys.stderr.write(f"gpumutex: {note}\n")
        sys.stderr.flush()


def run(args: _Args, visible_devices: Optional[Devices] = None,
        num_devices: Optional[int] = None, lock_dir: Optional[PathArg] = None,
        timeout: Optional[float] = None, quiet: Optional[bool] = None,
        *, subprocess_timeout: Optional[float] = None,
        **subprocess_kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(args, ...)`` with the command under gpumutex.

    The gpumutex arguments are those of environ(); the child's environment
    is ``environ(..., env=subprocess_kwargs.get("env"))``. Every other
    keyword argument (``check``, ``capture_output``, ``text``, ``cwd``,
    ``input``, ``stdout``, ...) goes to subprocess.run unchanged.

    ``timeout`` is gpumutex's (GPUMUTEX_TIMEOUT: how long the child's cuInit
    may wait for GPUs). subprocess.run's own ``timeout`` (kill the child
    after that many seconds) is available as ``subprocess_timeout``.

    >>> gpumutex.run(["python", "train.py"], visible_devices="0,1",
    ...              num_devices=2, check=True)      # doctest: +SKIP
    """
    _child_env(subprocess_kwargs, visible_devices, num_devices, lock_dir,
               timeout, quiet)
    if subprocess_timeout is not None:
        subprocess_kwargs["timeout"] = subprocess_timeout
    return subprocess.run(args, **subprocess_kwargs)


def Popen(args: _Args, visible_devices: Optional[Devices] = None,
          num_devices: Optional[int] = None,
          lock_dir: Optional[PathArg] = None,
          timeout: Optional[float] = None, quiet: Optional[bool] = None,
          **subprocess_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, ...)`` with the command under gpumutex.

    Same arguments as run() (``env`` is the base environment); returns the
    started subprocess.Popen.
    """
    _child_env(subprocess_kwargs, visible_devices, num_devices, lock_dir,
               timeout, quiet)
    return subprocess.Popen(args, **subprocess_kwargs)


def _ignore_interrupts() -> Dict[int, Any]:
    """Ignore SIGINT and SIGQUIT in this process, as system(3) does while it
    waits (possible from the main thread only). Returns what to restore."""
    saved: Dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return saved
    for sig in (signal.SIGINT, signal.SIGQUIT):
        old = signal.getsignal(sig)
        if old is None:  # a handler Python cannot put back
            continue
        signal.signal(sig, signal.SIG_IGN)
        saved[sig] = old
    return saved


def system(command: Union[str, bytes, "os.PathLike[str]"],
           visible_devices: Optional[Devices] = None,
           num_devices: Optional[int] = None,
           lock_dir: Optional[PathArg] = None,
           timeout: Optional[float] = None, quiet: Optional[bool] = None,
           **subprocess_kwargs: Any) -> int:
    """``os.system(command)`` with the command under gpumutex.

    Runs ``/bin/sh -c command`` and returns its wait status exactly as
    os.system does: ``exit 3`` gives 768 (``3 << 8``), death by SIGKILL
    gives 9; ``os.waitstatus_to_exitcode()`` turns it into an exit code.
    Like os.system, the calling process ignores SIGINT and SIGQUIT while the
    command runs (when called from the main thread), so Ctrl-C stops the
    command, not the caller.

    The gpumutex arguments are those of environ(); other keyword arguments
    (``env`` as the base environment, ``cwd``, ``stdout``, ...) go to
    subprocess.Popen. ``shell`` cannot be given: the command always runs
    through /bin/sh.
    """
    if "shell" in subprocess_kwargs or "args" in subprocess_kwargs:
        raise TypeError("system() runs its command through /bin/sh: "
                        "'shell' and 'args' cannot be given")
    _child_env(subprocess_kwargs, visible_devices, num_devices, lock_dir,
               timeout, quiet)
    if isinstance(command, os.PathLike):
        command = os.fspath(command)
    with subprocess.Popen(["/bin/sh", "-c", command],
                          **subprocess_kwargs) as proc:
        # Popen has returned: the shell has exec'd with our own
        # dispositions, so it gets a Ctrl-C that we ignore.
        saved = _ignore_interrupts()
        try:
            _, status = os.waitpid(proc.pid, 0)
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return status
