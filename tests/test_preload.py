"""Integration tests of libgpumutex.so (src/preload): every path to cuInit
(direct link, dlsym, dlvsym, cuGetProcAddress, RTLD_NEXT), NVIDIA's own
runtime, programs that do not use CUDA, and the built library's exports
and one-line build. Configuration and failure are in
test_preload_config.py, exclusion and jobs in test_preload_jobs.py,
gpumutex-run in test_gpumutex_run.py; what they share is
tests/preloadlib.py.

Every test starts real processes with the library preloaded, against the
fake driver (tests/fakecuda), and checks what can be observed from outside:
the fake driver's journal (did the real cuInit run, with which
CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, for which job), exit codes,
stdout/stderr and the files in the lock directory. No sleeps as
synchronisation, no timing thresholds: where one process must wait for
another, it reads a line the other prints, or waits for its exit.

Run with /usr/bin/python3 -m pytest tests/test_preload.py
"""

import re
import shutil
import subprocess

import pytest

from conftest import readme_build_line, wrapped_names
from preloadlib import LIB, PY, REPO, T, assert_caught, inits, kv, run
from preloadlib import built, env, nvcc_built  # noqa: F401 (fixtures)


EXPORTS = {"cuInit", "cuGetProcAddress", "cuGetProcAddress_v2", "dlsym",
           "dlvsym", "dlmopen",
           # The CUPTI entry points a profiler starts with
           # (src/preload/cuptihooks.c).
           "cuptiSubscribe", "cuptiActivityRegisterCallbacks",
           "cuptiActivityEnable", "cuptiActivityEnableAndDump",
           "cuptiActivityEnableContext", "cuptiProfilerInitialize"}


# ---- Every path to cuInit -----------------------------------------------

def test_plt_call_of_linked_program(env):
    assert_caught(env, run([T / "culinked"], env))


def test_plt_call_of_cugetprocaddress_v2(env):
    assert_caught(env, run([T / "culinked", "gpa2"], env))


@pytest.mark.parametrize("args", [
    ["dlopen"],                 # dlopen + dlsym(handle)
    ["default"],                # dlsym(RTLD_DEFAULT)
    ["gpa2", "2000", "0"],      # what cudart does first
    ["gpa2", "12000", "0"],
    ["gpa2", "12000", "2"],     # per-thread default stream flag
    ["gpa2", "13000", "1"],
    ["gpa1", "11030", "0"],     # the 4-argument cuGetProcAddress
], ids=lambda a: "-".join(a))
def test_path(env, args):
    assert_caught(env, run([T / "cuprobe"] + args, env))


@pytest.mark.parametrize("version", ["11030", "12000"])
def test_self_lookup_of_cugetprocaddress(env, version):
    """cuGetProcAddress_v2("cuGetProcAddress", 11030) must hand back our
    4-argument wrapper, 12000 our 5-argument one; cuInit found through the
    returned pointer must still be ours."""
    res = run([T / "cuprobe", "self", version], env)
    assert_caught(env, res)
    out = kv(res.stdout)
    assert out["self-from"] == str(LIB)
    v2 = version == "12000"
    assert (out["self-is-v1"], out["self-is-v2"]) == (("0", "1") if v2
                                                      else ("1", "0"))
    assert out["init-from"] == str(LIB)
    assert out["gpa-rc"] == "0"


def test_dlsym_fallback_when_getprocaddress_fails(env):
    env["FAKECUDA_NO_GETPROCADDRESS"] = "1"
    res = run([T / "cuprobe", "fallback"], env)
    assert kv(res.stdout)["gpa-rc"] != "0"
    assert_caught(env, res)


def test_dlvsym(env):
    # A build of the fake driver whose names carry a symbol version.
    env["LD_LIBRARY_PATH"] = str(T / "vcuda")
    assert_caught(env, run([T / "cuprobe", "dlvsym", "CUDA_TEST_1"], env))


def test_rtld_next_is_relative_to_the_caller(env):
    """libnextshim.so interposes getpid() and forwards with
    dlsym(RTLD_NEXT): resolved relative to libgpumutex.so instead of the
    shim, it would find the shim's own getpid and never return."""
    with_lib = run([T / "nextprobe", "plain"], env)
    without = run([T / "nextprobe", "plain"], env, preload=False)
    assert with_lib.returncode == 0, with_lib.stderr
    assert with_lib.stdout == without.stdout
    out = kv(with_lib.stdout)
    assert out == {"getpid-ok": "1", "shim-calls": "1",
                   "shim-next-shared": "2", "shim-next-is-two": "1",
                   "main-next-shared": "1", "default-shared": "1",
                   "shim-next-missing": "null", "dlerror-set": "1"}


def test_rtld_next_cuinit_from_a_library(env):
    res = run([T / "nextprobe", "cuinit"], env)
    assert_caught(env, res)
    assert kv(res.stdout)["shim-next-is-two"] == "1"


@pytest.mark.parametrize("how", ["unset", "empty"])
def test_not_configured_is_pass_through(env, tmp_path, how):
    """Unset or empty GPUMUTEX_VISIBLE_DEVICES: the library does nothing,
    even with other variables malformed."""
    if how == "unset":
        del env["GPUMUTEX_VISIBLE_DEVICES"]
    else:
        env.update(GPUMUTEX_VISIBLE_DEVICES="", GPUMUTEX_NUM_DEVICES="x")
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "0"
    ev = inits(env)
    assert len(ev) == 1 and ev[0]["cvd"] == "-unset-" and ev[0]["job"] == "-"
    assert res.stderr == ""
    assert not (tmp_path / "lock").exists()


# ---- NVIDIA's own runtime -----------------------------------------------

@pytest.mark.parametrize("prog", ["cudart-static", "cudart-shared"])
def test_cudart_through_getprocaddress(env, nvcc_built, prog):
    res = run([T / prog], env)
    ev = inits(env)
    assert len(ev) == 1 and ev[0]["order"] == "PCI_BUS_ID", (ev, res.stdout)
    assert ev[0]["cvd"] in ("0", "1")


@pytest.mark.parametrize("prog", ["cudart-static", "cudart-shared"])
def test_cudart_dlsym_fallback(env, nvcc_built, prog):
    """A driver without cuGetProcAddress*: cudart dlsyms every name."""
    env["LD_LIBRARY_PATH"] = str(T / "nogpa")
    res = run([T / prog], env)
    ev = inits(env)
    assert len(ev) == 1 and ev[0]["order"] == "PCI_BUS_ID", (ev, res.stdout)
    assert ev[0]["cvd"] in ("0", "1")


@pytest.mark.parametrize("prog", ["cudart-static", "cudart-shared"])
def test_cudart_with_failing_getprocaddress(env, nvcc_built, prog):
    """FAKECUDA_NO_GETPROCADDRESS=1: CUDA 13's cudart gives up before
    cuInit (it does without gpumutex too); the library changes nothing."""
    env["FAKECUDA_NO_GETPROCADDRESS"] = "1"
    with_lib = run([T / prog], env)
    without = run([T / prog], env, preload=False)
    assert with_lib.stdout == without.stdout
    assert with_lib.returncode == without.returncode
    for e in inits(env):
        assert e["job"] == "-" or e["order"] == "PCI_BUS_ID"


# ---- Programs that do not use CUDA --------------------------------------

def test_shell_is_unchanged(env, tmp_path):
    args = ["sh", "-c", "echo hi; echo err >&2; exit 3"]
    a, b = run(args, env), run(args, env, preload=False)
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout,
                                                  b.stderr) == (3, "hi\n",
                                                                "err\n")
    assert not (tmp_path / "lock").exists()


def test_python_pass_is_unchanged(env, tmp_path):
    a, b = run([PY, "-c", "pass"], env), run([PY, "-c", "pass"], env,
                                              preload=False)
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout,
                                                  b.stderr) == (0, "", "")
    assert not (tmp_path / "lock").exists()


@pytest.mark.parametrize("mode", ["plain", "withcuda"])
def test_unrelated_cu_names_pass_through(env, tmp_path, mode):
    """cudnnCreate, curl_easy_init and an unrelated library's own cuInit
    resolve to the same functions with and without the library."""
    a = run([T / "cunames", mode], env)
    b = run([T / "cunames", mode], env, preload=False)
    assert a.returncode == b.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    out = kv(a.stdout)
    for k in ("default-cudnn-same", "handle-curl-same", "next-cudnn-same"):
        assert out[k] == "1", k
    assert out["missing"] == "null"
    assert out["handle-cuInit"] == out["default-cuInit"] == "42"
    assert out["plt-cuInit"] == "42"
    assert out["where-handle-cuInit"].startswith("libcunames.so+")
    assert a.stderr == ""
    assert inits(env) == []
    assert not (tmp_path / "lock").exists()


# ---- The built library ---------------------------------------------------

def test_exports_and_dependencies(built):
    nm = subprocess.run(["nm", "-D", "--defined-only", str(LIB)],
                        capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1].split("@")[0] for line in nm.splitlines()
             if line.split() and line.split()[1] in "TtWi"}
    assert names == EXPORTS | wrapped_names()
    dyn = subprocess.run(["readelf", "-d", str(LIB)], capture_output=True,
                         text=True, check=True).stdout
    needed = set(re.findall(r"\(NEEDED\).*\[(.*)\]", dyn))
    assert needed <= {"libc.so.6", "libdl.so.2", "libpthread.so.0"}, needed
    assert "Library soname: [libgpumutex.so]" in dyn
    # dl* calls bound to their oldest versions (src/preload/compat.h), so a
    # library built on glibc >= 2.34 still loads on an older one.
    syms = subprocess.run(["objdump", "-T", str(LIB)], capture_output=True,
                          text=True, check=True).stdout
    for line in syms.splitlines():
        if re.search(r"\bdl(open|close|error|addr1|info|iterate_phdr)$",
                     line):
            assert "GLIBC_2.34" not in line, line


def test_standalone_one_line_build(env, tmp_path):
    """The build line the README (and docs/preload.md) give, without make:
    the library it makes does the job (test_gate.py checks it passes the
    load gate)."""
    shutil.copytree(REPO / "src", tmp_path / "src")
    out = tmp_path / "libgpumutex.so"
    r = subprocess.run(readme_build_line(), shell=True, cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    e = dict(env, LD_PRELOAD=str(out))
    assert_caught(env, run([T / "cuprobe", "dlopen"], e, preload=False))
    # Built without optimisation, RTLD_NEXT must still be the caller's.
    res = run([T / "nextprobe", "plain"], e, preload=False)
    assert kv(res.stdout)["shim-next-shared"] == "2"
