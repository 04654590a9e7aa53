"""Grade a tree: run each exercise's tests, print a table of points, write grades.json.

    python course/grade.py [DIR] [--out FILE] [--only ID,...] [--timeout S]      (make grade)

DIR is a student's handout (default: the tree this file is in). The exercises come from THIS
file's registry (course/exercises.toml next to it), not from DIR's, so an edited registry in DIR
gives no points; the tests are DIR's own (give students fresh tests/ when grading for credit).
An exercise earns its points when all of its tests pass (minitorch's and CS336's rule: a
half-right normaliser is a wrong one). Each exercise runs in its own `python -m pytest` process
with a timeout, so a student's infinite loop costs that exercise only. grades.json is written
atomically (a temporary file, then os.replace).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from course import registry  # noqa: E402


def run_exercise(ex: dict, tree: Path, timeout: float) -> dict:
    """Run one exercise's tests in `tree`; returns {passed, tests, seconds, note}."""
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               f"--junitxml={xml}", *ex["tests"]]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"passed": 0, "tests": len(ex["tests"]), "seconds": time.monotonic() - t0,
                    "note": f"timed out after {timeout:.0f} s"}
        seconds = time.monotonic() - t0
        if not xml.exists():
            last = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            return {"passed": 0, "tests": len(ex["tests"]), "seconds": seconds, "note": last[0][:120]}
        cases = list(ET.parse(xml).getroot().iter("testcase"))
        bad = [c for c in cases if any(ch.tag in ("failure", "error", "skipped") for ch in c)]
        note = ""
        if bad:
            first = next(ch for ch in bad[0] if ch.tag in ("failure", "error", "skipped"))
            note = f"{bad[0].get('name')}: {(first.get('message') or first.tag).splitlines()[0][:100]}"
        return {"passed": len(cases) - len(bad), "tests": len(cases), "seconds": seconds, "note": note}


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", type=Path, default=HERE.parent, help="the tree to grade")
    ap.add_argument("--out", type=Path, default=None, help="grades file (default DIR/grades.json)")
    ap.add_argument("--only", default=None, help="comma list of exercise ids")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per exercise")
    args = ap.parse_args(argv)
    tree = args.dir.resolve()
    if not (tree / "tests").is_dir():
        print(f"error: {tree} has no tests/ folder (give the handout's root)", file=sys.stderr)
        return 2
    try:
        exercises = registry.load()
    except registry.RegistryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.only:
        want = args.only.split(",")
        if bad := [w for w in want if w not in {ex["id"] for ex in exercises}]:
            print(f"error: unknown exercise {bad[0]!r}", file=sys.stderr)
            return 2
        exercises = [ex for ex in exercises if ex["id"] in want]
    rows = []
    print(f"{'exercise':16} {'points':>9} {'tests':>7} {'s':>6}  note")
    for ex in exercises:
        r = run_exercise(ex, tree, args.timeout)
        earned = ex["points"] if r["tests"] and r["passed"] == r["tests"] else 0
        rows.append({"id": ex["id"], "title": ex["title"], "points": ex["points"], "earned": earned, **r})
        print(f"{ex['id']:16} {earned:>4}/{ex['points']:<4} {r['passed']:>3}/{r['tests']:<3} {r['seconds']:6.1f}  {r['note']}",
              flush=True)
    failing = {r["id"] for r in rows if r["earned"] == 0}
    for row, ex in zip(rows, exercises):
        row["depends_failing"] = [d for d in ex["depends"] if d in failing]
    total, most = sum(r["earned"] for r in rows), sum(r["points"] for r in rows)
    print(f"{'total':16} {total:>4}/{most:<4}")
    if hint := [f"{r['id']} (needs {', '.join(r['depends_failing'])})" for r in rows if r["earned"] == 0 and r["depends_failing"]]:
        print("failing with a failing dependency: " + "; ".join(hint))
    out = args.out or tree / "grades.json"
    write_atomic(out, json.dumps({"dir": str(tree), "date": time.strftime("%Y-%m-%d %H:%M"), "total": total,
                                  "max": most, "exercises": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
