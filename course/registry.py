"""The exercise registry (course/exercises.toml): load and check it, tag tests with its markers.

Each exercise: id (the name in `# BEGIN SOLUTION <id>`), title, functions, marker (pytest), points,
depends (ids), cpu_only, tests ("tests/<file>.py::<name>", every parametrisation of it: the public
tests, shipped in the handout) and, for teachers only, hidden (tests under tests/hidden/, which only
the grading bundle carries) and mutants (plausible wrong solutions: {why, file, old, new}). Markers
are registered and applied by tests/conftest.py (minitorch's idea: `pytest -m ex_group_adv tests`
runs one exercise).
"""
import json
from pathlib import Path

import tomllib

DEFAULT = Path(__file__).resolve().parent / "exercises.toml"
FIELDS = {"id": str, "title": str, "functions": list, "marker": str, "points": int, "depends": list,
          "cpu_only": bool, "tests": list}
MUTANT_FIELDS = ("why", "file", "old", "new")
HIDDEN_DIR = "tests/hidden/"  # hidden tests live here, apart from the public ones: the handout leaves it out


class RegistryError(ValueError):
    """A malformed registry; the message is one line naming the file (and the exercise)."""


def load(path=DEFAULT) -> list[dict]:
    """The exercises of a registry file, checked: every field present with its type, ids and markers
    unique, depends naming known exercises (no cycle), tests in the form 'tests/x.py::name'.
    Raises RegistryError (one line) otherwise."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise RegistryError(f"{path}: {e}") from None
    exercises = raw.get("exercise")
    if not isinstance(exercises, list) or not exercises:
        raise RegistryError(f"{path}: no [[exercise]] tables")
    seen, markers = set(), set()
    for i, ex in enumerate(exercises):
        where = f"{path}: exercise {ex.get('id', f'#{i + 1}')!r}"
        for key, kind in FIELDS.items():
            if not isinstance(ex.get(key), kind) or (kind is int and isinstance(ex.get(key), bool)):
                raise RegistryError(f"{where}: '{key}' must be a {kind.__name__}")
        if ex["id"] in seen or ex["marker"] in markers:
            raise RegistryError(f"{where}: duplicate id or marker")
        if not ex["marker"].isidentifier():
            raise RegistryError(f"{where}: marker {ex['marker']!r} is not a Python identifier")
        seen.add(ex["id"])
        markers.add(ex["marker"])
        if not ex["tests"] or any("::" not in t or t.startswith(HIDDEN_DIR) for t in ex["tests"]):
            raise RegistryError(f"{where}: 'tests' must list 'tests/<file>.py::<name>' entries outside {HIDDEN_DIR}")
        hidden = ex.setdefault("hidden", [])
        if not isinstance(hidden, list) or any(not isinstance(t, str) or "::" not in t or not t.startswith(HIDDEN_DIR)
                                               for t in hidden):
            raise RegistryError(f"{where}: 'hidden' must list '{HIDDEN_DIR}<file>.py::<name>' entries")
        for m in ex.setdefault("mutant", []):
            if any(not isinstance(m.get(k), str) for k in MUTANT_FIELDS):
                raise RegistryError(f"{where}: a mutant needs string fields {', '.join(MUTANT_FIELDS)}")
    by_id = {ex["id"]: ex for ex in exercises}
    for ex in exercises:
        if bad := [d for d in ex["depends"] if d not in by_id]:
            raise RegistryError(f"{path}: exercise {ex['id']!r} depends on unknown {bad[0]!r}")
    for ex in exercises:  # no cycle: walk the depends from each exercise
        stack, reached = list(ex["depends"]), set()
        while stack:
            d = stack.pop()
            if d == ex["id"]:
                raise RegistryError(f"{path}: exercise {ex['id']!r} depends on itself (a cycle)")
            if d not in reached:
                reached.add(d)
                stack += by_id[d]["depends"]
    return exercises


def files_of(ex: dict) -> list[str]:
    """The files a student submits for an exercise: the modules of its functions ('grpo.loss_weights'
    -> 'grpo.py')."""
    return sorted({f.rsplit(".", 1)[0].replace(".", "/") + ".py" for f in ex["functions"]})


def to_toml(exercises: list[dict], header: str = "", hidden: bool = False) -> str:
    """The registry as TOML WITHOUT the mutants (they quote solution lines), and without the hidden
    tests unless `hidden` (the handout's copy has none; the grading bundle's has them).
    JSON strings are valid TOML basic strings."""
    out = [header] if header else []
    for ex in exercises:
        out.append("[[exercise]]")
        for key in [*FIELDS, *(["hidden"] if hidden else [])]:
            v = ex[key]
            if isinstance(v, bool):
                out.append(f"{key} = {'true' if v else 'false'}")
            elif isinstance(v, int):
                out.append(f"{key} = {v}")
            elif isinstance(v, list):
                out.append(f"{key} = [{', '.join(json.dumps(x) for x in v)}]")
            else:
                out.append(f"{key} = {json.dumps(v)}")
        out.append("")
    return "\n".join(out)


def test_key(item) -> str:
    """'tests/test_x.py::test_name' (or 'tests/hidden/...') of a collected pytest item, from the last
    'tests' folder of its path on (parametrisations share it)."""
    parts = Path(str(item.path)).parts
    top = max((i for i, part in enumerate(parts) if part == "tests"), default=len(parts) - 2)
    return f"{'/'.join(parts[top:])}::{getattr(item, 'originalname', None) or item.name}"


def register_markers(config, exercises=None) -> None:
    """Declare each exercise's marker (pytest -m <marker>; `pytest --markers` lists them)."""
    for ex in exercises if exercises is not None else load():
        config.addinivalue_line("markers", f"{ex['marker']}: exercise {ex['id']} ({ex['points']} points): {ex['title']}")


def mark_items(items, exercises=None) -> None:
    """Add each exercise's marker to the tests it lists (a test may grade several exercises)."""
    import pytest

    by_test = {}
    for ex in exercises if exercises is not None else load():
        for t in ex["tests"] + ex.get("hidden", []):
            by_test.setdefault(t, []).append(ex["marker"])
    for item in items:
        for marker in by_test.get(test_key(item), []):
            item.add_marker(getattr(pytest.mark, marker))
