"""Per-layer patterns and recurrent state, read from what a config says (part of the config boundary).

Hybrid models name their layer pattern in several ways, and their state mixers by their fields, not by a family
name. transformers 5.24 turns every one of them into `layer_types` and picks the cache layer per type
(`cache_utils.py`: linear_attention / conv -> LinearAttentionLayer, hybrid -> LinearAttentionAndFullAttentionLayer,
indexed_attention -> DynamicIndexedLayer, moe / mlp -> DummyLayer); kvplan reads the same patterns:

- `layer_types` (Qwen3.5, OLMo-Hybrid, Kimi-Linear, DeepSeek-V3.2, ...),
- `layers_block_type` (Nemotron-H, Zamba2),
- `hybrid_override_pattern` (Nemotron-H checkpoints: M mamba, * attention, - MLP, E MoE),

and sizes a state layer from the fields its mixer has: gated DeltaNet / KDA (`linear_num_*`), Mamba-2
(`mamba_*` heads and state), LFM2's short convolution (`conv_L_cache`).
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError, UnsupportedArchitectureError, shown
from ..model.layers import StateSpec
from .reader import ConfigReader, check_float

# NemotronHConfig: "M" Mamba-2, "*" attention, "-" MLP, "E" MoE (the published 56B: 118 characters).
HYBRID_CODES = {"M": "mamba", "*": "full_attention", "-": "mlp", "E": "moe"}
# layers_block_type words as transformers' config classes write them, in kvplan's layer types.
BLOCK_TYPES = {"mamba": "mamba", "linear_attention": "mamba", "attention": "full_attention",
               "full_attention": "full_attention", "mlp": "mlp", "moe": "moe", "hybrid": "hybrid"}
STATE_TYPES = frozenset({"linear_attention", "mamba", "conv"})


def _has(r: ConfigReader, key: str) -> bool:
    """A pattern field counts where the family's class has it: LlamaConfig ignores a stray hybrid_override_pattern
    (a warning names it), NemotronHConfig converts it into its layers_block_type."""
    if r.class_keys is None or key in r.class_keys:
        return True
    return key == "hybrid_override_pattern" and "layers_block_type" in r.class_keys


def pattern_types(r: ConfigReader) -> list[str] | None:
    """The per-layer types a pattern field spells out, or None when the config has none of them."""
    blocks = r.get("layers_block_type") if _has(r, "layers_block_type") else None
    if isinstance(blocks, list) and blocks:
        return [_block_type(b) for b in blocks]
    blocks = r.get("block_configs") if _has(r, "block_configs") else None
    if isinstance(blocks, list) and blocks:
        return [_nas_type(b) for b in blocks]
    pattern = r.get("hybrid_override_pattern") if _has(r, "hybrid_override_pattern") else None
    if isinstance(pattern, str) and pattern:
        unknown = sorted(set(pattern) - set(HYBRID_CODES))
        if unknown:
            raise UnsupportedArchitectureError(f"hybrid_override_pattern has code(s) {', '.join(unknown)} kvplan "
                                               "does not know (M, *, -, E): open an issue with the model id")
        return [HYBRID_CODES[c] for c in pattern]
    return None


def nas_attention(block: Any) -> dict:
    """Llama-Nemotron (DeciLM NAS) `block_configs[i].attention`: a dict with n_heads_in_group, no_op, ..."""
    if not isinstance(block, dict) or not isinstance(block.get("attention"), dict):
        raise ConfigError("config field 'block_configs' must hold one {attention, ffn} object per layer: fix the "
                          "config.json", field="block_configs")
    return block["attention"]


def _nas_type(block: Any) -> str:
    """DeciLM: a block whose attention is `no_op` or `replace_with_linear` caches nothing (Super-49B: 31 of 80)."""
    attention = nas_attention(block)
    if attention.get("no_op") or attention.get("replace_with_linear"):
        return "mlp"
    return "sliding_attention" if attention.get("window_length") else "full_attention"


def _block_type(value: Any) -> str:
    if not isinstance(value, str) or value not in BLOCK_TYPES:
        raise UnsupportedArchitectureError(f"layers_block_type entry {shown(value)} is not one kvplan knows "
                                           f"({', '.join(sorted(BLOCK_TYPES))}): open an issue with the model id")
    return BLOCK_TYPES[value]


def state_spec(r: ConfigReader, layer_type: str) -> StateSpec:
    """The constant per-sequence state of a linear-attention / SSM / conv layer, from its mixer's fields."""
    if r.get("linear_num_value_heads") is not None or r.get("linear_num_heads") is not None:
        return _deltanet(r)
    if _first(r, MAMBA_HEADS) is not None and _first(r, MAMBA_GROUPS) is not None:
        return _mamba2(r)
    if r.get("mamba_expand") is not None and r.get("mamba_d_state") is not None:
        return _mamba1(r)
    if r.get("cca_time0") is not None:
        return _cca(r)
    if r.family == "minimax" and layer_type == "linear_attention":
        return _lightning(r)
    if r.get("conv_L_cache") is not None:
        # LFM2 short convolution: conv state [B, hidden, L_cache], no recurrent state
        hidden = r.hidden_size()
        return StateSpec(conv_shape=(hidden, r.req_int("conv_L_cache")), recurrent_shape=(), mixer="short_conv")
    raise UnsupportedArchitectureError(
        f"model_type {r.model_type!r} has {layer_type} layers whose state kvplan cannot size from its fields "
        "(no linear_num_* / mamba_* heads / conv_L_cache): open an issue with the model id")


def _cca(r: ConfigReader) -> StateSpec:
    """ZAYA's compressed convolutional attention (transformers 5.24 modeling_zaya.py, ZayaCCAProjection), beside
    its KV cache: a conv state over the q and k channels [(heads + kv_heads) x head_dim, (cca_time0 - 1) +
    (cca_time1 - 1)] and the previous token's delayed half-values [kv_heads x head_dim / 2], both in the model
    dtype. ZAYA defaults: (8 + 2) x 128 = 1,280 x 2 and 128 values per layer and sequence."""
    heads, head_dim = r.num_heads(), r.req_int("head_dim")
    kv = r.req_int("num_key_value_heads")
    kernel = (r.req_int("cca_time0") - 1) + (r.req_int("cca_time1") - 1)
    return StateSpec(conv_shape=((heads + kv) * head_dim, kernel), recurrent_shape=(kv * head_dim // 2,),
                     mixer="cca", recurrent_fp32=False)


def mlstm_layers(r: ConfigReader, n: int) -> list[tuple]:
    """xLSTM (transformers 5.24 modeling_xlstm.py, xLSTMCache): per layer C [heads, qk_head_dim, v_head_dim],
    n [heads, qk_head_dim] and m [heads, 1], all in the model dtype, plus one int64 seqlen_offset for the cache.
    qk_dim = hidden x qk_dim_factor rounded up to 64 (xLSTMConfig.qk_dim). xLSTM-7B defaults: 8 heads, 256 x 512:
    8 x (256 x 512 + 256 + 1) = 1,050,632 values per layer."""
    heads, hidden = r.num_heads(), r.hidden_size()
    qk = _round_up(hidden * _factor(r, "qk_dim_factor"), 64) // heads
    v = _round_up(hidden * _factor(r, "v_dim_factor"), 64) // heads
    spec = StateSpec(conv_shape=(), recurrent_shape=(heads, qk * v + qk + 1), mixer="mlstm", recurrent_fp32=False)
    first = StateSpec(spec.conv_shape, spec.recurrent_shape, spec.mixer, recurrent_fp32=False, counter=True)
    return [(first,)] + [(spec,)] * (n - 1)


def _factor(r: ConfigReader, key: str) -> float:
    r.used[key] = check_float(key, r.get(key), minimum=1e-3, maximum=64)
    return r.used[key]


def _round_up(x: float, multiple: int) -> int:
    return int((x + multiple - 1) // multiple * multiple)


def _lightning(r: ConfigReader) -> StateSpec:
    """MiniMax-01 lightning attention (transformers 5.24 modeling_minimax.py, MiniMaxLightningAttention): one
    K^T V state [heads, head_dim, head_dim] per sequence in the model dtype (zeros(..., dtype=value_states.dtype)),
    no conv. Default MiniMaxConfig: 32 heads x 128 x 128 x 2 B = 1,048,576 B per layer."""
    heads = r.num_heads()
    head_dim = r.opt_int("head_dim") or r.hidden_size() // heads
    return StateSpec(conv_shape=(), recurrent_shape=(heads, head_dim, head_dim), mixer="lightning",
                     recurrent_fp32=False)


def _deltanet(r: ConfigReader) -> StateSpec:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5, OLMo-Hybrid) and KDA (Kimi-Linear): conv over q, k and v channels,
    recurrent state [v_heads, k_dim, v_dim]. Qwen3.5-9B-like: 16 k-heads x 128, 32 v-heads x 128 -> conv 8,192 x 4."""
    same_heads = r.get("linear_num_heads")
    k_heads = r.req_int("linear_num_key_heads") if same_heads is None else r.req_int("linear_num_heads")
    v_heads = r.req_int("linear_num_value_heads") if same_heads is None else k_heads
    same_dim = r.get("linear_head_dim")
    k_dim = r.req_int("linear_key_head_dim") if same_dim is None else r.req_int("linear_head_dim")
    v_dim = r.req_int("linear_value_head_dim") if same_dim is None else k_dim
    kernel = r.req_int("linear_conv_kernel_dim")
    mixer = "kda" if same_heads is not None else "gated_deltanet"
    # vllm 0.19-0.33 model_executor/models/config.py `Qwen3_5ForConditionalGenerationConfig`: a Qwen3.5 config's
    # mamba_ssm_dtype becomes the engine's SSM cache dtype (float32 in every published Qwen3.5 / 3.6 config), so
    # vLLM's recurrent state is float32 where the conv state stays in the model dtype
    if r.model_type.startswith("qwen3_5") and r.get("mamba_ssm_dtype") in ("float32", "float16", "bfloat16"):
        r.used["engine_ssm_dtype"] = r.get("mamba_ssm_dtype")
    return StateSpec(conv_shape=(2 * k_heads * k_dim + v_heads * v_dim, kernel),
                     recurrent_shape=(v_heads, k_dim, v_dim), mixer=mixer)


MAMBA_HEADS = ("mamba_num_heads", "mamba_n_heads", "n_mamba_heads")
MAMBA_HEAD_DIM = ("mamba_head_dim", "mamba_d_head", "mamba_headdim")
MAMBA_STATE = ("ssm_state_size", "mamba_d_state")
MAMBA_GROUPS = ("n_groups", "mamba_n_groups", "mamba_ngroups")
MAMBA_KERNEL = ("conv_kernel", "mamba_d_conv")


def _mamba2(r: ConfigReader) -> StateSpec:
    """Mamba-2 (Nemotron-H, Falcon-H1, Bamba, Granite-4 hybrids, Zamba2): conv [I + 2·G·N, kernel] and SSM state
    [heads, head_dim, N]. Nemotron-H-8B: 128 heads x 64, G 8, N 128 -> conv 8,192 + 2,048 = 10,240 x 4."""
    heads = _need(r, MAMBA_HEADS)
    inner = _inner(r, heads)
    head_dim = _first(r, MAMBA_HEAD_DIM)
    head_dim = inner // heads if head_dim in (None, "auto") else r.int_(*_found(r, MAMBA_HEAD_DIM))
    state, groups, kernel = _need(r, MAMBA_STATE), _need(r, MAMBA_GROUPS), _need(r, MAMBA_KERNEL)
    # the SSM cache dtype a Nemotron-H config asks of vLLM (NVIDIA-Nemotron-3-Nano-30B-A3B: "float32"); vLLM's
    # planner applies its own default when it is absent (planning/engines/vllm_kv.py `vllm_ssm_dtype`)
    if r.get("mamba_ssm_cache_dtype") in ("float32", "float16", "bfloat16"):
        r.used["mamba_ssm_cache_dtype"] = r.get("mamba_ssm_cache_dtype")
    return StateSpec(conv_shape=(inner + 2 * groups * state, kernel), recurrent_shape=(heads, head_dim, state),
                     mixer="mamba2", groups=groups, group_state=state)


def _mamba1(r: ConfigReader) -> StateSpec:
    """Mamba-1 mixers of hybrids (Zamba: split into n_mamba_heads, which leaves the state's size alone): conv
    [expand x hidden, d_conv] in the model dtype, SSM state [expand x hidden, d_state] in float32. Zamba-7B
    defaults: 7,424 x 4 x 2 B + 7,424 x 16 x 4 B = 534,528 B per layer and sequence."""
    inner = r.req_int("mamba_expand") * r.hidden_size()
    return StateSpec(conv_shape=(inner, r.req_int("mamba_d_conv")), recurrent_shape=(inner, r.req_int("mamba_d_state")),
                     mixer="mamba")


def _inner(r: ConfigReader, heads: int) -> int:
    """The SSM's inner width: mamba_d_ssm (Falcon-H1), else heads x head_dim, else expand x hidden."""
    if r.get("mamba_d_ssm") is not None:
        return r.req_int("mamba_d_ssm")
    head_dim = _first(r, MAMBA_HEAD_DIM)
    if head_dim not in (None, "auto"):
        return heads * r.int_(*_found(r, MAMBA_HEAD_DIM))
    expand = _first(r, ("mamba_expand", "expand"))
    if expand is None:
        raise ConfigError("config gives no Mamba-2 inner width (mamba_d_ssm / mamba_head_dim / mamba_expand): "
                          "fix the config.json", field="mamba_head_dim")
    return r.int_(*_found(r, ("mamba_expand", "expand"))) * r.hidden_size()


def _first(r: ConfigReader, keys: tuple[str, ...]):
    found = r.first(keys)
    return None if found is None else found[1]


def _found(r: ConfigReader, keys: tuple[str, ...]) -> tuple[str, Any]:
    found = r.first(keys)
    assert found is not None
    return found


def _need(r: ConfigReader, keys: tuple[str, ...]) -> int:
    found = r.first(keys)
    if found is None:
        raise ConfigError(f"config has no {' / '.join(keys)}, which sizes the Mamba-2 state: fix the config.json",
                          field=keys[0])
    return r.int_(*found)
