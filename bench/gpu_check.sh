#!/usr/bin/env bash
# The GPU path in one command (docs/gpu.md#the-gpu-check), with no model weights needed: random-weight models at
# Qwen2.5-Coder-1.5B's shape (bench/gpu_memory.py's config), prints one table.
#
#   bash bench/gpu_check.sh                  # CUDA, with this checkout's libraries (PYTHON=..., default .venv/bin/python)
#   bash bench/gpu_check.sh --bundle .gpu    # a machine with its own torch and nothing else of ours (make gpu-bundle)
#   bash bench/gpu_check.sh --small          # the same rows on a CPU at a tiny shape (CI runs it: the script cannot rot)
#
# --bundle DIR: its wheels are unpacked into the output folder and put first on PYTHONPATH with DIR/site
# (bitsandbytes), and CORE_CODE_CACHE=DIR/cache (the embedded tokenizer, no weights). Rows, each under its own time
# limit (530 s in all on one GPU, 710 s with the
# TRL row, which runs only where the embedded weights are), each one's output in its own log in the output folder:
# versions; the sandbox's check (printed first: without namespaces every train row fails, docs/sandbox.md); the
# recipe's step (bench/gpu_recipe.flags) in gpu_memory.py without and with --gradient-checkpointing; the sampler
# with its step as a CUDA graph against the eager one (gpu_numerics.py sampler); the sampler's log-probs against the
# loss pass's, each role's LoRA gradients, the tied head (gpu_numerics.py numerics, also with
# --gradient-checkpointing); train.py on a random-weight folder, 2 GRPO steps after 1 SFT step a role, then --resume;
# with 2+ GPUs a 1-step torchrun run. The rows that need real weights (pass@1, learning, the embedded model, the TRL
# comparison) are skipped, one line each, unless the embedded model's weights are there.
# Output folder: $GPU_CHECK_OUT (default a fresh /tmp/gpu-check.*); the table also goes to its table.txt. Without
# CUDA (and without --small) it says so in one line and exits with status 2; status 1 when a row failed.
set -u
cd "$(dirname "$0")/.."
SMALL=0 BUNDLE=
while [ $# -gt 0 ]; do
  case $1 in
    --small) SMALL=1 ;;
    --bundle) BUNDLE=${2:-}; shift ;;
    *) echo "usage: bash bench/gpu_check.sh [--small] [--bundle DIR]"; exit 2 ;;
  esac
  shift
done
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
if [ -n "$BUNDLE" ] && [ ! -d "$BUNDLE/wheels" ]; then
  echo "gpu_check: $BUNDLE holds no bundle (make gpu-bundle builds one in .gpu)"
  exit 2
fi
if [ "$SMALL" = 0 ] && ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: no CUDA GPU visible to torch ($("$PY" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo 'no torch')): nothing to check on this machine (on a CPU: --small)"
  exit 2
fi
OUT=${GPU_CHECK_OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ -n "$BUNDLE" ]; then  # the pinned libraries before the machine's own
  B=$(cd "$BUNDLE" && pwd)
  mkdir -p "$OUT/site"
  for w in "$B"/wheels/*.whl; do "$PY" -m zipfile -e "$w" "$OUT/site"; done
  export PYTHONPATH="$OUT/site:$B/site${PYTHONPATH:+:$PYTHONPATH}" CORE_CODE_CACHE="$B/cache"
  export BNB_CUDA_VERSION=${BNB_CUDA_VERSION:-130}  # the one CUDA library the bundle carries
fi
ROWS=$OUT/rows.tsv
: >"$ROWS"
FAILED=0
if [ "$SMALL" = 1 ]; then
  DEV="--device cpu --small" RECIPE="--problems-per-step 1 --max-plan-tokens 8 --max-code-tokens 16 --quant 4bit"
  NEW="--new-tokens 16"
else
  DEV="--device cuda" RECIPE=$(cat bench/gpu_recipe.flags)  # the step of docs/gpu.md's recipe
  NEW=""
fi
# first what isolates the programs on this machine: without namespaces (a default container) every train row
# below fails at the sandbox's self-check; docs/sandbox.md says what to do there
echo "== python sandbox.py --check"
"$PY" sandbox.py --check | tee "$OUT/sandbox.log"
SANDBOX=${PIPESTATUS[0]}
echo

# row NAME LIMIT_S CMD...: run CMD (log in $OUT), add a row: status, seconds, its last "CHECK ..." line
row() {
  local name=$1 limit=$2 st
  shift 2
  local log="$OUT/$(echo "$name" | tr -c 'a-zA-Z0-9\n' _).log" t0=$SECONDS
  if timeout "$limit" "$@" >"$log" 2>&1; then st=ok; else st="FAIL rc=$?"; FAILED=1; fi
  local detail
  detail=$(grep '^CHECK ' "$log" | tail -1 | cut -c7-)
  [ -n "$detail" ] || detail=$(tail -1 "$log" | cut -c1-100)
  printf '%s\t%s\t%s\t%s\n' "$name" "$st" "$((SECONDS - t0))" "$detail" >>"$ROWS"
}
skip() { printf '%s\t%s\t%s\t%s\n' "$1" "skipped" 0 "$2" >>"$ROWS"; }

row "versions" 30 "$PY" -c "
import importlib.metadata as md, subprocess, torch
def v(p):
    try: return md.version(p)
    except md.PackageNotFoundError: return 'MISSING'
gpu = 'cpu'
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    drv = subprocess.run(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'], capture_output=True,
                         text=True).stdout.split()
    gpu = f'{torch.cuda.device_count()} x {p.name} {p.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}, driver {drv[0] if drv else \"?\"}'
import bitsandbytes, transformers, peft
print(f'CHECK {gpu}; torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, '
      f'bitsandbytes {bitsandbytes.__version__}, accelerate {v(\"accelerate\")}, hub {v(\"huggingface_hub\")}')"
[ "$SANDBOX" = 0 ] && st=ok || { st="FAIL rc=$SANDBOX"; FAILED=1; }
printf '%s\t%s\t%s\t%s\n' "sandbox.py --check" "$st" 0 "$(tail -1 "$OUT/sandbox.log" | cut -c1-100)" >>"$ROWS"
row "memory, the recipe's step" 100 "$PY" bench/gpu_memory.py $DEV $RECIPE
row "memory, + grad. checkpointing" 100 "$PY" bench/gpu_memory.py $DEV $RECIPE --gradient-checkpointing
row "sampler: graph vs eager" 60 "$PY" bench/gpu_numerics.py sampler $DEV $NEW
row "numerics" 60 "$PY" bench/gpu_numerics.py numerics $DEV $NEW
row "numerics, grad. checkpointing" 60 "$PY" bench/gpu_numerics.py numerics $DEV $NEW --gradient-checkpointing

# train.py end to end on a random-weight folder of the same shape: 1 SFT step a role, 2 GRPO steps, held-out eval,
# then --resume of the finished run must find it finished
cat >"$OUT/random_folder.py" <<'EOF'
import sys, torch
sys.path.insert(0, "bench")
sys.path.insert(0, ".")
import gpu_memory
from infra import models
small, folder = sys.argv[1] == "1", sys.argv[2]
device = "cpu" if small or not torch.cuda.is_available() else "cuda"
tok = models.load_tokenizer(str(models.embedded_folder()))
gpu_memory.save_random_model(gpu_memory.qwen_config(tok, small), tok, folder, device,
                             torch.float32 if device == "cpu" else torch.bfloat16)
EOF
cat >"$OUT/summary.py" <<'EOF'
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1] + "/metrics.jsonl")]
g = [m for m in rows if m["phase"] == "grpo"]
e = [m for m in rows if m["phase"] == "eval"]
assert g and [m["step"] for m in g] == list(range(1, len(g) + 1)), "GRPO steps missing"
s = sum(m["time_step_s"] for m in g) / len(g)
ev = f"eval pass@1 {e[-1]['eval_pass@1']:.3f}" if e else "no eval"
print(f"CHECK {len(g)} steps, {s:.1f} s/step, reward {g[-1]['reward']:.3f}, {ev}; --resume: already finished")
EOF
TRAIN="--problems-per-step 2 --num-plans 2 --codes-per-plan 2 --max-plan-tokens 32 --max-code-tokens 64 --quant 4bit --workers 4"
DEVICE=$([ "$SMALL" = 1 ] && echo cpu || echo cuda)
row "train.py 1 SFT + 2 GRPO, --resume" 120 bash -c "$PY $OUT/random_folder.py $SMALL $OUT/random-model \
  && $PY train.py --model $OUT/random-model --steps 2 --sft-steps 1 --sft-batch 2 $TRAIN --device $DEVICE \
  --eval-data val --eval-limit 2 --out $OUT/run && $PY train.py --resume $OUT/run | tail -1 | grep -q 'already finished' \
  && $PY $OUT/summary.py $OUT/run"
NGPU=$([ "$SMALL" = 1 ] && echo 0 || "$PY" -c "import torch; print(torch.cuda.device_count())")
if [ "$NGPU" -ge 2 ]; then
  row "torchrun 2 GPUs, 1 step" 90 bash -c "$PY -m torch.distributed.run --standalone --nproc_per_node 2 train.py \
    --model $OUT/random-model --steps 1 --sft-steps 0 $TRAIN --out $OUT/ddp && $PY $OUT/summary.py $OUT/ddp"
else
  skip "torchrun 2 GPUs, 1 step" "$([ "$SMALL" = 1 ] && echo 'a CPU' || echo 'one GPU only')"
fi
# what random weights cannot tell: skipped, one line each (docs/gpu.md says how they run)
skip "pass@1 of a trained model" "needs real weights and a run of hours (docs/gpu.md#the-recipe)"
skip "does it learn" "needs real weights (docs/gpu.md#does-it-learn-on-a-gpu)"
if [ "$SMALL" = 0 ] && "$PY" -c "import sys; sys.path.insert(0, '.'); from infra import models; f = models.cache_dir() / models.EMBEDDED
sys.exit(0 if any(f.glob('*.safetensors')) else 1)" 2>/dev/null; then
  row "grpo_bench.py, cuda bf16" 180 bash -c "set -o pipefail; $PY bench/grpo_bench.py --device cuda --dtype bfloat16 \
    --systems ours,trl --reps 1 --warmup 1 --steps 2 --cuda-graph | tee /dev/stderr | grep -E '^(decode at|goals)' \
    | tr '\n' ' ' | sed 's/^/CHECK /'"
else
  skip "grpo_bench.py (vs TRL)" "needs the embedded model's weights (not in the bundle; docs/gpu.md#the-gpu-check)"
fi

echo
awk -F'\t' 'BEGIN { printf "%-34s %-10s %6s  %s\n", "check", "status", "s", "result" }
            { printf "%-34s %-10s %6s  %s\n", $1, $2, $3, $4 }' "$ROWS" | tee "$OUT/table.txt"
echo "logs: $OUT"
exit $FAILED
