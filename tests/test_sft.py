"""Cold-start SFT over micro-batches: the same loss and gradient as the whole batch in one forward."""
import io
import json
import random

import pytest
import torch

import data
import grpo
import rollout
import sft
import train
from fast import cpu_linear


def full_batch_loss(policy, tok, chats, targets):
    """The step as it was before micro-batches: one teacher-forced Rollout of every pair, padded to the
    longest, the token-mean weights of grpo.loss_weights over all of them."""
    r = rollout.from_texts(tok, chats, targets)
    return -(rollout.logprobs(policy, r) * grpo.loss_weights(r.mask, "token")).sum()


@pytest.mark.parametrize("routed,products,tol", [(False, "float32", 1e-6), (True, "float32", 1e-6),
                                                 (True, "bfloat16", 2e-2)])
def test_micro_batched_sft_step_equals_the_full_batch(tiny_policy, tokenizer, routed, products, tol):
    """One sft.train step (lr 0: the weights stay) on 5 Coder pairs with --micro-batch 2 (parts of 2, 2, 1,
    each padded to its own lengths): its logged loss equals the full batch's (float32) within tol relative, and
    the gradient it leaves equals the full batch's (max |difference| < tol relative to the largest entry), with
    the frozen linears on the oneDNN path (routed) or plain: tol 1e-6 in float32, 2e-2 with the frozen
    products in bf16 (--sft-products bfloat16: 8 bits of mantissa), whose use the step's line records.
    Catches: one normaliser per micro-batch (a part's mean, not the step's), a micro-batch dropped or counted
    twice, the padding of a short part entering the loss, bf16 asked for and not used (or used unasked)."""
    if routed and not cpu_linear.install(tiny_policy):
        pytest.skip("oneDNN's linear is not available in this torch build")
    if routed and products == "bfloat16" and not cpu_linear.bf16_runs():
        pytest.skip("oneDNN has no bfloat16 product on this CPU (no AVX-512)")
    problems = data.load("train")[:5]
    args = train.get_args(["--sft-steps", "1", "--sft-batch", "5", "--micro-batch", "2", "--sft-lr", "0",
                           "--max-grad-norm", "1e9", "--sft-products", products])
    tiny_policy.set_adapter("coder")
    lora = [p for n, p in tiny_policy.named_parameters() if "lora_" in n and ".coder" in n]
    random.seed(3)
    chats, targets = map(list, zip(*random.sample(sft.pairs(problems, "coder", args.roles), 5)))
    parts = sft.micro_batches(tokenizer, chats, targets, 2, "cpu")
    assert [len(r.texts) for r in parts] == [2, 2, 1]
    assert len({r.seqs.shape[1] for r in parts}) > 1  # each part padded to its own width
    want_loss = full_batch_loss(tiny_policy, tokenizer, chats, targets)
    want = torch.autograd.grad(want_loss, lora)
    opt = torch.optim.SGD(lora, lr=0.0)
    log = io.StringIO()
    random.seed(3)
    sft.train(tiny_policy, tokenizer, problems, "coder", args, opt, log)
    line = json.loads(log.getvalue())
    assert line["loss"] == pytest.approx(want_loss.item(), rel=tol, abs=1e-6) and line["products"] == products
    if products == "bfloat16":
        assert line["loss"] != pytest.approx(want_loss.item(), abs=1e-7)  # the rounding shows: bf16 was used
    scale = max(g.abs().max().item() for g in want)
    assert scale > 1e-4
    assert max((p.grad - g).abs().max().item() for p, g in zip(lora, want)) < tol * max(1.0, scale)
    n_prompt = sum(int(r.attn[:, :r.prompt_len].sum()) for r in parts)
    assert line["tokens"] == n_prompt + sum(len(tokenizer(t, add_special_tokens=False).input_ids) + 1 for t in targets)
    assert line["positions"] == sum(r.seqs.numel() for r in parts)


def test_a_micro_batch_holds_at_most_max_positions_past_its_first_pair(tokenizer):
    """5 Coder pairs of token lengths l0 < l1 < l2 < l3 < l4 (sorted), --micro-batch 2, max_positions 2 * l3 - 1:
    [0, 1] (2 pairs: full), then [2] alone since pair 3 would make 2 * l3 > the budget, [3], and [4] alone
    although l4 exceeds the budget (a pair is never cut or dropped); without a budget [0, 1], [2, 3], [4].
    Catches: the budget ignored (the two longest Coder pairs shared a micro-batch: 4.3 GiB), a pair over the
    budget dropped, the budget counted on the shortest pair of a group instead of its longest."""
    chats, targets = map(list, zip(*sft.pairs(data.load("train")[:5], "coder", ["planner", "coder"])))
    prompts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    lengths = [len(x) for x in tokenizer([p + t for p, t in zip(prompts, targets)], add_special_tokens=False).input_ids]
    order = sorted(range(5), key=lengths.__getitem__)
    l = [lengths[i] for i in order]
    assert len(set(l)) == 5, l  # distinct, so the groups below are the only answer
    by_text = lambda parts: [[targets.index(t) for t in r.texts] for r in parts]  # noqa: E731
    capped = sft.micro_batches(tokenizer, chats, targets, 2, "cpu", max_positions=2 * l[3] - 1)
    assert by_text(capped) == [[order[0], order[1]], [order[2]], [order[3]], [order[4]]]
    plain = sft.micro_batches(tokenizer, chats, targets, 2, "cpu", max_positions=None)
    assert by_text(plain) == [[order[0], order[1]], [order[2], order[3]], [order[4]]]


def test_sft_products_auto_is_bf16_only_where_the_cpu_has_it(monkeypatch):
    """--sft-products: bfloat16 and float32 as asked; auto bfloat16 only with oneDNN and native bf16 (the CPU
    flags avx512_bf16 or amx_bf16). Catches: auto turning emulated bf16 on (slower than float32 there)."""
    for has_onednn, native, want in [(True, True, True), (True, False, False), (False, True, False)]:
        monkeypatch.setattr(cpu_linear, "available", lambda: has_onednn)
        monkeypatch.setattr(cpu_linear, "native_bf16", lambda: native)
        monkeypatch.setattr(cpu_linear, "bf16_runs", lambda: True)
        assert cpu_linear.use_bf16("auto") is want
        assert cpu_linear.use_bf16("bfloat16") and not cpu_linear.use_bf16("float32")


def test_sft_products_bfloat16_where_onednn_has_no_bf16_product_stays_float32(monkeypatch, capsys):
    """--sft-products bfloat16 on a CPU without AVX-512 (oneDNN raised "could not create a primitive descriptor"
    in the first SFT step): float32 products, and one line on stderr says so."""
    monkeypatch.setattr(cpu_linear, "bf16_runs", lambda: False)
    assert cpu_linear.use_bf16("bfloat16") is False
    assert capsys.readouterr().err == ("--sft-products bfloat16: oneDNN has no bfloat16 product on this CPU (no "
                                       "AVX-512); the products stay float32\n")


def test_sft_steps_run_in_train_mode_and_the_mode_is_put_back(tiny_policy, tokenizer, monkeypatch):
    """A model as from_pretrained leaves it (eval mode): every loss forward of sft.train sees train mode (2 steps
    of 1 micro-batch: [True, True]), and eval mode is back afterwards (the rollouts that follow sample in it).
    Catches: SFT in eval mode (no dropout; HF's gradient checkpointing recomputes nothing outside train mode),
    train mode leaked into what runs next."""
    tiny_policy.eval()
    seen, real = [], rollout.logprobs
    monkeypatch.setattr(rollout, "logprobs", lambda policy, r, *a, **k: seen.append(policy.training) or real(policy, r, *a, **k))
    args = train.get_args(["--sft-steps", "2", "--sft-batch", "2"])
    opt = torch.optim.SGD([p for n, p in tiny_policy.named_parameters() if "lora_" in n], lr=0.0)
    sft.train(tiny_policy, tokenizer, data.load("train")[:4], "coder", args, opt)
    assert seen == [True, True] and not tiny_policy.training
