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
