#!/usr/bin/env python3
"""split_wrappers.py IN N OUTDIR - cut the generated wrappers.c of
libgpuoffload.so (tools/gen_offload.py) into N files OUTDIR/wrappers-K.c
that compile in parallel: the build's longest compilation, cut so that
`make` stays quick on two cores.

Every part gets the file's head (up to its first wrapper) and every
`static inline` flops helper (an unused one costs nothing); the wrappers,
each a block from its `typedef` line to the next, are dealt out in order,
about as many lines to each part. The parts together define exactly what
the whole did (the load gate compares the library's exports with the list).
Writes a part only when its text changed, so that make rebuilds only it."""
import os
import sys


def main(path, n, outdir):
    with open(path) as f:
        lines = f.read().split("\n")
    head, helpers, blocks = [], [], []
    i = 0
    while i < len(lines) and not lines[i].startswith(("typedef ", "static inline ")):
        head.append(lines[i])
        i += 1
    cur = None
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("static inline "):
            # a helper: up to its closing brace at column 0
            j = i
            while lines[j] != "}":
                j += 1
            helpers += lines[i:j + 1] + [""]
            i = j + 1
            continue
        if ln.startswith("typedef "):
            cur = []
            blocks.append(cur)
        if cur is None:
            head.append(ln)
        else:
            cur.append(ln)
        i += 1
    total = sum(len(b) for b in blocks)
    parts, acc = [[] for _ in range(n)], 0
    for b in blocks:
        parts[min(n - 1, acc * n // max(total, 1))].extend(b)
        acc += len(b)
    for k, body in enumerate(parts):
        text = "\n".join(head + helpers + body) + "\n"
        out = os.path.join(outdir, f"wrappers-{k}.c")
        try:
            with open(out) as f:
                if f.read() == text:
                    continue
        except OSError:
            pass
        with open(out + ".tmp", "w") as f:
            f.write(text)
        os.replace(out + ".tmp", out)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: split_wrappers.py IN N OUTDIR")
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
