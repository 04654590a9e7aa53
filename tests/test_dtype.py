"""models.choose_dtype (--dtype auto|float32|bfloat16|autocast), the flag, and what --dtype autocast does to
a forward."""
import pytest
import torch

import models


def test_auto_is_float32_on_every_cpu_and_bf16_on_cuda():
    """The rule measured by accuracy (docs/speed.md#the-cpu-dtype-by-accuracy): on a CPU float32, with AMX too (bf16 lost a third of
    the base model's directly solved problems there). Catches: bf16 chosen on a CPU, CUDA losing bf16."""
    assert models.choose_dtype("cpu", "auto") == "float32" and models.compute_dtype("cpu") == torch.float32
    assert models.choose_dtype("cuda", "auto") == "bfloat16" and models.compute_dtype("cuda") == torch.bfloat16


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
