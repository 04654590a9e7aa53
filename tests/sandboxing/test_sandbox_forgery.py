"""Programs that forge their own verdicts instead of computing answers: each one finds the runner's
report function (through gc.get_objects() or the stack) or its token and reports its tests as
passed. None may pass any test, of any kind.

Before the judge process (the sandbox of commit 201d964, statement tests judged in the program's
own process), the closure and token forgeries passed every statement test and the guessable value
test here; see the sandbox notes. Needs root, as the adversarial suite: the judge's memory is out of
the program's reach only when neither can ptrace the other (non-dumpable, as the run's own uid).
"""
import os

import pytest

import sandbox
from sandboxing import judge

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")

# Reports every test of the run as passed, then ends the run. {WHERE} decides when: at the
# program's top level, or inside the function when a test calls it.
FORGER = '''
import gc, marshal, os, sys

def reporters():
    """The runner's report closures, from the heap and from the stack."""
    found = [o for o in gc.get_objects() if getattr(getattr(o, "__code__", None), "co_name", "") == "report"]
    frame = sys._getframe()
    while frame is not None:
        found += [v for k, v in frame.f_locals.items() if k == "report" and callable(v)]
        frame = frame.f_back
    return found

def tokens():
    """Every 32-hex-digit string or bytes reachable from a dict, a cell or a frame."""
    seen = set()
    def take(v):
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        if isinstance(v, str) and len(v) == 32 and all(c in "0123456789abcdef" for c in v):
            seen.add(v)
    for o in gc.get_objects():
        if isinstance(o, dict):
            for v in list(o.values()):
                take(v)
        elif type(o).__name__ == "cell":
            try:
                take(o.cell_contents)
            except ValueError:
                pass
    frame = sys._getframe()
    while frame is not None:
        for v in frame.f_locals.values():
            take(v)
        frame = frame.f_back
    return seen

def forge(n=4):
    messages = [("started",), ("loaded",)] + [("test", i, "passed", "", 0.0, 0.0, 0.0) for i in range(n)]
    messages += [("value", i, True, 0.0, 0.0, 0.0) for i in range(n)] + [("done",)]
    if MODE == "closure":
        for report in reporters():
            for message in messages:
                try:
                    report(*message)
                except Exception:
                    pass
    else:  # the token: forged lines on every pipe we hold
        lines = b"".join(b"%s 9 %s\\n" % (t.encode(), marshal.dumps(m).hex().encode())
                         for t in tokens() for m in messages)
        for fd in range(3, 64):
            try:
                if os.path.stat.S_ISFIFO(os.fstat(fd).st_mode):
                    os.write(fd, lines)
            except OSError:
                pass
    os._exit(0)

def has_close_elements(numbers, threshold):
    {IN_CALL}return False

def f(x):
    {IN_CALL}return 0

{AT_TOP}
'''

CHECK = ("def check(candidate):\n    assert candidate([1.0, 2.0, 3.9, 4.0], 0.3) == True\n"
         "    assert candidate([1.0, 2.0, 3.0], 0.5) == False\n")
# (id, tests, setup): one of each test kind that a forger could hope to pass
KINDS = [
    ("HumanEval check(candidate), value lines", ["check(has_close_elements)"], CHECK),
    ("HumanEval check(candidate) with a loop", ["check(has_close_elements)"],
     CHECK + "    for t in (0.1, 0.2):\n        assert candidate([1.0, 1.0 + t], t) == False\n"),
    ("assert math.isclose", ["import math\nassert math.isclose(f(1), 2.5)"], ""),
    ("assert f(x) (truth)", ["assert f(3)"], ""),
    ("guessable literal, not a direct call", ["assert is_even(f(3)) == True"], "def is_even(v):\n    return v % 2 == 0\n"),
    ("value test", ["assert f(3) == 17"], ""),
]
FORGERS = [(mode, where) for mode in ("closure", "token") for where in ("top", "call")]


def forger(mode, where):
    source = FORGER.replace("{IN_CALL}", "forge()\n    " if where == "call" else "")
    source = source.replace("{AT_TOP}", "forge()" if where == "top" else "")
    return f"MODE = {mode!r}\n" + source


@pytest.mark.parametrize("mode, where", FORGERS, ids=[f"{m}-{w}" for m, w in FORGERS])
@pytest.mark.parametrize("kind, tests, setup", KINDS, ids=[k[0] for k in KINDS])
def test_forgery_passes_nothing(mode, where, kind, tests, setup):
    """Catches: statement tests judged in the program's process (the closure / token forgery
    passes them), a guessable literal judged from a value the program's process sends."""
    r = sandbox.run_program(forger(mode, where), tests, setup=setup, timeout_s=1.0)
    assert r.passed == 0 and r.verdict != "passed", (r.verdict, r.tests, r.detail)


def test_the_forger_is_a_working_program():
    """The forger without its forgery: a plain wrong program, judged as such (so the test above
    fails only by forgery, not by a broken program)."""
    honest = forger("closure", "none").replace("MODE = 'closure'", "MODE = 'closure'")
    r = sandbox.run_program(honest, ["check(has_close_elements)", "assert f(3) == 0"], setup=CHECK, timeout_s=1.0)
    assert r.tests == ("failed", "passed"), r.detail


# Looks for the expected answer 987654321 as text anywhere it can reach (heap dicts, lists and
# tuples, the stack and its code constants) and returns / prints it if found.
SNOOP = '''
import gc, sys
SECRET = 987654320 + 1  # never written as one literal here
def found():
    needle = str(SECRET).encode()  # made at run time: not a constant of ours
    def has(v):  # the answer as text: a test's source, a job, an expected output
        if isinstance(v, (str, bytes)):
            return needle in (v if isinstance(v, bytes) else v.encode(errors="replace"))
        return False
    for o in gc.get_objects():
        values = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()
        try:
            if any(has(v) for v in list(values)):
                return True
        except Exception:
            pass
    frame = sys._getframe(1)  # our callers' frames (ours holds the needle)
    while frame is not None:
        if any(has(v) for v in frame.f_locals.values()) or any(has(c) for c in frame.f_code.co_consts):
            return True
        frame = frame.f_back
    return False
def f(x):
    return SECRET if found() else 0
'''


@pytest.mark.parametrize("tests, setup", [
    (["assert f(1) == 987654321"], ""),  # a value test
    (["check(f)"], "def check(candidate):\n    assert candidate(1) == 987654321\n"),  # a check of value lines
    (["check(f)"], "def check(candidate):\n    for x in (1,):\n        assert candidate(x) == 987654321\n"),  # the judge's
    (["assert f(1) in (987654321,)"], ""),  # a statement test
])
def test_expected_values_never_reach_the_program(tests, setup):
    """Catches: the literal, the check's source or the judge's job readable in the program's process
    (the snoop would return the answer it found there)."""
    r = sandbox.run_program(SNOOP, tests, setup=setup, timeout_s=2.0)
    assert r.tests == ("failed",), r.detail


def test_expected_output_never_reaches_an_io_program():
    program = SNOOP + "print(f(1))\n"
    r = sandbox.run_program(program, io_tests=[("", "987654321")], timeout_s=2.0)
    assert r.tests == ("failed",), r.detail


def test_the_snoop_finds_what_it_can_reach():
    """The control: the same snoop with the answer's text in its own globals passes (so the two
    tests above fail only because the answer is out of reach)."""
    program = SNOOP + "SECRET_TEXT = str(SECRET)\n"
    assert sandbox.run_program(program, ["assert f(1) == 987654321"], timeout_s=2.0).tests == ("passed",)


# -- the red team's findings (docs/sandbox.md#the-red-teams-findings): each forgery below passed, or raised, before its fix

FIND = '''
import gc, sys
def _frames():
    f = sys._getframe()
    while f is not None:
        yield f
        f = f.f_back
def _report():
    for f in _frames():
        r = f.f_locals.get("report")
        if callable(r) and getattr(r, "__code__", None) and r.__code__.co_name == "report":
            return r
'''
ADD_CHECK = "def check(candidate):\n    for i in range(5):\n        assert candidate(i, 1) == i + 1\n"


@pytest.mark.parametrize("tests, setup", [
    (["assert add(1, 2) == 3", "assert add(2, 2) == 4"], ""),
    (["check(add)"], ADD_CHECK),
    (["import math\nassert math.isclose(add(1, 2), 3)"], ""),
])
def test_load_failed_cannot_claim_passed(tests, setup):
    """docs/sandbox.md#h1-forged-load-report.
    Catches: judge accepting ("load_failed", "passed", "") from the program's token, which
    passed every test of a wrong program. Any non-failure claim is an error."""
    program = FIND + '_report()("load_failed", "passed", "")\ndef add(a, b):\n    return a - b\n'
    r = sandbox.run_program(program, tests, setup=setup, timeout_s=1.0)
    assert (r.verdict, r.passed) == ("error", 0), (r.verdict, r.tests, r.detail)
    weird = FIND + '_report()("load_failed", "no_code", "")\ndef add(a, b):\n    return a - b\n'
    assert sandbox.run_program(weird, tests, setup=setup, timeout_s=1.0).tests == ("error",) * len(tests)


VERDICT_RAISER = FIND + '''
def add(a, b):
    for f in _frames():
        v = f.f_globals.get("Verdict")
        if isinstance(v, type):
            raise v("passed", ("verdict", ("passed", "")))
    return a - b
'''
PIPE_WRITER = FIND + '''
import marshal, os
def add(a, b):
    for f in _frames():
        if "link" in f.f_locals and "seq" in f.f_locals:
            data = marshal.dumps((f.f_locals["seq"], "verdict", ("passed", ""), None, 0.0, 0.0, 0.0))
            os.write(f.f_locals["link"][1], len(data).to_bytes(8, "little") + data)
    return a - b
'''


@pytest.mark.parametrize("program", [VERDICT_RAISER, PIPE_WRITER], ids=["raise-Verdict", "write-answer-frame"])
@pytest.mark.parametrize("tests, setup", [
    (["check(add)"], ADD_CHECK),
    (["import math\nassert math.isclose(add(1, 2), 3)"], ""),
])
def test_a_relayed_verdict_is_never_a_pass(program, tests, setup):
    """docs/sandbox.md#h2-relayed-verdict.
    Catches: the judge's stub raising Verdict(*payload) as the program's process sent it, so
    that the runner's own Verdict("passed", ...) raised by the program, or a forged "verdict"
    answer frame, passed statement tests. The judge maps it to error."""
    r = sandbox.run_program(program, tests, setup=setup, timeout_s=1.0)
    assert r.tests == ("error",), (r.verdict, r.tests, r.detail)


@pytest.mark.parametrize("body", [
    'r = _report(); r("started", peak=10**400)',
    'r = _report(); r("value", 0, 123, "x", 0, 0)',
    'r = _report(); r("test", 0, "failed", "", [], 0, 0)',
    'r = _report(); r("value", 0, 3, 10**400, float("nan"), float("inf"))',
    'r = _report(); r("test", True, "failed", "", 0, 0, 0); r("value", -1, 3, 0, 0, 0); r(5, 1)',
])
def test_malformed_reports_never_raise(body):
    """docs/sandbox.md#h5-malformed-report-fields.
    Catches: run_program raising OverflowError / ValueError / TypeError on forged report
    fields (a 10**400 peak, timing "x" or []). A malformed field is dropped; the test is judged
    by what stands (here: the honest value 1, not 2 -> failed, or the forged "failed")."""
    program = FIND + body + "\ndef f(x):\n    return x\n"
    r = sandbox.run_program(program, ["assert f(1) == 2"], timeout_s=1.0)
    assert r.tests == ("failed",) and r.peak_rss_mb < 1e6, (r.verdict, r.tests, r.detail)
    assert all(v is None or 0 <= v < 1e9 for v in r.test_cpu_s + r.test_wall_s + r.test_mem_mb)


SEND_RAW = FIND + '''
import os, marshal
fd = next(f.f_locals["report_fd"] for f in _frames() if "report_fd" in f.f_locals)
token = next(f.f_locals["job"]["token"] for f in _frames() if isinstance(f.f_locals.get("job"), dict))
os.write(fd, token.encode() + b" 0 " + MESSAGE.hex().encode() + b"\\n")
def f(x):
    return x
'''


def test_always_equal_objects_fool_no_helper_of_the_setup():
    """docs/sandbox.md#h9-helpers-in-the-programs-process. The program sorts nothing: it returns a list whose
    elements are equal to anything. As value tests, the setup's helper ran in the program's process and
    counted every element as in place, so `n_in_place(...) == 4` passed with any literal. Judged in the judge
    process, the helper sees the plain lists the program's values become, and every test fails, as it does for
    an honest wrong program."""
    setup = ("def n_in_place(xs, ys):\n    return sum(1 for a, b in zip(sorted(xs), ys) if a == b)\n"
             "def is_sorted_perm(xs, ys):\n    return 1 if ys == sorted(xs) else 0\n")
    tests = ["assert n_in_place([3, 1, 2, 9], f([3, 1, 2, 9])) == 4", "assert n_in_place([7, 5, 6], f([7, 5, 6])) == 3",
             "assert is_sorted_perm([5, 4], f([5, 4])) == 1"]
    cheat = "class Eq(list):\n    def __eq__(self, o):\n        return True\ndef f(xs):\n    return Eq([Eq() for _ in xs])\n"
    for program in (cheat, "def f(xs):\n    return xs\n"):
        r = sandbox.run_program(program, tests, setup=setup, timeout_s=2.0)
        assert r.tests == ("failed",) * 3, (r.tests, r.detail)
    r = sandbox.run_program("def f(xs):\n    return sorted(xs)\n", tests, setup=setup, timeout_s=2.0)
    assert r.tests == ("passed",) * 3, r.detail


def test_the_setup_never_reaches_the_programs_process():
    """docs/sandbox.md#h9-helpers-in-the-programs-process. HumanEval's check(f) judged as values beside a plain value
    test: the setup, with check's expected values in it, went to the program's process for the plain test, and a
    program that reads them there (the runner's job, up its stack) answered every check without computing. Also
    `f(3) - 27 == 0` against an object whose __sub__ returns 0. Neither passes now."""
    setup = "def check(candidate):\n    assert candidate(3) == 27\n    assert candidate(4) == 256\n"
    reader = ("import ast, sys\ndef cube_like(x):\n    f = sys._getframe()\n"
              "    while f is not None and 'job' not in f.f_locals:\n        f = f.f_back\n"
              "    for node in ast.walk(ast.parse(f.f_locals['job']['setup'] if f else '')):\n"
              "        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call):\n"
              "            if [ast.literal_eval(a) for a in node.left.args] == [x]:\n"
              "                return ast.literal_eval(node.comparators[0])\n    return 1\n")
    r = sandbox.run_program(reader, ["check(cube_like)", "assert cube_like(1) == 1"], setup=setup, timeout_s=2.0)
    assert r.tests == ("failed", "passed"), (r.tests, r.detail)
    zero = "class Z:\n    def __sub__(self, o):\n        return 0\ndef f(x):\n    return Z()\n"
    r = sandbox.run_program(zero, ["assert f(3) - 27 == 0"], timeout_s=2.0)  # judged in the judge process on plain data
    assert r.tests == ("error",) and "a Z is not plain data" in r.detail, (r.tests, r.detail)
    r = sandbox.run_program("def f(x):\n    return x ** 3\n", ["assert f(3) - 27 == 0"], timeout_s=2.0)
    assert r.tests == ("passed",), r.detail


@pytest.mark.parametrize("make", [
    # a set of 30 000 distinct ints of hash 0: quadratic to build
    'items = b"".join(marshal.dumps(k * ((1 << 61) - 1)) for k in range(1, 30001))\n'
    'MESSAGE = b")\\x06" + marshal.dumps("value") + marshal.dumps(0) + b"<" + (30000).to_bytes(4, "little")'
    ' + items + marshal.dumps(0.0) * 3',
    # a 60-deep tuple DAG through marshal's back-references, in a set: 2**60 hash calls
    'A = ()\nfor _ in range(60):\n    A = (A, A)\nMESSAGE = marshal.dumps(("value", 0, [A], 0.0, 0.0, 0.0))\n'
    'i = MESSAGE.index(b"[\\x01\\x00\\x00\\x00")\nMESSAGE = MESSAGE[:i] + b"<" + MESSAGE[i + 1:]',
    'MESSAGE = marshal.dumps(("value", 0, compile("1", "", "eval"), 0.0, 0.0, 0.0))',
], ids=["hash-collisions", "tuple-dag", "code-object"])
def test_a_costly_report_is_refused_before_it_is_built(make):
    """docs/sandbox.md#h4-costly-report-decoding.
    Catches: marshal.loads of the child's report in the parent's read loop (no deadline,
    the GIL held): a colliding set or a reference DAG froze the parent for seconds to forever.
    judge.loads_plain refuses them; the honest value report that follows is judged (1 != 2)."""
    r = sandbox.run_program(SEND_RAW.replace("fd = next", make + "\nfd = next", 1), ["assert f(1) == 2"], timeout_s=1.0)
    assert r.tests == ("failed",) and "got 1" in r.detail, (r.verdict, r.tests, r.detail)


def test_reports_that_decode_into_too_much_end_the_run_as_output_limit():
    """docs/sandbox.md#h10-reports-that-decode-into-too-much. Catches: a report of 100 000 empty sets, 5 bytes each
    sent and 216 bytes each built here, outside the run's memory budget (1.6 million of them, in one 16 MiB line,
    took 0.4 GB and 3.6 s of the trainer's CPU). The run's reports share one budget of objects and containers
    (judge.loads_plain); once it is spent nothing more is decoded and the run is output_limit, never passed."""
    make = ('MESSAGE = b")\\x06" + marshal.dumps("value") + marshal.dumps(0) + b"(" + (100000).to_bytes(4, "little")'
            ' + b"<\\x00\\x00\\x00\\x00" * 100000 + marshal.dumps(0.0) * 3')
    r = sandbox.run_program(SEND_RAW.replace("fd = next", make + "\nfd = next", 1), ["assert f(1) == 1"], timeout_s=1.0)
    assert r.verdict == "output_limit" and r.tests == ("output_limit",) and "100000" not in r.detail, (r.verdict, r.detail)
    assert f"more than {judge.MAX_ITEMS} objects or {judge.MAX_CONTAINERS} containers" in r.detail


def test_honest_reports_with_shared_empty_tuples_decode():
    """Catches a loads_plain that refuses every back-reference to a container: marshal writes the
    shared empty tuple once and refers to it after (HumanEval/148 returns () three times)."""
    program = "def f(x):\n    return ((), (x, ()), frozenset(), frozenset())\n"
    r = sandbox.run_program(program, ["assert f(1) == ((), (1, ()), frozenset(), frozenset())"], timeout_s=1.0)
    assert r.tests == ("passed",), r.detail
