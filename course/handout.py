"""Build the student handout from the reference code, and prove that its tests grade it.

    python course/handout.py OUT_DIR [--source DIR] [--jobs 2] [--force]      (make handout)

Solution markers (nbgrader's idea) sit around the lines a student writes: a line `# BEGIN SOLUTION
<exercise id>` before them and a line `# END SOLUTION` after, at the same indentation, inside the
function; its signature and docstring stay outside, so the handout keeps the spec.

1. Copy the project (git's tracked files, as they are in the working tree: never .git, .venv, runs;
   without the teacher-only files below), replace each block with
   `raise NotImplementedError("exercise <id>: see course/EXERCISES.md")` at the marker's
   indentation, and write the registry without its mutants. An unpaired, nested or unknown marker,
   or a mutant that does not apply, is refused with one line (exit 2).
2. Check, and fail the build (exit 1; OUT_DIR is then not written) unless
   (1) every exercise's tests, public and hidden, pass on the reference (otter-grader runs the
       solution first, too);
   (2) with ONLY that exercise stubbed (the rest reference), every one of its tests fails;
   (3) no marker and no solution line is left in the handout, and every .py in it compiles;
   (4) every mutant of the registry (a plausible student bug) fails at least one of its HIDDEN
       tests (its public ones when it has none), so a solution fitted to the public tests fails.
The handout leaves out tests/hidden/ and the teacher-only files (TEACHER_ONLY); the registry it
carries has neither mutants nor hidden tests (course/autograder.py's bundle keeps the hidden ones).
Each run selects one exercise's tests by its marker in a throw-away copy (course/runner.py: a
process forked after torch and transformers are imported).
"""
import argparse
import ast
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from course import registry  # noqa: E402
from course.markers import BEGIN, END, Block, Refused, find_blocks, project_files, read_text, stub  # noqa: E402,F401
from course.runner import run_all, warm  # noqa: E402

# never in the handout (the build's own files, and the tests that use them); tests/hidden/ neither
TEACHER_ONLY = {"course/handout.py", "course/autograder.py", "course/classroom.py", "course/setup.sh",
                "course/run_autograder", "tests/course/test_course.py", "tests/course/test_grading.py"}
REGISTRY = "course/exercises.toml"


def check_spec(f: str, text: str, blocks: list[Block], by_id: dict) -> None:
    """Each block must lie inside a function its exercise lists (registry 'functions'), below that
    function's docstring: the handout keeps the signature and the spec. Raises Refused otherwise."""
    funcs = [n for n in ast.walk(ast.parse(text, f)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    module = f[:-3].replace("/", ".")
    for b in blocks:  # 1-based: BEGIN is line b.start + 1, the body ends at line b.end (END is a comment)
        around = [n for n in funcs if n.lineno <= b.start and b.end <= n.end_lineno]
        inner = max(around, key=lambda n: n.lineno, default=None)
        listed = by_id[b.id]["functions"]
        if inner is None or f"{module}.{inner.name}" not in listed:
            raise Refused(f"{f}:{b.start + 1}: block {b.id!r} is not inside {' or '.join(listed)} "
                          f"(the functions {REGISTRY} lists for it)")
        doc = inner.body[0] if inner.body and isinstance(inner.body[0], ast.Expr) else None
        if not (doc and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)
                and doc.end_lineno <= b.start):
            raise Refused(f"{f}:{b.start + 1}: {module}.{inner.name} needs its docstring above the block "
                          f"(the handout keeps only what is outside it)")


class Source:
    """The reference tree: its files, their solution blocks, the registry."""

    def __init__(self, src: Path, exclude: Path | None = None):
        self.src = src
        self.exercises = registry.load(src / REGISTRY)
        self.by_id = {ex["id"]: ex for ex in self.exercises}
        self.files = [f for f in project_files(src) if Path(f).name != "grades.json"
                      and not (exclude and (src / f).resolve().is_relative_to(exclude))]  # not an old handout
        self.texts = {f: read_text(src / f) for f in self.files}
        self.blocks = {f: find_blocks(t, f) for f, t in self.texts.items() if f.endswith(".py") and t is not None}
        self.blocks = {f: b for f, b in self.blocks.items() if b}
        found = {b.id for bs in self.blocks.values() for b in bs}
        for f, bs in self.blocks.items():
            for b in bs:
                if b.id not in self.by_id:
                    raise Refused(f"{f}:{b.start + 1}: BEGIN SOLUTION {b.id}: no such exercise in {REGISTRY}")
        for f, bs in self.blocks.items():
            check_spec(f, self.texts[f], bs, self.by_id)
        if missing := [ex["id"] for ex in self.exercises if ex["id"] not in found]:
            raise Refused(f"{REGISTRY}: exercise {missing[0]!r} has no BEGIN SOLUTION block in the code")
        self.mutants = [(ex["id"], m["why"], m["file"], self.mutate(ex["id"], m)) for ex in self.exercises
                        for m in ex["mutant"]]

    def span(self, f: str, b: Block) -> tuple[int, int]:
        """Character range [from, to) of a block's body in file f."""
        lines = self.texts[f].split("\n")
        lo = sum(len(x) + 1 for x in lines[:b.start + 1])
        return lo, lo + sum(len(x) + 1 for x in lines[b.start + 1:b.end])

    def mutate(self, ex_id: str, m: dict) -> str:
        """The file text with the mutant applied; `old` must occur exactly once in the exercise's blocks."""
        f, text = m["file"], self.texts.get(m["file"])
        if text is None:
            raise Refused(f"{REGISTRY}: exercise {ex_id!r}, mutant {m['why']!r}: no file {f}")
        spans = [self.span(f, b) for b in self.blocks.get(f, []) if b.id == ex_id]
        hits = [i for i in (i.start() for i in re.finditer(re.escape(m["old"]), text))
                if any(lo <= i and i + len(m["old"]) <= hi for lo, hi in spans)]
        if len(hits) != 1:
            raise Refused(f"{REGISTRY}: exercise {ex_id!r}, mutant {m['why']!r}: its old text occurs {len(hits)} times "
                          f"inside the exercise's blocks in {f} (needs exactly 1)")
        return text[:hits[0]] + m["new"] + text[hits[0] + len(m["old"]):]

    def write(self, dst: Path, stub_ids=(), replace: dict | None = None, handout: bool = False,
              hidden: bool = True) -> Path:
        """A copy of the tree: the blocks of `stub_ids` stubbed, files in `replace` swapped, and for the
        handout without the teacher-only files and with the registry stripped of its mutants; with
        hidden=False also without the hidden tests (the student's handout; the grading bundle keeps them)."""
        for f in self.files:
            if handout and (f in TEACHER_ONLY or (not hidden and f.startswith(registry.HIDDEN_DIR))):
                continue
            out = dst / f
            out.parent.mkdir(parents=True, exist_ok=True)
            text = (replace or {}).get(f, self.texts[f])
            if text is None:
                shutil.copy2(self.src / f, out)
                continue
            if f in self.blocks and stub_ids:
                text = stub(text, find_blocks(text, f), set(stub_ids))
            if handout and f == REGISTRY:
                text = registry.to_toml(self.exercises, "# The course's exercises (course/EXERCISES.md); "
                                                        "generated by the teacher's course/handout.py.\n", hidden)
            out.write_text(text)
        return dst

    def solution_lines(self) -> dict:
        """{stripped line: exercise id} of the lines inside blocks that appear nowhere outside them."""
        inside, outside = {}, set()
        for f, text in self.texts.items():
            if text is None or f == REGISTRY or f in TEACHER_ONLY:
                continue
            body = {i: b.id for b in self.blocks.get(f, []) for i in range(b.start + 1, b.end)}
            for i, line in enumerate(text.split("\n")):
                if line.strip():
                    (inside.setdefault(line.strip(), body[i]) if i in body else outside.add(line.strip()))
        return {s: i for s, i in inside.items() if s not in outside}


# ---- the build ---------------------------------------------------------------------------------

def check_handout(source: Source, out: Path) -> list[str]:
    """Check (3): no marker, no solution line, every .py compiles. Returns the failures."""
    problems, lines = [], source.solution_lines()
    for p in sorted(x for x in out.rglob("*") if x.is_file()):
        rel, text = p.relative_to(out), read_text(p)
        if text is None:
            continue
        for i, line in enumerate(text.split("\n")):
            if BEGIN.match(line) or END.match(line):
                problems.append(f"check 3: {rel}:{i + 1}: a solution marker is left in the handout")
            elif line.strip() in lines:
                problems.append(f"check 3: {rel}:{i + 1}: a solution line of exercise {lines[line.strip()]!r} is left")
        if p.suffix == ".py":
            try:
                compile(text, str(rel), "exec")
            except SyntaxError as e:
                problems.append(f"check 3: {rel}:{e.lineno}: the handout does not compile: {e.msg}")
    return problems


def is_hidden(key: str) -> bool:
    return key.startswith(registry.HIDDEN_DIR)


def check_tests(source: Source, work: Path, n_jobs: int = 2, timeout: float = 300.0, verbose: bool = False) -> list[str]:
    """Checks (1), (2) and (4) on copies of the tree in `work`; prints a table per exercise (public and
    hidden tests, reference seconds, tests failed on the stub, mutants caught by the hidden tests).
    Returns the failures (one line each)."""
    exercises, problems = source.exercises, []
    files_of = {ex["id"]: sorted({t.split("::")[0] for t in ex["tests"] + ex["hidden"]}) for ex in exercises}
    hidden_files = {ex["id"]: sorted({t.split("::")[0] for t in ex["hidden"]}) for ex in exercises}
    all_files = sorted({f for fs in files_of.values() for f in fs})
    refs = [{"kind": "reference", "id": f, "root": source.write(work / f"ref{k}"), "first_fail": False,
             "expr": " or ".join(ex["marker"] for ex in exercises), "files": [f]} for k, f in enumerate(all_files)]
    run_all(refs, exercises, n_jobs, timeout)  # one run per test file, n_jobs at a time
    ref_tests = {}
    for ref in refs:
        if "error" in ref:
            problems.append(f"check 1: the reference run of {ref['id']} failed: {ref['error']}")
        problems += [f"check 1: {e}" for e in ref.get("errors", [])]
        ref_tests.update(ref.get("tests", {}))
    keys = {t["key"] for t in ref_tests.values()}
    for ex in exercises:
        problems += [f"check 1: exercise {ex['id']!r} lists {t}, which pytest does not collect"
                     for t in ex["tests"] + ex["hidden"] if t not in keys]
    problems += [f"check 1: {nid} ({', '.join(t['markers'])}) {t['outcome']} on the reference"
                 for nid, t in ref_tests.items() if t["outcome"] != "passed"]
    jobs = []
    if not problems:  # (2) and (4) only mean something on a reference that passes
        for k, ex in enumerate(exercises):
            jobs.append({"kind": "stub", "id": ex["id"], "root": source.write(work / f"stub{k}", stub_ids=[ex["id"]]),
                         "expr": ex["marker"], "files": files_of[ex["id"]], "first_fail": False})
        for k, (ex_id, why, f, text) in enumerate(source.mutants):  # the hidden tests must catch it
            jobs.append({"kind": "mutant", "id": ex_id, "why": why, "root": source.write(work / f"mut{k}", replace={f: text}),
                         "expr": source.by_id[ex_id]["marker"], "files": hidden_files[ex_id] or files_of[ex_id],
                         "first_fail": True})
        run_all(jobs, exercises, n_jobs, timeout)
    rows = {ex["id"]: {"public": 0, "hidden": 0, "ref_s": 0.0, "stub_failed": 0, "caught": 0,
                       "mutants": len(ex["mutant"])} for ex in exercises}
    for t in ref_tests.values():
        for ex in exercises:
            if ex["marker"] in t["markers"]:
                rows[ex["id"]]["hidden" if is_hidden(t["key"]) else "public"] += 1
                rows[ex["id"]]["ref_s"] += t["seconds"]
    for job in jobs:
        mine = {n: t for n, t in job.get("tests", {}).items() if source.by_id[job["id"]]["marker"] in t["markers"]}
        failed = [n for n, t in mine.items() if t["outcome"] == "failed"]
        if job["kind"] == "stub":
            rows[job["id"]]["stub_failed"] = len(failed)
            if "error" in job:
                problems.append(f"check 2: exercise {job['id']!r}: the stubbed run failed: {job['error']}")
            problems += [f"check 2: exercise {job['id']!r}: {n} {t['outcome']} on the stub (it must fail)"
                         for n, t in mine.items() if t["outcome"] != "failed"]
            if not mine and "error" not in job:
                problems.append(f"check 2: exercise {job['id']!r}: no test ran on the stub")
        else:
            caught = bool(failed) or "timed out" in job.get("error", "")
            rows[job["id"]]["caught"] += caught
            if not caught:
                why = job.get("error") or f"all {len(mine)} {'hidden ' if hidden_files[job['id']] else ''}tests pass"
                problems.append(f"check 4: exercise {job['id']!r}: mutant {job['why']!r} is not caught ({why})")
    print(f"{'exercise':16} {'points':>6} {'public':>6} {'hidden':>6} {'ref s':>6} {'stub: fail':>10} {'mutants caught':>14}")
    for ex in exercises:
        r = rows[ex["id"]]
        n = r["public"] + r["hidden"]
        print(f"{ex['id']:16} {ex['points']:6d} {r['public']:6d} {r['hidden']:6d} {r['ref_s']:6.2f} "
              f"{r['stub_failed']:>5}/{n:<4} {r['caught']:>8}/{r['mutants']:<5}")
    if verbose:  # the slowest runs: where the build's time goes
        for job in sorted(refs + jobs, key=lambda j: -j.get("seconds", 0))[:10]:
            print(f"  {job.get('seconds', 0):5.1f} s  {job.get('kind', 'reference')} {job.get('id', '')} {job.get('why', '')}")
    return problems


def build(src: Path, out: Path, n_jobs: int = 2, timeout: float = 300.0, force: bool = False,
          preload: bool = True, verbose: bool = False) -> int:
    """Generate and check the handout; prints a table. Returns 0 (built), 1 (a check failed)."""
    t_start = time.monotonic()
    source = Source(src, exclude=out)
    if out.exists() and any(out.iterdir()) and not force:
        raise Refused(f"{out} exists and is not empty (use --force to replace it)")
    exercises = source.exercises
    if preload:
        warm()
    work = Path(tempfile.mkdtemp(prefix="handout-"))
    try:
        staged = source.write(work / "handout", stub_ids=source.by_id, handout=True, hidden=False)
        problems = check_handout(source, staged)
        problems += check_tests(source, work, n_jobs, timeout, verbose)
        elapsed = time.monotonic() - t_start
        if problems:
            print("\n".join(problems))
            print(f"build FAILED ({len(problems)} problems, {elapsed:.1f} s): {out} not written")
            return 1
        if out.exists():
            print(f"replacing the earlier {out} (--force)")
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staged), str(out))
        print(f"built {out} in {elapsed:.1f} s: {len(exercises)} exercises, {sum(ex['points'] for ex in exercises)} points, "
              f"{len(source.mutants)} mutants caught, {n_jobs} jobs")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path, help="the handout folder to write")
    ap.add_argument("--source", type=Path, default=ROOT, help="the reference tree (default: this project)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="test runs at a time")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per test run")
    ap.add_argument("--force", action="store_true", help="replace OUT if it exists")
    ap.add_argument("--no-warm", action="store_true", help="do not pre-import torch & co. (tiny test trees)")
    ap.add_argument("--verbose", action="store_true", help="also print the slowest test runs")
    args = ap.parse_args(argv)
    try:
        return build(args.source.resolve(), args.out.resolve(), args.jobs, args.timeout, args.force,
                     not args.no_warm, args.verbose)
    except (Refused, registry.RegistryError) as e:
        print(f"refused: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
