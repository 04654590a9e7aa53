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
    assert p.stdout == f"gpu_check: no CUDA GPU visible to torch (torch {torch.__version__}): nothing to check on this machine (on a CPU: --small)\n"
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
    assert script.index('"$PY" sandbox.py --check') < script.index('row "versions"') < script.index("awk -F")


ROWS = ["versions", "sandbox.py --check", "memory, the recipe's step", "memory, + grad. checkpointing",
        "sampler: graph vs eager", "numerics", "numerics, grad. checkpointing", "train.py 1 SFT + 2 GRPO, --resume",
        "torchrun 2 GPUs, 1 step", "pass@1 of a trained model", "does it learn", "grpo_bench.py (vs TRL)"]


def test_the_small_mode_runs_every_row_on_a_cpu(tmp_path):
    """`bash bench/gpu_check.sh --small`: the GPU check's rows at a tiny shape on a CPU, the 4-bit loss pass included
    (~75 s). Catches: a row that rotted (a renamed flag, a script that moved), a row that fails without saying so
    in the table, the 4-bit CPU loss pass crashing. The table: every row ok or skipped with its reason; each row's
    log in the output folder."""
    p = subprocess.run(["bash", "bench/gpu_check.sh", "--small"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin", "GPU_CHECK_OUT": str(tmp_path)})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    table = (tmp_path / "table.txt").read_text().splitlines()
    rows = {line[:34].strip(): line[35:].split(maxsplit=2) for line in table[1:]}  # name -> [status, s, result]
    assert list(rows) == ROWS
    skipped = {"torchrun 2 GPUs, 1 step", "pass@1 of a trained model", "does it learn", "grpo_bench.py (vs TRL)"}
    assert all(rows[r][0] == ("skipped" if r in skipped else "ok") for r in ROWS), table
    assert rows["memory, the recipe's step"][2].endswith("skipped 0") and "quant 4bit" in \
        (tmp_path / "memory__the_recipe_s_step.log").read_text()
    assert rows["sampler: graph vs eager"][2].startswith("tokens identical")
    assert "grads planner ok, coder ok; tied head shared" in rows["numerics"][2]
    assert "row by row (gradient checkpointing)" in rows["numerics, grad. checkpointing"][2]
    assert rows["train.py 1 SFT + 2 GRPO, --resume"][2].startswith("2 steps") and "already finished" in \
        rows["train.py 1 SFT + 2 GRPO, --resume"][2]
    assert len(list(tmp_path.glob("*.log"))) == 8  # the sandbox's and each row's that ran


def test_the_bundle_builds_and_fits_the_carry_limit(tmp_path):
    """bench/gpu_bundle.sh (make gpu-bundle): the pinned wheels, bitsandbytes with its CPU and CUDA 13.0 libraries
    only, the embedded model's tokenizer without weights; under 30 MiB (the lent machine carries 64 MiB with the
    tree). Catches: a weight file or bitsandbytes' other CUDA libraries (~180 MB) in the bundle, a missing pin."""
    p = subprocess.run(["bash", "bench/gpu_bundle.sh", str(tmp_path / "b")], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr[-2000:]
    b = tmp_path / "b"
    size = sum(f.stat().st_size for f in b.rglob("*") if f.is_file())
    assert p.stdout.splitlines()[-1] == f"bundle size: {size / 2**20:.1f} MiB ({size} bytes)" and size < 30 * 2**20
    wheels = sorted(f.name.split("-")[0] + "==" + f.name.split("-")[1] for f in (b / "wheels").glob("*.whl"))
    pins = dict(x.split("==") for x in (ROOT / "requirements.txt").read_text().split() if "==" in x)
    assert wheels[0] == f"accelerate=={pins['accelerate']}" and f"peft=={pins['peft']}" in wheels
    assert f"transformers=={pins['transformers']}" in wheels and "huggingface_hub==1.33.0" in wheels and len(wheels) == 6
    libs = sorted(f.name for f in (b / "site" / "bitsandbytes").glob("*.so"))
    assert libs == ["libbitsandbytes_cpu.so", "libbitsandbytes_cuda130.so"]
    model = b / "cache" / "SmolLM2-135M-Instruct"
    assert (model / "config.json").exists() and (model / "tokenizer.json").exists()
    assert not [f for f in b.rglob("*") if f.suffix in (".safetensors", ".gguf", ".bin")]
