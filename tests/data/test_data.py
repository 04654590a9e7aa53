"""Our problem sets, the loaders for HumanEval / MBPP, and clear errors for bad lines."""
import json
import os

import pytest

import coder
import data
import sandbox


@pytest.fixture(scope="module")
def train():
    return data.load("train")


@pytest.fixture(scope="module")
def val():
    return data.load("val")


def test_sizes_and_records(train, val):
    assert len(train) >= 150 and len(val) >= 40
    for p in train + val:
        assert len(p.tests) >= 3 and p.solution and p.plan
        assert p.prompt.startswith(f"def {p.entry_point}(")
        assert all(f"{p.entry_point}(" in t for t in p.tests)
        assert "```" not in p.plan and "def " not in p.plan


def test_train_and_val_share_no_task(train, val):
    for field in ("task_id", "entry_point", "prompt", "solution"):
        assert not {getattr(p, field) for p in train} & {getattr(p, field) for p in val}, field


def test_every_reference_solution_passes_and_a_stub_fails(train, val):
    problems = train + val
    right = sandbox.run_many([dict(program=coder.program(p, p.solution), tests=list(p.tests)) for p in problems])
    bad = [(p.task_id, r.verdict, r.detail) for p, r in zip(problems, right) if r.verdict != "passed"]
    assert bad == []
    assert [r.passed for r in right] == [len(p.tests) for p in problems]
    wrong = sandbox.run_many([dict(program=f"def {p.entry_point}(*a, **k):\n    return None\n", tests=list(p.tests))
                              for p in problems])
    assert [p.task_id for p, r in zip(problems, wrong) if r.verdict == "passed"] == []


def test_malformed_line_names_file_and_line(tmp_path):
    good = {"task_id": "a", "prompt": "def f(): ...", "entry_point": "f", "tests": ["assert f() == 1"]}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(data.DataError, match=r"bad\.jsonl:2: not valid JSON"):
        data.load_jsonl(path)
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "task_id": "b", "tests": []}) + "\n")
    with pytest.raises(data.DataError, match=r"bad\.jsonl:2: 'tests' must be a non-empty list"):
        data.load_jsonl(path)
    path.write_text(json.dumps({k: v for k, v in good.items() if k != "entry_point"}) + "\n")
    with pytest.raises(data.DataError, match=r"bad\.jsonl:1: field 'entry_point' missing"):
        data.load_jsonl(path)
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(data.DataError, match=r"bad\.jsonl:2: duplicate task_id 'a'"):
        data.load_jsonl(path)


MBPP = [{"task_id": 7, "text": "Write a function to find the shared elements of two tuples.",
         "code": "def helper(x):\n    return set(x)\ndef similar(a, b):\n    return tuple(sorted(helper(a) & helper(b)))",
         "test_list": ["assert similar((3, 4, 5), (5, 4)) == (4, 5)", "assert set(similar((1,), (2,))) == set()",
                       "assert similar((1, 2), (2, 9)) == (2,)"],
         "test_setup_code": "", "challenge_test_list": []},
        {"task_id": 8, "text": "Write a function for the area of a circle.",
         "code": "import math\ndef area(r):\n    return math.pi * r * r",
         "test_list": ["assert math.isclose(area(1), 3.14159, rel_tol=1e-3)", "assert area(0) == 0",
                       "assert area(2) > 12"], "test_setup_code": "import math"}]


def test_mbpp_jsonl_and_sanitized_json(tmp_path):
    path = tmp_path / "mbpp.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MBPP))
    probs = data.load(f"mbpp:{path}@prompt")  # task ids 1-10: MBPP's few-shot prompt split
    assert [p.task_id for p in probs] == ["mbpp/7", "mbpp/8"]
    assert [p.entry_point for p in probs] == ["similar", "area"]  # not the helper, not math.isclose
    assert probs[0].prompt.endswith("Your code should pass this test:\nassert similar((3, 4, 5), (5, 4)) == (4, 5)\n")
    assert probs[1].setup == "import math"
    results = sandbox.run_many([dict(program=coder.program(p, p.solution), tests=list(p.tests), setup=p.setup)
                                for p in probs])
    assert [(r.verdict, r.passed) for r in results] == [("passed", 3), ("passed", 3)]
    sanitized = [{"source_file": "x", "task_id": 8, "prompt": MBPP[1]["text"], "code": MBPP[1]["code"],
                  "test_imports": ["import math"], "test_list": MBPP[1]["test_list"]}]
    path2 = tmp_path / "sanitized.json"
    path2.write_text(json.dumps(sanitized))
    (p,) = data.load(f"mbpp:{path2}@all")
    assert (p.entry_point, p.setup, len(p.tests)) == ("area", "import math", 3)


def test_mbpp_bad_record_is_named(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(MBPP[0]) + "\n" + json.dumps({"task_id": 1, "text": "x"}) + "\n")
    with pytest.raises(data.DataError, match=r"m\.jsonl:2: not an MBPP record"):
        data.load(f"mbpp:{path}@all")


def test_mbpp_file_split_by_task_id(tmp_path):
    """A file holds every split: each split keeps exactly its task-id range (test 11-510, the default;
    prompt 1-10, validation 511-600, train 601-974), in the original schema and the sanitized one
    (which keeps the original ids); the table names the split, not the path; an unknown split, or a
    split the file has no record of, is a one-line DataError."""
    ids = [1, 10, 11, 510, 511, 600, 601, 974]
    rows = [{**MBPP[1], "task_id": i} for i in ids]
    path = tmp_path / "mbpp.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sanitized = tmp_path / "sanitized-mbpp.json"
    sanitized.write_text(json.dumps([{"source_file": "x", "task_id": i, "prompt": MBPP[1]["text"], "code": MBPP[1]["code"],
                                      "test_imports": ["import math"], "test_list": MBPP[1]["test_list"]} for i in ids]))
    expect = {"": [11, 510], "@test": [11, 510], "@prompt": [1, 10], "@validation": [511, 600],
              "@train": [601, 974], "@all": ids}
    for f in (path, sanitized):
        got = {tail: [int(p.task_id.split("/")[1]) for p in data.load(f"mbpp:{f}{tail}")] for tail in expect}
        assert got == expect
    assert [p.task_id for p in data.load(f"mbpp:{path}@train#1")] == ["mbpp/601"]
    assert data.label(f"mbpp:{path}") == "mbpp@test" and data.label(f"mbpp:{path}@train#1") == "mbpp@train#1"
    with pytest.raises(data.DataError, match="MBPP has no split 'dev'"):
        data.load(f"mbpp:{path}@dev")
    path.write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(data.DataError, match=r"no MBPP record with a task id in 11-510 \(the test split\)"):
        data.load(f"mbpp:{path}")


def test_humaneval_from_package():
    probs = data.load("humaneval")
    assert len(probs) == 164 and probs[0].task_id == "HumanEval/0"
    assert probs[0].tests == ("check(has_close_elements)",) and "def check(candidate)" in probs[0].setup
    r = sandbox.run_many([dict(program=p.solution, tests=list(p.tests), setup=p.setup) for p in probs[:3]])
    assert [x.verdict for x in r] == ["passed"] * 3


IO_REC = {"task_id": "io/sum", "prompt": "Read two integers a and b, print a + b.",
          "io_tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "-5 5\n", "output": "0\n"}],
          "solution": "a, b = map(int, input().split())\nprint(a + b)\n", "plan": "1. Read.\n2. Print the sum.",
          "difficulty": "easy", "time_limit_s": 2, "memory_mb": 64}
FN_REC = {"task_id": "fn/slow", "prompt": "def f(n): ...", "entry_point": "f", "tests": ["assert f(3) == 6"],
          "solution": "def f(n):\n    return n * (n + 1)\n", "slow_solution": "def f(n):\n    return sum(2 * i for i in range(n + 1))\n",
          "time_limit_s": 0.5}


def _write(path, *recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_io_and_function_records_become_problems(tmp_path):
    """Catches: io_tests kept as dicts (the sandbox wants (input, output) pairs), the limits or
    slow_solution dropped, an I/O problem given an entry point, is_io true for function problems."""
    io, fn = data.load_jsonl(_write(tmp_path / "set.jsonl", IO_REC, FN_REC))
    assert io == data.Problem("io/sum", IO_REC["prompt"], "", (), "", IO_REC["solution"], IO_REC["plan"],
                              io_tests=(("1 2\n", "3\n"), ("-5 5\n", "0\n")), time_limit_s=2, memory_mb=64)
    assert (io.is_io, fn.is_io) == (True, False)
    assert (fn.tests, fn.io_tests, fn.time_limit_s, fn.memory_mb) == (("assert f(3) == 6",), (), 0.5, None)
    assert fn.slow_solution == FN_REC["slow_solution"]


def test_sandbox_job_takes_the_problem_limits():
    """Catches: the problem's time limit ignored (or the caller's default ignored when there is
    none), memory_mb=None passed to the sandbox (which would lift its default limit), the I/O
    problem's checker (and its own checker program) not reaching the sandbox."""
    io = data.Problem("io/1", "p", "", (), io_tests=(("1\n", "1\n"),), time_limit_s=2.5, memory_mb=128)
    assert io.sandbox_job("print(input())", 4.0) == {
        "program": "print(input())", "tests": [], "io_tests": [("1\n", "1\n")], "setup": "",
        "timeout_s": 2.5, "memory_mb": 128, "checker": "strict"}
    cf = data.Problem("cf/1", "p", "", (), io_tests=(("1\n", "1\n"),), checker="codeforces", checker_program="print(1)")
    assert (cf.sandbox_job("", 4.0)["checker"], cf.sandbox_job("", 4.0)["checker_program"]) == ("codeforces", "print(1)")
    fn = data.Problem("fn/1", "p", "f", ("assert f() == 1",), setup="import math")
    assert fn.sandbox_job("def f(): return 1", 4.0) == {
        "program": "def f(): return 1", "tests": ["assert f() == 1"], "io_tests": [], "setup": "import math",
        "timeout_s": 4.0}


@pytest.mark.parametrize("change, message", [
    ({"tests": ["assert f() == 1"], "entry_point": "f"}, r"a problem has function tests or I/O tests, not both"),
    ({"io_tests": None, "_drop": "io_tests"}, r"no tests: a problem needs 'tests'"),
    ({"io_tests": []}, r"'io_tests' must be a non-empty list"),
    ({"io_tests": "1 2 -> 3"}, r"'io_tests' must be a non-empty list"),
    ({"io_tests": [["1 2\n", "3\n"]]}, r"io_tests\[0\] must be an object with string 'input' and 'output'"),
    ({"io_tests": [{"input": "1\n", "output": "1\n"}, {"input": 1, "output": "1"}]}, r"io_tests\[1\] must"),
    ({"io_tests": [{"input": "1\n"}]}, r"io_tests\[0\] must"),
    ({"time_limit_s": 0}, r"'time_limit_s' must be a positive number, got 0"),
    ({"checker": "exact"}, r"'checker' must be one of strict, code_contests, livecodebench, apps, taco, codeforces, genverse, got 'exact'"),
    ({"checker": ["apps"]}, r"'checker' must be one of strict, .*, got \['apps'\]"),
    ({"time_limit_s": -1.5}, r"'time_limit_s' must be a positive number"),
    ({"time_limit_s": "2"}, r"'time_limit_s' must be a positive number, got '2'"),
    ({"time_limit_s": True}, r"'time_limit_s' must be a positive number, got True"),
    ({"memory_mb": 1.5}, r"'memory_mb' must be a positive integer, got 1.5"),
    ({"memory_mb": 0}, r"'memory_mb' must be a positive integer"),
    ({"solution": ["print(1)"]}, r"'solution' must be a string"),
])
def test_bad_io_record_names_file_and_line(tmp_path, change, message):
    """Catches: a record with both kinds or neither accepted, an I/O test that is not a
    {input: str, output: str} object accepted (the sandbox would crash or judge None), a zero,
    negative, string or boolean limit accepted; and each error must name FILE:LINE."""
    bad = {k: v for k, v in {**IO_REC, **change}.items() if k != change.get("_drop") and k != "_drop"}
    with pytest.raises(data.DataError, match=r"set\.jsonl:2: " + message):
        data.load_jsonl(_write(tmp_path / "set.jsonl", FN_REC, bad))


def test_function_record_with_slow_solution_type_checked(tmp_path):
    """Catches: slow_solution accepted as a non-string (it is run as a program)."""
    with pytest.raises(data.DataError, match=r"set\.jsonl:1: 'slow_solution' must be a string"):
        data.load_jsonl(_write(tmp_path / "set.jsonl", {**FN_REC, "slow_solution": 3}))


def test_comma_list_concatenates_and_refuses_shared_task_ids(tmp_path, train, val):
    """Catches: only the first set of a comma list loaded, sets reordered, or a task present in
    two sets silently trained on twice."""
    a = _write(tmp_path / "a.jsonl", FN_REC)
    b = _write(tmp_path / "b.jsonl", IO_REC)
    assert [p.task_id for p in data.load(f"{a},{b}")] == ["fn/slow", "io/sum"]
    both = data.load("train,val")
    assert [p.task_id for p in both] == [p.task_id for p in train] + [p.task_id for p in val]
    c = _write(tmp_path / "c.jsonl", {**IO_REC, "task_id": "fn/slow"})
    with pytest.raises(data.DataError, match=r"task_id 'fn/slow' is in both '.*a\.jsonl' and '.*c\.jsonl'"):
        data.load(f"{a},{b},{c}")


def test_io_set_names_read_our_data_dir(tmp_path, monkeypatch):
    """Catches: io_train / io_val not recognised as our set names (they would be read as a
    relative file path), or read from somewhere other than data/<name>.jsonl."""
    monkeypatch.setattr(data, "DATA_DIR", tmp_path)
    with pytest.raises(data.DataError, match=r"io_train\.jsonl: no such file"):
        data.load("io_train")
    _write(tmp_path / "io_val.jsonl", IO_REC)
    assert [p.task_id for p in data.load("io_val")] == ["io/sum"]
    assert [p.task_id for p in data.load("io_val@test")] == ["io/sum"]  # eval's --split on a set without splits


def test_first_n_problems_of_a_set():
    """NAME#N keeps the first N problems, in train.py as in eval.py. Catches: '#2' read as a file name
    (the one-line "no such file"), the last N instead of the first, N applied to a whole comma list."""
    val, train = data.load("val"), data.load("train")
    assert data.load("val#2") == val[:2]
    assert data.load("train#3,val#2") == train[:3] + val[:2]


def test_a_folder_is_not_a_problem_file_and_is_not_hidden(tmp_path):
    """Catches: a folder given as a problem file failing deep inside (IsADirectoryError) after being
    added to problem.SOURCES, so that every later sandbox run hid it (a folder holding the interpreter
    made every program fail to import). It is one DataError and never a source."""
    from data import problem
    with pytest.raises(data.DataError, match=r": not a file$"):
        data.load(str(tmp_path))
    assert str(tmp_path) not in problem.SOURCES and os.path.realpath(tmp_path) not in problem.SOURCES
    _write(tmp_path / "a.jsonl", IO_REC)
    data.load(str(tmp_path / "a.jsonl"))
    assert os.path.realpath(tmp_path / "a.jsonl") in problem.SOURCES
