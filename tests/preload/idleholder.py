"""A CUDA "notebook" on the driver API (ctypes), for tests/test_suspend.py:
takes a context on device 0, allocates and synchronises, prints "ready",
then waits for a line on stdin (idle: no GPU call) and synchronises again,
printing "sync=<CUresult>"; on the line "teardown" it frees its
allocation and releases its context instead (what the CUDA runtime does at
exit), prints "teardown=<CUresult>,<CUresult>" and ends. With argument "threads", a second thread makes
the call after the line while the main thread makes one too; with "ipc",
it exports its allocation through CUDA IPC first."""
import ctypes
import sys
import threading

cu = ctypes.CDLL("libcuda.so.1")
dev = ctypes.c_int()
ctx = ctypes.c_void_p()
ptr = ctypes.c_ulonglong()
assert cu.cuInit(0) == 0
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)) == 0
assert cu.cuCtxSynchronize() == 0
if "ipc" in sys.argv[1:]:
    # Export the allocation through CUDA IPC (the fake's stub fails,
    # which does not matter: the library marks the process at the call).
    handle = ctypes.create_string_buffer(64)
    cu.cuIpcGetMemHandle(handle, ptr)
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "quit":
        break
    if line.strip() == "teardown":
        r1 = cu.cuMemFree_v2(ptr)
        r2 = cu.cuDevicePrimaryCtxRelease(dev)
        print("teardown=%d,%d" % (r1, r2), flush=True)
        break
    if "threads" in sys.argv[1:]:
        res = []
        def call():
            cu.cuCtxSetCurrent(ctx)
            res.append(cu.cuCtxSynchronize())
        t = threading.Thread(target=call)
        t.start()
        res.append(cu.cuCtxSynchronize())
        t.join()
        print("sync=%d" % max(res), flush=True)
    else:
        print("sync=%d" % cu.cuCtxSynchronize(), flush=True)
