"""mapcoder/retriever.py: the recall format a 135M model can keep, parse, the Planner's prompt with examples, and
the optional BM25 corpus mode (bm25s; skipped without it)."""
import subprocess
import sys

import pytest

import data
import planner
from mapcoder import retriever

P = data.Problem("t/sum", "Write total(xs) that returns the sum of a list.", "total", ("assert total([1]) == 1",))


def test_parse_numbered_sections():
    """Catches: a plan that keeps code (the Planner must never get code), a repeated problem counted
    twice, more than k examples, labels in another case or with markdown bold refused."""
    text = ("Problem 1: Sum a list.\nPlan 1:\n1. Start at 0.\n2. Add each.\n```python\nsum(xs)\n```\n"
            "**Problem 2:** Multiply a list.\n**Plan 2:** 1. Start at 1.\n2. Multiply each.\n"
            "problem 3: Sum a list.\nplan 3:\n1. Same again.\nProblem 4: Max of a list.\nPlan 4:\n1. Keep the best.")
    assert retriever.parse(text) == [{"problem": "Sum a list.", "plan": "1. Start at 0.\n2. Add each."},
                                     {"problem": "Multiply a list.", "plan": "1. Start at 1.\n2. Multiply each."}]
    assert [e["problem"] for e in retriever.parse(text, k=5)] == ["Sum a list.", "Multiply a list.", "Max of a list."]


@pytest.mark.parametrize("text", ["", "I think you should add the numbers.", "Problem 1: Sum.\nPlan 1:\n", "```python\nx = 1\n```",
                                  "Plan 1:\n1. Add."])
def test_unparseable_gives_no_examples(text):
    """Catches: prose, a problem without a plan, code only, or a plan without its problem taken as an example."""
    assert retriever.parse(text) == []


def test_examples_go_before_the_planners_problem():
    """Catches: examples replacing the problem, examples sent to the Coder, an empty list changing the prompt."""
    chat = planner.messages(P)
    ex = [{"problem": "Sum a list.", "plan": "1. Add each."}]
    user = retriever.with_examples(chat, ex)[-1]["content"]
    assert user == ("Similar problems and their plans (for ideas only):\nProblem 1: Sum a list.\nPlan 1:\n1. Add each.\n\n"
                    + chat[-1]["content"])
    assert retriever.with_examples(chat, []) == chat and chat[-1]["content"].startswith("Problem:")
    ask = retriever.messages(P, {})[-1]["content"]
    assert "Recall 2 different programming problems" in ask and "no code" in ask and P.prompt in ask
    assert retriever.sft_target(P) is None


def test_bm25s_is_imported_only_in_corpus_mode():
    """Catches: a top-level `import bm25s` (training without it would fail, and it is optional)."""
    code = "import sys, roles, tree; from mapcoder import retriever; assert 'bm25s' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(retriever.__file__).rsplit("/", 2)[0])
    assert out.stdout.strip() == "ok", out.stderr[-500:]


def test_corpus_mode_without_bm25s_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)  # import bm25s -> ImportError
    with pytest.raises(ImportError, match="pip install bm25s"):
        retriever.Corpus(data.load("train"))


def test_corpus_mode_never_returns_the_problem_nor_the_evaluated_set():
    """BM25 over the training statements: is_even's nearest neighbours are is_odd-like problems, never
    is_even itself, never a problem of the excluded (evaluated) set. Catches: the query problem returned as
    its own example (a copy of the answer's plan), the evaluated set in the corpus."""
    pytest.importorskip("bm25s")
    train = data.load("train")
    query = next(p for p in train if p.entry_point == "is_even")
    odd = next(p for p in train if p.entry_point == "is_odd")
    corpus = retriever.Corpus(train, exclude=[odd])
    hits = corpus.search(query, k=2)
    assert len(hits) == 2 and all(h["plan"] for h in hits)
    assert query.prompt.strip()[:300] not in [h["problem"] for h in hits]
    assert odd.prompt.strip()[:300] not in [h["problem"] for h in hits]
    with_odd = retriever.Corpus(train).search(query, k=1)
    assert with_odd[0]["problem"] == odd.prompt.strip()[:300]
