"""Rollout + loss on a tiny random Qwen2 (seconds): the known GRPO bugs 1, 2, 4, 6, 7 and one full step."""
import types

import pytest
import torch

import data
import rollout
import sandbox
import train

CHATS = [[{"role": "user", "content": "Write a function that adds two numbers."}],
         [{"role": "user", "content": "Hi"}]]  # different lengths: row 2 is left-padded


def test_left_padding_does_not_change_logprobs(tiny_policy, tokenizer):  # known bug 1
    r = rollout.from_texts(tokenizer, CHATS, ["def add(a, b): return a + b", "Hello there"])
    assert r.attn[1].sum() < r.attn.shape[1]  # the short prompt really is padded
    both = rollout.logprobs(tiny_policy, r)
    alone = rollout.from_texts(tokenizer, CHATS[1:], ["Hello there"])
    T = alone.mask.shape[1]
    assert torch.allclose(both[1, :T] * alone.mask[0], rollout.logprobs(tiny_policy, alone)[0] * alone.mask[0], atol=1e-5)


def test_sft_rollout_mask_keeps_final_eos(tiny_policy, tokenizer):  # known bug 2 (pad == eos)
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    r = rollout.from_texts(tokenizer, CHATS, ["a b c", "a"])
    n = [len(tokenizer("a b c", add_special_tokens=False).input_ids), len(tokenizer("a", add_special_tokens=False).input_ids)]
    assert r.mask.sum(1).tolist() == [n[0] + 1, n[1] + 1]  # every token of the answer + its EOS
    assert r.seqs[1, r.prompt_len + n[1]].item() == tokenizer.eos_token_id


def test_sampler_and_trainer_logprobs_agree(tiny_policy, tokenizer):  # known bug 4
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


def test_reference_is_base_and_kl_zero_before_update(tiny_policy, tokenizer):  # known bug 6
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
    problems = data.load("train")[:2]
    args = train.get_args(["--num-plans", "2", "--codes-per-plan", "2", "--max-plan-tokens", "8",
                           "--max-code-tokens", "8", "--lr", "1e-2", "--beta", "0.1"])
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0, 0.5, 0.5]))
    lora = [p for n, p in tiny_policy.named_parameters() if "lora_" in n]
    before = {n: p.detach().clone() for n, p in tiny_policy.named_parameters() if "lora_" in n}
    opt = torch.optim.AdamW(lora, lr=args.lr)
    m, _ = train.grpo_step(tiny_policy, tokenizer, problems, args, opt)
    # per problem: plan 1 codes [1, 0] -> R^P 0.5, plan 2 codes [0.5, 0.5] -> R^P 0.5
    assert m["reward"] == pytest.approx(0.5) and m["pass_all"] == 0.25
    assert m["frac_zero_std_coder"] == 0.5 and m["frac_zero_std_planner"] == 1.0
    assert m["coder_kl"] > 0 and m["skipped_updates"] == 0 and m["grad_norm"] > 0
    changed = {n.split(".")[-2] for n, p in tiny_policy.named_parameters() if "lora_" in n and not torch.equal(p, before[n])}
    assert changed == {"coder"}  # the planner had no signal: all its advantages were 0
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 1.0, 0.0, 0.0]))
    m, _ = train.grpo_step(tiny_policy, tokenizer, problems, args, opt)
    assert m["frac_zero_std_coder"] == 1.0 and m["frac_zero_std_planner"] == 0.0
    changed = {n.split(".")[-2] for n, p in tiny_policy.named_parameters() if "lora_" in n and not torch.equal(p, before[n])}
    assert changed == {"coder", "planner"}


def test_non_finite_loss_never_reaches_the_optimizer(tiny_policy, tokenizer, monkeypatch):  # known bug 5
    problems = data.load("train")[:1]
    args = train.get_args(["--num-plans", "2", "--codes-per-plan", "2", "--max-plan-tokens", "6", "--max-code-tokens", "6"])
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0]))
    real = rollout.logprobs
    monkeypatch.setattr(rollout, "logprobs", lambda *a, **k: real(*a, **k) * float("nan"))
    before = {n: p.detach().clone() for n, p in tiny_policy.named_parameters() if "lora_" in n}
    opt = torch.optim.AdamW([p for n, p in tiny_policy.named_parameters() if "lora_" in n], lr=1e-2)
    m, _ = train.grpo_step(tiny_policy, tokenizer, problems, args, opt)
    assert m["skipped_updates"] == 1
    assert all(torch.equal(p, before[n]) for n, p in tiny_policy.named_parameters() if "lora_" in n)


def test_memory_does_not_grow_across_steps(tiny_policy, tokenizer, monkeypatch):  # known bug 7
    import gc
    problems = data.load("train")[:1]
    args = train.get_args(["--num-plans", "2", "--codes-per-plan", "2", "--max-plan-tokens", "6", "--max-code-tokens", "6"])
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0]))
    opt = torch.optim.AdamW([p for n, p in tiny_policy.named_parameters() if "lora_" in n], lr=1e-3)
    counts = []
    for _ in range(4):
        m, _ = train.grpo_step(tiny_policy, tokenizer, problems, args, opt)
        assert all(v is None or isinstance(v, (int, float, dict)) for v in m.values())  # no tensors kept
        gc.collect()
        counts.append(sum(isinstance(o, torch.Tensor) for o in gc.get_objects()))
    assert counts[3] == counts[1]  # after the optimizer state exists, the number of live tensors is flat


def test_sample_uses_kv_cache(tiny_policy, tokenizer, monkeypatch):  # known bug 8
    seen = {}
    real = tiny_policy.generate

    def spy(*a, **k):
        seen.update(k)
        return real(*a, **k)
    monkeypatch.setattr(tiny_policy, "generate", spy)
    r = rollout.sample(tiny_policy, tokenizer, CHATS, 2, 5)
    assert seen["use_cache"] is True
    assert r.seqs.shape[0] == 4 and r.mask.shape[1] == r.seqs.shape[1] - r.prompt_len


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
