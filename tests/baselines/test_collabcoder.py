"""CollabCoder (baselines/collabcoder.py): the decision rule by hand, and a scripted fake model (fixed replies per
problem and stage) that walks the plan branch, the code branch and the parse-error / tie fallback in one
lock-step batch, with the exact model calls; then eval.py's harness on the tiny Qwen2."""
from argparse import Namespace

import pytest

import coder
import eval as evaluation
import sandbox
from baselines import collabcoder
from data import problem

SCORES = ('{"update plan": {"plan": 0.9, "code": 0.2, "content": 0.6, "plan-code": 0.5, "plan-content": 0.8, '
          '"code-content": 0.4}, "update code only": {"plan": 0.1, "code": 0.9, "content": 0.5, "plan-code": 0.3, '
          '"plan-content": 0.6, "code-content": 0.9}}')


def test_decision_by_hand():
    """score(d) = sum_a w_a conf_d(a) prod_{b != a} cons_d(a, b), w = 0.3 / 0.4 / 0.3:
    update plan       0.3*0.9*(0.5*0.8) + 0.4*0.2*(0.5*0.4) + 0.3*0.6*(0.8*0.4) = 0.108 + 0.016 + 0.0576 = 0.1816
    update code only  0.3*0.1*(0.3*0.6) + 0.4*0.9*(0.3*0.9) + 0.3*0.5*(0.6*0.9) = 0.0054 + 0.0972 + 0.081 = 0.1836
    (equal weights would give update plan 0.6052 / 3 > 0.5454 / 3: the code analyst's 0.4 decides)."""
    d, fell, s = collabcoder.decide("```json\n" + SCORES + "\n```")
    assert (d, fell) == ("update code only", False)
    assert s == pytest.approx({"update plan": 0.1816, "update code only": 0.1836}, abs=1e-12)
    nested = ('{"confidence_scores": {"update plan": {"plan": {"confidence": 1.0, "reasoning": "x"}, "code": '
              '{"confidence": 1.0}, "content": {"confidence": 1.0}}}, "consistency_scores": {"update plan": '
              '{"code-plan": {"consistency": 0.5}, "plan-content": {"consistency": 1}, "code-content": {"consistency": 1}}}}')
    d, fell, s = collabcoder.decide(nested)  # their form; a pair named in either order; a missing decision scores 0
    assert (d, fell) == ("update plan", False) and s == pytest.approx({"update plan": 0.3 * 0.5 + 0.4 * 0.5 + 0.3,
                                                                       "update code only": 0.0})
    assert collabcoder.decide("the plan is fine, fix the code") == ("update code only", True, {})
    assert collabcoder.decide('{"update plan": {"plan": "high"}}')[:2] == ("update code only", True)  # 0 = 0: a tie


def prob(name, op):
    return problem.Problem(f"x/{name}", f"def {name}(a, b):\n    \"\"\"[{name}] Return a {op} b.\"\"\"\n", name,
                           (f"assert {name}(2, 3) == {eval(f'2 {op} 3')}", f"assert {name}(4, 1) == {eval(f'4 {op} 1')}"))


def fenced(name, op):
    return f"```python\ndef {name}(a, b):\n    return a {op} b\n```"


# per problem, per stage: the replies in order. add: wrong code, the plan branch fixes it in round 1;
# sub: wrong code, the code branch fixes it in round 1; mul: the scoring reply never parses (round 1) or
# ties (round 2): both rounds fall back to revising the code, which stays wrong
SCRIPT = {
    "add": {"understanding": ["add two numbers"], "plan": ["## Plan\n1. subtract"], "code": [fenced("add", "-"), fenced("add", "+")],
            "analysis": ["### Plan Analysis\n[add] the plan subtracts\n### Code Analysis\nfollows the plan\n### Content Analysis\nagree"],
            "scoring": ['{"update plan": {"plan": 1, "code": 1, "content": 1, "plan-code": 1, "plan-content": 1, "code-content": 1}}'],
            "strategy": ["fix the approach"], "revise_plan": ["## New Plan\n1. return a + b"]},
    "sub": {"understanding": ["subtract"], "plan": ["1. return a - b"], "code": [fenced("sub", "+")],
            "analysis": ["### Plan Analysis\n[sub] fine\n### Code Analysis\nuses + not -\n### Content Analysis\ncode differs"],
            "scoring": [SCORES], "strategy": ["fix the operator"], "revise_code": [fenced("sub", "-")]},
    "mul": {"understanding": ["multiply"], "plan": ["1. multiply"], "code": [fenced("mul", "+")],
            "analysis": ["### Plan Analysis\n[mul] ?", "### Code Analysis\n[mul] no idea"], "scoring": ["I am not sure.", '{"update plan": {}}'],
            "strategy": ["try again", "try harder"], "revise_code": [fenced("mul", "-"), "no code"]},
}


def scripted():
    calls, batches, prompts = {}, [], []
    used = {(n, st): 0 for n in SCRIPT for st in collabcoder.STAGES}

    def generate(stage, chats):
        batches.append((stage, len(chats)))
        out = []
        for chat in chats:
            text = " ".join(m["content"] for m in chat)
            prompts.append(text)
            name = next(n for n in SCRIPT if f"[{n}]" in text)
            out.append(SCRIPT[name][stage][used[name, stage]])
            used[name, stage] += 1
            calls[name] = calls.get(name, 0) + 1
        return out
    return generate, calls, batches, prompts


def test_scripted_model_walks_both_branches_and_the_fallback():
    problems = [prob("add", "+"), prob("sub", "-"), prob("mul", "*")]
    generate, calls, batches, prompts = scripted()
    programs, st = collabcoder.solve(problems, generate, lambda jobs: sandbox.run_many(jobs, workers=2), rounds=2)
    # add: understanding, plan, code | analysis, scoring, strategy, revise_plan, code -> passes: 8 calls
    # sub: understanding, plan, code | analysis, scoring, strategy, revise_code -> passes: 7 calls
    # mul: understanding, plan, code | 2 x (analysis, scoring, strategy, revise_code): 11 calls
    assert calls == {"add": 8, "sub": 7, "mul": 11} and st["calls"] == [8, 7, 11]
    assert batches == [("understanding", 3), ("plan", 3), ("code", 3), ("analysis", 3), ("scoring", 3),
                       ("strategy", 3), ("revise_plan", 1), ("code", 1), ("revise_code", 2),
                       ("analysis", 1), ("scoring", 1), ("strategy", 1), ("revise_code", 1)]
    assert (st["decisions"], st["fallbacks"], st["plan_updates"]) == (4, 2, 1)
    assert st["rounds"] == [1, 1, 2] and st["passed_visible"] == [True, True, False]
    assert programs[0] == coder.program(problems[0], "def add(a, b):\n    return a + b\n")
    assert programs[1] == coder.program(problems[1], "def sub(a, b):\n    return a - b\n")
    # mul never passed: the best-scored program is the first of the equals (all pass rate 0)
    assert programs[2] == coder.program(problems[2], "def mul(a, b):\n    return a + b\n")
    # the reasoning trajectory is carried: round 2's strategy prompt holds round 1's strategy
    assert any("[mul]" in p and "Previous strategy\ntry again" in p for p in prompts)
    # the hidden tests never reach a prompt (the visible one is the first test)
    assert not any("(4, 1)" in p for p in prompts)
    assert all(sandbox.run_program(p, problems[i].tests).verdict == "passed" for i, p in enumerate(programs[:2]))


def test_eval_harness_counts_every_call_on_the_tiny_model(tiny_policy, tokenizer):
    """eval.generate_programs in mode collab (collabcoder.programs) on the tiny random Qwen2 (adapters off):
    nothing it writes parses, so every problem runs both rounds, each falling back: 3 + 2 x 4 = 11 calls per problem, fallback rate 1."""
    args = Namespace(n=1, batch_size=2, collab_rounds=2, collab_tokens=4, max_plan_tokens=4, max_code_tokens=4,
                     temperature=0.0, workers=2, sandbox_timeout=2.0)
    problems = [prob("add", "+"), prob("sub", "-")]
    costs = []  # (calls, tokens) per problem, as the paper table reads them; tokens: None (calls are shared)
    programs, stats = evaluation.generate_programs(tiny_policy, tokenizer, problems, "collab", args, None, costs)
    assert len(programs) == 2 and all(len(p) == 1 for p in programs)
    assert stats["calls_per_problem"] == 11 and stats["fallback_rate"] == 1.0
    assert costs == [(11, None), (11, None)] and 0 < stats["tokens_per_problem"] <= 11 * 8  # budgets: 4, scoring 8
    assert stats["decisions"] == 4 and stats["plan_updates"] == 0


def test_a_stored_batch_is_read_back_not_run_again(tiny_policy, tokenizer, tmp_path):
    """collab on 2 problems, one a batch, with eval's store (cache.Batches): the first problem alone first
    (11 calls, stored), then both: only the second problem's 11 calls are made, and programs, stats and costs
    equal a run on both without a store. Catches: collab left out of the batch store (a Ctrl-C in 2 hours of
    CollabCoder lost them all), a stored batch whose counts are not added back."""
    from measure import cache

    args = Namespace(n=1, batch_size=1, collab_rounds=2, collab_tokens=4, max_plan_tokens=4, max_code_tokens=4,
                     temperature=0.0, workers=2, sandbox_timeout=2.0, model="tiny")
    problems = [prob("add", "+"), prob("sub", "-")]
    calls = []

    def counting(*a, **k):
        calls.append(1)
        return evaluation.sample_as(tiny_policy, tokenizer, None, *a, **k)

    store = cache.Batches(tmp_path, "base collab", "p", args, "collab", "")
    collabcoder.programs(counting, problems[:1], args, [], store)
    assert len(calls) == 11
    calls.clear()
    costs = []
    got = collabcoder.programs(counting, problems, args, costs, store)
    assert len(calls) == 11
    want_costs = []
    want = collabcoder.programs(counting, problems, args, want_costs)
    assert got == want and costs == want_costs == [(11, None), (11, None)]
