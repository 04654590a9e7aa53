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
    import models

    return models.load_tokenizer(str(models.embedded_folder()))


@pytest.fixture
def tiny_policy(tokenizer):
    """A randomly initialised 2-layer Qwen2 with 'planner' and 'coder' LoRA adapters (seconds)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    import models

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                      tie_word_embeddings=True)
    base = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    policy = models.add_role_adapters(base, ["planner", "coder"], r=4, alpha=8)
    for n, p in policy.named_parameters():  # B != 0 so the adapters change the policy
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02)
    return policy
