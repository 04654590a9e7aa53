"""One run, one bounded share of the machine: the memory budget of all of a run's processes together,
by the strongest mechanism that works here, found by trying it (not by reading the uid).

    mechanism                         who gets it                   what holds the budget
    cgroup v2 / cgroup v1             root; a writable v2 subtree   the kernel (sandboxing/cgroup.py): every
                                                                    page of the run is charged; guaranteed
    seccomp + rlimits + watchdog      everyone else (an ordinary    the channels an address-space limit
                                      user on a laptop)             cannot see refused (sandboxing/seccomp.py),
                                                                    the rest bounded by arithmetic, and a
                                                                    watchdog here: best effort

The watchdog samples the run every TICK_S: the proportional set size (Pss, shared pages split among
the processes that map them, shmem included) of each of the run's processes, read from
/proc/<pid>/smaps_rollup, plus the data in the run's private tmpfs mounts (statvfs through
/proc/<runner>/root), and kills the run when the sum passes the budget. The next sample comes sooner
the less room is left: after (budget - held) / FILL_MB_S, between MIN_TICK_S and TICK_S (our choice: a
run far from its budget costs one sample per TICK_S, ~2 ms of the parent's time; one near it cannot
fill more than its remaining room before it is seen again). Best effort: between two samples a run can
allocate at the machine's speed (FILL_MB_S), killing it takes a few more ms, and kernel memory
that no process maps (socket and pipe buffers, inodes) is not in the sum; worst_case_mb() is the
arithmetic bound that holds without the watchdog: every process at its address-space limit, every
tmpfs full, every file descriptor a socket with full buffers. In both mechanisms a host guard stops the
run when the host's MemAvailable falls below HOST_FLOOR_MB, whatever else is running (our choice: a
program's reward is lost rather than the trainer).

An over-budget run is killed whole and every test of it gets the verdict `memory` (pass rate 0): the
budget is the run's, not a test's, and what a program leaves in tmpfs or in a child outlives the test
that made it (our choice; a per-test CPU timeout, by contrast, keeps the tests that passed before).
"""
import contextlib
import functools
import os
import subprocess
import sys
import time

from sandboxing import cgroup
from sandboxing.confine import ISOLATED, TMP_DIRS, TMPFS_INODES, TMPFS_MB

BUDGET_MB = 2048  # --sandbox-memory: all of one run's processes and files together
HOST_FLOOR_MB = 512  # stop running programs when the host has less than this available
TICK_S = 0.05  # the watchdog's longest period, and how often a cgroup's OOM-kill count is read
MIN_TICK_S = 0.005  # the watchdog's shortest period, near the budget
# How fast a run can fill memory, MiB/s: ~4 GiB/s of fresh pages written per core (a children bomb put
# 200 MiB into one 50 ms tick on 2 cores), times the cores this process may use.
FILL_MB_S = 4096 * len(os.sched_getaffinity(0))
WATCHDOG_PROCS = 16  # RLIMIT_NPROC without a cgroup (32 with one): each process adds an address space
SOCKET_KIB = 416  # a unix socket's send buffer at the kernel's default (212992 bytes) with its overhead
NOFILE = 256  # RLIMIT_NOFILE (sandboxing/child.py)
NO_CGROUPS = "CORE_CODE_SANDBOX_NO_CGROUPS"  # =1 in the environment: act as if no cgroup could be made (tests)
_state = {"budget_mb": BUDGET_MB}


def set_budget(megabytes: int) -> None:
    """--sandbox-memory: the budget of every later run, MiB (ValueError below 64)."""
    if megabytes < 64:
        raise ValueError(f"--sandbox-memory: at least 64 MiB, got {megabytes}")
    _state["budget_mb"] = int(megabytes)


def budget_mb() -> int:
    return _state["budget_mb"]


@functools.cache
def cgroups():
    """(version, {controller: folder}) where runs get a cgroup of their own, or the reason why not
    (a str). Tried once: a probe run cgroup made and removed."""
    if os.environ.get(NO_CGROUPS) == "1":
        return f"no cgroup: switched off by {NO_CGROUPS}=1"
    return hierarchy()


@functools.cache
def hierarchy():
    """cgroups() whatever NO_CGROUPS says (a gauge's cgroup is made there: `gauge`)."""
    try:
        found = cgroup.parents()
        cgroup.clean_stale(found)
        cgroup.create(found, 64 << 20).close()
        return found
    except OSError as e:
        return f"no cgroup: {e}"[:200]


def gauge(on: bool = True) -> None:
    """Tests and the deep check: where runs have no cgroup of their own but one can be made (root
    with NO_CGROUPS=1), put each run in an unlimited cgroup that only measures it, so that
    Result.run_peak_mb is the kernel's count of everything the run held, not the watchdog's."""
    _state["gauge"] = on


@functools.cache
def seccomp_works():
    """True when this kernel lets an unprivileged process install the filter (tried in a fresh
    interpreter: prctl(PR_SET_NO_NEW_PRIVS), then the filter, then a memfd_create that must fail;
    -B: no __pycache__ written into the project)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    probe = ("import os, sys\nsys.path.insert(0, sys.argv[1])\nfrom sandboxing import seccomp\n"
             "from sandboxing.child import libc\nlibc('prctl', 38, 1, 0, 0, 0)\nseccomp.refuse()\n"
             "try:\n    os.memfd_create('probe')\nexcept OSError:\n    sys.exit(0)\nsys.exit(1)\n")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run([sys.executable, "-I", "-S", "-B", "-c", probe, here], timeout=30,
                              capture_output=True).returncode == 0
    return False


def mechanism() -> str:
    found = cgroups()
    if not isinstance(found, str):
        return f"cgroup v{found[0]}"
    return "seccomp + rlimits + watchdog" if seccomp_works() else "rlimits + watchdog"


def guaranteed() -> bool:
    return mechanism().startswith("cgroup")


def max_procs(limit: int) -> int:
    """RLIMIT_NPROC of a run: `limit` with a cgroup, at most WATCHDOG_PROCS without one."""
    return limit if guaranteed() else min(limit, WATCHDOG_PROCS)


def worst_case_mb(memory_mb: int) -> int:
    """Without a cgroup: the most one run can hold if the watchdog never fires (the arithmetic of the
    rlimits): every process at its address-space limit (+13 MiB of interpreter), three full tmpfs
    with their inodes (~1 KiB each), every fd a socket with a full send buffer, 64 MiB of pipes (the
    kernel's per-user soft limit, pipe-user-pages-soft)."""
    procs = WATCHDOG_PROCS
    return int(procs * (memory_mb + 13) + len(TMP_DIRS) * (TMPFS_MB + TMPFS_INODES / 1024)
               + procs * NOFILE * SOCKET_KIB / 1024 + 64)


def describe(memory_mb: int, landlock: bool = False) -> str:
    """The --check / training line: `memory: cgroup v1, 2048 MiB per run, guaranteed` or the watchdog's
    aim with its worst case (landlock: the run's files lie in the host's /tmp and /dev/shm, not in tmpfs
    mounts of a bounded size, so only the watchdog's sum bounds them)."""
    kind, budget = mechanism(), budget_mb()
    if guaranteed():
        version, dirs = cgroups()
        cpu = "1 core per run (its cgroup's CPU quota)" if version == 2 or "cpu" in dirs else "RLIMIT_CPU per process only"
        return f"memory: {kind}, {budget} MiB per run, guaranteed; CPU: {cpu}"
    why = cgroups()
    files = f" + the run's files ({MAX_FILES} at most, in its work dir and /dev/shm)" if landlock else ""
    return (f"memory: {kind}, aim {budget} MiB per run, best effort, worst case {worst_case_mb(memory_mb) / 1024:.1f}"
            f" GiB{files} ({why}); CPU: RLIMIT_CPU per process only")


def host_available_mb():
    """MemAvailable of /proc/meminfo, MiB (read at most once per TICK_S for all runs)."""
    now = time.monotonic()
    if now - _host["at"] >= TICK_S:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    _host.update(at=now, mb=int(line.split()[1]) // 1024)
                    break
    return _host["mb"]


_host = {"at": -1.0, "mb": 1 << 30}


class Meter:
    """One run's memory: `fds` for the child to join (cgroup.procs), `over()` polled every `tick()` s by
    the parent (None, or the detail of the verdict `memory`), `peak_mb()` once it has ended."""

    def __init__(self, mode, budget_mb_, max_procs, files=None):
        self.mode, self.budget, self.files = mode, budget_mb_ << 20, files  # files: the Landlock tier's (own_files)
        self.since = time.time()
        self.group, self.gauge, self.peak, self.pid, self.cut = None, None, 0, None, None
        self.held = 0  # bytes at the watchdog's last sample
        found = cgroups()
        if not isinstance(found, str):
            # v1: each hierarchy joined costs the child an RCU grace period (~10 ms under load), so pids
            # only where RLIMIT_NPROC cannot hold: `user` mode as host root
            version, dirs = found
            dirs = {c: d for c, d in dirs.items() if c != "pids" or (mode == "user" and os.geteuid() == 0)}
            self.group = cgroup.create((version, dirs), self.budget, max_procs=max_procs + 2, cpus=1)  # + runner, judge
        elif _state.get("gauge") and not isinstance(hierarchy(), str):
            self.gauge = cgroup.create(hierarchy(), None)

    def fds(self):
        return (self.group or self.gauge).open_procs() if self.group or self.gauge else []

    def start(self, pid):
        """The pid of the process the run lives under (`unshare` or the child itself)."""
        self.pid = pid

    def over(self):
        if self.cut:
            return self.cut
        # The Landlock tier with a cgroup: its files too (the work dir lies on the host's /tmp, often a disk, whose
        # pages the cgroup may write back and drop: 192 MiB of files passed a 64 MiB budget).
        files = own_files(*self.files, self.since) if self.group is not None and self.files is not None else 0
        if host_available_mb() < HOST_FLOOR_MB:
            self.cut = f"the host's available memory fell below {HOST_FLOOR_MB} MiB"
        elif files is None:
            self.cut = f"more than {MAX_FILES} files in its work dir and /dev/shm"
        elif files > self.budget:
            self.cut = (f"over the memory budget ({self.budget >> 20} MiB for the run): {files >> 20} MiB in its files "
                        "(work dir, /dev/shm)")
        elif self.group is not None:
            if self.group.oom_kills():
                self.cut = f"over the memory budget ({self.budget >> 20} MiB for the run, all its processes)"
        else:
            self.held = self.sample()
            self.peak = max(self.peak, self.held)
            if self.held > self.budget and not self.cut:  # (sample() may have said why: too many files)
                self.cut = (f"over the memory budget ({self.budget >> 20} MiB for the run): {self.held >> 20} MiB "
                            "in its processes and tmpfs")
        return self.cut

    def tick(self):
        """Seconds until `over()` is due again: TICK_S with a cgroup (the kernel holds the budget), else the
        time the run would need to fill the room it has left (module docstring), within MIN_TICK_S..TICK_S."""
        if self.group is not None:
            return TICK_S
        room_mb = max(self.budget - self.held, 0) / 2**20
        return min(TICK_S, max(MIN_TICK_S, room_mb / FILL_MB_S))

    def oom_killed(self):
        """After the run: did its cgroup's OOM killer strike (a process killed, the run ended anyway)?"""
        if self.group is not None and not self.cut and self.group.oom_kills():
            self.cut = f"over the memory budget ({self.budget >> 20} MiB for the run, all its processes)"
        return self.cut

    def sample(self):
        """Bytes the run holds now: its processes' Pss and its tmpfs mounts' data."""
        pids = descendants(self.pid)
        total = sum(pss_bytes(p) for p in pids)
        if self.mode in ISOLATED and len(pids) > 1:
            total += tmpfs_bytes(pids[1])  # the runner: pid 1 of the run, child of `unshare`
        if self.files is not None:
            held = own_files(*self.files, self.since)
            if held is None:
                self.cut = f"more than {MAX_FILES} files in its work dir and /dev/shm"
                return self.budget + 1
            total += held
        return total

    def peak_mb(self):
        if self.group or self.gauge:
            self.peak = (self.group or self.gauge).peak_bytes()
        return round(self.peak / 2**20, 1)

    def close(self):
        for group in (self.group, self.gauge):
            if group is not None:
                group.close()


def descendants(pid):
    """[pid, its children, theirs, ...] from /proc/<pid>/task/<tid>/children (breadth first). With
    namespaces, an orphan is adopted by the run's pid 1, so none escapes this walk."""
    found, i = [pid], 0
    while i < len(found):
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{found[i]}/task"):
                with contextlib.suppress(OSError), open(f"/proc/{found[i]}/task/{tid}/children") as f:
                    found.extend(int(c) for c in f.read().split())
        i += 1
    return found


def pss_bytes(pid):
    """The process's proportional set size (anonymous, file and shmem pages, shared ones split), bytes."""
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/smaps_rollup", "rb") as f:
        for line in f:
            if line.startswith(b"Pss:"):
                return int(line.split()[1]) * 1024
    return 0


MAX_FILES = 4096  # the Landlock tier: files of a run in its work dir and /dev/shm (TMPFS_INODES of a private tmpfs)


def own_files(workdir, uid, since):
    """The Landlock tier (no private tmpfs): bytes of the run's files, those in its work dir (on the host's
    /tmp) and in /dev/shm (shm_files); None past MAX_FILES (the walk's cost stays bounded)."""
    total, seen, stack = 0, 0, [workdir]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                seen += 1
                if seen > MAX_FILES:
                    return None
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
    return total + sum(size for _, size in shm_files(uid, since))


def shm_files(uid, since):
    """[(path, bytes)] in /dev/shm that a Landlock-tier run may have made: the leased `uid`'s (root), else
    our own uid's changed since `since` (time.time() at the run's start; parallel runs' count too: stricter)."""
    found = []
    with contextlib.suppress(OSError), os.scandir("/dev/shm") as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if st.st_uid == uid if uid is not None else (st.st_uid == os.getuid() and st.st_ctime >= since):
                    found.append((entry.path, st.st_blocks * 512))
    return found


def remove_shm(uid, since):
    """After a Landlock-tier run: its files in /dev/shm (shm_files) are removed -- as an ordinary user only
    those that no live process of ours holds open or mapped (a parallel run's, the trainer's stay)."""
    paths = [path for path, _ in shm_files(uid, since)]
    if paths and uid is None:
        held = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{pid}").st_uid != os.getuid():
                    continue
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
                with open(f"/proc/{pid}/maps") as f:
                    held.update(line.split(None, 5)[-1].strip() for line in f if "/dev/shm/" in line)
        paths = [p for p in paths if p not in held]
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def tmpfs_bytes(runner):
    """Data in the run's private tmpfs mounts, seen through the runner's root: bytes."""
    total, host = 0, os.stat("/")
    with contextlib.suppress(OSError):
        root = os.stat(f"/proc/{runner}/root")
        if (root.st_dev, root.st_ino) == (host.st_dev, host.st_ino):
            return 0  # not yet in its own root filesystem: these would be the host's folders
    for path in TMP_DIRS:
        with contextlib.suppress(OSError):
            st = os.statvfs(f"/proc/{runner}/root{path}")
            total += (st.f_blocks - st.f_bfree) * st.f_frsize
    return total

