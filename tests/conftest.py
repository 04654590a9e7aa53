"""Shared fixtures: the repo root on sys.path, the embedded tokenizer, a tiny random Qwen2."""
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def tokenizer():
    """The embedded SmolLM2 tokenizer (pad == eos == <|im_end|>, a chat template)."""
    from infra import models

    return models.load_tokenizer(str(models.embedded_folder()))


def tiny_base(tokenizer):
    """A randomly initialised 2-layer Qwen2 (float32, CPU) with the embedded tokenizer's ids."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                      tie_word_embeddings=True)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


@pytest.fixture
def tiny_policy(tokenizer):
    """tiny_base with 'planner' and 'coder' LoRA adapters whose B is random, so they matter (seconds)."""
    from infra import models

    policy = models.add_role_adapters(tiny_base(tokenizer), ["planner", "coder"], r=4, alpha=8)
    for n, p in policy.named_parameters():  # B != 0 so the adapters change the policy
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02)
    return policy


def embedded_policy():
    """SmolLM2-135M as training loads it (float32 on the CPU), both roles' adapters, the Coder's B random
    (std 0.01, seed 0) and active: (policy, tokenizer). ~5 s."""
    from infra import models

    base, tok = models.load_base(models.EMBEDDED, "cpu", "none", "float32")
    policy = models.add_role_adapters(base, models.ROLES)
    torch.manual_seed(0)
    for n, p in policy.named_parameters():
        if "lora_B.coder" in n:
            torch.nn.init.normal_(p, std=0.01)
    policy.set_adapter("coder")
    return policy, tok


def pytest_configure(config):
    """One marker per course exercise (course/exercises.toml): `pytest -m ex_group_adv tests`."""
    if (ROOT / "course" / "exercises.toml").exists():
        from course import registry

        registry.register_markers(config)


def pytest_collection_modifyitems(items):
    """Tag the tests each course exercise lists with its marker."""
    if (ROOT / "course" / "exercises.toml").exists():
        from course import registry

        registry.mark_items(items)
