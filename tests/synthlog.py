"""Write synthetic event logs (docs/report.md's format) into a lock
directory, for report tests with known numbers and for the picture."""

import os
import random

NS = 1_000_000_000


class Log:
    def __init__(self, lockdir):
        self.lockdir = lockdir
        self.lines = {}

    def add(self, ev, t, uid, pid, job, **fields):
        cmd = fields.pop("cmd", "")
        f = {"t": int(t * NS), "mono": int(t * NS), "uid": uid, "pid": pid,
             "job": job}
        for k, v in fields.items():
            if k in ("arrived", "woke"):
                v = int(v * NS)
            elif k == "waited":
                v = int(v * NS)
            f[k] = v
        body = " ".join(f"{k}={v}" for k, v in f.items())
        self.lines.setdefault(uid, []).append((t, f"gm1 {ev} {body} cmd={cmd}\n"))

    def lease(self, uid, job, dev, start, end, waited=0.0, cmd="train.py",
              lease=None, woke=None, pid=None, ticket=None):
        pid = pid or random.randint(1000, 4_000_000)
        lease = lease or "%016x" % random.getrandbits(60)
        self.add("grant", start, uid, pid, job, lease=lease, dev=dev,
                 ticket=ticket or random.getrandbits(40), want=1, cand=dev, arrived=start - waited,
                 waited=waited, place=0, queued=int(waited > 0),
                 woke=woke or 0, rang=dev if woke else "-", cmd=cmd)
        if end is not None:
            self.add("exit", end, uid, pid, job, lease=lease, dev=dev)
        return lease

    def write(self):
        for uid, lines in self.lines.items():
            d = os.path.join(self.lockdir, "job", str(uid))
            os.makedirs(d, exist_ok=True)
            os.chmod(os.path.join(self.lockdir, "job"), 0o1777)
            os.chmod(d, 0o755)
            p = os.path.join(d, "events.log")
            with open(p, "w") as f:
                f.writelines(line for _, line in sorted(lines))
            os.chown(d, uid, uid)
            os.chown(p, uid, uid)
