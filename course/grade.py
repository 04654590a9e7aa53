"""Grade a submission: each exercise's tests on a fresh copy of this tree with the submitted files in it.

    python course/grade.py [SUBMISSION] [--format table|gradescope] [--out FILE] [--only ID,...]
                           [--timeout S] [--budget S] [--jobs N]                          (make grade)

SUBMISSION is a folder holding the whole handout or only the files a student changed (at its top or
in one subfolder, as a zip unpacks); default: this tree. Only the files the registry names (the
modules of the exercises' functions: grpo.py, rollout.py, coder.py, measure/stats.py, sft.py) are taken from
it; anything else in it is ignored. The tests, the registry and the rest of the code are THIS tree's,
every solution block stubbed: in the teacher's project and in the autograder bundle (course/autograder.py)
that means the public and the hidden tests; in a student's handout, its public tests.

An exercise earns its points when ALL its tests pass (minitorch's and CS336's rule: a half-right
normaliser is a wrong one). Each exercise runs in its own copy, with only its own files and those of
the exercises it depends on taken from the submission (the rest stubbed), in a forked process that is
isolated (course/jail.py) and killed after --timeout seconds; all runs together stop at --budget.
So a submission that does not parse, lacks a function, still holds the stub, does not import, exits
or loops gets 0 for the exercises it touches, with a one-line reason, and never points for another.
Outcomes come from pytest inside the run (course/runner.py), never from what the code prints.

--format table: a table and grades.json (default DIR/grades.json); --format gradescope: Gradescope's
results.json (course/gradescope.py; default DIR/results.json). Both are written atomically.
"""
import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
sys.path.insert(0, str(TREE))
from course import gradescope, jail, registry, runner  # noqa: E402
from course.markers import STUB, Refused, find_blocks, project_files, stub  # noqa: E402

FILE_LIMIT = 1 << 20  # bytes: a submitted file larger than this is refused
SKIP = {"__MACOSX", ".git", ".venv", "__pycache__", "runs"}  # never looked into in a submission
EMBEDDED = "SmolLM2-135M-Instruct"  # models.EMBEDDED: the folder the tests' tokenizer comes from


class Submitted:
    """One file the registry names, as found in the submission: its text, or why it cannot be used."""

    def __init__(self, name: str, text: str | None = None, problem: str = ""):
        self.name, self.text, self.problem = name, text, problem
        self.defs = set()
        if text is not None:
            try:
                self.defs = {n.name for n in ast.parse(text, name).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            except SyntaxError as e:
                self.text, self.problem = None, f"{name}:{e.lineno}: {e.msg} (the file does not parse)"


def find(sub: Path, name: str) -> Submitted:
    """`name` (e.g. 'grpo.py') in the submission: at sub/name, else the shallowest */name below it
    (a zip that unpacks into a folder); a symlink, a second copy at the same depth, a file over
    FILE_LIMIT or not UTF-8 is refused with its reason."""
    if sub.is_file():
        return Submitted(name, problem=f"the submission is a file, not a folder holding {name}")
    hits = []
    for folder, dirs, files in os.walk(sub):
        dirs[:] = sorted(d for d in dirs if d not in SKIP)
        rel = Path(folder).relative_to(sub)
        if Path(name).name in files and (rel / Path(name).name).as_posix().endswith(name):
            hits.append(Path(folder) / Path(name).name)
    if not hits:
        return Submitted(name, problem=f"{name} is not in the submission")
    depth = min(len(h.relative_to(sub).parts) for h in hits)
    top = [h for h in hits if len(h.relative_to(sub).parts) == depth]
    if len(top) > 1:
        return Submitted(name, problem=f"{len(top)} copies of {name} in the submission: "
                                       f"{', '.join(str(h.relative_to(sub)) for h in top[:3])}")
    path = top[0]
    if path.is_symlink() or not path.is_file():
        return Submitted(name, problem=f"{path.relative_to(sub)} is a link or not a plain file")
    with open(path, "rb") as f:
        data = f.read(FILE_LIMIT + 1)
    if len(data) > FILE_LIMIT:
        return Submitted(name, problem=f"{path.relative_to(sub)} is over {FILE_LIMIT >> 20} MB")
    try:
        return Submitted(name, data.decode("utf-8"))
    except UnicodeDecodeError:
        return Submitted(name, problem=f"{path.relative_to(sub)} is not UTF-8 text")


def base_tree(tree: Path) -> dict:
    """{relative path: bytes} of this tree with every solution block stubbed (a handout's: unchanged)."""
    files = {}
    for f in project_files(tree):
        if Path(f).name in ("grades.json", "results.json"):
            continue
        data = (tree / f).read_bytes()
        if f.endswith(".py") and b"# BEGIN SOLUTION" in data:
            text = data.decode()
            blocks = find_blocks(text, f)
            data = stub(text, blocks, {b.id for b in blocks}).encode()
        files[f] = data
    return files


def needs(ex: dict, by_id: dict) -> list[str]:
    """The files an exercise's run takes from the submission: its own and its dependencies' (transitively)."""
    seen, stack = set(), [ex["id"]]
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack += by_id[i]["depends"]
    return sorted({f for i in seen for f in registry.files_of(by_id[i])})


def why_not(ex: dict, found: dict) -> str:
    """Why the exercise cannot earn points without running its tests ('' when it can)."""
    for f in registry.files_of(ex):
        s = found[f]
        if s.text is None:
            return s.problem
        if any(line.strip() == STUB.format(id=ex["id"]) for line in s.text.split("\n")):
            return f"not attempted: {f} still holds the stub of exercise {ex['id']}"
    for fn in ex["functions"]:
        module, name = fn.rsplit(".", 1)
        if name not in found[module.replace(".", "/") + ".py"].defs:
            return f"{fn} is not defined in the submitted {module.replace('.', '/')}.py"
    return ""


def tests(n: int, kind: str = "") -> str:
    return f"{n} {kind + ' ' if kind else ''}test{'s' if n != 1 else ''}"


def verdict(ex: dict, job: dict | None, reason: str) -> dict:
    """Points and outputs of one exercise from its run: {earned, output, hidden: {passed, output} | None,
    passed, tests}. A listed test that did not run (not collected, deselected) counts as failed."""
    expected = ex["tests"] + ex.get("hidden", [])
    if job is not None and not reason:
        reason = job.get("error", "")
    outcome = {}  # key -> (passed, message)
    for t in (job or {}).get("tests", {}).values():
        ok, msg = outcome.get(t["key"], (True, ""))
        passed = t["outcome"] == "passed"
        outcome[t["key"]] = (ok and passed, msg or ("" if passed else t["message"] or t["outcome"]))
    errors = (job or {}).get("errors", [])
    if job is not None and not reason and not outcome:  # nothing collected: say what stopped pytest
        reason = errors[0] if errors else "no test ran"
        if errors == errors[-1:] and errors[-1].startswith("pytest stopped"):  # stopped, no collection error
            reason = f"{errors[-1]} before any test ran (does the code exit, or raise SystemExit, at import?)"

    def first_failure(keys):
        for k in keys:
            ok, msg = outcome.get(k, (False, ""))
            if not ok:
                name = k.split("::")[1]
                seen_error = next((e for e in errors if e.split(":")[0] == k.split("::")[0]), "")
                return f"{name}: {msg or seen_error or 'not run'}"
        return ""

    n_pass = sum(outcome.get(k, (False,))[0] for k in expected)
    public_fail, hidden_fail = first_failure(ex["tests"]), first_failure(ex.get("hidden", []))
    earned = ex["points"] if not reason and not public_fail and not hidden_fail else 0
    if reason:
        output = reason
    elif public_fail:
        output = f"failed: {public_fail}"
    elif hidden_fail:
        output = "the public tests pass; a hidden test fails (its name and message are shown when grades are published)"
    else:
        output = f"passed: {tests(len(ex['tests']), 'public')} and {tests(len(ex['hidden']), 'hidden')}" \
            if ex.get("hidden") else f"passed: {tests(len(ex['tests']))}"
    hidden = None
    if ex.get("hidden"):
        hidden = {"passed": not reason and not hidden_fail,
                  "output": reason or (f"failed: {hidden_fail}" if hidden_fail else f"passed: {tests(len(ex['hidden']), 'hidden')}")}
    return {"earned": earned, "output": runner.first_line(output) if reason else output, "hidden": hidden,
            "passed": n_pass, "tests": len(expected)}


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def ensure_model() -> None:
    """Convert the embedded model once (trusted code, this tree's infra/models.py) if the cache lacks it:
    the runs read the tests' tokenizer from there and may not write it."""
    if not (Path(runner.cache_dir()) / EMBEDDED / "config.json").exists():
        subprocess.run([sys.executable, "-c", "from infra import models; models.embedded_folder()"], cwd=TREE,
                       capture_output=True, timeout=600)


def grade(sub: Path, exercises: list[dict], timeout: float, budget: float, n_jobs: int) -> tuple[list, str, float]:
    """Rows (one per exercise, registry order), the isolation mode used, seconds taken."""
    t0 = time.monotonic()
    by_id = {ex["id"]: ex for ex in registry.load()}
    base = base_tree(TREE)
    found = {f: find(sub, f) for f in sorted({f for ex in by_id.values() for f in registry.files_of(ex)})}
    reasons = {ex["id"]: why_not(ex, found) for ex in exercises}
    if not all(reasons.values()):  # something to run: the model, the libraries, the isolation
        ensure_model()
        runner.warm()
    isolation = jail.mode((runner.cache_dir(), str(TREE), *sys.path[1:]))
    work = Path(tempfile.mkdtemp(prefix="grade-"))
    try:
        jobs = {}
        for ex in exercises:
            if reasons[ex["id"]]:
                continue
            root = work / ex["id"]
            for f, data in base.items():
                (root / f).parent.mkdir(parents=True, exist_ok=True)
                (root / f).write_bytes(data)
            for f in needs(ex, by_id):
                if found[f].text is not None:
                    (root / f).write_text(found[f].text)
            jobs[ex["id"]] = {"root": root, "files": ex["tests"] + ex.get("hidden", []), "expr": None}
        runner.run_all(list(jobs.values()), exercises, n_jobs, timeout, isolation, t0 + budget)
        rows = [{"id": ex["id"], "title": ex["title"], "points": ex["points"],
                 **verdict(ex, jobs.get(ex["id"]), reasons[ex["id"]]),
                 "seconds": round(jobs[ex["id"]].get("seconds", 0.0), 2) if ex["id"] in jobs else 0.0}
                for ex in exercises]
        return rows, isolation, time.monotonic() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", type=Path, default=TREE, help="the submission (default: this tree)")
    ap.add_argument("--format", choices=("table", "gradescope"), default="table",
                    help="table + grades.json, or Gradescope's results.json")
    ap.add_argument("--out", type=Path, default=None, help="output file (default DIR/grades.json or DIR/results.json)")
    ap.add_argument("--only", default=None, help="comma list of exercise ids")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per exercise")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for all exercises together")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="exercises at a time")
    args = ap.parse_args(argv)
    sub = args.dir.resolve()
    if not sub.exists():
        print(f"error: {sub} does not exist", file=sys.stderr)
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
    try:
        rows, isolation, seconds = grade(sub, exercises, args.timeout, args.budget, max(1, args.jobs))
    except Refused as e:
        print(f"error: this tree's solution markers: {e}", file=sys.stderr)
        return 2
    if isolation == "none":
        print("warning: no isolation here (no namespaces; not root, or the interpreter or model cache is not readable "
              "by other users): the submission's code could write wherever you can (course/jail.py)")
    print(f"{'exercise':16} {'points':>9} {'tests':>7} {'s':>6}  note")
    for r in rows:
        print(f"{r['id']:16} {r['earned']:>4}/{r['points']:<4} {r['passed']:>3}/{r['tests']:<3} {r['seconds']:6.1f}  {r['output']}")
    failing = {r["id"] for r in rows if r["earned"] == 0}
    by_id = {ex["id"]: ex for ex in exercises}
    for r in rows:
        r["depends_failing"] = [d for d in by_id[r["id"]]["depends"] if d in failing]
    total, most = sum(r["earned"] for r in rows), sum(r["points"] for r in rows)
    print(f"{'total':16} {total:>4}/{most:<4} ({seconds:.0f} s, isolation: {isolation})")
    if hint := [f"{r['id']} (needs {', '.join(r['depends_failing'])})" for r in rows if r["earned"] == 0 and r["depends_failing"]]:
        print("failing with a failing dependency: " + "; ".join(hint))
    if args.format == "gradescope":
        out = args.out or (sub if sub.is_dir() else sub.parent) / "results.json"
        obj = gradescope.results(rows, seconds, isolation)
        if problems := gradescope.check(obj):  # a bug of ours: say so rather than hand Gradescope a bad file
            print(f"error: the results do not follow Gradescope's format: {problems[0]}", file=sys.stderr)
            return 1
    else:
        out = args.out or (sub if sub.is_dir() else sub.parent) / "grades.json"
        obj = {"dir": str(sub), "date": time.strftime("%Y-%m-%d %H:%M"), "total": total, "max": most,
               "isolation": isolation, "exercises": rows}
    write_atomic(out, json.dumps(obj, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
