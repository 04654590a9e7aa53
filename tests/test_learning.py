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

The same question for the Planner, through the tree: a program passes when its plan's first token is `1` (a
plan that starts as a numbered list), whatever the program is, so the Planner's credit (the mean reward of a
plan's programs) is 1 or 0, and every program of a plan gets the same reward: the Coder's groups have no spread
and the Coder must not move. The Planner starts at P(`1` first) = 0.075 (0.08 and 0.07); measured on the 2-core
AMD EPYC, 2026-12-07 (8 plans x 2 one-token programs a problem, temperature 1, lr 1e-4): scripted 0.075 ->
0.105, 0.105, 0.145, 0.195 after steps 1-4, shuffled (the plans' rewards permuted) 0.075 -> 0.075, 0.075, 0.069,
0.066, and the Coder's P(`1` first) 0.0002 throughout. Bounds: scripted above 0.15 (2x p0), shuffled below
p0 + 0.02, the Coder within 1e-6 of its start.
"""
import random

import pytest
import torch

import coder
import data
import planner
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


def p_def(policy, tok, problems, target, role: str = "coder") -> float:
    """P(first completion token = target) under a role (its adapter, its prompt), exactly: softmax of the last
    prompt position's logits, averaged over the problems (prompts one at a time: no padding)."""
    policy.set_adapter(role)
    messages = {"coder": coder.messages, "planner": planner.messages}[role]
    out = []
    with torch.no_grad():
        for p in problems:
            enc = rollout.encode_prompts(tok, [messages(p)], "cpu")
            out.append(policy(**enc).logits[0, -1].softmax(-1)[target].item())
    return sum(out) / len(out)


def scripted_steps(embedded, monkeypatch, flags, word, hits_of, shuffled: bool, roles: tuple) -> dict:
    """STEPS GRPO steps (train.grpo_step, the real loop) whose sandbox is replaced by a scripted reward:
    hits_of(calls, target, shuffle) -> one bool a program, in the sandbox's job order (calls: the step's rollouts,
    in order; target: the id of `word`'s first token; shuffle: permutes a list in place, or leaves it); a hit
    passes (reward 1), any other fails (0). Returns {role: P(target first) under it, before and after each step}
    for each of `roles`."""
    policy, tok, init = embedded
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if n in init:
                p.copy_(init[n])
    problems = data.load("train")[:2]
    target = tok(word, add_special_tokens=False).input_ids[0]
    calls = []
    real_sample = rollout.sample

    def spy(*a, **k):  # the step's rollouts, in order (the programs' last: the sandbox's jobs are its rows)
        calls.append(real_sample(*a, **k))
        return calls[-1]

    rng = random.Random(0)
    shuffle = rng.shuffle if shuffled else (lambda hits: None)

    def scripted(jobs, workers=None, progress=False):
        hits = hits_of(calls, target, shuffle)
        assert len(jobs) == len(hits)  # one job per program, in the Coder's row order
        return [sandbox.Result("passed" if h else "failed", 4 * h, 4, 0.01, 0.02, 10.0) for h in hits]

    monkeypatch.setattr(rollout, "sample", spy)
    monkeypatch.setattr(sandbox, "run_many", scripted)
    args = train.get_args(flags)
    optimizer = torch.optim.AdamW([p for n, p in policy.named_parameters() if "lora_" in n], lr=args.lr,
                                  weight_decay=0.0)
    torch.manual_seed(0)
    probs = {role: [p_def(policy, tok, problems, target, role)] for role in roles}
    for _ in range(STEPS):
        train.grpo_step(policy, tok, problems, args, optimizer)
        for role in probs:
            probs[role].append(p_def(policy, tok, problems, target, role))
    return probs


def first_token_hits(calls, target, shuffle) -> list:
    """The single agent's scripted reward: a program hits when its first token is the target."""
    r = calls[-1]
    hits = (r.seqs[:, r.prompt_len] == target).tolist()
    shuffle(hits)
    return hits


def train_scripted(embedded, monkeypatch, shuffled: bool) -> list[float]:
    """The Coder rewarded for starting with `def`: P('def' first) under the Coder, before and after each step."""
    return scripted_steps(embedded, monkeypatch, FLAGS, "def", first_token_hits, shuffled, ("coder",))["coder"]


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


PLANNER_FLAGS = ["--roles", "planner,coder", "--num-plans", "8", "--codes-per-plan", "2", "--max-plan-tokens", "1",
                 "--max-code-tokens", "1", "--lr", "1e-4", "--temperature", "1.0", "--top-p", "1.0"]


def plan_hits(calls, target, shuffle) -> list:
    """The Planner's scripted reward: every program of a plan whose first token is the target hits; shuffled, the
    plans' hits are permuted. The programs of plan k are rows k*M .. k*M + M-1 of the Coder's rollout (tree.py:
    prompt-major), the plans the rows of the rollout before it."""
    plans, codes = calls[-2], calls[-1]
    m = codes.seqs.shape[0] // plans.seqs.shape[0]  # programs a plan
    hits = (plans.seqs[:, plans.prompt_len] == target).tolist()
    shuffle(hits)
    return [h for h in hits for _ in range(m)]


def train_planner_scripted(embedded, monkeypatch, shuffled: bool) -> tuple[list[float], list[float]]:
    """Plans rewarded for starting with `1`: P('1' first) under the Planner and under the Coder, before and after
    each step."""
    probs = scripted_steps(embedded, monkeypatch, PLANNER_FLAGS, "1", plan_hits, shuffled,
                           ("planner", "coder"))
    return probs["planner"], probs["coder"]


def test_scripted_plan_reward_raises_the_planners_behaviour_and_leaves_the_coder(embedded, monkeypatch):
    """The Planner's credit through the tree has the right sign and reaches the Planner's adapter; a plan's
    programs all rewarded alike give the Coder no spread, so its adapter stays. Catches: a sign error in the
    plans' advantages, the Planner's loss run with the Coder's adapter active, a Coder trained on no signal."""
    plans, codes = train_planner_scripted(embedded, monkeypatch, shuffled=False)
    assert plans[0] == pytest.approx(0.075, abs=0.01)  # the base model's own P('1' first) as the Planner
    assert plans[-1] > 0.15  # 4 steps: 0.195 measured (above)
    assert max(abs(c - codes[0]) for c in codes) < 1e-6


def test_shuffled_plan_rewards_do_not_raise_it(embedded, monkeypatch):
    """The control: the same number of rewarded plans a step, chosen at random."""
    plans, _ = train_planner_scripted(embedded, monkeypatch, shuffled=True)
    assert plans[0] == pytest.approx(0.075, abs=0.01)
    assert max(plans) < plans[0] + 0.02  # 0.075 at most, measured
