"""The Planner role: problem -> a short plan in numbered prose steps.

A role is three small pieces (see coder.py for the other one):
  messages(problem)  the chat prompt;  parse(text)  its completion -> what goes downstream;
  sft_target(problem)  the cold-start SFT completion. Its reward and baseline group are formed in
  tree.advantages -> grpo.tree_advantages: a plan is worth the mean reward of the codes written from it,
  normalised among the other plans for the same problem (grpo.planner_advantages writes out that case).

Code inside a plan is STRIPPED (our choice): the Coder must never receive code from the Planner,
otherwise the Planner would learn to solve the task itself and "planning" would be a copy step.
Stripping keeps the reward one number (a penalty would need its own weight to tune).
"""
import re

MAX_STEPS = 8
MAX_CHARS = 800

SYSTEM = ("You are a planning assistant for Python programming problems. "
          "You never write code. You answer with a short numbered list of steps in plain English.")


IO_TARGET = ("a program that reads the input from standard input and prints the answer to standard output, "
             "in the input and output format given in the problem")


def messages(problem) -> list[dict]:
    """Chat messages asking for a plan for `problem` (a data.Problem): for the function
    `entry_point`, or, for an I/O problem (no function at all), for a whole program that reads
    standard input and writes standard output in the statement's format."""
    if problem.is_io:
        target = IO_TARGET
    else:
        target = f"the function `{problem.entry_point}`" if problem.entry_point else "the solution"
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": (
            f"Problem:\n{problem.prompt.strip()}\n\n"
            f"Write a short plan (2 to 5 numbered steps, no code) for {target}.")},
    ]


def parse(text: str) -> str:
    """Completion -> plan: fenced code blocks and code-looking lines removed, at most MAX_STEPS
    non-empty lines and MAX_CHARS characters kept.

    >>> parse("1. Loop over xs.\\n```python\\nfor x in xs: pass\\n```\\n    return s\\n2. Return the sum.")
    '1. Loop over xs.\\n2. Return the sum.'
    """
    text = re.sub(r"```.*?(```|$)", "", text, flags=re.S)  # fenced blocks, closed or not
    lines = [ln.rstrip() for ln in text.splitlines()]
    code_like = re.compile(r"^\s*(def |return |import |from \w+ import|for .*:\s*$|if .*:\s*$|while .*:\s*$|print\()")
    kept = [ln.strip() for ln in lines if ln.strip() and not code_like.match(ln) and not ln.startswith("    ")]
    return "\n".join(kept[:MAX_STEPS])[:MAX_CHARS]


def sft_target(problem) -> str:
    """Cold-start SFT completion for the Planner: the reference plan."""
    return problem.plan
