"""Hostile memory programs, one per channel a run could take memory through, for `python sandbox.py
--check --deep` (each must be stopped at a small budget) and tests/sandboxing/test_sandbox_memory.py.

Each program tries its channel at its top level: ATTACK is "done" when the memory was taken,
"refused" when the kernel said no, and the test asks for "done". A channel bounded by a kill ends
in `memory`; one that is closed ends `failed` (got 'refused'). EXPECTED: the verdict per mechanism.
"""
from sandboxing.confine import TMPFS_INODES

DEEP_BUDGET_MB = 128  # small: each program ends in a fraction of a second and never stresses the host
HEAD = "import ctypes, os, socket, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
TAIL = "try:\n    ATTACK = attack()\nexcept OSError:\n    ATTACK = 'refused'\ndef f():\n    return ATTACK\n"
CHANNELS = {
    "memfds": "def attack():\n    fds = [os.memfd_create('x') for _ in range(40)]\n"
              "    for fd in fds:\n        os.write(fd, b'\\1' * (8 << 20))\n    time.sleep(2)\n    return 'done'\n",
    "children": "def attack():\n    for _ in range(8):\n        if os.fork() == 0:\n            hold = b'\\1' * (100 << 20)\n"
                "            time.sleep(5)\n            os._exit(0)\n    time.sleep(3)\n    return 'done'\n",
    "sysv shm": "def attack():\n    libc.shmat.restype = ctypes.c_void_p\n    for _ in range(4):\n"
                "        shm = libc.shmget(0, 64 << 20, 0o1600)\n        if shm < 0:\n            raise OSError(ctypes.get_errno(), 'shmget')\n"
                "        ctypes.memset(libc.shmat(shm, None, 0), 1, 64 << 20)\n    time.sleep(2)\n    return 'done'\n",
    "tmpfs data": "def attack():\n    for d in ('/tmp', '/var/tmp', '/dev/shm'):\n        for i in range(8):\n"
                  "            with open(f'{d}/big{i}', 'wb') as f:\n                f.write(b'\\1' * ((8 << 20) - 4096))\n"
                  "    time.sleep(2)\n    return 'done'\n",
    "tmpfs files": "def attack():\n    n = 0\n    for d in ('/tmp', '/var/tmp', '/dev/shm'):\n        try:\n"
                   "            while True:\n                open(f'{d}/{n}', 'w').close()\n                n += 1\n"
                   f"        except OSError:\n            pass\n    return 'refused' if n <= {3 * TMPFS_INODES} else 'done'\n",
    "nested tmpfs": "def attack():\n    uid, gid = os.getuid(), os.getgid()\n    if libc.unshare(0x10000000 | 0x20000) != 0:\n"
                    "        raise OSError(ctypes.get_errno(), 'unshare')\n"
                    "    for name, line in (('setgroups', 'deny'), ('uid_map', f'0 {uid} 1'), ('gid_map', f'0 {gid} 1')):\n"
                    "        try:\n            with open(f'/proc/self/{name}', 'w') as f:\n                f.write(line)\n"
                    "        except OSError:\n            pass  # (a non-dumpable process: /proc/self is root's)\n"
                    "    os.makedirs('/tmp/own', exist_ok=True)\n"
                    "    if libc.mount(b'none', b'/tmp/own', b'tmpfs', 0, b'size=1g') != 0:\n"
                    "        raise OSError(ctypes.get_errno(), 'mount')\n"
                    "    for i in range(40):\n        with open(f'/tmp/own/{i}', 'wb') as f:\n"
                    "            f.write(b'\\1' * ((8 << 20) - 4096))\n    time.sleep(2)\n    return 'done'\n",
    "vmsplice": "def attack():\n    libc.mmap.restype = ctypes.c_void_p\n"
                "    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n"
                "    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]\n"
                "    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]\n"
                "    hp, pipe = 2 << 20, os.pipe()\n    for _ in range(8):\n"
                "        a = libc.mmap(None, 66 << 20, 3, 0x22, -1, 0)  # 64 MiB + alignment, private anonymous\n"
                "        if a in (None, 2 ** 64 - 1):\n            raise OSError(ctypes.get_errno(), 'mmap')\n"
                "        base = (a + hp - 1) & -hp\n        libc.madvise(base, 64 << 20, 14)  # MADV_HUGEPAGE\n"
                "        for k in range(32):  # 4 KiB of each huge page into a pipe slot\n"
                "            ctypes.memset(base + k * hp, 1, 1)\n            iov = (ctypes.c_void_p * 2)(base + k * hp, 4096)\n"
                "            while libc.vmsplice(pipe[1], iov, 1, 2) < 0:  # SPLICE_F_NONBLOCK\n"
                "                if ctypes.get_errno() != 11:\n                    raise OSError(ctypes.get_errno(), 'vmsplice')\n"
                "                pipe = os.pipe()  # full (EAGAIN): the next one\n"
                "        with open('/proc/self/smaps_rollup') as f:\n"
                "            huge = int(f.read().split('AnonHugePages:')[1].split()[0]) > 0\n"
                "        if huge:\n            libc.munmap(a, 66 << 20)  # the pipes keep the huge pages\n"
                "        else:  # no transparent huge pages here: hold the memory plainly\n"
                "            ctypes.memset(base, 1, 64 << 20)\n    time.sleep(2)\n    return 'done'\n",
    "socket buffers": "def attack():\n    pairs = []\n    for _ in range(120):\n        a, b = socket.socketpair()\n"
                      "        a.setblocking(False)\n        try:\n            while True:\n                a.send(b'\\1' * 65536)\n"
                      "        except BlockingIOError:\n            pass\n        pairs.append((a, b))\n    return 'refused'\n",
}
PROGRAMS = {name: HEAD + body + TAIL for name, body in CHANNELS.items()}
# The verdict each mechanism gives: `memory` (killed at the budget) or `failed` (the channel closed:
# the program got 'refused'). A nested namespace as root: the leased uid may make one and mount a
# tmpfs in it, but it cannot map its uid there (the run is not dumpable: /proc/self is root's), so
# it can create no file in it (EOVERFLOW). Socket buffers stay at the kernel's default size, ~30 MiB for the
# 240 sockets one process may open: under the budget in both, so the program finishes (`failed`).
# vmsplice: each pipe slot pins the whole transparent huge page it points into, so 8 x 64 MiB of huge
# pages stay held after munmap by 256 slots, in no process's Pss: the cgroup charged them; without
# one the filter refuses vmsplice (where no huge page is made, the program holds the memory plainly).
EXPECTED = {
    "cgroup": {"memfds": "memory", "children": "memory", "sysv shm": "memory", "tmpfs data": "memory",
               "tmpfs files": "failed", "nested tmpfs": "failed", "vmsplice": "memory", "socket buffers": "failed"},
    "watchdog": {"memfds": "failed", "children": "memory", "sysv shm": "failed", "tmpfs data": "memory",
                 "tmpfs files": "failed", "nested tmpfs": "failed", "vmsplice": "failed", "socket buffers": "failed"},
}


def run(run_program, name):
    """One channel's program through `run_program` (sandbox.run_program), 256 MiB of address space a process."""
    return run_program(PROGRAMS[name], ["assert f() == 'done'"], timeout_s=5.0, memory_mb=256)


def deep_check(run_program, mechanism):
    """[(channel, held, verdict)] at the budget in force: held when the run was stopped (`memory`) or
    the channel refused, as EXPECTED says for `mechanism` ("cgroup" or "watchdog")."""
    out = []
    for name in CHANNELS:
        r = run(run_program, name)
        refused = r.verdict == "failed" and "'refused'" in r.detail
        out.append((name, r.verdict == EXPECTED[mechanism][name] and (r.verdict == "memory" or refused), r.verdict))
    return out
