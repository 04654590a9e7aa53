"""The problem record: `Problem` (function tests or I/O tests), its JSONL form, and a reader of
other sources' records (a local file or a Hugging Face `datasets` id).

Every source becomes one record, `Problem`, of one of two kinds:
    function problem  prompt (statement with the function signature), entry_point,
                      tests (statements, each one test, usually `assert f(x) == y`),
                      setup (code run after the program and before the tests);
    I/O problem       prompt (statement with its input and output format), entry_point = "",
                      tests = (), io_tests = ((stdin text, expected stdout), ...): the program is
                      run whole once per test, judged by the sandbox's output checker.
Both may carry solution and plan (training sets), time_limit_s (CPU seconds per test) and
memory_mb, and a function problem a slow_solution (a deliberately slow but correct reference).
An I/O problem names its output checker (sandboxing/checkers.py: its source's rule, `strict` for ours) and may
carry a checker program of its own (checker_program: open-r1/codeforces' generated_checker).
Which sets exist and how they are named is data/__init__.py's concern; data/benchmarks.py reads the
competitive-programming benchmarks into this record.

SOURCES: every local file a problem set was read from in this process (resolved paths, hub datasets'
cache files included). The sandbox covers each of them in every run (sandboxing.process.hidden_files):
they hold the expected outputs and reference solutions, wherever on the host they lie.
"""
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

from sandboxing import checkers
from sandboxing.process import SOURCES  # the files problems were read from: hidden from every program (above)


class DataError(Exception):
    """Bad problem data; the message names the file and line (or the record)."""


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str
    entry_point: str  # "" for an I/O (stdin/stdout) problem
    tests: tuple  # function tests (assert statements); () for an I/O problem
    setup: str = ""
    solution: str | None = None
    plan: str | None = None
    io_tests: tuple = ()  # ((input_str, expected_output_str), ...); () for a function problem
    time_limit_s: float | None = None  # CPU s per test; None -> the caller's --sandbox-timeout
    memory_mb: int | None = None  # None -> sandbox.MEMORY_MB
    slow_solution: str | None = None  # stress problems: a deliberately slow but correct solution
    checker: str = "strict"  # the I/O tests' rule, a name of checkers.RULES
    checker_program: str | None = None  # the problem's own checker (sandboxing/special_checker.py), if any
    public_tests: tuple = ()  # I/O problems: ((stdin, stdout), ...) the statement's public examples, apart from
    #                           io_tests (the private ones, which score); a Debugger sees these (debugger.visible_tests)

    @property
    def is_io(self) -> bool:
        return bool(self.io_tests)

    def sandbox_job(self, program, timeout_s: float) -> dict:
        """kwargs for sandbox.run_program / run_many: program, tests, io_tests, setup,
        timeout_s (= time_limit_s or timeout_s), memory_mb (only when set), and for an I/O
        problem its checker (and checker_program, when it has one).

        >>> Problem("t", "Print 1.", "", (), io_tests=(("", "1"),), memory_mb=64).sandbox_job("print(1)", 4.0)
        {'program': 'print(1)', 'tests': [], 'io_tests': [('', '1')], 'setup': '', 'timeout_s': 4.0, 'memory_mb': 64, 'checker': 'strict'}
        """
        job = dict(program=program, tests=list(self.tests), io_tests=list(self.io_tests), setup=self.setup,
                   timeout_s=self.time_limit_s or timeout_s)
        if self.memory_mb is not None:
            job["memory_mb"] = self.memory_mb
        if self.is_io:
            job["checker"] = self.checker
        if self.checker_program:
            job["checker_program"] = self.checker_program
        return job


# --- our JSONL record ------------------------------------------------------------------------

def load_jsonl(path) -> list[Problem]:
    """Read our record, one JSON object per line. Raises DataError('FILE:LINE: reason').

    Function record: task_id, prompt, entry_point, tests [str, ...], optional setup, solution,
    plan, slow_solution, time_limit_s. I/O record: task_id, prompt, io_tests [{"input": str,
    "output": str}, ...], optional solution, plan, time_limit_s, memory_mb, checker (a name of
    checkers.RULES; default strict); no entry_point/tests.
    Other keys (difficulty) are ignored.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    SOURCES.add(os.path.realpath(path))
    problems, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: not valid JSON ({e.msg})") from None
            problems.append(_problem(rec, where))
            if rec["task_id"] in seen:
                raise DataError(f"{where}: duplicate task_id {rec['task_id']!r}")
            seen.add(rec["task_id"])
    if not problems:
        raise DataError(f"{path}: no problems in file")
    return problems


def to_record(p: Problem) -> dict:
    """A problem as our JSONL record, the inverse of load_jsonl for what it keeps: task_id, prompt, and
    entry_point, tests, setup (function) or io_tests, checker (I/O); solution always, plan when it has one."""
    if p.is_io:
        rec = {"task_id": p.task_id, "prompt": p.prompt, "io_tests": [{"input": i, "output": o} for i, o in p.io_tests],
               "solution": p.solution, "checker": p.checker}
    else:
        rec = {"task_id": p.task_id, "prompt": p.prompt, "entry_point": p.entry_point, "tests": list(p.tests),
               "setup": p.setup, "solution": p.solution}
    return {**rec, **({"plan": p.plan} if p.plan is not None else {})}


def _problem(rec, where) -> Problem:
    if not isinstance(rec, dict):
        raise DataError(f"{where}: a line must be a JSON object")
    for key in ("task_id", "prompt"):
        if not isinstance(rec.get(key), str):
            raise DataError(f"{where}: field '{key}' missing or not a str")
    for key in ("setup", "solution", "plan", "slow_solution"):
        if rec.get(key) is not None and not isinstance(rec[key], str):
            raise DataError(f"{where}: '{key}' must be a string")
    limits = {key: _positive(rec, key, typ, where) for key, typ in (("time_limit_s", (int, float)),
                                                                  ("memory_mb", int))}
    if "io_tests" in rec and (rec.get("tests") or rec.get("entry_point")):
        raise DataError(f"{where}: a problem has function tests or I/O tests, not both "
                        "(an I/O record has no 'entry_point' / 'tests')")
    if "io_tests" in rec:
        checker = rec.get("checker", "strict")
        if not isinstance(checker, str) or checker not in checkers.RULES:
            raise DataError(f"{where}: 'checker' must be one of {', '.join(checkers.RULES)}, got {checker!r}")
        return Problem(rec["task_id"], rec["prompt"], "", (), "", rec.get("solution"), rec.get("plan"),
                       io_tests=_io_tests(rec["io_tests"], where), slow_solution=rec.get("slow_solution"),
                       checker=checker, **limits)
    if "tests" not in rec:
        raise DataError(f"{where}: no tests: a problem needs 'tests' (with 'entry_point') or 'io_tests'")
    if not isinstance(rec.get("entry_point"), str):
        raise DataError(f"{where}: field 'entry_point' missing or not a str")
    if not isinstance(rec["tests"], list) or not rec["tests"] or \
            not all(isinstance(t, str) and t.strip() for t in rec["tests"]):
        raise DataError(f"{where}: 'tests' must be a non-empty list of strings")
    if not rec["entry_point"].isidentifier():
        raise DataError(f"{where}: entry_point {rec['entry_point']!r} is not a Python name")
    return Problem(rec["task_id"], rec["prompt"], rec["entry_point"], tuple(rec["tests"]),
                   rec.get("setup") or "", rec.get("solution"), rec.get("plan"),
                   slow_solution=rec.get("slow_solution"), **limits)


def _io_tests(tests, where) -> tuple:
    """[{"input": str, "output": str}, ...] -> ((input, output), ...), or DataError."""
    if not isinstance(tests, list) or not tests:
        raise DataError(f"{where}: 'io_tests' must be a non-empty list of {{\"input\", \"output\"}} objects")
    for i, t in enumerate(tests):
        if not (isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str)):
            raise DataError(f"{where}: io_tests[{i}] must be an object with string 'input' and 'output'")
    return tuple((t["input"], t["output"]) for t in tests)


def _positive(rec, key, typ, where):
    """rec[key] if absent/None or a positive number of type `typ` (bool refused), else DataError."""
    value = rec.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, typ) or value <= 0):
        kind = "integer" if typ is int else "number"
        raise DataError(f"{where}: '{key}' must be a positive {kind}, got {value!r}")
    return value


# --- records of other sources: a local file or a Hugging Face datasets id ----------------------

FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".gz")  # what records() reads as a file


def looks_like_path(source: str) -> bool:
    """True when `source` names a local file, not a hub id (an 'org/name' id has no suffix and no leading
    '/', '.' or '~'): a missing one is then reported as missing, not as a hub dataset to download.

    >>> looks_like_path("/nonexistent.jsonl"), looks_like_path("../data/mbpp.json"), looks_like_path("google-research-datasets/mbpp")
    (True, True, False)
    """
    return source.startswith(("/", ".", "~")) or source.endswith(FILE_SUFFIXES)


def records(source: str, split: str | None, **hub_kwargs):
    """Yield (where, record dict) from a local .jsonl / .json / .parquet file (all records; split
    ignored) or, when `source` is not a file, the Hugging Face dataset `source` (needs the
    `datasets` package and a network). `where` names FILE:LINE, FILE: record I, or ID[I].
    """
    path = Path(source)
    if path.is_file():
        SOURCES.add(os.path.realpath(path))
        if path.suffix == ".json":
            try:
                rows = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(rows, list):
                raise DataError(f"{path}: a .json file must hold a list of records")
            yield from ((f"{path}: record {i}", r) for i, r in enumerate(rows))
        elif path.suffix == ".parquet":
            if importlib.util.find_spec("pyarrow") is None:
                raise DataError(f"{path}: reading .parquet needs pyarrow (pip install pyarrow); or use .jsonl")
            import pyarrow.parquet

            rows = pyarrow.parquet.read_table(path).to_pylist()
            yield from ((f"{path}: record {i}", r) for i, r in enumerate(rows))
        else:
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            yield f"{path}:{n}", json.loads(line)
                        except json.JSONDecodeError as e:
                            raise DataError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        return
    if looks_like_path(source):  # not a hub id: the file is missing
        raise DataError(f"{source}: no such file" if not path.exists() else f"{source}: not a file")
    if importlib.util.find_spec("datasets") is None:
        raise DataError(f"{source}: not a file, and loading a hub dataset needs the hub extras: "
                        "make extras EXTRAS=hub (or pip install -r requirements-hub.txt)")
    from datasets import load_dataset

    try:
        ds = load_dataset(source, split=split, **hub_kwargs)
    except Exception as e:  # offline, unknown id: one line for the user
        raise DataError(f"cannot load dataset '{source}' split '{split}': {str(e).splitlines()[0]}") from None
    SOURCES.update(os.path.realpath(f["filename"]) for f in getattr(ds, "cache_files", None) or ())
    yield from ((f"{source}[{i}]", dict(r)) for i, r in enumerate(ds))
