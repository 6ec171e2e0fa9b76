"""idle.py - the CUDA backend's pool gives its cached device memory back
once idle (run by tests/offload/cuda/device.sh under gpu-offload with the
GPU forced): a dgemm n=4096 leaves its three buffers (384 MiB) cached;
this process's GPU memory is read from nvidia-smi right after, and again
after the pool's idle bound (5 s) and a margin."""
import os
import subprocess
import time

import numpy as np


def used_mib():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        pid, mib = [x.strip() for x in line.split(",")]
        if int(pid) == os.getpid():
            return int(mib)
    return 0


n = 4096
a = np.ones((n, n))
c = a @ a
assert c[0, 0] == n
t = time.time()
print(f"idle: after the dgemm: {used_mib()} MiB of GPU memory in this process")
time.sleep(8)
print(f"idle: {time.time() - t:.1f} s later: {used_mib()} MiB")
