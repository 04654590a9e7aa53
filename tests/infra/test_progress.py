"""The run's stage bars and ETA (infra/progress.py): the guess, its correction by timed steps, bars that never nest."""
import pytest
import torch
from tqdm import tqdm

import train
from infra import progress


def test_evaluations_counts_train_pys_evaluations():
    """train.evaluate runs at step 0, every --eval-every steps and after the last: 8 steps every 10 -> 0, 8;
    20 every 10 -> 0, 10, 20; 25 every 10 -> 0, 10, 20, 25; SFT only -> 0."""
    assert [progress.evaluations(s, e) for s, e in ((8, 10), (20, 10), (25, 10), (0, 10), (5, 0))] == [2, 3, 4, 1, 2]


def test_eta_from_the_guess_then_from_timed_steps(monkeypatch):
    """Guesses 10 s (load) + 2 x 5 s (SFT) + 3 x 20 s (GRPO) = 80 s; once load took 20 s (2x the guess) the
    untimed stages count double: 2 x 10 + 3 x 40 = 140 s; once one SFT step took 4 s, SFT's last step is 4 s:
    4 + 3 x 20 x (20 + 4) / (10 + 5) = 100 s."""
    monkeypatch.setattr(progress, "STAGES", None)
    run = progress.Stages([("load", 1, 10.0), ("sft coder", 2, 5.0), ("eval", 0, 1.0), ("grpo", 3, 20.0)], show=False)
    assert run.eta_s() == pytest.approx(80.0)
    run.record("load", 20.0)
    assert run.eta_s() == pytest.approx(140.0)
    run.record("sft coder", 4.0)
    assert run.eta_s() == pytest.approx(4.0 + 3 * 20.0 * 24.0 / 15.0)
    assert progress.Stages([("load", 1, None)], show=False).eta_s() is None  # no guess, nothing timed


def test_a_time_budget_caps_the_eta_of_the_grpo_stage(monkeypatch):
    """--steps 100000 --time-budget 15 (make paper's arms): the GRPO stage is left with at most the budget, not
    100000 steps x their cost. Guess 20 s a step: 900 s left (not 2,000,000); after 3 timed steps of 100 s,
    900 - 300 = 600 s; with 2 steps left of a short run the steps themselves (2 x 100 = 200 s) end it first.
    Catches: the budget ignored (make paper's bars said 'run ETA 236996:55'), a budget counted from the start
    of the run (loading and SFT spend none of it)."""
    monkeypatch.setattr(progress, "STAGES", None)
    run = progress.Stages([("load", 1, 10.0), ("grpo", 100000, 20.0)], show=False, caps={"grpo": 900.0})
    run.record("load", 10.0)
    assert run.eta_s() == pytest.approx(900.0)
    for _ in range(3):
        run.record("grpo", 100.0)
    assert run.eta_s() == pytest.approx(600.0)
    short = progress.Stages([("grpo", 5, 20.0)], show=False, caps={"grpo": 900.0})
    for _ in range(3):
        short.record("grpo", 100.0)
    assert short.eta_s() == pytest.approx(200.0)
    args = train.get_args(["--steps", "100000", "--time-budget", "15", "--sft-steps", "0"])
    line = progress.start(args, "cpu", 0, show=False).plan_line()
    assert "grpo up to 100000 steps ~15:00" in line, line
    args = train.get_args(["--model", "Qwen2.5-Coder-1.5B", "--steps", "100000", "--time-budget", "15"])
    assert "grpo up to 100000 steps at most 15:00" in progress.start(args, "cuda", 0, show=False).plan_line()


def test_plan_line_of_make_train():
    """The defaults: load, SFT of the Planner and the Coder (10 steps each), 8 GRPO steps, no evaluation."""
    args = train.get_args([])
    run = progress.start(args, "cpu", 0, show=False)
    c = progress.COSTS
    assert [(n, st["units"]) for n, st in run.stages.items() if st["units"]] == [
        ("load", 1), ("sft planner", 10), ("sft coder", 10), ("grpo", 8)]
    assert run.eta_s() == pytest.approx(c["load"] + 10 * c["sft planner"] + 10 * c["sft coder"] + 8 * c["grpo"])
    assert run.plan_line().startswith("will run: load ~0:")
    assert progress.start(train.get_args(["--model", "Qwen2.5-Coder-1.5B"]), "cuda", 0, show=False).eta_s() is None


def test_a_resumed_run_guesses_only_what_is_left():
    """`--resume` of a `make train` run stopped after GRPO step 3 (both SFTs done), evaluated on 2 problems
    every 2 steps: left are load, evaluations at steps 4, 6, 8 (0 and 2 done) x 2 problems and 5 GRPO steps:
    5 + 3 x 2 x 10 + 5 x 20.4 = 167 s, the line naming only those; stopped after the Coder's SFT step 4:
    6 Coder SFT steps + 8 GRPO steps + 5 evaluations (0, 2, 4, 6, 8) x 2 problems. Catches: the full run's 5:00 again."""
    c = progress.COSTS
    args = train.get_args(["--eval-every", "2"])
    state = {"step": 3, "sft_done": ["planner", "coder"], "sft_step": 0}
    run = progress.start(args, "cpu", 2, show=False, state=state)
    assert run.eta_s() == pytest.approx(c["load"] + 3 * 2 * c["eval"] + 5 * c["grpo"])
    assert run.plan_line().startswith("will run: load ~0:05, eval 6 problems ~1:00, grpo 5 steps ~1:42; about 2:47")
    run = progress.start(args, "cpu", 2, show=False, state={"step": 0, "sft_done": ["planner"], "sft_step": 4})
    assert run.eta_s() == pytest.approx(c["load"] + 6 * c["sft coder"] + 5 * 2 * c["eval"] + 8 * c["grpo"])


def test_a_paused_bar_goes_on_in_a_new_one_that_counts_the_step(monkeypatch):
    """Evaluations inside steps 2 and 3 (progress.pause, as train.py evaluates after a step): the GRPO bar is
    closed while each runs, so the evaluation's bar is the only one open (position 0, not drawn inside the GRPO
    bar); after it the stage goes on in a new bar that counts the step just done. Step 3 breaks after its
    evaluation, as train.py does after its last step. Three bars: 1/3 (closed by step 2's evaluation), 2/3
    (closed by step 3's), 3/3: the run ends on 3/3, not on the 2/3 a bar closed before its step was counted
    would show. A caller that stops inside a step with no evaluation (an error) leaves that step uncounted."""
    made = []

    class Bar(tqdm):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(progress, "tqdm", Bar)
    run = progress.Stages([("load", 1, 1.0), ("grpo", 3, 1.0)], show=False)
    monkeypatch.setattr(progress, "STAGES", run)
    seen = []
    for step in progress.bar(range(1, 4), "grpo", total=3):
        seen.append((step, run.open.n))
        if step >= 2:
            progress.pause()
            with tqdm(total=1, desc="eval") as inner:
                seen.append(("eval open bars", len([b for b in tqdm._instances if not b.disable]), inner.pos))
        if step == 3:
            break
    assert seen == [(1, 0), (2, 1), ("eval open bars", 1, 0), (3, 2), ("eval open bars", 1, 0)]
    assert [(b.n, b.disable) for b in made] == [(1, True), (2, True), (3, True)]
    assert run.open is None and run.stages["grpo"]["done"] == 3
    made.clear()
    for step in progress.bar(range(1, 4), "sft coder", total=3):
        if step == 2:
            break
    assert [(b.n, b.disable) for b in made] == [(1, True)] and run.stages["sft coder"]["done"] == 1


def test_the_phase_clock_waits_for_cuda_only_under_profile(monkeypatch):
    """Catches: the clock calling torch.cuda.synchronize around every phase (every micro-batch of the loss pass) in
    every run, stalling the GPU's queue; only --profile asks for phase times charged to their own kernels."""
    waits = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: waits.append(1))
    for clock, expected in ((progress.Clock("cuda"), 0), (progress.Clock("cuda", sync=True), 2),
                            (progress.Clock("cpu", sync=True), 0)):
        with clock("sandbox"):
            pass
        assert len(waits) == expected and set(clock.s) == {"sandbox"}
        waits.clear()


def test_a_grpo_step_times_its_phases_with_waits_only_under_profile(monkeypatch, tiny_policy, tokenizer):
    """train.grpo_step builds its clock with sync = --profile."""
    class Reached(Exception):
        pass

    seen = []

    def clock(device, sync=False):
        seen.append(sync)
        raise Reached
    monkeypatch.setattr(progress, "Clock", clock)
    for flags in ([], ["--profile"]):
        with pytest.raises(Reached):
            train.grpo_step(tiny_policy, tokenizer, [], train.get_args(flags), None)
    assert seen == [False, True]
