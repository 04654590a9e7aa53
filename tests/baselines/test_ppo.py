"""PPOCoder (baselines/ppo.py): the math on hand-computed values, the score of a program, one step on the embedded
model, the critic in checkpoints, and `--algo grpo` still computing what GRPO computed before the arms."""
import json
import os
import subprocess
import sys

import pytest
import torch

import grpo
import sandbox
import train
from baselines import ppo
from conftest import ROOT, embedded_policy, tiny_base
from infra import checkpoint, models


def test_gae_on_a_hand_computed_four_token_example():
    """gamma 1, lambda 0.95, r = [0, 0, 0, 1], V = [0.5, 0.4, 0.6, 0.8] (ppo.gae's docstring):
    delta = [-0.1, 0.2, 0.2, 0.2]; A_3 = 0.2, A_2 = 0.2 + 0.95 * 0.2 = 0.39, A_1 = 0.2 + 0.95 * 0.39 = 0.5705,
    A_0 = -0.1 + 0.95 * 0.5705 = 0.441975; R = A + V. A second row ends after 2 tokens (r = [0, 1],
    V = [0.5, 0.4]): A_1 = 1 - 0.4 = 0.6, A_0 = -0.1 + 0.95 * 0.6 = 0.47; the values after its end (9)
    must not leak in."""
    r = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]])
    v = torch.tensor([[0.5, 0.4, 0.6, 0.8], [0.5, 0.4, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 0]])
    adv, ret = ppo.gae(r, v, mask, gamma=1.0, lam=0.95)
    assert torch.allclose(adv, torch.tensor([[0.441975, 0.5705, 0.39, 0.2], [0.47, 0.6, 0, 0]]), atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.941975, 0.9705, 0.99, 1.0], [0.97, 1.0, 0, 0]]), atol=1e-6)


def test_whiten_over_the_masked_tokens():
    """[1, 2, 3] (and a padded 100): mean 2, unbiased var 1 -> [-1, 0, 1] / sqrt(1 + 1e-8); padding 0."""
    x, mask = torch.tensor([[1.0, 2.0], [3.0, 100.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert torch.allclose(ppo.whiten(x, mask), torch.tensor([[-1.0, 0.0], [1.0, 0.0]]), atol=1e-6)


def test_clipped_value_loss_and_its_gradient():
    """V_old = 0, V = [0.5, -0.1], R = [1, 0.3], clip 0.2, w = 1/2 each: clip(V) = [0.2, -0.1];
    (V - R)^2 = [0.25, 0.16], (clip(V) - R)^2 = [0.64, 0.16]; max -> [0.64, 0.16];
    value loss = 1/2 (0.64 + 0.16) / 2 = 0.2. Token 0 takes the clipped branch, whose gradient in V is 0;
    token 1: d/dV = 1/2 * 2 (V - R) w = -0.2, times vf_coef. A = 0: no policy term."""
    v = torch.tensor([[0.5, -0.1]], requires_grad=True)
    zeros, w = torch.zeros(1, 2), torch.full((1, 2), 0.5)
    lp = torch.zeros(1, 2, requires_grad=True)
    loss, m = ppo.ppo_loss(lp, zeros, zeros, v, zeros, torch.tensor([[1.0, 0.3]]), w, w, vf_coef=1e-3)
    loss.backward()
    assert m["value_loss"] == pytest.approx(0.2) and loss.item() == pytest.approx(2e-4)
    assert m["value_clip_frac"] == 0.5 and m["policy_loss"] == 0.0
    assert torch.allclose(v.grad, torch.tensor([[0.0, -0.2e-3]]))


def test_policy_loss_is_clipped_and_has_no_kl_term():
    """rho = [0.5, 1, 1.5], A = [+1, -1, +1], eps 0.2, w = 1/3: min(rho A, clip(rho) A) = [0.5, -1, 1.2]
    -> L = -(0.5 - 1 + 1.2) / 3 = -0.233333. The KL to the reference lives in the reward (token_rewards):
    the loss takes no reference log-probs, and at rho = 1 its gradient is -w A exactly."""
    old = torch.zeros(1, 3)
    lp = torch.log(torch.tensor([[0.5, 1.0, 1.5]])).requires_grad_()
    adv, w = torch.tensor([[1.0, -1.0, 1.0]]), torch.full((1, 3), 1 / 3)
    loss, m = ppo.ppo_loss(lp, old, adv, torch.zeros(1, 3), torch.zeros(1, 3), torch.zeros(1, 3), w,
                           torch.zeros(1, 3), epsilon=0.2, vf_coef=0.0)
    assert loss.item() == pytest.approx(-0.7 / 3) and m["clip_frac"] == pytest.approx(2 / 3)
    lp1 = torch.zeros(1, 3, requires_grad=True)
    ppo.ppo_loss(lp1, old, adv, torch.zeros(1, 3), torch.zeros(1, 3), torch.zeros(1, 3), w, w)[0].backward()
    assert torch.allclose(lp1.grad, -w * adv)


def test_kl_sits_in_the_per_token_reward():
    """beta 0.1, logp_old - logp_ref = [0.5, -1, 0.5] on row 0 (3 tokens) and [1, 1, .] on row 1 (2 tokens):
    r = -0.1 * those, plus S at the last real token: row 0 S = 1 at t = 2, row 1 S = -0.3 at t = 1."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -7.0]])
    ref = torch.tensor([[-1.5, -1.0, -1.0], [-2.0, -2.0, 0.0]])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    r = ppo.token_rewards(torch.tensor([1.0, -0.3]), old, ref, mask, 0.1)
    assert torch.allclose(r, torch.tensor([[-0.05, 0.1, 0.95], [-0.1, -0.4, 0.0]]))


def test_terminal_reward_at_the_last_real_token_of_a_truncated_row():
    """Row 0 ends with EOS (id 2) at completion position 1: its score goes there, on the EOS. Row 1 never
    samples EOS within its budget (truncated): its score goes on its last token, position 3; PPOCoder's
    own training cut such a row at argmax(EOS) = 0 and lost it."""
    seqs = torch.tensor([[7, 7, 5, 2, 2, 2], [7, 7, 5, 6, 5, 6]])  # prompt width 2, T = 4
    mask, truncated = grpo.completion_mask(seqs, 2, eos_id=2)
    assert truncated.tolist() == [False, True]
    r = ppo.token_rewards(torch.tensor([1.0, -0.6]), torch.zeros(2, 4), torch.zeros(2, 4), mask, 0.05)
    assert r.tolist() == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, pytest.approx(-0.6)]]


def test_the_reward_math_keeps_every_tensor_on_the_inputs_device():
    """token_rewards and gae on a device other than the CPU (`meta`: shapes only, no data): an index made on the
    CPU (torch.arange without a device) beside a mask on the model's device raises there, as it did on CUDA at the
    first --algo ppo step. Every result stays on the inputs' device, with the inputs' shape."""
    meta = torch.device("meta")
    score, zeros, mask = torch.ones(3, device=meta), torch.zeros(3, 5, device=meta), torch.ones(3, 5, device=meta)
    r = ppo.token_rewards(score, zeros, zeros, mask, 0.1)
    adv, ret = ppo.gae(r, zeros, mask, 1.0, 0.95)
    assert [(t.device.type, tuple(t.shape)) for t in (r, adv, ret)] == [("meta", (3, 5))] * 3


def test_adaptive_beta_follows_their_controller():
    """beta (1 + clip(KL / target - 1, -0.2, 0.2) n / horizon), horizon 10000, n = 16 programs:
    KL 3 -> +0.2 -> 0.05 * 1.00032; KL 0.5 -> -0.2 -> 0.05 * 0.99968; KL 1.1 -> +0.1 -> 0.05 * 1.00016."""
    assert ppo.adaptive_beta(0.05, 3.0, 16, 1.0) == pytest.approx(0.050016, abs=1e-12)
    assert ppo.adaptive_beta(0.05, 0.5, 16, 1.0) == pytest.approx(0.049984, abs=1e-12)
    assert ppo.adaptive_beta(0.05, 1.1, 16, 1.0) == pytest.approx(0.050008, abs=1e-12)


def result(verdict):
    return sandbox.Result(verdict, 0, 1, 0.0, 0.0, 0.0)


def test_execution_reward_scale():
    """+1 pass, -0.3 a failed test, -0.6 a runtime error or timeout, -1 no code or a program Python cannot
    compile (checked here, whatever the sandbox said); a sandbox error is nobody's: None."""
    ok = "def f():\n    return 1\n"
    assert [ppo.execution_reward(ok, result(v)) for v in ("passed", "failed", "error", "timeout")] == [1.0, -0.3, -0.6, -0.6]
    assert ppo.execution_reward("def f(:\n", result("error")) == -1.0
    assert ppo.execution_reward(None, result("no_code")) == -1.0
    assert ppo.execution_reward(ok, result("sandbox_error")) is None


REFERENCE = "def f(x):\n    y = x + 1\n    return y\n"


def test_ast_and_dataflow_match_on_hand_made_pairs():
    """Against REFERENCE, whose AST has 8 subtrees with children (module, function_definition, parameters,
    block, expression_statement, assignment, binary_operator, return_statement) and whose normalised data
    flow has 5 edges: the same program (renamed variables too) 1.0 / 1.0; `print(1)` shares no subtree
    and no edge: 0.0 / 0.0; `def f(x): return x + 1` has 2 of the 8 subtrees ((parameters (identifier)) and
    (binary_operator (identifier) (integer))) and 2 of the 5 edges (x comes from the parameter, twice):
    0.25 / 0.4. Without a reference: 0 / 0 (the execution reward alone)."""
    assert ppo.code_match(REFERENCE, REFERENCE) == (1.0, 1.0)
    assert ppo.code_match("def g(a):\n    b = a + 1\n    return b\n", REFERENCE) == (1.0, 1.0)
    assert ppo.code_match("print(1)\n", REFERENCE) == (0.0, 0.0)
    assert ppo.code_match("def f(x):\n    return x + 1\n", REFERENCE) == (0.25, 0.4)
    assert ppo.code_match(REFERENCE, None) == (0.0, 0.0) and ppo.code_match(None, REFERENCE) == (0.0, 0.0)


def tiny_args(**kw):
    args = train.get_args(["--algo", "ppo", "--num-plans", "1", "--codes-per-plan", "2", "--max-code-tokens", "12",
                           "--workers", "1", "--lr", "1e-3"])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def test_one_ppo_step_on_the_embedded_model_moves_critic_and_lora(monkeypatch):
    """One ppo.step on SmolLM2-135M (one problem, 2 programs, the sandbox's verdicts fixed): the loss is
    finite, the value head and the Coder's LoRA weights move, the reference adapter is the Coder as the
    step began and stays frozen, and the first step's KL to it is exactly 0."""
    import data

    policy, tok = embedded_policy()
    args = tiny_args()
    lora = [p for n, p in policy.named_parameters() if "lora_" in n]
    optimizer = torch.optim.AdamW(lora + ppo.setup(policy, args), lr=args.lr)
    coder0 = {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_B.coder." in n}
    monkeypatch.setattr(sandbox, "run_many", lambda jobs, **k: [result("failed"), result("passed")][:len(jobs)])
    problem = next(p for p in data.load("train") if p.solution)
    m, samples = ppo.step(policy, tok, [problem], args, optimizer)
    assert m["skipped_updates"] == 0 and torch.isfinite(torch.tensor(m["loss"])) and m["loss"] != 0
    assert m["kl"] == 0.0 and m["kl_coef"] == args.kl_coef and m["verdicts"] == {"failed": 1, "passed": 1}
    assert policy.critic.head.weight.abs().sum() > 0  # it started at 0
    after = dict(policy.named_parameters())
    assert any(not torch.equal(after[n], p) for n, p in coder0.items())
    for n, p in coder0.items():
        ref = after[n.replace(".coder.", f".{ppo.REF}.")]
        assert torch.equal(ref, p) and not ref.requires_grad
    assert samples[0]["task_id"] == problem.task_id and int(policy.critic.steps) == 1


def test_checkpoint_keeps_the_critic_and_the_reference(tmp_path, tokenizer, tiny_policy):
    """checkpoint.save / load carry the value head, beta, the step clock and the frozen reference."""
    args = tiny_args()
    extra = ppo.setup(tiny_policy, args)
    opt = torch.optim.AdamW([p for n, p in tiny_policy.named_parameters() if "lora_" in n] + extra)
    ppo.start(tiny_policy)
    torch.nn.init.normal_(tiny_policy.critic.head.weight)
    tiny_policy.critic.beta.fill_(0.07)
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "samples.jsonl").write_text("")
    ck = checkpoint.save(tmp_path, "step-000001", tiny_policy, opt, checkpoint.fresh_state(), [checkpoint.rng_state()], 0)
    saved = {k: v.clone() for k, v in tiny_policy.critic.state_dict().items()}
    ref = {n: p.detach().clone() for n, p in tiny_policy.named_parameters() if f".{ppo.REF}." in n}
    fresh = models.add_role_adapters(tiny_base(tokenizer), ["planner", "coder"], r=4, alpha=8)
    extra2 = ppo.setup(fresh, args)
    opt2 = torch.optim.AdamW([p for n, p in fresh.named_parameters() if "lora_" in n] + extra2)
    checkpoint.load(ck, fresh, opt2)
    assert all(torch.equal(fresh.critic.state_dict()[k], v) for k, v in saved.items())
    assert float(fresh.critic.beta) == 0.07 and int(fresh.critic.started) == 1
    assert all(torch.equal(dict(fresh.named_parameters())[n], p) for n, p in ref.items())


TINY = ["--steps", "2", "--sft-steps", "1", "--sft-batch", "2", "--problems-per-step", "2", "--num-plans", "2",
        "--codes-per-plan", "2", "--max-plan-tokens", "4", "--max-code-tokens", "4", "--lora-r", "4", "--lr", "1e-2",
        "--workers", "1"]


def test_algo_grpo_reproduces_the_numbers_of_grpo_before_the_arms(tmp_path):
    """tests/tiny_train.py with teacher-forced rollouts (no sampling): `--algo grpo` gives the SFT losses,
    GRPO losses and gradient norms that main at 7a1a2a3 (before --algo existed) gave for the same command
    (recorded there; bit-identical on the machine that recorded them, metrics and LoRA weights alike)."""
    env = {**os.environ, "TINY_FORCED": "1", "TINY_PATTERN": "1,0,0.5,1,0,0,1,0.5"}
    p = subprocess.run([sys.executable, "tests/tiny_train.py", "--algo", "grpo", *TINY, "--out", str(tmp_path / "g")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "g" / "metrics.jsonl").read_text().splitlines()]
    assert [m["loss"] for m in rows] == pytest.approx([10.835179328918457, 10.817068099975586,
                                                       -1.5780329704284668e-05, 0.0638042688369751], rel=1e-5, abs=1e-9)
    assert [m["grad_norm"] for m in rows[2:]] == pytest.approx([0.3979502320289612, 0.428281307220459], rel=1e-5)
    assert [(m["reward"], m["pass_all"]) for m in rows[2:]] == [(0.5, 0.375), (0.5, 0.375)]


def test_algo_ppo_trains_through_train_py(tmp_path):
    """`--algo ppo` through train.main (tests/tiny_train.py: the tiny Qwen2, fixed verdicts): cold-start SFT
    of the Coder alone, two PPO steps, a KL of exactly 0 at the first (the reference is the Coder after
    SFT), beta after it from their controller (KL 0 -> error -0.2 over 8 programs: 0.05 (1 - 0.2 * 8 / 10000)),
    the critic and the frozen reference in the checkpoint and the reference unchanged by training."""
    p = subprocess.run([sys.executable, "tests/tiny_train.py", "--algo", "ppo", *TINY, "--out", str(tmp_path / "p")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "p" / "metrics.jsonl").read_text().splitlines()]
    assert [m["role"] for m in rows if m["phase"] == "sft"] == ["coder"]
    steps = [m for m in rows if m["phase"] == "grpo"]
    assert steps[0]["kl"] == 0.0 and steps[0]["kl_coef"] == 0.05
    assert steps[1]["kl_coef"] == pytest.approx(0.05 * (1 - 0.2 * 8 / 10000), rel=1e-12)
    assert all(m["skipped_updates"] == 0 and m["loss"] == m["loss"] for m in steps)
    ckpt = tmp_path / "p" / "checkpoints" / "step-000002"
    critic = torch.load(ckpt / "critic.pt", weights_only=True)
    assert int(critic["steps"]) == 2 and critic["head.weight"].abs().sum() > 0
    from safetensors.torch import load_file
    sft = load_file(tmp_path / "p" / "checkpoints" / "sft-1" / "adapters" / "coder" / "adapter_model.safetensors")
    ref = load_file(ckpt / "adapters" / ppo.REF / "adapter_model.safetensors")
    now = load_file(ckpt / "adapters" / "coder" / "adapter_model.safetensors")
    assert sft.keys() == ref.keys() and all(torch.equal(sft[k], ref[k]) for k in sft)
    assert any(not torch.equal(sft[k], now[k]) for k in sft)
