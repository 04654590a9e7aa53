"""train.py --resume: a run SIGKILLed (really: the process kills itself at a named point of a checkpoint
write, tests/tiny_train.py) and resumed ends exactly where the uninterrupted run ends (tiny Qwen2, seconds)."""
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

import data
import train
from conftest import ROOT
from infra import checkpoint

FLAGS = ["--steps", "6", "--sft-steps", "2", "--sft-batch", "2", "--problems-per-step", "2", "--num-plans", "2",
         "--codes-per-plan", "2", "--max-plan-tokens", "4", "--max-code-tokens", "4", "--lora-r", "4",
         "--temperature", "1.0", "--lr", "1e-2", "--save-every", "2", "--workers", "1"]


def tiny(*flags, kill=None):
    env = {**os.environ, "TINY_PATTERN": "1,0,0.5,1,0,0,1,0.5"}  # both roles get signal
    env.pop("CORE_CODE_KILL_DURING_CHECKPOINT", None)
    env.pop("CORE_CODE_KILL_AFTER_CHECKPOINT", None)
    if kill:
        env[kill[0]] = kill[1]
    return subprocess.run([sys.executable, "tests/tiny_train.py", *flags], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def lines(run, name="metrics.jsonl"):
    return [json.loads(x) for x in (run / name).read_text().splitlines()]


def untimed(m):
    return {k: v for k, v in m.items() if not k.startswith("time_") and k != "peak_rss_gib"}


def max_diffs(a, b) -> dict:
    """Max |a - b| over the LoRA weights and over AdamW's two moments of checkpoints a and b."""
    out = {"lora": 0.0}
    for role in ("planner", "coder"):
        wa, wb = (load_file(c / "adapters" / role / "adapter_model.safetensors") for c in (a, b))
        assert wa.keys() == wb.keys() and wa
        out["lora"] = max([out["lora"]] + [(wa[k] - wb[k]).abs().max().item() for k in wa])
    sa, sb = (torch.load(c / "optimizer.pt", weights_only=True)["state"] for c in (a, b))
    assert sa.keys() == sb.keys() and sa
    for key in ("exp_avg", "exp_avg_sq"):
        out[key] = max((sa[i][key] - sb[i][key]).abs().max().item() for i in sa)
    assert all(sa[i]["step"] == sb[i]["step"] for i in sa)
    return out


def test_killed_twice_and_resumed_equals_the_uninterrupted_run(tmp_path, capsys):
    """6 steps (+ 2 SFT steps per role, sampling at temperature 1): killed while writing checkpoint 4
    (checkpoint 2 whole), resumed, killed right after checkpoint 4, resumed again -> at step 6 the
    adapters and AdamW moments equal the uninterrupted run's (atol 1e-6), the same problems in the same
    order, one metrics line per step. Catches: RNG states not restored (sampled completions differ),
    problems drawn again from the start (replayed), optimizer state not restored (moments differ),
    a half-written checkpoint picked, metrics lines of lost steps left in the log (twice). Then a run
    killed after the planner's SFT: its resume must not redo the planner's SFT nor skip the coder's."""
    ref, run = tmp_path / "ref", tmp_path / "run"
    p = tiny(*FLAGS, "--keep-checkpoints", "0", "--out", str(ref))
    assert p.returncode == 0, p.stderr[-3000:]
    p = tiny(*FLAGS, "--out", str(run), kill=("CORE_CODE_KILL_DURING_CHECKPOINT", "step-000004"))
    assert p.returncode == -9, p.stderr[-3000:]
    ck = run / "checkpoints"
    assert (ck / "latest").read_text().strip() == "step-000002" and (ck / ".tmp-step-000004").is_dir()
    assert [m["step"] for m in lines(run) if m["phase"] == "grpo"] == [1, 2, 3, 4]  # 3, 4 to be cut
    p = tiny("--resume", str(run), kill=("CORE_CODE_KILL_AFTER_CHECKPOINT", "step-000004"))
    assert p.returncode == -9 and f"resumed from {ck / 'step-000002'} (step 2)" in p.stdout, p.stderr[-3000:]
    assert (ck / "latest").read_text().strip() == "step-000004"
    p = tiny("--resume", str(run))
    assert p.returncode == 0 and f"resumed from {ck / 'step-000004'} (step 4)" in p.stdout, p.stderr[-3000:]
    assert sorted(x.name for x in ck.iterdir()) == ["latest", "step-000004", "step-000006"]  # --keep-checkpoints 2

    d = max_diffs(ref / "checkpoints" / "step-000006", ck / "step-000006")
    with capsys.disabled():
        print(f"\nresume vs uninterrupted, max abs diff: {d}")
    assert all(v <= 1e-6 for v in d.values()), d
    want, got = lines(ref), lines(run)
    assert [m["step"] for m in got if m["phase"] == "grpo"] == [1, 2, 3, 4, 5, 6]
    assert [untimed(m) for m in got] == [untimed(m) for m in want]  # sft lines, rewards, losses too
    assert [s["task_id"] for s in lines(run, "samples.jsonl")] == [s["task_id"] for s in lines(ref, "samples.jsonl")]
    assert len(lines(ref, "samples.jsonl")) == 12  # 6 steps x 2 problems, none twice

    sft = tmp_path / "sft"  # killed during SFT, after the planner's: only the coder's SFT runs again
    p = tiny(*FLAGS, "--out", str(sft), kill=("CORE_CODE_KILL_AFTER_CHECKPOINT", "sft-1"))
    assert p.returncode == -9 and [m["role"] for m in lines(sft)] == ["planner", "planner"]
    p = tiny("--resume", str(sft))
    assert p.returncode == 0 and f"resumed from {sft / 'checkpoints' / 'sft-1'} (step 0)" in p.stdout, p.stderr[-3000:]
    assert max(max_diffs(ref / "checkpoints" / "step-000006", sft / "checkpoints" / "step-000006").values()) <= 1e-6
    assert [untimed(m) for m in lines(sft)] == [untimed(m) for m in want]

    capsys.readouterr()
    assert train.main(["--resume", str(run)]) == run  # finished: one line, no model loaded
    assert capsys.readouterr().out.strip() == f"{run} is already finished: step 6 of 6 (raise --steps to go on)"
    with pytest.raises(checkpoint.CheckpointError, match=r"--lr 0\.5 differs from the run's 0\.01 \(config\.json\)"):
        train.main(["--resume", str(run), "--lr", "0.5"])


def test_resume_may_change_how_often_it_evaluates(tmp_path):
    """--eval-every and --eval-limit change no step (an evaluation puts the RNG states back): a resume may give new
    values, which win over config.json's; --lr may not change."""
    import train

    (tmp_path / "config.json").write_text(json.dumps({"eval_every": 8, "eval_limit": 5, "lr": 0.01}))
    a = train.get_args(["--resume", str(tmp_path), "--eval-every", "20", "--eval-limit", "7"])
    assert (a.eval_every, a.eval_limit, a.lr) == (20, 7, 0.01)
    with pytest.raises(checkpoint.CheckpointError, match=r"--lr 0\.5 differs from the run's 0\.01"):
        train.get_args(["--resume", str(tmp_path), "--lr", "0.5"])


def test_checkpoint_loads_adapters_in_place_trainable(tiny_policy, tmp_path):
    """save -> load into a fresh policy and optimizer: every LoRA weight and AdamW moment equal, and the
    loaded weights ARE the optimizer's parameters and train. Catches: PeftModel.from_pretrained's
    default is_trainable=False (adapters frozen after resume), an optimizer that holds the tensors of
    a replaced module, moments restored onto the wrong parameters."""
    from conftest import tiny_base
    from infra import models

    lora = [p for n, p in tiny_policy.named_parameters() if "lora_" in n]
    opt = torch.optim.AdamW(lora, lr=1e-2)
    for p in lora:
        p.grad = torch.randn_like(p)
    opt.step()
    checkpoint.save(tmp_path, "step-000001", tiny_policy, opt, {"step": 1}, [checkpoint.rng_state()], keep=2)
    fresh = models.add_role_adapters(tiny_base(models.load_tokenizer(str(models.embedded_folder()))),
                                     ["planner", "coder"], r=4, alpha=8)
    flora = [p for n, p in fresh.named_parameters() if "lora_" in n]
    fopt = torch.optim.AdamW(flora, lr=1e-2)
    state = checkpoint.load(checkpoint.latest(tmp_path), fresh, fopt)
    assert state["step"] == 1 and all(torch.equal(a, b) for a, b in zip(lora, flora))
    assert all(torch.equal(opt.state[a]["exp_avg_sq"], fopt.state[b]["exp_avg_sq"]) for a, b in zip(lora, flora))
    assert fopt.param_groups[0]["params"][0] is flora[0]
    for role in ("planner", "coder"):
        fresh.set_adapter(role)
        assert all(p.requires_grad for n, p in fresh.named_parameters() if f"lora_A.{role}" in n)
    before = [p.detach().clone() for p in flora]
    for p in flora:
        p.grad = torch.ones_like(p)
    fopt.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, flora))


def test_latest_never_names_a_half_written_folder(tiny_policy, tmp_path, monkeypatch):
    """A write that dies between the adapters and the optimizer leaves `latest` on the previous
    checkpoint. Catches: the marker moved first, or the newest folder picked by name."""
    opt = torch.optim.AdamW([p for n, p in tiny_policy.named_parameters() if "lora_" in n])
    checkpoint.save(tmp_path, "step-000002", tiny_policy, opt, {"step": 2}, [checkpoint.rng_state()], keep=2)
    monkeypatch.setattr(checkpoint.torch, "save", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        checkpoint.save(tmp_path, "step-000004", tiny_policy, opt, {"step": 4}, [checkpoint.rng_state()], keep=2)
    assert checkpoint.latest(tmp_path).name == "step-000002"
    assert (tmp_path / "checkpoints" / ".tmp-step-000004" / "adapters").is_dir()


def test_problem_stream_resumes_without_replay_or_skip():
    """The stream read 3 + 5 + 7 at a time equals it read at once; each epoch is a permutation of all
    problems, and epochs differ. Catches: a batch drawn by random.sample from a global RNG (a resume
    would replay or skip problems), an epoch that repeats a problem."""
    probs = data.load("train")[:7]
    once = checkpoint.batch_at(probs, 0, 15, seed=3)
    pieces = checkpoint.batch_at(probs, 0, 3, 3) + checkpoint.batch_at(probs, 3, 5, 3) + checkpoint.batch_at(probs, 8, 7, 3)
    assert [p.task_id for p in once] == [p.task_id for p in pieces]
    assert sorted(p.task_id for p in once[:7]) == sorted(p.task_id for p in probs)
    assert [p.task_id for p in once[:7]] != [p.task_id for p in once[7:14]]
    assert [p.task_id for p in checkpoint.batch_at(probs, 0, 7, 4)] != [p.task_id for p in once[:7]]


def test_resume_with_a_different_flag_is_one_line(tmp_path):
    """The command line: `train.py --resume RUN --num-plans 8` on a run of 4 plans ends in one line naming
    the flag, before any model is loaded. Catches: the new flag silently winning (the resumed steps
    would not be the run's), or a traceback."""
    args = train.get_args(["--num-plans", "4"])
    (tmp_path / "config.json").write_text(json.dumps({**vars(args), "device": "cpu", "quant": "none"}))
    p = subprocess.run([sys.executable, "train.py", "--resume", str(tmp_path), "--num-plans", "8", "--workers", "3"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stderr == (f"error: --resume {tmp_path}: --num-plans 8 differs from the run's 4 "
                                              "(config.json); leave it out or start a new run\n"), p.stderr


def test_time_budget_stops_grpo_saves_and_counts_as_finished(tmp_path, capsys):
    """--time-budget 0: the budget is spent by the first GRPO step, so the run stops after step 1 of 6,
    saves checkpoint step-000001 and its adapters, and a --resume says it is finished (the budget, not
    the step count). Catches: the budget ignored (6 steps), checked before the step (0 steps), the last
    step not saved, a resume that trains on past the budget."""
    run = tmp_path / "run"
    p = tiny(*FLAGS, "--time-budget", "0", "--out", str(run))
    assert p.returncode == 0, p.stderr[-3000:]
    assert [m["step"] for m in lines(run) if m["phase"] == "grpo"] == [1]
    assert "--time-budget 0 min spent after step 1: stopping" in p.stdout + p.stderr
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-000001" and (run / "adapters" / "coder").is_dir()
    state = checkpoint.state_of(run / "checkpoints" / "step-000001")
    assert state["step"] == 1 and state["grpo_s"] == lines(run)[-1]["time_step_s"]
    capsys.readouterr()
    assert train.main(["--resume", str(run)]) == run
    assert capsys.readouterr().out.strip() == f"{run} is already finished: step 1 of 6 (--time-budget 0 min spent: raise it to go on)"


def test_budget_spent_and_finished_count_only_trained_roles(tmp_path):
    """budget_spent at the boundary (59.9 s of a 1-minute budget: not spent; 60 s: spent; no budget: never),
    and finished() for the MapCoder chain after SFT of its three SFT roles: the Retriever has no SFT
    target, so it must not keep the run unfinished forever (it did before: sft_left held 'retriever')."""
    from argparse import Namespace
    a = Namespace(time_budget=1.0)
    assert not checkpoint.budget_spent(a, {"grpo_s": 59.9}) and checkpoint.budget_spent(a, {"grpo_s": 60.0})
    assert not checkpoint.budget_spent(Namespace(time_budget=None), {"grpo_s": 1e9})
    assert not checkpoint.budget_spent(a, {})  # a checkpoint from before --time-budget
    ck = tmp_path / "checkpoints" / "step-000002"
    (ck / "adapters").mkdir(parents=True)
    chain = ["retriever", "planner", "coder", "debugger"]
    args = Namespace(roles=chain, sft_steps=3, steps=2, time_budget=None)
    (ck / "state.json").write_text(json.dumps({**checkpoint.fresh_state(), "step": 2,
                                               "sft_done": ["planner", "coder", "debugger"]}))
    assert checkpoint.finished(args, tmp_path, ck)
    (ck / "state.json").write_text(json.dumps({**checkpoint.fresh_state(), "step": 2, "sft_done": ["planner", "coder"]}))
    assert not checkpoint.finished(args, tmp_path, ck)  # the Debugger's SFT is still to run


SIGNAL_FLAGS = [*FLAGS[:FLAGS.index("--steps")], "--steps", "3", *FLAGS[FLAGS.index("--steps") + 2:]]  # 3 GRPO steps
SIGNAL_FLAGS[SIGNAL_FLAGS.index("--save-every") + 1] = "10"  # no checkpoint on schedule before the end


def adapters_equal(a, b) -> bool:
    """Every LoRA weight of every role of adapter folders a and b bit for bit (torch.equal)."""
    for role in ("planner", "coder"):
        wa, wb = (load_file(d / role / "adapter_model.safetensors") for d in (a, b))
        if wa.keys() != wb.keys() or not wa or not all(torch.equal(wa[k], wb[k]) for k in wa):
            return False
    return True


def test_ctrl_c_saves_the_step_prints_the_resume_command_and_resumes_exactly(tmp_path):
    """SIGINT right after the optimizer step of GRPO step 2 (of 3; --save-every 10: no checkpoint due): the
    step finishes, checkpoint step-000002 is saved, stderr's last line is the command that resumes, status
    130, no traceback; that command (through tests/tiny_train.py) resumes at step 3 and its adapters equal
    the uninterrupted run's bit for bit. Then SIGTERM after the Coder's first SFT step (of 2): checkpoint
    sft-1-000001, status 143, and the resume runs the Coder's second SFT step, not its first again nor the
    Planner's. Catches: a Ctrl-C that loses the step (no checkpoint before step 10), a traceback, a resume
    that redoes steps or SFT, a state that does not restore the SFT's position in its role."""
    ref, run, sft = tmp_path / "ref", tmp_path / "run", tmp_path / "sft"
    p = tiny(*SIGNAL_FLAGS, "--out", str(ref))
    assert p.returncode == 0, p.stderr[-3000:]
    p = tiny(*SIGNAL_FLAGS, "--out", str(run), kill=("TINY_SIGNAL", "6:INT"))  # 2 x 2 SFT steps, then GRPO 1, 2
    assert p.returncode == 130 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stderr.splitlines()[-1] == (f"interrupted: checkpoint after GRPO step 2 saved in {run / 'checkpoints'}; "
                                         f"to go on: python train.py --resume {run}")
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-000002"
    assert [m["step"] for m in lines(run) if m["phase"] == "grpo"] == [1, 2]
    command = p.stderr.splitlines()[-1].split("to go on: python train.py ")[1].split()
    p = tiny(*command)
    assert p.returncode == 0 and f"resumed from {run / 'checkpoints' / 'step-000002'} (step 2)" in p.stdout, p.stderr
    assert [m["step"] for m in lines(run) if m["phase"] == "grpo"] == [1, 2, 3]
    assert adapters_equal(ref / "adapters", run / "adapters")

    p = tiny(*SIGNAL_FLAGS, "--out", str(sft), kill=("TINY_SIGNAL", "3:TERM"))  # planner 1, 2, coder 1
    assert p.returncode == 143 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stderr.splitlines()[-1].startswith("interrupted: checkpoint after coder SFT step 1 saved in ")
    assert (sft / "checkpoints" / "latest").read_text().strip() == "sft-1-000001"
    p = tiny("--resume", str(sft))
    assert p.returncode == 0, p.stderr[-3000:]
    assert [(m.get("role"), m.get("sft_step")) for m in lines(sft) if m["phase"] == "sft"] == \
        [("planner", 1), ("planner", 2), ("coder", 1), ("coder", 2)]
    assert [untimed(m) for m in lines(sft)] == [untimed(m) for m in lines(ref)]
    assert adapters_equal(ref / "adapters", sft / "adapters")


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    """interrupt.Stop in a bare process (no model: a second): the first SIGINT only sets `requested` and says
    so, the second ends the process at once with status 130 and one line (the work after it never runs).
    Catches: a second Ctrl-C that waits for the step (a user stuck behind a 20-minute GPU step), a traceback."""
    code = ("import os, signal, time\nfrom infra import interrupt\n"
            "with interrupt.Stop('stopping after this step') as stop:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    print('requested', stop.requested, flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    time.sleep(30)\n"
            "    print('not reached')\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 130 and p.stdout == "requested True\n", (p.stdout, p.stderr)
    assert [x for x in p.stderr.splitlines() if x] == [
        "SIGINT: stopping after this step (press Ctrl-C again to stop at once)",
        "stopped at once by a second SIGINT: the last checkpoint is kept"]


def test_resume_on_fewer_gpus_restores_the_states_that_fit(monkeypatch, capsys):
    """A checkpoint's CUDA random states of 2 GPUs, put back where 1 is visible (faked: no GPU is needed): device
    0 gets the first state, nothing else is set, and one line says 1 of 2 was restored. Catches:
    torch.cuda.set_rng_state_all's IndexError on the missing device (a resume that cannot start)."""
    import random

    import torch

    from infra import checkpoint

    set_calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: set_calls.append((state, device)))
    state = {"python": random.getstate(), "torch": torch.get_rng_state(), "cuda": ["state of gpu 0", "state of gpu 1"]}
    checkpoint.set_rng_state(state)
    assert set_calls == [("state of gpu 0", 0)]
    assert capsys.readouterr().err == ("note: the checkpoint holds the random states of 2 GPUs and 1 are visible here: "
                                       "1 restored, so the sampling is not the saved run's\n")
