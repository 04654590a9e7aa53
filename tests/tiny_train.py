"""`python tests/tiny_train.py <train.py flags>`: train.main in a real process (it can be SIGKILLed, or be
one torchrun rank) on the tiny random Qwen2 of conftest, with the sandbox replaced by fixed pass rates.

Environment: TINY_PATTERN  comma list of pass rates, repeated over each call's programs (default 1,0)
             TINY_ZERO=ID  every program of problem ID gets pass rate 0 (a group with no signal)
             TINY_FORCED=1 rollouts are teacher-forced texts chosen by the prompt (no sampling), so
                           the samples do not depend on the RNG (the torchrun equivalence test),
                           padded to one fixed width, so they do not depend on the batch either
             TINY_DUMP=F   after the run, torch.save this rank's LoRA weights and the gradient of every
                           optimizer step to F ({rank} in F: the rank)
             TINY_SIGNAL=N:SIG  send signal SIG (INT, TERM) to this process right after its N-th optimizer
                           step (SFT steps first, then one per GRPO step): a Ctrl-C in the middle of a step
"""
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # conftest
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import data  # noqa: E402
import rollout  # noqa: E402
import sandbox  # noqa: E402
import train  # noqa: E402
import update  # noqa: E402
from conftest import tiny_base  # noqa: E402
from infra import models

torch.set_num_threads(1)
tok = models.load_tokenizer(str(models.embedded_folder()))
pattern = [float(x) for x in os.environ.get("TINY_PATTERN", "1,0").split(",")]
models.load_base = lambda *a, **k: (tiny_base(tok), tok)
zero = [list(p.tests) for p in data.load("train") if p.task_id == os.environ.get("TINY_ZERO")]


def run_many(jobs, workers=None, progress=False, **kwargs):
    rates = [0.0 if job["tests"] in zero else pattern[i % len(pattern)] for i, job in enumerate(jobs)]
    return [sandbox.Result("passed" if x == 1 else "failed", int(4 * x), 4, 0.01, 0.02, 10.0) for x in rates]


sandbox.run_many = run_many
if os.environ.get("TINY_FORCED"):
    WORDS = ["def f(x): return x", "x = 1", "return a + b", "print(1)", "pass", "y = [i for i in range(3)]"]

    PROMPT_WIDTH, COMPLETION_WIDTH = 256, 16  # > every train prompt (185 tokens) and WORDS (11 + EOS)

    def forced(policy, tok_, chats, n, *a, **k):
        """n fixed completions per chat, picked by the chat's text (the same in any batch), every row
        padded to PROMPT_WIDTH + COMPLETION_WIDTH: a row's tensors, and so its float math, do not depend
        on which other prompts share its batch (from_texts pads to the batch's longest prompt and completion)."""
        texts = [WORDS[(len(c[-1]["content"]) + j) % len(WORDS)] for c in chats for j in range(n)]
        r = rollout.from_texts(tok_, [c for c in chats for _ in range(n)], texts, next(policy.parameters()).device)
        (N, T), P = r.mask.shape, r.prompt_len
        if P > PROMPT_WIDTH or T > COMPLETION_WIDTH:
            raise SystemExit(f"tiny_train: a {P}-token prompt or {T}-token completion exceeds the fixed width")
        seqs = torch.cat([r.seqs.new_full((N, PROMPT_WIDTH - P), tok_.pad_token_id), r.seqs,
                          r.seqs.new_full((N, COMPLETION_WIDTH - T), tok_.eos_token_id)], dim=1)
        attn = torch.cat([r.attn.new_zeros((N, PROMPT_WIDTH - P)), r.attn[:, :P]], dim=1)  # [N, PROMPT_WIDTH]
        return rollout._finish(tok_, seqs, attn, PROMPT_WIDTH)  # the same mask / texts as r
    rollout.sample = forced

grads = []  # the gradient each optimizer step applies (after the all-reduce), for TINY_DUMP
real_step = torch.optim.AdamW.step


def recording_step(self, *a, **k):
    grads.append([None if p.grad is None else p.grad.detach().clone() for p in update.params(self)])
    out = real_step(self, *a, **k)
    at, _, sig = os.environ.get("TINY_SIGNAL", "").partition(":")
    if at and len(grads) == int(at):
        os.kill(os.getpid(), getattr(signal, f"SIG{sig}"))
    return out


torch.optim.AdamW.step = recording_step
policies = []
real_add = models.add_role_adapters
models.add_role_adapters = lambda *a, **k: policies.append(real_add(*a, **k)) or policies[-1]
train.cli()  # as `python train.py`: its one-line errors and exit statuses
if os.environ.get("TINY_DUMP") and policies:
    torch.save({"weights": {n: p.detach().clone() for n, p in policies[0].named_parameters() if "lora_" in n},
                "grads": grads},
               os.environ["TINY_DUMP"].format(rank=os.environ.get("RANK", "0")))
