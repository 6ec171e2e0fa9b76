"""predcheck.py DIR... - the machine profile's predictions against what
the calls took: every decided call of the traces in DIR (a run forced to
the CPU checks the CPU predictions, one forced to the GPU the GPU's; the
trace records both predictions, src/offload/trace.h), grouped by
operation, precision and dimensions: calls, the median measured time,
the median prediction, and measured / predicted. Last, per device, the
median and worst |measured / predicted - 1| over the groups. The GPU's
prediction includes the copies, as the model's does."""
import collections
import pathlib
import statistics
import struct
import sys

REC, HDR = 320, 64
OWN = {1, 2, 3, 20, 21, 22}     # small, nested, workspace, measured, copy-engine, paused


def records(d):
    for f in sorted(pathlib.Path(d).glob("gpo-*.trace")):
        data = f.read_bytes()
        for off in range(HDR, len(data) - REC + 1, REC):
            r = data[off:off + REC]
            kind, device = r[16], r[17]
            reason = struct.unpack_from("<H", r, 26)[0]
            if kind != 0 or reason in OWN:
                continue
            dur = struct.unpack_from("<q", r, 8)[0] / 1e9
            name = r[40:56].split(b"\0")[0].decode()
            dims = struct.unpack_from("<4q", r, 56)
            t_cpu, t_gpu = struct.unpack_from("<2d", r, 112)
            yield (device, chr(r[19]) + name, dims), dur, t_gpu if device else t_cpu


def main(dirs):
    groups = collections.defaultdict(list)
    for d in dirs:
        for key, dur, pred in records(d):
            groups[key].append((dur, pred))
    print("%-4s %-10s %-22s %6s %12s %12s %9s" % ("dev", "op", "m x n x k", "calls",
                                                 "measured", "predicted", "meas/pred"))
    dev_err = collections.defaultdict(list)
    for (dev, op, dims), v in sorted(groups.items()):
        meas = statistics.median(x for x, _ in v)
        pred = statistics.median(p for _, p in v)
        ratio = meas / pred if pred > 0 else float("nan")
        print("%-4s %-10s %-22s %6d %10.4f s %10.4f s %8.2fx" % (
            "gpu" if dev else "cpu", op, "x".join(str(x) for x in dims[:3]), len(v),
            meas, pred, ratio))
        if pred > 0:
            dev_err["gpu" if dev else "cpu"].append((abs(ratio - 1), op, dims))
    for dev, e in sorted(dev_err.items()):
        e.sort()
        w = e[-1]
        print("%s: measured vs predicted over %d groups: median %.1f%%, worst %.1f%% (%s %s)" % (
            dev, len(e), 100 * e[len(e) // 2][0], 100 * w[0], w[1],
            "x".join(str(x) for x in w[2][:3])))


if __name__ == "__main__":
    main(sys.argv[1:])
