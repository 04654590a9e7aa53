#!/usr/bin/env bash
# The GPU path in one go (docs/gpu.md#the-gpu-check): about 5 minutes on one 24 GB GPU, prints a table.
#
#   bash bench/gpu_check.sh                 # PYTHON=... picks the interpreter (default: .venv/bin/python)
#
# First the sandbox's own check (sandbox.py --check). Rows: the device; the embedded model loaded in bf16 and in 4-bit NF4 on CUDA (+ one forward);
# a 2-step two-role train.py run with --quant 4bit on CUDA (1 SFT step per role, held-out eval,
# then --resume of the finished run); bench/gpu_memory.py at the 1.5B shape, the recipe's step; the GRPO
# step bench on CUDA in bf16 (forced and natural lengths, ours and TRL when trl is importable, decode
# ms per step against the GPU's measured bandwidth); and, with two or more GPUs, one torchrun step on
# 2 of them; and make paper's small mode. Each row has its own time limit (they add up to 810 s on one GPU,
# 900 s with two), so the whole script ends within 15 minutes even when a row hangs. Logs and run folders stay in $GPU_CHECK_OUT (default a
# fresh /tmp/gpu-check.*). Without CUDA it says so in one line and exits with status 2.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: no CUDA GPU visible to torch ($("$PY" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo 'no torch')): nothing to check on this machine"
  exit 2
fi
OUT=${GPU_CHECK_OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
mkdir -p "$OUT"
ROWS=$OUT/rows.tsv
: >"$ROWS"
FAILED=0
# first what isolates the programs on this machine: without namespaces (a default container) every train row
# below fails at the sandbox's self-check; docs/sandbox.md says what to do there
echo "== python sandbox.py --check"
"$PY" sandbox.py --check || echo "(sandbox.py --check: status $?; docs/sandbox.md)"
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

row "device" 30 "$PY" -c "
import torch
p = torch.cuda.get_device_properties(0)
print(f'CHECK {torch.cuda.device_count()} x {p.name}, {p.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, '
      f'CUDA {torch.version.cuda}, bf16 {torch.cuda.is_bf16_supported()}')"

cat >"$OUT/load.py" <<'EOF'
import sys, time, torch
sys.path.insert(0, ".")
from infra import models
quant = sys.argv[1]
t = time.perf_counter()
model, tok = models.load_base(models.EMBEDDED, "cuda", quant)
q = model.model.layers[0].self_attn.q_proj
kind = type(q).__name__ + (f" {q.weight.quant_type}" if quant == "4bit" else f" {q.weight.dtype}")
ids = tok("def add(a, b):", return_tensors="pt").input_ids.cuda()
with torch.no_grad():
    logits = model(ids).logits
assert torch.isfinite(logits).all(), "non-finite logits"
peak = torch.cuda.max_memory_allocated() / 2**30
print(f"CHECK {kind}, load {time.perf_counter() - t:.1f} s, {peak:.2f} GiB peak, forward finite")
EOF
cat >"$OUT/summary.py" <<'EOF'
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1] + "/metrics.jsonl")]
g = [m for m in rows if m["phase"] == "grpo"]
e = [m for m in rows if m["phase"] == "eval"]
assert g and [m["step"] for m in g] == list(range(1, len(g) + 1)), "GRPO steps missing"
s = sum(m["time_step_s"] for m in g) / len(g)
ev = f"eval pass@1 {e[-1]['eval_pass@1']:.3f}" if e else "no eval"
print(f"CHECK {len(g)} steps, {s:.1f} s/step, reward {g[-1]['reward']:.3f}, {ev}")
EOF
row "embedded bf16 load" 60 "$PY" "$OUT/load.py" none
row "embedded NF4 load" 60 "$PY" "$OUT/load.py" 4bit

TRAIN="--problems-per-step 2 --num-plans 2 --codes-per-plan 4 --device cuda --quant 4bit --workers 4"
row "train 2 steps, 4bit" 120 bash -c "$PY train.py --steps 2 --sft-steps 1 --sft-batch 2 $TRAIN --eval-data val \
  --eval-limit 4 --out $OUT/run && $PY train.py --resume $OUT/run | tail -1 | grep -q 'already finished' \
  && $PY $OUT/summary.py $OUT/run"
RECIPE=$(cat bench/gpu_recipe.flags)  # the step of docs/gpu.md's recipe (its group sizes, lengths, micro-batch)
row "gpu_memory.py, the recipe's step" 180 bash -c "$PY bench/gpu_memory.py $RECIPE | tee /dev/stderr | tail -1 | sed 's/^/CHECK /'"
row "grpo_bench.py, cuda bf16" 180 bash -c "set -o pipefail; $PY bench/grpo_bench.py --device cuda --dtype bfloat16 --systems ours,trl \
  --reps 1 --warmup 1 --steps 2 | tee /dev/stderr | grep -E '^(decode at|goals)' | tr '\n' ' ' | sed 's/^/CHECK /'"
# make paper's small mode on the device (docs/results.md: every stage at tiny sizes, the embedded model on CUDA);
# -o: the interpreter is $PY, so make must not build its own venv
row "make paper, small mode" 180 bash -c "make -o .venv/.installed paper PAPER_SMALL=1 PAPER=$OUT/paper PY=$PY \
  && echo CHECK \$(grep -c '^| ' $OUT/paper/table.md) table rows in $OUT/paper/table.md"
NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())")
if [ "$NGPU" -ge 2 ]; then
  row "torchrun 2 GPUs, 1 step" 90 bash -c "$PY -m torch.distributed.run --standalone --nproc_per_node 2 train.py \
    --steps 1 --sft-steps 0 $TRAIN --out $OUT/ddp && $PY $OUT/summary.py $OUT/ddp"
else
  printf '%s\t%s\t%s\t%s\n' "torchrun 2 GPUs, 1 step" "skipped" 0 "one GPU only" >>"$ROWS"
fi

echo
awk -F'\t' 'BEGIN { printf "%-26s %-10s %6s  %s\n", "check", "status", "s", "result" }
            { printf "%-26s %-10s %6s  %s\n", $1, $2, $3, $4 }' "$ROWS"
echo "logs: $OUT"
exit $FAILED
