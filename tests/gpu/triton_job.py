#!/usr/bin/env python3
"""Triton job of the GPU scenario set (tests/gpu/run.sh): a vector-add
kernel compiled on its first launch (run.sh gives it an empty
TRITON_CACHE_DIR), checked exactly against torch. Journal: tests/gpu/gj.py.
"""

import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gj  # noqa: E402


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x + y, mask=m)


def main():
    t_pre = gj.now()
    n = (1 << 24) + 17
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    torch.cuda.synchronize()
    gj.begin(pre=t_pre)
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    t = gj.now()
    add[grid](x, y, out, n, BLOCK=1024)  # compiles here
    torch.cuda.synchronize()
    first_ms = (gj.now() - t) // 10**6
    ok = bool(torch.equal(out, x + y))
    for _ in range(50):
        add[grid](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    ok = ok and bool(torch.equal(out, x + y))
    gj.end()
    return gj.result(ok, triton=triton.__version__, first_launch_ms=first_ms)


if __name__ == "__main__":
    sys.exit(main())
