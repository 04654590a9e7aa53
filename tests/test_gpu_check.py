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
