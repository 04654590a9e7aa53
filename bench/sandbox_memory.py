"""Each hostile memory channel's verdict and true peak against a small run budget, per mechanism
(not a timed test: a table for docs/sandbox.md). Run as root from the checkout:

    python bench/sandbox_memory.py [--budget 128]

Mechanisms: root with a cgroup per run (the kernel's limit), root with NO_CGROUPS=1 (seccomp +
rlimits + watchdog, as an ordinary user gets), and an unprivileged uid (the same, as that uid, with a
copy of the sandbox it owns: tests/sandboxing/test_sandbox_rootless.py's User). The programs are
tests/sandboxing/test_sandbox_memory.py's CHANNELS. A cell is "verdict peak": `memory` (killed at the budget)
or `failed` (the channel was refused: the program got 'refused'); the peak is the kernel's count of
everything the run held, MiB (the run's own cgroup, or an unlimited cgroup that only measures it;
the uid's column: its whole process tree, less the script's usage before the case).
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import test_sandbox_memory as channels  # noqa: E402
import test_sandbox_rootless as rootless  # noqa: E402

import sandbox  # noqa: E402
from sandboxing import memory  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=int, default=channels.BUDGET, help="MiB per run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the peaks are read from cgroups")
    memory.set_budget(args.budget)
    rows = {name: {} for name in channels.CHANNELS}
    for switched_off in (False, True):
        if switched_off:
            os.environ[memory.NO_CGROUPS] = "1"
            memory.cgroups.cache_clear()
            memory.gauge(True)
        for name in channels.CHANNELS:
            r = channels.run_channel(name)
            rows[name][f"root, {memory.mechanism()}"] = f"{r.verdict} {r.run_peak_mb:.0f}"
    user = rootless.User(rootless.UID + 2, "bench")
    try:
        cases = [[n, p, ["assert f() == 'done'"], {"timeout_s": 5.0, "memory_mb": 256}]
                 for n, p in channels.PROGRAMS.items()]
        for c in user.run(cases, budget_mb=args.budget, meter=True):
            rows[c["name"]][f"uid {user.uid}, watchdog"] = f"{c['verdict']} {c['peak_mb'] - c['baseline_mb']:.0f}"
    finally:
        user.close()
    load = os.getloadavg()[0]
    print(f"budget {args.budget} MiB per run; {time.strftime('%Y-%m-%d')}, load {load:.1f}, {os.cpu_count()} cores, "
          f"sandbox {sandbox.isolation().mode} mode")
    columns = list(rows[next(iter(rows))])
    print("| channel | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(row[c] for c in columns) + " |")


if __name__ == "__main__":
    main()
