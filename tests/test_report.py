"""gpumutex report: exact numbers on a synthetic log, and the HTML page
rendered by a real browser (headless Chromium)."""

import json
import os
import random
import shutil
import struct
import subprocess
import zlib

import pytest

from conftest import BUILD
from synthlog import Log

GPUMUTEX = os.path.join(BUILD, "gpumutex")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def report(lockdir, *args):
    p = subprocess.run([GPUMUTEX, "report", "--lock-dir", lockdir] + list(args),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p


def known_log(lockdir):
    """Times in seconds since the epoch; the numbers they must give are
    worked out in the test."""
    L = Log(lockdir)
    # GPU 0: root's lease 1000-1100; root's job b waits from 1010 and is
    # granted at 1130 (without a wake-up by GPU 0: 30 s idle while it
    # waited), holds to 1230.
    L.lease(0, "a", "0", 1000, 1100)
    L.add("wait", 1010, 0, 22, "b", ticket=2, want=1, cand="0", ahead=1,
          head=0, arrived=1010)
    L.lease(0, "b", "0", 1130, 1230, waited=120, pid=22, ticket=2)
    # GPU 1: user 4001's job d holds 1200-1400; its job c wants two of
    # GPUs 0,1 from 1240 and gives up at 1300 (GPU 0 idle all the while).
    L.lease(4001, "d", "1", 1200, 1400, lease="00000000000000dd")
    L.add("wait", 1240, 4001, 33, "c", ticket=3, want=2, cand="0,1", ahead=0,
          head=1, arrived=1240)
    L.add("giveup", 1300, 4001, 33, "c", ticket=3, want=2, cand="0,1",
          arrived=1240, waited=60, why="timeout", errno=110)
    # Utilisation of GPU 1 during d: 0% at 1200, 80% at 1300, 0% at 1350
    # (and 50% at 1500, after the lease).
    for t, u in ((1200, 0), (1300, 80), (1350, 0), (1500, 50)):
        L.add("util", t, 4001, 44, "-", dev="1", gpu=u, memutil=0, used=0,
              total=1 << 30)
    # GPU 2: user 4002, twenty leases of 50 s, the i-th after waiting i s.
    for i in range(1, 21):
        start = 2000 + 100 * i
        L.lease(4002, f"e{i}", "2", start, start + 50, waited=i)
    L.write()


def test_report_numbers_on_a_known_log(built, tmp_path):
    lockdir = str(tmp_path / "locks")
    known_log(lockdir)
    rep = json.loads(report(lockdir, "--json", "--since", "@900",
                            "--until", "@5000").stdout)
    assert rep["from"] == 1000 and rep["to"] == 5000
    g = {x["index"]: x for x in rep["gpus"]}
    assert g[0]["leased_s"] == 200
    assert g[0]["idle_waited_s"] == 30 + 60
    assert g[0]["idle_free_s"] == 4000 - 200 - 90
    assert g[0]["jobs"] == 2
    assert g[1]["leased_s"] == 200 and g[1]["idle_waited_s"] == 0
    assert g[2]["leased_s"] == 1000
    assert g[2]["idle_waited_s"] == sum(range(1, 21))
    w = rep["waits"]
    # 22 waits: 1..20 s, 60 s (timeout), 120 s; nearest rank.
    assert w["count"] == 22 and w["granted"] == 21 and w["timeouts"] == 1
    assert w["p50_s"] == 11 and w["p95_s"] == 60 and w["max_s"] == 120
    top = w["longest"][0]
    assert top["job"] == "b" and top["wait_s"] == 120
    assert "root/a" in top["meanwhile"]
    users = {u["uid"]: u for u in rep["users"]}
    assert users[0]["gpu_hours"] == pytest.approx(200 / 3600, abs=1e-9)
    assert users[4001]["gpu_hours"] == pytest.approx(200 / 3600, abs=1e-9)
    assert users[4002]["gpu_hours"] == pytest.approx(1000 / 3600, abs=1e-9)
    assert users[4001]["timeouts"] == 1 and users[4002]["waits"] == 20
    idle = rep["idle_leases"]
    assert len(idle) == 1 and idle[0]["lease"] == str(0xdd)
    assert idle[0]["idle_s"] == 150 and idle[0]["sampled_s"] == 200
    assert idle[0]["util_mean"] == 20
    assert all(x["exact"] and x["end_how"] == "exit" for x in rep["leases"])
    text = report(lockdir, "--since", "@900", "--until", "@5000").stdout
    assert "1m30s" in text  # GPU 0's idle while someone waited
    assert "p50 11.00s, p95 1m00s, max 2m00s" in text


def busy_day(lockdir, jobs_n=400):
    """A day of four users on four GPUs, many short jobs among long ones,
    with utilisation samples and waits."""
    rnd = random.Random(7)
    L = Log(lockdir)
    t0 = 1_800_000_000 - 86400
    users = [(0, "python train.py --model big"), (4001, "python eval.py"),
             (4002, "torchrun finetune.py"), (4003, "./simulate --steps 10")]
    for gpu in range(4):
        t = t0 + rnd.uniform(0, 600)
        n = 0
        while t < t0 + 86400 - 600 and n < jobs_n // 4:
            uid, cmd = rnd.choice(users)
            dur = rnd.choice([20, 40, 90, 300, 1200, 3600]) * rnd.uniform(0.5, 1.5)
            wait = rnd.choice([0, 0, 5, 30, 120, 900])
            lid = L.lease(uid, "j%d" % rnd.getrandbits(40), str(gpu), t + wait,
                          t + wait + dur, waited=wait, cmd=cmd,
                          woke=t + wait if wait else None)
            if dur > 1000 and rnd.random() < 0.5:
                for k in range(int(dur // 300)):
                    s = t + wait + k * 300
                    L.add("util", s, 0, 9, "-", dev=str(gpu),
                          gpu=0 if k % 3 == 1 else 85, memutil=10,
                          used=10 << 30, total=80 << 30)
            del lid
            t += wait + dur + rnd.choice([0, 0, 10, 600, 1800])
            n += 1
    L.write()
    return t0


def png_stats(path):
    """(width, height, number of distinct colours sampled) of an RGB(A)
    PNG, decoded here (no imaging library needed)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype = ihdr[:4]
    assert depth == 8 and ctype in (2, 6)
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    colours = set()
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else
                                      b if pb <= pc else c)) & 255
        if y % 4 == 0:
            for x in range(0, w, 4):
                colours.add(bytes(line[x * bpp:x * bpp + 3]))
        prev = line
    return w, h, len(colours)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                    "(.ci/run installs it: .ci/packages)")
def test_html_report_renders_in_chromium(built, tmp_path):
    lockdir = str(tmp_path / "locks")
    t0 = busy_day(lockdir)
    html = str(tmp_path / "report.html")
    svg = str(tmp_path / "report.svg")
    report(lockdir, "--since", "@%d" % t0, "--until", "@%d" % (t0 + 86400),
           "--html", html, "--svg", svg, "-q")
    png = str(tmp_path / "report.png")
    args = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox",
            "--hide-scrollbars", "--user-data-dir=" + str(tmp_path / "chr")]
    subprocess.run(args + ["--screenshot=" + png, "--window-size=1240,900",
                           "file://" + html], capture_output=True, timeout=120,
                   check=True)
    w, h, colours = png_stats(png)
    assert (w, h) == (1240, 900)
    assert colours > 8, "the page rendered (nearly) blank"
    dom = subprocess.run(args + ["--dump-dom", "file://" + html],
                         capture_output=True, text=True, timeout=120,
                         check=True).stdout
    for id_ in ("timeline", "axis", "queue", "legend", "gpu-row-0",
                "gpu-row-3", "gpu-table", "wait-table", "user-table",
                "job-table", "idle-table"):
        assert f'id="{id_}"' in dom, id_
    assert 'class="agg"' in dom       # short jobs merged
    assert 'class="idle"' in dom      # idle stretches marked
    assert 'class="lease"' in dom
    assert 'class="idle-waited"' in dom  # free GPU while someone waited
    keep = os.environ.get("GM_REPORT_PNG")
    if keep:
        shutil.copy(png, keep)
