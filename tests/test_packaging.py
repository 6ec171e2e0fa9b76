"""The shipped artifacts: the library in build/ and the one inside the
Python wheel pass the load gate and load; the wheel is well formed; an
sdist builds a wheel on its own (no git, no index)."""

import base64
import hashlib
import os
import tempfile
import subprocess
import sys
import tarfile
import zipfile

from conftest import BUILD, REPO, wrapped_names

GATE = os.path.join(REPO, "tools", "gate.sh")
EXPORTS = os.path.join(REPO, "src", "preload", "exports.list")


def backend(hook, out_dir, cwd=REPO):
    """Run one hook of the in-tree build backend as pip would (cwd = the
    source tree) and return the file name it reports."""
    code = ("import sys; sys.path.insert(0, 'python'); "
            "import gpumutex_build as b; "
            f"print(b.{hook}({str(out_dir)!r}))")
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    r = subprocess.run(["/usr/bin/python3", "-c", code], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return os.path.join(str(out_dir), r.stdout.split()[-1])


def wrapper_exports():
    """A list file of the generated driver wrappers' names (what
    build/gen/wrap-exports.list holds): every driver name but the pure
    queries and the hand-made hooks (src/preload/driver-policy.txt)."""
    names = wrapped_names()
    fd, path = tempfile.mkstemp(suffix=".list")
    with os.fdopen(fd, "w") as f:
        f.write("".join(n + "\n" for n in sorted(names)))
    return path


def gate_and_load(lib):
    extra = wrapper_exports()
    try:
        g = subprocess.run(["bash", GATE, lib, EXPORTS, extra],
                           capture_output=True, text=True)
    finally:
        os.unlink(extra)
    assert g.returncode == 0, g.stderr
    # Loading is proven by loading: a program that never touches CUDA runs
    # unchanged with the library preloaded.
    env = dict(os.environ, LD_PRELOAD=lib)
    for argv in (["/bin/true"], [sys.executable, "-c", "pass"]):
        r = subprocess.run(argv, env=env, capture_output=True, text=True)
        assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), argv


def test_built_library_passes_the_gate_and_loads(built):
    gate_and_load(os.path.join(BUILD, "libgpumutex.so"))


def check_wheel(path, tmp_path):
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        dist_info = [n.split("/")[0] for n in names
                     if n.endswith(".dist-info/RECORD")]
        assert len(dist_info) == 1, names
        record = z.read(dist_info[0] + "/RECORD").decode().splitlines()
        # RECORD lists every other file with its true hash and size.
        listed = {}
        for line in record:
            name, digest, size = line.rsplit(",", 2)
            listed[name] = (digest, size)
        assert set(listed) == set(names)
        for name in names:
            if name.endswith("/RECORD"):
                continue
            data = z.read(name)
            want = "sha256=" + base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert listed[name] == (want, str(len(data))), name
        for prog in ("gpumutex", "gpumutex-run"):
            mode = z.getinfo(f"gpumutex/_bin/{prog}").external_attr >> 16
            assert mode & 0o111, prog
        z.extractall(tmp_path / "unpacked")
        for info in z.infolist():  # as pip does, keep the modes
            os.chmod(tmp_path / "unpacked" / info.filename,
                     (info.external_attr >> 16) & 0o777)
    return str(tmp_path / "unpacked" / "gpumutex" / "_bin")


PROGRAMS = ("gpumutex", "gpumutex-run", "gpu-offload", "gpu-offload-calib")
OFFLOAD_LIBS = {
    "libgpuoffload.so": os.path.join(BUILD, "offload", "gen", "exports.list"),
    "libgpuoffload-cuda.so": os.path.join(REPO, "src", "offload", "cuda",
                                          "exports.list"),
    "libgpuoffload-test.so": os.path.join(REPO, "tests", "offload", "backend",
                                          "exports.list"),
}


def test_wheel_is_manylinux_and_every_file_passes_the_gate(built, tmp_path):
    """The manylinux 2.17 tag is earned: both products' programs and
    libraries are inside, and every one of them passes the gate (nothing
    above GLIBC_2.17, libc/libdl/libpthread only, no RPATH)."""
    wheel = backend("build_wheel", tmp_path)
    assert os.path.basename(wheel) == ("gpumutex-0.1.0-py3-none-manylinux_2_17_"
                                       "x86_64.manylinux2014_x86_64.whl")
    with zipfile.ZipFile(wheel) as z:
        entry = [n for n in z.namelist() if n.endswith("entry_points.txt")]
        scripts = z.read(entry[0]).decode()
    for cmd in ("gpumutex", "gpumutex-run", "gpu-offload"):
        assert f"\n{cmd} = gpumutex.__main__:" in scripts, scripts
    bindir = check_wheel(wheel, tmp_path)
    g = subprocess.run(["bash", GATE, "--program"] +
                       [os.path.join(bindir, p) for p in PROGRAMS],
                       capture_output=True, text=True)
    assert g.returncode == 0, g.stderr
    for lib, exports in OFFLOAD_LIBS.items():
        g = subprocess.run(["bash", GATE, os.path.join(bindir, lib), exports],
                           capture_output=True, text=True)
        assert g.returncode == 0, g.stderr
    r = subprocess.run([os.path.join(bindir, "gpu-offload"), "--help"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "Commands:" in r.stdout, r.stderr


def test_wheel_library_passes_the_gate_and_loads(built, tmp_path):
    wheel = backend("build_wheel", tmp_path)
    assert os.path.basename(wheel).startswith("gpumutex-0.1.0-py3-none-")
    bindir = check_wheel(wheel, tmp_path)
    gate_and_load(os.path.join(bindir, "libgpumutex.so"))
    r = subprocess.run([os.path.join(bindir, "gpumutex"), "--version"],
                       capture_output=True, text=True)
    assert r.stdout.split() == ["gpumutex", "0.1.0"], r.stderr


def test_sdist_builds_a_wheel_on_its_own(built, tmp_path):
    """An sdist holds all the build needs: unpacked where there is no git
    checkout, it builds (make, then the gate) a wheel whose library loads."""
    sdist = backend("build_sdist", tmp_path)
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():  # only plain files, inside the top
            assert member.isfile() and member.name.startswith(
                "gpumutex-0.1.0/") and "/../" not in member.name, member.name
        # The "data" filter where this Python has it (3.12+, some 3.11.x).
        kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(tmp_path / "src", **kw)
    top = tmp_path / "src" / "gpumutex-0.1.0"
    assert (top / "PKG-INFO").is_file()
    assert (top / "pyproject.toml").is_file()
    assert not (top / "build").exists()
    out = tmp_path / "dist"
    out.mkdir()
    wheel = backend("build_wheel", out, cwd=str(top))
    bindir = check_wheel(wheel, tmp_path)
    gate_and_load(os.path.join(bindir, "libgpumutex.so"))
