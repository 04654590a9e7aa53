"""The Landlock tier, the child's side: where no namespace can be made (Ubuntu 24.04's AppArmor rule for
an ordinary user, docker's default seccomp profile), the run confines itself with what any process may
apply to itself: Landlock (Linux 5.13+) and a seccomp filter (seccomp.py, `isolate`).

    keep(job)      first of all: this process becomes a subreaper and forks; the parent stays behind as
                   the KEEPER (it runs no program code), the child goes on as the runner. Every orphan
                   of the run is re-parented to the keeper, setsid() or not, so the whole run stays
                   below it; when the runner ends, the keeper kills what is left (child.kill_tree), and
                   the trainer does the same when it stops a run. Without a pid namespace, this is how
                   a double-forked daemon dies at the verdict.
    restrict(job)  after no_new_privs, before any program code: the ruleset below, then
                   landlock_restrict_self; every process the program starts inherits it, none can lift it.

What the rules allow (everything else of the filesystem is refused, reading included):

    read, execute        the system's folders and the interpreter's (process.shown), less the answers
                         inside them (process.landlock_readable): no home, no project, no other checkout
    read, write, create  the run's own work dir (its cwd, made by the trainer, removed after the run)
    create, read, write, /dev/shm (shm_open, sem_open: multiprocessing's locks, Pool, shared_memory), not
      remove files       listed (READ_DIR refused). The run's files there are counted by the watchdog and
                         removed after it (memory.own_files, remove_shm): as root the leased uid's; as an
                         ordinary user the files of their uid made during the run that no live process
                         holds afterwards. A file of the user's own there can be opened by its name.
    read, write          /dev/null, zero, full, random, urandom (no other device)
    read                 /proc (its own process; a host process's environ, memory, fds and cwd stay
                         closed: Landlock refuses ptrace-like access across domains); /sys/devices/system/cpu
    TCP                  bind and connect refused (ABI 4+; the seccomp filter refuses socket() already)
    scopes               signals and abstract unix sockets stay inside the run (ABI 6+)

Numbers: include/uapi/linux/landlock.h; the calls are 444-446 on every architecture (asm-generic).
"""
import os
import struct

from sandboxing.child import kill_tree, libc, libc_value

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION, RULE_PATH_BENEATH = 1, 1
PR_SET_CHILD_SUBREAPER = 36
# LANDLOCK_ACCESS_FS_*: bits 0-12 since ABI 1, REFER (13) ABI 2, TRUNCATE (14) ABI 3, IOCTL_DEV (15) ABI 5
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR, REMOVE_FILE, MAKE_REG = 1, 2, 4, 8, 32, 256
MAKE_CHAR, MAKE_BLOCK, REFER, TRUNCATE, IOCTL_DEV = 64, 2048, 1 << 13, 1 << 14, 1 << 15
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the rights a rule on a file may carry
FS_BITS = {1: 13, 2: 14, 3: 15, 4: 15}  # ABI -> how many access bits it handles (5 and later: 16)
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2  # ABI 6
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
READ_ONLY = ("/proc", "/sys/devices/system/cpu")  # read, no execute: /proc/self, the CPU count (numpy, os.cpu_count)


def abi():
    """Landlock's ABI version on this kernel (1, 2, ...), 0 where it has none (ENOSYS, or disabled: EOPNOTSUPP)."""
    return max(libc_value("syscall", CREATE_RULESET, None, 0, CREATE_RULESET_VERSION), 0)


def keep(job):
    """Fork: return in the child (the runner); the parent becomes the keeper and never returns."""
    libc("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    runner = os.fork()
    if runner == 0:
        return
    os.closerange(0, 1 << 16)  # nothing of the run's but its children: no report pipe, no key
    while True:
        pid, status = os.waitpid(-1, 0)  # orphans too: they are ours now
        if pid == runner:
            break
    kill_tree(os.getpid())
    try:
        while os.waitpid(-1, 0):
            pass
    except ChildProcessError:
        pass
    if os.WIFSIGNALED(status):  # the trainer reads the runner's end from ours (end_reason)
        import _signal
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU, SIGSEGV: no core file in the work dir
        _signal.signal(os.WTERMSIG(status), _signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def restrict(job):
    """Apply the rules above to this process (after PR_SET_NO_NEW_PRIVS); OSError where the kernel has
    no Landlock or refuses a rule. job["readable"]: the paths to read and execute (process.landlock_readable)."""
    version = abi()
    if version < 1:
        raise OSError("Landlock: not available on this kernel")
    handled = (1 << FS_BITS.get(version, 16)) - 1
    attr = struct.pack("<Q", handled)
    if version >= 4:
        attr += struct.pack("<Q", NET_BIND_TCP | NET_CONNECT_TCP)  # handled, and no rule allows either
    if version >= 6:
        attr += struct.pack("<Q", SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    ruleset = libc_value("syscall", CREATE_RULESET, attr, len(attr), 0)
    if ruleset < 0:
        raise OSError(f"Landlock: landlock_create_ruleset failed (ABI {version})")
    try:
        for path in job["readable"]:
            allow(ruleset, path, EXECUTE | READ_FILE | READ_DIR, handled)
        for path in READ_ONLY:
            allow(ruleset, path, READ_FILE | READ_DIR, handled)
        for path in DEVICES:
            allow(ruleset, path, READ_FILE | WRITE_FILE | TRUNCATE, handled)
        allow(ruleset, "/dev/shm", READ_FILE | WRITE_FILE | TRUNCATE | MAKE_REG | REMOVE_FILE, handled)
        allow(ruleset, ".", handled & ~(MAKE_CHAR | MAKE_BLOCK | IOCTL_DEV), handled)  # the work dir: ours
        libc("syscall", RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)


def allow(ruleset, path, rights, handled):
    """One rule: `rights` (as far as this ABI handles them; a file keeps its file rights only) beneath
    `path`. A path that is not there is skipped."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            rights &= FILE_RIGHTS
        rule = struct.pack("<Qi", rights & handled, fd)  # struct landlock_path_beneath_attr (packed)
        libc("syscall", ADD_RULE, ruleset, RULE_PATH_BENEATH, rule, 0)
    finally:
        os.close(fd)
