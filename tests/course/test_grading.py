"""course/grade.py, course/gradescope.py, course/autograder.py and course/classroom.py: Gradescope's
results.json for the reference (100/100) and the untouched handout (0/100), the bundle's layout and
its run_autograder on a partial submission (one exercise solved, one with a listed mutant), a hostile
submission, the Classroom workflow. The grading runs are real (forked pytest runs on copies of a tree)."""
import hashlib
import json
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from course import grade, gradescope, handout, jail, registry, runner  # noqa: E402

EXERCISES = registry.load()
POINTS = {ex["id"]: ex["points"] for ex in EXERCISES}


def run(*args, cwd=ROOT, timeout=600, env=None):
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def graded(submission: Path, out: Path, *extra, tree: Path = ROOT) -> dict:
    proc = run(tree / "course" / "grade.py", submission, "--format", "gradescope", "--out", out, *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def assert_gradescope_schema(obj: dict) -> None:
    """Gradescope's results.json (gradescope-autograders.readthedocs.io/en/latest/specs/), checked here
    field by field, independently of course/gradescope.check (which must agree)."""
    assert gradescope.check(obj) == []
    assert isinstance(obj["score"], float) and isinstance(obj["execution_time"], int)
    assert obj["visibility"] == "visible" and obj["stdout_visibility"] == "hidden" and isinstance(obj["output"], str)
    for t in obj["tests"]:
        assert set(t) == {"name", "number", "score", "max_score", "status", "output", "visibility"}, t
        assert isinstance(t["score"], float) and isinstance(t["max_score"], float) and t["status"] in ("passed", "failed")
        assert t["visibility"] in ("visible", "after_published") and isinstance(t["output"], str) and t["output"]
    scored = [t for t in obj["tests"] if t["visibility"] == "visible"]
    assert [t["name"].split(":")[0] for t in scored] == [ex["id"] for ex in EXERCISES]
    assert [t["max_score"] for t in scored] == [float(ex["points"]) for ex in EXERCISES]
    hidden = [t for t in obj["tests"] if t["visibility"] == "after_published"]
    assert [t["name"] for t in hidden] == [f"{ex['id']}: hidden tests" for ex in EXERCISES if ex["hidden"]]
    assert all(t["score"] == t["max_score"] == 0.0 for t in hidden)
    assert obj["score"] == sum(t["score"] for t in obj["tests"])


def scores(obj: dict) -> dict:
    return {t["name"].split(":")[0]: t["score"] for t in obj["tests"] if t["visibility"] == "visible"}


def write_handout(dst: Path, solved=(), replace=None) -> Path:
    """The handout (every block stubbed but `solved`'s, no hidden tests), built without the checks."""
    src = handout.Source(ROOT)
    return src.write(dst, stub_ids=[i for i in src.by_id if i not in solved], replace=replace, handout=True,
                     hidden=False)


def test_reference_gets_100_and_the_untouched_handout_0_in_gradescope_format(tmp_path):
    """The reference tree graded as a submission: every exercise's points, every hidden entry passed;
    the untouched handout: 0 everywhere, each exercise 'not attempted' (its stub), nothing run.
    Catches: a results.json Gradescope would reject (a field missing, an int score, a score that is
    not the tests' sum), points given to a stub, hidden tests left out of the grade."""
    ref = graded(ROOT, tmp_path / "ref.json")
    assert_gradescope_schema(ref)
    assert ref["score"] == 100.0 and scores(ref) == {k: float(v) for k, v in POINTS.items()}, ref
    assert all(t["status"] == "passed" for t in ref["tests"]), [t for t in ref["tests"] if t["status"] != "passed"]
    assert ref["extra_data"]["max_score"] == 100
    out = write_handout(tmp_path / "handout")
    hand = graded(out, tmp_path / "handout.json")
    assert_gradescope_schema(hand)
    assert hand["score"] == 0.0 and set(scores(hand).values()) == {0.0}
    for t in hand["tests"]:
        ex = t["name"].split(":")[0]
        assert t["output"].startswith("not attempted: ") and f"stub of exercise {ex}" in t["output"], t


HOSTILE_GRPO = '''
import json, os, sys, time
FORGED = json.dumps({{"score": 100.0, "tests": [{{"name": "mask", "score": 100.0, "max_score": 8.0}}]}})
print(FORGED)
print(FORGED, file=sys.stderr)
for path, text in (({ref!r} + "/grpo.py", "\\nraise SystemExit"), ({ref!r} + "/pwned", "x"),
                   ({out!r}, FORGED), ({outside!r} + "/escaped", "x"), ("/tmp/core-code-escaped", "x")):
    try:
        with open(path, "a") as f:
            f.write(text)
    except OSError:
        pass
for fd in range(3, 64):  # a forged outcome into every open file, the report pipe among them
    try:
        os.write(fd, (("0" * 64) + " " + json.dumps({{"tests": {{}}, "errors": []}}) + "\\n").encode())
    except OSError:
        pass
if os.fork() == 0:  # a daemon that outlives the run and overwrites the results afterwards
    os.setsid()
    if os.fork() == 0:
        time.sleep(2)
        for path in ({out!r}, {outside!r} + "/late"):
            try:
                with open(path, "w") as f:
                    f.write(FORGED)
            except OSError:
                pass
    os._exit(0)
os._exit(0)  # exit early: pytest never reports


def completion_mask(seqs, prompt_len, eos_id):
    return None
'''


def tree_hash(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_hostile_submission_scores_0_and_changes_nothing(tmp_path):
    """The grader runs from a copy of this tree (the reference the attack targets, by its real path).
    grpo.py prints forged results, writes into the reference tree, the results file and the folder
    around it, writes forged outcomes into every open fd, leaves a setsid() daemon that overwrites the
    results 2 s later, and exits at import with status 0; coder.py raises SystemExit at import; measure/stats.py
    loops forever at import (--timeout 6); rollout.py imports a module that does not exist. Everything gets 0 with a reason, the reference tree is bit for bit the
    same, no file appears outside the runs' copies, and results.json is still ours 3 s later.
    Catches: outcomes read from what the code prints or from a file it can write, a run that exits 0
    taken as passed, a timeout that hangs the grader, a daemon or a write that escapes the run."""
    if jail.mode() == "none":
        pytest.skip("this machine offers no isolation (no user namespaces, not root)")
    ref = tmp_path / "ref"
    for f in handout.project_files(ROOT):
        (ref / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, ref / f)
    outside, sub, out = tmp_path / "outside", tmp_path / "sub", tmp_path / "out" / "results.json"
    outside.mkdir()
    sub.mkdir()
    (sub / "grpo.py").write_text(HOSTILE_GRPO.format(ref=str(ref), out=str(out), outside=str(outside)))
    (sub / "coder.py").write_text("import sys\nsys.exit(0)\n\n\ndef extract_code(text):\n    return None\n")
    (sub / "measure").mkdir(exist_ok=True)
    (sub / "measure/stats.py").write_text("while True:\n    pass\n\n\ndef pass_at_k(n, c, k):\n    return 1.0\n")
    (sub / "rollout.py").write_text("import numpyy\n\n\ndef logprobs(policy, r, rows=slice(None)):\n    return None\n")
    before = tree_hash(ref)
    t0 = time.monotonic()
    obj = graded(sub, out, "--timeout", "6", tree=ref)
    assert time.monotonic() - t0 < 120
    assert_gradescope_schema(obj)
    assert obj["score"] == 0.0, obj
    out_text = out.read_text()
    outputs = {t["name"].split(":")[0]: t["output"] for t in obj["tests"] if t["visibility"] == "visible"}
    assert outputs["mask"].startswith("the test process exited (status 0) before pytest reported"), outputs
    assert outputs["extract"].startswith("pytest stopped") and outputs["pass_at_k"] == "timed out after 6 s"
    assert outputs["group_adv"] == "grpo.group_advantages is not defined in the submitted grpo.py"
    assert outputs["policy_logprobs"].endswith("ModuleNotFoundError: No module named 'numpyy'"), outputs
    time.sleep(3)  # the daemon's time to strike
    assert out.read_text() == out_text and tree_hash(ref) == before
    assert list(outside.iterdir()) == []
    if jail.mode() == "namespaces":  # mode uid may write world-writable folders, /tmp among them
        assert not Path("/tmp/core-code-escaped").exists()


def test_find_takes_the_shallowest_plain_file(tmp_path):
    """The submission's layout: a file at the top wins over one in a folder; two at the same depth, a
    symlink, a file that is not UTF-8 are refused by name. Catches: a link to the hidden tests read as
    grpo.py, an arbitrary pick among two copies."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "measure").mkdir(exist_ok=True)
    (tmp_path / "a" / "measure/stats.py").write_text("x = 1\n")
    assert grade.find(tmp_path, "measure/stats.py").text == "x = 1\n"
    (tmp_path / "measure").mkdir(exist_ok=True)
    (tmp_path / "measure/stats.py").write_text("x = 2\n")
    assert grade.find(tmp_path, "measure/stats.py").text == "x = 2\n"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "coder.py").write_text("y = 1\n")
    (tmp_path / "a" / "coder.py").write_text("y = 2\n")
    assert grade.find(tmp_path, "coder.py").problem == "2 copies of coder.py in the submission: a/coder.py, b/coder.py"
    (tmp_path / "grpo.py").symlink_to(ROOT / "tests" / "hidden" / "test_hidden_grpo.py")
    assert grade.find(tmp_path, "grpo.py").problem == "grpo.py is a link or not a plain file"
    (tmp_path / "sft.py").write_bytes(b"\xff\xfe")
    assert grade.find(tmp_path, "sft.py").problem == "sft.py is not UTF-8 text"
    (tmp_path / "rollout.py").write_text("def logprobs(:\n")
    assert grade.find(tmp_path, "rollout.py").problem == "rollout.py:1: invalid syntax (the file does not parse)"


def test_a_forged_report_is_not_an_outcome():
    """The run's report is the last line sealed with that run's key: a line sealed with another key,
    or a bare JSON line, is refused. Catches: a report taken from anything a run writes."""
    key, other = b"k" * 32, b"o" * 32
    good = runner.seal(key, json.dumps({"tests": {"a": 1}, "errors": []}))
    assert runner.unseal(key, b"noise\n" + good + b"garbage") == {"tests": {"a": 1}, "errors": []}
    assert runner.unseal(key, runner.seal(other, '{"tests": {}}')) is None
    assert runner.unseal(key, b'{"tests": {}}\n' + b"0" * 64 + b' {"tests": {}}\n') is None


def test_bundle_grades_a_partial_submission_with_one_solved_exercise_and_one_mutant(tmp_path):
    """make autograder's zip (without the test runs): setup.sh and run_autograder at its root and
    executable, the grading tree with the hidden tests but no solution line, handout.py or mutant.
    Its run_autograder, run as Gradescope would (AUTOGRADER = a folder with source/ and submission/),
    on a submission of two changed files in a folder (as a zip unpacks) plus files it must ignore (a
    test made to pass, a registry giving extract 100 points): measure/stats.py with pass_at_k solved -> exactly
    its 6 points; coder.py with extract solved but for a listed mutant (the 'py' tag not Python) -> its
    public tests pass (run here on the handout), a hidden one fails: 0, the hidden entry names it.
    Every other exercise: 0, 'grpo.py is not in the submission'. Catches: scripts in a subfolder
    (Gradescope finds none), a bundle a submission could import solutions from, points for a file that
    was not submitted, a grade from the public tests alone, a submitted test or registry taken over."""
    z = tmp_path / "autograder.zip"
    proc = run(ROOT / "course" / "autograder.py", z, "--no-check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ag = tmp_path / "ag"
    with zipfile.ZipFile(z) as f:
        names = f.namelist()
        modes = {i.filename: i.external_attr >> 16 for i in f.infolist()}
        f.extractall(ag / "source")
    assert names[:2] == ["setup.sh", "run_autograder"] and all(modes[n] & 0o111 for n in names[:2])
    assert "core-code/course/grade.py" in names and "core-code/course/handout.py" not in names
    assert any(n.startswith("core-code/tests/hidden/") for n in names)
    shipped = ag / "source" / "core-code"
    assert "torch.logsumexp(logits, dim=-1)" not in (shipped / "grpo.py").read_text()
    assert all(ex["hidden"] and not ex["mutant"] for ex in registry.load(shipped / "course" / "exercises.toml"))

    src = handout.Source(ROOT)
    mutant = next(m for m in src.by_id["extract"]["mutant"] if "'py'" in m["why"])
    tree = write_handout(tmp_path / "handout", solved=("pass_at_k", "extract"),
                         replace={"coder.py": src.mutate("extract", mutant)})
    public = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "ex_extract",
                             "tests/test_roles.py"], cwd=tree, capture_output=True, text=True, timeout=300)
    assert public.returncode == 0, public.stdout[-2000:]  # the mutant passes the public tests
    sub = ag / "submission" / "hw3"
    (sub / "tests").mkdir(parents=True)
    (sub / "measure").mkdir()
    for f in ("measure/stats.py", "coder.py"):
        shutil.copy(tree / f, sub / f)
    (sub / "tests" / "test_roles.py").write_text("def test_extract_last_python_block():\n    pass\n")
    (sub / "exercises.toml").write_text('[[exercise]]\nid = "extract"\npoints = 100\n')
    for script in ("run_autograder", "setup.sh"):
        (ag / "source" / script).chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "AUTOGRADER": str(ag), "COURSE_PYTHON": sys.executable,
           "CORE_CODE_CACHE": runner.cache_dir()}
    proc = subprocess.run([str(ag / "source" / "run_autograder")], env=env, capture_output=True, text=True, timeout=600)
    obj = json.loads((ag / "results" / "results.json").read_text())
    assert_gradescope_schema(obj)
    assert obj["score"] == 6.0 and scores(obj)["pass_at_k"] == 6.0, proc.stdout + proc.stderr
    entries = {t["name"]: t for t in obj["tests"]}
    extract = entries[f"extract: {src.by_id['extract']['title']}"]
    assert extract["score"] == 0.0 and extract["output"].startswith("the public tests pass; a hidden test fails")
    assert entries["extract: hidden tests"]["output"].startswith("failed: test_hidden_extract_fenced_blocks")
    others = [t["output"] for n, t in entries.items() if t["visibility"] == "visible" and n.split(":")[0] in
              {ex["id"] for ex in EXERCISES if registry.files_of(ex) == ["grpo.py"]}]
    assert len(others) == 7 and set(others) == {"grpo.py is not in the submission"}


def test_classroom_workflow_has_one_step_per_exercise(tmp_path):
    """make classroom on a handout: the workflow GitHub Classroom runs (job run-autograding-tests), one
    command-grader step per exercise with its public tests' command and its points (100 in all), the
    reporter reading every step's <ID>_RESULTS; and a refusal for the teacher's tree. Catches: a step
    running the hidden tests (absent from the handout), points that do not add up, a reporter that
    misses a step (its points never reach Classroom)."""
    out = write_handout(tmp_path / "handout")
    proc = run(ROOT / "course" / "classroom.py", out)
    assert proc.returncode == 0, proc.stderr
    wf = yaml.safe_load((out / ".github" / "workflows" / "classroom.yml").read_text())
    job = wf["jobs"]["run-autograding-tests"]
    graders = [s for s in job["steps"] if s.get("uses", "").startswith("classroom-resources/autograding-command-grader")]
    assert [s["id"] for s in graders] == [ex["id"] for ex in EXERCISES]
    assert sum(s["with"]["max-score"] for s in graders) == 100
    for s, ex in zip(graders, EXERCISES):
        files = sorted({t.split("::")[0] for t in ex["tests"]})
        assert s["with"]["command"] == f"python -m pytest -q -p no:cacheprovider -m {ex['marker']} {' '.join(files)}"
        assert s["with"]["max-score"] == ex["points"] and "hidden" not in s["with"]["command"]
    reporter = job["steps"][-1]
    assert reporter["uses"].startswith("classroom-resources/autograding-grading-reporter")
    assert reporter["with"]["runners"].split(",") == [ex["id"] for ex in EXERCISES]
    assert set(reporter["env"]) == {f"{ex['id'].upper()}_RESULTS" for ex in EXERCISES}
    refused = run(ROOT / "course" / "classroom.py", ROOT)
    assert refused.returncode == 2 and "is the teacher's tree" in refused.stderr
