"""Keep a student's code away from everything but its own copy of the tree (course/grade.py's runs).

A grading run is a process forked from the grader (course/runner.py); before it imports a line of
the submission it calls `enter(mode, copy)`. Three modes, the first that works on this machine
(`mode()` tries them once; COURSE_ISOLATION=namespaces|uid|none forces one):

  namespaces  new mount, pid, network and IPC namespaces (plus a user namespace when we are not
              root): the whole filesystem is mounted read-only except the copy, the run is pid 1 of
              its namespace (when it ends, the kernel kills whatever it started, setsid() or not),
              there is no network, and a second user namespace without a uid map takes away the
              right to remount anything (`mount -o remount,rw` and `umount` fail with EPERM). Needs
              Linux >= 5.12 (mount_setattr) and either root with CAP_SYS_ADMIN or user namespaces.
  uid         root without namespaces (a default Docker container, Gradescope's): the run switches
              to uid GRADER_UID + slot (one uid per run going on at once), which owns only the copy
              (it can still write world-writable folders such as /tmp); the reference tree, the
              results and the grader's processes are root's, and after the run every process of
              that uid is killed. Needs the interpreter, the project and the model cache readable
              by other users (course/setup.sh installs them so).
  none        neither: the run is the grader's user, in its own process group, and can write
              wherever that user can (course/grade.py says so in one line).

What no mode stops: code in the run can alter that run's own pytest process (its outcomes), read
the tests it is graded with (the hidden ones too), and reach Unix sockets the user may use. A
student who does that on purpose is not caught by the grader but by reading the submission.
"""
import ctypes
import functools
import os
import shutil
import sys
import tempfile

GRADER_UID = 59999  # our choice: an unused uid below the sandbox's leased range (sandboxing.process.UID_BASE)
MODES = ("namespaces", "uid", "none")
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x20000, 0x10000000, 0x20000000
CLONE_NEWNET, CLONE_NEWIPC = 0x40000000, 0x08000000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
MOUNT_ATTR_RDONLY, AT_FDCWD, AT_RECURSIVE = 0x1, -100, 0x8000
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (added after the syscall table unification)
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38


class JailError(OSError):
    """A step of `enter` failed; the message names the step."""


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise JailError(err, f"{what}: {os.strerror(err)}")


def _mount_attr(path: str, set_: int = 0, clear: int = 0, recursive: bool = False) -> None:
    attr = _MountAttr(set_, clear, 0, 0)
    _check(_libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), AT_RECURSIVE if recursive else 0,
                         ctypes.byref(attr), ctypes.sizeof(attr)), f"mount_setattr {path}")


def _namespaces(copy: str) -> None:
    """Enter the namespaces, fork; the parent waits for the child and exits with its status, so only
    the child (pid 1 of the new pid namespace) returns from here, with the mounts in place."""
    uid, gid, root = os.getuid(), os.getgid(), os.geteuid() == 0
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | (0 if root else CLONE_NEWUSER)),
           "unshare")
    if not root:  # we are uid 0 of the new user namespace: enough to mount in our mount namespace
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    pid = os.fork()
    if pid:  # not in the new pid namespace: wait for pid 1 there, then end with its status
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                os._exit(1)
            except InterruptedError:
                continue
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    _libc.prctl(PR_SET_PDEATHSIG, 9)  # SIGKILL when the waiting parent is killed (a timeout)
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(_libc.mount(b"proc", b"/proc", b"proc", 0, None), "mount proc")  # our pid namespace's
    _check(_libc.mount(copy.encode(), copy.encode(), None, MS_BIND, None), f"bind {copy}")
    _mount_attr("/", set_=MOUNT_ATTR_RDONLY, recursive=True)
    _mount_attr(copy, clear=MOUNT_ATTR_RDONLY)  # the copy alone stays writable
    _check(_libc.unshare(CLONE_NEWUSER), "unshare user namespace")  # no rights over the mounts any more


def _uid(slot: int) -> None:
    os.setgroups([])
    os.setgid(GRADER_UID + slot)
    os.setuid(GRADER_UID + slot)


def enter(mode: str, copy, slot: int = 0) -> None:
    """Isolate the calling process (a fresh fork, single-threaded) in `mode`; `copy` is the only
    folder it may write; slot: which of the runs going on at once this is (mode uid: its uid).
    Raises JailError (a step failed). After it, the process may exec nothing with more privileges
    (no_new_privs)."""
    copy = os.path.realpath(copy)
    if mode == "namespaces":
        _namespaces(copy)
    elif mode == "uid":
        _uid(slot)
    elif mode != "none":
        raise ValueError(f"unknown isolation mode {mode!r}: use {', '.join(MODES)}")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl no_new_privs")


def prepare(mode: str, copy, slot: int = 0) -> None:
    """Before the fork, in the grader: in mode uid the copy must belong to the run's uid, and the
    folder around it (a mkdtemp, 0700) must let it pass (0711: through, not list)."""
    if mode == "uid":
        parent = os.path.dirname(os.path.realpath(copy))
        os.chmod(parent, os.stat(parent).st_mode & 0o7777 | 0o011)
        for folder, dirs, files in os.walk(copy):
            for name in [folder] + [os.path.join(folder, x) for x in dirs + files]:
                os.lchown(name, GRADER_UID + slot, GRADER_UID + slot)


def cleanup(mode: str, slot: int = 0) -> None:
    """After a run, in the grader: in mode uid kill every process left by the run's uid (kill(-1)
    from a process of that uid reaches exactly those). Namespaces need nothing: pid 1's end killed
    them."""
    if mode != "uid":
        return
    pid = os.fork()
    if pid == 0:
        try:
            _uid(slot)
            os.kill(-1, 9)
        except BaseException:  # noqa: BLE001 (nothing left to kill, or not root: nothing to do)
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def _works(mode: str, readable) -> bool:
    """Try `mode` in a throw-away fork: it must be able to write its copy, and (namespaces) not the
    folder around it; and read `readable` (the interpreter, the project, the model cache)."""
    outside = tempfile.mkdtemp(prefix="jail-probe-")
    copy = os.path.join(outside, "copy")
    os.mkdir(copy)
    try:
        prepare(mode, copy)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                enter(mode, copy)
                with open(os.path.join(copy, "ok"), "w") as f:
                    f.write("ok")
                try:
                    open(os.path.join(outside, "escaped"), "w").close()
                    code = 2 if mode == "namespaces" else 0
                except OSError:
                    code = 0
                for path in readable:
                    if os.path.isdir(path):
                        os.listdir(path)
                    elif os.path.exists(path):
                        open(path, "rb").close()
            except BaseException:  # noqa: BLE001 (any failure: the mode does not work here)
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) == 0 and os.path.exists(os.path.join(copy, "ok"))
    finally:
        cleanup(mode)
        shutil.rmtree(outside, ignore_errors=True)


@functools.cache
def mode(readable: tuple = ()) -> str:
    """The strongest mode that works here (COURSE_ISOLATION forces one); `readable`: paths a run must
    be able to read. Call it before any thread starts (it forks)."""
    forced = os.environ.get("COURSE_ISOLATION")
    if forced:
        if forced not in MODES:
            raise ValueError(f"COURSE_ISOLATION={forced!r}: use {', '.join(MODES)}")
        return forced
    readable = tuple(readable) + (sys.prefix, sys.base_prefix)
    if sys.platform == "linux" and _works("namespaces", readable):
        return "namespaces"
    if sys.platform == "linux" and os.geteuid() == 0 and _works("uid", readable):
        return "uid"
    return "none"
