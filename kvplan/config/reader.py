"""The config boundary's one reader: typed access to a (text) config.json with transformers' class defaults.

`layout` builds the cache layout and `arch` the weight shape from the same `ConfigReader`, in one pass
(`parse.parse_config`), so a value is read once, checked once and recorded once in `ModelSpec.fields`, and a CLI
override (`--num-layers`, `--kv-heads` ...) changes the cache and the weights alike. The field aliases here are the
names every module of `kvplan.config` reads, the only folder that knows Hugging Face field names. Nothing here
imports transformers or runs code the config names (`auto_map` is ignored).
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..dtypes import FLOAT32, DType, resolve_dtype
from ..errors import ConfigError, WorkloadError, shown
from ..sources.files import check_text

# Field aliases, first match wins (vLLM's `get_total_num_kv_heads` order for KV heads).
LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "attention_heads")
KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "n_embed", "model_dim", "emb_dim")
HEAD_DIM_KEYS = ("head_dim", "hidden_size_per_head", "attention_head_dim", "d_kv", "kv_channels")
VOCAB_KEYS = ("vocab_size", "padded_vocab_size")
INTERMEDIATE_KEYS = ("intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim", "ff_intermediate_size", "dim_ff")
EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts", "num_experts_routed")
DTYPE_KEYS = ("dtype", "torch_dtype")
MTP_KEYS = ("num_nextn_predict_layers", "num_mtp_layers", "mtp_num_hidden_layers")
# families whose checkpoint carries MTP layers past the model's own (DeepSeek-V3 / R1 `model.layers.61`, Qwen3.5
# `mtp.layers.0`): transformers builds none of them; vLLM 0.33 loads them only for --speculative-config mtp
# (deepseek_v2.py load_weights: `if spec_layer is not None: continue  # skip spec decode layers for main model`)
# and drafts with them as config/speculative.py maps each family: deepseek_v3 / deepseek_v32 / glm_moe_dsa ->
# deepseek_mtp (DeepSeekMTPModel, DeepseekV32MTPModel), qwen3_next -> qwen3_next_mtp, qwen3_5 -> qwen3_5_mtp.
MTP_FAMILIES = frozenset({"deepseek_v3", "deepseek_v32", "glm_moe_dsa", "qwen3_next", "qwen3_5_text",
                          "qwen3_5_moe_text"})
# BART-style encoder-decoder configs (BART, mBART, Marian, Pegasus, PLBart, MVP, BlenderbotSmall, BigBirdPegasus,
# Whisper, TrOCR) describe the decoder under decoder_* keys, and their causal LM (BartForCausalLM ...) is that
# decoder alone. These win over the generic aliases: distil-whisper-large-v3's config.json says num_hidden_layers
# 32 (the encoder) beside decoder_layers 2, and transformers' WhisperForCausalLM builds 2 decoder layers.
DECODER_KEYS = {"num_hidden_layers": "decoder_layers", "num_attention_heads": "decoder_attention_heads",
                "intermediate_size": "decoder_ffn_dim", "max_position_embeddings": "max_target_positions"}
MAX_LAYERS = 10_000  # the deepest published decoders have ~200 layers (Llama-3.1-405B: 126)
# Every other size a config gives (heads, head_dim, hidden, vocab, window, experts ...) stays under 2**40. The largest
# published ones are near 2**18 (Gemma 3's vocab_size 262,144), so no real config is refused; and a formula
# multiplies at most a handful of them, so even 2**40 x 2**40 x 2**40 x 2**40 x 2 B (2**161 bytes) stays far inside
# a float's 2**1024, where head_dim 10**400 raised OverflowError as soon as a figure was divided or printed in GiB.
MAX_SIZE = 1 << 40
MAX_NAME_CHARS = 100  # a model_type, a layer kind: the longest transformers ships is under 40 characters

# Wrappers whose language model sits in a nested config, and the text model_type when it is not given.
TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config", "text_model_config")
# Sub-configs of towers kvplan's weights leave out (Phi-4-multimodal and GIT keep their language model flat).
TOWER_CONFIG_KEYS = ("vision_config", "audio_config", "speech_config", "vision_tower_config")
TEXT_MODEL_TYPES = {"gemma3": "gemma3_text", "llama4": "llama4_text", "mistral3": "mistral", "llava": "llama"}

# Families checked as the native family whose architecture they share. Kimi-K2 ships DeepseekV3ForCausalLM.
# Qwen2.5-VL's language model (Qwen2_5_VLTextModel, transformers 5.24 ships it inside the image-text
# Qwen2_5_VLForConditionalGeneration, no causal LM) is Qwen2's decoder: q/k/v with bias, o without, a gated MLP,
# RMSNorm, the same max_window_layers rule; tests/test_unread.py builds it on meta and equals kvplan's count
# (7,615,616,512 language model + 676,550,144 vision tower for Qwen2.5-VL-7B) and its cache.
# Qwen3-VL's language model is Qwen3's decoder (Qwen3-MoE's for the A3B / A22B models): modeling_qwen3_vl.py builds
# Qwen3VLTextDecoderLayer from the same q/k-normed attention and MLP, and caches the same DynamicCache; GLM-4.6V's
# (glm4v_moe_text) is GLM-4.5's, fp32 router and shared expert included (modeling_glm4v_moe.py). tests/
# test_multimodal.py proves the bundled configs' language-model parameters and caches equal transformers'.
SAME_ARCHITECTURE = {"kimi_k2": "deepseek_v3", "qwen2_5_vl": "qwen2", "qwen3_vl_text": "qwen3",
                     "qwen3_vl_moe_text": "qwen3_moe", "glm4v_moe_text": "glm4_moe"}

# Defaults transformers' config classes apply when a key is ABSENT from config.json (an explicit null
# stays null), generated from transformers by tools/gen_family_defaults.py. Mistral-7B-v0.1 without
# `sliding_window` gets 4096 from MistralConfig, so every layer becomes a 4096-token window.
_GENERATED = json.loads((Path(__file__).parent.parent / "data" / "family_defaults.json").read_text())
# Values set outside the dataclass fields (kwargs read in __post_init__), and families transformers lacks.
_EXTRA_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"sliding_window_pattern": 6},
    "kimi_k2": {"kv_lora_rank": 512, "qk_rope_head_dim": 64},
    "chatglm": {"multi_query_attention": False},
    # Qwen2_5_VLTextConfig's dataclass defaults (a flat Qwen2.5-VL config.json fills its text_config from the top
    # level, absent keys from these); the ones that differ from Qwen2Config's: 80 layers, max_window_layers 80
    "qwen2_5_vl": {"hidden_size": 8192, "intermediate_size": 29568, "max_position_embeddings": 32768,
                   "max_window_layers": 80, "num_attention_heads": 64, "num_hidden_layers": 80,
                   "num_key_value_heads": 8, "sliding_window": 4096, "use_sliding_window": False,
                   "vocab_size": 152064},
}
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    mt: {**_GENERATED.get(mt, {}), **_EXTRA_DEFAULTS.get(mt, {})}
    for mt in set(_GENERATED) | set(_EXTRA_DEFAULTS) if not mt.startswith("_")
}

# Weight-only class defaults the generated table leaves out, from transformers 5.24's config dataclasses;
# tests/test_weights.py checks each against transformers. Pythia's config.json has no attention_bias:
# GPTNeoXConfig's default True puts a bias on every attention projection.
WEIGHT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"attention_bias": False, "mlp_bias": False},
    "qwen3": {"attention_bias": False},
    "qwen3_moe": {"attention_bias": False, "decoder_sparse_step": 1},
    "qwen3_next": {"attention_bias": False, "decoder_sparse_step": 1},
    "gemma": {"attention_bias": False},
    "gemma2": {"attention_bias": False},
    "gemma3_text": {"attention_bias": False},
    "olmo2": {"attention_bias": False},
    "phi": {"qk_layernorm": False},
    "gpt_neox": {"attention_bias": True},
    "falcon": {"bias": False, "parallel_attn": True},
    "starcoder2": {"use_bias": True},
    "deepseek_v2": {"attention_bias": False, "mlp_bias": False},
    "deepseek_v3": {"attention_bias": False},
    # DeepseekV4Config (configuration_deepseek_v4.py): the sizes its weights read
    "deepseek_v4": {"hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64, "head_dim": 512,
                    "q_lora_rank": 1024, "o_groups": 8, "o_lora_rank": 1024, "index_n_heads": 64,
                    "index_head_dim": 128, "hc_mult": 4, "moe_intermediate_size": 2048, "n_routed_experts": 256,
                    "num_experts_per_tok": 6, "n_shared_experts": 1, "vocab_size": 129280, "sliding_window": 128,
                    "mlp_bias": False, "tie_word_embeddings": False},
    "gpt_oss": {"attention_bias": True},
    "llama4_text": {"attention_bias": False, "interleave_moe_layer_step": 1},
    "mamba": {"use_bias": False, "use_conv_bias": True},
    "falcon_mamba": {"use_bias": False, "use_conv_bias": True},
    "jamba": {"mamba_conv_bias": True, "mamba_proj_bias": False},
    "mamba2": {"use_bias": False, "use_conv_bias": True},
    # NemotronHConfig's class defaults (transformers 5.24 configuration_nemotron_h.py): the published 56B gives
    # attention_head_dim, which the class does not read, and no head_dim
    "nemotron_h": {"head_dim": 128, "use_bias": False, "use_conv_bias": True, "mlp_bias": False,
                   "intermediate_size": 21504, "n_routed_experts": 8, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 7688, "moe_shared_expert_intermediate_size": 7688,
                   "tie_word_embeddings": False},
    # Gemma4TextConfig / Gemma3nTextConfig (configuration_gemma4.py, configuration_gemma3n.py)
    "gemma4_text": {"head_dim": 256, "num_key_value_heads": 4, "intermediate_size": 9216, "attention_bias": False,
                    "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 262_144,
                    "attention_k_eq_v": False, "num_kv_shared_layers": 0, "enable_moe_block": False,
                    "use_double_wide_mlp": False, "tie_word_embeddings": True},
    "gemma3n_text": {"head_dim": 256, "num_key_value_heads": 2, "intermediate_size": 16_384, "attention_bias": False,
                     "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 262_144,
                     "altup_num_inputs": 4, "laurel_rank": 64, "num_kv_shared_layers": 15,
                     "tie_word_embeddings": True},
    # DoryConfig, HrmTextConfig (configuration_dory.py, configuration_hrm_text.py)
    "dory": {"head_dim": 256, "num_key_value_heads": 4, "intermediate_size": 7168, "vocab_size": 131_072,
             "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False},
    "zamba": {"mamba_conv_bias": True, "mamba_proj_bias": False, "tie_word_embeddings": True},
    "zamba2": {"add_bias_linear": False, "num_mem_blocks": 1, "adapter_rank": 128,
               "use_shared_attention_adapter": False, "tie_word_embeddings": True},
    "xlm": {"asm": False, "n_langs": 1, "use_lang_emb": True, "max_position_embeddings": 512,
            "tie_word_embeddings": True},
    # InklingTextConfig, Inkling2TextConfig, Inkling2LoopTextConfig (configuration_inkling*.py)
    "inkling_text": {"d_rel": 16, "rel_extent": 1024, "intermediate_size": 24_576, "moe_intermediate_size": 3072,
                     "n_shared_experts": 2, "n_routed_experts": 256, "num_experts_per_tok": 6,
                     "swa_num_attention_heads": 64},
    "inkling2_text": {"d_rel": 16, "rel_extent": 1024, "unpadded_vocab_size": 200_058, "n_routed_experts": 384,
                      "moe_intermediate_size": 2304, "num_experts_per_tok": 8, "swa_num_attention_heads": 48},
    "inkling2_loop_text": {"d_rel": 16, "rel_extent": 1024, "unpadded_vocab_size": 200_058, "n_routed_experts": 128,
                           "moe_intermediate_size": 1152, "num_experts_per_tok": 8, "swa_num_attention_heads": 24,
                           "loop_layer_index_start": 6, "loop_layer_index_end": 18, "loop_num_passes": 3,
                           "loop_gate_rank": 64},
    "hrm_text": {"head_dim": 128, "intermediate_size": 4096, "attention_bias": False, "mlp_bias": False,
                 "tie_word_embeddings": False},
}


@dataclass(frozen=True)
class Overrides:
    """Values the user supplies for fields a config lacks (CLI flags `--num-layers` ... `--head-dim`)."""

    num_layers: int | None = None
    num_heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    hidden_size: int | None = None

    def __post_init__(self):
        for name in ("num_layers", "num_heads", "kv_heads", "head_dim", "hidden_size"):
            value, flag = getattr(self, name), "--" + name.replace("_", "-")
            maximum = MAX_LAYERS if name == "num_layers" else MAX_SIZE
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{flag} must be a whole number, got {shown(value)}", field=name, flag=flag)
            if not 1 <= value <= maximum:
                raise ConfigError(f"{flag} must be between 1 and {maximum:,}, got {shown(value)}",
                                  field=name, flag=flag)


def check_int(key: str, value: Any, *, minimum: int = 1, maximum: int = MAX_SIZE) -> int:
    """A config value that must be a whole number in range (2.0 is accepted as 2), or a ConfigError."""
    # `inf` and `nan` are floats too: int() of them raises, so they must be refused first
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        raise ConfigError(f"config field {key!r} must be an integer, got {shown(value)}: fix the config.json",
                          field=key)
    if value < minimum:
        raise ConfigError(f"config field {key!r} must be >= {minimum}, got {shown(value)}: fix the config.json",
                          field=key)
    if value > maximum:  # before int(): int(1e300) is exact but useless
        raise ConfigError(f"config field {key!r} must be <= {maximum:,}, got {shown(value)}: fix the config.json",
                          field=key)
    return int(value)


def check_float(key: str, value: Any, *, minimum: float, maximum: float) -> float:
    """A config value that must be a finite number in [minimum, maximum], or a ConfigError. NaN is False in every
    comparison and so passed range checks written the other way round (a RoPE factor of NaN was taken as 1.0),
    1e308 overflowed the first product it met (int(tokens x factor)), and 5e-324 is no factor either: `minimum`
    is a real lower bound, never 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"config field {key!r} must be a number, got {shown(value)}: fix the config.json", field=key)
    if not minimum <= value <= maximum:
        raise ConfigError(f"config field {key!r} must be between {minimum:g} and {maximum:g}, got {shown(value)}: "
                          "fix the config.json", field=key)
    return float(value)


def check_flag(key: str, value: Any, default: bool) -> bool:
    """A config switch: true / false, null meaning the class default, anything else a ConfigError."""
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"config field {key!r} must be true or false, got {shown(value)}: fix the config.json")
    return value


class ConfigReader:
    """One (text) config dict with its family's transformers defaults and the user's overrides.

    `used` records every value read (under the config's own key, or kvplan's concept for an override).
    """

    def __init__(self, data: Mapping[str, Any], model_type: str, overrides: Overrides | None = None):
        self.data = data
        self.model_type = model_type
        self.family = SAME_ARCHITECTURE.get(model_type, model_type)
        self.defaults = {**WEIGHT_DEFAULTS.get(self.family, {}), **FAMILY_DEFAULTS.get(self.family, {}),
                         **FAMILY_DEFAULTS.get(model_type, {})}
        self.overrides = overrides or Overrides()
        self.used: dict[str, Any] = {}
        self.class_keys: frozenset | None = None  # structural keys the family's transformers class has (None: any)
        # what each layer caches ("attn", "state:mamba2", "none", "attn+state:mamba2"), set once the cache layout
        # is read: the weights put attention only where it is (kvplan.config.traits)
        self.layer_kinds: tuple[str, ...] | None = None
        self.state_shape: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # the first state layer's
        # the decoder of a BART-style encoder-decoder config (DECODER_KEYS)
        self.decoder_layout = "decoder_layers" in data or "decoder_layers" in self.defaults

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.data:
            value = self.data[key]
            if key not in self.used and value is not None:  # read: not "unread" (kvplan.config.verified)
                self.used[key] = f"{len(value)} entries" if isinstance(value, (list, dict)) else value
            return value
        return self.defaults.get(key, default)

    def has(self, key: str) -> bool:
        return key in self.data or key in self.defaults

    def first(self, keys: tuple[str, ...]) -> tuple[str, Any] | None:
        """The first alias the config sets; only then the family defaults (older Falcon files say
        `n_head`, which must win over FalconConfig's default `num_attention_heads` of 71)."""
        if self.decoder_layout and keys and keys[0] in DECODER_KEYS:
            keys = (DECODER_KEYS[keys[0]],) + keys
        for source in (self.data, self.defaults):
            for key in keys:
                if source.get(key) is not None:
                    return key, source[key]
        return None

    def int_(self, key: str, value: Any, *, minimum: int = 1, maximum: int = MAX_SIZE) -> int:
        self.used[key] = check_int(key, value, minimum=minimum, maximum=maximum)
        return self.used[key]

    def req_int(self, key: str, *, minimum: int = 1, default: Any = None) -> int:
        """A field the family's formula cannot do without."""
        value = self.get(key, default)
        if value is None:
            raise ConfigError(f"config has no {key!r}, which sizes this model: fix the config.json", field=key)
        return self.int_(key, value, minimum=minimum)

    def opt_int(self, key: str, *, minimum: int = 1, default: Any = None) -> int | None:
        value = self.get(key, default)
        return None if value is None else self.int_(key, value, minimum=minimum)

    def need_int(self, keys: tuple[str, ...], concept: str, flag: str | None = None,
                 override: int | None = None) -> int:
        """The first alias of `concept` the config sets, or the user's override of it."""
        # one spec object per layer is built, so an absurd layer count (2**70) must stop here
        maximum = MAX_LAYERS if concept == "num_layers" else MAX_SIZE
        if override is not None:  # in range: Overrides checks itself
            self.used[concept] = override
            return override
        found = self.first(keys)
        if found is None:
            what = f"pass {flag} N" if flag else "add it to the config.json"
            raise ConfigError(f"config has no {concept} ({' / '.join(keys)}): {what}", field=concept, flag=flag)
        return self.int_(found[0], found[1], maximum=maximum)

    def flag(self, key: str, default: bool = False) -> bool:
        value = check_flag(key, self.get(key, default), default)
        self.used[key] = value
        return value

    def layer_set(self, key: str) -> set[int] | None:
        """A list of layer indices (`mlp_only_layers`, `moe_layers`), or None when absent."""
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise ConfigError(f"config field {key!r} must list layer indices, got {shown(value)}: fix the config.json")
        return {check_int(key, v, minimum=0, maximum=MAX_LAYERS) for v in value}

    def layer_period(self, what: str, num_layers: int) -> tuple[int, int]:
        """Jamba's every-Nth layer (`attn_layer_period` / `attn_layer_offset`, `expert_layer_*`): (period, offset),
        the offset below the period as JambaConfig._check_supported_offset requires, and inside the model: an
        attention offset past the last layer made every layer Mamba without a word."""
        period = self.req_int(f"{what}_layer_period")
        offset = self.req_int(f"{what}_layer_offset", minimum=0)
        if offset >= min(period, num_layers):
            raise ConfigError(f"config field '{what}_layer_offset' is {offset:,}, not below its period {period:,} and "
                              f"the {num_layers:,} layers: no layer would have it; fix the config.json",
                              field=f"{what}_layer_offset")
        return period, offset

    # the sizes every family has, with the user's overrides
    def num_layers(self) -> int:
        return self.need_int(LAYER_KEYS, "num_layers", "--num-layers", self.overrides.num_layers)

    def num_heads(self) -> int:
        return self.need_int(HEAD_KEYS, "num_heads", "--num-heads", self.overrides.num_heads)

    def hidden_size(self, flag: str = "--hidden-size") -> int:
        return self.need_int(HIDDEN_KEYS, "hidden_size", flag, self.overrides.hidden_size)


def text_config(data: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """Unwrap a multimodal config to its language model, as transformers' `get_text_config()` does.

    Returns the text dict (dtype inherited from the wrapper when absent) and its model_type.
    """
    if not isinstance(data, Mapping):
        raise ConfigError("config.json must hold a JSON object: pass the model's config.json, not a list or a value")
    check_text(data)
    top_type = data.get("model_type")
    for key in TEXT_CONFIG_KEYS:
        nested = data.get(key)
        if isinstance(nested, Mapping) and nested:
            text = dict(nested)
            for dkey in ("dtype", "torch_dtype"):
                if dkey not in text and dkey in data:
                    text[dkey] = data[dkey]
            model_type = text.get("model_type") or TEXT_MODEL_TYPES.get(str(top_type), top_type)
            return text, _model_type(model_type)
    return dict(data), _model_type(top_type)


def multimodal(data: Mapping[str, Any]) -> bool:
    """A config whose checkpoint holds more than its language model: a nested text config or a tower's config."""
    return any(isinstance(data.get(key), Mapping) and data.get(key) for key in TEXT_CONFIG_KEYS + TOWER_CONFIG_KEYS)


def _model_type(value: Any) -> str:
    if value is None:
        return "unknown"
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS:
        raise ConfigError(f"config field 'model_type' must be a short name like 'llama', got {shown(value)}: fix the "
                          "config.json")
    return value


def config_dtype(text: Mapping[str, Any]) -> DType:
    """The activation dtype a model runs (and caches) in: `dtype` or `torch_dtype`, else float32
    (what transformers' from_config uses when the config names none)."""
    for key in DTYPE_KEYS:
        value = text.get(key)
        if value is None:
            continue
        name = value if isinstance(value, str) else None if isinstance(value, (list, dict)) else str(value)
        if name is not None and len(name) <= MAX_NAME_CHARS:  # torch.bfloat16 in a dict built in Python: its str()
            with contextlib.suppress(WorkloadError):
                return resolve_dtype(name)
        raise ConfigError(f"config field {key!r} has unknown dtype {shown(value)}: pass --dtype explicitly")
    return FLOAT32
