"""The Retrieval role: problem -> k similar, distinct problems, each with a short plan (never code).

MapCoder-style recall (Islam et al. 2024, sec. 3.1): no corpus, the model recalls problems it knows.
The three pieces of every role (roles.py):
  messages(problem, upstream)  the chat prompt (upstream is unused: the Retriever comes first);
  parse(text)                  completion -> [{"problem": str, "plan": str}, ...] (at most K; [] when
                               unparseable: the Planner then gets no examples and the Retriever reward 0);
  sft_target(problem)          None: recall has no reference (our choice; corpus mode needs no training);
                               the registry (roles.py) holds None for it, so sft.py skips the Retriever.
Its place in the tree (tree.py): first level, R retrievals per problem; credit = the mean of the final
rewards below it, normalised among the R retrievals of the problem (grpo.tree_advantages).
`with_examples(chat, examples)` puts the examples into the Planner's prompt.

Format, our choice for a 135M model: plain numbered sections, one label per line, no XML or JSON to
balance (MapCoder's XML was reported to fail to parse with small models):

    Problem 1: Return the sum of a list.
    Plan 1:
    1. Start a total at 0.
    2. Add each number.

Corpus mode (`--retrieval corpus`, `Corpus`): the k most similar training problems by BM25 over the
statements (the bm25s package, imported only here and only then), with their reference plans; never
the problem itself nor a problem of the set being evaluated. No Retriever node is trained then.
"""
import re

import planner

K = 2  # examples recalled per retrieval (MapCoder's default k is 3-5 with large models; ours: 2, short)
MAX_PROBLEM_CHARS = 300
SYSTEM = ("You are a programming tutor. You recall programming problems similar to a given one and "
          "write a short plan for each, in plain English. You never write code.")
HEADER = re.compile(r"^\s*[*#]*\s*problem\s*(\d+)\s*[:.)-]\s*\**\s*(.*)$", re.I)  # markdown bold / # tolerated
PLAN = re.compile(r"^\s*[*#]*\s*plan\s*(\d+)?\s*[:.)-]\s*\**\s*(.*)$", re.I)


def messages(problem, upstream: dict | None = None, k: int = K) -> list[dict]:
    """Ask for k similar, distinct problems with a short plan each, in the numbered format above."""
    example = "Problem 1: <one line>\nPlan 1:\n1. <step>\n2. <step>"
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": (
            f"Problem:\n{problem.prompt.strip()}\n\n"
            f"Recall {k} different programming problems that are similar to this one. For each, write one "
            f"line 'Problem N: ...' and then 'Plan N:' with 2 to 4 numbered steps, no code. Format:\n{example}")},
    ]


def parse(text: str, k: int = K) -> list[dict]:
    """Completion -> at most k {"problem", "plan"} examples, in order; a section without a problem line
    or without a non-empty plan (after planner.parse drops code) is skipped; repeated problems too.

    >>> parse("Problem 1: Sum a list.\\nPlan 1:\\n1. Add each.\\nProblem 2: Sum a list.\\nPlan 2:\\n1. Again.")
    [{'problem': 'Sum a list.', 'plan': '1. Add each.'}]
    >>> parse("def f(): pass")
    []
    """
    text = re.sub(r"```.*?(```|$)", "", text, flags=re.S)  # code never goes downstream
    sections, cur = [], None
    for line in text.splitlines():
        if m := HEADER.match(line):
            cur = {"problem": m.group(2).strip(), "lines": []}
            sections.append(cur)
        elif cur is not None and (m := PLAN.match(line)):
            if m.group(2).strip():
                cur["lines"].append(m.group(2).strip())
        elif cur is not None:
            cur["lines"].append(line)
    out, seen = [], set()
    for s in sections:
        plan = planner.parse("\n".join(s["lines"]))
        key = s["problem"].lower()
        if s["problem"] and plan and key not in seen:
            seen.add(key)
            out.append({"problem": s["problem"][:MAX_PROBLEM_CHARS], "plan": plan})
    return out[:k]


def sft_target(problem) -> None:
    """No cold-start target for recall (see the module docstring)."""
    return None


def format_examples(examples: list[dict]) -> str:
    """The examples as the Planner reads them (the same numbered format)."""
    return "\n".join(f"Problem {i}: {e['problem']}\nPlan {i}:\n{e['plan']}" for i, e in enumerate(examples, 1))


def with_examples(chat: list[dict], examples: list[dict]) -> list[dict]:
    """The Planner's chat with the examples put before its problem ([] -> the chat unchanged)."""
    if not examples:
        return chat
    *head, last = chat
    block = f"Similar problems and their plans (for ideas only):\n{format_examples(examples)}\n\n"
    return [*head, {**last, "content": block + last["content"]}]


class Corpus:
    """BM25 over training statements (bm25s, Lù 2024), for `--retrieval corpus`.

    problems: the training problems (only those with a plan are used); exclude: problems whose task ids
    and statements must never be returned (the set being evaluated). Raises ImportError with the pip
    line when bm25s is missing.
    """

    def __init__(self, problems, exclude=()):
        try:
            import bm25s
        except ImportError:
            raise ImportError("--retrieval corpus needs bm25s: pip install bm25s") from None
        banned = {p.task_id for p in exclude} | {p.prompt.strip() for p in exclude}
        self.docs = [p for p in problems if p.plan and p.task_id not in banned and p.prompt.strip() not in banned]
        if not self.docs:
            raise ValueError("--retrieval corpus: no training problem with a plan to retrieve from")
        self._bm25s = bm25s
        self.index = bm25s.BM25()
        self.index.index(bm25s.tokenize([p.prompt for p in self.docs], stopwords="en", show_progress=False),
                         show_progress=False)

    def search(self, problem, k: int = K) -> list[dict]:
        """The k most similar problems (BM25 over the statements), never `problem` itself."""
        n = min(len(self.docs), k + 1)
        query = self._bm25s.tokenize([problem.prompt], stopwords="en", show_progress=False)
        ids, _ = self.index.retrieve(query, k=n, show_progress=False)
        hits = [self.docs[i] for i in ids[0].tolist()]
        hits = [p for p in hits if p.task_id != problem.task_id and p.prompt.strip() != problem.prompt.strip()]
        return [{"problem": p.prompt.strip()[:MAX_PROBLEM_CHARS], "plan": p.plan} for p in hits[:k]]
