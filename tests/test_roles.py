"""Planner/Coder text handling: code extraction, plan post-processing, the program the sandbox runs."""
import re

import coder
import data
import planner

PROB = data.Problem("t/0", 'from typing import List\n\ndef f(xs: List[int]) -> int:\n    """Sum."""\n', "f",
                    ("assert f([1]) == 1",))


def test_extract_last_python_block():
    text = "First:\n```python\ndef f(): return 1\n```\nBetter:\n```python\ndef f(): return 2\n```\nbye"
    assert coder.extract_code(text) == "def f(): return 2\n"


def test_extract_prefers_python_tag_over_other_tags():
    text = "```python\nx = 1\n```\n```text\nnot code\n```"
    assert coder.extract_code(text) == "x = 1\n"


def test_extract_any_tag_when_no_python_block():
    assert coder.extract_code("```js\nlet a;\n```") == "let a;\n"


def test_extract_unclosed_fence():
    assert coder.extract_code("Sure!\n```python\ndef f():\n    return") == "def f():\n    return"


def test_extract_closing_fence_without_opening_one():
    assert coder.extract_code("def f(d):\n    return sorted(d)\n```\nThis sorts.") == "def f(d):\n    return sorted(d)\n"


def test_extract_without_fence_from_first_def():
    assert coder.extract_code("Here it is\ndef f():\n    return 3") == "def f():\n    return 3"


def test_extract_nothing():
    assert coder.extract_code("I cannot help with that.") is None
    assert coder.extract_code("```python\n   \n```") is None


def test_program_prepends_python_prompt_but_not_prose():
    assert coder.program(PROB, "def f(xs):\n    return sum(xs)\n") == PROB.prompt + "\ndef f(xs):\n    return sum(xs)\n"
    prose = data.Problem("t/1", "Write a function f that sums a list.", "f", ("assert f([1]) == 1",))
    assert coder.program(prose, "def f(xs): return 1") == "def f(xs): return 1"
    assert coder.program(PROB, None) is None


def test_stop_pattern_needs_a_closed_block():
    stop = re.compile(coder.STOP, re.S)
    assert not stop.search("```python\ndef f():")
    assert stop.search("```python\ndef f():\n    pass\n```")


def test_coder_prompts_with_and_without_plan():
    direct = coder.messages(PROB)[-1]["content"]
    planned = coder.messages(PROB, "1. Add the numbers.")[-1]["content"]
    assert "Plan:" not in direct and "Plan:\n1. Add the numbers." in planned
    assert "`f`" in direct and PROB.prompt.strip() in planned


def test_planner_strips_code():
    text = ("1. Read the list.\n```python\nfor x in xs:\n    s += x\n```\n2. Add each number.\n"
            "def f(xs):\n    return sum(xs)\n3. Return the total.")
    assert planner.parse(text) == "1. Read the list.\n2. Add each number.\n3. Return the total."


def test_planner_keeps_at_most_max_steps():
    text = "\n".join(f"{i}. step {i}" for i in range(1, 20))
    assert planner.parse(text).splitlines() == [f"{i}. step {i}" for i in range(1, planner.MAX_STEPS + 1)]


IO_PROB = data.Problem("io/0", "Read two integers a and b on one line.\n\nInput\nOne line: a b.\n\nOutput\nPrint a + b.\n",
                       "", (), io_tests=(("1 2\n", "3\n"),))


def test_io_problem_prompts_ask_for_a_stdin_stdout_program():
    """Catches: an I/O problem sent the function prompt (it would ask for the function ``,
    an entry point that does not exist) or not told to read stdin and print to stdout in the
    statement's format; and the function prompts must stay as they were."""
    coder_direct = coder.messages(IO_PROB)[-1]["content"]
    coder_planned = coder.messages(IO_PROB, "1. Read a and b.\n2. Print a + b.")[-1]["content"]
    plan_ask = planner.messages(IO_PROB)[-1]["content"]
    assert coder_direct == (f"Problem:\n{IO_PROB.prompt.strip()}\n\n"
                            "Write a complete Python program, not just a function: it reads the input from standard "
                            "input and prints the answer to standard output, in the input and output format given in "
                            "the problem. Answer in one ```python code block.")
    assert coder_planned.startswith(f"Problem:\n{IO_PROB.prompt.strip()}\n\nPlan:\n1. Read a and b.\n2. Print a + b."
                                    "\n\nFollow the plan. Write a complete Python program, not just a function")
    assert plan_ask == (f"Problem:\n{IO_PROB.prompt.strip()}\n\nWrite a short plan (2 to 5 numbered steps, no code) "
                        "for a program that reads the input from standard input and prints the answer to standard "
                        "output, in the input and output format given in the problem.")
    for text in (coder_direct, coder_planned, plan_ask):
        assert "`" not in text.replace("```python", "") and "function `" not in text
    assert planner.messages(PROB)[-1]["content"].endswith("no code) for the function `f`.")
    assert coder.messages(PROB)[-1]["content"].endswith("Write the complete Python function `f` in one ```python code block.")


def test_function_problem_without_entry_point_names_no_function():
    """Catches: a hand-made function problem with entry_point "" prompted for the function ``."""
    anon = data.Problem("t/2", "Define f and g.", "", ("assert f() == g()",))
    assert planner.messages(anon)[-1]["content"].endswith("no code) for the solution.")
    assert coder.messages(anon)[-1]["content"].endswith("Write the complete Python code in one ```python code block.")


def test_program_is_the_code_alone_for_io_problems():
    """Catches: the statement prepended to an I/O program when it happens to parse as Python
    (here a statement that is a valid expression line), which would print or crash first."""
    parses = data.Problem("io/1", "print('statement')", "", (), io_tests=(("", "x\n"),))
    assert coder.program(parses, "print('x')") == "print('x')"
    assert coder.program(IO_PROB, "print(sum(map(int, input().split())))") == "print(sum(map(int, input().split())))"
    assert coder.program(parses, None) is None


def test_extract_io_programs_without_a_def():
    """Catches: a stdin/stdout program (no def, no import) lost when the block is never closed
    or never opened, or when there is no fence at all; while prose alone still gives None and
    a def keeps priority over an earlier assignment-looking line."""
    prog = "n = int(input())\nprint(n * 2)"
    assert coder.extract_code(f"Sure!\n```python\n{prog}") == prog  # generation stopped inside the block
    assert coder.extract_code(f"{prog}\n```\nDone.") == prog + "\n"  # the opening fence forgotten
    assert coder.extract_code(f"Here is the program:\n{prog}") == prog
    assert coder.extract_code("a, b = map(int, input().split())\nprint(a + b)") == "a, b = map(int, input().split())\nprint(a + b)"
    assert coder.extract_code("print(sum(map(int, input().split())))") == "print(sum(map(int, input().split())))"
    assert coder.extract_code("x == y is what we check.\nNo code here.") is None
    assert coder.extract_code("Result = the sum\ndef f(xs):\n    return sum(xs)") == "def f(xs):\n    return sum(xs)"


def test_leetcode_style_program_gets_typing_imports():
    """Catches: a right LeetCode-style answer (annotated `List[int]`, no import, as its starter
    code is) failing with NameError because the typing names its graders provide are missing;
    and other function problems must stay untouched."""
    import sandbox

    lc = data.Problem("livecodebench/1", "Return sum(nums) + k.\n\nclass Solution:\n    def addAll(self, nums: List[int], k: int) -> int:\n",
                      "addAll", ("assert Solution().addAll([1, 2], 3) == 6",))
    code = "class Solution:\n    def addAll(self, nums: List[int], k: int) -> int:\n        return sum(nums) + k\n"
    assert coder.program(lc, code) == "from typing import *\n" + code
    right, bare = sandbox.run_many([dict(program=coder.program(lc, code), tests=list(lc.tests)),
                                    dict(program=code, tests=list(lc.tests))])
    assert (right.verdict, bare.verdict) == ("passed", "error") and "List" in bare.detail
    prose = data.Problem("t/1", "Write a function f that sums a list.", "f", ("assert f([1]) == 1",))
    assert coder.program(prose, "def f(xs): return 1") == "def f(xs): return 1"
