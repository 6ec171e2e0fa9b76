"""The build backend (PEP 517 / PEP 660) of the gpumutex Python package.

``pip install .`` at the repository root runs this module (pyproject.toml
names it, in-tree). It needs nothing but Python's standard library, make
and a C compiler: no setuptools, no wheel package and no package index,
with or without build isolation. That is on purpose: the stock Pythons of
current distributions differ exactly there (Debian's has no ``wheel`` and
an old setuptools, a fresh venv has neither), and a package whose only job
is to carry three native files gains nothing from a build framework.

The wheel holds the Python package and, in ``gpumutex/_bin/``, what the
repository's Makefile ships (``make``): both products' programs
(``gpumutex``, ``gpumutex-run``, ``gpu-offload``, ``gpu-offload-calib``)
and libraries (``libgpumutex.so``, ``libgpuoffload.so`` and its two
backends), each gated by tools/gate.sh on its way to build/ and all gated
again here (``make gate``): nothing above GLIBC_2.17, only libc, libdl and
libpthread, no RPATH. That is what the wheel's tag, manylinux 2.17
(manylinux2014), promises. Everything the build writes goes under the
repository's ``build/``.
"""

import base64
import hashlib
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

NAME = "gpumutex"
NATIVE = ("libgpumutex.so", "gpumutex", "gpumutex-run",
          "libgpuoffload.so", "libgpuoffload-cuda.so", "libgpuoffload-test.so",
          "gpu-offload", "gpu-offload-calib")
SUMMARY = ("Make CUDA processes take turns on shared GPUs "
           "(LD_PRELOAD library, CLI and Python API)")
CLASSIFIERS = (
    "Programming Language :: Python :: 3",
    "Programming Language :: C",
    "Operating System :: POSIX :: Linux",
    "Environment :: GPU :: NVIDIA CUDA",
)
ENTRY_POINTS = ("[console_scripts]\n"
                "gpumutex = gpumutex.__main__:main\n"
                "gpumutex-run = gpumutex.__main__:run_main\n"
                "gpu-offload = gpumutex.__main__:offload_main\n")
# What an sdist carries when there is no git to ask: enough to build.
# (tests/offload/backend: the CPU test backend, libgpuoffload-test.so, ships.)
SDIST_PATHS = ("pyproject.toml", "Makefile", "README.md", "docs/python.md",
               "src", "tools", "python", "tests/fakecuda/module.mk",
               "tests/offload/backend")


def _root():
    # PEP 517: the backend runs with the source tree as its working directory.
    return os.getcwd()


def _version(root):
    with open(os.path.join(root, "python", NAME, "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _metadata(root):
    try:
        with open(os.path.join(root, "docs", "python.md")) as f:
            description = f.read()
    except OSError:
        description = ""
    head = ["Metadata-Version: 2.1", f"Name: {NAME}",
            f"Version: {_version(root)}", f"Summary: {SUMMARY}",
            "Requires-Python: >=3.9",
            "Description-Content-Type: text/markdown"]
    head += [f"Classifier: {c}" for c in CLASSIFIERS]
    return "\n".join(head) + "\n\n" + description


def _tag():
    # Every ELF file inside passed the gate (glibc 2.17, libc/libdl/
    # libpthread only): the manylinux 2.17 promise, under both its names.
    # Elsewhere than x86_64 and aarch64 Linux, the build machine's own tag.
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    if plat in ("linux_x86_64", "linux_aarch64"):
        arch = plat[len("linux_"):]
        return f"py3-none-manylinux_2_17_{arch}.manylinux2014_{arch}"
    return f"py3-none-{plat}"


def _dist_info(root):
    return f"{NAME}-{_version(root)}.dist-info"


def _dist_info_files(root, tag):
    wheel = ("Wheel-Version: 1.0\nGenerator: gpumutex_build\n"
             f"Root-Is-Purelib: false\nTag: {tag}\n")
    return {"METADATA": _metadata(root), "WHEEL": wheel,
            "entry_points.txt": ENTRY_POINTS}


def _make_native(root):
    """Build what ships with the Makefile and gate every file of it again
    (`make gate`: the libraries' exports, and for all, the glibc floor)."""
    cmd = [os.environ.get("MAKE", "make"), "-C", root, "gate"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    rc = subprocess.run(cmd, stdout=sys.stderr, env=env).returncode
    if rc != 0:
        raise SystemExit(f"gpumutex: `{' '.join(cmd)}` failed (exit {rc}); "
                         f"building the package needs make, a C compiler and "
                         f"Python (Debian: apt-get install gcc libc6-dev make "
                         f"binutils python3); a gate failure says what to fix")


class _Wheel:
    """A wheel being written: files plus the RECORD that lists them."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(
            hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{arcname},sha256={digest},{len(data)}")

    def add_file(self, arcname, path):
        with open(path, "rb") as f:
            data = f.read()
        mode = 0o755 if os.access(path, os.X_OK) else 0o644
        self.add(arcname, data, mode)

    def close(self, dist_info):
        rec = f"{dist_info}/RECORD"
        self.zip.writestr(zipfile.ZipInfo(rec, date_time=(1980, 1, 1, 0, 0,
                                                          0)),
                          "\n".join(self.record + [f"{rec},,"]) + "\n")
        self.zip.close()


def _write_wheel(wheel_directory, root, editable):
    tag = _tag()
    name = f"{NAME}-{_version(root)}-{tag}.whl"
    dist_info = _dist_info(root)
    w = _Wheel(os.path.join(wheel_directory, name))
    if editable:
        # The package imported from the checkout uses the checkout's build/.
        w.add(f"_{NAME}_editable.pth",
              (os.path.join(root, "python") + "\n").encode())
    else:
        pkg = os.path.join(root, "python", NAME)
        for fname in sorted(os.listdir(pkg)):
            if fname.endswith(".py") or fname == "py.typed":
                w.add_file(f"{NAME}/{fname}", os.path.join(pkg, fname))
        for fname in NATIVE:
            w.add_file(f"{NAME}/_bin/{fname}",
                       os.path.join(root, "build", fname))
    for fname, text in _dist_info_files(root, tag).items():
        w.add(f"{dist_info}/{fname}", text.encode())
    w.close(dist_info)
    return name


# ---- PEP 517 / PEP 660 hooks ---------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    root = _root()
    dist_info = _dist_info(root)
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    for fname, text in _dist_info_files(root, _tag()).items():
        with open(os.path.join(metadata_directory, dist_info, fname),
                  "w") as f:
            f.write(text)
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    root = _root()
    _make_native(root)
    return _write_wheel(wheel_directory, root, editable=False)


def build_editable(wheel_directory, config_settings=None,
                   metadata_directory=None):
    root = _root()
    _make_native(root)
    return _write_wheel(wheel_directory, root, editable=True)


def _sdist_files(root):
    try:
        # Tracked files and new ones git does not ignore.
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached",
                              "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for top in SDIST_PATHS:
            path = os.path.join(root, top)
            if os.path.isfile(path):
                files.append(top)
            for d, dirs, names in os.walk(path):
                dirs[:] = [x for x in dirs if x != "__pycache__"]
                files += [os.path.relpath(os.path.join(d, n), root)
                          for n in names if not n.endswith(".pyc")]
    return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))


def build_sdist(sdist_directory, config_settings=None):
    root = _root()
    base = f"{NAME}-{_version(root)}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz",
                      format=tarfile.PAX_FORMAT) as tar:
        for rel in _sdist_files(root):
            tar.add(os.path.join(root, rel), arcname=f"{base}/{rel}",
                    recursive=False)
        pkg_info = _metadata(root).encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(pkg_info))
    return name
