"""models.choose_dtype (--dtype auto|float32|bfloat16|autocast), the flag, and what --dtype autocast does to
a forward."""
import pytest
import torch

from infra import models


def test_auto_is_float32_on_every_cpu_and_bf16_on_cuda(monkeypatch):
    """The rule measured by accuracy (docs/speed.md#the-cpu-dtype-by-accuracy): on a CPU float32, with AMX too (bf16 lost a third of
    the base model's directly solved problems there); bf16 on a CUDA card that has it, float32 on one without (T4,
    V100: the stated fallback). Catches: bf16 chosen on a CPU, CUDA losing bf16, bf16 on a card without it."""
    assert models.choose_dtype("cpu", "auto") == "float32" and models.compute_dtype("cpu") == torch.float32
    monkeypatch.setattr(models, "cuda_bf16", lambda: True)
    assert models.choose_dtype("cuda", "auto") == "bfloat16" and models.compute_dtype("cuda") == torch.bfloat16
    monkeypatch.setattr(models, "cuda_bf16", lambda: False)
    assert models.choose_dtype("cuda", "auto") == "float32" and models.compute_dtype("cuda") == torch.float32


def test_explicit_dtype_wins_and_bad_name_is_one_line():
    """float32 stays exact everywhere (the path the tests use); autocast keeps fp32 weights. Catches: auto
    overriding an explicit choice, autocast loading bf16 weights."""
    assert models.choose_dtype("cuda", "float32") == "float32" and models.compute_dtype("cuda", "float32") == torch.float32
    assert models.compute_dtype("cpu", "bfloat16") == torch.bfloat16
    assert models.choose_dtype("cpu", "autocast") == "autocast" and models.compute_dtype("cpu", "autocast") == torch.float32
    with pytest.raises(models.ModelError, match="unknown --dtype 'fp16'"):
        models.choose_dtype("cpu", "fp16")


def test_dtype_flag_on_both_commands():
    """Catches: the flag missing on one command, or a default other than auto."""
    import eval as ev
    import train

    assert ev.get_args([]).dtype == "auto" and ev.get_args(["--dtype", "autocast"]).dtype == "autocast"
    assert train.get_args([]).dtype == "auto" and train.get_args(["--dtype", "bfloat16"]).dtype == "bfloat16"
    with pytest.raises(SystemExit):
        train.get_args(["--dtype", "half"])


def test_autocast_runs_the_matmuls_in_bf16_on_fp32_weights(tokenizer):
    """with_autocast: the q projection's output and the logits are bf16, the weights and the norms' outputs fp32,
    the logits within bf16 rounding of fp32's (but not equal: the matmuls really changed precision)."""
    from conftest import tiny_base

    model = tiny_base(tokenizer)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        want = model(input_ids=ids).logits
    seen = {}
    layer = model.model.layers[0]
    layer.self_attn.q_proj.register_forward_hook(lambda m, i, o: seen.update(q=o.dtype))
    layer.input_layernorm.register_forward_hook(lambda m, i, o: seen.update(norm=o.dtype))
    with torch.no_grad():
        got = models.with_autocast(model, "cpu")(input_ids=ids).logits
    assert seen == {"q": torch.bfloat16, "norm": torch.float32} and got.dtype == torch.bfloat16
    assert layer.self_attn.q_proj.weight.dtype == torch.float32
    diff = (got.float() - want).abs().max().item()
    assert 0 < diff < 0.05 * want.abs().max().item()


def test_the_4bit_base_computes_in_bf16_with_float32_lora(tokenizer, tmp_path):
    """load_base's CUDA arguments on a CPU (NF4, double quantisation, compute dtype bf16: bitsandbytes quantises
    there too) on the tiny Qwen2, then the role adapters: the embedding, the tied lm_head, the norms, the q/k/v
    biases, the KV cache and the logits are bf16, the LoRA weights and their gradients float32, every other
    weight 4-bit and frozen. Catches: peft's prepare_model_for_kbit_training, which cast every non-4-bit
    parameter to float32 (and with it the residual stream, the KV cache and the logits)."""
    pytest.importorskip("bitsandbytes")
    from transformers import DynamicCache

    import grpo
    from conftest import tiny_base

    tiny_base(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    base, _ = models.load_base(str(tmp_path), "cpu", "4bit", "bfloat16")
    policy = models.add_role_adapters(base, models.ROLES)
    inner = policy.base_model.model
    layer = inner.model.layers[0]
    dtypes = {"embedding": inner.model.embed_tokens.weight.dtype, "lm_head": inner.lm_head.weight.dtype,
              "norm": inner.model.norm.weight.dtype, "input_norm": layer.input_layernorm.weight.dtype,
              "q_bias": layer.self_attn.q_proj.base_layer.bias.dtype}
    assert set(dtypes.values()) == {torch.bfloat16}, dtypes
    assert type(layer.self_attn.q_proj.base_layer.weight).__name__ == "Params4bit"
    lora = {n: p for n, p in policy.named_parameters() if "lora_" in n}
    assert {p.dtype for p in lora.values()} == {torch.float32}
    assert all(p.requires_grad == (".planner." in n) for n, p in policy.named_parameters() if "lora_" in n)
    assert not any(p.requires_grad for n, p in policy.named_parameters() if "lora_" not in n)
    cache, ids = DynamicCache(config=policy.config), torch.tensor([[5, 6, 7, 8]])
    logits = policy(input_ids=ids, cache=cache, use_cache=True).logits  # [1, 4, V]
    assert logits.dtype == torch.bfloat16 and cache.layers[0].keys.dtype == torch.bfloat16
    lp = grpo.token_logprobs(logits[:, :-1], ids[:, 1:])  # [1, 3]
    assert lp.dtype == torch.float32
    lp.sum().backward()
    grads = [p.grad for n, p in lora.items() if "lora_B.planner" in n]  # B = 0 at start: only B has a gradient
    assert {g.dtype for g in grads} == {torch.float32} and any(g.abs().sum() > 0 for g in grads)
