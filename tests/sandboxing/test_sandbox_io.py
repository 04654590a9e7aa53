"""I/O tests (stdin -> stdout, judged in the parent), the output checker, per-test timing, and the
reference solutions of MBPP- and HumanEval-format problems written here in their own forms.
Hostile I/O programs are in test_sandbox_adversarial.py."""
import json

import pytest

import sandbox
from sandboxing import checkers

SUM = "print(sum(map(int, input().split())))\n"


def io(program, tests, **kwargs):
    kwargs.setdefault("timeout_s", 1.0)
    return sandbox.run_program(program, io_tests=tests, **kwargs)


# -- the strict checker (checkers.strict): tokens, 1e-6 absolute-or-relative

@pytest.mark.parametrize("output, expected, match", [
    (b"3\n", b"3", True),  # a missing final newline does not matter
    (b"1  2 \n\n\n", b"1 2\n", True),  # nor trailing spaces and blank lines
    (b"1\n2\n", b"1 2\n", True),  # line structure is dropped (CodeContests)
    (b"0.30000000000000004\n", b"0.3\n", True),
    (b"1e-7", b"0.0", True),  # absolute error 1e-7 <= 1e-6
    (b"0.00001", b"0.0", False),  # absolute 1e-5 > 1e-6 (CodeContests rejects it too: < 1e-5 is strict)
    (b"1000000.5", b"1000000.0", True),  # relative 5e-7
    (b"1e-7", b"0", False), (b"1000000.5", b"1000000", False),  # an integer expected: exact
    (b"1e17", b"100000000000000001", False), (b"123456850.0", b"123456789", False),
    (b"1e2", b"100", False), (b"100", b"1e2", True), (b"-007", b"-7", True), (b"-0", b"+000", True),
    (b"3", b"3.0", True),  # the tolerance when the expected token has a '.' or an exponent
    (b"1000002", b"1000001", False),  # integers are exact
    (b"100000000000000001", b"100000000000000000", False),  # no float rounding for integers
    (b"3.0", b"3", False),  # an integer expected wants an integer (it was True)
    (b"YES", b"yes", False),  # case matters
    (b"nan", b"nan", True), (b"nan", b"inf", False),  # words
    (b"1 2", b"1 2 3", False), (b"", b"0", False), (b"", b"", True),
    (b"-0", b"0", True), (b"+5", b"5", True), (b"1,5", b"1.5", False),
])
def test_outputs_match(output, expected, match):
    """Catches: line-by-line or exact string comparison, a relative-only or absolute-only
    tolerance, integers compared through floats, case-insensitive words."""
    assert checkers.strict(output, expected) is match


def test_integers_past_int_max_str_digits():
    """docs/sandbox.md#h7-integers-with-a-float-tolerance, second half.
    Catches: int() on a 5000-digit token (ValueError past 4300 digits) dropping
    the report. The run gets its verdict: passed for the same number, failed for one more."""
    number = "9" * 5000
    assert checkers.strict(number.encode(), b"+0" + number.encode()) is True
    assert checkers.strict(number.encode(), number[:-1].encode() + b"8") is False
    r = sandbox.run_program(f"print('{number}')", io_tests=[("", number), ("", number[:-1] + "8")])
    assert r.tests == ("passed", "failed"), r.detail


# -- ordinary I/O programs --------------------------------------------------------------------------

def test_io_partial_credit_and_detail():
    """Catches: a verdict from the exit status alone; tests in the wrong order."""
    r = io(SUM, [("1 2\n", "3\n"), ("5 5", "11"), ("-1 1", "0")])
    assert (r.verdict, r.tests, r.passed, r.total) == ("failed", ("passed", "failed", "passed"), 2, 3)
    assert r.detail == "I/O test 2: wrong output: got '10\\n'"


def test_io_each_test_gets_its_own_input_and_a_fresh_process():
    """Catches: state carried from one test to the next (a fork reused, stdin not rewound)."""
    program = "import sys\nSEEN = globals().setdefault('SEEN', [])\nSEEN.append(1)\nprint(len(SEEN), sys.stdin.read().strip())\n"
    r = io(program, [("a", "1 a"), ("b", "1 b"), ("c", "1 c")])
    assert r.tests == ("passed",) * 3, r.detail


def test_io_main_block_runs():
    """Catches: I/O programs run as a module named other than __main__ (their main() never runs)."""
    program = "def main():\n    print(int(input()) * 2)\n\nif __name__ == '__main__':\n    main()\n"
    assert io(program, [("21", "42")]).verdict == "passed"


def test_io_error_and_its_last_stderr_line():
    """Catches: output judged although the program crashed after printing it."""
    r = io("print(3)\nraise ValueError('after the answer')\n", [("", "3")])
    assert (r.verdict, r.tests) == ("error", ("error",))
    assert r.detail == "I/O test 1: ValueError: after the answer"


def test_io_exit_status():
    """Catches: a non-zero exit read as success; exit(0) and falling off the end told apart."""
    r = io("import sys\nprint(3)\nsys.exit(int(input()))\n", [("0", "0"), ("0", "3"), ("2", "3")])
    assert r.tests == ("failed", "passed", "error")
    r = io("import sys\nprint(4)\nsys.exit('bad input')\n", [("", "4")])
    assert (r.verdict, r.detail) == ("error", "I/O test 1: bad input")


def test_io_timeout_is_per_test():
    """Catches: one slow test costing the whole run."""
    program = "n = int(input())\nwhile n == 2:\n    pass\nprint(n)\n"
    r = io(program, [("1", "1"), ("2", "2"), ("3", "3")], timeout_s=0.3)
    assert r.tests == ("passed", "timeout", "passed") and r.verdict == "timeout"


def test_io_memory_limit_is_per_problem():
    """Catches: memory_mb ignored for I/O tests."""
    program = "x = bytearray(int(input()) << 20)\nprint('ok')\n"
    r = io(program, [("10", "ok"), ("300", "ok")], memory_mb=128)
    assert r.tests == ("passed", "memory"), r.detail


def test_io_syntax_error_fails_every_test():
    r = io("print(1\n", [("", "1"), ("", "1")])
    assert (r.verdict, r.tests) == ("error", ("error", "error")) and "SyntaxError" in r.detail


def test_io_no_code_and_mixed_kinds():
    assert io("", [("", "1")]).tests == ("no_code",)
    with pytest.raises(ValueError, match="not both"):
        sandbox.run_program(SUM, ["assert f(1) == 1"], io_tests=[("1 2", "3")])
    with pytest.raises(ValueError, match=r"^io_tests\[1\]: expected \(input, output\) strings"):
        sandbox.run_program(SUM, io_tests=[("1 2", "3"), {"input": "1 2", "output": "3"}])  # a record's dict


def test_run_many_takes_io_jobs():
    jobs = [dict(program=SUM, io_tests=[(f"{i} 1", str(i + 1))], timeout_s=1.0) for i in range(4)]
    assert [r.verdict for r in sandbox.run_many(jobs, workers=2)] == ["passed"] * 4


# -- per-test timing: the test's own execution, not the interpreter's start ---------------------

def test_timing_of_an_empty_test_is_near_zero_and_a_loop_reads_more():
    """Catches: per-test CPU that includes the interpreter's start (~20 ms) or the program's top
    level; memory that includes the interpreter's own (~9 MiB); tuples out of order."""
    program = ("import time\ntime.sleep(0.05)\nfor _ in range(10 ** 6):\n    pass\n"
               "def f(n):\n    for _ in range(n):\n        pass\n    return n\n"
               "def g():\n    return len(bytearray(50 << 20))\n")
    # value tests (judged here), then the same through the judge process (statement tests)
    for tests in (["assert f(0) == 0", "assert f(1000000) == 1000000", "assert g() == 52428800"],
                  ["assert f(0) in (0,)", "assert f(10 ** 6) in (10 ** 6,)", "assert g() in (50 << 20,)"]):
        r = sandbox.run_program(program, tests, timeout_s=2.0)
        assert r.tests == ("passed",) * 3, r.detail
        assert len(r.test_cpu_s) == len(r.test_wall_s) == len(r.test_mem_mb) == 3
        assert r.test_cpu_s[0] < 0.001 and r.test_wall_s[0] < 0.05 and r.test_mem_mb[0] < 0.5
        assert r.test_cpu_s[1] > 10 * r.test_cpu_s[0] and r.test_cpu_s[1] > 0.005
        assert r.test_mem_mb[1] < 1 and 45 < r.test_mem_mb[2] < 60  # a 50 MiB bytearray, after the loop's test


def test_io_timing_excludes_the_fork_and_counts_the_programs_work():
    """Catches: I/O timing that counts the runner or the whole run; memory of the forked runner."""
    r = io("pass\n", [("", "")])
    assert r.verdict == "passed" and r.test_cpu_s[0] < 0.001 and r.test_mem_mb[0] < 1
    r = io("for _ in range(10 ** 6):\n    pass\nx = bytearray(40 << 20)\n", [("", "")])
    assert r.test_cpu_s[0] > 0.005 and 38 < r.test_mem_mb[0] < 50


def test_timing_is_none_for_tests_that_never_ran():
    r = sandbox.run_program("import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return x\n",
                            ["assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3"], timeout_s=1.0)
    assert r.tests == ("passed", "error", "error") and r.test_cpu_s[1:] == (None, None)
    assert r.to_dict()["test_mem_mb"][1:] == (None, None)


# -- no false verdicts: reference solutions in MBPP's and HumanEval's own forms -------------------

MBPP = [  # {text, code, task_id, test_setup_code, test_list, challenge_test_list} (mbpp.jsonl)
    {"task_id": 1, "text": "Match a word containing z.", "test_setup_code": "",
     "code": "import re\ndef text_match_wordz(text):\n    return re.search(r'\\w*z.\\w*', text)\n",
     "test_list": ["assert text_match_wordz('pythonz.')", "assert not text_match_wordz('python')"],
     "challenge_test_list": []},
    {"task_id": 2, "text": "Area of a circle.", "test_setup_code": "import math",
     "code": "import math\ndef area(r):\n    return math.pi * r * r\n",
     "test_list": ["assert math.isclose(area(1), 3.141592653589793)", "assert area(2) == 12.566370614359172",
                   "assert math.isclose(area(0.5), 0.785398, rel_tol=1e-5)"], "challenge_test_list": []},
    {"task_id": 3, "text": "Sort in place and return nothing.", "test_setup_code": "",
     "code": "def sort_in_place(xs):\n    xs.sort()\n",
     "test_list": ["xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3]"], "challenge_test_list": []},
    {"task_id": 4, "text": "A set of pairs.", "test_setup_code": "",
     "code": "def pairs(n):\n    return {(i, i + 1) for i in range(n)}\n",
     "test_list": ["assert pairs(2) == {(0, 1), (1, 2)}", "assert set(pairs(1)) == set([(0, 1)])",
                   "assert pairs(0) == set()"], "challenge_test_list": []},
]
HUMANEVAL = {  # {task_id, prompt, canonical_solution, test, entry_point} (HumanEval.jsonl)
    "task_id": "HumanEval/x", "entry_point": "closest",
    "prompt": "from typing import List\n\ndef closest(numbers: List[float]) -> float:\n    \"\"\"The smallest gap.\"\"\"\n",
    "canonical_solution": "    s = sorted(numbers)\n    return min(b - a for a, b in zip(s, s[1:]))\n",
    "test": "import math\n\nMETADATA = {}\n\ndef check(candidate):\n    assert math.isclose(candidate([1.0, 2.5, 2.0]), 0.5)\n"
            "    assert candidate([1, 5, 9]) == 4\n    for n in range(2, 5):\n        assert candidate(list(range(n))) == 1\n",
}


def test_reference_solutions_in_their_native_forms_pass(tmp_path):
    """Catches: false verdicts on right programs -- `assert f(x)` on a re.Match (MBPP 737, 787,
    794 came back "returned a Match, not plain data"), math.isclose, in-place mutation, sets,
    HumanEval's check(candidate) with a loop. Files written here in each dataset's schema."""
    mbpp = tmp_path / "mbpp.jsonl"
    mbpp.write_text("".join(json.dumps(r) + "\n" for r in MBPP))
    humaneval = tmp_path / "humaneval.jsonl"
    humaneval.write_text(json.dumps(HUMANEVAL) + "\n")
    jobs = [dict(program=r["code"], tests=r["test_list"], setup=r["test_setup_code"], timeout_s=2.0)
            for r in map(json.loads, mbpp.read_text().splitlines())]
    jobs += [dict(program=p["prompt"] + p["canonical_solution"], tests=[f"check({p['entry_point']})"], setup=p["test"],
                  timeout_s=2.0) for p in map(json.loads, humaneval.read_text().splitlines())]
    results = sandbox.run_many(jobs, workers=2)
    assert [(r.verdict, r.detail) for r in results] == [("passed", "")] * 5
    wrong = sandbox.run_program(MBPP[0]["code"].replace("z.", "q."), MBPP[0]["test_list"], timeout_s=2.0)
    assert wrong.tests == ("failed", "passed")  # the match is judged by its truth, both ways


def test_judge_rebuilds_what_the_program_returns():
    """Catches: a judge that gets the program's objects (an always-equal class passes), or loses
    C data (a numpy array, an iterator, a raised exception)."""
    program = ("import numpy as np\nclass A:\n    def __eq__(self, o):\n        return True\n"
               "def arr():\n    return np.arange(3)\ndef gen():\n    return (i * i for i in range(3))\n"
               "def bad():\n    raise KeyError('k')\ndef eq():\n    return A()\n")
    tests = ["assert list(arr()) == [0, 1, 2]", "assert list(gen()) == [0, 1, 4]",
             "try:\n    bad()\nexcept KeyError:\n    pass\nelse:\n    assert False", "assert eq() == 5"]
    r = sandbox.run_program(program, tests, timeout_s=2.0)
    assert r.tests == ("passed", "passed", "passed", "error"), r.detail
