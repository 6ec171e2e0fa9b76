#!/usr/bin/env python3
"""Run inside a Debian root by tests/system/wheel.sh: a contended pair of
jobs through the gpumutex-run that the wheel installed into ./venv, on the
fake driver (./libcuda.so.1) with one managed GPU; the journal must show
that they took turns. The other console commands must run too."""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import journal as J  # noqa: E402

venv = os.path.join(here, "venv", "bin")
journal = os.path.join(here, "journal")
env = dict(os.environ, LD_LIBRARY_PATH=here, FAKECUDA_JOURNAL=journal,
           FAKECUDA_NUM_DEVICES="2")
job = [os.path.join(venv, "gpumutex-run"), "--visible-devices", "0",
       "--lock-dir", "/tmp/gm-wheel-locks", "--",
       os.path.join(here, "client"), "20"]
procs = [subprocess.Popen(job, env=env) for _ in range(2)]
codes = [p.wait() for p in procs]
assert codes == [0, 0], codes
ev = J.parse(journal)
J.check_exclusive(ev)
inits = J.by_kind(ev, "init")
assert len(inits) == 2 and all(e["cvd"] == "0" for e in inits), inits
for argv in ([os.path.join(venv, "gpumutex"), "--version"],
             [os.path.join(venv, "gpu-offload"), "--help"]):
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert r.returncode == 0, (argv, r.stderr)
print(f"wheel: ok: a contended pair took turns through the wheel's "
      f"gpumutex-run; libc {os.confstr('CS_GNU_LIBC_VERSION')}")
