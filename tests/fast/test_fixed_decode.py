"""The fixed-shape sampler (fast/fixed_decode.py, what rollout.sample runs on CUDA) against decode.py's (what it runs on
a CPU) on a tiny random Qwen2: the same tokens for the same seed, the same shapes at every step, and one host
sync per `check_every` token steps (tests/host_syncs.py counts them)."""
import pytest
import torch

import decode
import rollout
from fast import fixed_decode
from host_syncs import HostSyncs

CHATS = [[{"role": "user", "content": "Write a function that adds two numbers."}],
         [{"role": "user", "content": "Hi"}]]  # different lengths: prompt 2 is left-padded
ENDS = [2, 5, 3, 7]  # the step count after which the stop rule ends each row (prompt-major, n = 2)


def stop_at(ends, as_tensor=True):
    """A stop rule (decode.decode's `stopped`) that ends row i once it has ends[i] tokens: [A] bool, as a tensor
    (what decode.py needs) or a list (fast/fixed_decode.py takes either; a list keeps the sync count to ours)."""
    def stopped(rows, tokens):
        hit = [tokens.shape[1] >= ends[i] for i in rows.tolist()]
        return torch.tensor(hit) if as_tensor else hit
    return stopped


def both(policy, tok, n, steps, *args, seed=0, **kw):
    enc = rollout.encode_prompts(tok, CHATS, "cpu")
    out = []
    for sampler, extra in ((decode.decode, {}), (fixed_decode.decode_fixed, {"check_every": kw.pop("check_every", 3)})):
        torch.manual_seed(seed)
        out.append(sampler(policy, enc.input_ids, enc.attention_mask, n, steps, tok.eos_token_id, *args, **kw, **extra))
    return out


@pytest.mark.parametrize("check_every", [1, 3, 8])
def test_greedy_tokens_equal_decode_with_rows_ending_at_different_steps(tiny_policy, tokenizer, check_every):
    """Greedy, rows stopped after 2, 5, 3, 7 tokens (a stop test every 1, 3 or 8 steps: a row that matched between
    two tests is cut back to where it matched): the same tokens as decode.decode, EOS after each row's end, the
    same width T = 7, log-probs within 1e-5 and 0 after the end. Catches: a row cut at the test instead of at its
    match, a finished row's later tokens kept, a masked buffer position attended to."""
    tiny_policy.eval()
    (a, la), (b, lb) = both(tiny_policy, tokenizer, 2, 9, 0.0, stopped=stop_at(ENDS), check_every=check_every)
    assert a.shape == b.shape == (4, 7) and torch.equal(a, b)
    assert (la - lb).abs().max() < 1e-5 and (lb[0, 2:] == 0).all()


def test_eos_and_min_new_tokens_as_decode(tiny_policy, tokenizer):
    """EOS made the favourite after min_new_tokens = 3 (+30 on its logit): every row ends with EOS at step 3, as in
    decode.decode; T = 4. Catches: EOS not forbidden before min_new_tokens, the loop not ending when all rows did."""
    eos = tokenizer.eos_token_id
    handle = tiny_policy.get_output_embeddings().register_forward_hook(lambda m, i, o: o.index_add_(
        -1, torch.tensor([eos]), torch.full((*o.shape[:-1], 1), 30.0)))
    try:
        tiny_policy.eval()
        (a, la), (b, lb) = both(tiny_policy, tokenizer, 2, 8, 0.0, 1.0, 3)
    finally:
        handle.remove()
    assert b.shape == (4, 4) and torch.equal(a, b) and (b[:, 3] == eos).all()


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_sampled_tokens_equal_decode_for_the_same_seed(tiny_policy, tokenizer, monkeypatch, top_p):
    """Temperature 0.7, 6 rows of 12 tokens, none ending early: the same tokens as decode.decode for the same seed
    (top-p 0.9: decode.py also looking among all V, NUCLEUS_TRIES = ()); log-probs within 1e-5."""
    monkeypatch.setattr(decode, "NUCLEUS_TRIES", ())
    (a, la), (b, lb) = both(tiny_policy, tokenizer, 3, 12, 0.7, top_p, seed=1)
    assert a.shape == b.shape == (6, 12) and torch.equal(a, b) and (la - lb).abs().max() < 1e-5


def test_sampled_tokens_equal_decode_until_the_first_row_ends(tiny_policy, tokenizer):
    """Sampled, rows stopped after 2, 5, 3, 7 tokens: equal to decode.decode through step 2 (the first row's end);
    after it decode.py draws for 3 rows, this loop for all 4 (other random numbers, the same distribution). Each
    row still ends where its rule says, with EOS after."""
    (a, _), (b, _) = both(tiny_policy, tokenizer, 2, 9, 0.7, stopped=stop_at(ENDS), seed=2)
    assert torch.equal(a[:, :2], b[:, :2]) and b.shape == (4, 7)
    assert all((b[i, e:] == tokenizer.eos_token_id).all() and (b[i, :e] != tokenizer.eos_token_id).all()
               for i, e in enumerate(ENDS))


def test_one_host_sync_per_check_and_the_same_shapes_every_step(tiny_policy, tokenizer, monkeypatch):
    """12 greedy steps, a stop test every 4 (a rule that never matches): after the prefill 3 host syncs in all (one
    .tolist() of the new tokens and done flags per test), so at most 1 per token step, where decode.decode makes at least 2 per step
    (printed); every one-token forward gets input [4, 1] and a mask over the whole buffer [4, 1, 1, P + 12]."""
    tiny_policy.eval()
    enc = rollout.encode_prompts(tokenizer, CHATS, "cpu")
    never = stop_at([99] * 4)
    never_list = stop_at([99] * 4, as_tensor=False)
    shapes, real = [], tiny_policy.forward

    def spy(*a, **k):
        shapes.append((tuple(k["input_ids"].shape), tuple(k["attention_mask"].shape)))
        return real(*a, **k)
    with HostSyncs() as before:
        decode.decode(tiny_policy, enc.input_ids, enc.attention_mask, 2, 12, tokenizer.eos_token_id, 0.0, stopped=never)
    monkeypatch.setattr(tiny_policy, "forward", spy)
    syncs = HostSyncs()
    with syncs:  # the stop rule's own work on its host tensors is not counted
        tokens, _ = fixed_decode.decode_fixed(tiny_policy, enc.input_ids, enc.attention_mask, 2, 12,
                                              tokenizer.eos_token_id, 0.0, stopped=syncs.paused(never_list), check_every=4)
    print(f"host syncs in 12 token steps: decode.py {before.count} ({sorted(set(before.calls))}), "
          f"fast/fixed_decode.py {syncs.count} ({syncs.calls})")
    P = enc.input_ids.shape[1]
    # the prefill's two are transformers' own test of the prompts' 2D mask (sdpa_mask: can causal attention skip it?)
    assert tokens.shape == (4, 12) and syncs.calls == ["__bool__"] * 2 + ["tolist"] * 3 and before.count >= 2 * 12
    assert shapes[0] == ((2, P), (2, P)) and shapes[1:] == [((4, 1), (4, 1, 1, P + 12))] * 11


def test_only_full_attention_models_take_the_fixed_path(tiny_policy):
    """A model with a sliding-window layer is not `supported` (rollout.sample then runs decode.py) and
    static_cache refuses it in one line; the tiny Qwen2 (full attention everywhere) is supported."""
    assert fixed_decode.supported(tiny_policy)
    config = tiny_policy.config
    saved = getattr(config, "layer_types", None)
    config.layer_types = ["full_attention", "sliding_attention"]
    try:
        assert not fixed_decode.supported(tiny_policy)
        with pytest.raises(ValueError, match="needs full attention in every layer"):
            fixed_decode.static_cache(tiny_policy, 8, torch.tensor([0]))
    finally:
        config.layer_types = saved


@pytest.mark.parametrize("sampler", ["decode", "fixed"])
def test_every_eos_of_the_generation_config_ends_a_row(tiny_policy, tokenizer, monkeypatch, sampler):
    """A second EOS id (Qwen2.5's <|endoftext|> beside <|im_end|>) sampled at step 2 ends the row there in both
    samplers, and rollout's mask reads it as the row's EOS (not truncated, the token kept as sampled); with the
    tokenizer's EOS alone the row runs to its budget of 5."""
    other = 7
    script = iter([[11, 12, 13, 14], [21, other, 23, 24], [31, 32, 33, 34], [41, 42, 43, 44], [51, 52, 53, 54]])

    def scripted(z, temperature, top_p):  # the rows still running take their column of the next step
        row = torch.tensor(next(script))
        return row[:z.shape[0]] if sampler == "fixed" or z.shape[0] == 4 else row[[0, 2, 3][:z.shape[0]]]
    fn = decode.decode if sampler == "decode" else fixed_decode.decode_fixed
    monkeypatch.setattr(decode if sampler == "decode" else fixed_decode, "next_tokens", scripted)
    enc = rollout.encode_prompts(tokenizer, CHATS, "cpu")
    eos = tokenizer.eos_token_id
    tokens, _ = fn(tiny_policy, enc.input_ids, enc.attention_mask, 2, 5, [eos, other], 0.0)
    assert tokens[1].tolist() == [12, other, eos, eos, eos] and tokens[0].tolist() == [11, 21, 31, 41, 51]
    tiny_policy.generation_config.eos_token_id = [eos, other]
    assert rollout.end_ids(tokenizer, tiny_policy) == [eos, other]
    seqs = torch.cat([enc.input_ids.repeat_interleave(2, 0), tokens], 1)
    r = rollout._finish(tokenizer, seqs, enc.attention_mask.repeat_interleave(2, 0), enc.input_ids.shape[1], n=2,
                        ends=[eos, other])
    assert r.mask[1].tolist() == [1, 1, 0, 0, 0] and not r.truncated[1] and r.truncated[0]
    assert r.seqs[1, enc.input_ids.shape[1] + 1] == other
