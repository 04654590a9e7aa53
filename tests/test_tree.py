"""tree.py with a fake generate and a fake sandbox (milliseconds): the shape of each framework's tree, its
credit through grpo.tree_advantages, the Debugger's trigger and rounds; and once with the real sandbox,
that no hidden test ever reaches a Debugger prompt."""
import re
import types

import pytest
import torch

import data
import grpo
import reward
import roles
import sandbox
import tree
from sandboxing import kinds

ADD = data.Problem("t/add", "Write add(a, b) that returns a + b.", "add",
                   ("assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 5) == 5", "assert add(-1, 1) == 0"))


def rewarded(t: tree.Tree, kind: str = "pass_rate") -> tree.Tree:
    """The tree with its program nodes' rewards written, as train.grpo_step's step 2 does (reward.step_rewards,
    --reward kind, no efficiency bonus)."""
    reward.step_rewards(t, t.problems, types.SimpleNamespace(reward=kind, efficiency_weight=0.0))
    return t


def code(r: float) -> str:
    """A completion whose program the fake sandbox scores r (its marker comment)."""
    return f"```python\ndef add(a, b):\n    return 0  # r={r}\n```"


def fake_run(jobs):
    """sandbox.run_many stand-in: pass rate = the program's `# r=` marker; a visible-only job (1 test)
    passes iff r == 1; no program: no_code."""
    out = []
    for job in jobs:
        n = len(job["tests"]) + len(job["io_tests"])
        m = re.search(r"# r=([\d.]+)", job["program"] or "")
        if m is None:
            out.append(sandbox.Result("no_code", 0, n, 0.0, 0.0, 0.0, "no program", ("no_code",) * n))
            continue
        r = float(m.group(1)) if n > 1 else float(float(m.group(1)) == 1.0)
        passed = round(r * n)
        out.append(sandbox.Result("passed" if passed == n else "failed", passed, n, 0.0, 0.0, 0.0,
                                  "" if passed == n else f"test 1 failed: {job['tests'][0]} (got 0)",
                                  ("passed",) * passed + ("failed",) * (n - passed)))
    return out


class Scripted:
    """generate(role, chats, n) that returns the next texts scripted for the role, and records the chats."""

    def __init__(self, **texts):
        self.texts, self.chats = {k: list(v) for k, v in texts.items()}, {}

    def __call__(self, role, chats, n):
        self.chats.setdefault(role, []).extend(chats)
        want = len(chats) * n
        got, self.texts[role] = self.texts[role][:want], self.texts[role][want:]
        assert len(got) == want, f"script for {role} ran out"
        return got


RECALL = "Problem 1: Add two numbers.\nPlan 1:\n1. Return a + b."
# the three-level worked example of grpo.py: codes r1: p11 [1, 0] p12 [0, 1] | r2: p21 [1, -] p22 [0.25, 0]
CODES = [code(1), code(0), code(0), code(1), code(1), "", code(0.25), code(0)]


def test_three_level_tree_has_the_shape_and_credit_of_the_worked_example():
    """retriever,planner,coder with R = G = M = 2 on one problem: 2 + 4 + 8 nodes with the right parents and
    rows, and the advantages of grpo.py's three-level worked example (test_grpo's hand numbers). Catches:
    children attached to the wrong parent (rows i*n + k), the empty code scored or kept in its group,
    the Planner's prompt without the retrieved examples, the Coder's without its plan."""
    gen = Scripted(retriever=[RECALL] * 2, planner=[f"1. Step of plan {i}." for i in range(4)], coder=CODES)
    t = rewarded(tree.build([ADD], ["retriever", "planner", "coder"], {"retriever": 2, "planner": 2, "coder": 2}, gen,
                            fake_run))
    assert [t.nodes[i].parent for i in t.of("retriever")] == [0, 0]
    assert [t.nodes[i].parent for i in t.of("planner")] == [1, 1, 2, 2]
    assert [t.nodes[i].parent for i in t.of("coder")] == [3, 3, 4, 4, 5, 5, 6, 6]
    assert [t.nodes[i].row for i in t.of("coder")] == list(range(8))
    assert "Problem 1: Add two numbers." in gen.chats["planner"][0][-1]["content"]
    assert "Plan:\n1. Step of plan 2." in gen.chats["coder"][2][-1]["content"]  # one chat per plan, M rows each
    c = tree.advantages(t)
    d = 1 / 24
    assert c["retriever"].adv.tolist() == pytest.approx([d / (d + 1e-4), -d / (d + 1e-4)], rel=1e-6)
    assert c["planner"].adv.tolist() == pytest.approx([0, 0, 0.4375 / 0.4376, -0.4375 / 0.4376], rel=1e-6)
    e = 0.5 / 0.5001
    assert c["coder"].adv.tolist() == pytest.approx([e, -e, -e, e, 0, 0, 0.125 / 0.1251, -0.125 / 0.1251], rel=1e-6)
    assert c["coder"].valid.tolist() == [True] * 5 + [False] + [True] * 2
    assert c["planner"].frac_zero_std == 0.5 and c["retriever"].frac_zero_std == 0.0


def test_planner_coder_tree_is_the_two_level_case():
    """planner,coder on two problems (G = 2, M = 2) gives exactly grpo.planner_advantages /
    coder_advantages on r [B, G, M]; coder alone (M = 4) gives one group of 4 per problem. Catches: a
    builder that numbers rows differently from the rollouts (prompt-major), or groups across problems."""
    rs = [1, 0, 0.5, 0.5, 0, 0, 1, 0.25]
    gen = Scripted(planner=["1. a.", "1. b.", "1. c.", "1. d."], coder=[code(r) for r in rs])
    t = rewarded(tree.build([ADD, ADD], ["planner", "coder"], {"planner": 2, "coder": 2}, gen, fake_run))
    c = tree.advantages(t)
    r = torch.tensor(rs).view(2, 2, 2)
    ok = torch.ones(2, 2, 2, dtype=torch.bool)
    assert torch.equal(c["coder"].adv, grpo.coder_advantages(r, ok)[0].flatten())
    assert torch.equal(c["planner"].adv, grpo.planner_advantages(r, ok, torch.ones(2, 2, dtype=torch.bool))[0].flatten())
    assert torch.equal(tree.advantages(t, coder_baseline="problem")["coder"].adv,
                       grpo.coder_advantages(r, ok, "problem")[0].flatten())
    single = rewarded(tree.build([ADD, ADD], ["coder"], {"coder": 4}, Scripted(coder=[code(x) for x in rs]),
                                 fake_run))
    assert torch.equal(tree.advantages(single)["coder"].adv, grpo.coder_advantages(r.view(2, 1, 4), ok.view(2, 1, 4))[0].flatten())
    assert "Plan:" not in single.nodes[2].text and "coder" not in single.outputs or len(single.outputs["coder"]) == 1


def test_debugger_repairs_only_programs_failing_a_visible_test():
    """planner,coder,debugger, G = 1, M = 3, D = 2: codes r = [1, 0.25, 0]; only the two failing ones get
    repairs (4 nodes under them), rewarded on all tests; the visible test only in their prompts. Repairs
    [1, 0.5] of the 0.25 program and [0.5, 0.5] of the 0 program: A = +-0.9998 and 0, 0; gain rewards
    0.75, 0.25 and 0.5, 0.5. The Coder keeps its pre-repair credit. Catches: a passing program repaired,
    the repairs of two programs in one group, the Coder credited with its repairs."""
    gen = Scripted(planner=["1. Add."], coder=[code(1), code(0.25), code(0)],
                   debugger=["Bug: x.\n" + code(1), "Bug: y.\n" + code(0.5), "Bug: z.\n" + code(0.5), "Bug: w.\n" + code(0.5)])
    t = rewarded(tree.build([ADD], ["planner", "coder", "debugger"], {"planner": 1, "coder": 3, "debugger": 2}, gen,
                            fake_run))
    coders, repairs = t.of("coder"), t.of("debugger")
    assert [t.nodes[i].parent for i in repairs] == [coders[1]] * 2 + [coders[2]] * 2
    assert t.nodes[coders[0]].visible is None  # it passed every test: not even run on the visible one
    prompt = gen.chats["debugger"][0][-1]["content"]
    assert "Test: add(1, 2)\nExpected: 3\nGot: 0" in prompt and "# r=0.25" in prompt and "Plan:\n1. Add." in prompt
    c = tree.advantages(t)
    assert c["debugger"].adv.tolist() == pytest.approx([0.25 / 0.2501, -0.25 / 0.2501, 0, 0], rel=1e-6)
    assert c["debugger"].frac_zero_std == 0.5
    g = tree.advantages(t, debug_reward="gain")["debugger"]
    assert g.reward.tolist() == [0.75, 0.25, 0.5, 0.5] and torch.equal(g.adv, c["debugger"].adv)
    assert c["coder"].reward.tolist() == [1.0, 0.25, 0.0]  # pre-repair
    bonus = tree.advantages(t, debug_gamma=0.5)["coder"].reward.tolist()
    assert bonus == pytest.approx([1.0, 0.25 + 0.5 * 0.75, 0.0 + 0.5 * 0.5])


def test_a_node_reward_is_written_once_by_step_rewards_and_reaches_the_credit():
    """planner,coder,debugger, G = 2, M = 2, D = 1, codes of pass rate [1, 0.5 | 0.25, 0], --reward all_pass.
    tree.build writes no reward (all 0: the programs' Results only); reward.step_rewards writes each program
    node's once: the Coder's all_pass [1, 0, 0, 0] (returned as r [1, 1, 4]), each repair its pass rate
    [1, 0.5, 0.75] (the three failing programs, one repair each). The credit reads exactly those: Coder
    A = +-0.5 / 0.5001 under plan 1, 0 under plan 2 (no spread: frac 0.5); plan R = [0.5, 0], A = +-0.25 / 0.2501
    (pass rates would give R = [0.75, 0.125]). Catches: build writing a pass rate that step_rewards then
    overwrites (or a second writer that wins), --reward all_pass stopping at the returned tensor, a repair
    rewarded by --reward instead of its pass rate."""
    gen = Scripted(planner=["1. a.", "1. b."], coder=[code(1), code(0.5), code(0.25), code(0)],
                   debugger=["Bug.\n" + code(1), "Bug.\n" + code(0.5), "Bug.\n" + code(0.75)])
    t = tree.build([ADD], ["planner", "coder", "debugger"], {"planner": 2, "coder": 2, "debugger": 1}, gen, fake_run)
    coders, repairs = t.of("coder"), t.of("debugger")
    assert [t.nodes[i].result.pass_rate for i in coders] == [1.0, 0.5, 0.25, 0.0]
    assert all(n.reward == 0.0 for n in t.nodes)  # build runs the programs, it writes no reward
    r = reward.step_rewards(t, t.problems, types.SimpleNamespace(reward="all_pass", efficiency_weight=0.0))
    assert r.shape == (1, 1, 4) and r.flatten().tolist() == [1.0, 0.0, 0.0, 0.0]
    assert [t.nodes[i].reward for i in coders] == [1.0, 0.0, 0.0, 0.0]
    assert [t.nodes[i].reward for i in repairs] == [1.0, 0.5, 0.75]
    c = tree.advantages(t)
    e = 0.5 / 0.5001
    assert c["coder"].reward.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert c["coder"].adv.tolist() == pytest.approx([e, -e, 0.0, 0.0], rel=1e-6) and c["coder"].frac_zero_std == 0.5
    assert c["planner"].reward.tolist() == [0.5, 0.0]
    assert c["planner"].adv.tolist() == pytest.approx([0.25 / 0.2501, -0.25 / 0.2501], rel=1e-6)
    assert c["debugger"].reward.tolist() == [1.0, 0.5, 0.75] and c["debugger"].adv.tolist() == [0.0, 0.0, 0.0]


def test_tree_reaches_a_repair_role_only_through_the_registry(monkeypatch):
    """tree.py imports no extension role (nothing of mapcoder/ or baselines/): a repair role's visible tests
    and the feedback its prompt gets come from its roles.ROLES entry. A debugger entry whose visible_job
    runs only `assert add(0, 5) == 5` and whose feedback is 'FEEDBACK on add(0, 5)' puts that line in the
    repair prompt of the one failing program (r = 0), and asks for no repair of the passing one (r = 1).
    Catches: tree.py calling debugger.visible_job / debugger.feedback by name (the entry would be ignored:
    the prompt would say 'Test: add(1, 2)'), a new repair role needing an edit of tree.py."""
    import ast
    source = ast.parse(open(tree.__file__).read())
    imported = {(n.module or "").split(".")[0] for n in ast.walk(source) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name.split(".")[0] for n in ast.walk(source) if isinstance(n, ast.Import) for a in n.names}
    assert not imported & {"mapcoder", "baselines", "debugger", "retriever"}
    seen = []

    def visible_job(problem, program, timeout_s=4.0):
        seen.append(program)
        job = problem.sandbox_job(program, timeout_s)
        job.update(tests=["assert add(0, 5) == 5"], io_tests=[])
        return job

    import dataclasses
    entry = dataclasses.replace(roles.ROLES["debugger"], visible_job=visible_job,
                                feedback=lambda problem, result: f"FEEDBACK on add(0, 5): {result.verdict}")
    monkeypatch.setitem(roles.ROLES, "debugger", entry)
    gen = Scripted(coder=[code(1), code(0)], debugger=["Bug.\n" + code(1)])
    t = rewarded(tree.build([ADD], ["coder", "debugger"], {"coder": 2, "debugger": 1}, gen, fake_run))
    assert len(seen) == 1 and "# r=0\n" in seen[0]  # the passing program is not run on its visible tests
    prompt = gen.chats["debugger"][0][-1]["content"]
    assert "FEEDBACK on add(0, 5): failed" in prompt and "Test: add(1, 2)" not in prompt
    assert [t.nodes[i].reward for i in t.of("debugger")] == [1.0]


def test_debug_rounds_stop_when_the_visible_test_passes():
    """Evaluation: up to 3 rounds, D = 1. Program r = 0 -> repair 0.5 (still fails visible) -> repair 1
    (passes): 2 rounds, not 3; the final program is the last repair. Catches: rounds that continue after
    the visible test passed, final_programs returning the Coder's own program."""
    gen = Scripted(coder=[code(0)], debugger=["Bug.\n" + code(0.5), "Bug.\n" + code(1), "never"])
    t = tree.build([ADD], ["coder", "debugger"], {"coder": 1, "debugger": 1}, gen, fake_run, debug_rounds=3)
    assert len(t.of("debugger")) == 2 and gen.texts["debugger"] == ["never"]
    assert "# r=1" in t.final_programs()[0][0]


def test_a_repair_without_a_program_leaves_the_program_as_it_was():
    """Evaluation, 3 rounds, D = 1: repair 1 is prose without code, so round 2 repairs the Coder's own
    program again (its prompt shows it) and gets code(0.5); repair 3 has no code either, so the program
    scored is repair 2's. Training: the code-less repair's reward is still 0. Catches: a code-less
    repair ending its lineage with no program (a 'no_code' verdict where the Coder had a program:
    10 of 53 val lineages of base plan+debug on 2026-12-01), or a copied program earning its reward."""
    gen = Scripted(coder=[code(0)], debugger=["I cannot fix it.", "Bug.\n" + code(0.5), "Still no idea."])
    t = rewarded(tree.build([ADD], ["coder", "debugger"], {"coder": 1, "debugger": 1}, gen, fake_run, debug_rounds=3))
    assert len(t.of("debugger")) == 3
    again = gen.chats["debugger"][1][-1]["content"]  # round 2: the Coder's program and its own feedback
    assert "# r=0\n" in again and "Expected: 3\nGot: 0" in again
    assert t.final_programs()[0][0].endswith("# r=0.5\n")
    assert [t.nodes[i].reward for i in t.of("debugger")] == [0.0, 0.5, 0.0]


def test_unparseable_retrieval_gives_no_examples_and_credit_zero():
    """Retrieval 1 parses, retrieval 2 is prose: the second Planner prompt has no examples and retrieval 2's
    credit is 0 although its codes pass (1, 1) while retrieval 1's get (0.5, 0.5): A = -+0.9998 (r1 0.5 >
    r2 0). Catches: an unparseable retrieval credited with the codes below it (A would flip), or its
    planner shown garbage."""
    gen = Scripted(retriever=[RECALL, "I do not know."], planner=["1. a.", "1. b."],
                   coder=[code(0.5), code(0.5), code(1), code(1)])
    t = rewarded(tree.build([ADD], ["retriever", "planner", "coder"], {"retriever": 2, "planner": 1, "coder": 2}, gen,
                            fake_run))
    assert "Similar problems" in gen.chats["planner"][0][-1]["content"]
    assert "Similar problems" not in gen.chats["planner"][1][-1]["content"]
    c = tree.advantages(t)
    assert c["retriever"].reward.tolist() == [0.5, 0.0]
    assert c["retriever"].adv.tolist() == pytest.approx([0.25 / 0.2501, -0.25 / 0.2501], rel=1e-6)


def test_generate_returning_the_wrong_count_is_a_clear_error():
    """Catches: a generate that drops completions silently misaligning every row after it."""
    with pytest.raises(ValueError, match="returned 1 completions for 1 chats x 2"):
        tree.build([ADD], ["coder"], {"coder": 2}, lambda role, chats, n: ["x"], fake_run)


def test_chains_parse_and_refuse_bad_ones():
    """Catches: a chain without the coder, roles out of tree order, or an unknown role accepted."""
    for chain in roles.CHAINS:
        assert roles.parse_chain(chain) == chain.split(",")
    for bad, msg in (("planner", "needs the coder"), ("coder,planner", "tree order"), ("coder,tester", "unknown role"),
                     ("coder,coder", "each role once")):
        with pytest.raises(ValueError, match=msg):
            roles.parse_chain(bad)


def test_a_hidden_test_never_reaches_a_debugger_prompt():
    """The real sandbox on 3 training problems and 1 I/O problem, a step of planner,coder,debugger with two
    programs per problem: one wrong everywhere, one that passes ONLY the visible test (it returns or prints
    the visible test's expected answer). Only the first kind is repaired, and every Debugger prompt shows
    the visible test's call and nothing of the hidden tests (no call or input of tests[1:] / io_tests[1:]
    that the statement does not already show). Catches: a repair triggered by a failing hidden test (its
    feedback would name it), feedback taken from the full run's detail, the whole test list in the prompt
    (CoMLRL's leak)."""
    problems = data.load("train")[:3] + data.load("io_train")[:1]
    texts = []
    for p in problems:
        if p.is_io:
            bodies = ["print(-12345)", f"print({p.io_tests[0][1].strip()!r})"]
        else:
            visible_answer = kinds._plan(p.tests[0])[2]
            bodies = [f"def {p.entry_point}(*args):\n    return {v!r}" for v in (-12345, visible_answer)]
        texts += [f"```python\n{b}\n```" for b in bodies]
    gen = Scripted(planner=["1. Think."] * len(problems), coder=texts,
                   debugger=["Bug.\n" + texts[2 * b] for b in range(len(problems)) for _ in range(2)])
    t = tree.build(problems, ["planner", "coder", "debugger"], {"planner": 1, "coder": 2, "debugger": 2}, gen,
                   lambda jobs: sandbox.run_many(jobs, workers=2))
    coders = t.of("coder")
    assert all(t.nodes[i].result.verdict == "failed" for i in coders)  # every program fails a hidden test
    assert sorted({t.nodes[i].parent for i in t.of("debugger")}) == coders[0::2]  # only the visible failures
    assert len(gen.chats["debugger"]) == len(problems)
    for p, chat in zip(problems, gen.chats["debugger"]):
        prompt = chat[-1]["content"]
        if p.is_io:
            assert p.io_tests[0][0].strip() in prompt
            hidden = [given.strip() for given, _ in p.io_tests[1:]]
        else:
            assert kinds._plan(p.tests[0])[1] in prompt
            hidden = [kinds._plan(test)[1] for test in p.tests[1:]]
        for h in hidden:
            if h not in p.prompt:
                assert h not in prompt, (p.task_id, h)


def test_a_step_with_all_four_roles_updates_exactly_the_adapters_with_signal(tokenizer):
    """The tiny random Qwen2 with one LoRA adapter per role of the registry (models.add_role_adapters), the
    tree of retriever,planner,coder,debugger (R = G = M = D = 2) on scripted completions teacher-forced
    through the policy (rollout.from_texts), one loss step per role as train.py does it (rows with A = 0
    skipped, beta = 0). Rewards: each retrieval has a plan whose codes pass ([1, 1]) and one whose codes
    fail ([0, 0]); each failing program gets repairs [1, 0]. So retrievals tie (no signal), plans split
    (signal), codes of a plan tie (no signal), repairs split (signal): exactly planner and debugger move.
    Catches: advantages applied to another role's rows, a role without signal stepped, adapters sharing
    weights, an adapter missing for a role."""
    import rollout
    from conftest import tiny_base
    from infra import models

    policy = models.add_role_adapters(tiny_base(tokenizer), list(roles.ROLES), r=4, alpha=8)
    assert set(policy.peft_config) == set(roles.ROLES)
    script = {"retriever": [RECALL] * 2, "planner": ["1. a.", "1. b.", "1. c.", "1. d."],
              "coder": [code(1), code(1), code(0), code(0)] * 2,
              "debugger": ["Bug.\n" + code(1), "Bug.\n" + code(0)] * 4}

    def generate(role, chats, n):
        texts, script[role] = script[role][:len(chats) * n], script[role][len(chats) * n:]
        return rollout.from_texts(tokenizer, [c for c in chats for _ in range(n)], texts)

    chain = roles.parse_chain("retriever,planner,coder,debugger")
    t = rewarded(tree.build([ADD], chain, dict.fromkeys(chain, 2), generate, fake_run))
    credit = tree.advantages(t)
    assert [len(t.of(r)) for r in chain] == [2, 4, 8, 8]
    assert {r: bool(c.adv.abs().sum() > 0) for r, c in credit.items()} == \
        {"retriever": False, "planner": True, "coder": False, "debugger": True}
    before = {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" in n}
    opt = torch.optim.AdamW([p for n, p in policy.named_parameters() if "lora_" in n], lr=1e-2)
    opt.zero_grad(set_to_none=True)
    for role, c in credit.items():
        r = t.outputs[role][0]
        rows = torch.tensor([i for i in range(len(c.adv)) if c.valid[i] and c.adv[i] != 0], dtype=torch.long)
        if len(rows) == 0:
            continue
        policy.set_adapter(role)
        w = grpo.loss_weights(r.mask * c.valid[:, None].float())
        logp = rollout.logprobs(policy, r, rows)
        loss, _ = grpo.grpo_loss(logp, logp.detach(), logp.detach(), c.adv[rows], w[rows])
        loss.backward()
    opt.step()
    changed = {n.split(".")[-2] for n, p in policy.named_parameters() if "lora_" in n and not torch.equal(p, before[n])}
    assert changed == {"planner", "debugger"}


def test_evaluation_tree_runs_only_the_visible_tests():
    """judge=False (eval.py scores the final programs itself): no program is run on all its tests, the
    repair rounds still run on the visible test alone. Catches: every program run twice in evaluation
    (once here, once by scoring.score), repairs skipped because no full result exists."""
    seen = []

    def counting_run(jobs):
        seen.extend(len(j["tests"]) for j in jobs)
        return fake_run(jobs)
    gen = Scripted(coder=[code(0), code(1)], debugger=["Bug.\n" + code(1)])
    t = tree.build([ADD], ["coder", "debugger"], {"coder": 2, "debugger": 1}, gen, counting_run, debug_rounds=3, judge=False)
    assert seen == [1, 1, 1]  # round 1: both programs' visible test; round 2: the repair's
    assert ["# r=1" in p for p in t.final_programs()[0]] == [True, True]
    direct = tree.build([ADD], ["coder"], {"coder": 2}, Scripted(coder=[code(0), code(1)]), counting_run, judge=False)
    assert seen == [1, 1, 1] and direct.final_programs()[0][0].endswith("# r=0\n")


# --- train.py and eval.py on the tree ----------------------------------------------------------------

def test_train_and_eval_flags_take_the_chains():
    """Catches: --roles still limited to two chains, a chain out of order accepted, the Retriever's extra
    level not compensated (G stays 4: twice the codes of a step), an eval mode name refused."""
    import eval as evaluation
    import train

    for chain in roles.CHAINS:
        assert train.get_args(["--roles", chain]).roles == chain.split(",")
    sizes = lambda *flags: (lambda a: (a.num_plans, a.codes_per_plan))(train.get_args(list(flags)))  # noqa: E731
    assert sizes() == (2, 4) and sizes("--roles", "coder") == (2, 4)  # 8 codes per problem (docs/experiments.md, "Group sizes")
    assert sizes("--roles", "retriever,planner,coder") == (2, 2)  # R * G * M = 2 * 2 * 2: still 8 codes
    assert sizes("--roles", "retriever,planner,coder", "--retrieval", "corpus") == (2, 4)  # no R level
    assert sizes("--roles", "retriever,planner,coder", "--codes-per-plan", "3") == (2, 3)
    with pytest.raises(SystemExit):
        train.get_args(["--roles", "coder,planner"])
    assert evaluation.get_args(["--modes", ",".join(evaluation.MODES)]).modes == list(evaluation.MODES)
    assert [evaluation.mode_of(c.split(",")) for c in roles.CHAINS] == list(evaluation.MODES)
    with pytest.raises(SystemExit):
        evaluation.get_args(["--modes", "debug"])


def test_eval_mapcoder_mode_returns_the_last_repair(monkeypatch):
    """eval.generate_programs, mode 'mapcoder', n = 2, a fake model: 1 retrieval, 2 plans, 1 program per
    plan; the program of plan 1 fails its visible test and is repaired once (then passes), so its final
    program is the repair; the other passes and stays. Catches: the Coder's own program scored instead of
    its repair, repairs of programs that pass, the rows of one problem given to another."""
    import types

    import eval as evaluation
    import rollout

    calls = []

    def fake_sample(model, tok, chats, n, *a, **k):
        role = ("debugger" if "It fails this test" in chats[0][-1]["content"] else
                "coder" if "Follow the plan" in chats[0][-1]["content"] else
                "planner" if "no code)" in chats[0][-1]["content"] else "retriever")
        calls.append((role, len(chats), n))
        texts = {"retriever": [RECALL], "planner": ["1. a.", "1. b."], "coder": [code(0.5), code(1)],
                 "debugger": ["Bug.\n" + code(1)]}[role]
        return types.SimpleNamespace(texts=texts[:len(chats) * n], mask=torch.ones(len(chats) * n, 2),
                                     truncated=torch.zeros(len(chats) * n, dtype=torch.bool))

    monkeypatch.setattr(rollout, "sample", fake_sample)
    monkeypatch.setattr(sandbox, "run_many", lambda jobs, workers=None: fake_run(jobs))
    args = evaluation.Settings(max_plan_tokens=8, max_code_tokens=8, max_retrieval_tokens=8, workers=1, sandbox_timeout=1.0,
                               n=2, temperature=1.0, batch_size=8, debug_rounds=3)
    out, stats = evaluation.generate_programs(None, None, [ADD], "mapcoder", args, adapters=None)
    assert calls == [("retriever", 1, 1), ("planner", 1, 2), ("coder", 2, 1), ("debugger", 1, 1)]
    assert ["# r=1" in p for p in out[0]] == [True, True] and "Bug" not in out[0][0]
    assert stats["repair_tokens"] == 2.0 and stats["retrieval_tokens"] == 2.0 and stats["plan_tokens"] == 2.0


def test_two_train_steps_with_all_four_roles(tmp_path):
    """`train.py --roles retriever,planner,coder,debugger`, 2 GRPO steps in a real process on the tiny
    random Qwen2 (tests/tiny_train.py: sandbox results from TINY_PATTERN). Catches: a role of the chain
    without its adapter (saved and reloadable), a step that crashes when the Debugger has rows, the
    metrics of a role missing."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, "tests/tiny_train.py", "--roles", "retriever,planner,coder,debugger",
                        "--steps", "2", "--sft-steps", "0", "--problems-per-step", "1", "--num-retrievals", "2",
                        "--num-plans", "1", "--codes-per-plan", "2", "--num-repairs", "2", "--max-retrieval-tokens", "4",
                        "--max-plan-tokens", "4", "--max-code-tokens", "4", "--lora-r", "4", "--workers", "1",
                        "--out", str(tmp_path)], cwd=root, env={**os.environ, "TINY_PATTERN": "1,0,0.5,0"},
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    steps = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in steps if m.get("phase") == "grpo"]
    assert [m["step"] for m in steps] == [1, 2] and all(m["skipped_updates"] == 0 for m in steps)
    assert all(f"frac_zero_std_{r}" in m for r in ("retriever", "planner", "coder", "debugger") for m in steps)
    assert all(m["repairs"] > 0 for m in steps)
    for role in roles.ROLES:
        assert (tmp_path / "adapters" / role / "adapter_model.safetensors").exists()
