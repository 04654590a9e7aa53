"""The benchmark loaders (data/benchmarks.py), each on tiny invented problems written here in the
source's native schema: never downloaded, never copied from a benchmark."""
import base64
import importlib.machinery
import json
import os
import pickle
import sys
import types
import zlib

import pytest

import data
import sandbox
from data import benchmarks, problem


def _jsonl(path, *recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _tests(pairs):
    return {"input": [i for i, _ in pairs], "output": [o for _, o in pairs]}


CC = {"name": "9_A. Double it", "description": "Read n and print 2n.\n\nInput\nOne integer n.\n\nOutput\n2n.",
      "public_tests": _tests([("1\n", "2\n")]), "private_tests": _tests([("5\n", "10\n")]),
      "generated_tests": _tests([("-3\n", "-6\n"), ("0\n", "0\n")]), "source": 2, "difficulty": 7,
      "solutions": {"language": [2, 1, 3, 3],
                    "solution": ["int main(){}", "print 2*input()", "print(2 * int(input()))", "print(int(input())*2)"]},
      "incorrect_solutions": {"language": [3], "solution": ["print(1)"]},
      "time_limit": {"seconds": 2, "nanos": 500000000}, "memory_limit_bytes": 256 << 20}


def test_code_contests_jsonl(tmp_path, capsys):
    """Catches: private/generated tests dropped (AlphaCode judges on all three), a Python 2 or
    C++ solution taken as the reference (PYTHON = 1 is Python 2, PYTHON3 = 3), nanos ignored or
    taken as ms, memory bytes not turned into MiB, a problem without tests or one that must
    read a file (input_file) kept, no count."""
    bare = {**CC, "name": "9_B. No limits", "solutions": {"language": [2], "solution": ["int main(){}"]},
            "time_limit": None, "memory_limit_bytes": 0}
    empty = {**CC, "name": "9_C. Untested", "public_tests": _tests([]), "private_tests": _tests([]),
             "generated_tests": _tests([])}
    files = {**CC, "name": "9_D. From a file", "input_file": "input.txt", "output_file": "output.txt"}
    path = _jsonl(tmp_path / "cc.jsonl", CC, bare, empty, files)
    a, b = data.load(f"code_contests:{path}")
    assert a == data.Problem("code_contests/9_A. Double it", CC["description"], "", (),
                             solution="print(2 * int(input()))",
                             io_tests=(("1\n", "2\n"), ("5\n", "10\n"), ("-3\n", "-6\n"), ("0\n", "0\n")),
                             time_limit_s=2.5, memory_mb=256, checker="code_contests")
    assert (b.solution, b.time_limit_s, b.memory_mb, b.is_io, b.checker) == (None, None, None, True, "code_contests")
    assert capsys.readouterr().err == f"code_contests:{path}: 2 problems; skipped 2 (1 file I/O, 1 no tests)\n"


def test_code_contests_json_list_and_bad_record(tmp_path):
    """Catches: .json files (a list of records) unsupported, a record error without its
    position, input/output lists of different lengths silently truncated by zip."""
    path = tmp_path / "cc.json"
    path.write_text(json.dumps([CC]))
    assert [p.task_id for p in data.load(f"code_contests:{path}")] == ["code_contests/9_A. Double it"]
    path.write_text(json.dumps([CC, {k: v for k, v in CC.items() if k != "description"}]))
    with pytest.raises(data.DataError, match=r"cc\.json: record 1: not a CodeContests record \(missing 'description'\)"):
        data.load(f"code_contests:{path}")
    jl = _jsonl(tmp_path / "cc.jsonl", CC, {**CC, "private_tests": {"input": ["1\n", "2\n"], "output": ["2\n"]}})
    with pytest.raises(data.DataError, match=r"cc\.jsonl:2: 'private_tests' must be \{input: \[str\], output"):
        data.load(f"code_contests:{jl}")


APPS_IO = {"problem_id": 17, "question": "Print the sum of the numbers on the line.",
           "solutions": json.dumps(["print(sum(map(int, input().split())))", "print(0)"]),
           "input_output": json.dumps({"inputs": ["1 2 3\n", ["4 5"]], "outputs": ["6\n", ["9"]]}),
           "difficulty": "introductory", "url": "https://example.invalid/17", "starter_code": ""}
APPS_CALL = {"problem_id": 18, "question": "Return the largest element of xs.",
             "solutions": json.dumps(["def largest(xs):\n    return max(xs)\n"]),
             "input_output": json.dumps({"fn_name": "largest", "inputs": [[[1, 5, 2]], [[-1, -7]], [[[3], [1]]]],
                                         "outputs": [[5], [-1], [[3]]]}),
             "difficulty": "introductory", "url": "", "starter_code": "def largest(xs):\n\t"}
APPS_CLASS = {"problem_id": 19, "question": "Return x + y.",
              "solutions": json.dumps(["class Solution:\n    def add(self, x, y):\n        return x + y\n"]),
              "input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2], ["a", "b"]], "outputs": [3, "ab"]}),
              "difficulty": "interview", "url": "", "starter_code": "class Solution:\n    def add(self, x, y):"}


def test_apps_stdin_call_based_and_solution_class(tmp_path, capsys):
    """Catches: a list-of-lines input/output not joined with newlines, call-based problems read
    as stdin ones, outputs left wrapped (`largest([1, 5, 2]) == [5]` fails a right answer) or a
    list result unwrapped one level too far, a Solution class method called as a plain function,
    a problem without tests kept; and the reference solutions must pass the tests we wrote."""
    empty = {**APPS_IO, "problem_id": 20, "input_output": ""}
    path = _jsonl(tmp_path / "apps.jsonl", APPS_IO, APPS_CALL, APPS_CLASS, empty)
    io_p, call_p, cls_p = data.load(f"apps:{path}")
    assert io_p == data.Problem("apps/17", APPS_IO["question"] + "\n", "", (),
                                solution="print(sum(map(int, input().split())))",
                                io_tests=(("1 2 3\n", "6\n"), ("4 5", "9")), checker="apps")
    assert call_p.tests == ("assert largest([1, 5, 2]) == 5", "assert largest([-1, -7]) == -1",
                            "assert largest([[3], [1]]) == [3]")
    assert (call_p.entry_point, call_p.io_tests) == ("largest", ())
    assert call_p.prompt == "Return the largest element of xs.\n\ndef largest(xs):\n"
    assert cls_p.tests == ("assert Solution().add(1, 2) == 3", "assert Solution().add('a', 'b') == 'ab'")
    assert capsys.readouterr().err == f"apps:{path}: 3 problems; skipped 1 (1 no tests)\n"
    right = sandbox.run_many([dict(program=p.solution, tests=list(p.tests)) for p in (call_p, cls_p)])
    assert [(r.verdict, r.passed) for r in right] == [("passed", 3), ("passed", 2)]
    wrong = sandbox.run_many([dict(program="def largest(xs):\n    return xs[0]\n", tests=list(call_p.tests))])
    assert (wrong[0].verdict, wrong[0].tests) == ("failed", ("failed", "passed", "passed"))  # 1, -1, [3]


def test_taco_uses_the_apps_reader_with_record_numbers(tmp_path):
    """Catches: TACO not wired to the same input_output reader, or ids taken from a field TACO
    does not have (it has no problem_id: we number its records)."""
    taco = {k: v for k, v in APPS_CALL.items() if k != "problem_id"}
    taco.update({"name": "", "source": "codewars", "tags": "[]", "skill_types": "[]", "time_limit": None})
    path = _jsonl(tmp_path / "taco.jsonl", {k: v for k, v in APPS_IO.items() if k != "problem_id"}, taco)
    a, b = data.load(f"taco:{path}")
    assert (a.task_id, a.is_io, a.checker, b.task_id, b.entry_point) == ("taco/0", True, "taco", "taco/1", "largest")


def test_record_of_the_wrong_shape_is_one_line(tmp_path):
    """Catches: a record that is not an object, or a field of the wrong type, escaping as an
    AttributeError traceback instead of a DataError naming FILE:LINE."""
    for bad, message in (([1, 2], r"cc\.jsonl:2: not a CodeContests record \(AttributeError: "),
                         ({**CC, "public_tests": "1 -> 2"}, r"cc\.jsonl:2: not a CodeContests record \(AttributeError: ")):
        path = _jsonl(tmp_path / "cc.jsonl", CC, bad)
        with pytest.raises(data.DataError, match=message) as e:
            data.load(f"code_contests:{path}")
        assert "\n" not in str(e.value)
    path = _jsonl(tmp_path / "lcb.jsonl", {**LCB_STDIN, "public_test_cases": json.dumps([{"input": 1}])})
    with pytest.raises(data.DataError, match=r"lcb\.jsonl:1: tests must be a list of objects with string 'input'"):
        data.load(f"livecodebench:{path}")


def test_apps_bad_input_output_names_the_line(tmp_path):
    """Catches: a broken input_output JSON string raising a bare JSONDecodeError traceback."""
    path = _jsonl(tmp_path / "apps.jsonl", APPS_IO, {**APPS_IO, "input_output": "{inputs: [}"})
    with pytest.raises(data.DataError, match=r"apps\.jsonl:2: input_output is not valid JSON"):
        data.load(f"apps:{path}")


def _lcb_pack(value) -> str:
    """LiveCodeBench's private_test_cases encoding: base64(zlib(pickle(value)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(value))).decode()


LCB_STDIN = {"question_title": "Echo twice", "question_content": "Read a word s and print s twice.",
             "platform": "atcoder", "question_id": "abc999_a", "contest_id": "abc999",
             "contest_date": "2026-01-01T00:00:00", "starter_code": "", "difficulty": "easy",
             "public_test_cases": json.dumps([{"input": "ab\n", "output": "abab\n", "testtype": "stdin"}]),
             "private_test_cases": _lcb_pack(json.dumps([{"input": "x\n", "output": "xx\n", "testtype": "stdin"},
                                                         {"input": "q\n", "output": "qq\n", "testtype": "stdin"}])),
             "metadata": "{}"}
LCB_FN = {**LCB_STDIN, "question_id": "9001", "platform": "leetcode", "question_content": "Return the sum of nums and k.",
          "starter_code": "class Solution:\n    def addAll(self, nums: List[int], k: int) -> int:\n        ",
          "public_test_cases": json.dumps([{"input": "[1, 2]\n3", "output": "6", "testtype": "functional"}]),
          "private_test_cases": json.dumps([{"input": "[]\n0\n", "output": "0", "testtype": "functional"}]),
          "metadata": json.dumps({"func_name": "addAll"})}


def test_livecodebench_stdin_and_functional(tmp_path):
    """Catches: compressed private tests not decoded (or only plain-JSON ones read), public
    tests dropped, a functional input not read as one JSON value per line, the method not
    called on a Solution(); the right LeetCode-style solution must pass the written tests."""
    path = _jsonl(tmp_path / "lcb.jsonl", LCB_STDIN, LCB_FN)
    io_p, fn_p = data.load(f"livecodebench:{path}")
    assert io_p == data.Problem("livecodebench/abc999_a", "Read a word s and print s twice.\n", "", (),
                                io_tests=(("ab\n", "abab\n"), ("x\n", "xx\n"), ("q\n", "qq\n")),
                                checker="livecodebench")
    assert fn_p.tests == ("assert Solution().addAll([1, 2], 3) == 6", "assert Solution().addAll([], 0) == 0")
    assert fn_p.entry_point == "addAll" and fn_p.prompt.endswith("def addAll(self, nums: List[int], k: int) -> int:\n")
    solution = "from typing import List\nclass Solution:\n    def addAll(self, nums, k):\n        return sum(nums) + k\n"
    (r,) = sandbox.run_many([dict(program=solution, tests=list(fn_p.tests))])
    assert (r.verdict, r.passed) == ("passed", 2)


class _Payload:
    """A pickle whose loading would call os.mkdir(marker): the classic __reduce__ attack."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_hostile_pickle_is_refused_without_running(tmp_path):
    """Catches: private_test_cases read with pickle.loads (the payload would create the
    directory), or a refusal that leaks a traceback instead of one DataError line; and each of
    the two locks alone must hold: the opcode check, and the unpickler that refuses globals."""
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_Payload(marker))
    path = _jsonl(tmp_path / "lcb.jsonl", {**LCB_STDIN, "private_test_cases": base64.b64encode(zlib.compress(evil)).decode()})
    with pytest.raises(data.DataError, match=r"lcb\.jsonl:1: not a pickled string: opcodes \[.*STACK_GLOBAL.*\] refused") as e:
        data.load(f"livecodebench:{path}")
    assert "\n" not in str(e.value) and not marker.exists()
    with pytest.raises(pickle.UnpicklingError, match="global posix.mkdir refused|global os.mkdir refused"):
        benchmarks._NoGlobals(__import__("io").BytesIO(evil)).load()  # second lock, opcode check bypassed
    assert not marker.exists()
    with pytest.raises(data.DataError, match=r"not a pickled string: opcodes .* refused"):
        benchmarks.unpickle_string(pickle.dumps([1, 2]))  # plain data, but not a string
    assert benchmarks.unpickle_string(pickle.dumps("ok", protocol=0)) == "ok"


CF = {"id": "2000A", "contest_id": "2000", "index": "A", "title": "Halve", "time_limit": 2.0, "memory_limit": 256.0,
      "description": "Print n // 2.", "input_format": "One integer n (1 <= n <= 100).", "output_format": "One integer.",
      "interaction_format": None, "note": "Round down.", "examples": [{"input": "5\n", "output": "2\n"}],
      "official_tests": [{"input": "5\n", "output": "2\n"}, {"input": "100\n", "output": "50\n"}],
      "official_tests_complete": True, "input_mode": "stdio", "generated_checker": None, "executable": True}


# A checker as open-r1/codeforces' generated_checker is called (sandboxing/special_checker.py):
# python3 checker.py INPUT CORRECT_OUTPUT SOLUTION_OUTPUT, printing 1 for a right answer (any two positive
# integers with sum n).
from test_checkers import RIGHT_CHECKER as SPLIT_CHECKER  # noqa: E402

CF_CHECKER = {**CF, "id": "2000G", "title": "Split", "description": "Print two positive integers with sum n.",
              "examples": [{"input": "5\r\n", "output": "2 3\n"}], "official_tests": [
                  {"input": "5\r\n", "output": "2 3\n"}, {"input": "2\r\n", "output": "1 1\n"}],
              "generated_checker": SPLIT_CHECKER}


def test_codeforces_skips_what_cannot_run_on_stdin(tmp_path, capsys):
    """Catches: interactive or file-input problems kept (a right program would score 0), problems
    with a checker of their own skipped or kept without it (their right answers are many), no
    count printed, examples not used when the official tests are missing, the input/output format
    left out of the prompt, the limits dropped, the \r of an input line kept (open-r1 removes it)."""
    recs = [CF, CF_CHECKER, {**CF, "id": "2000C", "interaction_format": "Ask queries ? x."},
            {**CF, "id": "2000D", "input_mode": "file"}, {**CF, "id": "2000E", "official_tests": []},
            {**CF, "id": "2000F", "generated_checker": "print(1)"}]
    path = _jsonl(tmp_path / "cf.jsonl", *recs)
    a, g, e, f = data.load(f"codeforces:{path}")
    assert a == data.Problem("codeforces/2000A", "Halve\n\nPrint n // 2.\n\nInput\nOne integer n (1 <= n <= 100).\n\n"
                             "Output\nOne integer.\n\nExample input:\n5\n\nExample output:\n2\n\nNote\nRound down.\n",
                             "", (), io_tests=(("5\n", "2\n"), ("100\n", "50\n")), time_limit_s=2.0, memory_mb=256,
                             checker="codeforces")
    assert (g.io_tests, g.checker, g.checker_program) == ((("5\n", "2 3\n"), ("2\n", "1 1\n")), "codeforces", SPLIT_CHECKER)
    assert (e.task_id, e.io_tests, e.checker_program) == ("codeforces/2000E", (("5\n", "2\n"),), None)
    assert (f.task_id, f.checker_program) == ("codeforces/2000F", "print(1)")
    assert capsys.readouterr().err == f"codeforces:{path}: 4 problems; skipped 2 (1 input_mode file, 1 interactive)\n"
    bad = _jsonl(tmp_path / "bad.jsonl", {**CF, "generated_checker": ["not", "code"]})
    with pytest.raises(data.DataError, match=r"bad\.jsonl:1: generated_checker must be a string"):
        data.load(f"codeforces:{bad}")


def test_hub_ids_go_to_datasets_with_split(monkeypatch):
    """Catches: the @split (or LiveCodeBench's @version_tag) not passed to load_dataset, hub rows
    not read like file records; and without `datasets` a one-line DataError, not an ImportError."""
    calls = []

    def load_dataset(path, split=None, **kw):  # datasets.load_dataset(path, name=None, ..., split=None, ...)
        calls.append((path, split, kw))
        return {"open-r1/codeforces": [CF], "codeparrot/apps": [APPS_IO], "BAAI/TACO": [APPS_IO]}.get(path, [LCB_STDIN])

    fake = types.ModuleType("datasets")
    fake.__spec__ = importlib.machinery.ModuleSpec("datasets", None)
    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)
    monkeypatch.setattr(benchmarks, "_datasets_major", lambda: 3)
    (p,) = data.load("codeforces:open-r1/codeforces@train")
    (q,) = data.load("livecodebench:livecodebench/code_generation_lite@release_v2")
    data.load("apps:codeparrot/apps")
    monkeypatch.setattr(benchmarks, "_datasets_major", lambda: 4)  # no loading scripts: the tag is a config
    data.load("livecodebench:livecodebench/code_generation_lite@release_v2")
    data.load("taco:BAAI/TACO@train")
    assert (p.task_id, q.task_id) == ("codeforces/2000A", "livecodebench/abc999_a")
    assert calls == [("open-r1/codeforces", "train", {}),
                     ("livecodebench/code_generation_lite", "test", {"trust_remote_code": True, "version_tag": "release_v2"}),
                     ("codeparrot/apps", "test", {"trust_remote_code": True}),
                     ("livecodebench/code_generation_lite", "test", {"name": "release_v2"}),
                     ("BAAI/TACO", "train", {})]
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails: as if not installed
    monkeypatch.setattr(data.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(data.DataError, match=r"^deepmind/code_contests: not a file, and loading a hub dataset needs"):
        data.load("code_contests:deepmind/code_contests@valid")


def test_docstring_examples_hold():
    """Catches: a `>>>` example in data/problem.py, data/__init__.py or data/benchmarks.py that drifted from the code."""
    import doctest

    assert [doctest.testmod(m).failed for m in (problem, data, benchmarks)] == [0, 0, 0]


def test_io_references_pass_through_the_sandbox(tmp_path):
    """Catches: io_tests or the limits not reaching the sandbox through Problem.sandbox_job,
    the Python 2 entry (PYTHON = 1) taken as the reference, an APPS list-of-lines test joined
    wrongly; the right program must pass every I/O test and the Python 2 one must not."""
    (cc,) = data.load(f"code_contests:{_jsonl(tmp_path / 'cc.jsonl', CC)}")
    (apps,) = data.load(f"apps:{_jsonl(tmp_path / 'apps.jsonl', APPS_IO)}")
    right, py2, sums = sandbox.run_many([cc.sandbox_job(cc.solution, 4.0), cc.sandbox_job("print 2*input()", 4.0),
                                         apps.sandbox_job(apps.solution, 4.0)])
    assert [(r.verdict, r.passed, r.total) for r in (right, sums)] == [("passed", 4, 4), ("passed", 2, 2)]
    assert py2.passed == 0
