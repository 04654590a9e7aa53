"""models.compute_dtype (--dtype auto|float32|bfloat16) on hand-written /proc/cpuinfo texts, and the flag."""
import pytest
import torch

import models

XEON_AMX = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
AVX512_BF16_ONLY = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16\n"  # e.g. an AMD EPYC (Zen 4)
PLAIN = "processor\t: 0\nflags\t\t: fpu sse avx2\nmodel name\t: amx_bf16 in a name is not a flag\n"


def test_auto_follows_amx_on_cpu_and_bf16_on_cuda():
    """Catches: bf16 chosen on avx512_bf16 alone (the EPYC where it was slower), a substring match
    ('amx_bf16' in a model name line), CUDA losing bf16."""
    assert models.compute_dtype("cpu", "auto", XEON_AMX) == torch.bfloat16
    assert models.compute_dtype("cpu", "auto", AVX512_BF16_ONLY) == torch.float32
    assert models.compute_dtype("cpu", "auto", PLAIN) == torch.float32
    assert models.compute_dtype("cpu", "auto", "") == torch.float32
    assert models.compute_dtype("cuda", "auto", PLAIN) == torch.bfloat16


def test_explicit_dtype_wins_and_bad_name_is_one_line():
    """float32 stays exact everywhere (the path the tests use). Catches: auto overriding an explicit choice."""
    assert models.compute_dtype("cpu", "float32", XEON_AMX) == torch.float32
    assert models.compute_dtype("cuda", "float32") == torch.float32
    assert models.compute_dtype("cpu", "bfloat16", PLAIN) == torch.bfloat16
    with pytest.raises(models.ModelError, match="unknown --dtype 'fp16'"):
        models.compute_dtype("cpu", "fp16")


def test_dtype_flag_on_both_commands():
    """Catches: the flag missing on one command, or a default other than auto."""
    import eval as ev
    import train

    assert ev.get_args([]).dtype == "auto" and ev.get_args(["--dtype", "float32"]).dtype == "float32"
    assert train.get_args([]).dtype == "auto" and train.get_args(["--dtype", "bfloat16"]).dtype == "bfloat16"
    with pytest.raises(SystemExit):
        train.get_args(["--dtype", "half"])
