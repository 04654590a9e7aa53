"""measure/curves.py: the learning curves of several runs (dev pass@1 with intervals, the diagnostics, compute) from
their folders, on runs written by hand; and `make learn LEARN_SMALL=1` end to end on the tiny model."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from measure import curves, stats

ROOT = Path(__file__).resolve().parents[2]


def _run(path: Path, roles: list, evals: list, samples: list, crash: bool = False, dynamic: int | None = None) -> Path:
    """A run folder as train.py writes it: 3 GRPO steps of 2 problems (plans 10 tokens, programs 20), the eval
    lines given as (step, solved task ids of 4), the samples' task ids per step; dynamic: each step's
    dynamic_drawn (--dynamic-sampling)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"roles": roles, "num_plans": 2, "codes_per_plan": 4,
                                                  "problems_per_step": 2}))
    lines = [{"phase": "eval", "step": 0, "eval_pass@1": len(evals[0]) / 4, "eval_problems": 4, "eval_solved": evals[0]}]
    lines += [{"phase": "grpo", "step": s, "reward": 0.1 * s, "plan_tokens": 10.0 if "planner" in roles else None,
               "code_tokens": 20.0, "time_step_s": 5.0, **({"dynamic_drawn": dynamic} if dynamic else {})}
              for s in (1, 2, 3)]
    lines += [{"phase": "eval", "step": 3, "eval_pass@1": len(evals[1]) / 4, "eval_problems": 4, "eval_solved": evals[1]}]
    text = "".join(json.dumps(m) + "\n" for m in lines)
    (path / "metrics.jsonl").write_text(text + ('{"phase": "grpo", "st' if crash else ""))  # a line cut by a crash
    (path / "samples.jsonl").write_text("".join(json.dumps({"step": s, "task_id": t}) + "\n"
                                                for s, ids in enumerate(samples, 1) for t in ids))
    return path


def test_table_of_two_runs_by_hand(tmp_path):
    """core: 1 of 4 solved at step 0, 3 of 4 ({a, b, c}) at step 3; McNemar vs step 0: b = 0, c = 2, p = 2 / 4 = 0.5.
    coder: {b, d} at step 3; against core's last: only core 2 (a, c), only coder 1 (d): p = 2 (1 + 3) / 8 = 1.
    Seen: core draws {p1, p2}, {p3, p1}, {p4, p5}: 2, 3, 5 distinct; coder {p1, p2} twice, then {p3, p4}: 2, 2, 4. Tokens per step: 2 problems x
    (2 plans x 10 + 8 programs x 20) = 360 (core), 2 x 8 x 20 = 320 (coder); 3 steps: 1,080 and 960; 15 s of steps.
    An SFT-only folder has no curve; a line cut short by a crash is skipped."""
    _run(tmp_path / "core", ["planner", "coder"], [["a"], ["a", "b", "c"]], [["p1", "p2"], ["p3", "p1"], ["p4", "p5"]],
         crash=True)
    _run(tmp_path / "coder", ["coder"], [["a"], ["b", "d"]], [["p1", "p2"], ["p1", "p2"], ["p3", "p4"]])
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "metrics.jsonl").write_text(json.dumps({"phase": "sft", "step": 1}) + "\n")
    out = curves.render([tmp_path])
    md = (tmp_path / "curves.md").read_text()
    lo, hi = stats.bootstrap_ci([1.0, 1.0, 1.0, 0.0])
    assert f"| core | 3 | 6 | 5 | 75.0 [{100 * lo:.1f}, {100 * hi:.1f}] | 3 / 4 | a 1, b 1, c 1 | 0.50 |" in md
    assert "| core | 0 | 0 | 0 | 25.0 " in md and "| coder | 3 | 6 | 4 | 50.0 " in md
    assert "| core | 3 | 6 | 5 | 15 | 1,080 |" in md and "| coder | 3 | 6 | 4 | 15 | 960 |" in md
    assert "coder vs core: p = 1.00" in md and "sft" not in md
    assert (tmp_path / "curves.png").stat().st_size > 10_000 and "wrote" in out


def test_dynamic_sampling_counts_every_problem_drawn(tmp_path):
    """--dynamic-sampling 2 with 2 problems a step draws and samples 4 a step: 12 problems by step 3 (not 3 x 2 = 6),
    and 4 problems x 8 programs x 20 tokens x 3 steps = 1,920 sampled tokens (not 960)."""
    _run(tmp_path / "dapo", ["coder"], [["a"], ["b"]], [["p1", "p2"], ["p3", "p4"], ["p5", "p6"]], dynamic=4)
    curves.render([tmp_path])
    md = (tmp_path / "curves.md").read_text()
    assert "| dapo | 3 | 12 | 6 | 25.0 " in md and "| dapo | 3 | 12 | 6 | 15 | 1,920 |" in md


def test_no_run_with_steps_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"^error: no run with GRPO steps in "):
        curves.render([tmp_path])


def test_make_learn_small_mode_end_to_end(tmp_path):
    """`make learn LEARN_SMALL=1` on the tiny model: one SFT, three arms of 2 steps (the release's: 1 step of its
    Planner, then 1 of its Coder) evaluated at steps 0, 1, 2 on 3 dev problems, then curves.md with every point;
    a rerun trains nothing (each arm is done); `make learn-table` gives every arm and the SFT in both modes on
    2 HumanEval problems, with the paired tests (the release arm against core, its sibling from the same SFT)."""
    tiny = f"{sys.executable} tests/tiny_model.py"
    cmd = ["make", "-s", "learn", "LEARN_SMALL=1", f"LEARN={tmp_path / 'learn'}", f"PY={sys.executable}",
           f"TRAIN={tiny} train.py", "VENV=" + str(tmp_path / "venv")]
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / ".installed").touch()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1200)  # a hang guard
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    md = (tmp_path / "learn" / "curves.md").read_text()
    for arm in ("core", "coder", "release"):
        assert [ln.split(" | ")[1] for ln in md.splitlines() if ln.startswith(f"| {arm} | ")][:3] == ["0", "1", "2"]
    steps = (tmp_path / "learn" / "core" / "metrics.jsonl").read_text()
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0 and (tmp_path / "learn" / "core" / "metrics.jsonl").read_text() == steps
    # the final table: the SFT in both modes, the three arms, the paired tests (tiny sizes: 2 HumanEval problems)
    table = subprocess.run([*cmd[:2], "learn-table", *cmd[3:], f"EVAL={tiny} eval.py", "MBPP="], cwd=ROOT,
                           capture_output=True, text=True, env=env, timeout=600)  # MBPP=: HumanEval alone
    assert table.returncode == 0, table.stdout[-3000:] + table.stderr[-3000:]
    md = (tmp_path / "learn" / "table.md").read_text()
    for name in ("SFT, direct", "SFT, Planner -> Coder", "single-agent GRPO", "CoRe-Code", "CoRe-Code as released"):
        assert f"| {name} | " in md and f"| {name} | not run |" not in md
    assert "**Paired tests, humaneval#2** (McNemar's exact test, * : p < 0.05)" in md
    assert "| single-agent GRPO | SFT, direct | 2 |" in md and "| CoRe-Code as released | CoRe-Code | 2 |" in md
