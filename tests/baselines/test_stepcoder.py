"""StepCoder (baselines/stepcoder.py): CCCS's split points, prompts and loss weights; FGO's token weights from the
sandbox's line coverage; and one step of each PPO arm through train.py on the embedded model."""
import json
import subprocess
import sys

import pytest
import torch

import coder
import grpo
import rollout
import sandbox
from baselines import stepcoder
from conftest import ROOT
from data.problem import Problem

REFERENCE = """def f(xs):
    total = 0
    for x in xs:
        if x > 0:
            total += x
        elif x < -5:
            total -= 1
    if total > 10:
        return 10
    return total"""
LINES = REFERENCE.split("\n")


def test_split_points_are_the_references_conditionals():
    """`if` at line 4, its `elif` at line 6 (an If in the orelse), `if` at line 8; the loop is no split."""
    assert stepcoder.split_points(REFERENCE) == [4, 6, 8]
    assert stepcoder.split_points("def f():\n    return 1") == [] and stepcoder.split_points("def f(:") == []


def test_the_prompt_at_each_stage():
    """K = 4 stages over 8 steps, two steps each; S = 3 split points: g = floor(3 (3 - k) / 3) = 3, 2, 1, 0,
    one split point toward the start per stage: the reply begins with lines 1-7, 1-5, 1-3, then nothing."""
    assert [stepcoder.stage(s, 8, 4) for s in range(10)] == [0, 0, 1, 1, 2, 2, 3, 3, 3, 3]
    prefixes = [stepcoder.reply_prefix(REFERENCE, k, 4) for k in range(4)]
    assert prefixes == ["```python\n" + "\n".join(LINES[:7]), "```python\n" + "\n".join(LINES[:5]),
                        "```python\n" + "\n".join(LINES[:3]), "```python\n"]
    assert prefixes[0].endswith("total -= 1")  # the completion starts with the newline before `if total > 10:`
    assert stepcoder.reply_prefix(None, 0, 4) == stepcoder.reply_prefix(REFERENCE, 0, 1) == "```python\n"


def test_under_a_time_budget_the_curriculum_follows_the_budget():
    """make paper's arms: --steps 100000 --time-budget 15 (900 s), K = 4: the stage is the share of the budget
    spent, 225 s a stage: 0 s, 224 s -> 0; 225 s -> 1; 450 s -> 2; 899 s -> 3, and past the budget 3; whichever
    clock has gone further decides (6 of 8 steps after 10 s -> 3). Catches: the clock by steps alone (the
    paper's StepCoder arm stayed at stage 0, the last conditional's suffix, for its whole run)."""
    assert [stepcoder.stage(3, 100000, 4, s, 900.0) for s in (0, 224, 225, 450, 899, 900, 2000)] == [0, 0, 1, 2, 3, 3, 3]
    assert stepcoder.stage(6, 8, 4, 10.0, 900.0) == 3 and stepcoder.stage(3, 100000, 4, 899.0, None) == 0


def test_prefix_tokens_carry_no_loss_weight(tokenizer):
    """The prefix is prompt: the chat template's assistant turn ends with it, and the loss weights cover the
    completion's tokens alone (+ its EOS)."""
    prefix = stepcoder.reply_prefix(REFERENCE, 1, 4)  # lines 1-5
    chat = coder.messages(Problem("t", "Sum the positives.", "f", ("assert f([1]) == 1",)))
    rest = "\n        elif x < -5:\n            total -= 1\n    return total\n```"
    r = rollout.from_texts(tokenizer, [chat + [{"role": "assistant", "content": prefix}]], [rest])
    prompt = tokenizer.decode(r.seqs[0, :r.prompt_len])
    assert prompt.endswith("<|im_start|>assistant\n" + prefix)
    n_rest = len(tokenizer(rest, add_special_tokens=False).input_ids) + 1
    w = grpo.loss_weights(r.mask, "token")
    assert w.shape[1] == n_rest and r.mask.sum().item() == n_rest and w.sum().item() == pytest.approx(1.0)
    assert tokenizer.decode(r.seqs[0, r.prompt_len:], skip_special_tokens=True) == rest


BRANCHY = "def f(x):\n    if x > 0:\n        return 1\n    else:\n        return 2\n"


def test_the_sandbox_reports_the_lines_that_ran():
    """Traced function tests: lines 1 (def), 2 (if) and 3 ran for f(2) and f(5) (a value test and a
    statement test, which the judge process calls through the program's process); `else:` (4) has no
    bytecode, line 5 never ran, line 7 (top level) ran. Untraced: None. A load failure still reports."""
    program = BRANCHY + "\nz = 3\n"
    r = sandbox.run_program(program, ["assert f(2) == 1", "y = f(5)\nassert y == 1"], coverage=True)
    assert r.verdict == "passed" and r.coverage == (1, 2, 3, 7)
    assert sandbox.run_program(program, ["assert f(2) == 1"]).coverage is None
    r = sandbox.run_program("x = 1\nraise ValueError\ny = 2\n", ["assert x == 1"], coverage=True)
    assert r.verdict == "error" and r.coverage == (1, 2)


def fgo(tok, completion, executed, prefix="```python\n"):
    ids = tok(completion, add_special_tokens=False).input_ids + [tok.eos_token_id]
    spans = stepcoder.token_spans(tok, ids)
    response = prefix + completion
    code = coder.extract_code(response)
    keep = stepcoder.fgo_weights(spans, prefix, response, code, code, executed)
    return spans, keep


def test_fgo_masks_the_tokens_of_the_unexecuted_branch(tokenizer):
    """BRANCHY with f(1) as the only test ran lines 1-3: the tokens of line 5 (`return 2` and its newline)
    weigh 0; `else:` has no bytecode and keeps its tokens, as do the closing fence and EOS. The weights
    then normalise over the kept tokens as --loss-type says."""
    completion = BRANCHY + "```"
    spans, keep = fgo(tokenizer, completion, {1, 2, 3})
    dropped = "".join(completion[s:e] for (s, e), k in zip(spans, keep) if k == 0)
    assert dropped == " return 2\n"  # the token "\n       " before it also holds the `else:` line's newline
    assert "".join(completion[s:e] for (s, e), k in zip(spans, keep) if k == 1) == completion.replace(" return 2\n", "")
    T = len(keep)
    mask = torch.ones(2, T)
    keep2 = torch.stack([torch.tensor(keep), torch.ones(T)])  # row 1: every line ran
    kept = int(sum(keep))
    w = grpo.loss_weights(mask * keep2, "token")
    assert torch.allclose(w, keep2 / (kept + T))
    w = grpo.loss_weights(mask * keep2, "grpo")
    assert torch.allclose(w[0], keep2[0] / kept / 2) and torch.allclose(w[1], keep2[1] / T / 2)
    w = grpo.loss_weights(mask * keep2, "dr_grpo", 64)
    assert torch.allclose(w, keep2 / (2 * 64))


def test_fgo_keeps_every_token_without_a_verdict_on_lines(tokenizer):
    """A program that does not compile keeps all its tokens (it has no executable lines to speak of); so does a
    run without a coverage report (None); with every line run nothing is masked."""
    _, keep = fgo(tokenizer, "def f(x:\n    return 1\n```", set())
    assert keep == [1.0] * len(keep)
    _, keep = fgo(tokenizer, BRANCHY + "```", None)
    assert keep == [1.0] * len(keep)
    _, keep = fgo(tokenizer, BRANCHY + "```", {1, 2, 3, 5})
    assert keep == [1.0] * len(keep)


def test_fgo_maps_lines_through_the_prefix_and_the_prompt_stub(tokenizer):
    """With a CCCS prefix (lines 1-2 given) and a program that starts with 3 stub lines (the problem's Python
    prompt), the completion's `return 2` is program line 3 + 5 = 8: masked when 4-6 ran, kept when 8 ran too."""
    prefix = "```python\ndef f(x):\n    if x > 0:"
    completion = "\n        return 1\n    else:\n        return 2\n```"
    ids = tokenizer(completion, add_special_tokens=False).input_ids
    spans, response = stepcoder.token_spans(tokenizer, ids), prefix + completion
    code = coder.extract_code(response)
    program = "import math\n\n\n" + code  # a stub of 3 lines, as coder.program puts before the code
    keep = stepcoder.fgo_weights(spans, prefix, response, program, code, {4, 5, 6})
    assert "".join(completion[s:e] for (s, e), k in zip(spans, keep) if k == 0) == " return 2\n"
    assert stepcoder.fgo_weights(spans, prefix, response, program, code, {4, 5, 6, 8}) == [1.0] * len(spans)


def test_stepcoder_trains_one_step_on_the_embedded_model(tmp_path):
    """`train.py --algo stepcoder` on SmolLM2-135M, one step (real sandbox, the traced run too): the Coder
    alone, a finite loss, KL 0 on the first step, the first curriculum stage, some tokens kept, and the
    checkpoint holds the critic and the frozen reference. (--algo ppo through train.py: test_ppo.py.)"""
    out = tmp_path / "sc"
    p = subprocess.run([sys.executable, "train.py", "--algo", "stepcoder", "--steps", "1", "--sft-steps", "0",
                        "--problems-per-step", "1", "--num-plans", "1", "--codes-per-plan", "2", "--max-code-tokens",
                        "16", "--workers", "1", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    (m,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"grpo"' in x]
    assert m["kl"] == 0.0 and m["skipped_updates"] == 0 and sum(m["verdicts"].values()) == 2
    assert m["cccs_stage"] == 0 and 0 < m["loss_tokens_kept"] <= 1 and abs(m["loss"]) < 1e3
    assert m["ast_match"] == 0.0 and m["dfg_match"] == 0.0  # StepCoder's reward: the compiler's feedback alone
    ckpt = out / "checkpoints" / "step-000001"
    assert (ckpt / "critic.pt").exists() and (ckpt / "adapters" / "coder_ref").is_dir()
    (sample,) = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert sample["prefix"].startswith("```python\n")
    assert sample["program"] is None or sample["prefix"][len("```python\n"):] in sample["program"]  # prefix + completion
