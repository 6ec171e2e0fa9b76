"""The lease follows the work (docs/preload.md, "When the lease is taken"):
with the devices fixed at cuInit, cuInit runs at once and only the first
call that can touch a device waits for the lease; pure queries never wait
and take nothing; a process without a context gives its lease back.

Everything runs on the fake driver (tests/fakecuda), whose journal records
every context (begin/end) and every allocation, launch and synchronise
(tick); tests/lib/journal.py checks exclusivity from it."""

import re
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import wrapped_names
from preloadlib import LIB, T, TIMEOUT, Holder, journal, kv, run, used_by
from preloadlib import built, env  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parent.parent
PROBE = T / "lazyprobe"
PATHS = ["plt", "dlsym", "default", "gpa2", "gpa1"]


STARTED = []


@pytest.fixture(autouse=True)
def reap():
    """Kill what a test started and left running (a failed test's holder
    would otherwise hold its lock directory's GPU until it is killed)."""
    yield
    while STARTED:
        p = STARTED.pop()
        if p.poll() is None:
            p.kill()
            p.wait()


def holder(env):
    h = Holder(env)
    STARTED.append(h.p)
    return h


@pytest.fixture
def one(env):
    """One managed GPU (GPU 0), as on a one-GPU machine."""
    env["GPUMUTEX_VISIBLE_DEVICES"] = "0"
    env["GPUMUTEX_NUM_DEVICES"] = "1"
    return env



def spans(env):
    """Every holding of a device: (dev, job, pid, first t, last t), from
    a begin to its end (or the last tick of a killed process); a process
    that gives its lease back and takes another has two."""
    open_, done = {}, []
    for e in journal(env):
        if e["ev"] not in ("begin", "tick", "end"):
            continue
        key, t = (e["pid"], e["dev"]), int(e["t"])
        if e["ev"] == "begin":
            open_[key] = [e["dev"], e["job"], e["pid"], t, t]
        elif key in open_:
            open_[key][4] = t
            if e["ev"] == "end":
                done.append(tuple(open_.pop(key)))
    return done + [tuple(v) for v in open_.values()]


def check_exclusive(env):
    ss = sorted(spans(env), key=lambda s: s[3])
    for i, a in enumerate(ss):
        for b in ss[i + 1:]:
            assert not (a[0] == b[0] and a[1] != b[1] and b[3] <= a[4]), \
                (a, b)


def records(env):
    return list(Path(env["GPUMUTEX_LOCK_DIR"]).glob("job/*/*.lease"))


class Probe:
    """lazyprobe in the background, read line by line."""

    def __init__(self, env, path, *steps, **extra):
        e = dict(env, LD_PRELOAD=str(LIB), **extra)
        self.p = subprocess.Popen([str(PROBE), path, *steps], env=e,
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        STARTED.append(self.p)
        self.lines = []

    def until(self, prefix):
        """Read stdout up to the line that starts with prefix."""
        while True:
            line = readline(self.p, self.p.stdout)
            assert line, "probe ended: %s %s" % (self.lines,
                                                 self.p.stderr.read())
            self.lines.append(line)
            if line.startswith(prefix):
                return kv("".join(self.lines).replace(" ", "\n"))

    def stderr_line(self):
        line = readline(self.p, self.p.stderr)
        assert line, self.lines
        return line

    def send(self, text="go\n"):
        self.p.stdin.write(text)
        self.p.stdin.flush()

    def finish(self):
        if self.p.stdin.closed:
            self.p.stdin = None
        out, err = self.p.communicate(timeout=TIMEOUT)
        self.lines.append(out)
        assert self.p.returncode == 0, err
        return kv("".join(self.lines).replace(" ", "\n")), err


def readline(p, stream):
    """stream.readline(), failing (and killing p) instead of hanging when
    nothing comes within TIMEOUT: a wait that should not happen, or a
    line that never comes with an older library, is a failure."""
    box = []
    t = threading.Thread(target=lambda: box.append(stream.readline()),
                         daemon=True)
    t.start()
    t.join(TIMEOUT)
    if not box:
        p.kill()
        pytest.fail("no line from pid %d within %d s" % (p.pid, TIMEOUT))
    return box[0]


def fields(stdout):
    return kv(stdout.replace(" ", "\n"))


# ---- Queries ------------------------------------------------------------

@pytest.mark.parametrize("path", PATHS)
def test_queries_do_not_wait_and_take_nothing(one, path):
    """With the one GPU held by another job, cuInit and every pure query
    return at once (GPUMUTEX_TIMEOUT=0 would fail a wait) with the right
    values, the process takes no lease and touches no device."""
    h = holder(one)
    res = run([PROBE, path, "init", "query"], dict(one, GPUMUTEX_TIMEOUT="0"))
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    out = fields(res.stdout)
    assert out["init"] == "0" and out["cvd"] == "0"
    assert out["count"] == "1" and out["name"] == "Fake_GPU"
    assert out["mem"] == str(80 << 30) and out["major"] == "9"
    assert out["uuid"] == "face" and out["bus"] == "0000:10:00.0"
    assert out["cur"] == "null" and out["active"] == "0"
    assert out["version"] == "13000" and out["qrc"] == "0"
    inits = [e for e in journal(one) if e["ev"] == "init"]
    assert len(inits) == 2 and inits[1]["cvd"] == "0"
    assert inits[1]["order"] == "PCI_BUS_ID"
    assert used_by(one) == {str(h.pid)}
    assert len(records(one)) == 1  # the holder's only
    assert h.release() == 0


# ---- The first device call waits ------------------------------------------

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("first", ["retain", "create"])
def test_first_context_waits(one, path, first):
    """The first context (primary retain or cuCtxCreate) waits for the
    GPU, with the waiting line naming the call; after the holder is done it
    gets the GPU, and its allocation and launch are journaled after the
    holder's end."""
    h = holder(one)
    p = Probe(one, path, "init", "query", first, "work")
    p.until("count=")
    line = p.stderr_line()
    assert line.startswith("gpumutex: pid %d waits for 1 GPU of 0" % p.p.pid)
    call = "cuDevicePrimaryCtxRetain" if first == "retain" else "cuCtxCreate_v2"
    assert "at its first GPU call (%s)" % call in line, line
    assert "held by job" in line and "pid %d" % h.pid in line
    assert used_by(one) == {str(h.pid)}  # nothing touched while waiting
    assert h.release() == 0
    out, err = p.finish()
    assert out[first] == "0" and out["work"] == "0", err
    ev = journal(one)
    check_exclusive(one)
    mine = [e for e in ev if e["pid"] == str(p.p.pid) and e["ev"] != "init"]
    ends = [int(e["t"]) for e in ev if e["pid"] == str(h.pid)
            and e["ev"] == "end"]
    assert [e["ev"] for e in mine][:3] == ["begin", "tick", "tick"]
    assert int(mine[0]["t"]) > max(ends)


def test_work_without_context_takes_the_lease(one):
    """Any call that is not a pure query takes the lease, even one that
    then fails for want of a context (here a timeout says it waited)."""
    h = holder(one)
    res = run([PROBE, "dlsym", "init", "work"],
              dict(one, GPUMUTEX_TIMEOUT="0"))
    out = fields(res.stdout)
    assert out["init"] == "0" and out["work"] == "100", res.stderr
    assert "GPUMUTEX_TIMEOUT=0" in res.stderr
    assert "cuMemAlloc_v2 returns CUDA_ERROR_NO_DEVICE" in res.stderr
    assert used_by(one) == {str(h.pid)}
    assert h.release() == 0


def test_queries_go_on_while_another_thread_waits(one):
    """One process, threads racing: the query threads finish while the
    work threads still wait for the lease; then the work gets the GPU."""
    h = holder(one)
    p = Probe(one, "gpa2", "init", "race", "8")
    out = p.until("queries-done")
    assert out["working"] == "4"  # all four still waiting
    assert used_by(one) == {str(h.pid)}
    assert h.release() == 0
    out, err = p.finish()
    assert out["race"] == "0", err
    check_exclusive(one)


# ---- Nobody is delayed by a query process ---------------------------------

def test_query_process_sleeping_delays_nobody(one):
    """A process that only queried and then idles holds nothing: a job
    started meanwhile gets the GPU at once."""
    q = Probe(one, "gpa2", "init", "query", "eof")
    q.until("waiting")
    res = run([T / "cuprobe", "work", "3"], dict(one, GPUMUTEX_TIMEOUT="0"))
    assert kv(res.stdout)["rc"] == "0", res.stderr
    assert res.stderr == ""
    q.p.stdin.close()
    out, err = q.finish()
    assert err == ""
    assert str(q.p.pid) not in used_by(one)


# ---- Giving the lease back --------------------------------------------------

@pytest.mark.parametrize("how", [("create", "destroy"), ("retain", "release")])
def test_no_context_gives_the_lease_back_and_queues_again(one, how):
    """A process that destroys (or releases) its last context gives its
    lease back: another job gets the GPU while it lives; its next context
    queues again, for the same GPU, and waits for that job."""
    make_ctx, drop_ctx = how
    a = Probe(one, "dlsym", "init", make_ctx, "work", drop_ctx, "line",
              make_ctx, "work", "eof", GPUMUTEX_GIVE_BACK_MS="0")
    out = a.until("waiting")
    assert out[drop_ctx] == "0"
    # B waits (no timeout) until A's lease is given back.
    b = holder(one)
    a.send()
    line = a.stderr_line()
    assert "waits for 1 GPU of 0" in line and "pid %d" % b.pid in line, line
    assert b.release() == 0
    out = a.until("work")
    assert out["work"] == "0"
    a.p.stdin.close()
    out, err = a.finish()
    ev = journal(one)
    check_exclusive(one)
    mine = [e for e in ev if e["pid"] == str(a.p.pid)]
    assert [e["cvd"] for e in mine if e["ev"] == "init"] == ["0"]
    assert [e["dev"] for e in mine if e["ev"] == "begin"] == ["0", "0"]
    # The event log (docs/report.md): the give-back is A's exit record for
    # its first lease, marked; its second lease ends at its exit.
    log = "".join(f.read_text() for f in
                  Path(one["GPUMUTEX_LOCK_DIR"]).glob("job/*/events.log"))
    exits = [l for l in log.splitlines()
             if " exit " in " %s " % l and "pid=%d " % a.p.pid in l]
    assert len(exits) == 2 and "why=give-back" in exits[0], log
    assert "why=" not in exits[1]


def test_a_context_keeps_the_lease(one):
    """A process holding a context keeps its lease however long it idles:
    another job with GPUMUTEX_TIMEOUT=0 is refused."""
    a = Probe(one, "plt", "init", "retain", "work", "eof",
              GPUMUTEX_GIVE_BACK_MS="0")
    a.until("waiting")
    res = run([T / "cuprobe", "work", "1"],
              dict(one, GPUMUTEX_TIMEOUT="0", CUPROBE_TOUCH="1"))
    assert kv(res.stdout)["rc"] == "100", res.stdout + res.stderr
    a.p.stdin.close()
    a.finish()
    check_exclusive(one)


def test_give_back_delay_is_checked(one):
    res = run([PROBE, "dlsym", "init"], dict(one, GPUMUTEX_GIVE_BACK_MS="x"))
    assert fields(res.stdout)["init"] == "1"
    assert "GPUMUTEX_GIVE_BACK_MS" in res.stderr


# ---- A pool: cuInit waits, as before, and says why --------------------------

def test_pool_waits_in_cuinit_and_says_why(env):
    """GPUs 0,1 managed, one wanted: which GPU a process gets is known only
    at the grant, so cuInit waits when both are busy, and the waiting line
    says that a query is enough to wait here and how to avoid it."""
    env["GPUMUTEX_NUM_DEVICES"] = "1"
    h1, h2 = holder(env), holder(env)
    res = run([PROBE, "dlsym", "init"], dict(env, GPUMUTEX_TIMEOUT="0.2"))
    assert fields(res.stdout)["init"] == "100"
    line = [l for l in res.stderr.splitlines() if "waits for" in l]
    assert len(line) == 1 and "it waits in cuInit" in line[0]
    assert "PYTORCH_NVML_BASED_CUDA_CHECK=1" in line[0]
    assert h1.release() == 0 and h2.release() == 0


def test_pool_query_process_gives_its_gpu_back(env):
    """In a pool the lease is taken in cuInit; a process that only queried
    gives it back after the delay, so another job is not kept waiting."""
    env["GPUMUTEX_NUM_DEVICES"] = "1"
    env["GPUMUTEX_VISIBLE_DEVICES"] = "0,1"
    q = Probe(env, "gpa2", "init", "query", "eof", GPUMUTEX_GIVE_BACK_MS="0")
    out = q.until("waiting")
    assert out["init"] == "0" and out["count"] == "1"
    # Two jobs, one GPU each, both without a timeout: the second gets the
    # query process's GPU once it was given back.
    h1, h2 = holder(env), holder(env)
    assert {h1.out["cvd"], h2.out["cvd"]} == {"0", "1"}
    assert h1.release() == 0 and h2.release() == 0
    q.p.stdin.close()
    q.finish()
    check_exclusive(env)


# ---- Every generated wrapper ------------------------------------------------

def stub_names():
    """Driver names the fake implements as logging stubs."""
    impl = set(re.findall(r"FC_IMPL\((cu\w+)\)",
                          (REPO / "tests/fakecuda/fakecuda.h").read_text()))
    names = (REPO / "src/preload/driver-names.txt").read_text().split()
    return [n for n in names if n not in impl]


STUBCALL = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
typedef int (*fn)(void);
typedef int (*gpa2)(const char *, void **, int, unsigned long long, int *);
static const char *names[] = { %(names)s };
%(decls)s
static fn plt[] = { %(plt)s };
static const int gpa_ok[] = { %(gpa_ok)s };
int main(int argc, char **argv)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    gpa2 g = (gpa2)dlsym(h, "cuGetProcAddress_v2");
    unsigned n = sizeof names / sizeof names[0];
    for (unsigned i = 0; i < n; i++) {
        void *p = NULL;
        int st, rc = 0;
        Dl_info info;
        if (!strcmp(argv[1], "gpa")) {
            if (!gpa_ok[i])
                continue;
            rc = g(names[i], &p, 13000, 0, &st);
        } else if (!strcmp(argv[1], "dlsym")) {
            p = dlsym(h, names[i]);
        } else {
            p = (void *)plt[i];
        }
        if (rc || !p) { printf("missing %%s\n", names[i]); continue; }
        printf("%%s %%s %%d\n", names[i],
               dladdr(p, &info) && strstr(info.dli_fname, "libgpumutex")
                   ? "wrapped" : "direct", ((fn)p)());
    }
    (void)argc;
    return 0;
}
"""


@pytest.fixture(scope="module")
def stubcall(built, tmp_path_factory):
    names = stub_names()
    every = set((REPO / "src/preload/driver-names.txt").read_text().split())
    # cuGetProcAddress answers a name that has _vN versions with the
    # highest of them (the fake does as the driver): those names are
    # reached through their versions' own entries.
    ok = [not any("%s_v%d" % (n, k) in every for k in range(2, 10))
          for n in names]
    src = tmp_path_factory.mktemp("stubcall") / "stubcall.c"
    src.write_text(STUBCALL % dict(
        gpa_ok=", ".join(str(int(o)) for o in ok),
        names=", ".join('"%s"' % n for n in names),
        decls="\n".join("int %s(void);" % n for n in names),
        plt=", ".join(names)))
    exe = src.with_suffix("")
    fake = REPO / "build" / "tests" / "fakecuda"
    subprocess.run(["cc", "-o", str(exe), str(src), "-L" + str(fake),
                    "-lcuda", "-ldl", "-Wl,-rpath," + str(fake)],
                   check=True)
    return exe, names, [n for n, o in zip(names, ok) if o]


@pytest.mark.parametrize("path", ["gpa", "dlsym", "plt"])
def test_every_wrapper_reaches_its_function(one, stubcall, tmp_path, path):
    """Each driver name the fake has as a stub is called once through
    cuGetProcAddress_v2, dlsym and the PLT: every one but the pure queries
    was handed out (or bound) as a wrapper of libgpumutex.so, and every
    call reached the fake's function of the same name as without the
    library (the fake logs each stub's name as it runs)."""
    exe, names, gpa_names = stubcall
    if path == "gpa":
        names = gpa_names
    logs = {}
    for pre in (False, True):
        log = tmp_path / ("log-%d" % pre)
        res = run([exe, path], dict(one, FAKECUDA_STUB_LOG=str(log)),
                  preload=pre)
        assert res.returncode == 0, res.stderr
        assert "missing" not in res.stdout
        logs[pre] = ([l.split()[0] for l in log.read_text().splitlines()],
                     res.stdout.split("\n"))
    assert logs[True][0] == logs[False][0] == names
    wrapped = wrapped_names()
    calls = [l.split() for l in logs[True][1] if l]
    assert len(calls) == len(names) == len(logs[True][0])
    for (name, how, rc), reached in zip(calls, logs[True][0]):
        assert rc == "801", name
        assert how == ("wrapped" if reached in wrapped else "direct"), name


# ---- A library that finds the driver in its own local scope ------------------

LOCALLIB = r"""
typedef int CUresult;
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
CUresult cuMemAlloc_v2(unsigned long long *, unsigned long);
int local_work(void)
{
    void *ctx = 0;
    unsigned long long p = 0;
    int rc = cuDevicePrimaryCtxRetain(&ctx, 0);
    if (!rc)
        rc = cuCtxSetCurrent(ctx);
    return rc ? rc : cuMemAlloc_v2(&p, 4096);
}
"""

LOCALMAIN = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    /* As the CUDA runtime does: the driver RTLD_LOCAL, not global. */
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), *lib;
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cu, "cuInit");
    int (*work)(void);
    printf("init=%d\n", init(0));
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    work = (int (*)(void))dlsym(lib, "local_work");
    printf("work=%d\n", work());
    return 0;
}
"""


def test_library_linked_with_lcuda_in_a_local_scope(one, tmp_path):
    """Found on the H200 (Triton's driver module): a library dlopened
    RTLD_LOCAL and linked with -lcuda, in a process whose driver was loaded
    RTLD_LOCAL by the runtime, binds its driver calls to the library's
    exported wrappers; the driver is not in the global scope, so the
    wrappers found no definition after theirs and returned
    CUDA_ERROR_NO_DEVICE. They now take the driver's own, and the first
    context still waits for the lease."""
    fake = REPO / "build" / "tests" / "fakecuda"
    lib, main = tmp_path / "liblocal.so", tmp_path / "localmain"
    (tmp_path / "l.c").write_text(LOCALLIB)
    (tmp_path / "m.c").write_text(LOCALMAIN)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib),
                    str(tmp_path / "l.c"), "-L" + str(fake), "-lcuda"],
                   check=True)
    subprocess.run(["cc", "-o", str(main), str(tmp_path / "m.c"), "-ldl"],
                   check=True)
    h = holder(one)
    p = subprocess.Popen([str(main), str(lib)], env=dict(one, LD_PRELOAD=str(LIB)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    line = readline(p, p.stderr)
    assert "waits for 1 GPU of 0" in line, line
    assert "cuDevicePrimaryCtxRetain" in line
    assert h.release() == 0
    out, err = p.communicate(timeout=TIMEOUT)
    assert fields(out) == {"init": "0", "work": "0"}, out + err
    check_exclusive(one)


def test_status_lists_no_process_without_a_lease(one):
    """gpumutex status: a process that initialised CUDA and only queried is
    no holder, and neither is one that gave its lease back; the job that
    then got the GPU is the only holder."""
    import json
    q = Probe(one, "gpa2", "init", "query", "eof")
    q.until("waiting")
    a = Probe(one, "dlsym", "init", "create", "work", "destroy", "eof",
              GPUMUTEX_GIVE_BACK_MS="0")
    a.until("waiting")
    b = holder(one)  # gets the GPU once A gave it back
    st = subprocess.run([str(REPO / "build" / "gpumutex"), "status", "--json",
                         "--lock-dir", one["GPUMUTEX_LOCK_DIR"]],
                        capture_output=True, text=True, timeout=TIMEOUT)
    doc = json.loads(st.stdout)
    pids = [p for lease in doc["leases"] for p in lease["pids"]]
    assert pids == [b.pid], doc
    assert b.release() == 0
    for p in (q, a):
        p.p.stdin.close()
        p.finish()
