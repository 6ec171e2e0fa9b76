"""`gpumutex metrics`: the exposition parsed by Prometheus's own Python
parser and checked by promtool, served over HTTP to a real Prometheus
server (Debian's `prometheus`, started here on a loopback port) whose query
API must then return gpumutex series; written for node_exporter's textfile
collector; an unreadable lock directory answered cleanly; the HTTP server
kept alive by slow and malformed clients; docs/deploy.md's configuration
and alert rules checked by promtool."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

import jobs
from conftest import BUILD, REPO
from synthlog import Log

GPUMUTEX = os.path.join(BUILD, "gpumutex")
HOLDER = os.path.join(BUILD, "tests", "lease-holder")
FAKENVML = os.path.join(BUILD, "tests", "fakenvml")
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
HANG_GUARD = 120

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # pragma: no cover - .ci/packages installs it
    text_string_to_metric_families = None

need_parser = pytest.mark.skipif(text_string_to_metric_families is None,
                                 reason="python3-prometheus-client missing")
need_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing")


def metrics(lockdir, *args, env=None, **kw):
    return subprocess.run([GPUMUTEX, "metrics", "--lock-dir", lockdir, *args],
                          capture_output=True, text=True, timeout=60,
                          env=env, **kw)


def samples(text):
    """{(name, frozenset(labels)): value} by Prometheus's parser."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def promtool_ok(text):
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def nvml_env(tmp_path):
    fake = tmp_path / "nvml"
    fake.write_text("count 2\nutil 0 37 5\nmem 0 1000 8000\n")
    return dict(os.environ, LD_LIBRARY_PATH=FAKENVML, FAKENVML_FILE=str(fake))


@need_parser
@need_promtool
def test_live_state_holder_queue_and_nvml(built, tmp_path, lockdir, journal):
    env = jobs.job_env(lockdir, journal, devices="0,1", job="train")
    holder = jobs.start(HOLDER, dict(env, GPUMUTEX_NUM_DEVICES="2"),
                        ready=True, hold=True)
    assert holder.ready()
    waiter = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="later"), waiting=True)
    try:
        assert waiter.waited()
        p = metrics(lockdir, env=nvml_env(tmp_path))
        assert p.returncode == 0, p.stderr
        promtool_ok(p.stdout)
        s = samples(p.stdout)
        user = "root" if os.geteuid() == 0 else str(os.geteuid())
        assert s[("gpumutex_up", frozenset())] == 1
        for gpu in ("0", "1"):
            key = frozenset({("gpu", gpu)})
            assert s[("gpumutex_gpu_held", key)] == 1
            assert s[("gpumutex_gpu_held_seconds", key)] >= 0
            info = frozenset({("gpu", gpu), ("job_id", "train"), ("user", user)})
            assert s[("gpumutex_gpu_holder_info", info)] == 1
        g0 = frozenset({("gpu", "0")})
        assert s[("gpumutex_gpu_utilization_ratio", g0)] == pytest.approx(0.37)
        assert s[("gpumutex_gpu_memory_used_bytes", g0)] == 1000
        assert s[("gpumutex_gpu_memory_total_bytes", g0)] == 8000
        assert s[("gpumutex_queue_waiting", frozenset())] == 1
        assert s[("gpumutex_queue_oldest_wait_seconds", frozenset())] > 0
    finally:
        holder.release()
        assert holder.wait() == 0 and waiter.wait() == 0
    s = samples(metrics(lockdir).stdout)
    assert s[("gpumutex_queue_waiting", frozenset())] == 0
    # Two GPUs to the holder, one of them to the waiter after it.
    assert sum(v for k, v in s.items() if k[0] == "gpumutex_grants_total") == 3
    assert s[("gpumutex_waits_total", frozenset())] == 1


@need_parser
def test_counters_of_a_known_log(built, tmp_path):
    """The counters against a log whose numbers are worked out here:
    GPU 0 two leases, GPU 1 one, GPU 2 twenty; 22 waits (the twenty of
    1..20 s, one of 120 s, a time-out after 60 s)."""
    lockdir = str(tmp_path / "locks")
    L = Log(lockdir)
    L.lease(0, "a", "0", 1000, 1100)
    L.add("wait", 1010, 0, 22, "b", ticket=2, want=1, cand="0", ahead=1,
          head=0, arrived=1010)
    L.lease(0, "b", "0", 1130, 1230, waited=120, pid=22, ticket=2)
    L.lease(4001, "d", "1", 1200, 1400)
    L.add("wait", 1240, 4001, 33, "c", ticket=3, want=2, cand="0,1", ahead=0,
          head=1, arrived=1240)
    L.add("giveup", 1300, 4001, 33, "c", ticket=3, want=2, cand="0,1",
          arrived=1240, waited=60, why="timeout", errno=110)
    for i in range(1, 21):
        L.lease(4002, f"e{i}", "2", 2000 + 100 * i, 2050 + 100 * i, waited=i)
    L.write()
    p = metrics(lockdir)
    assert p.returncode == 0, p.stderr
    s = samples(p.stdout)
    grants = {dict(k[1])["gpu"]: v for k, v in s.items()
              if k[0] == "gpumutex_grants_total"}
    assert grants == {"0": 2, "1": 1, "2": 20}
    assert s[("gpumutex_waits_total", frozenset())] == 22
    assert s[("gpumutex_wait_seconds_total", frozenset())] == \
        pytest.approx(120 + 60 + sum(range(1, 21)))
    assert s[("gpumutex_timeouts_total", frozenset())] == 1
    assert s[("gpumutex_lock_dir_exists", frozenset())] == 1


@need_parser
def test_missing_lock_dir_is_up_with_nothing(built, tmp_path):
    p = metrics(str(tmp_path / "none"))
    assert p.returncode == 0, p.stderr
    s = samples(p.stdout)
    assert s[("gpumutex_up", frozenset())] == 1
    assert s[("gpumutex_lock_dir_exists", frozenset())] == 0


@need_parser
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
def test_unreadable_lock_dir_answered_cleanly(built, tmp_path):
    """Another user, for whom the lock directory is closed: gpumutex_up 0
    (still valid exposition), one line saying why, exit status 1."""
    shared = tempfile.mkdtemp(prefix="gm-metrics-", dir="/tmp")
    try:
        os.chmod(shared, 0o755)
        lockdir = os.path.join(shared, "locks")
        subprocess.run([GPUMUTEX, "init", "--lock-dir", lockdir,
                        "--visible-devices", "0"], check=True,
                       capture_output=True)
        os.chmod(lockdir, 0o700)
        p = subprocess.run([jobs.for_user(GPUMUTEX, 4301), "metrics",
                            "--lock-dir", lockdir], capture_output=True,
                           text=True, preexec_fn=jobs.as_user(4301),
                           timeout=60)
        assert p.returncode == 1
        s = samples(p.stdout)
        assert s[("gpumutex_up", frozenset())] == 0
        assert not [k for k in s if k[0].startswith("gpumutex_gpu")]
        err = p.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("gpumutex metrics: "), p.stderr
        assert "ermission denied" in err[0], p.stderr
        if PROMTOOL:
            promtool_ok(p.stdout)
    finally:
        shutil.rmtree(shared)


def test_textfile_is_replaced_whole(built, tmp_path, lockdir):
    subprocess.run([GPUMUTEX, "init", "--lock-dir", lockdir,
                    "--visible-devices", "0,1"], check=True,
                   capture_output=True)
    out = tmp_path / "textfile"
    out.mkdir()
    (out / "gpumutex.prom").write_text("old\n")
    p = metrics(lockdir, "--textfile", str(out))
    assert p.returncode == 0 and p.stdout == "", p.stderr
    assert os.listdir(out) == ["gpumutex.prom"]  # no temporary left
    text = (out / "gpumutex.prom").read_text()
    assert 'gpumutex_gpu_held{gpu="1"} 0' in text.splitlines()
    bad = metrics(lockdir, "--textfile", str(tmp_path / "no" / "such"))
    assert bad.returncode == 1
    assert bad.stderr.startswith("gpumutex metrics: cannot write "), bad.stderr


def test_usage_errors_are_one_line_hints(built, lockdir):
    for args in (["--bogus"], ["--listen", "1", "--textfile", "/tmp"],
                 ["--listen", "nope"]):
        p = metrics(lockdir, *args)
        assert p.returncode == 2, (args, p.stderr)
        lines = p.stderr.splitlines()
        assert lines[0].startswith("gpumutex metrics: ") and len(lines) <= 2, p.stderr
        assert "usage:" not in p.stderr


# ---- the HTTP server --------------------------------------------------------

class Server:
    def __init__(self, lockdir, listen="127.0.0.1:0"):
        self.proc = subprocess.Popen(
            [GPUMUTEX, "metrics", "--lock-dir", lockdir, "--listen", listen],
            stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        m = re.search(r"serving http://([^/]+)/metrics", line)
        assert m, line
        self.addr = m.group(1)
        host, port = self.addr.rsplit(":", 1)
        self.host, self.port = host.strip("[]"), int(port)

    def raw(self, data, shut=True):
        """Send data, read the answer to the end (the server closes)."""
        with socket.create_connection((self.host, self.port), timeout=60) as s:
            s.sendall(data)
            if shut:
                s.shutdown(socket.SHUT_WR)
            got = b""
            while True:
                b = s.recv(65536)
                if not b:
                    return got
                got += b

    def get(self, path="/metrics"):
        return urllib.request.urlopen(f"http://{self.addr}{path}", timeout=60)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        self.proc.stderr.close()
        return rc


@need_parser
def test_http_serves_and_survives_bad_clients(built, lockdir):
    subprocess.run([GPUMUTEX, "init", "--lock-dir", lockdir,
                    "--visible-devices", "0"], check=True, capture_output=True)
    srv = Server(lockdir)
    try:
        assert srv.host == "127.0.0.1"  # loopback unless a host is named
        r = srv.get()
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        s = samples(r.read().decode())
        assert s[("gpumutex_gpu_held", frozenset({("gpu", "0")}))] == 0
        # A client that connects and says nothing, then one that sends
        # half a request and stalls: each is dropped when its time is up,
        # and the next scrape is answered.
        silent = socket.create_connection((srv.host, srv.port))
        half = socket.create_connection((srv.host, srv.port))
        half.sendall(b"GET /metr")
        assert srv.get().status == 200
        assert silent.recv(10) == b"" and half.recv(10) == b""
        silent.close()
        half.close()
        assert srv.raw(b"\x00\xff\x16\x03\x01garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert srv.raw(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n",
                       shut=False).startswith(b"HTTP/1.1 431")
        assert srv.raw(b"POST /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405")
        assert srv.raw(b"GET /other HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404")
        head = srv.raw(b"HEAD /metrics HTTP/1.0\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
        assert srv.raw(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").split(
            b"\r\n\r\n", 1)[1].startswith(b"# HELP gpumutex_up")
        with socket.create_connection((srv.host, srv.port)) as s:
            pass  # connect and close at once
        assert srv.get().status == 200
    finally:
        assert srv.stop() == 0


# ---- a real Prometheus server -----------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll(what, fn, guard=HANG_GUARD):
    """fn() until it returns something true; a hang guard, not a timing
    threshold: the answer normally comes within a few scrape intervals."""
    end = time.monotonic() + guard
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"{what}: nothing after {guard} s")


def api(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                    timeout=10) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, ConnectionError, ValueError):
        return None


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus missing")
def test_real_prometheus_scrapes_it(built, tmp_path, lockdir, journal):
    env = jobs.job_env(lockdir, journal, devices="0", job="scraped")
    holder = jobs.start(HOLDER, env, ready=True, hold=True)
    assert holder.ready()
    srv = Server(lockdir)
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: gpumutex\n    static_configs:\n"
        f"      - targets: ['{srv.addr}']\n")
    log = open(tmp_path / "prometheus.log", "w")
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={cfg}",
         f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, cwd=str(tmp_path))
    try:
        q = urllib.parse.quote('gpumutex_gpu_holder_info{job_id="scraped"}')

        def series():
            doc = api(port, f"/api/v1/query?query={q}")
            return doc and doc.get("status") == "success" and \
                doc["data"]["result"]
        res = poll("a gpumutex series in Prometheus", series)
        assert res[0]["metric"]["gpu"] == "0"
        assert res[0]["metric"]["job"] == "gpumutex"
        assert res[0]["value"][1] == "1"
        up = api(port, "/api/v1/query?query=" + urllib.parse.quote(
            'up{job="gpumutex"}'))
        assert up["data"]["result"][0]["value"][1] == "1"
    finally:
        prom.send_signal(signal.SIGTERM)
        prom.wait(timeout=60)
        log.close()
        assert srv.stop() == 0
        holder.release()
        assert holder.wait() == 0


# ---- docs/deploy.md ---------------------------------------------------------

def deploy_yaml_blocks():
    text = open(os.path.join(REPO, "docs", "deploy.md")).read()
    section = text.split("## Monitoring (Prometheus)", 1)[1]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)


@need_promtool
def test_docs_scrape_config_and_rules_pass_promtool(tmp_path):
    blocks = deploy_yaml_blocks()
    scrape = [b for b in blocks if "scrape_configs" in b]
    rules = [b for b in blocks if "groups:" in b]
    assert len(scrape) == 1 and len(rules) == 1
    names = re.findall(r"alert: (\S+)", rules[0])
    assert names == ["GpumutexGpuIdleWhileWaiting", "GpumutexLongWait"]
    (tmp_path / "rules.yml").write_text(rules[0])
    (tmp_path / "prometheus.yml").write_text(
        scrape[0] + "rule_files:\n  - rules.yml\n")
    for args in (["check", "rules", "rules.yml"],
                 ["check", "config", "prometheus.yml"]):
        p = subprocess.run([PROMTOOL, *args], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
    # Every metric the rules use is one `gpumutex metrics` writes.
    doc_metrics = set(re.findall(r"\bgpumutex_[a-z_]+", rules[0]))
    src = open(os.path.join(REPO, "src", "cli", "metrics.c")).read()
    assert doc_metrics and all(f'"{m}' in src for m in doc_metrics), doc_metrics
