"""What a run leaves and shows (train.main on the tiny Qwen2, in-process): evaluation during training that
never touches the training's random stream, the summary line, curves.png, trackers on rank 0."""
import json
import re

import pytest
import torch
from safetensors.torch import load_file

import data
import eval as evaluation
import sandbox
import train
from conftest import tiny_base
from infra import models, progress
from test_policy import fake_results

FLAGS = ["--steps", "3", "--sft-steps", "1", "--sft-batch", "2", "--problems-per-step", "2", "--num-plans", "2",
         "--codes-per-plan", "2", "--max-plan-tokens", "4", "--max-code-tokens", "4", "--lora-r", "4",
         "--temperature", "1.0", "--lr", "1e-2", "--workers", "1"]


@pytest.fixture
def tiny_run(tokenizer, monkeypatch):
    monkeypatch.setattr(models, "load_base", lambda *a, **k: (tiny_base(tokenizer), tokenizer))
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0, 0.5, 1.0]))
    return lambda *flags: train.main([*FLAGS, *flags])


def weights(run):
    return {f"{r}.{k}": v for r in ("planner", "coder")
            for k, v in load_file(run / "adapters" / r / "adapter_model.safetensors").items()}


def test_evaluation_during_training_leaves_training_unchanged(tiny_run, tmp_path, capsys, monkeypatch):
    """--eval-data val --eval-every 2: eval lines at steps 0, 2 and 3 (the end) with greedy pass@1 of
    the fake sandbox (program 1 passes, program 2 fails -> 0.5), and the run's adapters and GRPO lines
    are IDENTICAL to the same run without evaluation (sampling at temperature 1). Catches: evaluation
    drawing from the training's RNG (every later sample would change), eval left in the wrong
    adapter / mode, eval lines counted as steps."""
    import random
    real = evaluation.generate_programs

    def drawing(*a, **k):  # greedy decoding draws nothing; an evaluation that samples would
        torch.rand(3), random.random()
        return real(*a, **k)
    monkeypatch.setattr(evaluation, "generate_programs", drawing)
    plain = tiny_run("--out", str(tmp_path / "plain"))
    evald = tiny_run("--out", str(tmp_path / "eval"), "--eval-data", "val", "--eval-every", "2", "--eval-limit", "2")
    a, b = weights(plain), weights(evald)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows = [json.loads(x) for x in (evald / "metrics.jsonl").read_text().splitlines()]
    evals = [m for m in rows if m["phase"] == "eval"]
    assert [(m["step"], m["eval_pass@1"], m["eval_problems"]) for m in evals] == [(0, 0.5, 2), (2, 0.5, 2), (3, 0.5, 2)]
    assert evals[0]["eval_plan_tokens"] > 0 and evals[0]["eval_code_tokens"] > 0
    assert 0.0 <= evals[0]["eval_truncated_codes"] <= 1.0
    untimed = lambda ms: [{k: v for k, v in m.items() if not k.startswith("time_") and k != "peak_rss_gib"} for m in ms if m["phase"] == "grpo"]  # noqa: E731
    plain_rows = [json.loads(x) for x in (plain / "metrics.jsonl").read_text().splitlines()]
    assert untimed(rows) == untimed(plain_rows) and len(untimed(rows)) == 3
    out = capsys.readouterr().out.strip().splitlines()
    assert (evald / "curves.png").exists() or "curves skipped: matplotlib is not installed" in out[-2]
    first, last = untimed(rows)[0]["reward"], untimed(rows)[-1]["reward"]
    assert re.fullmatch(rf"done: 3 GRPO steps \(\d+ s of steps, \d+ s in all: loading, SFT, evaluation\), reward {first:.3f} \(step 1\) -> {last:.3f} \(step 3\), "
                        rf"eval pass@1 0\.500 \(step 0\) -> 0\.500 \(step 3\); adapters, metrics and curves in {evald}", out[-1]), out[-1]


def test_sampled_evaluation_scores_each_problem_and_leaves_training_unchanged(tiny_run, tmp_path):
    """--eval-samples 2 on 2 val problems: 4 programs in one sandbox call, the fake sandbox's pattern passes the
    1st and 4th -> each problem 1 of 2: eval_scores {both: 0.5}, pass@1 0.5, no problem solved by every program;
    the adapters equal the run's without evaluation (the sampling draws from the RNG, which is put back).
    Catches: a greedy evaluation behind the flag (1 program a problem), pass@1 counted as all-programs-pass,
    sampling that moves the training's random stream."""
    plain = tiny_run("--out", str(tmp_path / "plain"))
    sampled = tiny_run("--out", str(tmp_path / "sampled"), "--eval-data", "val", "--eval-every", "0", "--eval-limit",
                       "2", "--eval-samples", "2")
    a, b = weights(plain), weights(sampled)
    assert all(torch.equal(a[k], b[k]) for k in a)
    evals = [json.loads(x) for x in (sampled / "metrics.jsonl").read_text().splitlines() if '"eval"' in x]
    ids = [p.task_id for p in data.load("val")[:2]]
    assert [(m["step"], m["eval_pass@1"], m["eval_samples"], m["eval_scores"], m["eval_solved"]) for m in evals] == \
        [(0, 0.5, 2, dict.fromkeys(ids, 0.5), []), (3, 0.5, 2, dict.fromkeys(ids, 0.5), [])]
    assert sum(evals[0]["eval_verdicts"].values()) == 4


def test_report_to_a_missing_tracker_is_one_line(tiny_run, tmp_path, monkeypatch):
    """--report-to wandb without the package: TrackerError naming the pip command, before any step."""
    import sys

    from infra import trackers
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    with pytest.raises(trackers.TrackerError, match=r"^--report-to wandb needs the wandb package: pip install wandb$"):
        tiny_run("--out", str(tmp_path / "r"), "--report-to", "wandb")
    assert not (tmp_path / "r" / "metrics.jsonl").exists() or not (tmp_path / "r" / "metrics.jsonl").read_text()


def test_curves_draw_eval_points_from_eval_lines(tmp_path, monkeypatch):
    """plot_curves: the eval panel takes (step, eval_pass@1) of the eval lines, the reward panel the GRPO
    lines only, and a PNG is written. Catches: eval lines filtered out as non-GRPO (no eval curve),
    an SFT line drawn as a step."""
    pytest.importorskip("matplotlib")
    import matplotlib.axes

    from measure import report
    rows = [{"phase": "sft", "role": "coder", "sft_step": 1, "loss": 3.0},
            {"phase": "eval", "step": 0, "eval_pass@1": 0.25},
            {"phase": "grpo", "step": 1, "reward": 0.1, "pass_all": 0.0, "code_tokens": 9.0},
            {"phase": "grpo", "step": 2, "reward": 0.3, "pass_all": 0.5, "code_tokens": 7.0},
            {"phase": "eval", "step": 2, "eval_pass@1": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in rows))
    calls = []
    real = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, x, y, **k: calls.append((list(x), list(y))) or real(self, x, y, **k))
    assert report.plot_curves([tmp_path], tmp_path / "curves.png") == f"wrote {tmp_path / 'curves.png'}"
    assert calls == [([1, 2], [0.1, 0.3]), ([1, 2], [0.0, 0.5]), ([0, 2], [0.25, 0.5]), ([1, 2], [9.0, 7.0])]
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_peak_rss_is_the_kernels_high_water_mark():
    """progress.peak_rss_gib (ru_maxrss) against an independent reading of the same fact: /proc's VmHWM, KiB;
    after touching 64 MiB more than the peak so far, both grow by at least that."""
    status = lambda key: int(next(ln for ln in open("/proc/self/status") if ln.startswith(key)).split()[1])  # noqa: E731
    hwm = lambda: status("VmHWM:") / 2**20  # noqa: E731
    before = progress.peak_rss_gib()
    assert abs(before - hwm()) < 4 / 1024  # within 4 MiB (pages touched between the two reads)
    blob = bytearray((status("VmHWM:") - status("VmRSS:")) * 1024 + 64 * 2**20)  # zeroed: every page written
    after = progress.peak_rss_gib()
    assert after - before >= 60 / 1024 and abs(after - hwm()) < 4 / 1024
    del blob
