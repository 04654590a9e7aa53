"""infra/training_run.py without a model: a signal's safe stop (the checkpoint it saves, the status and the line
that says how to go on) and Health's counts of broken steps in a row (tests/test_policy.py runs both through
train.main on the tiny model)."""
import argparse
import types

import pytest

from infra import checkpoint, interrupt
from infra.training_run import Health, TrainingError, TrainingRun


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A TrainingRun of one process whose checkpoints are only recorded: run.saved lists (name, state)."""
    r = TrainingRun(argparse.Namespace(keep_checkpoints=2), 0, 1, "cpu", "none", tmp_path, None,
                    checkpoint.fresh_state())
    r.saved = []
    monkeypatch.setattr(checkpoint, "save", lambda d, name, policy, opt, state, rngs, keep: r.saved.append((name, state)))
    monkeypatch.setattr(checkpoint, "save_adapters", lambda policy, d: r.saved.append(("adapters", None)))
    return r


def test_a_signal_stops_at_a_safe_point_with_a_checkpoint_and_the_command_that_goes_on(run, tmp_path):
    """SIGTERM (15) reached the run: stopping() is True, stop_here saves the named checkpoint (its state with
    the wall seconds so far) and raises Interrupted with status 128 + 15 = 143 and one line naming where the
    checkpoint is and the resume command. Catches: a stop that saves nothing, or the wrong status."""
    assert run.stopping() is False  # no Stop installed: never stops
    run.stop = types.SimpleNamespace(requested=False, signum=None)
    assert run.stopping() is False
    run.stop = types.SimpleNamespace(requested=True, signum=15)
    assert run.stopping() is True
    with pytest.raises(interrupt.Interrupted) as e:
        run.stop_here("step-000003", "GRPO step 3")
    assert e.value.status == 143
    assert str(e.value) == (f"interrupted: checkpoint after GRPO step 3 saved in {tmp_path / 'checkpoints'}; "
                            f"to go on: python train.py --resume {tmp_path}")
    (name, state), = run.saved
    assert name == "step-000003" and state["wall_s"] > 0 and state["step"] == 0
    run.saved.clear()
    with pytest.raises(interrupt.Interrupted):
        run.stop_here(None, "coder SFT")  # None: the checkpoint just saved is the one kept
    assert run.saved == []


def test_health_counts_broken_steps_in_a_row(run):
    """A sandbox that judged nothing twice in a row stops at a checkpoint of the second step; a judged step
    between resets the count; three skipped optimizer steps in a row save the adapters and stop. Catches: a
    count that never resets (a healthy run stopped), or one that stops at the first broken step."""
    broken = {"verdicts": {"sandbox_error": 4}, "skipped_updates": 0}
    fine = {"verdicts": {"passed": 1, "sandbox_error": 3}, "skipped_updates": 0}
    health = Health()
    health.check(run, 1, broken, [])
    health.check(run, 2, fine, [])
    health.check(run, 3, broken, [{"detail": "sandbox: no uid"}])
    assert run.saved == []
    with pytest.raises(TrainingError, match=r"^steps 3-4: the sandbox failed on every program \(sandbox: no uid\); "):
        health.check(run, 4, broken, [{"detail": "sandbox: no uid"}])
    assert [name for name, _ in run.saved] == ["step-000004"]
    run.saved.clear()
    skipped = {"verdicts": {"failed": 4}, "skipped_updates": 1}
    health = Health()
    for step, m in enumerate([skipped, skipped, fine, skipped, skipped], 1):
        health.check(run, step, m, [])
    assert run.saved == []
    with pytest.raises(TrainingError, match=r"^steps 4-6 all had a non-finite loss or gradient norm; "):
        health.check(run, 6, skipped, [])
    assert run.saved == [("adapters", None)]
