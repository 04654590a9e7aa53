"""measure/plans.py: the Planner's own signal over a run, on a run folder written by hand (values checked by hand)."""
import json

from measure import plans

D1 = "synth-train/d1/0000"  # reference plan: 1 step, then "Return the result."
D3 = "synth-train/d3/0000"  # reference plan: 3 steps, then the return


def test_plan_steps_counts_numbered_lines_but_the_return():
    assert plans.plan_steps("1. Negate every number.\n2. Drop the first number.\n3. Return the result.") == 2
    assert plans.plan_steps("1) Sort.\n 2) Reverse.") == 2
    assert plans.plan_steps("1. 1. 1. 1.") == 1  # one numbered line: the degenerate plan of a drifted Planner
    assert plans.plan_steps("Sort the list and return it.") == 0


def test_windows_of_a_hand_written_run(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"train_data": "synth:train@1-3"}))
    metrics = [{"phase": "eval", "step": 0, "eval_pass@1": 0.5},
               {"phase": "grpo", "step": 1, "plan_tokens": 20, "neg_logp_planner": 0.1, "plan_reward_std": 0.2,
                "frac_zero_std_planner": 0.0},
               {"phase": "grpo", "step": 2, "plan_tokens": 10, "neg_logp_planner": 0.3, "plan_reward_std": 0.1,
                "frac_zero_std_planner": 0.5},
               {"phase": "grpo", "step": 3, "plan_tokens": 4, "neg_logp_planner": None, "plan_reward_std": 0.0,
                "frac_zero_std_planner": 1.0}]
    samples = [{"step": 1, "task_id": D1, "plan": "1. Take absolute values.\n2. Return the result.", "verdict": "passed"},
               {"step": 2, "task_id": D3, "plan": "1. 1. 1.", "verdict": "failed"},  # short: 1 step of 3
               {"step": 2, "task_id": "not-in-train", "plan": "1. x", "verdict": "passed"},  # left out
               {"step": 3, "task_id": D3, "plan": "1. Negate.\n2. Drop the first.\n3. Dedupe.", "verdict": "passed"}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics) + '{"cut sho')
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    rows = plans.windows(tmp_path, window=2)
    assert rows == [{"first": 1, "last": 2, "plan_tokens": 15.0, "entropy": 0.2, "spread": 0.15000000000000002,
                     "no_spread": 0.25, "short": 1, "logged": 2, "passed_short": 0.0, "passed_rest": 1.0},
                    {"first": 3, "last": 3, "plan_tokens": 4.0, "entropy": None, "spread": 0.0, "no_spread": 1.0,
                     "short": 0, "logged": 1, "passed_short": None, "passed_rest": 1.0}]
    table = plans.table(rows).splitlines()
    assert table[2] == "| 1-2 | 15.0 | 0.200 | 0.150 | 25 | 1 of 2 | 0 / 100 |"
    assert table[3] == "| 3-3 | 4.0 | – | 0.000 | 100 | 0 of 1 | – / 100 |"
