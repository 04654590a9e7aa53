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
import socket
import tempfile

from sandboxing import process

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
'''
NAMES = ("uid", "pid", "network", "filesystem", "home hidden", "answers hidden", "capabilities", "rlimits")


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
    with socket.socket() as server, tempfile.NamedTemporaryFile(prefix="core-code-check-", dir="/tmp") as marker:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        tests = [f"assert uid_apart({os.getuid()}, {_own_ns('user')!r})", f"assert pid_apart({_own_ns('pid')!r})",
                 f"assert network_apart({port})", f"assert read_only({writable!r}, {marker.name!r})",
                 f"assert hidden({homes!r})", f"assert hidden({answers!r})", "assert no_privileges()", f"assert limited({max_procs})"]
        r = run_program(PROBE.replace("HOST_PID", str(os.getpid())), tests, timeout_s=2.0, mode=mode)
    if r.verdict == "sandbox_error" or r.passed == 0:  # the probe itself could not run
        return {name: (False, r.detail) for name in NAMES}
    outside = f"you, uid {os.getuid()}, outside"
    why = {
        "uid": {"root": "a uid leased to the run, no capability", "uid": "a uid leased to the run, no capability",
                "user": f"uid 0 of the run's own user namespace ({outside}), no capability",
                "none": f"your own uid {os.getuid()}"},
        "pid": "a pid namespace of its own: nothing the program starts outlives its verdict",
        "network": "an empty network namespace (not even loopback), and no socket file of the host's in its "
                   "filesystem",
        "filesystem": "a root of its own, read-only: the system's folders and the interpreter's; a private "
                      "tmpfs for /tmp, /var/tmp, /dev/shm and the work dir",
        "home hidden": "not in the run's filesystem: " + (", ".join(h for h, _ in homes) or "no home found"),
        "answers hidden": f"this project, every other folder and {len(process.hidden_files())} problem "
                          "files out of the run's filesystem",
        "capabilities": "none, and no_new_privs" + (": no new namespace either" if mode == "user" else ""),
        "rlimits": f"CPU, address space, file size, {max_procs} processes"
                   + (" (counted in the run's own user namespace)" if mode == "user" else ""),
    }
    failed = {"pid": "the host's pid namespace: a detached process can outlive its verdict",
              "network": "the host's network: loopback and beyond in reach",
              "filesystem": "the host's filesystem, writable where the run's uid may write",
              "home hidden": "the home is readable as far as its permissions allow",
              "answers hidden": "the project and problem files are readable as far as their permissions allow",
              "capabilities": "no_new_privs missing or a capability left",
              "rlimits": "CPU, address space and file size; no process limit (it would count all your processes)"}
    result = {}
    for name, verdict in zip(NAMES, r.tests):
        text = why[name][mode] if isinstance(why[name], dict) else why[name]
        if name.endswith("hidden") and mode not in ("root", "user"):
            text = "closed to the run's uid by its permissions"
        result[name] = (verdict == "passed", text if verdict == "passed" else failed.get(name, text))
    return result


def describe(mode):
    return {"root": "namespaces as root", "user": "user namespace (not root)",
            "uid": "no namespaces, a leased uid only (root without CAP_SYS_ADMIN)",
            "none": "no namespaces (not root, user namespaces refused)"}[mode]


def report(isolation, held) -> list:
    """The lines of `python sandbox.py --check`: the mode, then one per guarantee, then the refusal."""
    lines = [f"sandbox: {describe(isolation.mode)}"]
    lines += [f"  {name:<15}{'yes' if ok else 'no ':<5}{why}" for name, (ok, why) in held.items()]
    return lines + ([] if isolation.isolated else [isolation.refusal()])
