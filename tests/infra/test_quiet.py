"""No alarming noise a user cannot act on: bitsandbytes stays unimported without 4-bit layers, and our
calls raise no deprecation FutureWarning (a fresh process, so earlier imports cannot hide it)."""
import subprocess
import sys

from conftest import ROOT

SNIPPET = """
import sys, warnings
warnings.simplefilter("error", FutureWarning)
from infra import models
from transformers import AutoModelForCausalLM, Qwen2Config
cfg = Qwen2Config(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=2)
policy = models.add_role_adapters(AutoModelForCausalLM.from_config(cfg), ["planner", "coder"], 4, 8)
print("bnb imported:", "bitsandbytes" in sys.modules)
print("--- now 4-bit", file=sys.stderr, flush=True)
from peft.import_utils import is_bnb_4bit_available
print("4-bit still available to peft:", is_bnb_4bit_available())
"""


def test_fp32_policy_imports_no_bitsandbytes_and_warns_nothing():
    """Catches: peft imported with bitsandbytes visible (its CPU backend logs "Failed to load CPU
    gemm_4bit_forward"), the FutureWarning of a deprecated transformers name, and a hiding that
    outlives the call (peft's cached check would then refuse 4-bit models in the same process)."""
    p = subprocess.run([sys.executable, "-c", SNIPPET], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == ["bnb imported: False", "4-bit still available to peft: True"]
    assert "gemm_4bit" not in p.stderr.split("--- now 4-bit")[0]
