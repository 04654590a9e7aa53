"""infra/device_settings.py: the 4-bit base on a CPU trains after it has sampled (also on a CPU with AVX512-BF16), CUDA loads set expandable segments."""
import pytest
import torch

import rollout
from conftest import tiny_base
from infra import device_settings, models


@pytest.fixture
def tiny_4bit(tokenizer, tmp_path, monkeypatch):
    """A loader of the random 2-layer Qwen2 in 4-bit NF4 on the CPU, as if the CPU had AVX512-BF16 (bitsandbytes
    asks has_avx512bf16() when it builds each Linear4bit), with both roles' adapters (A and B random, seed 1)."""
    from bitsandbytes.nn import modules

    monkeypatch.setattr(modules, "has_avx512bf16", lambda: True)
    tiny_base(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    def load():
        base, tok = models.load_base(str(tmp_path), "cpu", "4bit")
        torch.manual_seed(1)  # the adapters' A and B
        policy = models.add_role_adapters(base, ["planner", "coder"], r=4, alpha=8)
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                torch.nn.init.normal_(p, std=0.02)
        policy.set_adapter("coder")
        return policy, tok
    return load


def coder_grads(policy, r):
    """The Coder's LoRA gradients of -sum(log-probs of r's completions), and those log-probs [N, T]."""
    policy.zero_grad()
    logp = rollout.logprobs(policy, r)
    (-(logp * r.mask).sum()).backward()
    return [p.grad.clone() for n, p in policy.named_parameters() if "lora_" in n and ".coder." in n], logp.detach()


def test_a_4bit_model_that_sampled_trains_like_one_that_did_not(tiny_4bit):
    """Catches: bitsandbytes repacking the weights for its inference kernel the first time a layer runs in eval
    mode without gradients (as rollout.sample runs it); the loss pass then raised "a view of a leaf Variable that
    requires grad is being used in an in-place operation" (its kernel adds the bias in place, with no backward).
    After sampling, the loss pass gives the same log-probs and gradients as a model loaded the same way that
    never sampled."""
    from bitsandbytes.nn import Linear4bit

    policy, tok = tiny_4bit()
    layers = [m for m in policy.modules() if isinstance(m, Linear4bit)]
    assert len(layers) == 14 and not any(m.support_avx512bf16_for_cpu for m in layers)  # 7 linears x 2 layers
    chats = [[{"role": "user", "content": "Write add(a, b)."}]]
    torch.manual_seed(0)
    r = rollout.sample(policy, tok, chats, 2, 6)
    assert not any(getattr(m.weight.quant_state, "packing_format_for_cpu", False) for m in layers)
    grads, logp = coder_grads(policy, r)
    fresh_grads, fresh_logp = coder_grads(tiny_4bit()[0], r)
    assert torch.isfinite(logp).all() and torch.equal(logp, fresh_logp)
    assert all(torch.equal(a, b) for a, b in zip(grads, fresh_grads)) and any(g.abs().sum() > 0 for g in grads)


def test_cuda_loads_set_expandable_segments_unless_configured(monkeypatch):
    """load_base on CUDA sets the allocator's expandable segments, and leaves a user's own setting alone."""
    settings = []
    monkeypatch.setattr(torch._C, "_accelerator_setAllocatorSettings", settings.append)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)

    class Reached(Exception):
        pass

    def resolve(name):
        raise Reached
    monkeypatch.setattr(models, "resolve", resolve)
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32  # load_base sets them on CUDA
    try:
        with pytest.raises(Reached):
            models.load_base("m", "cuda", "none")
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    assert settings == ["expandable_segments:True"]
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    assert device_settings.expandable_segments() is False and settings == ["expandable_segments:True"]
