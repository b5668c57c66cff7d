"""Config fields kvplan does not read: why each one is silent, or what its warning bounds.

`verified.unread_fields` names the structural keys of a config that kvplan neither read nor finds in the family's
transformers config class. Before it does, each such key is judged here on the config at hand:

- an alias of a size kvplan reads (mamba-2.8b-hf's `n_layer` beside `num_hidden_layers`) is silent when the two
  say the same;
- a field transformers derives from, or drops beside, a field kvplan reads is silent when the two agree (Qwen3.5's
  `full_attention_interval` beside `layer_types`, gemma-2's `sliding_window_size` beside `sliding_window`);
- a field neither transformers 5.24's modeling nor vLLM 0.33's reads for that family is silent (Nemotron-H's
  `time_step_rank`): the figures equal both whatever it says;
- anything else (a disagreement, a remote-code family's own switch) gets a warning that names the field and bounds
  what it moves, in bytes or layers.

tests/test_unread.py holds one test per field, on the bundled configs and on transformers' config class.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .reader import HEAD_KEYS, HIDDEN_KEYS, INTERMEDIATE_KEYS, KV_HEAD_KEYS, LAYER_KEYS, ConfigReader

Rule = Callable[[Mapping[str, Any], ConfigReader], "str | None"]
SILENT = None

# The aliases `reader` reads, first match wins: the others a config also sets are the same size said twice.
ALIASES = {"layers": LAYER_KEYS, "attention heads": HEAD_KEYS, "KV heads": KV_HEAD_KEYS, "hidden size": HIDDEN_KEYS,
           "intermediate size": INTERMEDIATE_KEYS}


def alias_verdict(key: str, text: Mapping[str, Any], r: ConfigReader) -> str | None:
    """None (silent) when `key` says what the alias kvplan read says, or kvplan read none of its group (an override
    such as --num-layers decided); else the warning naming both."""
    for concept, keys in ALIASES.items():
        read = next((k for k in keys if k in r.used and k != key), None)
        if key not in keys or read is None:
            continue
        if text.get(key) == r.used[read]:
            return SILENT
        # glm-4-9b-chat says num_layers 40 and num_hidden_layers 40: silent; 48 against 64 would be named here
        moves = ("the KV cache and the layers' weights scale with it" if concept == "layers" else
                 "the KV cache and the weights that depend on it would differ")
        return (f"config fields {read} ({r.used[read]!r}) and {key} ({text.get(key)!r}) disagree on the "
                f"{concept}: kvplan reads {read}, the first of {' / '.join(keys)} it finds; with {key}'s value "
                f"{moves}")
    return SILENT


def is_alias(key: str) -> bool:
    return any(key in keys for keys in ALIASES.values())


def _interval(text: Mapping[str, Any], r: ConfigReader) -> str | None:
    """Qwen3.5 / 3.6: Qwen3_5TextConfig.__post_init__ pops `full_attention_interval` (default 4) only when
    `layer_types` is None, so beside a `layer_types` it is dropped; kvplan reads it where there is none. Qwen3.5-27B:
    interval 4 and layer_types [linear x 3, full] x 16 say the same 16 full-attention layers of 64."""
    types, interval = text.get("layer_types"), text.get("full_attention_interval")
    if types is None or not isinstance(types, list):
        return SILENT   # read by the layout and the weights (layout._derived_layer_types, arch._qwen3_next_mixers)
    if isinstance(interval, int) and not isinstance(interval, bool) and interval > 0 and types == [
            "linear_attention" if (i + 1) % interval else "full_attention" for i in range(len(types))]:
        return SILENT
    full = sum(t == "full_attention" for t in types)
    return (f"config field full_attention_interval ({interval!r}) disagrees with layer_types ({full} full-attention "
            f"layers of {len(types)}): transformers 5.24 and vLLM follow layer_types and drop the interval, and so "
            "do these figures")


def _gemma2_window(text: Mapping[str, Any], r: ConfigReader) -> str | None:
    """gemma-2-9b / 27b carry `sliding_window_size` 4096 beside `sliding_window` 4096: Gemma2Config has no such
    field and modeling_gemma2.py (5.24) and vLLM 0.33's gemma2.py window by `sliding_window` alone."""
    size, window = text.get("sliding_window_size"), r.used.get("sliding_window")
    if size == window:
        return SILENT
    return (f"config field sliding_window_size ({size!r}) differs from sliding_window ({window!r}): transformers "
            "5.24 and vLLM 0.33 (gemma2.py) window the sliding layers by sliding_window, as these figures do")


def _swa_sinks(text: Mapping[str, Any], r: ConfigReader) -> str | None:
    """MiMo-V2-Flash: transformers 5.24 (modeling_mimo_v2_flash.py MiMoV2FlashAttention) gives every sliding layer
    a `sinks` [heads] parameter whatever the config says, and counts them; vLLM 0.33 (mimo_v2.py MiMoV2Attention)
    builds them only when add_swa_attention_sink_bias is true, as the published config says (39 sliding layers x 64
    heads = 2,496 parameters). Only a config that turns them off differs, by that many parameters."""
    if text.get("add_swa_attention_sink_bias") is not False:
        return SILENT
    heads = text.get("swa_num_attention_heads") or r.used.get("num_attention_heads")
    layers = r.used.get("num_hidden_layers", "each")
    return (f"config field add_swa_attention_sink_bias is false: vLLM 0.33 (mimo_v2.py) then builds no attention "
            f"sinks, while transformers 5.24 builds {heads!r} per sliding layer and these weights count them: at "
            f"most {layers!r} x {heads!r} parameters too many, a few KiB")


def _attn_types(text: Mapping[str, Any], r: ConfigReader) -> str | None:
    """MiniMax-M2 / M2.5: attn_type_list [1] x 62, 1 meaning softmax attention (MiniMax-01's 0 is lightning
    attention). Neither MiniMaxM2 (transformers 5.24) nor vLLM 0.33's minimax_m2.py reads it: both build softmax
    attention in every layer, as these figures do; a 0 in it would be a layer they both still cache in full."""
    value = text.get("attn_type_list")
    if isinstance(value, list) and all(v == 1 for v in value):
        return SILENT
    linear = sum(1 for v in value if v == 0) if isinstance(value, list) else "some"
    return (f"config field attn_type_list marks {linear} layer(s) as linear (lightning) attention: transformers 5.24's "
            "MiniMaxM2 and vLLM 0.33's minimax_m2.py build softmax attention in every layer and cache it in full, "
            "as these figures do; a lightning layer would keep a fixed state instead, so the KV here is an upper "
            "bound")


def _shared_experts(text: Mapping[str, Any], r: ConfigReader) -> str | None:
    """MiniMax-M2: shared_intermediate_size 0, no shared expert, which is all MiniMaxM2 (5.24) and vLLM 0.33's
    minimax_m2.py build (neither reads the field)."""
    size = text.get("shared_intermediate_size")
    if not size:
        return SILENT
    hidden = r.used.get("hidden_size", 0)
    return (f"config field shared_intermediate_size is {size!r}: transformers 5.24's MiniMaxM2 and vLLM 0.33's "
            f"minimax_m2.py build no shared expert, and these weights count none (a gated one would add 3 x "
            f"{hidden!r} x {size!r} parameters per layer)")


def _post_norm(text: Mapping[str, Any], r: ConfigReader) -> str | None:
    """ChatGLM (remote code, modeling_chatglm.py GLMTransformer): `final_layernorm` exists iff post_layer_norm, and
    kvplan counts one final norm: true (chatglm3-6b, glm-4-9b-chat) is what it counts."""
    if text.get("post_layer_norm") is not False:
        return SILENT
    hidden = r.used.get("hidden_size", "hidden_size")
    return (f"config field post_layer_norm is false: ChatGLM's remote modeling then has no final norm, and these "
            f"weights count one ({hidden!r} parameters, under 0.01 % of the model)")


BLOCKSPARSE = ("blocksparse_block_size", "blocksparse_num_local_blocks", "blocksparse_triton_kernel_block_size",
               "blocksparse_vert_stride", "dense_attention_every_n_layers", "blocksparse_homo_head_pattern")


def _blocksparse(text: Mapping[str, Any], r: ConfigReader) -> str | None:
    """Phi-3-small (remote code only; no vLLM 0.33 model): every `dense_attention_every_n_layers`-th layer is dense,
    the others block-sparse (local blocks + a vertical stride); modeling_phi3_small.py keeps every token's K and V of
    every layer in its DynamicCache all the same, and only reads a subset of them."""
    named = ", ".join(k for k in BLOCKSPARSE if text.get(k) not in (None, False))
    return (f"config field(s) {named}: Phi-3-small's block-sparse attention changes which cached tokens a layer "
            "reads, not what it caches (its remote modeling keeps every token of every layer); these figures size "
            "that full cache, an upper bound for a kernel that would keep only the blocks it reads")


def _ignored(why: str) -> Rule:
    """A field neither transformers 5.24's modeling nor vLLM 0.33's reads for the family: silent, `why` cited."""
    def rule(text: Mapping[str, Any], r: ConfigReader) -> str | None:
        return SILENT

    rule.__doc__ = why
    return rule


# (family, field) -> its rule. The MTP fields are read (arch.read_mtp), not judged here.
RULES: dict[tuple[str, str], Rule] = {
    ("qwen3_5_text", "full_attention_interval"): _interval,
    ("qwen3_5_moe_text", "full_attention_interval"): _interval,
    ("gemma2", "sliding_window_size"): _gemma2_window,
    ("nemotron_h", "time_step_rank"): _ignored(
        "NemotronHConfig has no time_step_rank: its Mamba-2 mixer (modeling_nemotron_h.py) has one dt per head "
        "(dt_bias [mamba_num_heads]) and no dt projection of that rank; vLLM 0.33's nemotron_h.py reads it nowhere"),
    ("mimo_v2_flash", "add_swa_attention_sink_bias"): _swa_sinks,
    ("mimo_v2_flash", "add_full_attention_sink_bias"): _ignored(
        "transformers 5.24 builds sinks on sliding layers only (`if is_swa`) and vLLM 0.33's mimo_v2.py passes no "
        "sink switch to its full-attention layers: neither reads the field"),
    ("minimax_m2", "attn_type_list"): _attn_types,
    ("minimax_m2", "shared_intermediate_size"): _shared_experts,
    ("minimax_m2", "mlp_intermediate_size"): _ignored(
        "every MiniMax-M2 layer is MoE (intermediate_size 1,536 per expert): MiniMaxM2 (5.24) and vLLM 0.33's "
        "minimax_m2.py build no dense MLP and read no mlp_intermediate_size"),
    ("minimax_m2", "shared_moe_mode"): _ignored(
        "the gate of a shared expert MiniMax-M2 does not have (shared_intermediate_size 0): read by neither"),
    **{("minimax_m2", f"layernorm_{part}_beta"): _ignored(
        "MiniMax-01's residual scaling coefficient (a float multiplying activations, no tensor): MiniMaxM2 "
        "(5.24) and vLLM 0.33's minimax_m2.py read none of them") for part in ("full_attention", "linear_attention",
                                                                              "mlp")},
    ("chatglm", "post_layer_norm"): _post_norm,
    **{("phi3small", key): _blocksparse for key in BLOCKSPARSE},
}


def verdicts(keys: list[str], text: Mapping[str, Any], r: ConfigReader) -> tuple[list[str], list[str]]:
    """(keys still unexplained, one warning per judged key that is not silent; a rule shared by several keys
    warns once)."""
    unexplained, warnings = [], []
    for key in keys:
        rule = RULES.get((r.family, key))
        if rule is None and is_alias(key):
            said = alias_verdict(key, text, r)
        elif rule is not None:
            said = rule(text, r)
        else:
            unexplained.append(key)
            continue
        if said and said not in warnings:
            warnings.append(said)
    return unexplained, warnings
