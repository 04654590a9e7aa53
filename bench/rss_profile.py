"""The resident memory (RSS) of a command over time, per stage of a training run.

    python bench/rss_profile.py -- python train.py --grpo-steps 2 --out runs/rss --overwrite
    python bench/rss_profile.py --every 0.5 --log runs/rss.log -- make train

Samples the RSS of the command's process tree (VmRSS of every descendant, summed; the sandbox's short-lived
children included) every --every seconds, and names each sample's stage by the progress bar the command drew
last (tqdm writes 'sft planner:  45%|...', 'grpo:', 'eval ...' on stderr): 'load' until the first bar. Prints
one row per stage: its start and end (seconds from the start), its peak RSS and the RSS at its end (GiB);
then the whole run's peak and wall time. The command's stdout and stderr go to --log.
"""
import argparse
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

BAR = re.compile(r"^\s*([A-Za-z][\w .-]*?):\s+\d+%\|")  # 'sft planner:  45%|####  |' -> 'sft planner'


def tree_rss_kib(pid: int) -> int:
    """VmRSS of pid and all its descendants, KiB (0 for a process gone meanwhile)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for t in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (t / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--log", default="rss_profile.log", help="where the command's output goes")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command")
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        sys.exit("error: give the command after --")
    log = open(a.log, "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.PIPE, text=True, bufsize=1)
    stage = ["load"]

    def read():  # the stage is the bar the command drew last
        buf = ""
        while True:
            ch = proc.stderr.read(1)
            if not ch:
                break
            log.write(ch)
            if ch in "\r\n":
                m = BAR.match(buf)
                if m:
                    stage[0] = m.group(1).strip()
                buf = ""
            else:
                buf += ch
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    samples = []  # (seconds, stage, GiB)
    while proc.poll() is None:
        samples.append((time.perf_counter() - t0, stage[0], tree_rss_kib(proc.pid) / 2**20))
        time.sleep(a.every)
    reader.join(timeout=5)
    wall = time.perf_counter() - t0
    rows = {}
    for t, s, g in samples:
        r = rows.setdefault(s, [t, t, 0.0, 0.0])
        r[1], r[2], r[3] = t, max(r[2], g), g
    print(f"{' '.join(cmd)}\nexit status {proc.returncode}; {len(samples)} samples every {a.every:g} s\n")
    print(f"{'stage':20} {'from s':>7} {'to s':>7} {'peak GiB':>9} {'end GiB':>8}")
    for s, (start, end, peak, last) in rows.items():
        print(f"{s:20} {start:7.0f} {end:7.0f} {peak:9.2f} {last:8.2f}")
    print(f"{'whole run':20} {0:7.0f} {wall:7.0f} {max((g for *_, g in samples), default=0):9.2f}")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
