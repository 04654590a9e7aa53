"""The loss pass's LM head in pieces of positions (fast/chunked.py): the same log-probs and LoRA gradients as the
whole-logits rollout.logprobs, and no logits tensor larger than --logprob-chunk x V anywhere in the loss pass
(forward and backward), on the tiny random Qwen2 (V = 49,152). `pytest -rP` prints the max differences."""
import pytest
import torch

import rollout
import train
import update
from fast import chunked, shared_prompt
from infra import progress

CHATS = [[{"role": "user", "content": "Write a function that adds two numbers."}],
         [{"role": "user", "content": "Hi"}]]


def sampled(policy, tokenizer):
    torch.manual_seed(0)
    policy.set_adapter("coder")
    return rollout.sample(policy, tokenizer, CHATS, 3, 10, temperature=1.0)  # 6 rows, T <= 10


def lora_grads(policy, logp, mask):
    params = [p for n, p in policy.named_parameters() if "lora_" in n and p.requires_grad]
    return torch.autograd.grad((logp * mask).sum(), params)


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_chunked_logprobs_and_grads_equal_the_whole_logits(tiny_policy, tokenizer, chunk):
    """Pieces of 1 position, of 7 (a piece crossing from one row into the next) and one piece for all:
    log-probs within 1e-5 of rollout.logprobs on every position, LoRA gradients of sum(logp * mask) within
    1e-5 of their largest entry (~4: not a vacuous match; a sum in another order differs by float32 rounding,
    1.4e-5 absolute with pieces of 1 on 2026-12-04). Catches: the shift off by one, a piece dropped or
    repeated at a row's border, the recomputed backward (torch.utils.checkpoint) missing a piece's gradient."""
    r = sampled(tiny_policy, tokenizer)
    want, got = rollout.logprobs(tiny_policy, r), chunked.logprobs(tiny_policy, r, chunk=chunk)
    lp_diff = (want - got).abs().max().item()
    g_want, g_got = lora_grads(tiny_policy, want, r.mask), lora_grads(tiny_policy, got, r.mask)
    grad_diff = max((a - b).abs().max().item() for a, b in zip(g_want, g_got))
    print(f"chunk {chunk}: chunked vs whole logits, max abs diff: log-probs {lp_diff:.2e}, LoRA grads {grad_diff:.2e}")
    assert got.shape == want.shape == r.mask.shape and got.dtype == torch.float32
    scale = max(g.abs().max().item() for g in g_want)
    assert lp_diff < 1e-5 and grad_diff < 1e-5 * scale and scale > 1


@pytest.mark.parametrize("shared", [True, False])
def test_no_logits_tensor_in_the_loss_pass_exceeds_chunk_positions(tiny_policy, tokenizer, shared):
    """update.role_backward (--beta 0.04: the reference pass too) with --logprob-chunk 4: a forward hook on the LM
    head records every output's shape, in the forward and in the backward's recomputation; the largest has at most
    4 x V elements. The same hook on the whole-logits rollout.logprobs sees [6, T + 1, V], so it does see the
    logits. Catches: the model's own head run on every position (logits_to_keep), a piece larger than asked."""
    r = sampled(tiny_policy, tokenizer)
    head = tiny_policy.get_output_embeddings()
    V, seen = head.weight.shape[0], []
    hook = head.register_forward_hook(lambda m, i, o: seen.append(o.numel()))
    try:
        args = train.get_args(["--beta", "0.04", "--micro-batch", "4", "--logprob-chunk", "4"]
                              + ([] if shared else ["--no-shared-prompt"]))
        assert isinstance(update.scorer(tiny_policy, r, args), shared_prompt.SharedPrompt if shared else chunked.RowByRow)
        loss, _ = update.role_backward(tiny_policy, "coder", r, torch.tensor([1.0, -0.5, 0.3, 0.8, -1.2, 0.4]),
                                       torch.ones(6, dtype=torch.bool), 16, args, progress.Clock("cpu"))
        pieces = len(seen)
        with torch.no_grad():
            rollout.logprobs(tiny_policy, r)
    finally:
        hook.remove()
    assert loss != 0 and pieces > 2 * int(r.mask.any(0).sum()) // 4  # the policy's and the reference's pieces
    assert max(seen[:pieces]) == 4 * V  # full pieces of 4 positions, none larger
    assert seen[-1] == 6 * (r.mask.shape[1] + 1) * V  # the whole-logits pass, for contrast


def test_prompts_per_chunk_is_its_own_setting(tiny_policy, tokenizer):
    """--prompts-per-chunk 1 with --micro-batch 4: each chunk holds one prompt's 3 rows (one micro-batch each),
    not two prompts as --micro-batch would have made; with 2, the 6 rows of both prompts fill micro-batches of
    4 and 2. The log-probs are the same either way. Catches: the chunk size read from --micro-batch again."""
    r = sampled(tiny_policy, tokenizer)
    got = {}
    for per_chunk in (1, 2):
        forward = shared_prompt.SharedPrompt(tiny_policy, r, 4, per_chunk=per_chunk)
        with torch.no_grad():
            got[per_chunk] = [(ids.tolist(), forward.logprobs(ids)) for ids in forward.micro_batches(range(6))]
    assert [ids for ids, _ in got[1]] == [[0, 1, 2], [3, 4, 5]]
    assert [ids for ids, _ in got[2]] == [[0, 1, 2, 3], [4, 5]]
    one, two = torch.cat([lp for _, lp in got[1]]), torch.cat([lp for _, lp in got[2]])
    assert ((one - two) * r.mask).abs().max() < 1e-5


def test_bad_chunk_settings_are_one_line(capsys):
    """0 positions or prompts per chunk: argparse's one-line error, no traceback."""
    for flag in ("--logprob-chunk", "--prompts-per-chunk"):
        with pytest.raises(SystemExit):
            train.get_args([flag, "0"])
        assert "expected an integer >= 1, got '0'" in capsys.readouterr().err
