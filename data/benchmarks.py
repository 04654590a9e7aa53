"""Competitive-programming benchmarks, read in each source's own schema into data.Problem.

Each loader takes a local file (.jsonl / .json / .parquet, records exactly as the hub serves
them) or, online, a Hugging Face `datasets` id, and returns I/O problems (stdin -> stdout,
judged on io_tests by the source's own output checker, sandboxing/checkers.py) or, for call-based problems,
function problems (`assert f(*args) == out`). Problems that cannot be judged by running the
program on stdin (no tests, interactive, file I/O) are skipped, and one line on stderr says how
many and why; a Codeforces problem with a checker of its own is judged by it (sandboxing/special_checker.py).

    code_contests:<file | deepmind/code_contests>[@split]     split train | valid | test (default)
    apps:<file | codeparrot/apps>[@split]                     split train | test (default)
    taco:<file | BAAI/TACO>[@split]                           split train | test (default)
    livecodebench:<file | livecodebench/code_generation_lite>[@version_tag]   split test
    codeforces:<file | open-r1/codeforces>[@split]            split train | test (default)
    genverse:<file | Gen-Verse/CodeContests_train | Gen-Verse/MBPP | Gen-Verse/LiveBench | Gen-Verse/CodeForces
             | Gen-Verse/CodeContests>[@split]                 split train for *_train, else test (default)

Schemas, as checked (2026-12-01) against each source's own card or loading code:
  CodeContests  google-deepmind/code_contests contest_problem.proto and the HF card: name,
      description, public_tests / private_tests / generated_tests = {input: [str], output: [str]},
      solutions = {language: [int], solution: [str]} with Language PYTHON3 = 3 (PYTHON = 1 is
      Python 2), time_limit = {seconds, nanos} (a protobuf Duration) or None, memory_limit_bytes,
      input_file / output_file (set when a problem reads or writes files instead of stdin/stdout).
  APPS / TACO   the codeparrot/apps card (problem_id, question, solutions, input_output,
      difficulty, url, starter_code) and the BAAI/TACO card (question, solutions, starter_code,
      input_output, ...; no id field: records are numbered, as
      FlagOpen/TACO's README does with task_id = idx); input_output is a JSON string
      {inputs, outputs, fn_name?}; hendrycks/apps eval/testing_util.py: without fn_name a test
      is stdin text -> stdout text (a list of lines is joined with "\\n"); with fn_name the
      inputs are argument lists, `method(*inputs)` is compared with the output or, the output
      being wrapped in a one-element list, with its element; `class Solution` in the code
      means the method of a Solution() instance.
  LiveCodeBench lcb_runner/benchmarks/code_generation.py: question_content, starter_code,
      public_test_cases = JSON list of {input, output, testtype}, private_test_cases = the same
      JSON, or base64 of zlib of a pickle of that JSON string, metadata = JSON with func_name
      for functional (LeetCode) problems; lcb_runner/evaluation/testing_util.py: a functional
      input is one JSON value per line (the arguments), the output one JSON value, the method
      one of Solution().
  Codeforces    the open-r1/codeforces card: id, title, description, input_format,
      output_format, interaction_format (interactive problems), note, examples and
      official_tests = [{input, output}], time_limit (s), memory_limit (MB), input_mode
      ("stdio" or "file"), generated_checker (checker code, for problems with several right
      answers).
  Gen-Verse     the CURE sets (Gen-Verse/CURE data/readme.md; what the CoRe-Code release trains and
      evaluates on: AlbertZhaoCA/e1 agent2_dataset.py, evaluation/ours.py): question,
      test_time_limit (s per test), example_input / example_output (public tests: lists of stdin /
      stdout strings), test_input / test_output (private tests, the ones the release scores).
"""
import base64
import importlib.metadata
import io
import json
import pickle
import pickletools
import re
import sys
import zlib
from collections import Counter
from functools import partial
from pathlib import Path

from data.problem import DataError, Problem, records

PYTHON3 = 3  # contest_problem.proto, Solution.Language
MAX_UNPACKED = 1 << 30  # bytes a LiveCodeBench private_test_cases may inflate to (a zlib bomb stops here)


def load_code_contests(source: str, split: str | None = None) -> list[Problem]:
    """CodeContests -> I/O problems: io_tests = public + private + generated tests (as AlphaCode
    judged), solution = the first Python 3 entry of `solutions`, time_limit_s and memory_mb from
    time_limit and memory_limit_bytes (0 or absent -> None: the caller's defaults). Skipped:
    no tests, or an input_file / output_file (the program must use files, not stdin/stdout)."""
    return _load("CodeContests", _code_contests, records(source, split or "test"), f"code_contests:{source}")


def _code_contests(r, where, i):
    if r.get("input_file") or r.get("output_file"):  # the proto: "some problems expect specific files"
        return "file I/O"
    tests = []
    for key in ("public_tests", "private_tests", "generated_tests"):
        t = r.get(key) or {}
        ins, outs = t.get("input") or [], t.get("output") or []
        if len(ins) != len(outs) or not all(isinstance(x, str) for x in ins + outs):
            raise DataError(f"{where}: '{key}' must be {{input: [str], output: [str]}} of equal lengths")
        tests += zip(ins, outs)
    if not tests:
        return "no tests"
    sols = r.get("solutions") or {}
    python3 = [s for lang, s in zip(sols.get("language") or [], sols.get("solution") or [])
               if lang in (PYTHON3, "PYTHON3")]
    limit = r.get("time_limit") or {}
    seconds = (limit.get("seconds") or 0) + (limit.get("nanos") or 0) / 1e9
    memory_mb = (r.get("memory_limit_bytes") or 0) >> 20
    return Problem(f"code_contests/{r['name']}", r["description"], "", (), solution=(python3 or [None])[0],
                   io_tests=tuple(tests), time_limit_s=seconds or None, memory_mb=memory_mb or None,
                   checker="code_contests")


def load_apps(source: str, split: str | None = None, name: str = "apps") -> list[Problem]:
    """APPS (and TACO, same input_output JSON) -> I/O problems, or function problems for the
    call-based ones (fn_name): `assert fn(*inputs[i]) == outputs[i]`, a one-element list
    output unwrapped (our choice: APPS stores call-based outputs wrapped; its checker accepts
    either, a value test holds one). prompt = question (+ starter_code), solution = solutions[0].
    Both hub sets are loading scripts (apps.py, TACO.py): trust_remote_code=True with datasets < 4."""
    script = {"trust_remote_code": True} if _datasets_major() < 4 and not Path(source).is_file() else {}
    rows = records(source, split or "test", **script)
    return _load(name.upper(), partial(_apps, name=name), rows, f"{name}:{source}")


def _apps(r, where, i, name):
    spec = _json(r.get("input_output") or "{}", where, "input_output")
    sols = _json(r.get("solutions") or "[]", where, "solutions")
    if not isinstance(spec, dict) or not isinstance(sols, list):
        raise DataError(f"{where}: input_output must be a JSON object and solutions a JSON list")
    ins, outs = spec.get("inputs") or [], spec.get("outputs") or []
    if not ins:
        return "no tests"
    if len(ins) != len(outs):
        raise DataError(f"{where}: input_output has {len(ins)} inputs but {len(outs)} outputs")
    starter = r.get("starter_code") or ""
    prompt = r["question"].strip() + (f"\n\n{starter.strip()}\n" if starter.strip() else "\n")
    task_id, solution, fn = f"{name}/{r.get('problem_id', i)}", (sols or [None])[0], spec.get("fn_name")
    if not fn:
        return Problem(task_id, prompt, "", (), solution=solution, checker=name,
                       io_tests=tuple((_text(x, where), _text(y, where)) for x, y in zip(ins, outs)))
    if not isinstance(fn, str) or not fn.isidentifier():
        raise DataError(f"{where}: fn_name {fn!r} is not a Python name")
    call = f"Solution().{fn}" if "class Solution" in starter else fn
    tests = tuple(_value_test(call, args if isinstance(args, list) else [args],
                              out[0] if isinstance(out, list) and len(out) == 1 else out)
                  for args, out in zip(ins, outs))
    return Problem(task_id, prompt, fn, tests, solution=solution)


def load_livecodebench(source: str, version_tag: str | None = None) -> list[Problem]:
    """LiveCodeBench code generation (split test) -> I/O problems, or function problems when
    metadata has func_name. version_tag (release_v1, release_v2, ...; None: the set's default)
    picks the problems. On the hub the set is a loading script, run with trust_remote_code=True
    as lcb_runner does (datasets < 4); datasets 4 runs no scripts, and the tag is passed as the
    config name (https://github.com/LiveCodeBench/LiveCodeBench/issues/108), which works once the hub set is converted to parquet."""
    if Path(source).is_file():
        hub = {}
    elif _datasets_major() < 4:  # the loading script: version_tag is its argument
        hub = dict(trust_remote_code=True, **({"version_tag": version_tag} if version_tag else {}))
    else:  # no scripts in datasets 4: the tag is a config of the parquet version
        hub = {"name": version_tag} if version_tag else {}
    return _load("LiveCodeBench", _livecodebench, records(source, "test", **hub), f"livecodebench:{source}")


def _livecodebench(r, where, i):
    tests = _json(r.get("public_test_cases") or "[]", where, "public_test_cases")
    tests = _pairs(tests + lcb_private_tests(r.get("private_test_cases") or "[]", where), where)
    if not tests:
        return "no tests"
    meta = r.get("metadata") or "{}"
    fn = (_json(meta, where, "metadata") if isinstance(meta, str) else meta).get("func_name")
    starter = r.get("starter_code") or ""
    task_id = f"livecodebench/{r['question_id']}"
    prompt = r["question_content"].strip() + (f"\n\n{starter.strip()}\n" if starter.strip() else "\n")
    if not fn:
        return Problem(task_id, prompt, "", (), io_tests=tests, checker="livecodebench")
    call = f"Solution().{fn}" if "class Solution" in starter else fn
    cases = [([_json(line, where, "test input") for line in x.split("\n") if line.strip()],  # one argument a line
              _json(y, where, "test output")) for x, y in tests]
    return Problem(task_id, prompt, fn, tuple(_value_test(call, args, out) for args, out in cases))


def lcb_private_tests(field: str, where: str) -> list:
    """private_test_cases -> its list: plain JSON, else base64 -> zlib -> pickle -> JSON string,
    the pickle read by `unpickle_string` (never pickle.loads: a pickle can run any code)."""
    try:
        return json.loads(field)
    except (json.JSONDecodeError, TypeError):
        pass
    try:
        inflater = zlib.decompressobj()
        packed = inflater.decompress(base64.b64decode(field.encode("utf-8"), validate=True), MAX_UNPACKED)
    except (ValueError, zlib.error, AttributeError) as e:
        raise DataError(f"{where}: private_test_cases is neither JSON nor base64+zlib ({e})") from None
    if inflater.unconsumed_tail:
        raise DataError(f"{where}: private_test_cases inflates past {MAX_UNPACKED >> 20} MiB")
    return _json(unpickle_string(packed, where), where, "private_test_cases")


SAFE_OPCODES = frozenset({"PROTO", "FRAME", "STOP", "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT",
                          "UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"})


class _NoGlobals(pickle.Unpickler):
    """An unpickler that can build no object but what its opcodes spell out: every global
    (module.name, the only way a pickle reaches a callable) and persistent id is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} refused")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("persistent id refused")


def unpickle_string(packed: bytes, where: str = "pickle") -> str:
    """A pickle of one str -> that str; any other pickle -> DataError, before anything runs.

    Two locks: every opcode must be one that pushes a string or frames, memoises or stops
    (SAFE_OPCODES, checked by pickletools without executing anything), and the unpickler
    that then reads it refuses every global, so even a missed opcode cannot call anything.
    >>> unpickle_string(pickle.dumps('[{"input": "1"}]'))
    '[{"input": "1"}]'
    """
    try:
        ops = {op.name for op, _, _ in pickletools.genops(packed)}
        if not ops <= SAFE_OPCODES:
            raise pickle.UnpicklingError(f"opcodes {sorted(ops - SAFE_OPCODES)} refused: only a string is allowed")
        value = _NoGlobals(io.BytesIO(packed)).load()
    except (pickle.UnpicklingError, ValueError, EOFError) as e:
        raise DataError(f"{where}: not a pickled string: {e}") from None
    if not isinstance(value, str):
        raise DataError(f"{where}: the pickle holds a {type(value).__name__}, not a string")
    return value


def load_codeforces(source: str, split: str | None = None) -> list[Problem]:
    """open-r1/codeforces -> I/O problems on official_tests (examples when those are empty),
    judged by the problem's generated_checker when it has one (several right answers:
    sandboxing/special_checker.py runs it), else by checkers.codeforces; each input with the \r that
    ends a line removed, as open-r1's runner does (piston packages/codeforces/1.0.0/run:
    sed 's/\r$//'). Skipped, with the counts on stderr: an interaction_format (interactive),
    an input_mode other than stdio (reads a file), no tests."""
    return _load("Codeforces", _codeforces, records(source, split or "test"), f"codeforces:{source}")


def _codeforces(r, where, i):
    if r.get("interaction_format"):
        return "interactive"
    if r.get("input_mode") not in (None, "stdio"):
        return f"input_mode {r['input_mode']}"
    tests = _pairs(r.get("official_tests") or r.get("examples") or [], where)
    if not tests:
        return "no tests"
    if not isinstance(r.get("generated_checker") or "", str):
        raise DataError(f"{where}: generated_checker must be a string (Python code) or null")
    return Problem(f"codeforces/{r['id']}", _codeforces_prompt(r), "", (),
                   io_tests=tuple((re.sub(r"\r$", "", given, flags=re.M), want) for given, want in tests),
                   time_limit_s=r.get("time_limit") or None, memory_mb=int(r.get("memory_limit") or 0) or None,
                   checker="codeforces", checker_program=r.get("generated_checker") or None)


def _codeforces_prompt(r) -> str:
    """Title, statement, Input / Output format, the examples and the note, as on the site."""
    parts = [r.get("title") or "", r["description"], f"Input\n{r.get('input_format') or ''}",
             f"Output\n{r.get('output_format') or ''}"]
    parts += [f"Example input:\n{e.get('input', '')}\nExample output:\n{e.get('output', '')}"
              for e in r.get("examples") or [] if isinstance(e, dict)]
    parts += [f"Note\n{r['note']}"] if r.get("note") else []
    return "\n\n".join(p.strip() for p in parts if p.strip()) + "\n"


def load_genverse(source: str, split: str | None = None) -> list[Problem]:
    """A Gen-Verse (CURE) stdin/stdout set -> I/O problems: io_tests = the private tests (test_input /
    test_output: what the release's rewards and evaluation score), public_tests = the public ones
    (example_input / example_output: kept apart, never scored), time_limit_s = test_time_limit (seconds
    per test; absent or 0 -> the caller's --sandbox-timeout), judged by checkers.genverse (the release's
    token comparison). task_id genverse/<set>/<record number> (the records have no id). Split: train for
    a *_train set, else test (the only splits the hub sets have, as the release loads them). A record
    of the wrong shape is a one-line DataError naming it; a record without private tests is skipped."""
    name = Path(source).stem if Path(source).is_file() else source.rsplit("/", 1)[-1]
    rows = records(source, split or ("train" if name.endswith("_train") else "test"))
    return _load("Gen-Verse", partial(_genverse, name=name), rows, f"genverse:{source}")


def _genverse(r, where, i, name):
    question = r["question"]
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: 'question' must be a non-empty string")
    tests, public = (_io_lists(r, f"{kind}_input", f"{kind}_output", where) for kind in ("test", "example"))
    if not tests:
        return "no tests"
    limit = r.get("test_time_limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0):
        raise DataError(f"{where}: 'test_time_limit' must be a number of seconds, got {limit!r}")
    return Problem(f"genverse/{name}/{i}", question.strip() + "\n", "", (), io_tests=tests, public_tests=public,
                   time_limit_s=limit or None, checker="genverse")


def _io_lists(r, ins_key, outs_key, where) -> tuple:
    """r[ins_key], r[outs_key]: two lists of strings of one length -> ((input, output), ...); absent -> ()."""
    ins, outs = r.get(ins_key) or [], r.get(outs_key) or []
    if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs) \
            or not all(isinstance(x, str) for x in ins + outs):
        raise DataError(f"{where}: '{ins_key}' / '{outs_key}' must be two lists of strings of one length")
    return tuple(zip(ins, outs))


LOADERS = {"code_contests": load_code_contests, "apps": load_apps, "taco": partial(load_apps, name="taco"),
           "livecodebench": load_livecodebench, "codeforces": load_codeforces, "genverse": load_genverse}


# --- helpers ------------------------------------------------------------------------------------

def _datasets_major() -> int:
    """The installed `datasets` major version; 0 when it is not installed."""
    try:
        return int(importlib.metadata.version("datasets").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 0


def _load(kind, convert, rows, label) -> list[Problem]:
    """convert(record, where, index) -> a Problem, or the reason (a string) to skip it; a
    record of the wrong shape is a one-line DataError naming it; one stderr line counts both."""
    problems, skipped = [], Counter()
    for i, (where, r) in enumerate(rows):
        try:
            out = convert(r, where, i)
        except KeyError as e:
            raise DataError(f"{where}: not a {kind} record (missing {e})") from None
        except (AttributeError, TypeError, ValueError) as e:
            raise DataError(f"{where}: not a {kind} record ({type(e).__name__}: {e})") from None
        if isinstance(out, str):
            skipped[out] += 1
        else:
            problems.append(out)
    why = ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))
    print(f"{label}: {len(problems)} problems" + (f"; skipped {sum(skipped.values())} ({why})" if why else ""),
          file=sys.stderr)
    return problems


def _pairs(tests, where) -> tuple:
    """[{"input": str, "output": str, ...}, ...] -> ((input, output), ...), or DataError."""
    if not isinstance(tests, list) or not all(isinstance(t, dict) and isinstance(t.get("input"), str)
                                              and isinstance(t.get("output"), str) for t in tests):
        raise DataError(f"{where}: tests must be a list of objects with string 'input' and 'output'")
    return tuple((t["input"], t["output"]) for t in tests)


def _json(text, where, field):
    """json.loads(text), a DataError naming the field when it is not JSON; non-strings pass
    through (a parquet or hub row may hold the decoded value already)."""
    if not isinstance(text, (str, bytes)):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: {field} is not valid JSON ({e.msg})") from None


def _text(x, where) -> str:
    """An APPS stdin/stdout value: a string, or a list of lines joined with newlines."""
    if isinstance(x, list) and all(isinstance(line, str) for line in x):
        return "\n".join(x)
    if not isinstance(x, str):
        raise DataError(f"{where}: an input/output must be a string or a list of lines, got {type(x).__name__}")
    return x


def _value_test(call: str, args: list, expected) -> str:
    """A function test the sandbox judges in the parent (`assert EXPR == LITERAL`).

    >>> _value_test("Solution().twoSum", [[2, 7], 9], [0, 1])
    'assert Solution().twoSum([2, 7], 9) == [0, 1]'
    """
    return f"assert {call}({', '.join(map(repr, args))}) == {expected!r}"
