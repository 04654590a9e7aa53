"""Rollout + loss on a tiny random Qwen2 (seconds): the known GRPO bugs (docs/algorithm.md) on a real
model, and full steps of train.grpo_step with the sandbox replaced by fixed pass rates."""
import json

import pytest
import torch

import data
import rollout
import sandbox
import train
import update
from fast import chunked, shared_prompt
from infra import progress

CHATS = [[{"role": "user", "content": "Write a function that adds two numbers."}],
         [{"role": "user", "content": "Hi"}]]  # different lengths: row 2 is left-padded


def test_left_padding_does_not_change_logprobs(tiny_policy, tokenizer):  # docs/algorithm.md#left-padding-changes-the-log-probs
    """Catches: no attention mask passed to the forward (the pads would be attended to), or
    position ids counted from the padded start."""
    r = rollout.from_texts(tokenizer, CHATS, ["def add(a, b): return a + b", "Hello there"])
    assert r.attn[1].sum() < r.attn.shape[1]  # the short prompt really is padded
    both = rollout.logprobs(tiny_policy, r)
    alone = rollout.from_texts(tokenizer, CHATS[1:], ["Hello there"])
    T = alone.mask.shape[1]
    assert torch.allclose(both[1, :T] * alone.mask[0], rollout.logprobs(tiny_policy, alone)[0] * alone.mask[0], atol=1e-5)


def test_sft_rollout_mask_keeps_final_eos(tiny_policy, tokenizer):  # docs/algorithm.md#pad-equals-eos-drops-the-final-eos
    """Catches: mask = (tokens != pad_id), which drops the completion's own final EOS here."""
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    r = rollout.from_texts(tokenizer, CHATS, ["a b c", "a"])
    n = [len(tokenizer("a b c", add_special_tokens=False).input_ids), len(tokenizer("a", add_special_tokens=False).input_ids)]
    assert r.mask.sum(1).tolist() == [n[0] + 1, n[1] + 1]  # every token of the answer + its EOS
    assert r.seqs[1, r.prompt_len + n[1]].item() == tokenizer.eos_token_id


def test_sampler_and_trainer_logprobs_agree(tiny_policy, tokenizer):  # docs/algorithm.md#sampler-and-trainer-log-probs-disagree
    """Catches: logits shifted by one the wrong way, a temperature divided in twice, dropout on."""
    torch.manual_seed(1)
    enc = rollout.encode_prompts(tokenizer, CHATS, "cpu")
    out = tiny_policy.generate(**enc, max_new_tokens=12, do_sample=True, top_k=None, num_return_sequences=2,
                               output_logits=True, return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id)
    P = enc.input_ids.shape[1]
    r = rollout._finish(tokenizer, out.sequences, enc.attention_mask.repeat_interleave(2, 0), P)
    sampler = torch.log_softmax(torch.stack(out.logits, 1).float(), -1).gather(-1, out.sequences[:, P:, None])[..., 0]
    with torch.no_grad():
        trainer = rollout.logprobs(tiny_policy, r)
    assert torch.allclose(sampler * r.mask, trainer * r.mask, atol=1e-4)


def test_reference_is_base_and_kl_zero_before_update(tiny_policy, tokenizer):  # docs/algorithm.md#kl-is-not-zero-before-the-first-update
    """Catches: a reference that still runs an adapter, or a fresh adapter that is not the base."""
    r = rollout.from_texts(tokenizer, CHATS, ["x = 1", "y"])
    tiny_policy.set_adapter("coder")
    with torch.no_grad():
        lp = rollout.logprobs(tiny_policy, r)
        with tiny_policy.disable_adapter():
            ref = rollout.logprobs(tiny_policy, r)
    assert not torch.allclose(lp, ref)  # the adapter is active (B != 0 in the fixture)
    for n, p in tiny_policy.named_parameters():  # a fresh adapter (B = 0) is the base exactly
        if "lora_B.coder" in n:
            torch.nn.init.zeros_(p)
    with torch.no_grad():
        assert torch.equal(rollout.logprobs(tiny_policy, r), ref)


def fake_results(pattern):
    """Sandbox results with the given pass rates (tests of the loop that do not need a good model)."""
    def run_many(jobs, workers=None, progress=False):
        return [sandbox.Result("passed" if x == 1 else "failed", int(4 * x), 4, 0.01, 0.02, 10.0)
                for x, _ in zip(pattern * len(jobs), jobs)]
    return run_many


def test_one_grpo_step_updates_both_adapters(tiny_policy, tokenizer, monkeypatch):
    """Only a role with signal moves. Catches: advantages of one role applied to the other's rows,
    an optimizer over one adapter only, a zero-signal role still stepped (AdamW moves it anyway)."""
    problems = data.load("train")[:2]
    args = train.get_args(["--num-plans", "2", "--codes-per-plan", "2", "--max-plan-tokens", "8",
                           "--max-code-tokens", "8", "--lr", "1e-2"])  # beta = 0: A = 0 rows get no gradient
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0, 0.5, 0.5]))
    lora = [p for n, p in tiny_policy.named_parameters() if "lora_" in n]
    before = {n: p.detach().clone() for n, p in tiny_policy.named_parameters() if "lora_" in n}
    opt = torch.optim.AdamW(lora, lr=args.lr)
    m, _ = train.grpo_step(tiny_policy, tokenizer, problems, args, opt)
    # per problem: plan 1 codes [1, 0] -> R^P 0.5, plan 2 codes [0.5, 0.5] -> R^P 0.5
    assert m["reward"] == pytest.approx(0.5) and m["pass_all"] == 0.25
    assert m["frac_zero_std_coder"] == 0.5 and m["frac_zero_std_planner"] == 1.0
    assert m["coder_kl"] is None and m["skipped_updates"] == 0 and m["grad_norm"] > 0
    changed = {n.split(".")[-2] for n, p in tiny_policy.named_parameters() if "lora_" in n and not torch.equal(p, before[n])}
    assert changed == {"coder"}  # the planner had no signal: all its advantages were 0
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 1.0, 0.0, 0.0]))
    m, _ = train.grpo_step(tiny_policy, tokenizer, problems, args, opt)
    assert m["frac_zero_std_coder"] == 1.0 and m["frac_zero_std_planner"] == 0.0
    changed = {n.split(".")[-2] for n, p in tiny_policy.named_parameters() if "lora_" in n and not torch.equal(p, before[n])}
    assert changed == {"coder", "planner"}


def test_planner_lr_steps_the_planners_adapter_at_its_own_rate(tiny_policy, tokenizer, monkeypatch):
    """--planner-lr 1e-3 beside --lr 1e-2: AdamW's first step moves a weight by lr * g / (|g| + eps), so the
    largest change of each role's LoRA weights is its own rate (to 1e-4: eps = 1e-8 against gradients far
    above it); a cold-start SFT step at --sft-lr then gives each group its GRPO rate back. Without the flag,
    one group at --lr, as before (a checkpoint of an earlier run loads into it). Catches: the Planner's rate
    applied to the Coder, a group the optimizer or the clip misses, the SFT leaving every group at --lr."""
    import sft

    flags = ["--num-plans", "2", "--codes-per-plan", "2", "--max-plan-tokens", "8", "--max-code-tokens", "8",
             "--lr", "1e-2", "--sft-steps", "1", "--sft-batch", "1", "--sft-lr", "0.5"]
    assert len(train.param_groups(tiny_policy, [], train.get_args(flags))) == 1
    args = train.get_args(flags + ["--planner-lr", "1e-3"])
    groups = train.param_groups(tiny_policy, [], args)
    names = {id(p): n for n, p in tiny_policy.named_parameters()}
    assert [g["lr"] for g in groups] == [1e-2, 1e-3]
    assert {".planner." in names[id(p)] for p in groups[1]["params"]} == {True}
    assert {".planner." in names[id(p)] for p in groups[0]["params"]} == {False}
    opt = torch.optim.AdamW(groups, weight_decay=0.0)
    assert len(update.params(opt)) == len([n for n in names.values() if "lora_" in n])
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0, 0.0, 0.0]))  # both roles have signal
    before = lora_state(tiny_policy)
    train.grpo_step(tiny_policy, tokenizer, data.load("train")[:2], args, opt)
    moved = {role: max((p - before[n]).abs().max().item() for n, p in lora_state(tiny_policy).items()
                       if f".{role}." in n) for role in ("planner", "coder")}
    assert moved["planner"] == pytest.approx(1e-3, rel=1e-4) and moved["coder"] == pytest.approx(1e-2, rel=1e-4)
    sft.train(tiny_policy, tokenizer, data.load("train")[:1], "coder", args, opt)
    assert [g["lr"] for g in opt.param_groups] == [1e-2, 1e-3]


def lora_state(policy):
    return {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" in n}


def test_single_agent_step_has_one_group_of_g_times_m_codes(tiny_policy, tokenizer, monkeypatch):
    """--roles coder: no plans are sampled, the Coder writes G*M = 4 programs per problem from the
    plan-less prompt, they form one group, and the Planner adapter never moves. Catches: plans
    still sampled (and paid for), groups of M instead of G*M, the planner stepped by AdamW."""
    prompts = []
    real_sample = rollout.sample

    def spy(policy, tok, chats, n, *a, **k):
        prompts.append((len(chats), n, chats[0][-1]["content"]))
        return real_sample(policy, tok, chats, n, *a, **k)
    monkeypatch.setattr(rollout, "sample", spy)
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0, 0.0, 0.0]))
    args = train.get_args(["--roles", "coder", "--num-plans", "2", "--codes-per-plan", "2",
                           "--max-code-tokens", "6", "--lr", "1e-2"])
    before = lora_state(tiny_policy)
    opt = torch.optim.AdamW(list(p for n, p in tiny_policy.named_parameters() if "lora_" in n), lr=args.lr)
    m, samples = train.grpo_step(tiny_policy, tokenizer, data.load("train")[:1], args, opt)
    assert len(prompts) == 1 and prompts[0][:2] == (1, 4) and "Plan:" not in prompts[0][2]
    assert m["frac_zero_std_coder"] == 0.0 and "frac_zero_std_planner" not in m and m["reward"] == 0.25
    assert samples[0]["plan"] is None
    moved = {n.split(".")[-2] for n, p in tiny_policy.named_parameters() if "lora_" in n and not torch.equal(p, before[n])}
    assert moved == {"coder"}


def test_num_iterations_reuses_the_sampling_log_probs(tiny_policy, tokenizer, monkeypatch):
    """--num-iterations 2: both updates use the log-probs stored before the first one as pi_old, so
    the second update sees rho != 1. Catches: pi_old recomputed after the first update (rho would be
    1 again and clipping would never act), or old log-probs taken from another adapter."""
    import grpo
    calls = []
    real = grpo.grpo_loss

    def spy(logp, old, *a, **k):
        calls.append((logp.detach().clone(), old.clone()))
        return real(logp, old, *a, **k)
    monkeypatch.setattr(grpo, "grpo_loss", spy)
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0]))
    args = train.get_args(["--roles", "coder", "--num-plans", "1", "--codes-per-plan", "2", "--max-code-tokens", "6",
                           "--num-iterations", "2", "--lr", "5e-2"])
    opt = torch.optim.AdamW([p for n, p in tiny_policy.named_parameters() if "lora_" in n], lr=args.lr)
    train.grpo_step(tiny_policy, tokenizer, data.load("train")[:1], args, opt)
    (lp1, old1), (lp2, old2) = calls
    assert torch.allclose(lp1, old1, atol=1e-6) and torch.equal(old1, old2) and not torch.allclose(lp2, old2, atol=1e-4)


def test_init_copies_a_runs_adapters(tiny_policy, tokenizer, tmp_path):
    """train.py --init RUN: a fresh policy gets exactly the saved adapters. Catches: weights loaded
    under the wrong adapter name (silently ignored by peft), or the other role's file loaded."""
    from conftest import tiny_base
    from infra import checkpoint, models

    checkpoint.save_adapters(tiny_policy, tmp_path)
    fresh = models.add_role_adapters(tiny_base(tokenizer), ["planner", "coder"], r=4, alpha=8)
    models.init_role_adapters(fresh, tmp_path, ["planner", "coder"])
    want = lora_state(tiny_policy)
    got = lora_state(fresh)
    assert want.keys() == got.keys() and all(torch.equal(want[n], got[n]) for n in want)
    with pytest.raises(models.ModelError, match="no 'planner' adapter weights"):
        models.init_role_adapters(fresh, tmp_path / "nothing", ["planner"])


def test_a_single_agent_run_from_init_keeps_the_earlier_planner(tokenizer, monkeypatch, tmp_path):
    """train.py --roles coder --init SFT: both adapters come from the SFT's folder (the Coder to train, the
    Planner kept as it was), so the single agent's folder is still a whole Planner -> Coder system. Catches:
    the Planner left as a fresh adapter (B = 0: the base model's plans), which a later plan-mode evaluation or
    --init of that folder would take for the SFT's."""
    from conftest import tiny_base
    from infra import checkpoint, models

    monkeypatch.setattr(models, "load_base", lambda *a, **k: (tiny_base(tokenizer), tokenizer))
    sft = models.add_role_adapters(tiny_base(tokenizer), ["planner", "coder"], r=4, alpha=8)
    for n, p in sft.named_parameters():  # each role's B its own constant: a swap or a fresh adapter shows
        if "lora_B" in n:
            p.data = torch.full_like(p, 0.01 if ".planner." in n else 0.02)
    checkpoint.save_adapters(sft, tmp_path / "sft")
    args = train.get_args(["--roles", "coder", "--lora-r", "4", "--lora-alpha", "8"])
    args.init = str(tmp_path / "sft")
    assert train.init_roles(args.roles, args.init) == ["planner", "coder"]
    run = train.TrainingRun(args, 0, 1, "cpu", "none", tmp_path / "run", None, checkpoint.fresh_state())
    train.load_policy(run)
    want, got = lora_state(sft), lora_state(run.policy)
    assert want.keys() == got.keys() and all(torch.equal(want[n], got[n]) for n in want)
    assert train.init_roles(["planner", "coder", "debugger"], args.init) == ["planner", "coder"]  # a new Debugger: fresh


def test_non_finite_logits_in_one_sample_skip_the_step(tiny_policy, tokenizer, monkeypatch):  # docs/algorithm.md#non-finite-values-reach-the-optimizer
    """One row's log-probs are NaN: the step must be skipped and no weight may move. Catches: a
    nan_to_num / masked sum that hides the NaN, or an optimizer step taken after a NaN gradient."""
    problems = data.load("train")[:1]
    args = train.get_args(["--num-plans", "2", "--codes-per-plan", "2", "--max-plan-tokens", "6", "--max-code-tokens", "6"])
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0]))
    real = shared_prompt.completion_logprobs  # what the update pass calls

    def one_bad_row(*a, **k):
        lp = real(*a, **k)
        return torch.cat([lp[:1] * float("nan"), lp[1:]])
    monkeypatch.setattr(shared_prompt, "completion_logprobs", one_bad_row)
    before = lora_state(tiny_policy)
    opt = torch.optim.AdamW([p for n, p in tiny_policy.named_parameters() if "lora_" in n], lr=1e-2)
    m, _ = train.grpo_step(tiny_policy, tokenizer, problems, args, opt)
    assert m["skipped_updates"] == 1
    assert all(torch.equal(p, before[n]) for n, p in tiny_policy.named_parameters() if "lora_" in n)


def test_three_non_finite_steps_stop_with_a_checkpoint(tokenizer, monkeypatch, tmp_path):
    """train.main: steps 1-3 all non-finite -> one-line TrainingError, adapters saved, 3 metric lines."""
    from conftest import tiny_base
    from infra import models

    monkeypatch.setattr(models, "load_base", lambda *a, **k: (tiny_base(tokenizer), tokenizer))
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0]))
    real = shared_prompt.completion_logprobs
    monkeypatch.setattr(shared_prompt, "completion_logprobs", lambda *a, **k: real(*a, **k) * float("nan"))
    with pytest.raises(train.TrainingError, match="steps 1-3 all had a non-finite"):
        train.main(["--grpo-steps", "10", "--sft-steps", "0", "--problems-per-step", "1", "--num-plans", "2", "--codes-per-plan", "2",
                    "--max-plan-tokens", "4", "--max-code-tokens", "4", "--lora-r", "4", "--out", str(tmp_path)])
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m["skipped_updates"]) for m in lines] == [(1, 1), (2, 1), (3, 1)]
    assert (tmp_path / "adapters" / "coder" / "adapter_model.safetensors").exists()


def test_a_sandbox_that_judges_nothing_stops_the_run_at_a_checkpoint(tokenizer, monkeypatch, tmp_path):
    """Every program of two steps in a row gets sandbox_error (the sandbox's code was changed under a
    running train.py, the uid lease is gone...): one-line TrainingError naming the sandbox's own detail,
    a checkpoint at step 2 to --resume from, 2 metric lines. Catches: a run that goes on for hours with
    reward 0, learning nothing (this happened once: five runs side by side judged nothing for ten minutes)."""
    from conftest import tiny_base
    from infra import checkpoint, models

    monkeypatch.setattr(models, "load_base", lambda *a, **k: (tiny_base(tokenizer), tokenizer))
    monkeypatch.setattr(sandbox, "run_many", lambda jobs, workers=None, progress=False: [
        sandbox.not_run("sandbox_error", 4, "sandbox: KeyError: 'hide_files'") for _ in jobs])
    with pytest.raises(train.TrainingError, match=r"^steps 1-2: the sandbox failed on every program "
                       r"\(sandbox: KeyError: 'hide_files'\); stopped at a checkpoint, --resume "):
        train.main(["--grpo-steps", "10", "--sft-steps", "0", "--problems-per-step", "1", "--num-plans", "2",
                    "--codes-per-plan", "2", "--max-plan-tokens", "4", "--max-code-tokens", "4", "--lora-r", "4",
                    "--out", str(tmp_path)])
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m["verdicts"]) for m in lines] == [(1, {"sandbox_error": 4}), (2, {"sandbox_error": 4})]
    assert checkpoint.latest(tmp_path).name == "step-000002"


def test_kl_zero_before_update_then_positive_for_the_trained_role_only(tiny_policy, tokenizer, monkeypatch):
    # docs/algorithm.md#kl-is-not-zero-before-the-first-update
    """Fresh adapters (B = 0) + beta > 0: the step's KL is exactly 0; after it only the Coder (the one
    role with signal) moved away from the reference. Catches: a reference that is a copy taken after
    the update, a KL measured against the old policy, an update leaking into the other adapter."""
    for n, p in tiny_policy.named_parameters():
        if "lora_B" in n:
            torch.nn.init.zeros_(p)
    args = train.get_args(["--num-plans", "2", "--codes-per-plan", "2", "--max-plan-tokens", "6",
                           "--max-code-tokens", "6", "--lr", "1e-2", "--beta", "0.1"])
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0, 0.5, 0.5]))  # planner: R^P equal
    opt = torch.optim.AdamW([p for n, p in tiny_policy.named_parameters() if "lora_" in n], lr=args.lr)
    m, _ = train.grpo_step(tiny_policy, tokenizer, data.load("train")[:1], args, opt)
    assert m["coder_kl"] == 0.0 and m["planner_kl"] == 0.0 and m["frac_zero_std_planner"] == 1.0
    r = rollout.from_texts(tokenizer, CHATS, ["x = 1", "y"])
    with torch.no_grad(), tiny_policy.disable_adapter():
        ref = rollout.logprobs(tiny_policy, r)
    kl = {}
    for role in ("planner", "coder"):
        tiny_policy.set_adapter(role)
        with torch.no_grad():
            lp = rollout.logprobs(tiny_policy, r)
        kl[role] = ((torch.exp(ref - lp) - (ref - lp) - 1) * r.mask).sum().item()
    assert kl["planner"] == 0.0 and kl["coder"] > 0


def test_one_sided_group_gives_adapter_gradient_equal_group_none(tiny_policy, tokenizer):  # docs/algorithm.md#equal-rewards-give-nan-or-non-zero-advantages
    """Rewards [1, 0, 0, 0] -> non-zero LoRA gradient; [1, 1, 1, 1] -> no forward at all (beta = 0)
    and exactly zero loss. Catches: NaN from std = 0, or a tiny non-zero advantage from (r - mean)
    rounding that trains on noise."""
    import grpo
    r = rollout.from_texts(tokenizer, [CHATS[0]] * 4, ["a", "b c", "d e f", "g"])
    args = train.get_args([])
    for rewards, expect_grad in (([1.0, 0.0, 0.0, 0.0], True), ([1.0] * 4, False)):
        tiny_policy.zero_grad(set_to_none=True)
        adv, _ = grpo.group_advantages(torch.tensor([rewards]), torch.ones(1, 4, dtype=torch.bool))
        clock = progress.Clock("cpu")
        loss, _ = update.role_backward(tiny_policy, "coder", r, adv[0], torch.ones(4, dtype=torch.bool), 8, args, clock)
        grads = [p.grad for n, p in tiny_policy.named_parameters() if "lora_B.coder" in n]
        if expect_grad:
            assert all(g is not None and torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)
        else:
            assert loss == 0.0 and all(g is None for g in grads) and "policy_forward_backward" not in clock.s


def coder_grads(policy, r, adv, args):
    policy.zero_grad(set_to_none=True)
    loss, _ = update.role_backward(policy, "coder", r, adv, torch.ones(len(adv), dtype=torch.bool), 16, args,
                                  progress.Clock("cpu"))
    return loss, {n: p.grad.clone() for n, p in policy.named_parameters() if "lora_" in n and p.grad is not None}


@pytest.mark.parametrize("loss_type", ["token", "grpo"])
def test_micro_batches_and_masked_samples(tiny_policy, tokenizer, loss_type):  # docs/algorithm.md#excluded-samples-still-count-in-the-normaliser
    """(a) 1 batch of 8 and 4 micro-batches of 2 give the same gradients (atol 1e-6); (b) the loss with
    one sample masked as truncated (--mask-truncated) equals the loss with that sample removed.
    Catches: a per-micro-batch normaliser (loss scale changes with --micro-batch), a truncated
    sample still counted in the token count / sequence count."""
    texts = ["a", "b c", "d e f", "g h", "i j k l", "m", "n o p", "q r"]
    chats = [CHATS[i % 2] for i in range(8)]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.25, -0.25])
    r = rollout.from_texts(tokenizer, chats, texts)
    full_loss, full = coder_grads(tiny_policy, r, adv, train.get_args(["--loss-type", loss_type, "--micro-batch", "8"]))
    micro_loss, micro = coder_grads(tiny_policy, r, adv, train.get_args(["--loss-type", loss_type, "--micro-batch", "2"]))
    assert full and full.keys() == micro.keys()
    assert micro_loss == pytest.approx(full_loss, abs=1e-6)
    assert all(torch.allclose(full[n], micro[n], atol=1e-6) for n in full)
    r.truncated[4] = True  # pretend sample 4 hit the token budget
    masked, _ = coder_grads(tiny_policy, r, adv, train.get_args(["--loss-type", loss_type, "--mask-truncated"]))
    keep = [i for i in range(8) if i != 4]
    r7 = rollout.from_texts(tokenizer, [chats[i] for i in keep], [texts[i] for i in keep])
    removed, _ = coder_grads(tiny_policy, r7, adv[keep], train.get_args(["--loss-type", loss_type]))
    assert masked == pytest.approx(removed, abs=1e-5) and masked != pytest.approx(full_loss, abs=1e-3)


@pytest.mark.parametrize("loss_type, w0, w2", [("token", 1 / 5, 1 / 5), ("grpo", 1 / 6, 1 / 4), ("dr_grpo", 1 / 32, 1 / 32)])
def test_an_empty_completion_stays_out_of_the_normaliser(tiny_policy, tokenizer, monkeypatch, loss_type, w0, w2):
    """One group of 3 completions, the middle one empty (Rollout.valid False): 'a b' + EOS (3 tokens), '' + EOS
    (1 token), 'c' + EOS (2 tokens). By hand, the weights grpo_loss gets: token: 1 / (3 + 2) on each of rows
    0 and 2; grpo: 1 / (3 * 2) and 1 / (2 * 2) (2 sequences); dr_grpo: 1 / (2 * 16). Catches: the empty
    completion's EOS counted in the normaliser (update.py's mask without `* valid`: 1/6, 1/9 and 1/6, 1/48)."""
    import grpo
    r = rollout.from_texts(tokenizer, [CHATS[0]] * 3, ["a b", "", "c"])
    assert r.mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]] and r.valid.tolist() == [True, False, True]
    seen = []
    real = grpo.grpo_loss
    monkeypatch.setattr(grpo, "grpo_loss", lambda logp, old, ref, adv, w, *a: seen.append(w.clone()) or real(logp, old, ref, adv, w, *a))
    args = train.get_args(["--loss-type", loss_type, "--micro-batch", "8"])
    update.role_backward(tiny_policy, "coder", r, torch.tensor([1.0, 0.0, -1.0]), r.valid, 16, args, progress.Clock("cpu"))
    assert len(seen) == 1 and seen[0].flatten().tolist() == pytest.approx([w0] * 3 + [w2, w2, 0.0], rel=1e-6)


def test_memory_rss_flat_over_30_steps(tiny_policy, tokenizer, monkeypatch):  # docs/algorithm.md#memory-grows-step-after-step
    """RSS after step 5 and after step 30 within 5%. Catches: metrics kept as tensors (each holds its
    graph), a list of losses with grad, rollouts appended to a history."""
    import gc
    problems = data.load("train")[:1]
    args = train.get_args(["--num-plans", "2", "--codes-per-plan", "2", "--max-plan-tokens", "6", "--max-code-tokens", "6"])
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0]))
    opt = torch.optim.AdamW([p for n, p in tiny_policy.named_parameters() if "lora_" in n], lr=1e-3)
    rss, history = {}, []
    for step in range(1, 31):
        m, _ = train.grpo_step(tiny_policy, tokenizer, problems, args, opt)
        history.append(m)  # as train.main keeps them: plain floats only
        if step in (5, 30):
            gc.collect()
            rss[step] = int(open("/proc/self/statm").read().split()[1])  # resident pages
    assert abs(rss[30] - rss[5]) < 0.05 * rss[5], rss


def test_generation_under_gradient_checkpointing_uses_kv_cache(tiny_policy, tokenizer):
    # docs/algorithm.md#generation-runs-without-the-kv-cache
    """Gradient checkpointing on and the model in train mode (as during the update): every decode
    forward after the prompt must see ONE new token. Catches: HF silently turning use_cache off
    under checkpointing in train mode (each forward would then re-read the whole sequence)."""
    tiny_policy.activation_checkpointing_enable()  # transformers 5's name for gradient checkpointing
    tiny_policy.train()
    widths = []
    embed = tiny_policy.get_input_embeddings()
    handle = embed.register_forward_hook(lambda mod, inp, out: widths.append(inp[0].shape[1]))
    try:
        r = rollout.sample(tiny_policy, tokenizer, CHATS, 1, 5, temperature=0)
    finally:
        handle.remove()
    assert r.prompt_len > 1 and widths[0] == r.prompt_len and widths[1:] == [1] * (len(widths) - 1)
    assert len(widths) >= 2 and tiny_policy.training  # sampling restores train mode


def test_gradient_checkpointing_flag_recomputes_in_training_and_sampling_keeps_the_cache(tokenizer, monkeypatch, tmp_path):
    """--gradient-checkpointing through train.load_policy (the tiny Qwen2 as the base): the loss pass scores row by
    row (the shared-prompt pass needs the cache the checkpointed layers drop), each decoder layer runs twice per
    micro-batch (forward, then recomputed in the backward: 4 calls for 2 micro-batches; 2 without the flag), the
    LoRA gradients equal those without the flag (1e-6), and the sampler still uses the KV cache (every forward
    after the prompt sees one new token). Catches: the flag not reaching the model, checkpointing that changes
    the gradients, the sampler losing its cache under checkpointing (known GRPO bug: generation without it)."""
    from conftest import tiny_base
    from infra import checkpoint, models

    monkeypatch.setattr(models, "load_base", lambda *a, **k: (tiny_base(tokenizer), tokenizer))
    r = rollout.from_texts(tokenizer, [CHATS[0], CHATS[0], CHATS[1], CHATS[1]], ["a b", "c", "d e f", "g"])
    r.n = 2
    grads, calls = {}, {}
    for on in (True, False):
        args = train.get_args(["--lora-r", "4", "--lora-alpha", "8", "--micro-batch", "2", "--no-shared-prompt"]
                              + (["--gradient-checkpointing"] if on else []))
        run = train.TrainingRun(args, 0, 1, "cpu", "none", tmp_path, None, checkpoint.fresh_state())
        train.load_policy(run)
        policy = run.policy
        for n, p in policy.named_parameters():  # B != 0, the same in both policies
            if "lora_B" in n:
                p.data = torch.full_like(p, 0.01)
        policy.train()
        policy.set_adapter("coder")
        assert isinstance(update.scorer(policy, r, train.get_args(["--gradient-checkpointing"] if on else [])),
                          chunked.RowByRow if on else shared_prompt.SharedPrompt)
        layer = policy.base_model.model.model.layers[0].self_attn
        calls[on] = 0
        handle = layer.register_forward_hook(lambda *_: calls.__setitem__(on, calls[on] + 1))
        update.role_backward(policy, "coder", r, torch.tensor([1.0, -1.0, 0.5, -0.5]), r.valid, 16, args,
                             progress.Clock("cpu"))
        handle.remove()
        grads[on] = {n: p.grad for n, p in policy.named_parameters() if p.grad is not None}
        if on:
            widths = []
            handle = policy.get_input_embeddings().register_forward_hook(lambda mod, inp, out: widths.append(inp[0].shape[1]))
            s = rollout.sample(policy, tokenizer, CHATS[:1], 1, 5, temperature=0)
            handle.remove()
            assert widths[0] == s.prompt_len and widths[1:] == [1] * (len(widths) - 1) and len(widths) >= 2
            assert policy.training  # sampling restores train mode
    assert calls == {True: 4, False: 2}
    assert grads[True] and grads[True].keys() == grads[False].keys()
    assert all(torch.allclose(grads[True][n], grads[False][n], atol=1e-6) for n in grads[True])


def test_sample_uses_kv_cache(tiny_policy, tokenizer, monkeypatch):  # docs/algorithm.md#generation-runs-without-the-kv-cache
    """Every forward of the sampler gets the KV cache: the prefill sees the 2 distinct prompts once (not
    2 x 3 copies), each later forward one new token per running row. Catches: use_cache off, the cache
    not passed (each step would re-read the whole sequence), prompts prefilled n times."""
    seen = []
    real = tiny_policy.forward

    def spy(*a, **k):
        seen.append((tuple(k["input_ids"].shape), k.get("use_cache"), k.get("cache") is not None))
        return real(*a, **k)
    monkeypatch.setattr(tiny_policy, "forward", spy)
    r = rollout.sample(tiny_policy, tokenizer, CHATS, 3, 5)
    assert seen[0] == ((2, r.prompt_len), True, True)
    assert all(w == 1 and 1 <= b <= 6 and use and cache for (b, w), use, cache in seen[1:]) and len(seen) >= 2
    assert r.seqs.shape[0] == 6 and r.mask.shape[1] == r.seqs.shape[1] - r.prompt_len and r.n == 3


def test_stopped_rows_end_in_eos_when_pad_differs(tiny_policy, tokenizer):  # Qwen: pad != eos
    import copy
    tok = copy.deepcopy(tokenizer)
    tok.pad_token = "<|endoftext|>"
    assert tok.pad_token_id != tok.eos_token_id
    torch.manual_seed(0)
    r = rollout.sample(tiny_policy, tok, CHATS, 2, 6, temperature=1.0, stop=r"\S")  # stop at once
    comp = r.seqs[:, r.prompt_len:]
    assert (comp == tok.pad_token_id).sum() == 0  # finished rows are padded with EOS, not pad
    stopped = [i for i, t in enumerate(r.texts) if t.strip()]
    assert stopped and not r.truncated[stopped].any()
    for i in stopped:  # the mask ends at the pattern: the EOS padding after it was never sampled
        n = int(r.mask[i].sum())
        assert n >= 1 and r.mask[i, :n].all() and (comp[i, n:] == tok.eos_token_id).all()
        assert tok.decode(comp[i, :n]) == r.texts[i]


def test_sft_loss_equals_transformers_cross_entropy(tiny_policy, tokenizer):
    """sft.train's logged loss (lr 0) equals the mean cross-entropy transformers computes with labels
    = the target tokens + EOS (-100 on the prompt). Catches: the target shifted by one, the prompt
    counted in the loss, the EOS left out of the target."""
    import io
    import random

    import coder
    import sft

    problem = data.load("train")[0]
    args = train.get_args(["--sft-steps", "1", "--sft-batch", "1", "--sft-lr", "0", "--max-grad-norm", "1e9"])
    opt = torch.optim.SGD([p for n, p in tiny_policy.named_parameters() if "lora_" in n], lr=0.0)
    log = io.StringIO()
    random.seed(0)
    sft.train(tiny_policy, tokenizer, [problem], "coder", args, opt, log)
    ours = json.loads(log.getvalue())["loss"]
    enc = rollout.encode_prompts(tokenizer, [coder.messages(problem, problem.plan)], "cpu")
    target = tokenizer(coder.sft_target(problem), add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    ids = torch.cat([enc.input_ids, torch.tensor([target])], 1)
    labels = ids.clone()
    labels[:, :enc.input_ids.shape[1]] = -100
    tiny_policy.set_adapter("coder")
    with torch.no_grad():
        want = tiny_policy(input_ids=ids, labels=labels).loss.item()
    assert ours == pytest.approx(want, rel=1e-5)


def test_sft_step_is_one_sgd_step_on_the_cross_entropy(tiny_policy, tokenizer):
    """One sft.train step with SGD (lr = --sft-lr 0.5) moves each Coder LoRA weight by exactly
    -0.5 * d CE / d weight, the gradient computed independently by transformers (labels = target + EOS,
    -100 on the prompt); a stale gradient left in .grad (7.0 everywhere) must not leak in; lr is set
    back to --lr after. Catches: no optimizer.zero_grad (the stale 7.0 is added), a summed instead of
    a token-mean loss (a step ~T times too big), the loss sign flipped (a step up the loss)."""
    import random

    import coder
    import sft

    problem = data.load("train")[0]
    args = train.get_args(["--sft-steps", "1", "--sft-batch", "1", "--sft-lr", "0.5", "--lr", "1e-3",
                           "--max-grad-norm", "1e9"])
    tiny_policy.set_adapter("coder")
    lora = [p for n, p in tiny_policy.named_parameters() if "lora_" in n and ".coder" in n]
    enc = rollout.encode_prompts(tokenizer, [coder.messages(problem, problem.plan)], "cpu")
    target = tokenizer(coder.sft_target(problem), add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    ids = torch.cat([enc.input_ids, torch.tensor([target])], 1)
    labels = ids.clone()
    labels[:, :enc.input_ids.shape[1]] = -100
    want = torch.autograd.grad(tiny_policy(input_ids=ids, labels=labels).loss, lora)
    before = [p.detach().clone() for p in lora]
    for p in lora:
        p.grad = torch.full_like(p, 7.0)  # left over from an earlier step
    opt = torch.optim.SGD(lora, lr=123.0)
    random.seed(0)
    sft.train(tiny_policy, tokenizer, [problem], "coder", args, opt)
    assert any(g.abs().max() > 1e-4 for g in want)  # the check below is not vacuous
    assert all(torch.allclose(p.detach(), b - 0.5 * g, atol=1e-6) for p, b, g in zip(lora, before, want))
    assert opt.param_groups[0]["lr"] == 1e-3
