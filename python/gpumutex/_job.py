"""Does the job the caller runs in hold GPUs now? (The core's gm_job_probe
and gm_join_check, src/lease/join.c, in Python.)

A command started as a new job from inside a job that holds GPUs would
queue behind its own caller's GPUs, for ever if the caller waits for it.
environ() asks this module whether the base environment's GPUMUTEX_JOB is
such a job, and then keeps that job id (the child joins the job) instead of
a fresh one. Like the core's probe it takes no lock and creates nothing:
F_OFD_GETLK probes and a read of the job's record, believed only if it is
the caller's own. Nothing here decides exclusion: the child's cuInit checks
the lease again, with the kernel's locks.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
import struct
from typing import List, Optional, Tuple

# Linux's number, for a fcntl module that does not name it.
_F_OFD_GETLK = getattr(fcntl, "F_OFD_GETLK", 36)
# struct flock with a 64-bit off_t (OFD commands always use that layout):
# l_type, l_whence, l_start, l_len, l_pid, padded like the C struct.
_FLOCK = "@hhqqi0q"
_LEASE_OFF = 1                      # byte 1+L names lease L
_LEASE_MAX = (1 << 61) - 1
_RECORD_MAX = 4096
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LEASE = re.compile(r"\nlease=([0-9a-fA-F]{1,16})\n")
_DEVICES = re.compile(r"\ndevices=([0-9,]+)\n")


def _holder(fd: int, start: int) -> int:
    """Who holds byte `start` of `fd` against a write lock, from another
    open file description: F_UNLCK, F_RDLCK or F_WRLCK."""
    arg = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, start, 1, 0)
    return struct.unpack(_FLOCK, fcntl.fcntl(fd, _F_OFD_GETLK, arg))[0]


def _live_lease(root: int, jobdir: int, name: str) -> Optional[List[int]]:
    """The devices of job `name`'s record if it names a live lease."""
    try:
        fd = os.open(f"{name}.lease", _FILE, dir_fd=jobdir)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        text = os.read(fd, _RECORD_MAX - 1).decode("utf-8", "replace")
    finally:
        os.close(fd)
    lease, devices = _LEASE.search(text), _DEVICES.search(text)
    if not text.startswith("gpumutex-lease 1\n") or not lease or not devices:
        return None
    lid = int(lease.group(1), 16)
    if not 0 < lid <= _LEASE_MAX:
        return None
    try:
        devs = [int(d) for d in devices.group(1).split(",")]
    except ValueError:
        return None
    return devs if _alive(root, lid, devs) else None


def _alive(root: int, lease: int, devices: List[int]) -> bool:
    """Does some description hold lease `lease`'s byte on a device?"""
    dev = os.open("dev", _DIR, dir_fd=root)
    try:
        for d in devices:
            try:
                fd = os.open(str(d), _FILE, dir_fd=dev)
            except FileNotFoundError:
                continue
            try:
                if _holder(fd, _LEASE_OFF + lease) == fcntl.F_RDLCK:
                    return True
            finally:
                os.close(fd)
        return False
    finally:
        os.close(dev)


def _user_dir(jobs: int) -> int:
    """This user's directory of job files in job/ (records.c,
    gm__user_dir_find): job/<uid> if it is a directory of ours that others
    cannot write to, else the lowest-named such job/<uid>.<16 hex>.
    Raises FileNotFoundError when there is none."""
    uid = os.geteuid()
    alt = re.compile(r"%d\.[0-9a-fA-F]{16}\Z" % uid)
    names = [str(uid)] + sorted(n for n in os.listdir(jobs) if alt.match(n))
    for n in names:
        try:
            fd = os.open(n, _DIR, dir_fd=jobs)
        except OSError:
            continue
        st = os.fstat(fd)
        if st.st_uid == uid and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return fd
        os.close(fd)
    raise FileNotFoundError(f"job/{uid}")


def probe(lock_dir: str, job: str) -> Tuple[str, List[int]]:
    """What job `job` of this user is doing in `lock_dir`: ("leased",
    devices) when it has a live lease, ("taking", []) when one of its
    processes holds the job lock without one, ("none", []) otherwise, or
    when that cannot be told (the caller then starts a new job, as
    before)."""
    name = job
    try:
        root = os.open(lock_dir, _DIR)
    except OSError:
        return "none", []
    try:
        jobs = os.open("job", _DIR, dir_fd=root)
        try:
            jobdir = _user_dir(jobs)
        finally:
            os.close(jobs)
    except OSError:
        os.close(root)
        return "none", []
    try:
        devs = _live_lease(root, jobdir, name)
        if devs is not None:
            return "leased", devs
        # As in the core: look at the job lock, then at the record again,
        # so that a grant between the two looks is not missed.
        taking = False
        try:
            fd = os.open(name, _FILE, dir_fd=jobdir)
        except FileNotFoundError:
            fd = -1
        if fd >= 0:
            try:
                st = os.fstat(fd)
                taking = (stat.S_ISFIFO(st.st_mode)
                          and st.st_uid == os.geteuid()
                          and _holder(fd, 0) != fcntl.F_UNLCK)
            finally:
                os.close(fd)
        devs = _live_lease(root, jobdir, name)
        if devs is not None:
            return "leased", devs
        return ("taking" if taking else "none"), []
    except OSError:
        return "none", []
    finally:
        os.close(jobdir)
        os.close(root)


def join_problem(job: str, lease: List[int], devices: List[int],
                 want: int) -> Optional[str]:
    """Why a process with candidates `devices` that needs `want` GPUs
    cannot join job `job`'s lease on `lease` (gm_join_check), or None."""
    usable = [d for d in lease if d in devices]
    if usable and len(usable) >= want:
        return None
    held = ",".join(map(str, lease))
    mine = ",".join(map(str, devices))
    s = "" if len(lease) == 1 else "s"
    if not usable:
        which = "which is not" if len(lease) == 1 else "none of which is"
        return (f"the lease of job {job} holds GPU{s} {held}, {which} among "
                f"this process's GPUs ({mine})")
    if len(usable) == len(lease):
        return (f"the lease of job {job} holds {len(lease)} GPU{s} ({held}), "
                f"fewer than the {want} this process needs, and a job's "
                f"lease cannot grow")
    verb = "is" if len(usable) == 1 else "are"
    return (f"only {len(usable)} of the GPUs the lease of job {job} holds "
            f"({held}) {verb} among this process's GPUs ({mine}), fewer "
            f"than the {want} it needs, and a job's lease cannot grow or "
            f"move")
