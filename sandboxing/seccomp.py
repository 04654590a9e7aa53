"""The child's seccomp filter (no cgroup for the run): the system calls that make memory an address
space limit cannot see, refused before a byte of the program runs.

Where the run has no memory cgroup (an ordinary user: sandboxing/memory.py), RLIMIT_AS bounds what
each process maps, and the parent's watchdog sums what the run's processes hold and what its tmpfs
mounts store. What neither sees is memory held by a file that no process maps, or by the kernel on the
program's behalf. Those channels, each closed here by refusing the call that opens it:

    memfd_create                anonymous files: pages held by an fd, in no RSS (1.5 GiB seen at 6 MB RSS)
    shmget, msgget              SysV shared memory and message queues (the run's IPC namespace holds them)
    io_uring_*, userfaultfd     kernel-side buffers and pinned pages; no honest test needs them
    vmsplice                    a pipe slot pins the whole page it maps: 4 KiB of each transparent huge
                                page spliced, then unmapped, holds 2 MiB in no process's Pss (512 MiB
                                seen at a 128 MiB budget); splice (file pages, one per slot) stays
    unshare, clone, setns with  a nested user + mount namespace, where the program mounts a tmpfs of its
      a namespace flag; mount,    own that no watchdog looks into
      umount2, pivot_root, the
      new mount API
    clone3                      its flags lie in memory a filter cannot read: refused as ENOSYS, so the C
                                library falls back to clone (glibc does), whose flags we check
    setsockopt SO_SNDBUF /      socket buffers stay at the kernel's default size
      SO_RCVBUF (and FORCE)
    bpf                         maps of kernel memory
    any other ABI (i386 via     the numbers above are the native ABI's: a 32-bit call is refused whole
      int 0x80, x32)

The Landlock tier (landlock.py: no namespace to stand behind) installs the filter in every run, with
these refused too (`isolate`):

    socket                      every family: no network (TCP, UDP, raw), and no AF_UNIX socket to connect
                                to a host socket file by path (Landlock, ABI 7 and before, does not check
                                connect(2) on a unix socket file) or to an abstract name; socketpair stays
                                for AF_UNIX stream pairs (multiprocessing, asyncio's self-pipe; below)
    ptrace, process_vm_readv /  no reading or writing another process's memory, or taking its fds
      writev, pidfd_getfd
    keyctl, add_key,            the caller's keyrings (a login's tokens)
      request_key
    perf_event_open             the kernel's and other processes' events
    chmod, chown, utime(s),     a file's mode, owner, times and extended attributes: Landlock does not check
      utimensat, *xattr and       them, so an ordinary user's run could chmod, touch or tag every file of
      their f/l/at forms          theirs it can name (the home, the project, the venv through an fd it read)
    shmat, shmctl, shmdt,       the host's SysV IPC (no IPC namespace here): a segment, semaphore or queue of
      sem*, msg* (snd, rcv,       the user's is reached by its id, a small number (a run read another process's
      ctl), mq_open, mq_unlink    segment), and one made outlives the run; a POSIX message queue is made even
                                  where Landlock refuses to open it, and stays
    inotify_add_watch,          a watch on any folder that may be read (the home: Landlock does not check it)
      fanotify_init               names every file opened, made or removed there while the run lasts
    socketpair but AF_UNIX      a datagram pair can sendto or connect to a host's unix socket file
      stream / seqpacket
    prlimit64, setpriority,     on another process than the caller (pid 0): the trainer's and the keeper's
      ioprio_set, sched_set-      are the same uid's, and the kernel lets a uid set its own processes' rlimits
      affinity/scheduler/         (RLIMIT_CPU 1 s kills the trainer), priority and CPUs (OWN_ONLY)
      param/attr
    clone with CLONE_PARENT     a child of the trainer's, outside the run's tree (landlock.keep)

Refused calls fail with EPERM (ENOSYS where a fallback exists: memfd, clone3, io_uring, SysV), so a
program that merely tries them gets an OSError it may handle. The filter is classic BPF over struct
seccomp_data (linux/seccomp.h: nr at 0, arch at 4, args at 16 + 8 i), built here by hand and installed
with prctl(PR_SET_SECCOMP) after PR_SET_NO_NEW_PRIVS (no privilege needed); every process the
program starts inherits it, and no process can remove it. Only the child's cheap stdlib is used: the
filter's address is the bytes object's own buffer (CPython: id() + the header's size), not ctypes'.
"""
import os
import struct

from sandboxing.child import libc

EPERM, ENOSYS = 1, 38
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LD_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JGE/JSET|K, BPF_RET|K
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
X32_BIT = 0x40000000
NAMESPACE_FLAGS = 0x7E020080  # CLONE_NEW{NS, CGROUP, UTS, IPC, USER, PID, NET} | CLONE_NEWTIME
SOL_SOCKET, BUFFER_OPTIONS = 1, (7, 8, 32, 33)  # SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE

# Per machine: (AUDIT_ARCH_*, {call: number}) from the kernel's syscall tables
# (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h for aarch64).
CALLS = {
    "x86_64": (0xC000003E, dict(memfd_create=319, shmget=29, msgget=68, io_uring_setup=425, io_uring_enter=426,
                                io_uring_register=427, userfaultfd=323, mount=165, umount2=166, pivot_root=155,
                                open_tree=428, move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433,
                                mount_setattr=442, setns=308, bpf=321, vmsplice=278, clone3=435, unshare=272, clone=56,
                                setsockopt=54, socket=41, ptrace=101, process_vm_readv=310, process_vm_writev=311,
                                pidfd_getfd=438, keyctl=250, add_key=248, request_key=249, perf_event_open=298,
                                socketpair=53, prlimit64=302, setpriority=141, ioprio_set=251, sched_setaffinity=203,
                                sched_setscheduler=144, sched_setparam=142, sched_setattr=314, chmod=90, fchmod=91,
                                fchmodat=268, fchmodat2=452, chown=92, fchown=93, lchown=94, fchownat=260, utime=132,
                                utimes=235, futimesat=261, utimensat=280, setxattr=188, lsetxattr=189, fsetxattr=190,
                                removexattr=197, lremovexattr=198, fremovexattr=199, setxattrat=463, removexattrat=466,
                                shmat=30, shmctl=31, shmdt=67, semget=64, semop=65, semctl=66, semtimedop=220, msgsnd=69,
                                msgrcv=70, msgctl=71, mq_open=240, mq_unlink=241, inotify_add_watch=254,
                                fanotify_init=300)),
    "aarch64": (0xC00000B7, dict(memfd_create=279, shmget=194, msgget=186, io_uring_setup=425, io_uring_enter=426,
                                 io_uring_register=427, userfaultfd=282, mount=40, umount2=39, pivot_root=41,
                                 open_tree=428, move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433,
                                 mount_setattr=442, setns=268, bpf=280, vmsplice=75, clone3=435, unshare=97, clone=220,
                                 setsockopt=208, socket=198, ptrace=117, process_vm_readv=270, process_vm_writev=271,
                                 pidfd_getfd=438, keyctl=219, add_key=217, request_key=218, perf_event_open=241,
                                 socketpair=199, prlimit64=261, setpriority=140, ioprio_set=30, sched_setaffinity=122,
                                 sched_setscheduler=119, sched_setparam=118, sched_setattr=274, fchmod=52, fchmodat=53,
                                 fchmodat2=452, fchown=55, fchownat=54, utimensat=88, setxattr=5, lsetxattr=6,
                                 fsetxattr=7, removexattr=14, lremovexattr=15, fremovexattr=16, setxattrat=463,
                                 removexattrat=466, shmat=196, shmctl=195, shmdt=197, semget=190, semop=193, semctl=191,
                                 semtimedop=192, msgsnd=189, msgrcv=188, msgctl=187, mq_open=180, mq_unlink=181,
                                 inotify_add_watch=27, fanotify_init=262)),
}
WITH_FALLBACK = ("memfd_create", "shmget", "msgget", "io_uring_setup", "io_uring_enter", "io_uring_register",
                 "userfaultfd", "clone3")  # refused as ENOSYS: "not here", which callers fall back from
METADATA = ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime", "utimes",
            "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
            "fremovexattr", "setxattrat", "removexattrat")  # a file's mode, owner, times, xattrs: Landlock lets them by
HOST_IPC = ("shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop", "msgsnd", "msgrcv", "msgctl",
            "mq_open", "mq_unlink")  # the host's SysV IPC and POSIX message queues: no IPC namespace here
WATCHES = ("inotify_add_watch", "fanotify_init")  # names of the files opened, made, removed in a watched folder
ISOLATING = ("socket", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "keyctl", "add_key",
             "request_key", "perf_event_open", *METADATA, *HOST_IPC, *WATCHES)  # refused with `isolate` only
CLONE_PARENT = 0x00008000
AND = 0x54  # BPF_ALU|AND|K: the accumulator &= k
ALL, AF_UNIX, SOCK_STREAM, SOCK_SEQPACKET = 0xFFFFFFFF, 1, 1, 5
# `isolate`: calls allowed only with these arguments, [(arg, mask, allowed values)], each must hold (the low 32
# bits of the argument, `& mask`, one of the values). A pid of 0 is the caller itself: the run may set its
# own limits, priority and CPUs, but not those of the trainer's or the keeper's (the same uid: the kernel
# allows it, Landlock does not look). socketpair: a connected pair that cannot reach anything else; a datagram
# one can (sendto or connect to a host's unix socket file).
OWN_ONLY = {"prlimit64": [(0, ALL, (0,))], "sched_setaffinity": [(0, ALL, (0,))],
            "sched_setscheduler": [(0, ALL, (0,))], "sched_setparam": [(0, ALL, (0,))],
            "sched_setattr": [(0, ALL, (0,))],
            "setpriority": [(0, ALL, (0,)), (1, ALL, (0,))],  # PRIO_PROCESS, who 0 (not PRIO_PGRP / PRIO_USER)
            "ioprio_set": [(0, ALL, (1,)), (1, ALL, (0,))],  # IOPRIO_WHO_PROCESS, who 0
            "socketpair": [(0, ALL, (AF_UNIX,)), (1, 0xF, (SOCK_STREAM, SOCK_SEQPACKET))]}  # type & 0xF: less flags


def program(machine, isolate=False):
    """The filter for `machine` (os.uname().machine) as bytes of struct sock_filter {u16 code; u8 jt;
    u8 jf; u32 k}; None for a machine we have no table for (the watchdog alone then). isolate: the
    Landlock tier's refusals too (above)."""
    if machine not in CALLS:
        return None
    arch, nr = CALLS[machine]
    code = []  # (op, jt, jf, k); a jump's jt / jf is a label, resolved below

    def op(kind, k, jt=0, jf=0):
        code.append([kind, jt, jf, k])

    checked = OWN_ONLY if isolate else {}
    refused = [name for name in nr if name not in ("unshare", "clone", "setsockopt", *OWN_ONLY)
               and (isolate or name not in ISOLATING)]
    op(LD_ABS, 4)  # arch
    op(JEQ, arch, 1, 0)
    op(RET, RET_ERRNO | ENOSYS)  # another ABI
    op(LD_ABS, 0)  # nr
    op(JGE, X32_BIT, 0, 1)
    op(RET, RET_ERRNO | ENOSYS)  # x32
    for name in refused:
        op(JEQ, nr[name], 0, 1)
        op(RET, RET_ERRNO | (ENOSYS if name in WITH_FALLBACK else EPERM))
    op(JEQ, nr["unshare"], "flags", 0)
    op(JEQ, nr["clone"], "flags", 0)
    op(JEQ, nr["setsockopt"], "sockopt", 0)
    for name in checked:
        op(JEQ, nr[name], name, 0)
    op(RET, RET_ALLOW)
    labels = {"flags": len(code)}
    op(LD_ABS, 16)  # args[0], its low 32 bits (little-endian): the flags of unshare and clone
    op(JSET, NAMESPACE_FLAGS | (CLONE_PARENT if isolate else 0), 0, 1)
    op(RET, RET_ERRNO | EPERM)
    op(RET, RET_ALLOW)
    labels["sockopt"] = len(code)
    op(LD_ABS, 24)  # args[1]: level
    op(JEQ, SOL_SOCKET, 0, 2 * len(BUFFER_OPTIONS) + 1)
    op(LD_ABS, 32)  # args[2]: the option
    for option in BUFFER_OPTIONS:
        op(JEQ, option, 0, 1)
        op(RET, RET_ERRNO | EPERM)
    op(RET, RET_ALLOW)
    for name, conditions in checked.items():  # each: load the argument, mask it, compare; any miss: refused
        labels[name] = len(code)
        for c, (arg, mask, values) in enumerate(conditions):
            labels[f"{name} {c}"] = len(code)
            op(LD_ABS, 16 + 8 * arg)
            if mask != ALL:
                op(AND, mask)
            for v, value in enumerate(values):
                op(JEQ, value, f"{name} {c + 1}", 0 if v < len(values) - 1 else f"{name} refused")
        labels[f"{name} {len(conditions)}"] = len(code)
        op(RET, RET_ALLOW)
        labels[f"{name} refused"] = len(code)
        op(RET, RET_ERRNO | EPERM)
    for i, ins in enumerate(code):
        for j in (1, 2):
            if isinstance(ins[j], str):
                ins[j] = labels[ins[j]] - i - 1
    return b"".join(struct.pack("<HBBI", *ins) for ins in code)


def refuse(isolate=False):
    """Install the filter in this process (after PR_SET_NO_NEW_PRIVS); raises OSError if the kernel
    refuses it. No-op on a machine without a table, unless `isolate` (the Landlock tier cannot go without)."""
    code = program(os.uname().machine, isolate)
    if code is None:
        if isolate:
            raise OSError(f"seccomp: no system call table for {os.uname().machine}")
        return
    address = id(code) + bytes.__basicsize__ - 1  # CPython: a bytes object's data follows its header
    fprog = struct.pack("<H6xQ", len(code) // 8, address)  # struct sock_fprog {u16 len; sock_filter *filter}
    libc("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog, 0, 0)
