"""--report-to: each tracker imported only when chosen, a one-line error when its package is missing,
numbers logged as <phase>/<key> at the GRPO step, and nothing at all from a rank other than 0."""
import importlib.util
import sys
import types

import pytest

import sandbox
import train
from conftest import tiny_base
from infra import distributed, models, trackers
from test_policy import fake_results

LINE = {"phase": "grpo", "step": 3, "reward": 0.5, "kl": None, "skipped_updates": 0,
        "verdicts": {"passed": 2, "failed": 6}}


def fake_wandb(calls):
    mod = types.ModuleType("wandb")

    class Run:
        def log(self, values, step):
            calls.append(("log", values, step))

        def finish(self):
            calls.append(("finish",))
    mod.init = lambda **k: calls.append(("init", k)) or Run()
    return mod


def test_wandb_gets_scalars_at_the_step(tmp_path, monkeypatch):
    """Catches: None / nested dicts passed to the tracker (wandb rejects them), eval lines logged at
    another step than their GRPO step, the run never finished."""
    calls = []
    monkeypatch.setitem(sys.modules, "wandb", fake_wandb(calls))
    t = trackers.make("wandb", tmp_path / "run", {"lr": 0.1})
    t.log(LINE)
    t.log({"phase": "eval", "step": 3, "eval_pass@1": 0.25})
    t.close()
    assert calls == [("init", {"project": "core-code", "name": "run", "dir": str(tmp_path / "run"), "config": {"lr": 0.1}}),
                     ("log", {"grpo/reward": 0.5, "grpo/skipped_updates": 0, "grpo/verdicts/passed": 2,
                              "grpo/verdicts/failed": 6}, 3),
                     ("log", {"eval/eval_pass@1": 0.25}, 3), ("finish",)]
    assert trackers.make("none", tmp_path, {}) is None


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is not None, reason="tensorboard is installed")
def test_missing_tensorboard_is_one_line(tmp_path):
    with pytest.raises(trackers.TrackerError) as e:
        trackers.make("tensorboard", tmp_path, {})
    assert str(e.value) == "--report-to tensorboard needs the tensorboard package: pip install tensorboard"


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
def test_tensorboard_event_files_read_back(tmp_path):
    """The real package, offline: the event file holds grpo/reward = 0.5 at step 3."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    t = trackers.make("tensorboard", tmp_path, {})
    t.log(LINE)
    t.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("grpo/reward")] == [(3, 0.5)]


def test_rank_other_than_zero_writes_nothing(tokenizer, tmp_path, monkeypatch):
    """train.main as rank 1 of 2 (the collectives are no-ops without a process group): no tracker
    started, no run folder written. Catches: every rank logging (duplicate wandb runs, two writers
    of one metrics.jsonl)."""
    calls = []
    monkeypatch.setitem(sys.modules, "wandb", fake_wandb(calls))
    monkeypatch.setattr(distributed, "setup", lambda device: (1, 2, device))
    monkeypatch.setattr(models, "load_base", lambda *a, **k: (tiny_base(tokenizer), tokenizer))
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0]))
    train.main(["--steps", "1", "--sft-steps", "0", "--problems-per-step", "2", "--num-plans", "2", "--codes-per-plan", "1",
                "--max-plan-tokens", "4", "--max-code-tokens", "4", "--lora-r", "4", "--report-to", "wandb",
                "--out", str(tmp_path / "run")])
    assert calls == [] and not (tmp_path / "run").exists()
