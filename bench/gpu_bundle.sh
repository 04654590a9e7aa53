#!/usr/bin/env bash
# The GPU check's bundle (docs/gpu.md#on-a-lent-machine): what bench/gpu_check.sh needs on a GPU machine that has its
# own torch but not our libraries, no network and no model weights, in one folder small enough to carry (26 MiB).
#
#   bash bench/gpu_bundle.sh [FOLDER]        # default .gpu (git ignores it); `make gpu-bundle` runs this
#
# FOLDER/wheels  the wheels of our pinned transformers, peft and accelerate (requirements.txt), of the tokenizers and
#                safetensors this venv runs with them, and huggingface_hub 1.33.0 (pip download: from the index pip uses).
#                Not this venv's hub 2.x: that needs httpx2, which a machine with a transformers 5 before 5.24 lacks
#                (their hub is 1.x, on httpx); 1.33.0, the last 1.x, is one transformers 5.24 accepts (>= 1.31)
# FOLDER/site    bitsandbytes (requirements.txt's pin, as installed here) with only its CPU library and its CUDA 13.0
#                one (libbitsandbytes_cuda130.so, with sm_90 code; gpu_check.sh --bundle sets BNB_CUDA_VERSION=130 so
#                that a torch built for another CUDA 13 loads it too)
# FOLDER/cache   the embedded model's config and tokenizer files without its weights (CORE_CODE_CACHE: the tokenizer
#                and the ids the random-weight rows use)
# Prints the folder's size. PYTHON=... picks the interpreter (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${1:-.gpu}
pin() { grep -E "^$1==" requirements.txt | cut -d' ' -f1; }
installed() { "$PY" -c "import importlib.metadata as m; print('$1==' + m.version('$1'))"; }
rm -rf "$OUT"
mkdir -p "$OUT/wheels" "$OUT/site" "$OUT/cache"
"$PY" -m pip download -q --no-deps --only-binary :all: -d "$OUT/wheels" \
  "$(pin transformers)" "$(pin peft)" "$(pin accelerate)" \
  "$(installed tokenizers)" "$(installed safetensors)" huggingface_hub==1.33.0
"$PY" - "$OUT" <<'EOF'
import importlib.metadata as md
import shutil
import sys
from pathlib import Path

sys.path.insert(0, ".")
from infra import models

out = Path(sys.argv[1])
dist = md.distribution("bitsandbytes")
root = Path(dist.locate_file(""))
keep_lib = ("libbitsandbytes_cpu.so", "libbitsandbytes_cuda130.so")
for f in dist.files:  # the package's own files, and its dist-info (so that importlib.metadata finds its version)
    if f.name.startswith("libbitsandbytes_") and f.name not in keep_lib or "__pycache__" in f.parts:
        continue
    src = root / f
    if src.is_file() and (f.parts[0] == "bitsandbytes" or f.parts[0].endswith(".dist-info")):
        (out / "site" / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out / "site" / f)
folder = models.embedded_folder()  # converts the embedded model once if it is not yet
dest = out / "cache" / folder.name
dest.mkdir(parents=True)
for f in folder.iterdir():
    if f.is_file() and f.suffix in (".json", ".txt", ".jinja", ".model") or f.name == "merges.txt":
        shutil.copy2(f, dest / f.name)
print(f"{out}: {sum(1 for _ in out.glob('wheels/*.whl'))} wheels, bitsandbytes {dist.version} "
      f"({', '.join(keep_lib)}), {len(list(dest.iterdir()))} files of {folder.name} (no weights)")
EOF
find "$OUT" -type f -printf '%s\n' | awk '{ n += $1 } END { printf "bundle size: %.1f MiB (%d bytes)\n", n / 2^20, n }'
