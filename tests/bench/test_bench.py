"""The benchmark scripts run end to end on a tiny model and print what they measured (seconds each).

Each runs as a subprocess, as a user would run it; the checks read the printed tables.
"""
import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))


def run(*argv):
    p = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_gpu_memory_small_on_cpu():
    out = run("bench/gpu_memory.py", "--device", "cpu", "--small", "--problems-per-step", "1",
              "--max-plan-tokens", "8", "--max-code-tokens", "8")
    assert "1 problems x 2 plans x 4 codes" in out  # train.py's default group sizes
    assert "tokens per plan 8, per code 8" in out  # every completion forced to its full budget
    # the rewards have a spread (gpu_memory.spread_results), so both roles' rows reach the loss pass: 2 plans in
    # micro-batches of 2 (train.py's --micro-batch) -> 1, 8 codes -> 4
    assert "loss-pass micro-batches: planner 1, coder 4" in out
    loss = re.search(r"loss (\S+), gradient norm (\S+), skipped updates (\d+)", out)  # a NaN pass would not pass
    assert loss and math.isfinite(float(loss[1])) and float(loss[2]) > 0 and loss[3] == "0", out
    table, check = out.split("GiB\n", 1)[1].splitlines()[:-1], out.splitlines()[-1]  # "<what>   <GiB>" rows, CHECK
    gib = {name: float(v) for name, v in (row.rsplit(maxsplit=1) for row in table)}
    weights, loaded = gib["weights (get_memory_footprint)"], gib["after load, RSS"]
    peak = gib["peak during step, peak RSS"]
    assert 0 < weights < 0.05  # ~3.2M float32 parameters (the 49152 x 64 embedding, tied) = 0.012 GiB
    assert weights < loaded <= peak < 4
    # gpu_check.sh's summary, each number against the same one printed above; those printed above are rounded
    # themselves (the table's peak to 3 decimals, the loss and norm to 6), so a digit may round the other way
    # (0.465 from 0.4649): each must agree within the coarser rounding
    summary = re.fullmatch(r"CHECK peak RSS (\S+) GiB; (\S+) s; loss (\S+), grad norm (\S+), skipped 0", check)
    assert summary, check
    step_s = re.search(r"codes; .*; ([0-9.]+) s", out)[1]
    assert abs(float(summary[1]) - peak) <= 0.0051 and summary[2] == step_s, check
    assert all(math.isclose(float(summary[i]), float(loss[i - 2]), rel_tol=1e-3, abs_tol=1e-6) for i in (3, 4)), check


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_gpu_memory_says_no_gpu_in_one_line():
    p = subprocess.run([sys.executable, "bench/gpu_memory.py", "--device", "cuda"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 1
    message = p.stderr.strip()
    assert message.startswith("error:") and "no CUDA GPU" in message and len(message.splitlines()) == 1


@pytest.fixture(scope="module")
def tiny_model_folder(tmp_path_factory):
    """A random 2-layer Qwen2 with the embedded tokenizer, saved as a model folder (--model)."""
    import gpu_memory
    from infra import models

    tok = models.load_tokenizer(str(models.embedded_folder()))
    folder = tmp_path_factory.mktemp("tiny-qwen2")
    gpu_memory.save_random_model(gpu_memory.qwen_config(tok, small=True), tok, folder, dtype=torch.float32)
    return str(folder)


def bench_tables(out: str) -> dict:
    """{length setting: {system: [median s, min-max, peak RSS, tokens/step, tok/s, CPU s]}} from the printed tables."""
    tables, current = {}, None
    for line in out.splitlines():
        words = line.split()
        if line.startswith(("forced lengths", "natural lengths")):
            current = tables.setdefault(words[0], {})
        elif not words:
            current = None  # a table ends at a blank line
        elif current is not None and words[0] in ("ours", "ours2role", "before", "trl"):
            current[words[0]] = words[1:]
    return tables


def test_grpo_bench_quick_runs_our_rows_on_equal_work(tiny_model_folder):
    """--quick, forced and natural lengths, ours against this same tree as 'before': every completion has the
    length the setting gives it (the token counts prove the equal work), the ratios are printed, the decode
    line compares our loop and generate with the bandwidth limit."""
    import grpo_bench

    out = run("bench/grpo_bench.py", "--quick", "--systems", "ours,ours2role", "--before", str(ROOT),
              "--model", tiny_model_folder)
    tables = bench_tables(out)
    natural = sum(grpo_bench.quick_lengths(grpo_bench.NATURAL, 8))
    expect = {"forced": {"ours": 8 * 8, "before": 8 * 8, "ours2role": 2 * 4 * 8 + 2 * 8},  # 2 plans x 4 codes + 2 plans
              "natural": {"ours": natural, "before": natural}}
    assert natural < 8 * 8 and {k: set(v) for k, v in tables.items()} == {k: set(v) for k, v in expect.items()}
    for setting, rows in expect.items():
        for system, tokens in rows.items():
            median_s, span, rss, tokens_per_step, tok_s, cpu_s = tables[setting][system]
            assert float(tokens_per_step) == tokens
            assert float(median_s) > 0 and float(cpu_s) > 0 and 0.1 < float(rss) < 4
            assert float(tok_s) == pytest.approx(tokens / float(median_s), rel=0.05)  # from the rounded median
    assert out.count("ours/before") == 2 and "NO RATIO" not in out and "dtype float32" in out
    decode = [line for line in out.splitlines() if line.startswith("decode at batch 8")]
    assert len(decode) == 1 and "bandwidth limit" in decode[0]
    assert "code_generation" in out and "plan_generation" in out  # the phase tables of our rows
    assert "step wall time" in out


def test_grpo_bench_refuses_a_ratio_of_unequal_work(capsys):
    """The rule behind every ratio: tokens per step within 1 % and one dtype, or the reason and no ratio (main
    then exits 1). Catches the earlier bench's ratio of 385 stop-ended tokens against TRL's forced 1,024, and
    of bf16 against fp32."""
    import grpo_bench

    def row(tokens, dtype="float32"):
        return {"step_s": [10.0], "tokens": [tokens], "peak_rss_gib": 2.0, "dtype": dtype, "phases": []}
    a = type("A", (), {"code_tokens": 128, "quick": False})()
    assert grpo_bench.print_table("forced", {"ours": [row(1024)], "trl": [row(1030)]}, a)[0] is None
    assert "ours/trl" in capsys.readouterr().out
    why, ratios = grpo_bench.print_table("forced", {"ours": [row(385)], "trl": [row(1024)]}, a)
    assert why == "tokens per step differ by more than 1 %: ours 385, trl 1024" and ratios == {}
    why, _ = grpo_bench.print_table("forced", {"ours": [row(1024, "bfloat16")], "trl": [row(1024)]}, a)
    assert why == "the systems ran different dtypes: ours bfloat16, trl float32"
    assert grpo_bench.equal_work({"ours": grpo_bench.summary([row(1024)]), "ours2role": grpo_bench.summary([row(80)])}) is None
    out = capsys.readouterr().out
    assert out.count("NO RATIO") == 2 and "ours/trl" not in out


@pytest.mark.skipif(importlib.util.find_spec("trl") is not None, reason="trl is installed here")
def test_grpo_bench_without_trl_says_how_to_install():
    out = run("bench/grpo_bench.py", "--quick", "--systems", "trl")
    assert "pip install -r bench/requirements.txt" in out


def test_sandbox_bench_io_row():
    """The I/O row runs both harnesses on the same tests and both pass all of them (a harness that
    misjudged a right program, or a ratio computed from the wrong rows, shows here)."""
    out = run("bench/sandbox_bench.py", "--io-only", "--repeat", "1", "--workers", "2")
    rows = [line.split() for line in out.splitlines() if line.startswith(("subprocess.run per test", "sandbox (fork"))]
    assert len(rows) == 4  # the io set, then one program with 50 tests, for both harnesses
    for row in rows:
        passed, total = map(int, row[-4].split("/"))
        assert passed == total > 0
        assert float(row[-2]) == pytest.approx(total / float(row[-3]), rel=0.1)  # executions/s from the (rounded) wall
    simple, ours = rows[2], rows[3]  # 50 tests per program: the fork per test must pay off
    assert float(ours[-1].rstrip("x")) == pytest.approx(float(ours[-2]) / float(simple[-2]), rel=0.02)
    import re

    from sandboxing import checkers
    named = [line for line in out.splitlines() if line.startswith((*(f"{c} " for c in checkers.RULES), "checker program"))]
    assert len(named) == len(checkers.RULES) + 1  # every rule, and a checker program of the problem's own
    for line in named:  # equal work: every reference passes under every checker
        passed, total = map(int, re.search(r"(\d+)/(\d+)", line).groups())
        assert passed == total > 0, line


def test_sandbox_cost_bench_prints_every_program_passed():
    """bench/sandbox_cost.py, one run each (~5 s): the four programs of the same work all pass, and the
    import-time forger's claimed CPU is far below its cost from outside (the row the docs keep)."""
    out = run("bench/sandbox_cost.py", "--reps", "1")
    rows = {cells[0]: cells[1:] for line in out.splitlines() if line.startswith("| ")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    assert all(rows[name][0] == "passed" for name in ("honest", "import time", "clock patch", "report")), out
    claimed, cost = (float(rows["import time"][i].split()[0]) for i in (1, 3))
    assert claimed < 5 < cost, out  # ms


def test_rss_profile_names_stages_by_their_bars(tmp_path):
    """bench/rss_profile.py on a child that draws a bar 'work' and then holds 300 MiB for 2 s: the 'work' row's
    peak is at least 0.25 GiB and the 'load' row (before any bar) stays under it. Catches: a stage named
    only at the bar's next refresh (the whole run would be 'load'), the RSS of the wrong process."""
    child = ("import sys, time; sys.stderr.write('work:   0%|          | 0/1'); sys.stderr.flush(); time.sleep(1.5); "
             "x = bytearray(300 * 2**20); time.sleep(2)")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "rss_profile.py"), "--every", "0.2", "--log",
                          str(tmp_path / "log"), "--", sys.executable, "-c", child],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: float(line.split()[3]) for line in out.stdout.splitlines()
            if line.split() and line.split()[0] in ("load", "work")}
    assert rows["work"] >= 0.25 and rows.get("load", 0.0) < 0.25


def test_token_costs_small_prints_per_token_costs_and_sync_counts():
    """bench/token_costs.py --small: the head in pieces keeps far less per token than the whole logits (which keep
    the float32 logits, 49,152 x 4 bytes = 192 KiB a token), each decoder layer the same either way, and the
    fixed-shape sampler syncs the host less than once per token step where decode.py does several."""
    out = run("bench/token_costs.py", "--small", "--tokens", "64")
    vals = {name.strip(): float(v) for name, v in (ln.rsplit(maxsplit=1) for ln in out.splitlines()
                                                  if ln[:1].isalpha() and ln.split()[-1][:1].isdigit() and "=" not in ln)}
    pieces, whole = vals["head per token, LM head in pieces of 256 (fast/chunked.py)"], vals["head per token, whole logits (rollout.logprobs)"]
    assert pieces < 1 and 190 < whole < 200  # KiB
    assert vals["per layer and token, LM head in pieces of 256 (fast/chunked.py)"] == vals["per layer and token, whole logits (rollout.logprobs)"] > 0
    assert vals["fast/fixed_decode.py: host syncs per token step"] < 1 <= vals["decode.py: host syncs per token step"]


def test_overfit_table_reads_each_arm_and_its_epochs(tmp_path):
    """bench/overfit.py --table on a written run: a 4-problem pool, 2 problems a step; evaluations at steps 0 and 2
    (sampled, 2 programs a problem), GRPO steps with rewards 0.5 and 1.0 -> step 2 is epoch 1.0 and its reward
    column 0.750; pass@1 0.25 -> 0.75; the paired bootstrap p against step 0 is filled in at step 2 only.
    Catches: epochs counted by steps (2.0), the reward of all steps instead of those since the last evaluation."""
    import json

    import overfit

    (tmp_path / "pool.jsonl").write_text("{}\n" * 4)
    run = tmp_path / "coder"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"problems_per_step": 2, "roles": ["coder"]}))
    ids = [f"t/{i}" for i in range(4)]
    ev = lambda step, s: {"phase": "eval", "step": step, "eval_pass@1": sum(s) / 4, "eval_problems": 4,  # noqa: E731
                          "eval_samples": 2, "eval_scores": dict(zip(ids, s)), "eval_solved": []}
    lines = [ev(0, [0.5, 0.5, 0.0, 0.0]), {"phase": "grpo", "step": 1, "reward": 0.5, "frac_zero_std_coder": 0.0},
             {"phase": "grpo", "step": 2, "reward": 1.0, "frac_zero_std_coder": 0.5}, ev(2, [1.0, 1.0, 0.5, 0.5])]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    rows = overfit.table(tmp_path).splitlines()[2:]
    assert rows[0] == "| coder | 0 | 0.0 | 25.0 [0.0, 50.0] |  |  |  |  |  |"
    assert rows[1].startswith("| coder | 2 | 1.0 | 75.0 [50.0, 100.0] | 0.") and rows[1].endswith(" | 0.750 | 0.250 |  |  |")
