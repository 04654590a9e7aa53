"""train.py's step 5 on a forest built by hand (tree.build with scripted completions and the fake sandbox of
tests/test_tree.py): every metric and sample computed here from the pass rates alone."""
import types

import pytest
import torch

import reward
import rollout
import train
import tree
from test_tree import ADD, Scripted, code, fake_run

RS = [1, 0, 0.5, 0.5, 0, 0, 1, 0.25]  # pass rates: problem 0's plans [1, 0] [0.5, 0.5], problem 1's [0, 0] [1, 0.25]


def test_step_metrics_reads_the_scored_forest(tokenizer):
    """Planner -> Coder on two problems, G = M = 2. By hand: reward = mean(RS) = 3.25 / 8; 2 of 8 programs pass;
    best per problem 1 and 1; a plan is worth the mean of its programs (problem 0: 0.5, 0.5, std 0; problem 1:
    0, 0.625, population std 0.3125), so plan_reward_std = 0.15625; sibling groups without signal: 1 of 2
    plan groups, 2 of 4 code groups; the samples are each problem's first plan and its first program.
    Catches: a sample or plan taken from the other problem, verdicts counted over the wrong nodes, the
    plans' spread taken over all of a problem's programs instead of per plan."""
    script = Scripted(planner=["1. a.", "1. b.", "1. c.", "1. d."], coder=[code(r) for r in RS])

    def generate(role, chats, n):  # real Rollouts (token masks), scripted texts
        return rollout.from_texts(tokenizer, [c for c in chats for _ in range(n)], script(role, chats, n))

    forest = tree.build([ADD, ADD], ["planner", "coder"], {"planner": 2, "coder": 2}, generate, fake_run)
    args = train.get_args(["--num-plans", "2", "--codes-per-plan", "2"])
    rewards = reward.step_rewards(forest, [ADD, ADD], args)  # step 2: writes the program nodes' rewards
    assert rewards.tolist() == torch.tensor(RS).view(2, 1, 4).tolist()  # [B, 1, programs per problem]
    credit = tree.advantages(forest)
    clock = types.SimpleNamespace(s={"sandbox": 0.5})
    m, samples = train.step_metrics(forest, [ADD, ADD], rewards, credit, ({"loss_coder": 0.1}, 0.2, 0.3, 0),
                                    clock, 2.0, args)
    assert m["reward"] == pytest.approx(3.25 / 8) and m["pass_all"] == 0.25 and m["best_of_problem"] == 1.0
    assert m["plan_reward_std"] == pytest.approx(0.15625)
    assert (m["frac_zero_std_planner"], m["frac_zero_std_coder"]) == (0.5, 0.5)
    assert m["verdicts"] == {"failed": 6, "passed": 2}
    assert (m["loss_coder"], m["loss"], m["grad_norm"], m["skipped_updates"]) == (0.1, 0.2, 0.3, 0)
    assert (m["time_sandbox_s"], m["time_step_s"]) == (0.5, 2.0)
    assert [(s["plan"], s["program"].count("# r="), s["verdict"]) for s in samples] == \
        [("1. a.", 1, "passed"), ("1. c.", 1, "failed")]
    assert samples[0]["completion"] == code(1) and samples[1]["completion"] == code(0)
    eos = 1  # from_texts ends each completion with EOS
    assert m["code_tokens"] == pytest.approx(sum(len(tokenizer(code(r), add_special_tokens=False).input_ids) + eos for r in RS) / 8)
