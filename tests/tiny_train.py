"""`python tests/tiny_train.py <train.py flags>`: train.main in a real process (it can be SIGKILLed, or be
one torchrun rank) on the tiny random Qwen2 of conftest, with the sandbox replaced by fixed pass rates.

Environment: TINY_PATTERN  comma list of pass rates, repeated over each call's programs (default 1,0)
             TINY_FORCED=1 rollouts are teacher-forced texts chosen by the prompt (no sampling), so
                           the samples do not depend on the RNG (the torchrun equivalence test)
             TINY_DUMP=F   after the run, torch.save this rank's LoRA weights to F (rank in the name)
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # conftest
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import models  # noqa: E402
import rollout  # noqa: E402
import sandbox  # noqa: E402
import train  # noqa: E402
from conftest import tiny_base  # noqa: E402

torch.set_num_threads(1)
tok = models.load_tokenizer(str(models.embedded_folder()))
pattern = [float(x) for x in os.environ.get("TINY_PATTERN", "1,0").split(",")]
models.load_base = lambda *a, **k: (tiny_base(tok), tok)
sandbox.run_many = lambda jobs, workers=None, progress=False: [
    sandbox.Result("passed" if x == 1 else "failed", int(4 * x), 4, 0.01, 0.02, 10.0)
    for x, _ in zip(pattern * len(jobs), jobs)]
if os.environ.get("TINY_FORCED"):
    WORDS = ["def f(x): return x", "x = 1", "return a + b", "print(1)", "pass", "y = [i for i in range(3)]"]

    def forced(policy, tok_, chats, n, *a, **k):
        """n fixed completions per chat, picked by the chat's text (the same in any batch)."""
        texts = [WORDS[(len(c[-1]["content"]) + j) % len(WORDS)] for c in chats for j in range(n)]
        return rollout.from_texts(tok_, [c for c in chats for _ in range(n)], texts,
                                  next(policy.parameters()).device)
    rollout.sample = forced

policies = []
real_add = models.add_role_adapters
models.add_role_adapters = lambda *a, **k: policies.append(real_add(*a, **k)) or policies[-1]
train.main(sys.argv[1:])
if os.environ.get("TINY_DUMP") and policies:
    torch.save({n: p.detach().clone() for n, p in policies[0].named_parameters() if "lora_" in n},
               os.environ["TINY_DUMP"].format(rank=os.environ.get("RANK", "0")))
