"""The benchmark scripts run end to end on a tiny model and print what they measured (seconds each).

Each runs as a subprocess, as a user would run it; the checks read the printed tables.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
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
    table = out.split("GiB\n", 1)[1].splitlines()  # "<what>   <GiB>" rows after the header
    gib = {name: float(v) for name, v in (row.rsplit(maxsplit=1) for row in table)}
    weights, loaded = gib["weights (get_memory_footprint)"], gib["after load, RSS"]
    peak = gib["peak during step, peak RSS"]
    assert 0 < weights < 0.05  # ~3.2M float32 parameters (the 49152 x 64 embedding, tied) = 0.012 GiB
    assert weights < loaded <= peak < 4


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
    import models

    tok = models.load_tokenizer(str(models.embedded_folder()))
    folder = tmp_path_factory.mktemp("tiny-qwen2")
    gpu_memory.save_random_model(gpu_memory.qwen_config(tok, small=True), tok, folder, dtype=torch.float32)
    return str(folder)


def test_grpo_bench_quick_runs_our_rows(tiny_model_folder):
    out = run("bench/grpo_bench.py", "--quick", "--systems", "ours,ours2role", "--model", tiny_model_folder)
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()
            if line.split() and line.split()[0] in ("ours", "ours2role")}
    for system, tokens in [("ours", 8 * 8), ("ours2role", 2 * 4 * 8 + 2 * 8)]:  # 8 codes; 2 plans x 4 codes + 2 plans
        median_s, span, rss, tokens_per_step, tok_s = rows[system]
        assert float(tokens_per_step) == tokens  # --quick forces 8 new tokens per completion
        assert float(median_s) > 0 and 0.1 < float(rss) < 4
        assert float(tok_s) == pytest.approx(tokens / float(median_s), rel=0.05)  # from the rounded median
    assert "code_generation" in out and "plan_generation" in out  # the phase tables of both rows
    assert "step wall time" in out


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
