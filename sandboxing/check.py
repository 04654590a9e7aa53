"""What the sandbox guarantees on this machine, seen from inside a run (`python sandbox.py --check`).

Each guarantee is a test of a small program of ours, run through the sandbox like any generated
program and judged the usual way, so a line says "yes" only when the run itself could not do the
thing (connect, see the host's processes, write outside its temp dirs, read the home...):

    $ python sandbox.py --check
    sandbox: user namespace (not root)
      uid           yes  uid 0 of the run's own user namespace (you, uid 1000, outside), no capability
      pid           yes  a pid namespace of its own: nothing the program starts outlives its verdict
      ...

train.py and eval.py call sandbox.require at start: one line of the same, recorded in config.json /
results.json, and a one-line refusal where no namespace can be made and --unsafe-sandbox was not given.
"""
import os
import secrets
import socket
import sys
import tempfile

from sandboxing import child, landlock, process

# The program whose tests are the guarantees. Each function returns True when the guarantee holds.
PROBE = '''
import os, resource, socket, sys

def ns(kind):
    return os.readlink(f"/proc/self/ns/{kind}")

def capabilities():
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return int(fields["CapEff"], 16), int(fields.get("NoNewPrivs", "0"))

def uid_apart(host_uid, host_user_ns):
    caps, _ = capabilities()
    return caps == 0 and (os.getuid() != host_uid or ns("user") != host_user_ns)

def pid_apart(host_pid_ns):
    return ns("pid") != host_pid_ns and not os.path.exists(f"/proc/{HOST_PID}")

def network_apart(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except OSError:
        return True

def read_only(paths, marker):
    # "/" read-only; each other path read-only or on one of the run's private tmpfs (a checkout under
    # /tmp shows there as the empty folders above the interpreter's read-only bind, nothing of the host's)
    if os.path.exists(marker):  # the host's /tmp, seen from the run: no private tmpfs
        return False
    private = {os.stat(p).st_dev for p in ("/tmp", "/var/tmp", "/dev/shm", ".") if os.path.exists(p)}
    return all(os.statvfs(p).f_flag & os.ST_RDONLY or (p != "/" and os.stat(p).st_dev in private)
               for p in paths if os.path.exists(p))

def hidden(paths):
    for path, names in paths:
        try:
            if set(os.listdir(path)) & set(names):
                return False
        except OSError:
            pass
    return True

def no_privileges():
    caps, no_new_privs = capabilities()
    return caps == 0 and no_new_privs == 1

def limited(max_procs):
    kinds = [resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_FSIZE]
    finite = all(resource.getrlimit(k)[1] != resource.RLIM_INFINITY for k in kinds)
    return finite and resource.getrlimit(resource.RLIMIT_NPROC)[1] <= max_procs

def confined(paths):
    # the Landlock tier: no file can be made in any of `paths` (the host's /tmp, the home, the project, /)
    for path in paths:
        try:
            with open(os.path.join(path, ".core-code-check"), "x"):
                pass
            os.remove(os.path.join(path, ".core-code-check"))
            return False
        except OSError:
            pass
    return True

def host_processes_apart():
    # the trainer's environment unreadable, and no signal reaches it
    try:
        open(f"/proc/{HOST_PID}/environ", "rb").read()
        return False
    except OSError:
        pass
    try:
        os.kill(HOST_PID, 0)
        return False
    except OSError:
        return True
'''
# The last run of the check: a daemon that must not outlive its verdict (TOKEN: found on the host afterwards)
DAEMON = '''
import os, time
def f():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "TOKEN"])
        os._exit(0)
    for _ in range(200):  # until the daemon is sleep (its exec done), seen from inside
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if open(f"/proc/{pid}/cmdline", "rb").read() == b"sleep\\x00TOKEN\\x00":
                    return True
            except OSError:
                pass
        time.sleep(0.01)
    return False
'''
NAMES = ("uid", "pid", "network", "filesystem", "home hidden", "answers hidden", "capabilities", "rlimits",
         "host processes", "daemons")


def _own_ns(kind):
    return os.readlink(f"/proc/self/ns/{kind}")


def _entries(path, keep=()):
    """The names in `path` that a run must not see: all but the first step of each kept path."""
    shown = {os.path.relpath(k, path).split("/")[0] for k in keep if k.startswith(path + "/")}
    try:
        return sorted(set(os.listdir(path)) - shown)[:50]
    except OSError:
        return []


def guarantees(run_program, mode, max_procs) -> dict:
    """{guarantee: (held: bool, why: str)} for runs in `mode`, each seen from inside a run made by
    `run_program` (sandbox.run_program; it runs this one program of ours in any mode)."""
    shown = process.shown()
    homes = [(h, _entries(h, shown)) for h in process.homes()]
    answers = [(path, _entries(path, keep)) for path, keep in process.hidden_answers()]
    writable = [h for h, _ in homes] + [process.HERE, "/"]
    landlock_user = mode == "landlock" and os.geteuid() != 0  # RLIMIT_NPROC: the user's processes + max_procs
    with socket.socket() as server, tempfile.NamedTemporaryFile(prefix="core-code-check-", dir="/tmp") as marker:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        filesystem = (f"assert confined({writable + ['/tmp']!r})" if mode == "landlock"
                      else f"assert read_only({writable!r}, {marker.name!r})")
        tests = [f"assert uid_apart({os.getuid()}, {_own_ns('user')!r})", f"assert pid_apart({_own_ns('pid')!r})",
                 f"assert network_apart({port})", filesystem, f"assert hidden({homes!r})", f"assert hidden({answers!r})",
                 "assert no_privileges()", f"assert limited({2**31 if landlock_user else max_procs})",
                 "assert host_processes_apart()"]
        r = run_program(PROBE.replace("HOST_PID", str(os.getpid())), tests, timeout_s=2.0, mode=mode)
    if r.verdict == "sandbox_error" or r.passed == 0:  # the probe itself could not run
        why = r.detail
        if os.geteuid() == 0 and mode in ("uid", "landlock") and not process.others_may_read(sys.base_prefix):
            why = f"the run's leased uid cannot read the interpreter's library under {sys.base_prefix} ({r.detail})"
        return {name: (False, f"not tested: the probe could not run: {why}"[:300]) for name in NAMES}
    token = f"1000.{secrets.randbelow(10**9)}"  # sleep's argument: 1000 s, and ours to find
    daemon = run_program(DAEMON.replace("TOKEN", token), ["assert f()"], timeout_s=2.0, mode=mode)
    left = _find_and_kill(f"sleep\0{token}\0".encode())
    tests = r.tests + ("passed" if daemon.verdict == "passed" and not left else "failed",)
    version = landlock_abi()
    outside = f"you, uid {os.getuid()}, outside"
    why = {
        "uid": {"root": "a uid leased to the run, no capability", "uid": "a uid leased to the run, no capability",
                "landlock": "a uid leased to the run, no capability",
                "user": f"uid 0 of the run's own user namespace ({outside}), no capability",
                "none": f"your own uid {os.getuid()}"},
        "pid": "a pid namespace of its own: nothing the program starts outlives its verdict",
        "network": {"landlock": "socket() refused by seccomp (every family: TCP, UDP, a unix socket file of the "
                                "host's)" + (", TCP bind/connect by Landlock too" if version >= 4 else ""),
                    "": "an empty network namespace (not even loopback), and no socket file of the host's in its "
                        "filesystem"},
        "filesystem": {"landlock": f"Landlock (ABI {version}): read and execute the system's folders and the "
                                   "interpreter's, write only the run's own work dir"
                                   + " and files of its own in /dev/shm (never listed)",
                       "": "a root of its own, read-only: the system's folders and the interpreter's; a private "
                           "tmpfs for /tmp, /var/tmp, /dev/shm and the work dir"},
        "home hidden": {"landlock": "Landlock allows no path in it: " + (", ".join(h for h, _ in homes) or "no home found"),
                        "": "not in the run's filesystem: " + (", ".join(h for h, _ in homes) or "no home found")},
        "answers hidden": {"landlock": f"Landlock allows neither this project, nor any other folder, nor "
                                       f"{len(process.hidden_files())} problem files",
                           "": f"this project, every other folder and {len(process.hidden_files())} problem "
                               "files out of the run's filesystem"},
        "capabilities": "none, and no_new_privs" + (": no new namespace either" if mode == "user" else ""),
        "rlimits": f"CPU, address space, file size, {max_procs} processes"
                   + (" (counted in the run's own user namespace)" if mode == "user" else "")
                   + (" more than your own processes now (parallel runs share them)" if landlock_user else ""),
        "host processes": {"landlock": "this process's environment, memory and cwd unreadable (Landlock: no "
                                       "ptrace-like access across domains)" + (", no signal (Landlock's scope, ABI 6+)"
                                       if version >= 6 else ", no signal (another uid)") + "; their list and "
                                       "command lines stay visible (no pid namespace)",
                           "": "out of sight: neither readable nor signalled"},
        "daemons": {"landlock": "a double-forked daemon held by the run's keeper (a subreaper) and killed at the "
                                "verdict",
                    "": "a double-forked daemon killed at the verdict"},
    }
    failed = {"pid": "the host's pid namespace: a detached process can outlive its verdict",
              "network": "the host's network: loopback and beyond in reach",
              "filesystem": "the host's filesystem, writable where the run's uid may write",
              "home hidden": "the home is readable as far as its permissions allow",
              "answers hidden": "the project and problem files are readable as far as their permissions allow",
              "capabilities": "no_new_privs missing or a capability left",
              "rlimits": "CPU, address space and file size; no process limit (it would count all your processes)",
              "host processes": "this process's environment is readable from the run, or a signal reaches it",
              "daemons": "a double-forked daemon outlived its verdict"}
    if mode == "landlock":
        failed["uid"] = (f"your own uid {os.getuid()}: no uid of its own without root or a user namespace (Landlock "
                         "and seccomp confine it instead)")
        failed["pid"] = ("the host's pid namespace: the run sees the host's process list; what it starts is "
                         "held below the run's keeper instead (daemons)")
    result = {}
    for name, verdict in zip(NAMES, tests):
        text = why[name] if isinstance(why[name], str) else why[name].get(mode, why[name].get(""))
        if name.endswith("hidden") and mode not in ("root", "user", "landlock"):
            text = "closed to the run's uid by its permissions"
        result[name] = (verdict == "passed", text if verdict == "passed" else failed.get(name, text))
    return result


def _find_and_kill(cmdline):
    """Pids of live processes whose /proc/<pid>/cmdline is `cmdline` (bytes), each killed."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read() == cmdline and child.process_state(int(pid)) not in (b"Z", None):
                    found.append(int(pid))
                    os.kill(int(pid), 9)
        except OSError:
            pass
    return found


def landlock_abi():
    """Landlock's ABI version here (0: none), as the child reads it (landlock.abi)."""
    import ctypes
    return max(ctypes.CDLL(None).syscall(landlock.CREATE_RULESET, None, 0, landlock.CREATE_RULESET_VERSION), 0)


def describe(mode):
    if mode == "landlock":
        return (f"Landlock (ABI {landlock_abi()}) + seccomp, no namespaces ("
                + ("root without CAP_SYS_ADMIN, a leased uid" if os.geteuid() == 0 else "not root, user namespaces refused")
                + ")")
    return {"root": "namespaces as root", "user": "user namespace (not root)",
            "uid": "no namespaces, a leased uid only (root without CAP_SYS_ADMIN)",
            "none": "no namespaces (not root, user namespaces refused)"}[mode]


def report(isolation, held) -> list:
    """The lines of `python sandbox.py --check`: the mode, then one per guarantee, then the refusal."""
    lines = [f"sandbox: {describe(isolation.mode)}"]
    lines += [f"  {name:<15}{'yes' if ok else 'no ':<5}{why}" for name, (ok, why) in held.items()]
    return lines + ([] if isolation.isolated else [isolation.refusal()])
