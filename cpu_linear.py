"""The frozen base's float32 linears on a CPU through oneDNN instead of MKL: the same product, about 2x faster.

Every matmul of the base model is y = x W^T + b with W [out, in] frozen (only the LoRA adapters train).
PyTorch sends a float32 `F.linear` on a CPU to MKL's sgemm; PyTorch's own oneDNN kernel
(`torch.ops.mkldnn._linear_pointwise`, the one torch.compile uses for CPU inference) computes the same
float32 product in another summation order. Measured on the 2-core AMD EPYC (Zen 5), 2026-12-02, SmolLM2-135M
shapes (bench/grpo_bench.py prints the end-to-end effect):

    W [out, in]       rows M   MKL ms   oneDNN ms
    49152 x 576       8        20.1     7.6       the LM head, one decode step at batch 8
    1536 x 576        512      6.0      2.9       an MLP projection in the loss pass
    576 x 1536        512      5.7      2.6

Both are IEEE float32 (no bf16 or TF32 inside); they differ only by rounding, max |difference| ~1e-4 on
outputs of size ~25 (each also differs from a float64 reference by ~5e-5). The backward needs only
dL/dx = dL/dy W (W is frozen: no dL/dW), the same kernel on W^T. LoRA's own small linears are added by
peft after `install` and stay plain. CORE_CODE_MATMUL=mkl switches this off (the A/B of docs/speed.md).

While sampling (`sampling_weights`: no gradients, the weights fixed for the whole rollout) each LoRA layer
is folded into one matrix, W' = W + (alpha/r) B A (the LoRA paper's merge for inference, Hu et al. 2021,
section 4.1), and every weight is packed once into oneDNN's blocked layout for the rollout's batch: one
product per layer instead of three, none re-laid-out per call. Measured (same machine and day, a decode
step of SmolLM2-135M at batch 8 with a LoRA adapter on q, k, v, o): 71-85 ms unmerged, 56 ms merged and
packed, for 0.3 s of merging and packing per rollout and a copy of the weights while it lasts.
"""
import os
from contextlib import contextmanager

import torch


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] @ weight[out, in]^T + bias [out] -> [..., out] by oneDNN (float32 on a CPU)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class FrozenLinear(torch.autograd.Function):
    """y = x W^T + b with W and b frozen; backward: dL/dx = dL/dy W, i.e. the same linear on W^T [in, out]."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(weight)
        return onednn_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_y):
        (weight,) = ctx.saved_tensors
        return onednn_linear(grad_y, weight.t(), None), None, None


def available() -> bool:
    """Whether this torch build runs oneDNN's linear here (a one-off probe on a 2 x 2 product), and the user did
    not switch it off with CORE_CODE_MATMUL=mkl."""
    if os.environ.get("CORE_CODE_MATMUL", "").lower() == "mkl" or not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.allclose(onednn_linear(torch.eye(2), torch.eye(2), None), torch.eye(2)))
    except (RuntimeError, AttributeError):
        return False


def install(model) -> int:
    """Route every nn.Linear already in `model` through FrozenLinear when its call is float32 on a CPU and its
    weight needs no gradient (frozen, or no grad mode; checked at each call, so a trainable or moved layer keeps
    F.linear). Returns the
    number of layers routed (0 when oneDNN is unavailable)."""
    if not available():
        return 0
    layers = [m for m in model.modules() if type(m) is torch.nn.Linear]
    for layer in layers:
        layer.forward, layer.routed = routed_forward(layer), True
    return len(layers)


def routed_forward(layer: torch.nn.Linear):
    """The layer's forward: FrozenLinear where it applies, else nn.Linear's own."""
    plain = layer.forward

    def forward(x):
        w, b = layer.weight, layer.bias
        if (x.dtype == w.dtype == torch.float32 and x.device.type == "cpu" and w.device.type == "cpu"
                and not (torch.is_grad_enabled() and (w.requires_grad or (b is not None and b.requires_grad)))):
            return FrozenLinear.apply(x, w, b)
        return plain(x)
    return forward


def is_lora_linear(m) -> bool:
    """A peft LoRA layer around an nn.Linear (duck-typed: base_layer, lora_A, lora_B, scaling)."""
    return all(hasattr(m, a) for a in ("base_layer", "lora_A", "lora_B", "scaling")) and \
        type(m.base_layer) is torch.nn.Linear


def merged_weight(m) -> torch.Tensor:
    """W + sum over the active adapters of (alpha/r) B A, [out, in]; W alone with the adapters disabled."""
    w = m.base_layer.weight
    if m.disable_adapters or m.merged:
        return w
    for name in m.active_adapters:
        if name in m.lora_A:
            w = w + m.scaling[name] * (m.lora_B[name].weight @ m.lora_A[name].weight)  # [out, r] @ [r, in]
    return w


@contextmanager
def sampling_weights(model, rows: int):
    """Inside: `model`'s routed linears (install) run with packed weights, LoRA merged (module docstring), for
    inputs of about `rows` rows (oneDNN's blocking hint; any number works). Nothing changes for a model
    without routed layers, with gradients on, in train mode (LoRA dropout would be live) or with DoRA:
    those keep their own forward. The adapter setting at entry holds inside (set_adapter / disable_adapter
    inside change nothing). The model's parameters are not touched."""
    lora = [m for m in model.modules() if is_lora_linear(m)]
    inner = {id(m.base_layer) for m in lora}
    if (torch.is_grad_enabled() or not any(hasattr(m, "routed") for m in model.modules())
            or model.training or any(any(m.use_dora.get(a, False) for a in m.active_adapters)
                                     for m in lora if hasattr(m, "use_dora"))):
        yield
        return
    layers = [(m, merged_weight(m), m.base_layer.bias) for m in lora if hasattr(m.base_layer, "routed")]
    layers += [(m, m.weight, m.bias) for m in model.modules() if hasattr(m, "routed") and id(m) not in inner]
    saved = {m: m.__dict__.get("forward") for m, _, _ in layers}
    try:
        for m, w, b in layers:
            m.forward = packed_forward(torch.ops.mkldnn._reorder_linear_weight(w, rows), b)
        yield
    finally:
        for m, f in saved.items():
            if f is None:
                del m.forward
            else:
                m.forward = f


def packed_forward(packed: torch.Tensor, bias):
    """A forward x [..., in] -> [..., out] over a weight packed by oneDNN (extra peft arguments ignored)."""
    def forward(x, *args, **kwargs):
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return forward
