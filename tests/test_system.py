"""The machine-wide mode end to end, in Debian roots: `gpumutex install
--system` writes /etc/ld.so.preload and /etc/gpumutex.conf there, and the
fake driver's journal proves that nothing escapes the queue (env -i, an
empty subprocess environment, LD_PRELOAD unset, a device or a lock
directory outside the file's, a set-user-ID program), that static
programs and programs without CUDA are untouched, that every bad
configuration file fails closed without a hang, that doctor tells the
truth, and that uninstall restores /etc/ld.so.preload byte for byte.

The roots are the bullseye root of `make portability` and the trixie root
of `make distro-check` (tools/mkroot.sh: built once with debootstrap,
then cached in .portability/). Each run works on a throw-away overlay of
the root (tests/system/run.sh), so the cached roots stay as they were, and
this machine's own /etc is never touched. The scenarios themselves are
tests/system/scenarios.py, run inside the root by its own python3; each
test here reports one of them.
"""

import json
import os
import shutil
import subprocess

import pytest

from conftest import REPO

SUITES = {
    # The package lists of tools/portability.sh and tools/distro-build.sh,
    # so that the cached roots are shared with those targets.
    "bullseye": ["gcc", "libc6-dev", "make", "python3", "python3-venv"],
    "trixie": None,  # .ci/packages, above the host-only marker
}

SCENARIOS = [
    "setup",
    "install_dry_run_changes_nothing",
    "install_puts_the_library_first_and_keeps_every_line",
    "install_twice_is_install_once",
    "install_needs_root",
    "env_i_queues",
    "subprocess_with_empty_env_queues",
    "unset_ld_preload_queues",
    "device_outside_the_managed_set_is_refused",
    "other_lock_dir_is_refused",
    "setuid_program_queues_under_the_file_only",
    "static_program_is_untouched",
    "programs_without_cuda_run_unchanged",
    "the_library_is_loaded_everywhere",
    "bad_config_files_fail_closed",
    "non_enforcing_file_gives_defaults",
    "doctor_effective",
    "doctor_broken_setups",
    "uninstall_restores_ld_so_preload_exactly",
]


def ci_packages():
    out = []
    with open(os.path.join(REPO, ".ci", "packages")) as f:
        for line in f:
            if line.strip().startswith("# -- host-only"):
                break
            line = line.split("#", 1)[0].strip()
            if line:
                out.append(line)
    return out


def why_not():
    """The reason this machine cannot run the roots, or None. CI runs as
    root with debootstrap (.ci/packages), where none of these hold."""
    if os.geteuid() != 0:
        return "needs root (chroot, mount namespaces)"
    if not shutil.which("unshare"):
        return "needs unshare(1) (util-linux)"
    r = subprocess.run(["unshare", "--mount", "--propagation", "private",
                        "true"], capture_output=True)
    if r.returncode != 0:
        return "mount namespaces are not permitted here: " + r.stderr.decode()
    if "overlay" not in open("/proc/filesystems").read():
        subprocess.run(["modprobe", "overlay"], capture_output=True)
        if "overlay" not in open("/proc/filesystems").read():
            return "the kernel has no overlayfs"
    return None


_results = {}


def results(suite, tmp_path_factory):
    if suite in _results:
        return _results[suite]
    reason = why_not()
    if reason:
        pytest.skip(reason)
    pkgs = SUITES[suite] or ci_packages()
    r = subprocess.run(["bash", "tools/mkroot.sh", suite, *pkgs], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, f"cannot make the {suite} root: {r.stderr}"
    root = os.path.join(REPO, r.stdout.strip())
    out = tmp_path_factory.mktemp(f"system-{suite}")
    r = subprocess.run(["bash", "tests/system/run.sh", root, str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=1800)
    path = out / "results.json"
    assert path.exists(), f"no results (rc {r.returncode}):\n{r.stdout}\n{r.stderr}"
    _results[suite] = json.loads(path.read_text())
    return _results[suite]


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("suite", list(SUITES))
def test_machine_wide(suite, name, tmp_path_factory):
    res = results(suite, tmp_path_factory)
    assert name in res, f"scenario {name} did not run (setup: {res.get('setup')})"
    assert res[name]["ok"], res[name].get("detail")
