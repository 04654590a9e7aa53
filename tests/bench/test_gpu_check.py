"""bench/gpu_check.sh on a machine without CUDA: one clear line and status 2, nothing else run."""
import subprocess
import sys

import pytest
import torch

from conftest import ROOT


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine runs the real check")
def test_without_cuda_it_says_so_in_one_line(tmp_path):
    """Catches: the script ploughing on without a GPU (a table of failures, minutes of CPU), or exiting 0
    so that a CI step reads a check that never ran as passed."""
    p = subprocess.run(["bash", "bench/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin", "GPU_CHECK_OUT": str(tmp_path / "o")})
    assert p.returncode == 2 and p.stderr == ""
    assert p.stdout == f"gpu_check: no CUDA GPU visible to torch (torch {torch.__version__}): nothing to check on this machine\n"
    assert not (tmp_path / "o").exists()


def test_the_memory_row_runs_the_recipe_of_docs_gpu_md():
    """docs/gpu.md's recipe command holds every flag of bench/gpu_recipe.flags (the step the GPU check's
    memory row measures), and its step count and budget are the ones the README states. Catches: the
    recipe changed in the docs but not in the check (the row would measure another step), two step counts."""
    recipe = (ROOT / "bench" / "gpu_recipe.flags").read_text().split()
    doc = (ROOT / "docs" / "gpu.md").read_text()
    command = " ".join(doc.split("    python train.py --model Qwen2.5-Coder-1.5B --train-data", 1)[1].split("\n\n")[0]
                       .replace("\\\n", " ").split())
    pairs = list(zip(recipe[::2], recipe[1::2]))
    assert pairs and all(f"{flag} {value}" in command for flag, value in pairs), (pairs, command)
    assert "--grpo-steps 200 --time-budget 120" in command
    assert "200 GRPO steps" in (ROOT / "README.md").read_text() and "at most 120 minutes" in (ROOT / "README.md").read_text()
    assert "RECIPE=$(cat bench/gpu_recipe.flags)" in (ROOT / "bench" / "gpu_check.sh").read_text()


def test_the_sandbox_check_comes_first():
    """On a GPU machine the script prints `sandbox.py --check` before any row runs: a container without
    namespaces shows why every train row fails before the table does. Catches: the line moved below the rows."""
    script = (ROOT / "bench" / "gpu_check.sh").read_text()
    assert '"$PY" sandbox.py --check' in script
    assert script.index('"$PY" sandbox.py --check') < script.index('row "device"') < script.index("awk -F")
