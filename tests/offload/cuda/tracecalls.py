"""tracecalls.py DIR - one line per GPU call of the traces in DIR
(src/offload/trace.h's records): operation, dimensions, the whole call,
copy in, copy out (with commit), and the rest (allocation, kernel,
frontend), in ms. For the device runs (gemm_device.sh)."""
import pathlib
import struct
import sys

REC, HDR = 320, 64
for f in sorted(pathlib.Path(sys.argv[1]).glob("gpo-*.trace")):
    data = f.read_bytes()
    for off in range(HDR, len(data) - REC + 1, REC):
        r = data[off:off + REC]
        dur = struct.unpack_from("<q", r, 8)[0] / 1e6
        kind, device = r[16], r[17]
        prec = chr(r[19])
        name = r[40:56].split(b"\0")[0].decode()
        dims = struct.unpack_from("<4q", r, 56)
        cin, cout = struct.unpack_from("<2d", r, 128)
        if kind != 0 or device != 1 or not (cin or cout):
            continue
        print(f"{f.name} {prec}{name} {dims[0]}x{dims[1]}x{dims[2]} call {dur:.1f} "
              f"in {1e3 * cin:.1f} out {1e3 * cout:.1f} "
              f"rest {dur - 1e3 * (cin + cout):.1f} ms")
