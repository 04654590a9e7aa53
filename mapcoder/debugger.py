"""The Debugger role: a program that fails a VISIBLE test -> a one-line diagnosis and a corrected program.

The three pieces of every role (roles.py):
  messages(problem, upstream)  the chat prompt; upstream = {"plan": str | None, "program": the failing
                               program, "feedback": feedback(problem, visible result)};
  parse(text)                  completion -> (diagnosis, code | None);
  sft_target(problem)          the cold-start completion: a diagnosis + the reference solution, for the
                               prompt `sft_upstream(problem)` builds from a MUTATED reference (None
                               when the problem has no solution, or no mutation of it fails a test).
Its place in the tree (tree.py): under each program that fails its visible tests, D repairs; they form
one baseline group (grpo.debugger_advantages) and are rewarded on ALL tests (pass rate, or gain).

Visible vs hidden, the rule (`visible_tests`): the Debugger sees the feedback of the visible tests only,
the first test of each problem -- what a user has at inference, and what MBPP's prompt already shows:
  I/O problem                  io_tests[0]
  HumanEval (tests = check(f)) the first top-level `assert` of check() that calls `candidate`, with
                               candidate renamed to the entry point and the message dropped (its first
                               listed example; 161 of 164 problems have one, the other 3 -- 32, 38, 50 --
                               loop over generated inputs: no visible test, so they are never repaired)
  other function problems      tests[0]
The program is run on the visible tests alone (sandbox.run_program) for the feedback; the hidden tests'
calls, values and verdicts never reach a prompt (CoMLRL's Debugger feedback quoted its evaluation tests;
tests/mapcoder/test_debugger.py asserts a hidden input never appears in any Debugger prompt).
Feedback is capped at FEEDBACK_CHARS = 500 characters, MapCoder's cap on test feedback.
"""
import ast
import re

import coder
import sandbox

FEEDBACK_CHARS = 500
SYSTEM = ("You are an expert Python programmer who fixes bugs. You answer with one line starting with "
          "'Bug:' that says what is wrong, then the whole corrected program in one ```python code block.")
STOP = coder.STOP  # generation stops once the fenced block is closed


def visible_tests(problem) -> tuple[list, list]:
    """(function tests, io tests) the Debugger may see: the first test of the problem (rule above), or an I/O
    problem's public tests when its set keeps them apart from the scored ones (the Gen-Verse sets)."""
    if problem.public_tests:
        return [], list(problem.public_tests)
    if problem.is_io:
        return [], list(problem.io_tests[:1])
    if problem.tests and problem.tests[0].startswith("check(") and "def check" in problem.setup:
        first = _first_check_assert(problem.setup, problem.entry_point)
        return ([first] if first else []), []
    return list(problem.tests[:1]), []


def _first_check_assert(setup: str, entry_point: str) -> str | None:
    """HumanEval: the first top-level `assert ...candidate(...)...` of check(), as `assert <test>` on the
    entry point (`assert True, 'This prints ...'` lines are skipped)."""
    try:
        tree = ast.parse(setup)
    except SyntaxError:
        return None
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    for node in check.body if check else []:
        if isinstance(node, ast.Assert) and any(isinstance(x, ast.Name) and x.id == "candidate"
                                                for x in ast.walk(node.test)):
            return "assert " + re.sub(r"\bcandidate\b", entry_point, ast.unparse(node.test))
    return None


def visible_job(problem, program: str | None, timeout_s: float = 4.0) -> dict | None:
    """sandbox.run_program kwargs that run the program on the visible tests alone (None: no visible test)."""
    tests, io_tests = visible_tests(problem)
    if not tests and not io_tests:
        return None
    job = problem.sandbox_job(program, timeout_s)
    job.update(tests=tests, io_tests=io_tests)
    return job


def run_visible(problem, program: str | None, timeout_s: float = 4.0) -> sandbox.Result | None:
    """The program run on the visible tests alone; None when the problem has no visible test."""
    job = visible_job(problem, program, timeout_s)
    return None if job is None else sandbox.run_program(**job)


def feedback(problem, result: sandbox.Result | None) -> str:
    """What the Debugger is told about its program's visible tests, at most FEEDBACK_CHARS characters:
    per failing visible test its call (function) or input (I/O), the expected value or output, and the
    actual value, or the exception / verdict. "" when every visible test passed (no repair is asked).

    >>> import data
    >>> p = data.Problem("t", "Double x.", "f", ("assert f(2) == 4", "assert f(9) == 18"))
    >>> print(feedback(p, sandbox.Result("failed", 0, 1, 0.0, 0.0, 0.0, "test 1 failed: assert f(2) == 4 (got 3)", ("failed",))))
    Test: f(2)
    Expected: 4
    Got: 3
    """
    if result is None or result.verdict == "passed":
        return ""
    tests, io_tests = visible_tests(problem)
    got = _actual(result.detail, tests[0] if tests else None) or result.verdict
    if io_tests:
        given, want = io_tests[0]
        text = f"Input:\n{given.rstrip()}\nExpected output:\n{want.rstrip()}\nGot: {got}"
    else:
        from sandboxing.kinds import _plan

        kind, expr, expected = _plan(tests[0])
        text = f"Test: {expr}\nExpected: {expected!r}\nGot: {got}" if kind == "value" else f"Test: {tests[0]}\nGot: {got}"
    return text[:FEEDBACK_CHARS]


def _actual(detail: str, test: str | None) -> str:
    """The actual value, or the error, out of a one-test Result.detail (judge.judge's wording):
    'test 1 failed: <test> (got 3)' -> '3'; 'test 1 failed: <test> (msg)' -> 'assertion failed (msg)';
    'test 1: ZeroDivisionError: ...' -> 'ZeroDivisionError: ...'; "I/O test 1: wrong output: got '5\\n'"
    -> "'5\\n'"; anything else (the program did not load) as it is."""
    if test is not None and detail.startswith(f"test 1 failed: {test}"):
        rest = detail[len(f"test 1 failed: {test}"):].strip()
        if rest.startswith("(got ") and rest.endswith(")"):
            return rest[5:-1]
        return ("assertion failed " + rest).strip()
    for prefix in ("I/O test 1: wrong output: got ", "I/O test 1: ", "test 1: "):
        if detail.startswith(prefix):
            return detail[len(prefix):]
    return detail


def messages(problem, upstream: dict) -> list[dict]:
    """The prompt: problem, plan (if any), the failing program and its visible feedback."""
    ask = f"Problem:\n{problem.prompt.strip()}\n\n"
    if upstream.get("plan"):
        ask += f"Plan:\n{upstream['plan'].strip()}\n\n"
    ask += (f"Program:\n```python\n{(upstream.get('program') or '').strip()}\n```\n\n"
            f"It fails this test:\n{upstream.get('feedback', '').strip()}\n\n"
            "Say in one line what is wrong ('Bug: ...'), then write the whole corrected program in one "
            "```python code block.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask}]


def parse(text: str) -> tuple[str, str | None]:
    """Completion -> (diagnosis: the first non-empty line outside code, <= 200 chars; code | None).

    >>> parse("Bug: off by one.\\n```python\\ndef f(x):\\n    return 2 * x\\n```")
    ('Bug: off by one.', 'def f(x):\\n    return 2 * x\\n')
    """
    prose = re.sub(r"```.*?(```|$)", "", text, flags=re.S)
    line = next((ln.strip() for ln in prose.splitlines() if ln.strip()), "")
    return line[:200], coder.extract_code(text)


def program(problem, code: str | None) -> str | None:
    """What the sandbox runs for a repair: as for the Coder (coder.program)."""
    return coder.program(problem, code)


# --- cold-start SFT: (a mutated reference -> the reference) ----------------------------------------

MUTATIONS = [(r" \+ 1\b", " + 2"), (r" - 1\b", " - 2"), (r"<=", "<"), (r">=", ">"), (r" < ", " <= "),
             (r" > ", " >= "), (r"==", "!="), (r" \+ ", " - "), (r"\bmax\(", "min("), (r"\bmin\(", "max("),
             (r"\bTrue\b", "False"), (r"\[1:\]", "[2:]"), (r"\breturn (?!None)", "return None and ")]


def mutants(solution: str):
    """Simple single-site mutations of a reference solution (first match of each rule), in MUTATIONS
    order: the wrong programs of the Debugger's SFT pairs. Yields (rule index, mutated code)."""
    for i, (pattern, repl) in enumerate(MUTATIONS):
        if re.search(pattern, solution):
            yield i, re.sub(pattern, repl, solution, count=1)


def sft_upstream(problem, timeout_s: float = 4.0) -> dict | None:
    """The Debugger's SFT prompt inputs: the first mutant of the reference that FAILS its visible test,
    with that feedback and the reference plan; None when there is none (no solution, no such mutant)."""
    if not problem.solution:
        return None
    for _, wrong in mutants(problem.solution):
        prog = program(problem, wrong)
        text = feedback(problem, run_visible(problem, prog, timeout_s))
        if text:
            return {"plan": problem.plan, "program": wrong, "feedback": text}
    return None


def sft_target(problem) -> str | None:
    """The completion for the prompt of sft_upstream: a fixed diagnosis line and the reference solution
    (our choice: the mutation is not described; the model learns the format and to return the fix)."""
    if not problem.solution:
        return None
    return f"Bug: the program does not do what the problem asks.\n```python\n{problem.solution.strip()}\n```"
