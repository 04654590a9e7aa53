"""Hidden tests of rollout.logprobs and sft.train's step (course/exercises.toml `hidden`), on the tiny
random Qwen2 of tests/conftest.py: each number comes from an independent computation here (one
unpadded row at a time through the model's full logits; transformers' own cross-entropy)."""
import random

import pytest
import torch

import coder
import data
import rollout
import train

CHATS = [[{"role": "user", "content": "Reverse a list."}],
         [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sort three numbers in place, please."}],
         [{"role": "user", "content": "Max?"}]]
TEXTS = ["def rev(xs):\n    return xs[::-1]", "a.sort()", "max(a)"]


def unpadded_logprobs(policy, r, i):
    """Row i alone, its left padding dropped, through the full logits (no logits_to_keep, no mask):
    log_softmax at position p - 1 + t, gathered at completion token t ([T])."""
    keep = r.attn[i].bool()
    ids = r.seqs[i][keep][None]  # [1, p + T]
    p = int(keep[:r.prompt_len].sum())
    with torch.no_grad():
        logits = policy(input_ids=ids).logits[0].float()  # [p + T, V]
    T = r.seqs.shape[1] - r.prompt_len
    return torch.log_softmax(logits[p - 1:p - 1 + T], -1).gather(-1, ids[0, p:, None])[:, 0]


def test_hidden_logprobs_match_unpadded_rows(tiny_policy, tokenizer):
    """Three prompts of different lengths (two rows left-padded): every completion token's log-prob
    equals that of its row computed alone without padding. Catches: the shift the wrong way, the
    attention mask left out (the pads change the padded rows), T positions kept instead of T + 1."""
    tiny_policy.set_adapter("planner")
    r = rollout.from_texts(tokenizer, CHATS, TEXTS)
    assert (r.attn[:, :r.prompt_len].sum(1) < r.prompt_len).sum() == 2  # two rows really are padded
    with torch.no_grad():
        got = rollout.logprobs(tiny_policy, r)
    assert got.shape == r.mask.shape and got.dtype == torch.float32
    for i in range(3):
        assert torch.allclose(got[i], unpadded_logprobs(tiny_policy, r, i), atol=1e-5), i


def test_hidden_logprobs_of_some_rows(tiny_policy, tokenizer):
    """rows=slice(1, 3) gives rows 1 and 2 of the whole batch's log-probs, and they carry a gradient.
    Catches: the rows argument ignored (all three rows come back)."""
    r = rollout.from_texts(tokenizer, CHATS, TEXTS)
    part = rollout.logprobs(tiny_policy, r, rows=slice(1, 3))
    with torch.no_grad():
        whole = rollout.logprobs(tiny_policy, r)
    assert torch.allclose(part.detach(), whole[1:3], atol=1e-5) and part.requires_grad


def two_pair_loss(policy, tokenizer, problems):
    """The token-mean cross-entropy over BOTH pairs' target tokens (EOS included), from transformers'
    per-row mean loss: sum_i n_i * CE_i / sum_i n_i."""
    total, count = 0.0, 0
    for p in problems:
        enc = rollout.encode_prompts(tokenizer, [coder.messages(p, p.plan)], "cpu")
        target = tokenizer(coder.sft_target(p), add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        ids = torch.cat([enc.input_ids, torch.tensor([target])], 1)
        labels = ids.clone()
        labels[:, :enc.input_ids.shape[1]] = -100
        total = total + policy(input_ids=ids, labels=labels).loss * len(target)
        count += len(target)
    return total / count


@pytest.mark.parametrize("max_norm", [1e9, 1e-3])
def test_hidden_sft_step_on_two_pairs(tiny_policy, tokenizer, max_norm):
    """One sft.train step on a batch of two pairs (--sft-batch 2, SGD lr 0.25, a stale gradient of 3.0
    left in .grad): each Coder LoRA weight moves by -0.25 * g * c, g = d CE / d w of two_pair_loss and
    c = min(1, max_norm / (||g|| + 1e-6)) (torch's clip_grad_norm_ over the optimizer's weights).
    Catches: no zero_grad (3.0 leaks in), a summed loss (a step ~n tokens too big), the sign, no clip."""
    import sft

    problems = data.load("train")[1:3]
    args = train.get_args(["--sft-steps", "1", "--sft-batch", "2", "--sft-lr", "0.25", "--max-grad-norm", str(max_norm)])
    tiny_policy.set_adapter("coder")
    lora = [p for n, p in tiny_policy.named_parameters() if "lora_" in n and ".coder" in n]
    g = torch.autograd.grad(two_pair_loss(tiny_policy, tokenizer, problems), lora)
    norm = torch.sqrt(sum((x ** 2).sum() for x in g)).item()
    c = min(1.0, max_norm / (norm + 1e-6))
    assert norm > 1e-3  # the clipped case really clips, the other does not
    before = [p.detach().clone() for p in lora]
    for p in lora:
        p.grad = torch.full_like(p, 3.0)
    opt = torch.optim.SGD(lora, lr=99.0)
    random.seed(1)
    sft.train(tiny_policy, tokenizer, problems, "coder", args, opt)
    assert all(torch.allclose(p.detach(), b - 0.25 * c * x, atol=1e-6, rtol=1e-4) for p, b, x in zip(lora, before, g))
