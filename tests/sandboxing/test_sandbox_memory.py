"""The run's memory budget (sandboxing/memory.py): hostile programs of each channel against a small
budget, for each mechanism this machine has, with the run's true peak read back from the kernel (the
run's own cgroup, or an unlimited cgroup that only measures it); the honest programs that must still
pass; the host guard; the --check line; the v2 files on a fake tree; a GRPO step that survives bombs.
The ordinary user's run of the same programs: tests/sandboxing/test_sandbox_rootless.py."""
import os

import pytest

import sandbox
from sandboxing import bombs, cgroup, memory, seccomp
from sandboxing.bombs import CHANNELS, EXPECTED, PROGRAMS  # noqa: F401  (bench/sandbox_memory.py reads them here)

BUDGET = bombs.DEEP_BUDGET_MB  # MiB: small, so each bomb ends in a fraction of a second and never stresses the host
WATCHDOG_SLACK = 256  # MiB the watchdog may let a run pass its budget by: what 8 forks allocate between two
#                      samples when the trainer waits for a core (seen: up to 170 MiB at load 17 on 2 cores)
# A cgroup v1 memory hierarchy where this process may make run cgroups (root; CI and this machine have
# one): the cgroup tests, and the meter for the watchdog's true peaks. The v2 test: V2_MEMORY below.
CGROUP_V1 = os.geteuid() == 0 and not isinstance(memory.hierarchy(), str) and memory.hierarchy()[0] == 1
IS_CPYTHON_X86_OR_ARM = os.uname().machine in seccomp.CALLS

HONEST = {
    "threads": ("import threading\ndef f():\n    out = []\n    ts = [threading.Thread(target=lambda i=i: out.append(i * i))"
                " for i in range(8)]\n    [t.start() for t in ts]\n    [t.join() for t in ts]\n    return sorted(out)\n",
                "assert f() == [0, 1, 4, 9, 16, 25, 36, 49]"),
    "subprocess": ("import subprocess, sys\ndef f():\n    return subprocess.run([sys.executable, '-c', 'print(6 * 7)'],"
                   " capture_output=True, text=True).stdout\n", "assert f() == '42\\n'"),
    "multiprocessing.Pool": ("import multiprocessing\ndef f():\n    with multiprocessing.Pool(2) as pool:\n"
                             "        return pool.map(abs, [-1, -2, 3])\n", "assert f() == [1, 2, 3]"),
    "shared_memory": ("from multiprocessing import shared_memory\ndef f():\n"
                      "    m = shared_memory.SharedMemory(create=True, size=1 << 20)\n    m.buf[:3] = b'abc'\n"
                      "    other = shared_memory.SharedMemory(m.name)\n    seen = bytes(other.buf[:3])\n"
                      "    other.close()\n    m.close()\n    m.unlink()\n    return seen\n", "assert f() == b'abc'"),
    "numpy": ("import numpy as np\ndef f():\n    return int(np.arange(10 ** 6).sum())\n", "assert f() == 499999500000"),
}


@pytest.fixture
def watchdog(monkeypatch):
    """Runs without a cgroup of their own (the ordinary user's mechanism), each measured by an
    unlimited cgroup where root can make one."""
    monkeypatch.setenv(memory.NO_CGROUPS, "1")
    memory.cgroups.cache_clear()
    memory.gauge(True)
    yield
    memory.gauge(False)
    monkeypatch.delenv(memory.NO_CGROUPS)
    memory.cgroups.cache_clear()


@pytest.fixture
def budget():
    memory.set_budget(BUDGET)
    yield BUDGET
    memory.set_budget(memory.BUDGET_MB)


def run_channel(name):
    return bombs.run(sandbox.run_program, name)


@pytest.mark.skipif(not CGROUP_V1, reason="needs root and the cgroup v1 memory controller")
@pytest.mark.parametrize("name", CHANNELS)
def test_cgroup_v1_bounds_every_channel(name, budget):
    """Catches: the child not joining its cgroup before the program runs (the bomb passes), memsw
    left unlimited, an OOM kill not turned into the verdict `memory`."""
    assert memory.mechanism() == "cgroup v1"
    r = run_channel(name)
    assert r.verdict == EXPECTED["cgroup"][name], r.detail
    assert 0 < r.run_peak_mb <= budget  # the kernel's own count: never more than the limit
    assert r.verdict != "memory" or r.tests == ("memory",) and r.pass_rate == 0


@pytest.mark.skipif(not CGROUP_V1, reason="needs root and the cgroup v1 memory controller")
def test_cgroup_holds_in_user_mode_too(budget):
    """`user` mode as root (root without CAP_SYS_ADMIN): the child joins from inside its user namespace
    through the fds the parent opened (the kernel checks the opener's rights)."""
    r = sandbox.run_program(PROGRAMS["children"], ["assert f() == 'done'"], timeout_s=5.0, memory_mb=256, mode="user")
    assert (r.verdict, r.run_peak_mb) == ("memory", float(budget))


@pytest.mark.skipif(isinstance(memory.hierarchy(), str) or not IS_CPYTHON_X86_OR_ARM,
                    reason="measures with a cgroup: needs root")
@pytest.mark.parametrize("name", CHANNELS)
def test_watchdog_bounds_every_channel(name, budget, watchdog):
    """Without a cgroup: the seccomp filter closes memfds, SysV shm and nested namespaces; the watchdog
    kills forks and tmpfs data over the budget; nr_inodes bounds empty files. The true peak (an
    unlimited cgroup's count) stays within the budget + WATCHDOG_SLACK."""
    assert memory.mechanism() == "seccomp + rlimits + watchdog"
    r = run_channel(name)
    assert r.verdict == EXPECTED["watchdog"][name], r.detail
    assert 0 < r.run_peak_mb <= budget + WATCHDOG_SLACK


@pytest.mark.parametrize("mode", ["cgroup", "watchdog"])
def test_honest_programs_pass(mode, request):
    """Threads, subprocess, multiprocessing.Pool, a small shared_memory and numpy under the default
    budget, in each mechanism. Catches: a filter that refuses clone3 without ENOSYS (threads), or
    /dev/shm's files (shared_memory uses shm_open, not memfd)."""
    if mode == "cgroup" and not CGROUP_V1:
        pytest.skip("needs root and the cgroup v1 memory controller")
    if mode == "watchdog":
        request.getfixturevalue("watchdog")
    names = [n for n in HONEST if n != "numpy" or _has_numpy()]
    results = sandbox.run_many([dict(program=HONEST[n][0], tests=[HONEST[n][1]], timeout_s=5.0) for n in names],
                               workers=2)
    assert {n: r.verdict for n, r in zip(names, results)} == {n: "passed" for n in names}, [r.detail for r in results]


def _has_numpy():
    import importlib.util
    return importlib.util.find_spec("numpy") is not None


def test_host_guard_stops_a_run(monkeypatch):
    """Catches: a guard that is never polled. With the floor above what the host has, every run is
    stopped with the verdict `memory` and says why."""
    monkeypatch.setattr(memory, "HOST_FLOOR_MB", memory.host_available_mb() + (1 << 20))
    r = sandbox.run_program("import time\ntime.sleep(1)\ndef f():\n    return 1\n", ["assert f() == 1"], timeout_s=3.0)
    assert (r.verdict, r.tests, r.pass_rate) == ("memory", ("memory",), 0)
    assert "host's available memory fell below" in r.detail


def test_check_line(monkeypatch):
    """The line --check and training print, for both mechanisms (the worst case by hand: 16 x (1024 +
    13) MiB of address space + 3 x (64 + 4) MiB of tmpfs + 16 x 256 x 416 KiB of sockets + 64 MiB of
    pipes = 18,528 MiB = 18.1 GiB)."""
    assert memory.worst_case_mb(1024) == 16 * 1037 + 3 * 68 + 1664 + 64
    monkeypatch.setenv(memory.NO_CGROUPS, "1")
    memory.cgroups.cache_clear()
    try:
        assert memory.describe(1024) == (
            "memory: seccomp + rlimits + watchdog, aim 2048 MiB per run, best effort, worst case 18.1 GiB "
            f"(no cgroup: switched off by {memory.NO_CGROUPS}=1); CPU: RLIMIT_CPU per process only")
    finally:
        monkeypatch.delenv(memory.NO_CGROUPS)
        memory.cgroups.cache_clear()
    if CGROUP_V1:
        assert memory.describe(1024) == ("memory: cgroup v1, 2048 MiB per run, guaranteed; CPU: 1 core per run "
                                         "(its cgroup's CPU quota)")


def test_cgroup_v2_files_on_a_fake_tree(tmp_path):
    """The v2 path where it cannot run (this machine's unified hierarchy has no memory controller):
    the files a run cgroup gets, written into a folder that stands for one."""
    base = tmp_path / cgroup.NAME
    base.mkdir()
    group = cgroup.create((2, {"": str(base)}), 128 << 20, max_procs=32, cpus=1)
    d = base / os.listdir(base)[0]
    assert {f: (d / f).read_text() for f in sorted(os.listdir(d))} == {
        "cpu.max": "100000 100000", "memory.max": str(128 << 20), "memory.oom.group": "1", "memory.swap.max": "0",
        "pids.max": "32"}
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    (d / "memory.peak").write_text(str(100 << 20))
    assert (group.oom_kills(), group.peak_bytes()) == (2, 100 << 20)


V2_MEMORY = not isinstance(memory.hierarchy(), str) and memory.hierarchy()[0] == 2  # a writable v2 subtree


@pytest.mark.skipif(not V2_MEMORY, reason="no writable cgroup v2 subtree with the memory controller here")
def test_cgroup_v2_bounds_a_bomb(budget):
    assert memory.mechanism() == "cgroup v2"
    r = run_channel("children")
    assert r.verdict == "memory" and 0 < r.run_peak_mb <= budget


def test_seccomp_filter_shape():
    """The filter's length and its two jumps by hand: 6 head + 2 x 21 refusals + 4 dispatch = 52,
    then the flags block (4) and the socket options block (3 + 2 x 4 + 1)."""
    code = seccomp.program("x86_64")
    assert len(code) == 8 * (52 + 4 + 12)
    assert seccomp.program("sparc") is None


def test_trainer_survives_memory_bombs(monkeypatch, budget, tiny_policy, tokenizer):
    """A GRPO step at tiny sizes (the embedded tokenizer, a 2-layer random Qwen2: the embedded
    135M model's generation alone takes a minute on a loaded 2-core machine) where half the sampled
    programs are replaced by memory bombs: the step finishes, those programs come back `memory`
    with pass rate 0, the real sandbox judging all of them."""
    import torch

    import data
    import train

    bomb = "import os\nfor _ in range(3):\n    os.fork()\nhold = b'\\1' * (200 << 20)\ndef f(*a):\n    return 0\n"
    seen = []
    real = sandbox.run_many

    def half_bombs(jobs, workers=None, progress=False):
        jobs = [dict(job, program=bomb) if i % 2 == 0 else job for i, job in enumerate(jobs)]
        results = real(jobs, workers=workers)
        seen.extend(zip((i % 2 == 0 for i in range(len(jobs))), results))
        return results
    monkeypatch.setattr(sandbox, "run_many", half_bombs)
    policy, tok = tiny_policy, tokenizer
    args = train.get_args(["--num-plans", "1", "--codes-per-plan", "2", "--max-plan-tokens", "4",
                           "--max-code-tokens", "8", "--workers", "2"])
    opt = torch.optim.AdamW([p for n, p in policy.named_parameters() if "lora_" in n], lr=args.lr)
    m, _ = train.grpo_step(policy, tok, data.load("train")[:2], args, opt)
    bombs = [r for is_bomb, r in seen if is_bomb]
    assert len(bombs) == 2 and all(r.verdict == "memory" and r.pass_rate == 0 for r in bombs)
    assert m["verdicts"].get("memory") == 2 and m["skipped_updates"] == 0


def test_require_sets_the_budget_and_records_it(capsys):
    """--sandbox-memory reaches every later run through sandbox.require, whose line ends with the
    memory bound; config.json records it."""
    try:
        held = sandbox.require(False, show=True, memory_mb=256)
        assert memory.budget_mb() == 256
        assert held["memory"] == {"mechanism": memory.mechanism(), "budget_mb": 256, "guaranteed": memory.guaranteed()}
        assert capsys.readouterr().out.rstrip("\n").endswith("; " + memory.describe(sandbox.MEMORY_MB))
        with pytest.raises(ValueError, match="at least 64 MiB"):
            sandbox.require(False, show=False, memory_mb=32)
    finally:
        memory.set_budget(memory.BUDGET_MB)


def test_eval_counts_the_memory_verdict(budget):
    """scoring.score's verdict table has `memory` as a verdict of its own (not error, not timeout)."""
    import types

    import data
    from measure import scoring

    add = data.Problem("t/add", "def add(a, b):\n", "add", ("assert add(1, 2) == 3",))
    bomb = "hold = [b'\\1' * (32 << 20) for _ in range(12)]\ndef add(a, b):\n    return a + b\n"
    res = scoring.score([add], [["def add(a, b):\n    return a + b\n", bomb]], [1], types.SimpleNamespace(sandbox_timeout=2.0,
                                                                                                    workers=2))
    assert res["verdicts"] == {"passed": 1, "memory": 1}


@pytest.mark.skipif(not CGROUP_V1, reason="needs root and the cgroup v1 memory controller")
def test_a_run_cgroup_holds_the_budget_a_core_and_the_task_limit():
    """The v1 files of a run's cgroup: memory and memory + swap at the budget, one core of CPU time
    per period (so --workers N runs take at most N cores), the run's tasks; removed afterwards."""
    meter = memory.Meter("user", 256, 32)  # user mode as root: the pids controller too
    try:
        dirs = meter.group.dirs
        read = lambda c, f: open(os.path.join(dirs[c], f)).read().strip()  # noqa: E731
        assert read("memory", "memory.limit_in_bytes") == read("memory", "memory.memsw.limit_in_bytes") == str(256 << 20)
        if "cpu" in dirs:
            assert (read("cpu", "cpu.cfs_quota_us"), read("cpu", "cpu.cfs_period_us")) == ("100000", "100000")
        if "pids" in dirs:
            assert read("pids", "pids.max") == "34"
    finally:
        meter.close()
    assert not any(os.path.exists(d) for d in dirs.values())


def test_watchdog_samples_sooner_as_the_run_nears_its_budget():
    """Meter.tick: with a cgroup always TICK_S; without one the time to fill the room left at FILL_MB_S,
    clamped to MIN_TICK_S..TICK_S. At 8192 MiB/s (2 cores): 117 MiB of room -> 117/8192 s; 2037 MiB -> the
    50 ms cap; over the budget -> 5 ms."""
    m = memory.Meter.__new__(memory.Meter)
    m.group, m.budget, m.held = object(), 128 << 20, 11 << 20
    assert m.tick() == memory.TICK_S == 0.05
    m.group, fill = None, memory.FILL_MB_S
    assert m.tick() == pytest.approx(min(0.05, max(0.005, 117 / fill)))
    m.budget = 2048 << 20
    assert m.tick() == pytest.approx(min(0.05, 2037 / fill))
    m.budget, m.held = 128 << 20, 200 << 20
    assert m.tick() == memory.MIN_TICK_S == 0.005
    if fill == 8192:  # the 2-core machine CI runs on: the numbers by hand
        m.held = 11 << 20
        assert m.tick() == pytest.approx(117 / 8192)
