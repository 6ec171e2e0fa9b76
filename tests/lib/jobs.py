"""Start test jobs (lease-holder processes) and wait for what they report.

Synchronisation is by pipes the jobs write to at well-defined moments
(--waiting-fd: started waiting; --ready-fd: holds its lease; --wait-fd:
let go when the test closes the pipe), never by sleeping."""

import atexit
import os
import shutil
import stat
import subprocess
import tempfile

HANG_GUARD = 120  # seconds; only to turn a hang into a failure
BUILD = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "build")
_copies = None


def unreachable_dir(path=BUILD):
    """The first directory above `path` that other users cannot enter
    (no o+x; e.g. a checkout under /root), or None."""
    d = os.path.dirname(os.path.abspath(path))
    while True:
        if not os.stat(d).st_mode & stat.S_IXOTH:
            return d
        if d == "/":
            return None
        d = os.path.dirname(d)


def for_user(path, user):
    """The path by which `user` (None: this user) can run the program at
    `path`: itself, or, when a directory above the build is closed to
    others, a copy in a world-readable directory under /tmp made for this
    test session (the programs run as other users are self-contained).
    conftest.py's report header says which applies."""
    global _copies
    if user is None or not path.startswith(BUILD + os.sep) \
            or unreachable_dir(path) is None:
        return path
    if _copies is None:
        _copies = tempfile.mkdtemp(prefix="gm-test-bin-", dir="/tmp")
        os.chmod(_copies, 0o755)
        atexit.register(shutil.rmtree, _copies, True)
    copy = os.path.join(_copies, os.path.relpath(path, BUILD).replace(
        os.sep, "_"))
    if not os.path.exists(copy):
        shutil.copy2(path, copy + ".tmp")
        os.chmod(copy + ".tmp", 0o755)
        os.rename(copy + ".tmp", copy)
    return copy


class Job:
    def __init__(self, proc, waiting_r=None, ready_r=None, release_w=None):
        self.proc = proc
        self.pid = proc.pid
        self._waiting_r = waiting_r
        self._ready_r = ready_r
        self._release_w = release_w

    def _read1(self, fd):
        # One byte, or EOF (b"") if the job exited first.
        with os.fdopen(fd, "rb", buffering=0) as f:
            return f.read(1)

    def waited(self):
        """Block until the job reports it is waiting (True) or exits
        without ever waiting (False)."""
        fd, self._waiting_r = self._waiting_r, None
        return self._read1(fd) == b"w"

    def ready(self):
        """Block until the job holds its lease (True) or exits (False)."""
        fd, self._ready_r = self._ready_r, None
        return self._read1(fd) == b"r"

    def release(self):
        if self._release_w is not None:
            os.close(self._release_w)
            self._release_w = None

    def wait(self, timeout=HANG_GUARD):
        self.release()
        rc = self.proc.wait(timeout=timeout)
        for fd in (self._waiting_r, self._ready_r):
            if fd is not None:
                os.close(fd)
        self._waiting_r = self._ready_r = None
        return rc


def job_dir(lockdir, uid=None):
    """The directory of `uid`'s (default: our) job files: job/<uid>, or
    job/<uid>.<hex> when another user had taken that name (docs/design.md,
    "Files")."""
    uid = os.geteuid() if uid is None else uid
    base = os.path.join(lockdir, "job")
    names = [str(uid)]
    if os.path.isdir(base):
        names += sorted(n for n in os.listdir(base)
                        if n.startswith(f"{uid}."))
    for n in names:
        p = os.path.join(base, n)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
            return p
    return os.path.join(base, str(uid))


def job_file(lockdir, job, suffix="", uid=None):
    """job/<uid>/<job><suffix>: the job lock (""), its record (".lease")."""
    return os.path.join(job_dir(lockdir, uid), job + suffix)


def job_env(lockdir, journal, devices="0,1", want=None, job=None,
            timeout=None, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMUTEX_")}
    env["GPUMUTEX_VISIBLE_DEVICES"] = devices
    env["GPUMUTEX_LOCK_DIR"] = lockdir
    # No fallback re-check: a lost wake-up must show up as a hang (and a
    # failed test), not be papered over by a timer.
    env["GPUMUTEX_RECHECK_MS"] = "0"
    env["GM_JOURNAL"] = journal
    if want is not None:
        env["GPUMUTEX_NUM_DEVICES"] = str(want)
    if job is not None:
        env["GPUMUTEX_JOB"] = job
    if timeout is not None:
        env["GPUMUTEX_TIMEOUT"] = str(timeout)
    if extra:
        env.update(extra)
    return env


def as_user(uid):
    """preexec_fn that drops to `uid` (tests running as root only)."""
    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return drop


def start(holder, env, args=(), waiting=False, ready=False, hold=False,
          stderr=None, user=None, pass_fds=()):
    """Start one lease-holder. waiting/ready: open pipes to learn when it
    waits or holds; hold: keep it holding until Job.release()."""
    argv = [for_user(holder, user)]
    keep = []
    waiting_r = ready_r = release_w = None
    if waiting:
        waiting_r, w = os.pipe()
        argv += ["--waiting-fd", str(w)]
        keep.append(w)
    if ready:
        ready_r, w = os.pipe()
        argv += ["--ready-fd", str(w)]
        keep.append(w)
    if hold:
        r, release_w = os.pipe()
        argv += ["--wait-fd", str(r)]
        keep.append(r)
    argv += list(args)
    proc = subprocess.Popen(argv, env=env, pass_fds=keep + list(pass_fds),
                            stderr=stderr,
                            preexec_fn=as_user(user) if user else None)
    for fd in keep:
        os.close(fd)
    if release_w is not None:
        os.set_inheritable(release_w, False)
    return Job(proc, waiting_r, ready_r, release_w)
