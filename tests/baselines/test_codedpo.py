"""CodeDPO (baselines/codedpo.py): the self-validation score by hand, the pair choice, the DPO loss and its gradient
against a direct computation, test parsing, one step with known programs and tests on the tiny Qwen2 and
the real sandbox, and `train.py --algo codedpo` through tests/tiny_train.py."""
import dataclasses
import json
import subprocess
import sys
from argparse import Namespace

import pytest
import torch

import rollout
import sandbox
from baselines import codedpo
from conftest import ROOT
from data import problem

NAN = float("nan")
# programs x tests: program 0 passes all three, program 1 only test 0, program 2 only test 1
GRAPH = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 1, 0]])


def test_scores_on_a_3x3_graph_by_hand():
    """From 1/3 each, d = 0.85, both sides from the previous round, then divided by their sum:
    round 1  A s_t = [1, 1/3, 1/3]   -> 0.05 + 0.85 [1, 1/3, 1/3] = [0.9, 1/3, 1/3] / (47/30) = [27, 10, 10] / 47
             A^T s_c = [2, 2, 1] / 3 -> [0.61667, 0.61667, 1/3] / (47/30) = [37, 37, 20] / 94
    round 2  A s_t = [1, 37/94, 37/94] -> 0.15 [27, 10, 10] / 47 + 0.85 [94, 37, 37] / 94 = [88, 34.45, 34.45] / 94
             -> [88, 34.45, 34.45] / 156.9
             A^T s_c = [37, 37, 27] / 47 -> 0.15 [37, 37, 20] / 94 + 0.85 [74, 74, 54] / 94 = [68.45, 68.45, 48.9] / 94
             -> [68.45, 68.45, 48.9] / 185.8"""
    c, t = codedpo.mutual_scores(GRAPH, rounds=1)
    assert c.tolist() == pytest.approx([27 / 47, 10 / 47, 10 / 47], abs=1e-6)
    assert t.tolist() == pytest.approx([37 / 94, 37 / 94, 20 / 94], abs=1e-6)
    c, t = codedpo.mutual_scores(GRAPH, rounds=2)
    assert c.tolist() == pytest.approx([88 / 156.9, 34.45 / 156.9, 34.45 / 156.9], abs=1e-6)
    assert t.tolist() == pytest.approx([68.45 / 185.8, 68.45 / 185.8, 48.9 / 185.8], abs=1e-6)
    c, t = codedpo.mutual_scores(GRAPH)  # T = 10: still sums to 1, program 0 on top, test 2 below 0 and 1
    assert c.sum().item() == pytest.approx(1) and t.sum().item() == pytest.approx(1)
    assert c[0] > c[1] == c[2] and t[0] == t[1] > t[2]
    c, t = codedpo.mutual_scores(torch.zeros(2, 3))  # no edge at all: nothing moves
    assert c.tolist() == [0.5, 0.5] and t.tolist() == pytest.approx([1 / 3] * 3)


def test_a_test_nothing_passes_loses_its_score():
    c, t = codedpo.mutual_scores(torch.tensor([[1, 0], [1, 0]]))
    assert 0 < t[1] < 0.15 ** 10 and c[0] == c[1]  # it keeps (1 - d) = 0.15 of its score each round, at most


def test_pair_choice():
    c, t = codedpo.mutual_scores(GRAPH)
    # best program 0; programs 1 and 2 tie at the bottom: the lower index is rejected; only program 0
    # passes every trusted test: no efficiency pair
    assert codedpo.choose_pairs(c, t, GRAPH, torch.full((3, 3), 0.01), [True] * 3) == [(0, 1, "correct")]
    # program 0 without code: the best left (1) ties with the worst (1 or 2): nothing to prefer
    assert codedpo.choose_pairs(c, t, GRAPH, torch.full((3, 3), 0.01), [False, True, True]) == []
    # programs 0 and 1 pass tests 0 and 1, nothing passes test 2 (untrusted: its time is ignored)
    A = torch.tensor([[1, 1, 0], [1, 1, 0], [0, 0, 0]])
    c, t = codedpo.mutual_scores(A)
    cpu = torch.tensor([[0.004, 0.004, 9.0], [0.001, 0.001, 0.0], [NAN, NAN, NAN]])  # 8 ms against 2 ms
    assert codedpo.choose_pairs(c, t, A, cpu, [True] * 3) == [(0, 2, "correct"), (1, 0, "efficient")]
    close = torch.tensor([[0.0012, 0.0012, 0.0], [0.001, 0.001, 0.0], [NAN] * 3])  # 1.2x: timing noise
    assert codedpo.choose_pairs(c, t, A, close, [True] * 3) == [(0, 2, "correct")]
    tiny = torch.tensor([[0.0004, 0.0004, 0.0], [0.0001, 0.0001, 0.0], [NAN] * 3])  # 4x but 0.6 ms apart
    assert codedpo.choose_pairs(c, t, A, tiny, [True] * 3) == [(0, 2, "correct")]
    noise = torch.tensor([[0.002, 0.002, 0.0], [0.0005, 0.0005, 0.0], [NAN] * 3])  # 4x, 3 ms apart: within the spread
    assert codedpo.choose_pairs(c, t, A, noise, [True] * 3) == [(0, 2, "correct")]
    flat = torch.ones(3, 2)  # every program passes everything: nothing to prefer
    c, t = codedpo.mutual_scores(flat)
    assert codedpo.choose_pairs(c, t, flat, torch.full((3, 2), NAN), [True] * 3) == []


def test_pair_choice_never_picks_a_program_without_code():
    A = torch.tensor([[0, 0], [1, 0], [0, 0]])
    c, t = codedpo.mutual_scores(A)
    assert codedpo.choose_pairs(c, t, A, torch.full((3, 2), NAN), [True, True, False]) == [(1, 0, "correct")]
    assert codedpo.choose_pairs(c, t, A, torch.full((3, 2), NAN), [True, False, True]) == []


def test_dpo_loss_and_gradient_against_a_direct_computation():
    torch.manual_seed(0)
    beta, alpha = 0.1, 0.5
    lp_c, lp_r = (-20 * torch.rand(3)).requires_grad_(), (-20 * torch.rand(3)).requires_grad_()
    ref_c, ref_r, n_c = -20 * torch.rand(3), -20 * torch.rand(3), torch.tensor([4.0, 7.0, 10.0])
    loss, m = codedpo.dpo_loss(lp_c, lp_r, ref_c, ref_r, beta, n_c, alpha)
    z = beta * ((lp_c - ref_c) - (lp_r - ref_r))
    direct = (-torch.log(torch.sigmoid(z)) - alpha * lp_c / n_c).mean()
    assert loss.item() == pytest.approx(direct.item(), rel=1e-6)
    g_c, g_r = torch.autograd.grad(loss, (lp_c, lp_r))
    s = torch.sigmoid(-z.detach())  # d/dz -log sigmoid(z) = -sigmoid(-z)
    assert g_c.tolist() == pytest.approx(((-beta * s - alpha / n_c) / 3).tolist(), rel=1e-5)
    assert g_r.tolist() == pytest.approx((beta * s / 3).tolist(), rel=1e-5)
    assert m["margin"] == pytest.approx((z / beta).mean().item(), rel=1e-6)
    assert m["accuracy"] == pytest.approx((z > 0).float().mean().item())
    big = torch.tensor([1e4])  # softplus form: finite where log(sigmoid) underflows
    assert torch.isfinite(codedpo.dpo_loss(-big, big, big, -big, 1.0, torch.ones(1), 0.0)[0])


def test_parse_test_is_robust():
    parse = codedpo.parse_test
    assert parse("Sure!\n```python\n  assert add(1, 2)==3\nassert add(0, 0) == 0\n```", "add") == "assert add(1, 2) == 3"
    assert parse("assert add(1, 2 == 3\nassert sub(1) == 0\nprint(add(1, 2))", "add") is None
    assert parse("assert x == 1; assert add(1, 1) == 2\nassert (add(2, 2) == 4)", "add") == "assert add(2, 2) == 4"
    assert parse("", "add") is None and parse("```python\n```", "add") is None


def test_spearman():
    assert codedpo.spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert codedpo.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(1.5 / 3 ** 0.5)  # mean ranks for ties
    assert codedpo.spearman([1, 1, 1], [1, 2, 3]) is None


ADD = problem.Problem("x/add", "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n", "add",
                      ("assert add(1, 2) == 3", "assert add(2, 2) == 4"))
PROGRAMS = ["```python\ndef add(a, b):\n    return a + b\n```", "```python\ndef add(a, b):\n    return a - b\n```",
            "no code here", "```python\ndef add(a, b):\n    return a + b + 0\n```"]
TESTS = ["```python\nassert add(1, 2) == 3\n```", "```python\nassert add(2, 0) == 2\n```", "I cannot",
         "```python\nassert add(5, 5) == 11\n```"]


def forced_sampler(calls):
    def sample(policy, tok, chats, n, *a, **k):
        calls.append(n)
        texts = TESTS if "test of the function" in chats[0][-1]["content"] else PROGRAMS
        return rollout.from_texts(tok, [c for c in chats for _ in range(n)], texts[:n] * len(chats),
                                  next(policy.parameters()).device)
    return sample


def dpo_args(**kw):
    return Namespace(**{"dpo_programs": 4, "dpo_tests": 4, "num_plans": 2, "codes_per_plan": 4, "max_code_tokens": 32,
                        "max_test_tokens": 16, "dpo_temperature": 1.0, "top_p": 1.0, "sandbox_timeout": 2.0,
                        "workers": 2, "dpo_rounds": 10, "dpo_damping": 0.85, "dpo_beta": 0.1, "nll_weight": 1.0,
                        "micro_batch": 2, "max_grad_norm": 1.0, "init": None, **kw})


def test_one_step_on_known_programs_and_tests(tiny_policy, tokenizer, monkeypatch):
    """Programs: a + b, a - b, no code, a + b + 0; tests: add(1,2)==3, add(2,0)==2, none, add(5,5)==11
    (wrong: nothing passes it). Pass graph [[1,1,0], [0,1,0], [0,0,0], [1,1,0]]: a + b is chosen (lowest
    index of the top two), 'no code' (lowest score) rejected; no efficiency pair (the two a + b do equal
    work: their measured costs are set to 0.1 ms each, since on a loaded machine two runs of the same
    program can differ by more than EFFICIENCY_MIN_S); the LoRA weights move; the hidden tests give the
    reward (2 of 4 programs pass both) and a Spearman of the score with them."""
    calls = []
    monkeypatch.setattr(rollout, "sample", forced_sampler(calls))
    run_many = sandbox.run_many
    monkeypatch.setattr(sandbox, "run_many", lambda jobs, **k: [
        dataclasses.replace(r, cost_s=1e-4) if r.cost_s is not None else r for r in run_many(jobs, **k)])
    lora = [p for n, p in tiny_policy.named_parameters() if "lora_" in n and ".coder." in n]
    before = [p.detach().clone() for p in lora]
    opt = torch.optim.AdamW(lora, lr=1e-2)
    m, samples = codedpo.step(tiny_policy, tokenizer, [ADD], dpo_args(), opt)
    assert calls == [4, 4]
    assert samples[0]["self_tests"] == ["assert add(1, 2) == 3", "assert add(2, 0) == 2", "assert add(5, 5) == 11"]
    assert (m["dpo_pairs"], m["dpo_correct_pairs"], m["dpo_efficient_pairs"]) == (1, 1, 0)
    assert m["reward"] == pytest.approx((1 + 0 + 0 + 1) / 4)  # hidden: a - b fails both (-1 != 3, 0 != 4)
    assert m["pass_all"] == 0.5 and m["verdicts"] == {"failed": 1, "no_code": 1, "passed": 2}
    # score: a+b = a+b+0 > a-b > no code, against hidden pass rates 1, 0, 0, 1
    assert m["score_spearman"] == pytest.approx(codedpo.spearman([3, 2, 1, 3], [1, 0, 0, 1]))
    assert m["skipped_updates"] == 0 and m["loss"] > 0 and m["grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, lora))
    assert m["self_tests"] == 3 and set(m) >= {"reward", "pass_all", "time_step_s", "verdicts", "skipped_updates"}


def test_the_reference_swap_restores_the_trained_weights(tiny_policy, tokenizer):
    """reference(policy, weights): inside, the Coder's LoRA holds the --init weights (B = 0 here: the base);
    after, the trained weights exactly; None: the base with adapters off."""
    tiny_policy.set_adapter("coder")
    r = rollout.from_texts(tokenizer, [[{"role": "user", "content": "hi"}]], ["def f(): pass"])
    params = {n: p for n, p in tiny_policy.named_parameters() if ".coder." in n and "lora_" in n}
    zero_b = {n.replace(".coder.", "."): (torch.zeros_like(p) if "lora_B" in n else p.detach().clone())
              for n, p in params.items()}
    before = {n: p.detach().clone() for n, p in params.items()}
    with torch.no_grad():
        trained = rollout.logprobs(tiny_policy, r)
        with codedpo.reference(tiny_policy, zero_b):
            swapped = rollout.logprobs(tiny_policy, r)
        with codedpo.reference(tiny_policy, None):
            base = rollout.logprobs(tiny_policy, r)
    assert torch.allclose(swapped, base, atol=1e-6) and not torch.allclose(trained, base, atol=1e-4)
    assert all(torch.equal(before[n], p) for n, p in params.items())


def test_train_one_step_with_algo_codedpo(tmp_path):
    """The dispatch: `train.py --algo codedpo` on the tiny Qwen2 (tests/tiny_train.py) trains the Coder
    alone and logs CodeDPO's metrics."""
    out = tmp_path / "dpo"
    p = subprocess.run([sys.executable, "tests/tiny_train.py", "--algo", "codedpo", "--steps", "1", "--sft-steps", "0",
                        "--problems-per-step", "1", "--dpo-programs", "2", "--dpo-tests", "2", "--max-code-tokens", "8",
                        "--max-test-tokens", "8", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in lines if m["phase"] == "grpo"]
    assert [m["step"] for m in steps] == [1] and sum(steps[0]["verdicts"].values()) == 2
    assert {"dpo_pairs", "score_spearman", "self_tests"} <= steps[0].keys()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algo"] == "codedpo" and cfg["roles"] == ["coder"]


def test_the_reference_reads_an_init_runs_coder_adapter(tiny_policy, tokenizer, tmp_path):
    """reference_weights(run folder) reads adapters/coder as train.py saves it; inside `reference` the
    Coder computes what it computed when saved, though it has trained since."""
    tiny_policy.set_adapter("coder")
    r = rollout.from_texts(tokenizer, [[{"role": "user", "content": "hi"}]], ["def f(): pass"])
    tiny_policy.save_pretrained(tmp_path / "adapters", selected_adapters=["coder"])  # as checkpoint.save_adapters
    with torch.no_grad():
        saved = rollout.logprobs(tiny_policy, r)
        for n, p in tiny_policy.named_parameters():
            if "lora_B.coder" in n:
                p.add_(0.05)  # "training"
        moved = rollout.logprobs(tiny_policy, r)
        with codedpo.reference(tiny_policy, codedpo.reference_weights(tmp_path)):
            ref = rollout.logprobs(tiny_policy, r)
        after = rollout.logprobs(tiny_policy, r)
    assert torch.allclose(ref, saved, atol=1e-6) and torch.equal(after, moved) and not torch.allclose(moved, saved)
