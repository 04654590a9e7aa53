"""What a device needs set before a model trains there (models.load_base calls these): each works around one
behaviour of a library on that device, and says which.
"""
import os

import torch


def cuda() -> None:
    """On CUDA: TF32 matmuls for what runs in float32 there (the LoRA weights, the log-softmax's sums: 10-bit
    mantissa products, float32 sums; our choice), and expandable_segments."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    expandable_segments()


def expandable_segments() -> bool:
    """Let CUDA's caching allocator grow its segments (expandable_segments:True) unless the user configured it
    (PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF): the loss pass frees and allocates blocks of many sizes, and
    without it freed blocks that no later tensor fits stay reserved (our choice, after PyTorch's notes on CUDA
    memory management; docs/gpu.md#the-budget-estimated-from-per-token-costs). Returns whether it set it."""
    if os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF"):
        return False
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)  # torch >= 2.9; before: the CUDA one
    (setter or torch.cuda.memory._set_allocator_settings)("expandable_segments:True")
    return True


def cpu_training_4bit(model) -> None:
    """Keep bitsandbytes' 4-bit layers on a CPU in their training layout.

    On a CPU with AVX512-BF16 (an Intel Xeon), Linear4bit.forward repacks its weight into an inference-only
    layout the first time it runs in eval mode without gradients (rollout.sample does exactly that); from then on
    every call takes bitsandbytes' inference kernel, which adds the bias in place and has no backward, so
    the loss pass raises "a view of a leaf Variable ... in-place operation" (bitsandbytes 0.50.2,
    nn/modules.py Linear4bit.forward and autograd/_functions.py matmul_4bit). Training needs the one layout
    that has a backward: turn the repacking off on every 4-bit layer (our choice; sampling stays correct,
    just without that kernel)."""
    from bitsandbytes.nn import Linear4bit

    for m in model.modules():
        if isinstance(m, Linear4bit):
            m.support_avx512bf16_for_cpu = False
