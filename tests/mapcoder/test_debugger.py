"""mapcoder/debugger.py: the visible-test rule, the feedback the Debugger reads (real sandbox, one-test runs of
milliseconds), its prompt, parse and SFT pairs."""
import coder
import data
import sandbox
from mapcoder import debugger

FN = data.Problem("t/dbl", "Write double(x) that returns 2 * x.", "double",
                  ("assert double(2) == 4", "assert double(7) == 14", "assert double(-1) == -2"))
IO = data.Problem("t/io", "Read n, print 2n.", "", (), io_tests=(("2\n", "4\n"), ("7\n", "14\n")))


def test_visible_test_rule_per_kind():
    """Catches: every test shown (hidden ones too), the I/O rule taking an output for an input, HumanEval's
    `check(f)` shown as the visible test (it is all the hidden tests), `assert True, ...` lines taken as
    the first assertion, candidate not renamed (NameError in the sandbox)."""
    assert debugger.visible_tests(FN) == (["assert double(2) == 4"], [])
    assert debugger.visible_tests(IO) == ([], [("2\n", "4\n")])
    he = {p.task_id: p for p in data.load("humaneval")}
    assert debugger.visible_tests(he["HumanEval/0"]) == (
        ["assert has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True"], [])
    first_66 = debugger.visible_tests(he["HumanEval/66"])[0]
    assert first_66 == ["assert digitSum('') == 0"]  # its `assert True, '...'` line is skipped
    assert debugger.visible_tests(he["HumanEval/32"]) == ([], [])  # a loop over generated inputs only
    p = he["HumanEval/0"]
    right = debugger.run_visible(p, debugger.program(p, p.solution[len(p.prompt):]))
    wrong = debugger.run_visible(p, debugger.program(p, "def has_close_elements(numbers, threshold):\n    return False"))
    assert (right.verdict, right.total, wrong.verdict) == ("passed", 1, "failed")
    assert debugger.run_visible(he["HumanEval/32"], "x = 1") is None


def test_feedback_value_exception_statement_and_io():
    """The feedback, exactly, for each way a visible test fails. Catches: the expected value missing, the
    actual value lost (only 'failed'), the judge's 'test 1 failed:' wording left in, an I/O feedback
    without the input."""
    fb = lambda p, prog: debugger.feedback(p, debugger.run_visible(p, prog))  # noqa: E731
    assert fb(FN, "def double(x):\n    return x + 1") == "Test: double(2)\nExpected: 4\nGot: 3"
    assert fb(FN, "def double(x):\n    return x / 0") == "Test: double(2)\nExpected: 4\nGot: ZeroDivisionError: division by zero"
    close = data.Problem("t/c", "Return 2.5.", "f", ("assert abs(f() - 2.5) < 1e-9", "assert f() == 2.5"))
    assert fb(close, "def f():\n    return 3") == "Test: assert abs(f() - 2.5) < 1e-9\nGot: assertion failed"
    assert fb(IO, "print(5)") == "Input:\n2\nExpected output:\n4\nGot: '5\\n'"
    assert fb(IO, "print(1 / 0)") == "Input:\n2\nExpected output:\n4\nGot: ZeroDivisionError: division by zero"
    assert fb(FN, "def double(x):\n    return 2 * x") == ""  # passes: no repair asked
    assert debugger.feedback(FN, None) == ""


def test_feedback_is_capped_at_500_characters():
    """MapCoder's cap. Catches: an uncapped feedback (a 2,000-character input pasted whole into the prompt)."""
    big = data.Problem("t/big", "Echo the line.", "", (), io_tests=(("x" * 2000 + "\n", "x" * 2000 + "\n"), ("y\n", "y\n")))
    text = debugger.feedback(big, debugger.run_visible(big, "print('z')"))
    assert len(text) == debugger.FEEDBACK_CHARS and text == ("Input:\n" + "x" * 2000)[:debugger.FEEDBACK_CHARS]


def test_prompt_and_parse():
    """Catches: the plan or the failing program left out of the prompt, the diagnosis taken from inside
    the code block, a completion without code giving a program."""
    chat = debugger.messages(FN, {"plan": "1. Multiply by 2.", "program": "def double(x):\n    return x + 1",
                                  "feedback": "Test: double(2)\nExpected: 4\nGot: 3"})
    user = chat[-1]["content"]
    assert user.startswith("Problem:\nWrite double(x)") and "Plan:\n1. Multiply by 2." in user
    assert "```python\ndef double(x):\n    return x + 1\n```" in user and "It fails this test:\nTest: double(2)" in user
    assert "Plan:" not in debugger.messages(FN, {"plan": None, "program": "x", "feedback": "y"})[-1]["content"]
    assert debugger.parse("```python\n# Bug: inside\nx = 1\n```\nBug: after.") == ("Bug: after.", "# Bug: inside\nx = 1\n")
    assert debugger.parse("Bug: I give up.") == ("Bug: I give up.", None)


def test_sft_pair_is_a_failing_mutant_and_the_reference():
    """train[0] (add_numbers): the first mutation that fails the visible test is ' + ' -> ' - ' (the
    earlier rules do not match), its feedback is real, and the target is the reference. Catches: a mutant
    that still passes (a pair that teaches to change right code), the reference leaking into the prompt."""
    p = data.load("train")[0]
    up = debugger.sft_upstream(p)
    assert up["program"] == p.solution.replace(" + ", " - ", 1)
    assert up["feedback"] == "Test: add_numbers(1, 2)\nExpected: 3\nGot: -1" and up["plan"] == p.plan
    target = debugger.sft_target(p)
    assert target.startswith("Bug: ") and f"```python\n{p.solution.strip()}\n```" in target
    assert p.solution.strip() not in debugger.messages(p, up)[-1]["content"]
    assert debugger.sft_upstream(FN) is None and debugger.sft_target(FN) is None  # no reference solution
    right = sandbox.run_program(debugger.program(p, p.solution), list(p.tests))
    assert right.verdict == "passed"


def test_sft_pairs_per_role_and_the_chain_roles_sft_trains():
    """sft.pairs on the first 3 train problems: the Debugger's pairs are exactly (its prompt for
    sft_upstream, the reference), the Coder's prompt carries the reference plan only when the chain has
    a Planner, and sft_roles leaves the Retriever (no target) out. Catches: the Debugger trained on the
    Coder's prompt, the plan leaking into the single agent's SFT, a Retriever SFT on an empty pool."""
    import roles
    import sft
    ps = data.load("train")[:3]
    got = sft.pairs(ps, "debugger", ["planner", "coder", "debugger"])
    want = [(debugger.messages(p, debugger.sft_upstream(p)), debugger.sft_target(p)) for p in ps
            if debugger.sft_upstream(p)]
    assert got == want and len(got) == 3 and all(p.solution.strip() in t for p, (_, t) in zip(ps, got))
    with_plan = sft.pairs(ps, "coder", ["planner", "coder"])
    alone = sft.pairs(ps, "coder", ["coder"])
    assert [t for _, t in with_plan] == [t for _, t in alone] == [coder.sft_target(p) for p in ps]
    assert all(p.plan.strip() in c[-1]["content"] for p, (c, _) in zip(ps, with_plan))
    assert not any(p.plan.strip() in c[-1]["content"] for p, (c, _) in zip(ps, alone))
    assert roles.sft_roles(["retriever", "planner", "coder", "debugger"]) == ["planner", "coder", "debugger"]
    assert sft.pairs(ps, "retriever", ["retriever", "planner", "coder"]) == []
