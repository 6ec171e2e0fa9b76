"""Where the native parts are: the packaged copies in ``_bin/`` next to this
file (an installed package), else the repository's ``build/`` directory (the
package imported from a source checkout, ``python/gpumutex``)."""

from __future__ import annotations

import os
from typing import List, Optional

LIBRARY = "libgpumutex.so"
PROGRAMS = ("gpumutex", "gpumutex-run", "gpu-offload")

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def _source_build_dir() -> Optional[str]:
    """``<repo>/build`` when this package is ``<repo>/python/gpumutex`` of a
    gpumutex checkout (one with a Makefile), else None."""
    parent = os.path.dirname(_PKG_DIR)
    if os.path.basename(parent) != "python":
        return None
    repo = os.path.dirname(parent)
    if not os.path.isfile(os.path.join(repo, "Makefile")):
        return None
    return os.path.join(repo, "build")


def search_dirs() -> List[str]:
    """The directories searched for the native parts, in order."""
    dirs = [os.path.join(_PKG_DIR, "_bin")]
    build = _source_build_dir()
    if build is not None:
        dirs.append(build)
    return dirs


def find(name: str) -> str:
    """Absolute, symlink-free path of the native file `name`.

    Raises FileNotFoundError naming the places searched."""
    dirs = search_dirs()
    for d in dirs:
        path = os.path.join(d, name)
        if os.path.isfile(path):
            return os.path.realpath(path)
    hint = ("build it with `make` in the repository"
            if len(dirs) > 1 else "reinstall the gpumutex package")
    raise FileNotFoundError(
        f"gpumutex: cannot find {name} (looked in {', '.join(dirs)}); {hint}")


def library_path() -> str:
    """Absolute path of the ``libgpumutex.so`` this package preloads.

    The copy packaged with gpumutex (``gpumutex/_bin/``), or, when the package
    is imported from a source checkout, the repository's
    ``build/libgpumutex.so``. Raises FileNotFoundError if neither exists.
    (The ``GPUMUTEX_LIBRARY`` variable does not change this function's answer;
    it only changes which library ``environ()`` puts in ``LD_PRELOAD``.)
    """
    return find(LIBRARY)


def program_path(name: str) -> str:
    """Absolute path of the packaged ``gpumutex``, ``gpumutex-run`` or
    ``gpu-offload`` program (same search as library_path())."""
    if name not in PROGRAMS:
        raise ValueError(f"program must be one of {PROGRAMS}, not {name!r}")
    return find(name)
