"""The shared-prompt loss pass (fast/shared_prompt.py: update.role_backward's default forward) equals the
row-by-row one (--no-shared-prompt: chunked.RowByRow, rollout.logprobs): the loss and every LoRA gradient,
fp32, for every --loss-type, with and without --beta; on a tiny random Qwen2 and once on the embedded
SmolLM2-135M. `pytest -rP` prints each comparison's max differences."""
import pytest
import torch

import rollout
import train
import update
from fast import chunked, shared_prompt
from infra import progress

CHATS = [[{"role": "user", "content": "Write a function that adds two numbers."}],
         [{"role": "user", "content": "Hi"}]]  # different lengths: prompt 2 is left-padded


def shared_logprobs(policy, r, ids):
    """[n, T] log-probs of rows ids through one prompt pass of their prompts."""
    return shared_prompt.completion_logprobs(policy, r, ids, shared_prompt.prompt_pass(policy, r, torch.unique(ids // r.n)))


def loss_and_grads(policy, r, adv, flags, shared: bool):
    """update.role_backward's loss and LoRA gradients, with the shared-prompt forward or the row-by-row one."""
    args = train.get_args(flags + ([] if shared else ["--no-shared-prompt"]))
    assert isinstance(update.scorer(policy, r, args), shared_prompt.SharedPrompt if shared else chunked.RowByRow)
    policy.zero_grad(set_to_none=True)
    loss, metrics = update.role_backward(policy, "coder", r, adv, torch.ones(len(adv), dtype=torch.bool), 16,
                                         args, progress.Clock("cpu"))
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if "lora_" in n and p.grad is not None}
    return loss, metrics, grads


def max_diffs(policy, r, adv, flags):
    rows_loss, rows_m, rows = loss_and_grads(policy, r, adv, flags, False)
    shared_loss, shared_m, shared = loss_and_grads(policy, r, adv, flags, True)
    assert rows and rows.keys() == shared.keys() and any(g.abs().max() > 1e-3 for g in rows.values())
    if rows_m["kl"] is not None:
        assert shared_m["kl"] == pytest.approx(rows_m["kl"], abs=1e-6)
    loss_diff, grad_diff = abs(rows_loss - shared_loss), max((rows[n] - shared[n]).abs().max().item() for n in rows)
    print(f"{' '.join(flags)}: shared vs row by row, max abs diff: loss {loss_diff:.2e}, LoRA grads {grad_diff:.2e}")
    return loss_diff, grad_diff


@pytest.mark.parametrize("loss_type", ["token", "grpo", "dr_grpo"])
@pytest.mark.parametrize("beta", ["0", "0.04"])
@pytest.mark.parametrize("micro_batch", ["4", "1"])
def test_shared_prompt_loss_and_grads_equal_row_by_row(tiny_policy, tokenizer, loss_type, beta, micro_batch):
    """2 prompts x 3 sampled rows, one row with A = 0 (skipped when beta = 0); micro-batches of 4 (one prompt
    pass for both prompts, prompt 2's rows split over two micro-batches) or of 1 (each prompt's pass shared by
    its micro-batches of one row): loss and every LoRA gradient within 1e-5. Catches: a row given another
    prompt's keys and values, the prompt's last logits not predicting completion token 0, positions of the
    completion restarted at 0, the prompt pass's backward skipped or run per micro-batch (the prompt's share
    of the gradient lost or counted twice)."""
    torch.manual_seed(0)
    tiny_policy.set_adapter("coder")
    r = rollout.sample(tiny_policy, tokenizer, CHATS, 3, 10, temperature=1.0)
    assert r.n == 3 and r.attn[3:, :r.prompt_len].sum() < r.attn[:3, :r.prompt_len].sum()  # prompt 2 is padded
    adv = torch.tensor([1.0, -0.5, 0.0, 0.8, -1.2, 0.4])
    for _ in range(3):  # the policy moved away from pi_ref (and from the A = 0 row's zero), so every term counts
        for n, p in tiny_policy.named_parameters():
            if "lora_A.coder" in n:
                p.data += 0.05 * torch.randn_like(p)
    flags = ["--loss-type", loss_type, "--beta", beta, "--micro-batch", micro_batch]
    loss_diff, grad_diff = max_diffs(tiny_policy, r, adv, flags)
    assert loss_diff < 1e-5 and grad_diff < 1e-5


def test_short_completions_and_padded_prompts_are_cut_exactly(tiny_policy, tokenizer):
    """Teacher-forced rows (a prompt each) of 2 to 9 tokens, micro-batches of 2: each micro-batch's forward
    stops after its own longest completion and starts at its first non-padding prompt column; the loss and
    gradients still equal the row-by-row ones and the log-probs match on every masked token. Catches: a cut
    that drops a row's last token (its EOS), positions shifted by the cut padding."""
    texts = ["a", "def f(x): return x + 1", "b c", "Hello there, how are you today?"]
    r = rollout.from_texts(tokenizer, [CHATS[1], CHATS[0], CHATS[1], CHATS[1]], texts)
    with torch.no_grad():
        rows, shared = rollout.logprobs(tiny_policy, r, slice(0, 2)), shared_logprobs(tiny_policy, r, torch.tensor([2, 3]))
    assert r.mask[2:].sum(1).max() < r.mask.shape[1] and r.attn[2:, 0].sum() == 0  # both cuts happen in rows 2, 3
    assert ((rollout.logprobs(tiny_policy, r, slice(2, 4)) - shared) * r.mask[2:]).abs().max() < 1e-5 and rows.shape == shared.shape
    loss_diff, grad_diff = max_diffs(tiny_policy, r, torch.tensor([1.0, -1.0, 0.5, -0.5]),
                                     ["--beta", "0.04", "--micro-batch", "2"])
    assert loss_diff < 1e-5 and grad_diff < 1e-5


def test_shared_prompt_equals_row_by_row_on_the_embedded_model(tokenizer, capsys):
    """The same check on SmolLM2-135M (30 layers, LoRA r=16 on q,k,v,o as trained): 2 prompts x 2 sampled
    rows of 12 tokens, --beta 0.04, one micro-batch; the log-probs too, and the sampler's log-probs (LoRA merged
    into packed weights: cpu_linear.sampling_weights) against the scoring to 1e-4. Prints the max abs differences."""
    from conftest import embedded_policy

    policy, tok = embedded_policy()
    r = rollout.sample(policy, tok, CHATS, 2, 12, temperature=1.0)
    with torch.no_grad():
        scored = rollout.logprobs(policy, r)
        lp_diff = ((scored - shared_logprobs(policy, r, torch.arange(4))) * r.mask).abs().max().item()
        sampler_diff = ((r.logp - scored) * r.mask).abs().max().item()
    loss_diff, grad_diff = max_diffs(policy, r, torch.tensor([1.0, -1.0, 0.5, -0.5]),
                                     ["--beta", "0.04", "--micro-batch", "4"])
    with capsys.disabled():
        print(f"\nshared prompt vs row by row, SmolLM2-135M fp32, max abs diff: log-probs {lp_diff:.2e}, "
              f"loss {loss_diff:.2e}, LoRA grads {grad_diff:.2e}; sampler vs scoring log-probs {sampler_diff:.2e}")
    assert lp_diff < 1e-4 and loss_diff < 1e-5 and grad_diff < 1e-5 and sampler_diff < 1e-4


def test_prompt_chunks_keep_each_prompts_rows_together():
    """The docstring's example, and every row once in order. Catches: a prompt's rows split over two chunks
    (its prompt forwarded twice), more prompts in a chunk than asked."""
    assert shared_prompt.prompt_chunks([0, 1, 2, 5, 6, 9], 4, 1) == [[0, 1, 2], [5, 6], [9]]
    assert shared_prompt.prompt_chunks([0, 1, 2, 5, 6, 9], 4, 2) == [[0, 1, 2, 5, 6], [9]]
    assert shared_prompt.prompt_chunks([], 4, 2) == [] and shared_prompt.prompt_chunks([3, 4], 1, 1) == [[3], [4]]


def test_all_logprobs_equal_row_by_row(tiny_policy, tokenizer):
    """pi_old's log-probs (--num-iterations > 1) through one prompt pass per chunk: every row in its place,
    equal to rollout.logprobs on the masked tokens. Catches: rows reordered by the chunks, a row scored on
    another prompt."""
    torch.manual_seed(0)
    tiny_policy.set_adapter("coder")
    r = rollout.sample(tiny_policy, tokenizer, CHATS, 3, 10, temperature=1.0)
    with torch.no_grad():
        want = rollout.logprobs(tiny_policy, r)
    for mb in (1, 2, 4):
        for shared in ([], ["--no-shared-prompt"]):
            got = update.all_logprobs(tiny_policy, r, train.get_args(["--micro-batch", str(mb), *shared]))
            assert got.shape == want.shape and ((got - want) * r.mask).abs().max() < 1e-5
