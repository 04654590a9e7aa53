"""Run a command as on a host where no namespace may be made: the hosts most GPU users have.

    python tests/sandboxing/no_namespaces.py [--no-landlock] [--drop-sys-admin] COMMAND [ARGS...]

Ubuntu 24.04 (kernel.apparmor_restrict_unprivileged_userns=1) refuses an ordinary user's user
namespace; docker's default seccomp profile refuses every namespace to a container without
CAP_SYS_ADMIN, root included. Both are simulated here the way docker does it: a seccomp filter,
installed in this process and inherited by COMMAND and everything it starts, that refuses

    unshare, clone with a CLONE_NEW* flag   EPERM (what both hosts answer)
    setns                                   EPERM
    clone3                                  ENOSYS (its flags lie in memory a filter cannot read; glibc
                                            falls back to clone, whose flags are checked)
    --no-landlock: landlock_create_ruleset, ENOSYS, as a kernel without Landlock (before 5.13) answers
      landlock_add_rule, landlock_restrict_self

--drop-sys-admin (root; ignored otherwise): CAP_SYS_ADMIN leaves the bounding set before COMMAND is run, so root
runs it as in a container (every other capability kept). The tests run this as root and, through
setpriv/`subprocess.run(user=...)`, as an unprivileged uid. A test helper, not part of the sandbox:
it reuses the sandbox's seccomp encoding (sandboxing/seccomp.py) and its syscall numbers.
"""
import ctypes
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]  # a copy with sandboxing/ beside it, or tests/sandboxing/
from sandboxing import seccomp  # noqa: E402  (beside this file, or in the project two folders up)

LANDLOCK = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}  # create_ruleset, add_rule, restrict_self
CAP_SYS_ADMIN, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 21, 24, 38


def host_filter(machine, landlock=True):
    """The filter as bytes of struct sock_filter (seccomp.py's encoding)."""
    arch, nr = seccomp.CALLS[machine]
    ops = [(seccomp.LD_ABS, 0, 0, 4), (seccomp.JEQ, 1, 0, arch), (seccomp.RET, 0, 0, seccomp.RET_ALLOW),
           (seccomp.LD_ABS, 0, 0, 0)]
    refused = [(nr["clone3"], seccomp.ENOSYS), (nr["setns"], seccomp.EPERM)]
    if not landlock:
        refused += [(call, seccomp.ENOSYS) for call in LANDLOCK[machine]]
    for call, errno in refused:
        ops += [(seccomp.JEQ, 0, 1, call), (seccomp.RET, 0, 0, seccomp.RET_ERRNO | errno)]
    ops += [(seccomp.JEQ, 1, 0, nr["unshare"]), (seccomp.JEQ, 0, 4, nr["clone"]),  # else: allow (4 ahead)
            (seccomp.LD_ABS, 0, 0, 16), (seccomp.JSET, 0, 1, seccomp.NAMESPACE_FLAGS),
            (seccomp.RET, 0, 0, seccomp.RET_ERRNO | seccomp.EPERM), (seccomp.RET, 0, 0, seccomp.RET_ALLOW)]
    ops.append((seccomp.RET, 0, 0, seccomp.RET_ALLOW))
    return b"".join(struct.pack("<HBBI", *op) for op in ops)


def main(argv):
    landlock, drop = "--no-landlock" not in argv, "--drop-sys-admin" in argv
    command = [a for a in argv if a not in ("--no-landlock", "--drop-sys-admin")]
    if not command:
        sys.exit("usage: python tests/sandboxing/no_namespaces.py [--no-landlock] [--drop-sys-admin] COMMAND [ARGS...]")
    libc = ctypes.CDLL(None, use_errno=True)
    if drop and os.geteuid() == 0 and libc.prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) != 0:
        sys.exit(f"no_namespaces: cannot drop CAP_SYS_ADMIN: {os.strerror(ctypes.get_errno())}")
    code = host_filter(os.uname().machine, landlock)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("<H6xQ", len(code) // 8, ctypes.addressof(buffer))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(seccomp.PR_SET_SECCOMP, seccomp.SECCOMP_MODE_FILTER,
                                                                  fprog, 0, 0):
        sys.exit(f"no_namespaces: cannot install the filter: {os.strerror(ctypes.get_errno())}")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
