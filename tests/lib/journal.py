"""Journals written by test jobs (tests/lease/lease-holder.c) and by the fake
driver (tests/fakecuda), and the checks that prove exclusion and order from
them.

A journal is a text file of lines `key=value key=value ...`, one event per
line, appended by many processes with one write(2) each. Every line has
`ev`, `pid`, `job` and `t` (CLOCK_MONOTONIC nanoseconds, comparable across
processes of one machine). Events:

  wait   pid job seq ...       a process started waiting (lease-holder)
  grant  pid job seq devs      devices locked; written while the ticket is
                               still held, so grant lines of jobs that
                               compete appear in the order of the grants
  join   pid job devs          joined the job's live lease
  init   pid job cvd order     the fake driver's cuInit ran
  begin  pid job dev [lease]   started using physical device `dev`
  tick   pid job dev [lease]   was using it at time t
  end    pid job dev [lease]   stopped using it
  fail   pid job rc            acquire failed
  ckpt   pid job dev           the fake driver checkpointed the process's
                               memory on `dev` (it no longer holds it)
  restore pid job dev          ... and restored it (it holds it again)

Holding is proven by begin/tick/end points: if two jobs have points on one
device whose spans interleave, both held it at once.
"""

import collections


class Event(dict):
    @property
    def t(self):
        return int(self["t"])


def parse(path, complete_only=False):
    """All events of the journal at `path`. With complete_only, a last line
    still being written (no newline yet) is left out, for readers that
    follow a journal while it grows."""
    events = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if complete_only and not line.endswith("\n"):
                break
            line = line.strip()
            if not line:
                continue
            ev = Event()
            for field in line.split(" "):
                if "=" not in field:
                    raise AssertionError(f"{path}:{n}: malformed line {line!r}")
                k, v = field.split("=", 1)
                ev[k] = v
            for k in ("ev", "pid", "t"):
                if k not in ev:
                    raise AssertionError(f"{path}:{n}: no {k} in {line!r}")
            events.append(ev)
    return events


def holdings(events):
    """Map (device, owner) -> sorted list of (t, event) points of use.

    The owner is the lease id where the journal has one (lease-holder), else
    the job id (the fake driver), so that two leases of one job in turn are
    not mistaken for one long holding."""
    points = collections.defaultdict(list)
    for e in events:
        if e["ev"] in ("begin", "tick", "end", "ckpt", "restore"):
            owner = e.get("lease") or e.get("job")
            points[(int(e["dev"]), owner)].append((e.t, e))
    for v in points.values():
        v.sort(key=lambda p: p[0])
    return points


def _segments(pts):
    """Split one owner's points of use on a device into the stretches it
    held the device: each process's points from one use to its checkpoint
    ("ckpt" ends a stretch; its next point, a restore, starts another),
    then the stretches of the owner's processes merged where they meet."""
    per_pid = collections.defaultdict(list)
    for t, e in pts:
        per_pid[e["pid"]].append((t, e))
    segs = []
    for pid, pp in per_pid.items():
        cur = None
        for t, e in pp:
            if cur is None and e["ev"] == "end":
                # The exit of a checkpointed process: it used nothing.
                continue
            if cur is None:
                cur = [t, t, pid]
            cur[1] = t
            if e["ev"] == "ckpt":
                segs.append(cur)
                cur = None
        if cur is not None:
            segs.append(cur)
    segs.sort()
    merged = []
    for s in segs:
        if merged and s[0] <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], s[1])
        else:
            merged.append(list(s))
    return merged


def check_exclusive(events):
    """Raise AssertionError if two owners used one device at the same time.

    For each device, every owner's points of use span [first, last], cut
    where a process of it was checkpointed (from "ckpt" to its "restore"
    it held nothing). A killed process simply stops writing, so its span
    ends at its last point, which it really held: the check stays sound
    without knowing when it died. Two spans on one device must not
    overlap."""
    spans = collections.defaultdict(list)
    for (dev, owner), pts in holdings(events).items():
        for b, e, pid in _segments(pts):
            spans[dev].append((b, e, owner, pid))
    for dev, ss in spans.items():
        ss.sort()
        latest = None  # the span reaching furthest so far
        for b in ss:
            if latest is not None and b[0] <= latest[1]:
                a = latest
                raise AssertionError(
                    f"device {dev}: owner {a[2]} (pid {a[3]}) used it "
                    f"until t={a[1]} but owner {b[2]} (pid {b[3]}) started "
                    f"at t={b[0]}: two jobs held one device at once")
            if latest is None or b[1] > latest[1]:
                latest = b
    return spans


def grants(events):
    return [e for e in events if e["ev"] == "grant"]


def check_grant_order(events):
    """Grants of competing jobs must follow ticket (arrival) order."""
    seqs = [int(e["seq"]) for e in grants(events)]
    if seqs != sorted(seqs):
        raise AssertionError(f"grants out of arrival order: {seqs}")
    return seqs


def by_kind(events, kind):
    return [e for e in events if e["ev"] == kind]
