"""Run hostile programs through the sandbox as whoever runs this script, and check the host after each.

tests/sandboxing/test_sandbox_rootless.py copies the sandbox's files into a folder of an unprivileged uid's and
runs this script there as that uid, with the system's python3 (standard library only). Input: a JSON
file (argv[1]) {"cases": [[name, program, tests, kwargs], ...], "home": ..., "watch": [folders],
"port": listener port or 0, "unix": a unix socket path to listen on or "", "keyring": a secret to put in
a session keyring of this script's own or "", "unsafe": bool}; output on stdout: one JSON list, per case
{name, verdict, tests, passed, detail, unsafe, changes, left, connections, baseline_mb, peak_mb,
run_peak_mb, cost_s, cost_mb} (the last two: kwargs cost=True, sandboxing/cost.py); "budget_mb" sets the runs' memory budget, "meter" names a cgroup v1 folder around this script:
    changes      the host files created, changed or removed under `watch` (the home, the sandbox's
                 own files, /tmp, /var/tmp, /dev/shm) while the case ran
    left         processes of this uid alive after the verdict that were not before the run, other than this script
    connections  connections that reached the listeners this script holds (127.0.0.1, the unix socket)
    keys         what changed in this script's session keyring (a key added, the secret gone)
    baseline_mb  the meter's usage before the case (this script), peak_mb its peak during the case
"""
import hashlib
import json
import os
import socket
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sandbox  # noqa: E402  (the copy beside this script)


def snapshot(folders, owner):
    """{path: (size, mtime, sha256)} of `owner`'s files and folders under the folders (what a program
    running as this uid could create, change or remove; other users' files in /tmp are not its doing);
    owner None: anyone's. Symbolic links are recorded, never followed. (os.scandir, not os.walk + lstat: the
    walk runs after every case over all of /tmp, and DirEntry's stat is a third cheaper.)"""
    seen, stack = {}, list(folders)
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(entry.path)
                    if owner is not None and st.st_uid != owner:
                        continue
                    digest = None
                    if stat.S_ISREG(st.st_mode):
                        with open(entry.path, "rb") as f:
                            digest = hashlib.sha256(f.read()).hexdigest()
                    seen[entry.path] = (st.st_size, st.st_mtime_ns, digest)
                except OSError:
                    continue
    return seen


def my_processes():
    """Pids of this uid's processes (zombies included), this script and its parent left out."""
    mine = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration):
            continue
        if uid == os.getuid() and int(pid) not in (os.getpid(), os.getppid()):
            mine.append(int(pid))
    return mine


def in_meter(folder):
    """Pids in the cgroup `folder` and below it, this script and its parent left out (as root: what the runs
    left behind, whatever uid or parent it has now: a process stays in its cgroup when it is re-parented)."""
    found = []
    for root, _, files in os.walk(folder):
        if "cgroup.procs" in files:
            with open(os.path.join(root, "cgroup.procs")) as f:
                found += [int(p) for p in f.read().split() if int(p) not in (os.getpid(), os.getppid())]
    return found


def keyctl(*args, call="keyctl"):
    """keyctl(2) or add_key(2) through the C library's syscall(); x86_64's and aarch64's numbers."""
    import ctypes
    number = {"keyctl": {"x86_64": 250, "aarch64": 219}, "add_key": {"x86_64": 248, "aarch64": 217}}[call]
    return ctypes.CDLL(None).syscall(number[os.uname().machine], *args)


def keyring_state():
    """(the secret still there, a key 'left-by-run' there) in the session keyring (-3)."""
    search = lambda name: keyctl(10, -3, b"user", name, 0) > 0  # noqa: E731  (KEYCTL_SEARCH)
    return search(b"core-sandbox-secret"), search(b"left-by-run")


def gauge(folder, reset=False):
    """MiB: the cgroup v1 meter around this script (`folder`, made by the test as root), its usage now
    (`reset`: and its peak set back to it), else its peak since; None without one."""
    if not folder:
        return None
    if reset:
        with open(os.path.join(folder, "memory.max_usage_in_bytes"), "w") as f:
            f.write("0")
    with open(os.path.join(folder, "memory.usage_in_bytes" if reset else "memory.max_usage_in_bytes")) as f:
        return int(f.read()) / 2**20


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    if job.get("unsafe") and hasattr(sandbox, "allow_unsafe"):  # (an older sandbox had no such switch)
        sandbox.allow_unsafe()
    server = None
    if job.get("port"):
        server = socket.socket()
        server.bind(("127.0.0.1", job["port"]))
        server.listen()
        server.setblocking(False)
    listeners = [server] if server else []
    if job.get("unix"):
        unix = socket.socket(socket.AF_UNIX)
        if os.path.exists(job["unix"]):  # left by an earlier harness (as another user)
            os.remove(job["unix"])
        unix.bind(job["unix"])
        os.chmod(job["unix"], 0o777)
        unix.listen()
        unix.setblocking(False)
        listeners.append(unix)
    if job.get("keyring"):
        keyctl(1, None)  # KEYCTL_JOIN_SESSION_KEYRING: a session keyring of our own, as a login has
        secret = job["keyring"].encode()
        keyctl(b"user", b"core-sandbox-secret", secret, len(secret), -3, call="add_key")
    if job.get("budget_mb"):
        sandbox.memory.set_budget(job["budget_mb"])
    out = []
    owner = job.get("owner", os.getuid()) if os.getuid() == 0 else os.getuid()
    # One case's "after" is the next one's "before": nothing but this script runs between them, and if something
    # the last run started changed a file after its snapshot, the next case is blamed: strict, never lenient.
    after, shared_after = snapshot(job["watch"], owner), snapshot(job.get("watch_any", []), None)
    for name, program, tests, kwargs in job["cases"]:
        before, shared = after, shared_after
        baseline = gauge(job.get("meter"), reset=True)
        present = set(my_processes())  # an earlier run's (or test's) not yet reaped: not this run's
        r = sandbox.run_program(program, tests, **kwargs)
        peak = gauge(job.get("meter"))
        after, shared_after = snapshot(job["watch"], owner), snapshot(job.get("watch_any", []), None)
        changes = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        changes += sorted(set(shared_after) - set(shared))  # (as root: files a leased uid left in watch_any)
        connections = 0
        for listener in listeners:
            while True:
                try:
                    listener.accept()[0].close()
                    connections += 1
                except BlockingIOError:
                    break
        keys = [] if not job.get("keyring") or keyring_state() == (True, False) else [keyring_state()]
        left = in_meter(job["meter"]) if job.get("left_in_meter") else [p for p in my_processes() if p not in present]
        out.append(dict(name=name, verdict=r.verdict, tests=list(r.tests), passed=r.passed, detail=r.detail,
                        unsafe=getattr(r, "unsafe", None), changes=changes + keys, left=left,
                        connections=connections, baseline_mb=baseline, peak_mb=peak,
                        run_peak_mb=getattr(r, "run_peak_mb", None), cost_s=getattr(r, "cost_s", None),
                        cost_mb=getattr(r, "cost_mb", None)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
