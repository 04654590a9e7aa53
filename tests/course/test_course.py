"""course/handout.py and course/grade.py: the handout built from the real tree passes all four checks;
broken sources are refused in one line; a stub that a weak test does not notice, or a mutant that
passes, fails the build (the checks can fail). Synthetic trees are tiny (one function, one test)."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from course import handout, registry  # noqa: E402


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The real tree's handout, built once (all checks; ~45 s on 2 busy cores)."""
    out = tmp_path_factory.mktemp("course") / "handout"
    proc = run(ROOT / "course" / "handout.py", out)
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    return out, proc


def test_real_tree_builds_and_every_check_passes(built):
    """Every exercise: its public and hidden tests pass on the reference, ALL fail on its stub, every
    mutant is caught by the hidden tests. Catches: an exercise whose test passes on the stub, a
    registry mutant that the hidden tests miss (e.g. logsumexp(...).detach()), a test listed in the
    registry that does not exist, an exercise without hidden tests."""
    out, proc = built
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()}
    for ex in registry.load():
        row = rows[ex["id"]]  # id points public hidden ref_s stub-fail caught
        public, hidden = int(row[2]), int(row[3])
        assert public >= len(ex["tests"]) and hidden >= len(ex["hidden"]) >= 1, row
        assert row[5] == f"{public + hidden}/{public + hidden}", row  # stub: every test fails
        assert row[6] == f"{len(ex['mutant'])}/{len(ex['mutant'])}" and ex["mutant"], row  # all caught
    assert proc.stdout.strip().splitlines()[-1].startswith(f"built {out}")


def test_handout_has_stubs_and_no_solution(built):
    """Check (3) seen from outside: one stub per exercise at the marker's indentation, no marker line,
    no teacher-only file, no hidden test, a registry without mutants or hidden tests. Catches: a stub
    at column 0 inside a function, the mutant list (which quotes solution lines) or the hidden tests
    (the grade's other half) shipped to students."""
    out, proc = built
    assert proc.returncode == 0
    grpo = (out / "grpo.py").read_text()
    assert '\n    raise NotImplementedError("exercise logprobs: see course/EXERCISES.md")\n' in grpo
    assert "torch.logsumexp(logits, dim=-1)" not in grpo and "torch.minimum(ratio * A" not in grpo
    sft = (out / "sft.py").read_text()
    assert '\n            raise NotImplementedError("exercise sft_step: see course/EXERCISES.md")\n' in sft
    marker = re.compile(r"^\s*# (BEGIN|END) SOLUTION", re.M)
    assert not [p for p in out.rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".toml", "")
                and marker.search(p.read_text(errors="ignore"))]
    assert not (out / "course" / "handout.py").exists() and not (out / "tests" / "course" / "test_course.py").exists()
    assert not (out / "tests" / "hidden").exists() and (ROOT / "tests" / "hidden").is_dir()
    shipped = tomllib.loads((out / "course" / "exercises.toml").read_text())["exercise"]
    assert [e["id"] for e in shipped] == [e["id"] for e in registry.load()]
    assert all("mutant" not in e and "hidden" not in e for e in shipped)
    assert (out / "course" / "EXERCISES.md").exists() and (out / "course" / "grade.py").exists()


def test_unpaired_marker_in_a_copy_of_the_real_tree_is_refused(tmp_path):
    """A copy of the project with the END SOLUTION of grpo.py's last block deleted: refused with ONE
    line naming grpo.py and the BEGIN's line, exit 2, nothing written. Catches: a stub that silently
    swallows the rest of the file."""
    src = tmp_path / "src"
    for f in handout.project_files(ROOT):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    lines = (src / "grpo.py").read_text().split("\n")
    begin = next(i for i, x in enumerate(lines) if x.strip() == "# BEGIN SOLUTION surrogate")
    end = next(i for i in range(begin, len(lines)) if lines[i].strip() == "# END SOLUTION")
    del lines[end]
    (src / "grpo.py").write_text("\n".join(lines))
    proc = run(ROOT / "course" / "handout.py", tmp_path / "out", "--source", src)
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    assert proc.stderr.strip().splitlines() == [
        f"refused: grpo.py:{begin + 1}: BEGIN SOLUTION surrogate is never closed (no END SOLUTION)"]


def tiny_tree(root: Path, body="    return 2 * x", tests=("test_double",), mutant_new="3 * x", extra=None) -> Path:
    """A one-exercise project: mod.double with a marked body, tests/test_mod.py, a registry."""
    (root / "tests").mkdir(parents=True)
    (root / "course").mkdir()
    begin, end = "    # BEGIN SOLUTION double", "    # END SOLUTION"
    (root / "mod.py").write_text("\n".join(["def double(x):", '    """2 x."""', begin, body, end, ""]))
    (root / "tests" / "test_mod.py").write_text("\n".join([
        "import mod", "", "", "def test_double():", "    assert mod.double(3) == 6", "", "",
        "def test_weak():", "    assert callable(mod.double)", ""]))
    tests_list = ", ".join(f'"tests/test_mod.py::{t}"' for t in tests)
    (root / "course" / "exercises.toml").write_text("\n".join([
        "[[exercise]]", 'id = "double"', 'title = "Double"', 'functions = ["mod.double"]', 'marker = "ex_double"',
        "points = 5", "depends = []", "cpu_only = true", f"tests = [{tests_list}]", "[[exercise.mutant]]",
        'why = "a wrong factor"', 'file = "mod.py"', "old = '2 * x'", f"new = '{mutant_new}'", ""]))
    for name, text in (extra or {}).items():
        (root / name).write_text(text)
    return root


def build_tiny(tmp_path, **kw):
    src = tiny_tree(tmp_path / "src", **kw)
    return run(ROOT / "course" / "handout.py", tmp_path / "out", "--source", src, "--no-warm"), tmp_path / "out"


def test_tiny_tree_builds(tmp_path):
    """The good case of the synthetic tree, so that the refusals below fail for their own reason."""
    proc, out = build_tiny(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "mod.py").read_text().split("\n")[2] == '    raise NotImplementedError("exercise double: see course/EXERCISES.md")'


@pytest.mark.parametrize("lines,message", [
    (["    # BEGIN SOLUTION double", "    return 2 * x"], "mod.py:3: BEGIN SOLUTION double is never closed"),
    (["    return 2 * x", "    # END SOLUTION"], "mod.py:4: END SOLUTION without a BEGIN SOLUTION"),
    (["    # BEGIN SOLUTION double", "    # BEGIN SOLUTION double", "    return 2 * x", "    # END SOLUTION"],
     "mod.py:4: BEGIN SOLUTION inside the block opened at line 3"),
    (["    # BEGIN SOLUTION other", "    return 2 * x", "    # END SOLUTION"], "mod.py:3: BEGIN SOLUTION other: no such exercise"),
])
def test_bad_markers_are_refused_in_one_line(tmp_path, lines, message):
    """Unpaired BEGIN / END, nested BEGIN, unknown id: exit 2, one line naming file:line, no output."""
    src = tiny_tree(tmp_path / "src")
    (src / "mod.py").write_text("\n".join(["def double(x):", '    """2 x."""', *lines, ""]))
    proc = run(ROOT / "course" / "handout.py", tmp_path / "out", "--source", src, "--no-warm")
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr


def test_block_outside_its_function_or_above_the_docstring_is_refused(tmp_path):
    """The spec must survive: a block that swallows the docstring, or sits in a function the registry
    does not list for it (a drifted registry), is refused. Catches: a handout whose stubbed function
    has no docstring left to say what to write (CS336's docstring drift)."""
    src = tiny_tree(tmp_path / "src")
    (src / "mod.py").write_text("\n".join(["def double(x):", "    # BEGIN SOLUTION double", '    """2 x."""',
                                           "    return 2 * x", "    # END SOLUTION", ""]))
    proc = run(ROOT / "course" / "handout.py", tmp_path / "out", "--source", src, "--no-warm")
    assert proc.returncode == 2 and "mod.py:2: mod.double needs its docstring above the block" in proc.stderr
    (src / "mod.py").write_text("\n".join(["def triple(x):", '    """3 x."""', "    # BEGIN SOLUTION double",
                                           "    return 3 * x", "    # END SOLUTION", ""]))
    proc = run(ROOT / "course" / "handout.py", tmp_path / "out", "--source", src, "--no-warm")
    assert proc.returncode == 2 and "mod.py:3: block 'double' is not inside mod.double" in proc.stderr


def test_a_test_that_passes_on_the_stub_fails_the_build(tmp_path):
    """test_weak only checks that double is callable: it passes on the stub, so check (2) must fail
    the build (exit 1, nothing written). Catches: a check (2) that only asks for ANY failing test."""
    proc, out = build_tiny(tmp_path, tests=("test_double", "test_weak"))
    assert proc.returncode == 1 and not out.exists(), proc.stdout
    assert "check 2: exercise 'double': tests/test_mod.py::test_weak passed on the stub (it must fail)" in proc.stdout


def test_a_mutant_that_passes_fails_the_build(tmp_path):
    """The mutant x + x equals 2 * x: the tests cannot catch it, so check (4) must fail the build."""
    proc, out = build_tiny(tmp_path, mutant_new="x + x")
    assert proc.returncode == 1 and not out.exists()
    assert "check 4: exercise 'double': mutant 'a wrong factor' is not caught (all 1 tests pass)" in proc.stdout


def test_a_marker_left_in_another_file_fails_check_3(tmp_path):
    """A marker line in a non-Python file is never stubbed: check (3) must find it in the handout."""
    proc, out = build_tiny(tmp_path, extra={"notes.txt": "draft\n# BEGIN SOLUTION double\n"})
    assert proc.returncode == 1 and "check 3: notes.txt:2: a solution marker is left in the handout" in proc.stdout


def test_grade_gives_points_only_when_all_tests_pass(tmp_path):
    """course/grade.py's table format on ONE exercise (the reference's 6/6 is in tests/course/test_grading.py):
    a measure/stats.py whose pass_at_k is wrong (always 0.5) gets 0 of 6 with the first failing public test
    named, though some of its tests pass (k > n still raises); the stub 0/6 'not attempted'; grades.json
    valid JSON with the totals. Catches: partial points for a half-passing exercise, a grades file left
    half-written (it is replaced atomically)."""
    out = tmp_path / "g.json"
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    text = (ROOT / "measure/stats.py").read_text().replace("    return 1.0 - prod(1.0 - k / i for i in range(n - c + 1, n + 1))",
                                                   "    return 0.5")
    (wrong / "measure").mkdir(exist_ok=True)
    (wrong / "measure/stats.py").write_text(text)
    proc = run(ROOT / "course" / "grade.py", wrong, "--only", "pass_at_k", "--out", out)
    assert proc.returncode == 0, proc.stderr
    g = json.loads(out.read_text())
    assert (g["total"], g["max"]) == (0, 6) and g["exercises"][0]["output"].startswith("failed: test_hand_values: "), g
    assert 0 < g["exercises"][0]["passed"] < g["exercises"][0]["tests"] == 6
    stubbed = tmp_path / "stubbed"
    handout.Source(ROOT).write(stubbed, stub_ids=["pass_at_k"])
    proc = run(ROOT / "course" / "grade.py", stubbed, "--only", "pass_at_k", "--out", out)
    g = json.loads(out.read_text())
    assert (g["total"], g["exercises"][0]["passed"]) == (0, 0)
    assert g["exercises"][0]["output"] == "not attempted: measure/stats.py still holds the stub of exercise pass_at_k"
