"""Build and install the gpumutex Python package.

    pip install --no-build-isolation .     (in python/ or at the repo root)

The wheel carries the native parts inside the package, in gpumutex/_bin/:
libgpumutex.so (the preload library) and the gpumutex and gpumutex-run
programs. build_py builds them with the repository's Makefile and the
system compiler (``make build/gpumutex build/libgpumutex.so
build/gpumutex-run``; no network) and copies them there. Everything
setuptools writes goes under the repository's build/python/, so the source
tree stays clean.

The repository root's setup.py runs this file, so both places build the
same package.
"""

import os
import re
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py as _build_py

HERE = os.path.dirname(os.path.abspath(__file__))      # <repo>/python
REPO = os.path.dirname(HERE)
PKG_ROOT = os.path.relpath(HERE)   # setuptools wants it relative to the cwd
BUILD_BASE = os.path.join(REPO, "build", "python")
NATIVE = ("libgpumutex.so", "gpumutex", "gpumutex-run")
PRELOAD_MK = os.path.join("src", "preload", "module.mk")


def read_version():
    with open(os.path.join(HERE, "gpumutex", "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def make_command():
    """make with the native targets, and the preload module's makefile when
    the top-level Makefile does not include it (yet)."""
    cmd = [os.environ.get("MAKE", "make"), "-C", REPO]
    probe = subprocess.run(cmd + ["-n", "build/libgpumutex.so"],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    if probe.returncode != 0 and os.path.isfile(os.path.join(REPO,
                                                             PRELOAD_MK)):
        cmd += ["-f", "Makefile", "-f", PRELOAD_MK]
    return cmd + ["build/" + name for name in NATIVE]


class build_py(_build_py):
    """build_py, plus: build the native parts, copy them to gpumutex/_bin/."""

    def run(self):
        super().run()
        if not os.path.isfile(os.path.join(REPO, "Makefile")):
            sys.exit(f"gpumutex: no Makefile in {REPO}: the package must be "
                     f"built from a gpumutex source checkout (python/ or the "
                     f"repository root)")
        cmd = make_command()
        self.announce("building the native parts: " + " ".join(cmd), level=2)
        if not self.dry_run:
            rc = subprocess.run(cmd).returncode
            if rc != 0:
                sys.exit(f"gpumutex: `{' '.join(cmd)}` failed (exit {rc}); "
                         f"it needs a C compiler (cc) and make")
        dest = os.path.join(self.build_lib, "gpumutex", "_bin")
        self.mkpath(dest)
        for name in NATIVE:
            # copy_file keeps the mode: the programs stay executable.
            self.copy_file(os.path.join(REPO, "build", name),
                           os.path.join(dest, name))

    def get_outputs(self, include_bytecode=1):
        dest = os.path.join(self.build_lib, "gpumutex", "_bin")
        return (super().get_outputs(include_bytecode)
                + [os.path.join(dest, name) for name in NATIVE])


class BinaryDistribution(Distribution):
    """A platform wheel: it holds Linux binaries (though no extension)."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": build_py}
try:
    try:  # setuptools >= 70.1 has its own
        from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
    except ImportError:
        from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

    class bdist_wheel(_bdist_wheel):
        """Tag py3-none-<platform>: the binaries do not use Python's ABI."""

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = bdist_wheel
except ImportError:  # no wheel support at all: setuptools says so itself
    pass


def read_long_description():
    try:
        with open(os.path.join(REPO, "docs", "python.md")) as f:
            return f.read()
    except OSError:
        return ""


os.makedirs(BUILD_BASE, exist_ok=True)
setup(
    name="gpumutex",
    version=read_version(),
    description="Make CUDA processes take turns on shared GPUs "
                "(LD_PRELOAD library, CLI and Python API)",
    long_description=read_long_description(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=["gpumutex"],
    package_dir={"": PKG_ROOT},
    package_data={"gpumutex": ["py.typed"]},
    entry_points={"console_scripts": [
        "gpumutex = gpumutex.__main__:main",
        "gpumutex-run = gpumutex.__main__:run_main",
    ]},
    cmdclass=cmdclass,
    distclass=BinaryDistribution,
    options={"build": {"build_base": BUILD_BASE},
             "egg_info": {"egg_base": BUILD_BASE}},
    zip_safe=False,
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: C",
        "Operating System :: POSIX :: Linux",
        "Environment :: GPU :: NVIDIA CUDA",
    ],
)
