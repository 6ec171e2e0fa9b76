#!/usr/bin/env python3
"""A PyTorch job of the gpu-offload benchmark's gpumutex part (run.py),
started with libgpumutex.so preloaded.

    torchjob.py hold    first CUDA work, prints "ready", waits for stdin EOF
    torchjob.py once    prints "start" just before its first CUDA call and
                        "granted" once that work is synchronised, then exits

The harness timestamps the lines as it reads them (one clock for all
processes); `torch` is imported before "start", so the wait measured is
the CUDA start and gpumutex's queue, not the import.
"""
import sys

import torch


def work():
    x = torch.ones((256, 256), device="cuda")
    y = (x @ x).sum().item()
    torch.cuda.synchronize()
    return y == 256.0 * 256 * 256


def main():
    mode = sys.argv[1]
    print("start", flush=True)
    ok = work()
    if mode == "hold":
        print("ready" if ok else "wrong", flush=True)
        sys.stdin.read()
    else:
        print("granted" if ok else "wrong", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
