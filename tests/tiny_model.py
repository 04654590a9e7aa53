"""`python tests/tiny_model.py train.py|eval.py <flags>`: that script run as a program, its base model replaced
by conftest's tiny random Qwen2 (seconds instead of minutes): how CI runs `make paper`'s small mode
(TRAIN=... EVAL=...) end to end. The sandbox is the real one; the programs are noise."""
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # conftest
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from conftest import tiny_base  # noqa: E402
from infra import models

torch.set_num_threads(1)
tok = models.load_tokenizer(str(models.embedded_folder()))
models.load_base = lambda *a, **k: (tiny_base(tok), tok)
script, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(script, run_name="__main__")
