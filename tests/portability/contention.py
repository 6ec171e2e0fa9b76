#!/usr/bin/env python3
"""Run inside the target root: many clients through libgpumutex.so and the
fake driver contend for 2 fake GPUs; the journal must show no overlap and
every client's cuInit must have seen exactly one leased GPU."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import journal as J  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
journal = os.path.join(here, "journal")
if os.path.exists(journal):
    os.unlink(journal)
env = dict(os.environ, LD_PRELOAD=os.path.join(here, "libgpumutex.so"),
           LD_LIBRARY_PATH=here, GPUMUTEX_VISIBLE_DEVICES="0,1",
           GPUMUTEX_LOCK_DIR="/tmp/gm-portability", FAKECUDA_JOURNAL=journal,
           FAKECUDA_NUM_DEVICES="4", GPUMUTEX_QUIET="1")
n = 12
procs = [subprocess.Popen([os.path.join(here, "client"), "30"], env=env)
         for _ in range(n)]
codes = [p.wait() for p in procs]
assert codes == [0] * n, codes
ev = J.parse(journal)
J.check_exclusive(ev)
inits = J.by_kind(ev, "init")
assert len(inits) == n, inits
assert all(e["cvd"] in ("0", "1") and e["order"] == "PCI_BUS_ID" for e in inits), inits
assert len({e["job"] for e in inits}) == n
print(f"portability: {n} clients, 2 GPUs, no overlap; "
      f"libc {os.confstr('CS_GNU_LIBC_VERSION')}")

# Global preloading, as /etc/ld.so.preload does it (inside this root only):
# programs without CUDA run unchanged, CUDA clients still take turns.
preload = "/etc/ld.so.preload"
with open(preload, "w") as f:
    f.write(os.path.join(here, "libgpumutex.so") + "\n")
try:
    plain = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    for argv in (["/bin/sh", "-c", "echo hi"], ["/bin/ls", "/"],
                 [sys.executable, "-c", "print(2 + 2)"]):
        r = subprocess.run(argv, env=plain, capture_output=True, text=True)
        assert r.returncode == 0 and r.stderr == "", (argv, r.stderr)
    os.unlink(journal)
    procs = [subprocess.Popen([os.path.join(here, "client"), "10"], env=plain)
             for _ in range(6)]
    assert [p.wait() for p in procs] == [0] * 6
    ev = J.parse(journal)
    J.check_exclusive(ev)
    assert all(e["cvd"] in ("0", "1") for e in J.by_kind(ev, "init"))
finally:
    os.unlink(preload)
print("portability: global preloading (/etc/ld.so.preload): shells and "
      "Python unchanged, CUDA clients queued")
