"""gpumutex.status() and gpumutex.events(): the lock directory's state and
its event log as Python dicts, read by the packaged ``gpumutex`` program
(``status --json`` and ``log --json``), so that the Python view is the
command's, field for field (docs/status-json.md, docs/report.md)."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from typing import Any, Dict, List, Optional, Union

from ._paths import program_path

_When = Union[None, str, int, float, datetime.datetime, datetime.timedelta]


def _lock_dir_args(lock_dir: Optional["os.PathLike[str] | str"]) -> List[str]:
    return ["--lock-dir", os.fspath(lock_dir)] if lock_dir is not None else []


def _run(args: List[str]) -> str:
    p = subprocess.run([program_path("gpumutex")] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip() or
                           f"gpumutex {args[0]} exited {p.returncode}")
    return p.stdout


def status(lock_dir: Optional["os.PathLike[str] | str"] = None) -> Dict[str, Any]:
    """The state of the lock directory now, as ``gpumutex status --json``
    gives it (schema ``gpumutex.status/2``): devices, leases, queue and,
    where NVML is available, utilisation and memory (key ``nvml``).
    `lock_dir` defaults to ``$GPUMUTEX_LOCK_DIR``, else /tmp/libgpumutex."""
    return json.loads(_run(["status", "--json"] + _lock_dir_args(lock_dir)))


def _since_arg(since: _When) -> List[str]:
    if since is None:
        return []
    if isinstance(since, datetime.timedelta):
        return ["--since", f"{max(0, int(since.total_seconds()))}s"]
    if isinstance(since, datetime.datetime):
        return ["--since", f"@{int(since.timestamp())}"]
    if isinstance(since, (int, float)):
        return ["--since", f"@{int(since)}"]
    return ["--since", str(since)]


def events(since: _When = None, job: Optional[str] = None,
           user: Optional[Union[str, int]] = None,
           lock_dir: Optional["os.PathLike[str] | str"] = None
           ) -> List[Dict[str, Any]]:
    """The event log's records in time order, as ``gpumutex log --json``
    gives them, with the rebuilt lease ends (``"ev": "end"``, with
    ``how`` and ``exact``). `since`: a timedelta (that long ago), a
    datetime, a Unix time, or the command's text ("24h", "90m",
    "@1700000000", "2026-12-01 09:00"); None for everything."""
    args = ["log", "--json"] + _since_arg(since) + _lock_dir_args(lock_dir)
    if user is not None:
        args += ["--user", str(user)]
    # `job` is a whole job id, filtered here: the command's --job takes
    # prefixes and refuses one that names no job (or several).
    return [e for e in (json.loads(line) for line in _run(args).splitlines()
                        if line) if job is None or e.get("job") == job]
