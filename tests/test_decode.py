"""The sampler (decode.py) against `generate` and the trainer's scoring, on a tiny random Qwen2 (seconds)."""
import pytest
import torch
from transformers.generation.logits_process import TopPLogitsWarper

import decode
import rollout

CHATS = [[{"role": "user", "content": "Write a function that adds two numbers."}],
         [{"role": "user", "content": "Hi"}]]  # different lengths: row 2 is left-padded


def generate_greedy(policy, tok, chats, max_new_tokens, min_new_tokens=0):
    enc = rollout.encode_prompts(tok, chats, "cpu")
    with torch.no_grad():
        return policy.generate(**enc, max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, do_sample=False,
                               temperature=None, top_p=None, top_k=None, pad_token_id=tok.eos_token_id,
                               eos_token_id=tok.eos_token_id)


def test_greedy_equals_generate_token_for_token(tiny_policy, tokenizer):
    """fp32 greedy: our loop's sequences are exactly generate's (left-padded prompts, 24 tokens). Catches:
    positions counted from the padded start instead of generate's cumsum of the mask, the prompt's last
    logits not used for token 0, a cache row given to the wrong sample after the repeat."""
    tiny_policy.eval()
    want = generate_greedy(tiny_policy, tokenizer, CHATS, 24)
    r = rollout.sample(tiny_policy, tokenizer, CHATS, 1, 24, temperature=0)
    assert torch.equal(r.seqs, want)
    two = rollout.sample(tiny_policy, tokenizer, CHATS, 2, 24, temperature=0)  # each prompt prefilled once, 2 rows
    assert torch.equal(two.seqs, want.repeat_interleave(2, 0))


def test_min_new_tokens_and_eos_as_generate(tiny_policy, tokenizer):
    """EOS made the model's favourite (+30 on its logit): generate stops at once, or right after
    min_new_tokens = 3; ours gives the same tokens and drops each row when it ends. Catches: EOS not
    forbidden before min_new_tokens, a finished row still decoded, an EOS that does not end the row."""
    eos = tokenizer.eos_token_id

    def favour_eos(module, inp, out):
        out[..., eos] += 30.0
        return out
    handle = tiny_policy.get_output_embeddings().register_forward_hook(favour_eos)
    try:
        tiny_policy.eval()
        for m in (0, 3):
            want = generate_greedy(tiny_policy, tokenizer, CHATS, 8, m)
            r = rollout.sample(tiny_policy, tokenizer, CHATS, 1, 8, temperature=0, min_new_tokens=m)
            assert torch.equal(r.seqs, want) and r.seqs.shape[1] == r.prompt_len + m + 1
            assert r.mask.sum(1).tolist() == [m + 1, m + 1] and not r.truncated.any()
    finally:
        handle.remove()


def test_sampled_logprobs_match_the_trainers_scoring(tiny_policy, tokenizer):  # docs/algorithm.md#sampler-and-trainer-log-probs-disagree
    """Temperature 0.7, top-p 0.9: the sampler's log-prob of each sampled token (the policy at temperature 1)
    equals rollout.logprobs on the same rows to 1e-4. Catches: log-probs of the tempered or truncated
    distribution recorded, a token's log-prob taken from the wrong step, rows mixed up when rows drop."""
    torch.manual_seed(0)
    r = rollout.sample(tiny_policy, tokenizer, CHATS, 3, 16, temperature=0.7, top_p=0.9)
    with torch.no_grad():
        trainer = rollout.logprobs(tiny_policy, r)
    assert r.logp.shape == trainer.shape == r.mask.shape and r.mask.sum() > 20
    assert (r.logp * r.mask - trainer * r.mask).abs().max() < 1e-4
    assert (r.logp * (1 - r.mask)).abs().max() == 0


def test_finished_rows_leave_the_batch_and_the_others_do_not_change(tiny_policy, tokenizer, monkeypatch):
    """Rows ended after 2, 5, 3, 7 tokens (a stop rule on the lengths): after the prefill of the 2 prompts
    the forwards run on 4, 3, 2, 2, 1, 1 rows, each row's tokens and log-probs equal the run where no row stops (greedy), EOS after the end.
    Catches: a finished row still decoded, the cache not shrunk with the batch (a row would read another
    row's keys), positions or masks of the wrong rows kept."""
    enc = rollout.encode_prompts(tokenizer, CHATS, "cpu")
    tiny_policy.eval()
    full, full_lp = decode.decode(tiny_policy, enc.input_ids, enc.attention_mask, 2, 7, tokenizer.eos_token_id, 0.0)
    ends = torch.tensor([2, 5, 3, 7])  # per row id, prompt-major
    batches = []
    real = tiny_policy.forward

    def spy(*a, **k):
        batches.append(k["input_ids"].shape[0])
        return real(*a, **k)
    monkeypatch.setattr(tiny_policy, "forward", spy)
    tokens, lp = decode.decode(tiny_policy, enc.input_ids, enc.attention_mask, 2, 7, tokenizer.eos_token_id, 0.0,
                               stopped=lambda rows, toks: toks.shape[1] >= ends[rows])
    assert batches == [2, 4, 3, 2, 2, 1, 1]  # the prefill on the 2 prompts, then tokens 2..7
    for i, n in enumerate(ends.tolist()):
        assert torch.equal(tokens[i, :n], full[i, :n]) and (tokens[i, n:] == tokenizer.eos_token_id).all()
        assert torch.allclose(lp[i, :n], full_lp[i, :n], atol=1e-5) and (lp[i, n:] == 0).all()


def test_top_p_as_transformers_and_sampling_stays_in_the_nucleus():
    """top_p_filter equals transformers' TopPLogitsWarper on random logits; next_tokens never draws outside
    the nucleus and draws its members as often as their renormalised probabilities (4000 draws; 0.625 /
    0.375 for p = [0.5, 0.3, 0.15, 0.05], top-p 0.75). Catches: a cumsum over the descending order (keeps
    the wrong tail), the most likely token dropped, no renormalisation."""
    torch.manual_seed(0)
    z = torch.randn(5, 50) * 3
    for top_p in (0.3, 0.9):
        assert torch.equal(decode.top_p_filter(z, top_p), TopPLogitsWarper(top_p)(None, z.clone()))
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log().expand(4000, 4)
    x = decode.next_tokens(p, 1.0, 0.75)
    counts = torch.bincount(x, minlength=4).tolist()
    assert counts[2] == counts[3] == 0 and counts[0] / 4000 == pytest.approx(0.625, abs=0.03)
    assert torch.equal(decode.next_tokens(p[:3], 0.0, 0.75), torch.zeros(3, dtype=torch.long))  # greedy: argmax


def test_nucleus_among_the_top_k_is_top_p_filters_nucleus():
    """decode.nucleus keeps exactly the tokens top_p_filter keeps (random logits, top-p 0.3 / 0.9, k = 64 and
    k = V), weights them by their probabilities, and answers None when a row's nucleus has more than k tokens
    (flat logits: every token is needed); top-p 0 keeps the most likely token alone. Catches: the token that
    crosses top_p dropped (the cumsum taken inclusively), a row's nucleus cut at k without falling back, an
    empty nucleus at top-p 0 (multinomial fails)."""
    torch.manual_seed(0)
    z = torch.randn(6, 500) * 5
    p = z.softmax(-1)
    for top_p in (0.3, 0.9):
        kept = decode.top_p_filter(z, top_p).isfinite()  # [6, 500]
        assert 1 < kept.sum(-1).max() < 64  # the nucleus has room among the top 64
        for k in (64, 500):
            weights, ids = decode.nucleus(p, top_p, k)
            mask = torch.zeros_like(kept).scatter(1, ids, weights > 0)
            assert torch.equal(mask, kept)
            assert torch.equal(weights[weights > 0], p.gather(1, ids)[weights > 0])
    assert decode.nucleus(torch.full((2, 500), 1 / 500), 0.9, 64) is None
    weights, ids = decode.nucleus(p, 0.0, 64)  # top-p 0: the most likely token alone, as TopPLogitsWarper
    assert torch.equal(ids[:, 0], p.argmax(-1)) and (weights[:, 1:] == 0).all() and (weights[:, 0] > 0).all()
    assert torch.equal(decode.next_tokens(z, 1.0, 0.0), z.argmax(-1))


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_sampling_distribution_is_softmax_of_logits_over_temperature(top_p):
    """The frequencies of 40,000 seeded draws of next_tokens on a 6-token vocabulary, at temperatures 0.5 and
    2, equal softmax(z / T) (top-p 0.9: restricted to its nucleus, renormalised; top_p_filter is HF's) within
    0.01 (4 standard errors). Catches: p = softmax(z) (the temperature ignored), z * T instead of z / T, the
    temperature applied after the nucleus is cut."""
    z = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    for T in (0.5, 2.0):
        torch.manual_seed(0)
        x = decode.next_tokens(z.repeat(40_000, 1), T, top_p)  # [40000]
        freq = torch.bincount(x, minlength=6).float() / len(x)
        want = decode.top_p_filter((z / T)[None], top_p).softmax(-1)[0]
        assert (freq - want).abs().max() < 0.01, (T, freq, want)
    assert (softmax_at(z, 0.5) - softmax_at(z, 2.0)).abs().max() > 0.3  # the two temperatures really differ


def softmax_at(z, T):
    return (z / T).softmax(-1)


def test_a_nucleus_past_64_tokens_is_found_among_the_1024_without_the_full_sort(monkeypatch):
    """A row whose top-p 0.95 nucleus holds 286 tokens (300 equally likely tokens of mass 0.9993 over a tail of
    4,700): next_tokens tries k = 64, then 1024, and stops there (never k = V); every draw is one of the 300, each
    kept one about equally often (8,000 draws over 286: about 28 each; at least 280 drawn, none 60 times).
    Catches: the middle try missing (a k = V call), a nucleus cut at 64 or 1024 without falling back (draws only
    among 64 tokens)."""
    V = 5000
    z = torch.full((V,), -10.0)
    z[1000:1300] = 0.0  # 300 * e^0 against 4700 * e^-10: the 300 hold 0.9993, so top-p 0.95 keeps 286 of them
    tries = []
    real = decode.nucleus
    monkeypatch.setattr(decode, "nucleus", lambda p, top_p, k: tries.append(k) or real(p, top_p, k))
    torch.manual_seed(0)
    x = decode.next_tokens(z.repeat(8000, 1), 1.0, 0.95)
    assert tries == [64, 1024]
    assert ((x >= 1000) & (x < 1300)).all()
    counts = torch.bincount(x - 1000, minlength=300)
    assert (counts > 0).sum() >= 280 and counts.max() < 60
