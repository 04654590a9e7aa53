"""The frozen base's float32 linears on a CPU through oneDNN instead of MKL: the same product, about 2x faster.

Every matmul of the base model is y = x W^T + b with W [out, in] frozen (only the LoRA adapters train).
PyTorch sends a float32 `F.linear` on a CPU to MKL's sgemm; PyTorch's oneDNN kernel
(`torch.ops.mkldnn._linear_pointwise`) computes the same float32 product in another summation order.
Measured on the 2-core AMD EPYC (AVX-512, no AMX), 2026-12-02, SmolLM2-135M shapes (bench/grpo_bench.py
prints the end-to-end effect):

    W [out, in]       rows M   MKL ms   oneDNN ms
    49152 x 576       8        20.1     7.6       the LM head, one decode step at batch 8
    1536 x 576        512      6.0      2.9       an MLP projection in the loss pass
    576 x 1536        512      5.7      2.6

Both are IEEE float32 (no bf16 or TF32 inside); they differ only by rounding, max |difference| ~1e-4 on
outputs of size ~25 (each also differs from a float64 reference by ~5e-5). The backward needs only
dL/dx = dL/dy W (W is frozen: no dL/dW), the same kernel on W^T. `install` runs before peft adds the LoRA
layers (models.load_base), so LoRA's own small linears stay plain. CORE_CODE_MATMUL=mkl switches this off
(the A/B of docs/speed.md).

While sampling (`sampling_weights`: no gradients, the weights fixed for the whole rollout) each LoRA layer
is folded into one matrix, W' = W + s B A with peft's scaling s (alpha/r; the LoRA paper's merge for
inference, Hu et al. 2021, section 4.1), and every weight is packed once into oneDNN's blocked layout:
one product per layer instead of three; the layers that read the same input (attention's q, k, v; the
MLP's gate, up) then run as one product on their stacked weights, and the RMS norms as one kernel each.
Measured before that fusion (same machine and day, a decode step of SmolLM2-135M at
batch 8 with a LoRA adapter on q, k, v, o, oneDNN products in both): 83.5 and 93.2 ms unmerged, 49.5 and
56.6 ms merged and packed (two runs each, interleaved), for 0.3 s of merging and packing per rollout and a
packed copy of the weights while it lasts (513 MiB for SmolLM2-135M in float32).
"""
import ctypes
import gc
import os
import sys
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


class FrozenLinearBF16(torch.autograd.Function):
    """FrozenLinear with the product in bfloat16: y = bf16(x) Wb^T (+ b) with Wb = bf16(W), accumulated in float32
    by oneDNN and returned as float32; backward dL/dx = bf16(dL/dy) Wb, as float32. Each operand keeps 8 bits of
    mantissa: outputs within ~0.4 % of the float32 product (relative to their largest, measured on the model's
    shapes), the rounding autocast on a GPU gives (our choice for the SFT stage only: bf16_products)."""

    @staticmethod
    def forward(ctx, x, weight_bf16, bias):
        ctx.save_for_backward(weight_bf16)
        y = onednn_linear(x.to(torch.bfloat16), weight_bf16, None).float()
        return y if bias is None else y + bias

    @staticmethod
    def backward(ctx, grad_y):
        (weight_bf16,) = ctx.saved_tensors
        return onednn_linear(grad_y.to(torch.bfloat16), weight_bf16.t(), None).float(), None, None


def available() -> bool:
    """Whether this torch build runs oneDNN's linear here (a one-off probe on a 2 x 2 product), and the user did
    not switch it off with CORE_CODE_MATMUL=mkl."""
    if os.environ.get("CORE_CODE_MATMUL", "").lower() == "mkl" or not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.allclose(onednn_linear(torch.eye(2), torch.eye(2), None), torch.eye(2)))
    except (RuntimeError, AttributeError):
        return False


def fp32_cpu(t: torch.Tensor | None) -> bool:
    return t is None or (t.dtype == torch.float32 and t.device.type == "cpu")


class RoutedLinear(torch.nn.Linear):
    """An nn.Linear whose forward takes FrozenLinear when the call is float32 on a CPU and the weight needs no
    gradient (frozen, or no grad mode); else nn.Linear's own. The same parameters and state_dict."""

    def forward(self, x):
        w, b = self.weight, self.bias
        trainable = w.requires_grad or (b is not None and b.requires_grad)
        if fp32_cpu(x) and fp32_cpu(w) and fp32_cpu(b) and not (torch.is_grad_enabled() and trainable):
            bf16 = self.__dict__.get("weight_bf16")  # set inside bf16_products only
            return FrozenLinear.apply(x, w, b) if bf16 is None else FrozenLinearBF16.apply(x, bf16, b)
        return super().forward(x)


def install(model) -> int:
    """Make every nn.Linear already in `model` a RoutedLinear (its class changes, nothing else: copies, pickles
    and saved weights behave as before). Returns the number of layers routed (0 when oneDNN is unavailable)."""
    if not available():
        return 0
    layers = [m for m in model.modules() if type(m) is torch.nn.Linear]
    for layer in layers:
        layer.__class__ = RoutedLinear
    return len(layers)


@contextmanager
def bf16_products(model, on: bool = True):
    """Inside (when `on`): every routed frozen linear (install) multiplies in bfloat16 on a bfloat16 copy of its
    weight (FrozenLinearBF16); the float32 weights, LoRA's own products, the norms, attention and the loss stay
    float32. Why: on a CPU with AVX512-BF16 or AMX oneDNN's bf16 product does the same work in less time; the
    copies cost 2 bytes a frozen weight (270 MB for SmolLM2-135M) for as long as the context lasts. The cold-start
    SFT uses it when asked (--sft-products: use_bf16). Nothing changes without routed layers or with `on` False;
    the copies go on the way out, errors included."""
    routed = [m for m in model.modules() if isinstance(m, RoutedLinear) and fp32_cpu(m.weight)
              and not m.weight.requires_grad] if on else []
    try:
        for m in routed:
            m.__dict__["weight_bf16"] = m.weight.detach().to(torch.bfloat16)
        yield
    finally:
        for m in routed:
            m.__dict__.pop("weight_bf16", None)


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX-BF16, from /proc/cpuinfo's flags):
    without either oneDNN emulates bf16 products, slower than float32 ones. False where there is no
    /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def bf16_runs() -> bool:
    """Whether oneDNN can multiply bfloat16 on this CPU at all (natively or emulated: it needs AVX-512 at least);
    without it its bf16 product raises "could not create a primitive descriptor"."""
    return available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def use_bf16(setting: str) -> bool:
    """--sft-products: 'bfloat16' yes, 'float32' no, 'auto' where oneDNN runs here and the CPU has native bf16
    (native_bf16), where bf16 products are faster than float32 ones (docs/speed.md#the-frozen-products-in-bf16---sft-products).
    'bfloat16' on a CPU whose oneDNN has no bf16 product (bf16_runs): float32, and one line says so."""
    if setting == "bfloat16" and not bf16_runs():
        print("--sft-products bfloat16: oneDNN has no bfloat16 product on this CPU (no AVX-512); "
              "the products stay float32", file=sys.stderr)
        return False
    return setting == "bfloat16" or (setting == "auto" and available() and native_bf16())


def is_lora_linear(m) -> bool:
    """A peft LoRA layer around a linear (duck-typed: base_layer, lora_A, lora_B, scaling)."""
    return all(hasattr(m, a) for a in ("base_layer", "lora_A", "lora_B", "scaling")) and \
        isinstance(m.base_layer, torch.nn.Linear)


def plain_lora(m) -> bool:
    """Whether merging gives the layer's forward: plain LoRA on its active adapters (no variant such as DoRA
    or aLoRA, no LoRA bias), not merged into the base already (peft unmerges a merged disabled layer)."""
    variants = getattr(m, "lora_variant", {})
    return not m.merged and not any(a in variants or getattr(m, "use_dora", {}).get(a, False)
                                    or getattr(m, "lora_bias", {}).get(a, False) for a in m.active_adapters)


def merged_weight(m) -> torch.Tensor:
    """W + sum over the active adapters of s B A, [out, in]; W alone with the adapters disabled."""
    w = m.base_layer.weight
    if m.disable_adapters:
        return w
    for name in m.active_adapters:
        if name in m.lora_A:
            w = w + m.scaling[name] * (m.lora_B[name].weight @ m.lora_A[name].weight)  # [out, r] @ [r, in]
    return w


# Layers that read the same input in Llama-type models (Llama, Qwen2, Mistral, SmolLM): while sampling each group
# runs as one product on the stacked weight [W1; W2; ...], its outputs the slices of x [W1; W2; ...]^T.
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
# Norms whose forward is exactly y = w * x / sqrt(mean(x^2) + eps) in float32: F.rms_norm, one kernel in place of six.
RMS_NORMS = {"LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm"}


@contextmanager
def sampling_weights(model, rows: int):
    """Inside: `model`'s routed linears (install) run with packed weights, LoRA merged (module docstring), q|k|v
    and gate|up each as one product (SIBLINGS), the RMS norms as one kernel each (RMS_NORMS); rows is oneDNN's
    blocking hint (the rollout's number of rows; any input size works). Nothing changes, and every layer keeps
    its own forward, for a model without routed layers, with gradients on, in train mode (LoRA dropout would
    be live), with any LoRA but plain LoRA (plain_lora), or with a weight that is not float32 on the CPU. The
    adapter setting at entry holds inside (set_adapter / disable_adapter inside change nothing). The model's
    parameters are not touched, and every forward is restored on the way out, errors included."""
    lora, routed = sampling_layers(model)
    if (torch.is_grad_enabled() or model.training or not routed or not all(plain_lora(m) for m in lora)
            or not all(isinstance(m.base_layer, RoutedLinear) for m in lora)
            or not all(fp32_cpu(m.weight) and fp32_cpu(m.bias) for m in routed + [m.base_layer for m in lora])):
        yield
        return
    replaced = []
    try:
        for group, packed, b, sizes in packed_groups(model, lora + routed, rows):
            for m, forward in zip(group, stacked_forwards(packed, b, sizes)):
                m.forward = forward
                replaced.append(m)
        for m in model.modules():
            if type(m).__name__ in RMS_NORMS and fp32_cpu(m.weight):
                m.forward = rms_norm_forward(m.weight, m.variance_epsilon)
                replaced.append(m)
        yield
    finally:
        for m in replaced:
            m.__dict__.pop("forward", None)


def sampling_layers(model) -> tuple[list, list]:
    """The layers sampling_weights replaces: (LoRA layers, routed linears that are not a LoRA layer's base)."""
    lora = [m for m in model.modules() if is_lora_linear(m)]
    inner = {id(m.base_layer) for m in lora}
    return lora, [m for m in model.modules() if isinstance(m, RoutedLinear) and id(m) not in inner]


def packed_groups(model, layers: list, rows: int):
    """For each group of sibling_groups(model, layers): (group, its weights [sum(sizes), in] stacked, LoRA merged
    and packed by oneDNN for `rows` rows, the stacked bias [sum(sizes)] or None, each layer's output size). One
    group at a time (a generator): a single merged copy exists at once besides the packed ones."""
    for group in sibling_groups(model, layers):
        ws, bs = zip(*(weight_and_bias(m) for m in group))
        packed = torch.ops.mkldnn._reorder_linear_weight(torch.cat(ws), rows)
        yield group, packed, None if bs[0] is None else torch.cat(bs), [w.shape[0] for w in ws]


def weight_and_bias(m):
    """A linear's weight [out, in] (LoRA merged: merged_weight) and bias [out] or None."""
    return (merged_weight(m), m.base_layer.bias) if is_lora_linear(m) else (m.weight, m.bias)


def sibling_groups(model, layers: list) -> list[list]:
    """`layers` cut into the groups that become one product: a SIBLINGS group when all its members are among
    `layers` with the same input size and all or none have a bias; every other layer alone. Read from the base
    linears (a LoRA layer's base_layer): merging changes neither, so no weight is merged here."""
    ids, grouped, groups = {id(m) for m in layers}, set(), []
    for parent in model.modules():
        for names in SIBLINGS:
            group = [getattr(parent, n, None) for n in names]
            if all(id(m) in ids for m in group):
                bases = [m.base_layer if is_lora_linear(m) else m for m in group]
                if len({(b.in_features, b.bias is None) for b in bases}) == 1:
                    groups.append(group)
                    grouped.update(id(m) for m in group)
    return groups + [[m] for m in layers if id(m) not in grouped]


def stacked_forwards(packed: torch.Tensor, bias, sizes: list[int]) -> list:
    """One forward per layer of a group whose weights are stacked in `packed` [sum(sizes), in]: the first call
    with an input x computes y = x packed^T + bias once, [..., sum(sizes)], and each layer returns its slice of
    it [..., sizes[i]] (a view); a call with another tensor, or with x changed in place since, computes anew.
    Once every layer of the group has its slice, the group lets go of y (held by all 30 layers' groups until
    the next step, a prefill's outputs would add hundreds of MiB to the peak RSS of a rollout).
    peft's per-row adapter choice (adapter_names=) cannot run on one merged weight: a ValueError, not a
    silent wrong answer."""
    last = {}  # the latest input, its version counter, the outputs computed from it and the layers still to serve

    def forward_of(i):
        def forward(x, *args, **kwargs):
            if kwargs.get("adapter_names") is not None:
                raise ValueError("sampling_weights merges one adapter setting; adapter_names= cannot be used inside")
            if last.get("x") is not x or last["version"] != x._version or i not in last["left"]:
                last.update(x=x, version=x._version, ys=onednn_linear(x, packed, bias).split(sizes, dim=-1),
                            left=set(range(len(sizes))))
            y = last["ys"][i]
            last["left"].discard(i)
            if not last["left"]:
                last.clear()
            return y
        return forward
    return [forward_of(i) for i in range(len(sizes))]


def rms_norm_forward(weight, eps: float):
    """x [..., d] -> w * x / sqrt(mean(x^2) + eps), one kernel (the float32 RMSNorm of RMS_NORMS)."""
    return lambda x: torch.nn.functional.rms_norm(x, weight.shape, weight, eps)


def release_memory() -> None:
    """Give the memory a finished stage freed back to the system: Python's garbage collector, then glibc's
    malloc_trim(0). glibc keeps freed heap pages in its arenas, so without the trim the peak of SFT's
    activations stayed in the process's RSS through the GRPO steps after it. A no-op where there is no glibc."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
