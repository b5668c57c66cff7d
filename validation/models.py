"""The models the harness runs: a config dict built once, fed to kvplan and to transformers alike.

A `Recipe` names a bundled config (or carries an inline one) and how to shrink it. `Recipe.text_dict()`
returns the text model's config dict (multimodal wrappers unwrapped, `model_type` set): that same dict goes to
`kvplan.parse_config` and to `transformers.CONFIG_MAPPING[model_type].from_dict`, so both see identical values.

Shrinking (the cpu suite) keeps what sizes the cache - layer count, attention heads, KV heads, head_dim,
windows, MLA latent and RoPE widths, SSM state widths where they do not follow hidden_size - and shrinks what
only costs compute: hidden_size (head_dim then stays explicit, or hidden / heads would change it),
intermediate sizes, vocabulary, the number of routed experts, DeepSeek's q_lora_rank. Families whose
attention derives head_dim from hidden_size (GPT-2, GPT-J, GPT-NeoX, GPT-BigCode, Falcon, Jamba) keep
head_dim by shrinking the head count instead, and say so in their variant label; so do the SSM families,
whose state width follows hidden_size.

Models never run remote code: the config class is the one transformers maps to the model_type.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from kvplan.config.reader import text_config
from kvplan.sources.files import read_config_file
from kvplan.sources.library import bundled_index

INTERMEDIATE_KEYS = ("intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim", "intermediate_size_mlp")
MOE_INTERMEDIATE_KEYS = ("moe_intermediate_size", "shared_expert_intermediate_size")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "num_experts_per_token")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
HEAD_KEYS = ("num_attention_heads", "n_head")

# Families whose modeling code reads an explicit `head_dim` (so hidden_size can shrink on its own).
EXPLICIT_HEAD_DIM = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "qwen3_next", "gemma", "gemma2",
                     "gemma3_text", "olmo2", "phi3", "phi", "starcoder2", "gpt_oss", "llama4_text"}
MLA = {"deepseek_v2", "deepseek_v3"}
SSM = {"mamba", "falcon_mamba"}
# Families transformers 5.24 lacks, checked as the native family with the same architecture (as tests do).
SAME_ARCHITECTURE = {"kimi_k2": "deepseek_v3"}


@dataclass(frozen=True)
class Recipe:
    """One model the harness builds. `key` is the short label used in case ids."""

    key: str
    source: str                          # bundled Hub id, or "inline"
    variant: str = "real"                # "real", "shrunk", "shrunk, heads 2 (real 16)", "shrunk, window 32 ..."
    inline: dict | None = None           # the config itself, for tiny smoke models
    shrink: bool = False
    heads: int | None = None             # shrink the head count to this (families deriving head_dim)
    kv_heads: int | None = None
    changes: dict = field(default_factory=dict)  # applied last (window variants, family quirks)
    hidden: int = 64

    def text_dict(self, keep_quantization: bool = False) -> dict[str, Any]:
        """The text model's config dict, shrunk as the recipe says. Built fresh on every call.

        `quantization_config` is dropped unless asked for: `from_config` builds plain weights in the dtype it is
        given whatever the checkpoint's quantization (DeepSeek-V3's fp8 blocks, gpt-oss's mxfp4), so kvplan must
        price them plain too. It never changes the cache (transformers caches the activation dtype).
        """
        if self.inline is not None:
            data = copy.deepcopy(self.inline)
        else:
            data = read_config_file(bundled_index()[self.source.lower()])
        text, model_type = text_config(data)
        text = json.loads(json.dumps(text))
        if not keep_quantization:
            text.pop("quantization_config", None)
        text["model_type"] = SAME_ARCHITECTURE.get(model_type, model_type)
        if self.shrink:
            text = shrink_text(text, hidden=self.hidden, heads=self.heads, kv_heads=self.kv_heads)
        text.update(copy.deepcopy(self.changes))
        return text

    @property
    def model_type(self) -> str:
        return self.text_dict()["model_type"]


def _first(text: dict, keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if k in text), None)


def real_head_dim(text: dict) -> int | None:
    """head_dim as the unshrunk config gives it (explicit, else hidden / heads)."""
    if isinstance(text.get("head_dim"), int):
        return text["head_dim"]
    hk, nk = _first(text, HIDDEN_KEYS), _first(text, HEAD_KEYS)
    if hk and nk and text.get(nk):
        return text[hk] // text[nk]
    return None


def with_class_defaults(text: dict) -> dict:
    """The dict with the sizes the shrink touches made explicit, from transformers' config class defaults
    (gemma-3-4b's text_config omits hidden_size 2560: shrinking needs to see it). Only the class's own fields
    (never aliases or properties), absent from the dict, whose concept has no key in the dict yet, are added."""
    from transformers import CONFIG_MAPPING

    mt = text["model_type"]
    if mt not in CONFIG_MAPPING:
        return dict(text)
    cls = CONFIG_MAPPING[mt]
    default = cls()
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    t = dict(text)
    for group in (HIDDEN_KEYS, HEAD_KEYS, ("num_key_value_heads",), ("head_dim",), ("vocab_size",),
                  *((k,) for k in INTERMEDIATE_KEYS + MOE_INTERMEDIATE_KEYS), EXPERT_KEYS, TOP_K_KEYS):
        if any(k in t for k in group):
            continue
        for key in group:
            value = getattr(default, key, None) if key in fields else None   # real fields, never properties
            if isinstance(value, int) and not isinstance(value, bool):
                t[key] = value
                break
    return t


def shrink_text(text: dict, *, hidden: int = 64, heads: int | None = None, kv_heads: int | None = None) -> dict:
    """A shrunk copy of a text config dict (see the module docstring for what is kept)."""
    t = with_class_defaults(text)
    mt = t["model_type"]
    hk, nk = _first(t, HIDDEN_KEYS), _first(t, HEAD_KEYS)
    head_dim = real_head_dim(t)
    if heads is not None and nk:
        t[nk] = heads
    if kv_heads is not None:
        for key in ("num_key_value_heads", "num_kv_heads", "n_head_kv"):
            if key in t:
                t[key] = kv_heads
    n_heads = t.get(nk) if nk else None
    if mt in EXPLICIT_HEAD_DIM and head_dim:
        if hk:
            t[hk] = n_heads * max(1, -(-hidden // n_heads)) if n_heads else hidden
        t["head_dim"] = head_dim
    elif mt in MLA:
        t[nk] = min(t.get(nk) or 16, 16)           # MLA caches one latent per token whatever the head count
        t["num_key_value_heads"] = t[nk]
        t[hk] = t[nk] * max(1, -(-hidden // t[nk]))
        t["q_lora_rank"] = 32
        t["n_group"], t["topk_group"] = 1, 1        # group-limited routing over the (now 4) experts
    elif mt in SSM:
        expand = (t.get("intermediate_size") or 2 * t[hk]) // t[hk]
        t[hk] = hidden
        t["intermediate_size"] = expand * hidden
        if isinstance(t.get("time_step_rank"), int):
            t["time_step_rank"] = 8
    elif hk and heads is not None and head_dim:
        t[hk] = heads * head_dim                   # head_dim derived from hidden / heads: keep it real
        if isinstance(t.get("mamba_dt_rank"), int):
            t["mamba_dt_rank"] = 32                # Jamba: compute only
    for key in INTERMEDIATE_KEYS:
        if mt in SSM and key == "intermediate_size":
            continue
        if key in t or (key == "n_inner" and mt == "gpt2"):
            t[key] = 64
    for key in MOE_INTERMEDIATE_KEYS:
        if isinstance(t.get(key), int):
            t[key] = 32
    t["vocab_size"] = 256
    for key in EXPERT_KEYS:
        if isinstance(t.get(key), int) and t[key] > 4:
            t[key] = 4
    for key in TOP_K_KEYS:
        if isinstance(t.get(key), int):
            t[key] = min(t[key], 2)
    if "n_group" in t:
        t["n_group"], t["topk_group"] = 1, 1
    for key, value in (("bos_token_id", 1), ("eos_token_id", 2), ("pad_token_id", 0)):
        if isinstance(t.get(key), list):
            t[key] = [value]
        elif t.get(key) is not None:
            t[key] = value
    return t


# ---------------------------------------------------------------- building


def hf_config(text: dict):
    """transformers' own config class for the model_type, from the dict (never remote code)."""
    from transformers import CONFIG_MAPPING

    mt = text["model_type"]
    if mt not in CONFIG_MAPPING:
        raise KeyError(f"transformers has no native {mt!r} model (the harness never runs remote code)")
    return CONFIG_MAPPING[mt].from_dict(dict(text))


def build_model(text: dict, dtype, device, *, seed: int = 0, pretrained_path: str | None = None):
    """A causal LM with random weights built from the config (or real weights from a local folder)."""
    import torch
    from transformers import AutoModelForCausalLM

    if pretrained_path is not None:
        model = AutoModelForCausalLM.from_pretrained(pretrained_path, dtype=dtype, trust_remote_code=False,
                                                     local_files_only=True, device_map=str(device))
        return model.eval()
    cfg = hf_config(text)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, trust_remote_code=False)
    return model.eval()


def local_weights(source: str) -> str | None:
    """The local snapshot folder of a Hub model when its weights are already on disk (no download)."""
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(source, local_files_only=True,
                                 allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt"])
    except Exception:  # noqa: BLE001 - absent, gated or offline: random weights instead
        return None
    from pathlib import Path

    folder = Path(path)
    return str(folder) if any(folder.glob("*.safetensors")) else None
