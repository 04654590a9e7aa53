"""Does the GRPO loop learn what it is rewarded for? The check every practitioner runs first, on the embedded
model (SmolLM2-135M) at tiny sizes: a scripted reward (1 for a completion that starts with `def`, else 0)
must raise the probability of that behaviour, and the same rewards shuffled within the step (no relation to
the behaviour) must not.

The behaviour's probability is measured exactly, not sampled: P(first completion token = 'def') from the
Coder's logits at the end of each prompt, averaged over the two prompts. The embedded model starts at
p0 = 0.073 (0.07 and 0.09 on the two prompts; '```' takes 0.84). Measured on an Intel Xeon, 2026-12-06, with
the flags below (16 one-token completions per problem, temperature 1, lr 1e-4): scripted 0.073 -> 0.124,
0.205, 0.322, 0.468 after steps 1-4; shuffled 0.073 -> 0.074, 0.074, 0.055, 0.041. The bounds leave room for
another CPU's rounding: scripted above 0.30 (4x p0), shuffled below p0 + 0.02.
"""
import random

import pytest
import torch

import coder
import data
import rollout
import sandbox
import train

STEPS = 4
FLAGS = ["--roles", "coder", "--num-plans", "8", "--codes-per-plan", "2", "--max-code-tokens", "1",
         "--lr", "1e-4", "--temperature", "1.0", "--top-p", "1.0"]


@pytest.fixture(scope="module")
def embedded():
    """The embedded base with fresh adapters (LoRA B = 0: the policy is the base at the start), its tokenizer,
    and a copy of the adapters' initial values (each test starts from them)."""
    from infra import models

    base, tok = models.load_base(models.EMBEDDED, "cpu", "none", "float32")
    policy = models.add_role_adapters(base, ["planner", "coder"])
    return policy, tok, {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" in n}


def p_def(policy, tok, problems, target) -> float:
    """P(first completion token = target) under the Coder, exactly: softmax of the last prompt position's
    logits, averaged over the problems (prompts one at a time: no padding)."""
    policy.set_adapter("coder")
    out = []
    with torch.no_grad():
        for p in problems:
            enc = rollout.encode_prompts(tok, [coder.messages(p)], "cpu")
            out.append(policy(**enc).logits[0, -1].softmax(-1)[target].item())
    return sum(out) / len(out)


def train_scripted(embedded, monkeypatch, shuffled: bool) -> list[float]:
    """STEPS GRPO steps (train.grpo_step, the real loop) whose sandbox is replaced by the scripted reward: a
    completion starting with the target token passes (reward 1), any other fails (0); shuffled: the same
    rewards permuted within the step. Returns P(target first) before and after each step."""
    policy, tok, init = embedded
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if n in init:
                p.copy_(init[n])
    problems = data.load("train")[:2]
    target = tok("def", add_special_tokens=False).input_ids[0]
    sampled = {}
    real_sample = rollout.sample

    def spy(*a, **k):  # the rollout whose rows the sandbox's jobs are, in order
        sampled["r"] = real_sample(*a, **k)
        return sampled["r"]

    rng = random.Random(0)

    def scripted(jobs, workers=None, progress=False):
        r = sampled["r"]
        hits = (r.seqs[:, r.prompt_len] == target).tolist()
        if shuffled:
            rng.shuffle(hits)
        return [sandbox.Result("passed" if h else "failed", 4 * h, 4, 0.01, 0.02, 10.0) for h in hits]

    monkeypatch.setattr(rollout, "sample", spy)
    monkeypatch.setattr(sandbox, "run_many", scripted)
    args = train.get_args(FLAGS)
    optimizer = torch.optim.AdamW([p for n, p in policy.named_parameters() if "lora_" in n], lr=args.lr,
                                  weight_decay=0.0)
    torch.manual_seed(0)
    probs = [p_def(policy, tok, problems, target)]
    for _ in range(STEPS):
        train.grpo_step(policy, tok, problems, args, optimizer)
        probs.append(p_def(policy, tok, problems, target))
    return probs


def test_scripted_reward_raises_its_behaviour(embedded, monkeypatch):
    probs = train_scripted(embedded, monkeypatch, shuffled=False)
    assert probs[0] == pytest.approx(0.073, abs=0.01)  # the base model's own P('def' first)
    assert probs[-1] > 0.30  # 4 steps: 0.47 measured (above)
    assert probs[2] > probs[0] + 0.05  # already after two steps (0.205 measured)


def test_shuffled_rewards_do_not_raise_it(embedded, monkeypatch):
    """The control: the same number of rewards of 1 a step, given to random rows. A loop that learned from
    anything but the reward (a bug that rewards the first row, a sign error that happens to help) fails here."""
    probs = train_scripted(embedded, monkeypatch, shuffled=True)
    assert probs[0] == pytest.approx(0.073, abs=0.01)
    assert max(probs) < probs[0] + 0.02  # 0.074 at most, measured
