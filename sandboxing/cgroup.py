"""A cgroup per run: the one guaranteed bound on all the memory of a run's processes together.

The anchors (IOI's isolate, nsjail, SandboxFusion) all bound a run this way: the kernel charges every
page a process of the cgroup causes -- anonymous memory, memfds, tmpfs files, SysV shared memory,
socket and pipe buffers, inodes -- to the cgroup, whatever process or namespace holds it, and when
the charge reaches the limit it reclaims, then kills a process of the cgroup (the OOM killer, inside
the cgroup only). The trainer never competes with a run for that memory.

    version   where                                   limits written
    v2        a writable subtree of the unified       memory.max = memory.swap.max + ... = budget,
              hierarchy (root; a systemd-delegated    swap 0, memory.oom.group = 1, pids.max,
              subtree; a container's own namespace)   cpu.max
    v1        the memory controller's own hierarchy   memory.limit_in_bytes = memory.memsw.limit_in_bytes
              (root)                                  = budget; pids.max, cpu.cfs_quota_us where mounted

Each run's cgroup is a child of the cgroup this process is in (so any bound on the trainer holds its
runs too): <mount><own path>/core-code-sandbox/run-<pid>-<n>. The parent opens each hierarchy's
cgroup.procs and passes the fds to the child, which writes "0" (itself) into each as the first thing
it does, before any of the program's code runs; the kernel checks the opener's credentials, so this
works in the user namespace too. A run exceeded its budget when its OOM-kill count rose (v1
memory.oom_control `oom_kill`, v2 memory.events `oom_kill`): the parent then kills the whole run
(verdict `memory`). The peak: memory.max_usage_in_bytes (v1), memory.peak (v2, Linux 5.19+).
Removal retries: the kernel frees some of a dead cgroup's memory asynchronously.
"""
import contextlib
import itertools
import os
import signal
import time

NAME = "core-code-sandbox"
CPU_PERIOD_US = 100_000
_runs = itertools.count()


def own_cgroups():
    """{controller or "": path} from /proc/self/cgroup ("" is the unified v2 hierarchy)."""
    found = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                found[name.removeprefix("name=")] = path
    return found


def mounts():
    """{controller or "": mount point} of the cgroup file systems (/proc/self/mountinfo)."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            fstype, options = fields[fields.index("-") + 1], fields[-1].split(",")
            if fstype == "cgroup2":
                found.setdefault("", fields[4])
            elif fstype == "cgroup":
                for name in ("memory", "cpu", "pids"):
                    if name in options:
                        found.setdefault(name, fields[4])
    return found


def write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def read(path):
    with open(path) as f:
        return f.read()


def field(path, key):
    """The number after `key` in a flat keyed file (memory.events, memory.oom_control)."""
    for line in read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def remove(path, tries=12):
    """rmdir with retries, 1 ms, 2 ms, 4 ms ... (~4 s in all: the last processes may still be
    exiting, and the kernel frees some of their memory asynchronously); True once gone."""
    for k in range(tries):
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.001 * 2 ** k)
    return False


class Cgroup:
    """One run's cgroup: `dirs` {controller: folder} ("" for v2's one folder)."""

    def __init__(self, version, dirs):
        self.version, self.dirs = version, dirs
        self.fds = []

    def open_procs(self):
        """fds of each hierarchy's cgroup.procs for the child to write "0" into (sandboxing/runner.py)."""
        self.fds = [os.open(os.path.join(d, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC) for d in self.dirs.values()]
        return self.fds

    @property
    def memory(self):
        return self.dirs["" if self.version == 2 else "memory"]

    def oom_kills(self):
        """How many processes the OOM killer killed in this cgroup."""
        if self.version == 2:
            return field(os.path.join(self.memory, "memory.events"), "oom_kill")
        return field(os.path.join(self.memory, "memory.oom_control"), "oom_kill")

    def peak_bytes(self):
        """The most memory charged to the cgroup at once (0 where the kernel does not say)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        with contextlib.suppress(OSError, ValueError):
            return int(read(os.path.join(self.memory, name)))
        return 0

    def cpu_seconds(self):
        """CPU seconds (user + sys) of every process that was in the cgroup: v2 cpu.stat `usage_usec`, v1
        cpuacct.usage (ns) where cpuacct is mounted with the cpu controller; None where neither is there."""
        with contextlib.suppress(OSError, ValueError):
            if self.version == 2:
                return field(os.path.join(self.memory, "cpu.stat"), "usage_usec") / 1e6
            if "cpu" in self.dirs and os.path.exists(os.path.join(self.dirs["cpu"], "cpuacct.usage")):
                return int(read(os.path.join(self.dirs["cpu"], "cpuacct.usage"))) / 1e9
        return None

    def pids(self):
        with contextlib.suppress(OSError):
            return [int(p) for p in read(os.path.join(self.memory, "cgroup.procs")).split()]
        return []

    def kill(self):
        """Kill every process in the cgroup (v2: cgroup.kill; v1: each pid, until none is left)."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                write(os.path.join(self.memory, "cgroup.kill"), 1)
                return
        for _ in range(100):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def close(self):
        """Kill what is left, close the fds, remove the folders (with retries)."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []
        self.kill()
        for d in self.dirs.values():
            remove(d)


def parents():
    """(version, {controller: the folder runs are made in}) of the first hierarchy we can write:
    v2 with the memory controller, else v1's memory (with cpu and pids where mounted). OSError if none."""
    own, where, errors = own_cgroups(), mounts(), []
    if "" in where and "" in own:
        try:
            return 2, {"": v2_parent(os.path.join(where[""], own[""].lstrip("/")))}
        except OSError as e:
            errors.append(f"v2: {e.strerror or e}")
    if "memory" in where:
        found = {}
        for name in ("memory", "cpu", "pids"):
            if name in where:
                try:
                    found[name] = made(os.path.join(where[name], own.get(name, "/").lstrip("/"), NAME))
                except OSError as e:
                    if name == "memory":
                        errors.append(f"v1: {e.strerror or e}")
                        break
            if name == "memory" and name not in found:
                break
        else:
            return 1, found
    raise OSError("; ".join(errors) or "no cgroup hierarchy with a memory controller is mounted")


def made(path):
    """mkdir -p `path`, then check that we may make a child in it (OSError if not)."""
    os.makedirs(path, exist_ok=True)
    probe = os.path.join(path, f"probe-{os.getpid()}")
    os.mkdir(probe)
    os.rmdir(probe)
    return path


def v2_parent(own):
    """<own cgroup>/core-code-sandbox with the memory controller on for its children (OSError if the
    subtree is not ours to change, or memory cannot be enabled below it)."""
    base = made(os.path.join(own, NAME))
    if "memory" not in read(os.path.join(base, "cgroup.controllers")).split():
        write(os.path.join(own, "cgroup.subtree_control"), "+memory")  # fails where own holds processes
    for controller in ("memory", "pids", "cpu"):
        with contextlib.suppress(OSError):
            write(os.path.join(base, "cgroup.subtree_control"), f"+{controller}")
    if "memory" not in read(os.path.join(base, "cgroup.subtree_control")).split():
        raise OSError(f"cannot enable the memory controller in {base}")
    return base


def create(found, limit_bytes, max_procs=None, cpus=None):
    """A new run cgroup under `found` (parents()): memory and memory + swap capped at `limit_bytes`
    (None: no limit, a meter only), at most `max_procs` tasks, `cpus` cores of CPU time."""
    version, bases = found
    name = f"run-{os.getpid()}-{next(_runs)}"
    group = Cgroup(version, {c: os.path.join(b, name) for c, b in bases.items()})
    try:
        for d in group.dirs.values():
            os.mkdir(d)
        if version == 2:
            d = group.dirs[""]
            if limit_bytes is not None:
                write(os.path.join(d, "memory.max"), limit_bytes)
                write(os.path.join(d, "memory.swap.max"), 0)
                write(os.path.join(d, "memory.oom.group"), 1)  # an OOM kill takes the whole run
            optional = [(os.path.join(d, "pids.max"), max_procs),
                        (os.path.join(d, "cpu.max"), cpus and f"{int(cpus * CPU_PERIOD_US)} {CPU_PERIOD_US}")]
        else:
            d = group.dirs["memory"]
            if limit_bytes is not None:
                write(os.path.join(d, "memory.limit_in_bytes"), limit_bytes)  # first: memsw >= limit always
                try:
                    write(os.path.join(d, "memory.memsw.limit_in_bytes"), limit_bytes)
                except FileNotFoundError:  # no swap accounting: then keep the run out of swap
                    write(os.path.join(d, "memory.swappiness"), 0)
            optional = [(os.path.join(group.dirs[c], f), v) for c, f, v in
                        (("pids", "pids.max", max_procs), ("cpu", "cpu.cfs_period_us", cpus and CPU_PERIOD_US),
                         ("cpu", "cpu.cfs_quota_us", cpus and int(cpus * CPU_PERIOD_US))) if c in group.dirs]
        for path, value in optional:
            if value:
                write(path, value)
    except OSError:
        group.close()
        raise
    return group


def clean_stale(found):
    """Remove the run cgroups of trainers that are gone (killed before their clean-up)."""
    for base in found[1].values():
        with contextlib.suppress(OSError):
            for name in os.listdir(base):
                owner = name.split("-")[1] if name.startswith("run-") else ""
                if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.join(base, name))
