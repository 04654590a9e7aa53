"""cpu_linear: the frozen base's float32 linears through oneDNN give F.linear's product and gradient."""
import pytest
import torch

from fast import cpu_linear

pytestmark = pytest.mark.skipif(not cpu_linear.available(), reason="this torch build has no oneDNN linear")


def float32_dot_bound(a, b):
    """The float32 rounding error bound of every dot product in a @ b, in any summation order, FMA or not
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 2002, eq. 3.5 / Lemma 3.1):
        |fl(a_i . b_j) - a_i . b_j| <= gamma_K * sum_k |a_ik| |b_kj|,   gamma_K = K u / (1 - K u),  u = 2^-24
    a: [..., K], b: [K, N] (float64 copies); returns [..., N] float64."""
    u, k = 2.0**-24, a.shape[-1]
    return k * u / (1 - k * u) * (a.abs() @ b.abs())


def tf32(t):
    """t's float32 values rounded to TF32's 10-bit mantissa (the 13 low bits of 23 dropped, to nearest)."""
    return ((t.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def test_frozen_linear_is_the_float32_product_and_its_input_gradient():
    """Against float64: y = x W^T + b and dL/dx = g W within the float32 error bound of their dot products
    (float32_dot_bound: K = 576 + 1 terms with the bias, 1536 for dL/dx), and dL/dW, dL/db are not computed.
    The bound is a theorem about float32 arithmetic, not a measurement, so it holds on every CPU and library.
    Seed 0, 2026-12-04, 2-core AMD EPYC: the bound per output is 0.010-0.015 (y) and ~0.09 (dL/dx); oneDNN's
    max error is 8.8e-5 on y (0.7 % of its bound; Intel AMX: 8.8e-5 too) and 1.6e-4 on dL/dx (0.2 %).
    Catches: the bias dropped (98 % of outputs over their bound), a bf16 product (max error 0.23, 83 % over;
    dL/dx 0.34, 33 % over), a TF32 product (max error 0.030, 8 % of y's outputs over, up to 2.3x the bound),
    W not transposed (the shapes would not fit), a backward through W^T^T (the shapes would not fit)."""
    torch.manual_seed(0)
    x = torch.randn(3, 5, 576, requires_grad=True)
    w, b = torch.randn(1536, 576), torch.randn(1536)
    y = cpu_linear.FrozenLinear.apply(x, w, b)  # [3, 5, 1536]
    xd, wd, bd = x.detach().double(), w.double(), b.double()
    ref = xd @ wd.T + bd
    ones = torch.ones(3, 5, 1, dtype=torch.float64)  # the bias as the dot product's (K+1)-th term, b * 1
    bound = float32_dot_bound(torch.cat([xd, ones], -1), torch.cat([wd.T, bd[None]], 0))
    assert y.shape == (3, 5, 1536) and bool(((y.double() - ref).abs() <= bound).all())
    # The bound does tell a wrong product: no bias, bf16 or TF32 inputs each exceed it somewhere.
    assert not bool((((xd @ wd.T).float().double() - ref).abs() <= bound).all())
    for low in (lambda t: t.bfloat16().float(), tf32):
        assert not bool((((low(x.detach()).double() @ low(w).double().T + bd) - ref).abs() <= bound).all())
    g = torch.randn(3, 5, 1536)
    y.backward(g)
    ref = g.double() @ wd
    bound = float32_dot_bound(g.double(), wd)
    assert bool(((x.grad.double() - ref).abs() <= bound).all())
    assert not bool(((g.bfloat16().double() @ w.bfloat16().double() - ref).abs() <= bound).all())
    assert w.grad is None and b.grad is None


def test_install_routes_only_frozen_float32_layers(monkeypatch):
    """install counts the nn.Linear layers it routes; a trainable weight with gradients on keeps F.linear
    (bitwise the same output) and gets its gradient; CORE_CODE_MATMUL=mkl routes nothing."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4, bias=False))
    x = torch.randn(2, 8)
    plain = model(x)
    assert cpu_linear.install(model) == 2
    assert torch.equal(model(x), plain)  # trainable: F.linear
    model(x).sum().backward()
    assert model[0].weight.grad is not None
    model.requires_grad_(False)
    with torch.no_grad():
        calls = []
        monkeypatch.setattr(cpu_linear, "onednn_linear", lambda *a: calls.append(1) or torch.nn.functional.linear(*a))
        assert torch.allclose(model(x), plain, atol=1e-6) and len(calls) == 2  # frozen: through oneDNN
    monkeypatch.setenv("CORE_CODE_MATMUL", "mkl")
    assert cpu_linear.install(torch.nn.Linear(2, 2)) == 0


def test_sampling_weights_merge_lora_and_restore_the_policy(tokenizer):
    """Inside sampling_weights a routed tiny Qwen2 + LoRA gives the policy's logits (max |difference| under 1e-5:
    W + (alpha/r) B A in one product vs W x + (alpha/r) B (A x)), with the active adapter only ('coder', not
    'planner': different logits), the base alone with the adapters disabled, and every forward is restored
    after. Catches: the scaling alpha/r left out (B A at 1/2 of its size), the wrong adapter merged, a packed
    weight left behind (the adapters would stop mattering after sampling)."""
    from conftest import tiny_base
    from infra import models

    policy = models.add_role_adapters(tiny_base(tokenizer), ["planner", "coder"], r=4, alpha=8)
    for n, p in policy.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.05)
    assert cpu_linear.install(policy) == 2 * 7 + 1 + 2 * 2 * 8  # base q,k,v,o,gate,up,down, the LM head, LoRA A/B
    policy.eval()
    ids = torch.tensor([[5, 17, 300, 42, 7, 99]])
    with torch.no_grad():
        policy.set_adapter("coder")
        coder = policy(ids).logits
        with policy.disable_adapter():
            base = policy(ids).logits
        with cpu_linear.sampling_weights(policy, 1):
            merged = policy(ids).logits
            with policy.disable_adapter():
                merged_base = policy(ids).logits
        policy.set_adapter("planner")
        planner = policy(ids).logits
        policy.set_adapter("coder")
        after = policy(ids).logits
    assert (merged - coder).abs().max() < 1e-5 and (planner - coder).abs().max() > 1e-3
    assert (merged_base - coder).abs().max() < 1e-5  # the adapter setting at entry holds inside
    assert torch.equal(after, coder)
    with torch.no_grad(), policy.disable_adapter(), cpu_linear.sampling_weights(policy, 1):
        assert (policy(ids).logits - base).abs().max() < 1e-5


def test_sampling_weights_fuse_siblings_and_norms(tokenizer, monkeypatch):
    """Inside sampling_weights a tiny Qwen2 (2 layers, q|k|v with biases) makes 2 x 4 + 1 oneDNN products per
    forward (q|k|v, o, gate|up, down per layer and the LM head) in place of 2 x 7 + 1, and 5 F.rms_norm calls
    (2 per layer and the final norm), with the same logits as outside (1e-5). A sibling called on its own with
    another input returns x W^T + b of its own weight (k_proj on a new x after q_proj ran: the stored slice of
    the earlier input would be wrong), an input changed in place is computed anew, and once q, k, v each have
    their slice the product is let go.
    Catches: the stacked bias left out (q's bias is random: an error ~0.1), slices in the wrong order (k and v
    have the same size: swapping them changes the logits), a stale output returned for a new input, a group
    that holds its last product after every sibling took its slice (a prefill's outputs kept in all layers)."""
    import weakref

    from conftest import tiny_base
    from infra import models

    policy = models.add_role_adapters(tiny_base(tokenizer), ["coder"], r=4, alpha=8)
    for n, p in policy.named_parameters():
        if "lora_B" in n or "bias" in n:
            torch.nn.init.normal_(p, std=0.05)
    cpu_linear.install(policy)
    policy.eval()
    ids = torch.tensor([[5, 17, 300, 42, 7, 99]])
    products, norms = [], []
    real_linear, real_norm = cpu_linear.onednn_linear, torch.nn.functional.rms_norm
    monkeypatch.setattr(cpu_linear, "onednn_linear", lambda *a: products.append(1) or real_linear(*a))
    monkeypatch.setattr(torch.nn.functional, "rms_norm", lambda *a: norms.append(1) or real_norm(*a))
    with torch.no_grad():
        want = policy(ids).logits
        products.clear()
        with cpu_linear.sampling_weights(policy, 1):
            got = policy(ids).logits
            assert len(products) == 2 * 4 + 1 and len(norms) == 2 * 2 + 1
            attn = policy.base_model.model.model.layers[0].self_attn
            x, x2 = torch.randn(3, 64), torch.randn(3, 64)
            q, k = attn.q_proj(x), attn.k_proj(x2)
            x2.mul_(2)
            v = attn.v_proj(x2)
            x3 = torch.randn(3, 64)
            served = [attn.q_proj(x3), attn.k_proj(x3), attn.v_proj(x3)]
            product = weakref.ref(served[0]._base)  # the group's one product [3, 64 + 32 + 32]
            del served
            assert product() is None  # every sibling served: the group keeps nothing of it
        merged = {n: cpu_linear.weight_and_bias(getattr(attn, n)) for n in ("q_proj", "k_proj", "v_proj")}
    assert (got - want).abs().max() < 1e-5
    for out, inp, name in ((q, x, "q_proj"), (k, x2 / 2, "k_proj"), (v, x2, "v_proj")):
        w, b = merged[name]
        assert (out - (inp @ w.T + b)).abs().max() < 1e-5, name


def test_greedy_sampling_with_merged_weights_is_generates_on_the_embedded_model():
    """SmolLM2-135M as training loads it (float32, routed linears), a Coder adapter with random B: greedy
    rollout.sample (LoRA merged into packed weights) gives `generate`'s tokens (unmerged, unpacked) on two
    left-padded prompts for 32 tokens, and its log-probs match the trainer's scoring to 1e-4."""
    import rollout
    from conftest import embedded_policy
    from test_decode import CHATS, generate_greedy

    policy, tok = embedded_policy()
    policy.eval()
    want = generate_greedy(policy, tok, CHATS, 32)
    r = rollout.sample(policy, tok, CHATS, 1, 32, temperature=0)
    assert torch.equal(r.seqs, want)
    with torch.no_grad():
        assert ((r.logp - rollout.logprobs(policy, r)) * r.mask).abs().max() < 1e-4


def test_a_routed_model_copies_pickles_and_restores_after_an_error(monkeypatch):
    """install changes classes only: a deepcopy computes with its own weights (zeroed: output 0) and the model
    pickles. When packing fails on the second layer (the packing op made to fail), the error comes out as it
    is and every forward is as before; with a bfloat16 layer among the float32 ones nothing is packed.
    Catches: a forward closure over the original layer (a copy would use the original's weights), a restore
    that raises on a layer never replaced and hides the real error."""
    import copy
    import io

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    cpu_linear.install(model)
    model.requires_grad_(False).eval()
    twin = copy.deepcopy(model)
    for p in twin.parameters():
        p.zero_()
    x = torch.randn(3, 4)
    assert (twin(x) == 0).all() and (model(x) != 0).any()
    torch.save(model, io.BytesIO())
    before = model(x)
    real = torch.ops.mkldnn._reorder_linear_weight
    calls = []

    def failing(w, rows):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("packing failed")
        return real(w, rows)
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", failing)
    with pytest.raises(RuntimeError, match="packing failed"), torch.no_grad():
        with cpu_linear.sampling_weights(model, 3):
            pass
    monkeypatch.undo()
    assert all("forward" not in m.__dict__ for m in model.modules()) and torch.equal(model(x), before)
    model[0].to(torch.bfloat16)
    with torch.no_grad(), cpu_linear.sampling_weights(model, 3):  # not all float32: nothing packed
        assert all("forward" not in m.__dict__ for m in model.modules())


@pytest.mark.skipif(not cpu_linear.bf16_runs(), reason="oneDNN has no bfloat16 product on this CPU (no AVX-512)")
def test_bf16_products_round_the_frozen_products_only_and_go_away(tokenizer):
    """Inside bf16_products the frozen base's 15 linears of a tiny Qwen2 (2 layers x 7 and the LM head) carry a
    bf16 copy and use it: logits within 1.5 % of float32's (relative to the largest; bf16 keeps 8 bits; 0.5 % measured) and not
    equal to them, LoRA gradients within 2 % (0.4 %); the LoRA weights are not copied; on the way out the copies go
    and the logits are float32's bitwise; on=False copies nothing. Catches: the copy not used (equal logits),
    a bf16 gradient returned to float32 parameters, copies left behind (memory, and bf16 for ever after)."""
    from conftest import tiny_base
    from infra import models

    torch.manual_seed(0)
    base = tiny_base(tokenizer)
    assert cpu_linear.install(base) == 2 * 7 + 1
    policy = models.add_role_adapters(base, ["coder"], r=4, alpha=8)
    for n, p in policy.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.05)
    ids = torch.tensor([[5, 17, 300, 42, 7, 99, 3, 8]])
    lora = [p for n, p in policy.named_parameters() if "lora_" in n]

    def logits_and_grads():
        policy.zero_grad(set_to_none=True)
        out = policy(ids).logits
        torch.log_softmax(out, -1)[0, :-1].gather(-1, ids[0, 1:, None]).sum().backward()
        return out.detach(), torch.cat([p.grad.flatten() for p in lora])

    f32, g32 = logits_and_grads()
    with cpu_linear.bf16_products(policy):
        copies = [m for m in policy.modules() if "weight_bf16" in m.__dict__]
        b16, g16 = logits_and_grads()
    assert len(copies) == 15 and all(m.__dict__.get("weight_bf16") is None for m in copies)
    assert 0 < (b16 - f32).abs().max() < 0.015 * f32.abs().max()
    assert (g16 - g32).norm() < 0.02 * g32.norm() and g16.dtype == torch.float32
    with cpu_linear.bf16_products(policy, on=False):
        assert not any("weight_bf16" in m.__dict__ for m in policy.modules())
    assert torch.equal(logits_and_grads()[0], f32)
