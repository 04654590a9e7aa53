"""--dynamic-sampling N (DAPO, Yu et al. 2025, sec. 3.2): of N x --problems-per-step problems drawn, the first
problems-per-step whose programs' rewards differ enter the loss; the others' nodes are out of it."""
import pytest
import torch

import reward
import train
import tree
from test_tree import ADD, Scripted, code, fake_run, rewarded


def test_the_first_problems_with_a_spread_are_kept_up_to_the_cap():
    r = torch.tensor([[[0., 0.]], [[0., 1.]], [[1., 1.]], [[.5, 1.]], [[0., .5]]])  # [B=5, 1, 2]
    assert reward.dynamic_keep(r, 2) == [1, 3]
    assert reward.dynamic_keep(r, 5) == [1, 3, 4]  # fewer with a spread than the cap: all of them
    assert reward.dynamic_keep(torch.zeros(3, 2, 2), 2) == []


def test_a_dropped_problem_leaves_the_loss_and_its_normaliser():
    """Two problems x 2 plans x 2 codes; problem 0's programs all score 0.5 (no spread), problem 1's differ.
    Kept: [1]. Problem 0's plan and code nodes get advantage 0 and valid False (out of the token normaliser);
    problem 1's keep theirs exactly; the rewards are untouched. Catches: the dropped problem's tokens still
    counted in the normaliser (its rows weigh on every kept row's gradient), the wrong problem dropped."""
    rs = [0.5, 0.5, 0.5, 0.5, 1, 0, 0.25, 0]
    gen = Scripted(planner=["1. a.", "1. b.", "1. c.", "1. d."], coder=[code(r) for r in rs])
    t = rewarded(tree.build([ADD, ADD], ["planner", "coder"], {"planner": 2, "coder": 2}, gen, fake_run))
    credit = tree.advantages(t)
    rewards = torch.tensor(rs).view(2, 1, 4)
    keep = reward.dynamic_keep(rewards, 1)
    assert keep == [1]
    out = reward.only_problems(t, credit, keep)
    for role, n in (("planner", 2), ("coder", 4)):  # nodes per problem
        assert out[role].valid.tolist() == [False] * n + credit[role].valid[n:].tolist()
        assert torch.equal(out[role].adv[:n], torch.zeros(n)) and torch.equal(out[role].adv[n:], credit[role].adv[n:])
        assert torch.equal(out[role].reward, credit[role].reward)
    assert credit["coder"].adv[4:].abs().sum() > 0  # problem 1 had signal to keep


def test_the_flag_draws_n_times_the_problems_and_only_with_grpo():
    args = train.get_args(["--dynamic-sampling", "3", "--problems-per-step", "2"])
    assert args.dynamic_sampling == 3 and train.get_args([]).dynamic_sampling == 1
    for bad in (["--dynamic-sampling", "0"], ["--dynamic-sampling", "2", "--algo", "ppo"]):
        with pytest.raises(SystemExit):
            train.get_args(bad)


def test_a_step_with_a_dropped_problem_trains_as_a_step_on_the_kept_one(tiny_policy, tokenizer, monkeypatch):
    """train.grpo_step with --dynamic-sampling 2 on [no spread, spread] (2 plans x 2 codes each; scripted
    completions teacher-forced through the policy, the fake sandbox) moves the adapters exactly as a step on the
    kept problem alone (SGD, lr 1): the dropped problem adds nothing to the gradient or to the normaliser.
    Its metrics: dynamic_kept 1 of dynamic_drawn 2; the rewards still count both problems."""
    import copy

    import roles
    import rollout

    flat = [code(r) for r in (0.5, 0.5, 0.5, 0.5)], [code(r) for r in (1, 0, 0.25, 0)]
    script = {}

    def sample(policy, tok, args, clock, role, chats, n):
        texts, script[role] = script[role][:len(chats) * n], script[role][len(chats) * n:]
        return rollout.from_texts(tok, [c for c in chats for _ in range(n)], texts)
    monkeypatch.setattr(roles, "sample", sample)
    monkeypatch.setattr(train, "run_programs", lambda args, clock, jobs: fake_run(jobs))

    def step(policy, problems, codes, flags):
        script.update(planner=["1. a.", "1. b."] * len(problems), coder=[c for cs in codes for c in cs])
        args = train.get_args(["--num-plans", "2", "--codes-per-plan", "2", "--max-grad-norm", "1e9", *flags])
        lora = [p for n, p in policy.named_parameters() if "lora_" in n]
        m, _ = train.grpo_step(policy, tokenizer, problems, args, torch.optim.SGD(lora, lr=1.0))
        return m, [p.detach().clone() for p in lora]

    other = copy.deepcopy(tiny_policy)
    m, dynamic = step(tiny_policy, [ADD, ADD], flat, ["--dynamic-sampling", "2", "--problems-per-step", "1"])
    m1, single = step(other, [ADD], flat[1:], ["--problems-per-step", "1"])
    assert (m["dynamic_kept"], m["dynamic_drawn"]) == (1, 2) and "dynamic_kept" not in m1
    assert m["reward"] == pytest.approx((4 * 0.5 + 1 + 0 + 0.25 + 0) / 8)
    assert m1["grad_norm"] > 0 and m["grad_norm"] == pytest.approx(m1["grad_norm"], rel=1e-5)
    assert max((a - b).abs().max().item() for a, b in zip(dynamic, single)) < 1e-6
