"""``python -m gpumutex ARGS``: the ``gpumutex`` command (status, run, init).

This process is replaced by the packaged program (os.execv), so exit codes,
signals and output are exactly the program's. The ``gpumutex`` and
``gpumutex-run`` and ``gpu-offload`` console scripts of the package call
main(), run_main() and offload_main().
"""

from __future__ import annotations

import os
import sys
from typing import List, NoReturn, Optional

from ._paths import program_path


def _exec(name: str, argv: Optional[List[str]]) -> NoReturn:
    """Replace this process by the packaged program `name` with `argv`
    (default: this process's arguments)."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        path = program_path(name)
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        sys.exit(2)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(path, [path] + args)
    except OSError as e:
        print(f"gpumutex: cannot run {path}: {e.strerror}", file=sys.stderr)
        sys.exit(126)


def main(argv: Optional[List[str]] = None) -> NoReturn:
    """The ``gpumutex`` command: ``status [--json] [--watch]``, ``run``,
    ``init``, ``--help``, ``--version``."""
    _exec("gpumutex", argv)


def run_main(argv: Optional[List[str]] = None) -> NoReturn:
    """The ``gpumutex-run`` command: ``gpumutex-run [OPTIONS] -- CMD...``."""
    _exec("gpumutex-run", argv)


def offload_main(argv: Optional[List[str]] = None) -> NoReturn:
    """The ``gpu-offload`` command: ``gpu-offload run|report|profile|
    calibrate ...`` (docs/offload.md)."""
    _exec("gpu-offload", argv)


if __name__ == "__main__":
    main()
