"""The output checkers (sandboxing/checkers.py): for each benchmark's rule a table of (output, expected,
verdict) derived from that benchmark's own evaluation code, each case naming the line or branch
it follows; the problem's own checker programs (sandboxing/special_checker.py) run in the sandbox; and the
rule of each set reaching the sandbox, eval.py and the report."""
import json

import pytest

import data
import eval as evaluation
import sandbox
import train
from measure import report
from sandboxing import checkers, special_checker

CC = "tester_sandboxer.cc"
LCB = "testing_util.py grade_stdio"


# -- CodeContests: google-deepmind/code_contests execution/tester_sandboxer.cc ------------------

@pytest.mark.parametrize("output, expected, verdict, source", [
    (b"Yes", b"YES", True, f"{CC} SplitAndLowercase: absl::AsciiStrToLower on both sides"),
    (b"5.0", b"5", True, f"{CC} ValuesMatch: a double on either side, |5.0 - 5| < kDoublePrecision"),
    (b"1.000009", b"1", True, f"{CC} ValuesMatch: |a - b| = 9e-6 < 1e-5, absolute"),
    (b"1.00002", b"1", False, f"{CC} ValuesMatch: 2e-5 is not < 1e-5"),
    (b"1000000.5", b"1000000", False, f"{CC} ValuesMatch: absolute only, no relative error"),
    (b"2147483648", b"2147483648.000001", True, f"{CC} ValuesMatch: past int32 (SimpleAtoi fails), both doubles"),
    (b"3000000000", b"3000000000.5", False, f"{CC} ValuesMatch: past int32 against a double, |diff| = 0.5"),
    (b"10000000000000001", b"10000000000000000", True, f"{CC} ValuesMatch: two doubles, one value (2**53 < 1e16)"),
    (b"2147483647 x", b"2147483646 x", False, f"{CC} ValuesMatch: int32 pair, unequal"),
    (b"-0", b"0", True, f"{CC} ValuesMatch: numbers, |-0 - 0| = 0"),
    (b"+5", b"5", True, f"{CC} ValuesMatch: SimpleAtoi / SimpleAtod accept one '+'"),
    (b"+-5", b"-5", False, f"{CC} ValuesMatch: SimpleAtod refuses '+-', SimpleAtoi too: a string"),
    (b"0x10", b"16", False, f"{CC} ValuesMatch: base 10, from_chars general: '0x10' is a string"),
    (b"1e5", b"100000", True, f"{CC} ValuesMatch: from_chars reads the exponent"),
    (b".5 5.", b"0.5 5", True, f"{CC} ValuesMatch: from_chars takes '.5' and '5.'"),
    (b"1e", b"1", False, f"{CC} ValuesMatch: from_chars stops before 'e', ptr != end: a string"),
    (b"nan", b"nan", True, f"{CC} OutputsMatch: equal token lists match before any ValuesMatch"),
    (b"nan 1", b"nan 1.0", False, f"{CC} ValuesMatch: |nan - nan| < 1e-5 is false"),
    (b"inf 1", b"infinity 1.0", False, f"{CC} ValuesMatch: inf - inf is nan"),
    (b"1\r\n2\r\n\r\n", b"1 2", True, f"{CC} SplitAndLowercase: ByAnyChar(\" \\n\\t\\r\\v\"), SkipEmpty"),
    (b"1\v2", b"1 2", True, f"{CC} SplitAndLowercase: \\v separates"),
    (b"1\f2", b"1 2", False, f"{CC} SplitAndLowercase: \\f does not separate: one token against two"),
    (b"5\f", b"5", True, f"{CC} ValuesMatch: SimpleAtoi strips ascii_isspace (\\f) inside the token"),
    (b"1 2 3", b"1 2", False, f"{CC} OutputsMatch: output_parts.size() != expected_parts.size()"),
    (b"1 2", b"1 2 3", False, f"{CC} OutputsMatch: a missing token"),
    (b"", b"", True, f"{CC} OutputsMatch: two empty lists are equal"),
    (b"", b"0", False, f"{CC} OutputsMatch: sizes differ"),
])
def test_code_contests(output, expected, verdict, source):
    assert checkers.code_contests(output, expected) is verdict, source


# -- LiveCodeBench: lcb_runner/evaluation/testing_util.py grade_stdio --------------------------

@pytest.mark.parametrize("output, expected, verdict, source", [
    (b"0.10", b"0.1", True, f"{LCB}: CASE 2, Decimal('0.10') == Decimal('0.1')"),
    (b"5.0 2", b"5 2.00", True, f"{LCB}: CASE 2, lists of Decimals equal"),
    (b"0.30000000000000004", b"0.3", False, f"{LCB}: CASE 2, Decimal is exact: no tolerance"),
    (b"100000000000000001", b"1e17", False, f"{LCB}: CASE 2, Decimal, not float (their np.isclose note)"),
    (b"1e2", b"100", True, f"{LCB}: CASE 2, Decimal('1e2') == Decimal('100')"),
    (b"Yes", b"YES", False, f"{LCB}: CASE 1 is case-sensitive; Decimal('Yes') fails: WA"),
    (b"1  2", b"1 2", True, f"{LCB}: CASE 2, split() drops the extra space"),
    (b"a  b", b"a b", False, f"{LCB}: CASE 1 fails, convert_line_to_decimals fails"),
    (b"1\r\n2\r\n", b"1\n2", True, f"{LCB}: get_stripped_lines strips each line (\\r)"),
    (b"1\n2\n\n\n", b"1\n2", True, f"{LCB}: get_stripped_lines strips the whole text first"),
    (b"1\n\n2", b"1\n2", False, f"{LCB}: an inner blank line is a line: mismatched output length"),
    (b"1 2", b"1\n2", False, f"{LCB}: line counts differ: mismatched output length"),
    (b"-0", b"0", True, f"{LCB}: CASE 2, Decimal('-0') == Decimal('0')"),
    (b"nan", b"nan", True, f"{LCB}: CASE 1, equal lines"),
    (b"nan 1", b"nan 1.0", False, f"{LCB}: CASE 2, Decimal NaN == NaN is False"),
    (b"inf", b"Infinity", True, f"{LCB}: CASE 2, Decimal('inf') == Decimal('Infinity')"),
    (b"snan 1", b"snan 1.0", False, f"{LCB}: CASE 2, a signalling NaN raises in ==, outside their try"),
    (b"1 2 3", b"1 2", False, f"{LCB}: CASE 2, lists of different lengths"),
    (b"", b"", True, f"{LCB}: [''] == ['']"),
])
def test_livecodebench(output, expected, verdict, source):
    assert checkers.livecodebench(output, expected) is verdict, source


# -- APPS: hendrycks/apps eval/testing_util.py run_test, standard_input branch ------------------

@pytest.mark.parametrize("output, expected, verdict, source", [
    (b"YES", b"yes", False, "run_test: every fallback compares case-sensitively"),
    (b"1 2\r\n", b"1 2", True, "custom_compare_: splitlines, join, strip"),
    (b"  1\n\n\n", b"1", True, "custom_compare_: stripped_string_compare"),
    (b"1\n\n2", b"1\n2", True, "'try by converting the output into a split up list too': empty lines dropped"),
    (b"5.0\n", b"5", True, "float fallback: [5.0] allclose [5.0]"),
    (b"1e-9", b"0", True, "float fallback: np.allclose atol 1e-8"),
    (b"1.002", b"1", False, "float fallback: 2e-3 > 1e-8 + 1e-5 * 1; rounded sets: 1.002 != 1.0"),
    (b"1.00002", b"1", True, "float fallback fails (2e-5); last fallback: round(1.00002, 3) = 1.0"),
    (b"-0", b"0", True, "float fallback: -0.0 allclose 0.0"),
    (b"100000000000000001", b"100000000000000000", True, "float fallback: both 1e17 as floats"),
    (b"0.1234\n", b"0.1231", True, "last fallback: round(float(t), 3) sets, 0.123 = 0.123"),
    (b"2 1\n", b"1 2", True, "set fallback: each line a set of tokens"),
    (b"1\n2\n", b"2\n1", True, "set fallback: the output a set of line sets: order ignored"),
    (b"3 3 3", b"3", True, "set fallback: repeats vanish in a set"),
    (b"nan", b"nan", True, "custom_compare_: equal strings"),
    (b"nan 1", b"nan 1.0", False, "rounded-set fallback: two nan objects are not equal"),
    (b"1 2", b"1 2 3", False, "set fallback: {1, 2} != {1, 2, 3}"),
    (b"", b"0", False, "float fallback: lengths 0 and 1"),
])
def test_apps(output, expected, verdict, source):
    assert checkers.apps(output, expected) is verdict, source


# -- TACO: FlagOpen/TACO metrics/testing_util.py compare_std_results (stdout is one string) -----

@pytest.mark.parametrize("output, expected, verdict, source", [
    (b"1\r\n", b"1", True, "subprocess text=True: universal newlines; stripped_string_compare"),
    (b"2\n1\n", b"1\n2", True, "set fallback: char sets of stdout's tokens == line token sets"),
    (b"ab\n", b"a b", True, "set fallback: frozenset('ab') == frozenset({'a', 'b'})"),
    (b"12", b"1 2", True, "set fallback: the characters of '12' are the tokens of '1 2'"),
    (b"1 2\n", b"2 1", False, "set fallback: {{'1'}, {'2'}} != {{'1', '2'}} (APPS: passes)"),
    (b"5.0\n", b"5", False, "float fallback iterates characters: float('.') fails (APPS: passes)"),
    (b"5", b"5.0", True, "float fallback: the characters of '5' -> [5.0] allclose [5.0]"),
    (b"YES", b"yes", False, "every fallback is case-sensitive"),
    (b"\xff\n", b"x", False, "text=True: not UTF-8, subprocess.run raises: not passed"),
    (b"1 2 3", b"1 2", False, "set fallback: three sets against one"),
])
def test_taco(output, expected, verdict, source):
    assert checkers.taco(output, expected) is verdict, source


def test_allclose_is_numpys():
    """Catches: APPS' / TACO's np.allclose replaced by math.isclose (symmetric) or a plain
    difference; numpy itself is the reference."""
    np = pytest.importorskip("numpy")
    pairs = [(1.0, 1.00001), (1.00001, 1.0), (0.0, 1e-8), (0.0, 2e-8), (1e9, 1e9 + 1e4), (1e9, 1e9 + 1.1e4),
             (float("inf"), float("inf")), (float("inf"), -float("inf")), (float("nan"), float("nan")), (5.0, 5.0)]
    assert [checkers._isclose(a, b) for a, b in pairs] == [bool(np.isclose(a, b)) for a, b in pairs]


# -- Codeforces without a checker: testlib wcmp / rcmp6, open-r1's yes/no ------------------------

@pytest.mark.parametrize("output, expected, verdict, source", [
    (b"Yes", b"YES", True, "piston run normalize_output: \\b(yes)\\b uppercased, any case"),
    (b"nO", b"NO", True, "piston run normalize_output: \\b(no)\\b"),
    (b"Yesss", b"YESSS", False, "normalize_output touches only the words; wcmp: j != p"),
    (b"Abc", b"abc", False, "wcmp.cpp: if (j != p) quitf(_wa...)"),
    (b"0.5000004", b"0.5", True, "rcmp6.cpp doubleCompare: |diff| = 4e-7 <= 1e-6"),
    (b"0.500002", b"0.5", False, "rcmp6.cpp doubleCompare: 2e-6 > 1e-6, relative too"),
    (b"1000000.5", b"1000000.0", True, "doubleCompare: within expected * (1 +- 1e-6)"),
    (b"5", b"5.0", True, "rcmp6: '5' is a double (stringToDouble)"),
    (b"5.0", b"5", False, "an integer expected: wcmp, words differ"),
    (b"-0", b"0", False, "wcmp: '-0' != '0'"),
    (b"-0.0", b"0.0", True, "doubleCompare: |-0 - 0| = 0"),
    (b"nan", b"0.5", False, "stringToDouble: 'nan' has letters: PE"),
    (b"1e301", b"2e300", True, "__testlib_isInfinite: past 1e300 both are infinite"),
    (b"1\r\n2\r\n", b"1 2", True, "testlib.h isBlanks: \\r is a blank"),
    (b"1\f2", b"1 2", False, "testlib.h isBlanks: \\f is not"),
    (b"1 2 3", b"1 2", False, "wcmp.cpp: Participant output contains extra tokens"),
    (b"", b"1", False, "wcmp.cpp: Unexpected EOF in the participants output"),
    (b"", b"", True, "wcmp.cpp: both at EOF"),
])
def test_codeforces(output, expected, verdict, source):
    assert checkers.codeforces(output, expected) is verdict, source


def test_double_compare_is_testlibs():
    """Catches: the 1e-15 slack or the relative window of testlib.h doubleCompare dropped, infinite
    taken as math.isinf. Values by hand: 1e-6 + 1e-15 absolute; 1e9 * (1 +- (1e-6 + 1e-15))."""
    assert checkers.double_compare(0.0, 1e-6, 1e-6) and not checkers.double_compare(0.0, 1.01e-6, 1e-6)
    assert checkers.double_compare(1e9, 1e9 + 1000, 1e-6) and not checkers.double_compare(1e9, 1e9 + 1001, 1e-6)
    assert checkers.double_compare(-1e9, -1e9 - 1000, 1e-6)
    assert checkers.double_compare(2e300, 5e300, 1e-6) and not checkers.double_compare(2e300, -5e300, 1e-6)


# -- the table and its names ---------------------------------------------------------------------

def test_rules_table_use_and_describe():
    """Catches: an unknown --checker name accepted silently, --checker not reaching every I/O problem
    (or touching function problems), a special checker kept under an override, counts wrong."""
    io = data.Problem("cf/1", "p", "", (), io_tests=(("1", "1"),), checker="codeforces", checker_program="print(1)")
    fn = data.Problem("fn/1", "p", "f", ("assert f() == 1",))
    assert checkers.describe([io, io, fn]) == {"codeforces": 2, "special": 2} and checkers.describe([fn]) == {}
    assert checkers.use([io, fn], "auto") == [io, fn]
    (strict, same) = checkers.use([io, fn], "strict")
    assert (strict.checker, strict.checker_program, same) == ("strict", None, fn)
    with pytest.raises(ValueError, match=r"^unknown output checker 'exact': use one of strict, code_contests"):
        checkers.use([io], "exact")
    with pytest.raises(ValueError, match=r"unknown output checker"):
        sandbox.run_program("print(1)", io_tests=[("", "1")], checker="exact")
    assert train.get_args(["--checker", "taco"]).checker == "taco" and evaluation.get_args([]).checker == "auto"
    with pytest.raises(SystemExit):
        evaluation.get_args(["--checker", "exact"])
    assert report.checker_note({"strict": 3}) == "strict (3 problems)"


def test_each_set_reaches_the_sandbox_with_its_rule():
    """Catches: the I/O comparison still `strict` whatever the problem says: a CodeContests
    program printing `n / 2` (5.0 for 5) fails its own reference under strict, passes under
    CodeContests' rule; LiveCodeBench's Decimal lines; a rule of the wrong set."""
    half = "print(int(input()) / 2)"
    tests = [("10\n", "5\n"), ("3\n", "1.5\n")]
    runs = sandbox.run_many([dict(program=half, io_tests=tests, checker=c) for c in ("strict", "code_contests", "livecodebench")]
                            + [dict(program="print('0.10')", io_tests=[("", "0.1")], checker="livecodebench"),
                               dict(program="print('Yes')", io_tests=[("", "YES")], checker="livecodebench")])
    assert [r.tests for r in runs] == [("failed", "passed"), ("passed", "passed"), ("passed", "passed"),
                                       ("passed",), ("failed",)]


# -- a problem's own checker program, in the sandbox ---------------------------------------------

RIGHT = "n = int(input())\nprint(1, n - 1)\n"  # two positive integers with sum n: any pair is right
WRONG = "n = int(input())\nprint(0, n)\n"
TESTS = [("5\n", "2 3\n"), ("4\n", "1 3\n")]  # the jury's answers: 1 3 is RIGHT's too
RIGHT_CHECKER = """import sys
n = int(open(sys.argv[1]).read())
try:
    a, b = map(int, open(sys.argv[3]).read().split())
except ValueError:
    print(0)
else:
    print(1 if a > 0 and b > 0 and a + b == n else 0)
"""
WRONG_CHECKER = """import sys
print(1 if open(sys.argv[3]).read() == open(sys.argv[2]).read() else 0)  # the jury's pair only
"""
HOSTILE = {
    "crashes": "raise RuntimeError('checker bug')\n",
    "loops": "while True:\n    pass\n",
    "prints to every fd": "import os\nfor fd in range(256):\n    try:\n        os.write(fd, b'\\x00ok?\\n' * 100)\n"
                          "    except OSError:\n        pass\n",
    "forges a report line": "import marshal, os\nline = b'0' * 32 + b' 0 ' + marshal.dumps(('io', 0, 'passed', '', 0, 0, 0)).hex()"
                            ".encode() + b'\\n'\nfor fd in range(1, 256):\n    try:\n        os.write(fd, line)\n"
                            "    except OSError:\n        pass\n",
    "says yes then exits 1": "import sys\nprint(1)\nsys.exit(1)\n",
    "prints nonsense": "print('accepted')\n",
}


@pytest.mark.parametrize("checker, program, want", [
    (RIGHT_CHECKER, RIGHT, ("passed", "passed")),
    (RIGHT_CHECKER, WRONG, ("failed", "failed")),
    (WRONG_CHECKER, RIGHT, ("failed", "passed")),  # 1 4 is right but not the jury's 2 3
    (WRONG_CHECKER, WRONG, ("failed", "failed")),
    *[(HOSTILE[k], p, ("judge_error", "judge_error")) for k in HOSTILE for p in (RIGHT, WRONG)],
], ids=["right-right", "right-wrong", "wrong-right", "wrong-wrong",
        *[f"{k}-{p}" for k in HOSTILE for p in ("right", "wrong")]])
def test_special_checker(checker, program, want, monkeypatch):
    """Catches: a checker's crash, timeout, fd spraying, forged report line, non-zero exit or
    nonsense taken as a pass (or as the program's failure: they are judge_error, never passed),
    a right checker rejecting a right program, the files in the wrong argv order. The wrong checker
    compares with the jury's answer: it fails the right program where that differs (1 4 for 2 3)."""
    monkeypatch.setattr(special_checker, "CHECKER_TIMEOUT_S", 0.5)
    r = sandbox.run_program(program, io_tests=TESTS, checker="codeforces", checker_program=checker)
    assert r.tests == want, r.detail
    if want[0] == "judge_error":
        assert r.verdict == "judge_error" and r.detail.startswith("I/O test 1: the problem's checker: ")


def test_special_checker_sees_open_r1s_files_and_not_the_programs_failure(monkeypatch):
    """Catches: the checker run on a program that crashed (its error is the verdict), files not
    prepared as open-r1's runner does (empty lines of the output kept, the correct output's \\r),
    argv in the wrong order."""
    echo = "import sys\nprint(1 if [open(p, 'rb').read() for p in sys.argv[1:]] == [b'7\\n', b'a\\nb\\n', b'x\\ny'] else 0)\n"
    r = sandbox.run_program("import sys\nprint('x\\n\\ny', end='')\nsys.exit(int(input()) - 7)\n",
                            io_tests=[("7\r\n", "a\r\n\r\nb\n\n"), ("8\n", "a\nb\n")], checker="codeforces",
                            checker_program=echo)
    assert r.tests == ("passed", "error"), r.detail


def test_sample_files_references_pass_under_their_checkers(tmp_path):
    """Every reference solution of the native-schema samples (tests/data/test_loaders.py, plus a
    CodeContests problem whose reference prints n / 2) passes under its source's checker, every
    known-wrong one fails; and strict fails the n / 2 reference, which is why the rules exist."""
    import test_loaders as t

    half = {**t.CC, "name": "9_E. Half", "public_tests": t._tests([("10\n", "5\n")]),
            "private_tests": t._tests([("3\n", "1.5\n")]), "generated_tests": t._tests([("0\n", "0\n")]),
            "solutions": {"language": [3], "solution": ["print(int(input()) / 2)"]},
            "incorrect_solutions": {"language": [3], "solution": ["print(int(input()) // 2)"]}}
    cc = data.load(f"code_contests:{t._jsonl(tmp_path / 'cc.jsonl', t.CC, half)}")
    apps = data.load(f"apps:{t._jsonl(tmp_path / 'apps.jsonl', t.APPS_IO)}")
    taco = data.load(f"taco:{t._jsonl(tmp_path / 'taco.jsonl', t.APPS_IO)}")
    lcb = data.load(f"livecodebench:{t._jsonl(tmp_path / 'lcb.jsonl', t.LCB_STDIN)}")
    cf = data.load(f"codeforces:{t._jsonl(tmp_path / 'cf.jsonl', t.CF, t.CF_CHECKER)}")
    cases = [(cc[0], cc[0].solution, "print(1)"), (cc[1], cc[1].solution, "print(int(input()) // 2)"),
             (apps[0], apps[0].solution, "print(0)"), (taco[0], taco[0].solution, "print(0)"),
             (lcb[0], "s = input()\nprint(s * 2)\n", "print(input())"),
             (cf[0], "print(int(input()) // 2)", "print(int(input()) / 2)"), (cf[1], RIGHT, WRONG)]
    jobs = [p.sandbox_job(program, 4.0) for p, right, wrong in cases for program in (right, wrong)]
    results = sandbox.run_many(jobs)
    assert [r.verdict for r in results] == ["passed", "failed"] * len(cases), [r.detail for r in results]
    (strict,) = sandbox.run_many([checkers.use(cc, "strict")[1].sandbox_job(cc[1].solution, 4.0)])
    assert strict.tests == ("failed", "passed", "failed")  # 5.0 for 5 and 0.0 for 0


def test_eval_records_the_checker_of_every_dataset(tmp_path):
    """Catches: results.json without the checkers, measure/report.py not naming them under the table."""
    row = {"pass@1": 1.0, "verdicts": {"passed": 1}, "plan_tokens": None, "code_tokens": 5.0, "generation_s": 1.0,
           "problems": [{"task_id": "a", "passed": 1, "verdicts": ["passed"]}]}
    results = {"ks": [1], "n": 1, "temperature": 0.0, "systems": [{"name": "A", "mode": "direct"}],
               "results": {"cf": {"A": row}}, "checkers": {"cf": {"codeforces": 4, "special": 1}}}
    assert ("\nOutput checkers of the I/O tests (sandboxing/checkers.py): cf: codeforces (4 problems, 1 with their own "
            "checker program).") in report.markdown(results)
    path = tmp_path / "io.jsonl"
    path.write_text(json.dumps({"task_id": "x", "prompt": "p", "io_tests": [{"input": "", "output": "1"}],
                                "checker": "code_contests"}) + "\n")
    assert checkers.describe(data.load(str(path))) == {"code_contests": 1}
