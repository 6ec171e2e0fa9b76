#!/usr/bin/env python3
"""Checker of the GPU scenario set: tests/gpu/check.py OUTDIR

Reads what tests/gpu/run.sh left in OUTDIR: one folder per scenario with
`journal` (tests/gpu/gj.py format), `jobs.tsv` (tag, expectations, what)
and per job TAG.rc / TAG.out / TAG.err. Proves from the journal that no two
jobs' GPU intervals overlapped (tests/lib/journal.check_exclusive), checks
every job's own result and exit status and the scenario's extra claims,
prints two Markdown tables (scenarios; jobs), writes them to
OUTDIR/summary.md, and exits 1 if anything failed.

Expectations (comma-separated in jobs.tsv):
  gpu       used the GPU: begin and end from every process that began,
            cvd=0 and order=PCI_BUS_ID, all results ok=1, exit status 0
  lease     may hold the lease without a context (is_available): results
            ok=1, exit 0; begin/end checked like gpu where present
  killed    SIGKILLed on purpose: began, exit status 137, no end needed
  mustwait  must have printed gpumutex's waiting line (it queued)
  nowait    must not have printed it; must finish while the holder holds
  holder    the job that holds the GPU while `nowait` commands run
  result    must journal result ok=1 (implied by gpu and lease)
  whileidle must not queue, and must end before the harness's idle-end
            (it ran while query processes idled, holding nothing)
Harness events: `nvml` (NVML's compute processes on the GPU, `apps`, must
number exactly `want`: nothing else touched the GPU), `release`,
`idle-end`.
"""

import collections
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lib"))
import journal as J  # noqa: E402

WAIT_RE = re.compile(r"gpumutex: pid (\d+) waits for")
SKIP_RE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")
META = {"ev", "pid", "job", "tag", "role", "t", "ok", "dev"}


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def secs(ns):
    return f"{ns / 1e9:.2f} s"


def check_job(d, tag, expect, events):
    """Returns (status, notes, failures) for one job."""
    notes, fails = [], []
    rc_text = read(os.path.join(d, tag + ".rc")).strip()
    err = read(os.path.join(d, tag + ".err"))
    if rc_text.startswith("skip"):
        return "SKIP", [rc_text], []
    rc = int(rc_text) if re.fullmatch(r"-?\d+", rc_text) else None
    mine = [e for e in events if e.get("tag") == tag]
    begins = J.by_kind(mine, "begin")
    ends = J.by_kind(mine, "end")
    results = J.by_kind(mine, "result")
    waits = WAIT_RE.findall(err)

    if rc != 0 and "killed" not in expect:
        m = SKIP_RE.search(err)
        if m:
            return "SKIP", [f"module {m.group(1)} not installed"], []
    if "killed" in expect:
        if rc != 137:
            fails.append(f"exit status {rc_text or 'missing'}, expected 137 (SIGKILL)")
        if not begins:
            fails.append("never began using the GPU")
        else:
            notes.append(f"killed after {len(J.by_kind(mine, 'tick'))} ticks")
    elif rc is None:
        fails.append("no exit status (never finished)")
    elif rc == 124 or rc == 137:
        fails.append(f"timed out (exit status {rc})")
    elif rc != 0:
        fails.append(f"exit status {rc}")

    if "gpu" in expect or ("lease" in expect and begins):
        if not begins:
            fails.append("no begin in the journal")
        pids_b = {e["pid"] for e in begins}
        pids_e = {e["pid"] for e in ends}
        if "killed" not in expect and pids_b - pids_e:
            fails.append(f"pids {sorted(pids_b - pids_e)} began but never ended")
        for e in begins:
            if e.get("cvd") != "0" or e.get("order") != "PCI_BUS_ID":
                fails.append(f"pid {e['pid']} ({e.get('role')}) ran with "
                             f"CUDA_VISIBLE_DEVICES={e.get('cvd')} "
                             f"CUDA_DEVICE_ORDER={e.get('order')}")
            if e.get("pycvd") not in (None, "0"):
                notes.append(f"os.environ CUDA_VISIBLE_DEVICES={e.get('pycvd')} "
                             f"in pid {e['pid']}")
        jobs = {e["job"] for e in begins}
        if len(jobs) > 1:
            fails.append(f"processes of one job ran under job ids {sorted(jobs)}")
        if begins and ends:
            notes.append("GPU interval " + secs(max(e.t for e in ends)
                                                - min(e.t for e in begins)))
        roles = sorted({e.get("role", "main") for e in begins})
        if roles != ["main"]:
            notes.append("used the GPU: " + ", ".join(roles))
        for e in begins:
            if "pre" in e and "init" in e and e.get("role") == "main":
                notes.append("cuInit returned after "
                             + secs(int(e["init"]) - int(e["pre"])))
    if "gpu" in expect or "lease" in expect or "result" in expect:
        if not results:
            fails.append("no result line")
        bad = [e for e in results if e.get("ok") != "1"]
        for e in bad:
            fails.append(f"{e.get('role')} (pid {e['pid']}) failed its check: "
                         + " ".join(f"{k}={v}" for k, v in e.items()
                                    if k not in META))
        if results and not any(e.get("role", "main") == "main" for e in results):
            fails.append("no result from the main process")
        for e in results:
            extra = [f"{k}={v}" for k, v in e.items() if k not in META]
            if extra and e.get("ok") == "1":
                notes.append((e.get("role") + ": " if e.get("role") != "main"
                              else "") + " ".join(extra))
    for e in J.by_kind(mine, "info"):
        extra = [f"{k}={v}" for k, v in e.items() if k not in META]
        if extra and "child" not in e and "epoch" not in e:
            notes.append("info: " + " ".join(extra))

    if waits:
        notes.append(f"queued ({len(waits)} waiting line{'s' * (len(waits) > 1)})")
    elif "gpu" in expect or "lease" in expect:
        notes.append("did not queue")
    if "mustwait" in expect and not waits:
        fails.append("expected to queue, but printed no waiting line")
    if "whileidle" in expect and waits:
        fails.append("queued, although only query processes were alive")
    if "nowait" in expect and waits:
        fails.append("waited for the GPU although it never uses CUDA")
    other = [ln for ln in err.splitlines()
             if ln.startswith("gpumutex:") and not WAIT_RE.match(ln)]
    for ln in other:
        fails.append("stderr: " + ln[:160])
    return ("FAIL" if fails else "PASS"), notes, fails


def scenario_checks(name, d, jobs, events):
    """Scenario-wide claims. Returns (notes, failures)."""
    notes, fails = [], []
    try:
        spans = J.check_exclusive(events)
        n = sum(len(v) for v in spans.values())
        notes.append(f"{n} jobs' GPU intervals, no two overlap")
    except AssertionError as e:
        fails.append(str(e))
    by_tag = collections.defaultdict(list)
    for e in events:
        by_tag[e.get("tag")].append(e)

    def first(tag, kind):
        ts = [e.t for e in by_tag[tag] if e["ev"] == kind]
        return min(ts) if ts else None

    def last(tag, kind):
        ts = [e.t for e in by_tag[tag] if e["ev"] == kind]
        return max(ts) if ts else None

    for e in J.by_kind(events, "kill"):
        victim = e.get("tag")
        for tag, expect, _ in jobs:
            if "gpu" in expect and tag != victim:
                b = first(tag, "begin")
                if b is None:
                    continue
                if b <= e.t:
                    fails.append(f"{tag} began before {victim} was killed")
                else:
                    notes.append(f"{tag} began {secs(b - e.t)} after the "
                                 f"SIGKILL of {victim}")
    for e in J.by_kind(events, "nvml"):
        apps = [a for a in e.get("apps", "-").split(":") if a and a != "-"]
        want = int(e.get("want", "0"))
        why = e.get("why", "").replace("_", " ")
        if len(apps) != want:
            fails.append(f"NVML listed {len(apps)} compute processes "
                         f"({', '.join(apps) or 'none'}) where {want} "
                         f"should be ({why})")
        else:
            notes.append(f"NVML: {len(apps)} compute process"
                         f"{'es' * (len(apps) != 1)} ({why})")
    idle_end = [e.t for e in J.by_kind(events, "idle-end")]
    for tag, expect, _ in jobs:
        if "whileidle" not in expect:
            continue
        e_end = last(tag, "end")
        if not idle_end or e_end is None or e_end >= min(idle_end):
            fails.append(f"{tag} did not finish while the query processes "
                         f"idled")
        else:
            notes.append(f"{tag} ran while the query processes idled")
    for tag, expect, _ in jobs:
        if tag != "qcg":
            continue
        cpu = [e.t for e in by_tag[tag] if e["ev"] == "info"
               and e.get("stage") == "cpu-done"]
        rel = [e.t for e in J.by_kind(events, "release")]
        b = first(tag, "begin")
        if cpu and rel and b is not None and cpu[0] < rel[0] < b:
            notes.append("qcg finished its CPU work while the GPU was held "
                         "and began only after the holder let go")
        else:
            fails.append("qcg: CPU work not done before the release, or "
                         "began before it")
    holders = [t for t, x, _ in jobs if "holder" in x]
    for h in holders:
        hb, he = first(h, "begin"), last(h, "end")
        if hb is None or he is None:
            fails.append(f"holder {h} has no begin/end")
            continue
        for tag, expect, _ in jobs:
            if "nowait" not in expect:
                continue
            s, f = first(tag, "cmd-start"), last(tag, "cmd-done")
            if s is None or f is None:
                fails.append(f"{tag}: no cmd-start/cmd-done")
            elif not (hb < s and f < he):
                fails.append(f"{tag} ran [{s}, {f}] outside the holder's "
                             f"[{hb}, {he}]")
        nowaits = [t for t, x, _ in jobs if "nowait" in x]
        if nowaits and not any(f.startswith(("holder", "stderr")) or
                               "outside" in f for f in fails):
            notes.append(f"{len(nowaits)} commands without CUDA finished "
                         f"while {h} held the GPU (it held it "
                         f"{secs(he - hb)}, released only after they returned)")
    return notes, fails


def main():
    out = sys.argv[1]
    scen_rows, job_rows, failed = [], [], False
    all_events = []
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        spec = os.path.join(d, "jobs.tsv")
        if not os.path.isfile(spec):
            continue
        jobs = [tuple((ln.split("\t") + ["", ""])[:3])
                for ln in read(spec).splitlines() if ln.strip()]
        try:
            events = J.parse(os.path.join(d, "journal"))
        except FileNotFoundError:
            events = []
        all_events += events
        counts = collections.Counter()
        for tag, expect, what in jobs:
            status, notes, fails = check_job(d, tag, expect, events)
            counts[status] += 1
            job_rows.append((name, tag, what, status,
                             "; ".join(fails + notes)))
        snotes, sfails = scenario_checks(name, d, jobs, events)
        extra = read(os.path.join(d, "notes.txt")).strip()
        if extra:
            snotes.append(extra)
        if counts["FAIL"] or sfails:
            status = "FAIL"
        elif counts["PASS"]:
            status = "PASS" + (f" ({counts['SKIP']} skipped)"
                               if counts["SKIP"] else "")
        else:
            status = "SKIP"
        failed |= status == "FAIL"
        scen_rows.append((name, f"{len(jobs)}: " + ", ".join(t for t, _, _ in jobs),
                          status, "; ".join(sfails + snotes)))
    # All scenarios ran one after another on one GPU: the whole run is one
    # more exclusivity claim.
    try:
        J.check_exclusive(all_events)
        whole = "no two jobs' GPU intervals overlap across all scenarios"
    except AssertionError as e:
        whole, failed = f"FAIL across scenarios: {e}", True

    lines = ["| scenario | jobs | result | notes |", "| --- | --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in scen_rows]
    lines += ["", "| scenario | job | what | result | notes |",
              "| --- | --- | --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} | {d} | {e.replace('|', '/')} |"
              for a, b, c, d, e in job_rows]
    lines += ["", whole, "", "overall: " + ("FAIL" if failed else "PASS")]
    text = "\n".join(lines) + "\n"
    env = read(os.path.join(out, "env.txt"))
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(env + "\n" + text)
    sys.stdout.write(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
