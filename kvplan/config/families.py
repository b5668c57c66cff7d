"""Cache layouts of families whose layers no shared rule in `kvplan.config.layout` describes (part of the config
boundary): DeepSeek-V4's compressed attention, Inkling's attention with short convolutions, RWKV's state,
RecurrentGemma's window and the state its modules hold. Each mirrors what transformers 5.24's config class derives
and what its modeling file caches, with the file and the number beside it.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError, UnsupportedArchitectureError, shown
from ..model.layers import CompressedAttentionSpec, FullAttentionSpec, SlidingWindowSpec, StateSpec
from .reader import ConfigReader, check_int

CSA, HCA = "compressed_sparse_attention", "heavily_compressed_attention"
V4_TYPES = ("sliding_attention", CSA, HCA)
# DeepseekV4Config `_COMPRESS_RATIO_TO_LAYER_TYPE`: a legacy config's per-layer `compress_ratios`
V4_RATIOS = {0: "sliding_attention", 4: CSA, 128: HCA}
V4_RATES = {CSA: 4, HCA: 128}  # DeepseekV4Config.default_compress_rates


def _types(r: ConfigReader, n: int, allowed: tuple[str, ...], derive) -> list[str]:
    """The config's `layer_types`, checked against what the family's class accepts, else `derive(r, n)`: the pattern
    its __post_init__ derives (which then ignores the fields `derive` reads)."""
    value = r.get("layer_types")
    if value is None:
        return derive(r, n)
    if not isinstance(value, list) or len(value) != n or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"config field 'layer_types' must list one string per layer ({n}): fix the config.json",
                          field="layer_types")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise UnsupportedArchitectureError(f"model_type {r.model_type!r}: layer type(s) {', '.join(unknown)} are not "
                                           f"ones its transformers class builds ({', '.join(allowed)}): fix the "
                                           "config.json or open an issue with the model id")
    r.used["layer_types"] = f"{n} entries"
    return value


def _v4_derived(r: ConfigReader, n: int) -> list[str]:
    """DeepseekV4Config.__post_init__: legacy `compress_ratios` (0 / 4 / 128 per layer), else 2 HCA layers, then
    CSA and HCA in turn (the default 43 layers: 23 HCA, 20 CSA)."""
    ratios = r.get("compress_ratios")
    if ratios is None:
        return [HCA] * min(n, 2) + [CSA if i % 2 else HCA for i in range(max(n - 2, 0))]
    if not isinstance(ratios, list) or len(ratios) < n or any(v not in V4_RATIOS for v in ratios[:n]):
        raise ConfigError(f"config field 'compress_ratios' must give 0, 4 or 128 for each of the {n} layers: fix the "
                          "config.json", field="compress_ratios")
    r.used["compress_ratios"] = f"{len(ratios)} entries"
    return [V4_RATIOS[v] for v in ratios[:n]]


def _v4_rates(r: ConfigReader) -> dict[str, int]:
    """`compress_rates` per layer type; a legacy config's `compress_rate_csa` / `compress_rate_hca` fold in."""
    given = r.get("compress_rates")
    if given is not None and not isinstance(given, dict):
        raise ConfigError("config field 'compress_rates' must map layer types to rates: fix the config.json",
                          field="compress_rates")
    rates: dict[str, Any] = {**V4_RATES, **(given or {})}
    for kind, legacy in ((CSA, "compress_rate_csa"), (HCA, "compress_rate_hca")):
        if r.get(legacy) is not None:
            rates[kind] = r.get(legacy)
    out = {kind: check_int(f"compress_rates.{kind}", rates[kind]) for kind in (CSA, HCA)}
    r.used["compress_rates"] = f"CSA {out[CSA]}, HCA {out[HCA]}"
    return out


def build_deepseek_v4(r: ConfigReader, notes: list[str]) -> list[tuple]:
    """DeepSeek-V4 (transformers 5.24 modeling_deepseek_v4.py). Every layer attends over a sliding window of one
    shared KV head (`kv_proj` to head_dim, whatever num_key_value_heads says); CSA and HCA layers add a compressor
    (CompressedAttentionSpec). A plain sliding layer is DynamicSlidingWindowLayer fed `update(kv, kv)`, which
    concatenates K and V apart: 2 x 512 per token, where the compressed layers' own cache keeps K = V once."""
    n = r.num_layers()
    types = _types(r, n, V4_TYPES, _v4_derived)
    head_dim, window = r.req_int("head_dim"), r.req_int("sliding_window")
    rates = _v4_rates(r)
    index = r.req_int("index_head_dim")
    r.opt_int("index_topk", minimum=1)   # no cache size: vLLM's top-k workspaces (planning/engines/vllm_dsv4.py)
    specs = {"sliding_attention": SlidingWindowSpec(1, head_dim, head_dim, sliding_window=window),
             CSA: CompressedAttentionSpec(head_dim, window, rates[CSA], index_head_dim=index, overlap=True),
             HCA: CompressedAttentionSpec(head_dim, window, rates[HCA])}
    counts = {kind: types.count(kind) for kind in V4_TYPES if kind in types}
    notes.append("DeepSeek-V4: " + ", ".join(f"{count} {kind}" for kind, count in counts.items()) + f" layers, a "
                 f"{window}-token window of 1 shared KV head x {head_dim} in each; CSA layers keep one entry of "
                 f"{head_dim} + {index} indexer per {rates[CSA]} tokens, HCA one of {head_dim} per {rates[HCA]}")
    return [(specs[kind],) for kind in types]


INKLING_TYPES = ("hybrid", "hybrid_sliding")


def build_inkling(r: ConfigReader, notes: list[str], layer_kind) -> list[tuple]:
    """Inkling, Inkling 2 and Inkling 2 Loop (transformers 5.24 modeling_inkling*.py). Each layer is attention
    (full: num_key_value_heads x head_dim; "hybrid_sliding": swa_num_key_value_heads x swa_head_dim over
    sliding_window_size tokens) plus four short convolutions, cached by LinearAttentionAnd{Full,SlidingWindow}
    AttentionLayer as conv states [B, channels, kernel] in float32 (InklingShortConvolution computes in
    `hidden_states.float()`): k_sconv and v_sconv over the KV width, attn_sconv and mlp_sconv over hidden_size.
    Inkling defaults, a sliding layer: (2 x 16 x 128 + 2 x 6,144) x 4 x 4 B = 262,144 B per sequence."""
    n = r.num_layers()
    types = _types(r, n, INKLING_TYPES, _inkling_derived)
    hidden = r.hidden_size()
    # attribute_map: checkpoints' `sconv_kernel_size` and `sliding_window` are these fields under other names
    kernel = r.int_(*(r.first(("conv_kernel_size", "sconv_kernel_size")) or ("conv_kernel_size", 4)))
    found = r.first(("sliding_window_size", "sliding_window"))
    window = r.int_(*found) if found else r.req_int("sliding_window_size")
    full_kv, full_dim = r.req_int("num_key_value_heads"), r.req_int("head_dim")
    swa_kv, swa_dim = r.req_int("swa_num_key_value_heads"), r.req_int("swa_head_dim")

    def conv(kv_width: int) -> StateSpec:
        return StateSpec(conv_shape=(2 * kv_width + 2 * hidden, kernel), recurrent_shape=(), mixer="short_conv",
                         conv_fp32=True)

    full = (FullAttentionSpec(full_kv, full_dim, full_dim), conv(full_kv * full_dim))
    sliding = (SlidingWindowSpec(swa_kv, swa_dim, swa_dim, sliding_window=window), conv(swa_kv * swa_dim))
    layers = [sliding if t == "hybrid_sliding" else full for t in types]
    notes.append(f"each layer also keeps 4 short-convolution states of {kernel} columns in float32 "
                 f"(k, v: {full_kv * full_dim:,} / {swa_kv * swa_dim:,} channels; attention and MLP: {hidden:,})")
    return _inkling_loop(r, layers, notes, layer_kind)


def _inkling_derived(r: ConfigReader, n: int) -> list[str]:
    """InklingTextConfig.__post_init__: `local_layer_ids` slide, else every layer but each 6th (5, 11, ...)."""
    local = r.get("local_layer_ids")
    if local is None:
        return ["hybrid" if (i + 1) % 6 == 0 else "hybrid_sliding" for i in range(n)]
    if not isinstance(local, list):
        raise ConfigError("config field 'local_layer_ids' must list layer indices: fix the config.json",
                          field="local_layer_ids")
    ids = {check_int("local_layer_ids", i, minimum=0) for i in local}
    r.used["local_layer_ids"] = f"{len(ids)} entries"
    return ["hybrid_sliding" if i in ids else "hybrid" for i in range(n)]


def loop_fields(r: ConfigReader) -> tuple[int, int, int, int] | None:
    """(first looped layer, the layer after the last, passes, message-gate rank) of an Inkling 2 Loop config, or
    None for other families. Inkling2LoopTextConfig.__post_init__ lets a `loop_config` {core_start, core_end,
    num_passes, gate_rank} win over the loop_* fields (a released config.json may give only it); absent both, the
    class defaults 6, 18, 3 and 64."""
    if r.family != "inkling2_loop_text":
        return None
    given = r.get("loop_config")
    if given is not None and not isinstance(given, dict):
        raise ConfigError("config field 'loop_config' must map core_start / core_end / num_passes to layer counts: "
                          "fix the config.json", field="loop_config")
    given = given or {}
    out = []
    for inner, key, minimum in (("core_start", "loop_layer_index_start", 1), ("core_end", "loop_layer_index_end", 1),
                                ("num_passes", "loop_num_passes", 1), ("gate_rank", "loop_gate_rank", 1)):
        out.append(r.int_(f"loop_config.{inner}", given[inner], minimum=minimum) if given.get(inner) is not None
                   else r.req_int(key, minimum=minimum))
    return out[0], out[1], out[2], out[3]


def _inkling_loop(r: ConfigReader, layers: list[tuple], notes: list[str], layer_kind) -> list[tuple]:
    """Inkling 2 Loop (modeling_inkling2_loop.py) runs layers loop_layer_index_start .. end - 1 loop_num_passes times,
    each pass caching its own K, V and conv states: the default 24 layers, 6-17 looped 3 times, cache 48."""
    found = loop_fields(r)
    if found is None or found[2] == 1:
        return layers
    start, end, passes, _ = found
    if not start < end <= len(layers):
        raise ConfigError(f"loop_layer_index_start {shown(start)} .. loop_layer_index_end {shown(end)} must lie within "
                          f"the {len(layers)} layers: fix the config.json", field="loop_layer_index_end")
    notes.append(f"layers {start}-{end - 1} run {passes} times and cache K, V and conv states on every pass")
    r.layer_kinds = tuple(layer_kind(layer) for layer in layers)  # the weights: the built layers, not the visits
    return layers[:start] + layers[start:end] * passes + layers[end:]


def build_rwkv(r: ConfigReader, notes: list[str]) -> list[tuple]:
    """RWKV-4 (transformers 5.24 modeling_rwkv.py, RwkvModel.forward): `state`, five [B, hidden_size, layers] tensors
    (hidden_size even where attention_hidden_size differs), generate's cache: the last token's attention and FFN
    inputs (token shift) in the model dtype, and the WKV numerator, denominator and running max in float32. Per layer
    and sequence, the default 4,096 wide in bf16: 4,096 x (2 x 2 + 3 x 4) = 65,536 B, whatever the length."""
    n, hidden = r.num_layers(), r.hidden_size()
    notes.append("RWKV: a constant state per sequence (token shift in the model dtype, WKV sums in float32), no K or V")
    return [(StateSpec(conv_shape=(2, hidden), recurrent_shape=(3, hidden), mixer="rwkv"),)] * n


RG_BLOCKS = {"recurrent": "linear_attention", "attention": "sliding_attention"}


def recurrent_gemma_types(r: ConfigReader, n: int) -> list[str]:
    """RecurrentGemmaConfig.layers_block_type (transformers 5.24 configuration_recurrent_gemma.py): `block_types`
    (default recurrent, recurrent, attention) repeated to num_hidden_layers, each "recurrent" a recurrent block and
    every other string an attention block (kvplan refuses a string that is neither rather than guess). The property
    cuts `block_types * 100`: a layer past 100 repeats has no block and RecurrentGemmaModel cannot build it."""
    value = r.get("block_types", ["recurrent", "recurrent", "attention"])
    if not isinstance(value, list) or not value or any(v not in RG_BLOCKS for v in value):
        raise ConfigError("config field 'block_types' must list \"recurrent\" / \"attention\" blocks: fix the "
                          "config.json", field="block_types")
    if n > 100 * len(value):
        raise ConfigError(f"config field 'block_types' ({len(value)} entries) repeats to {100 * len(value)} layers "
                          f"in RecurrentGemmaConfig, fewer than the {n} layers: list more blocks", field="block_types")
    r.used["block_types"] = f"{len(value)} entries"
    return [RG_BLOCKS[value[i % len(value)]] for i in range(n)]


def recurrent_gemma_heads(r: ConfigReader) -> tuple[int, int, int]:
    """(heads, KV heads, head_dim): RecurrentGemmaConfig.__post_init__ sets num_key_value_heads to the head count
    and head_dim to hidden_size // heads where the config gives none (the 2B default: 10 heads x 256 of 2,560)."""
    heads = r.num_heads()
    kv = r.opt_int("num_key_value_heads") or heads
    return heads, kv, r.opt_int("head_dim") or r.hidden_size() // heads


def build_recurrent_gemma(r: ConfigReader, notes: list[str]) -> list[tuple]:
    """RecurrentGemma (transformers 5.24 modeling_recurrent_gemma.py). generate() hands it DynamicCache(config)
    (GenerationMixin._prepare_cache_for_generation); the attention blocks fill its DynamicSlidingWindowLayers (K and
    V of num_key_value_heads x head_dim over attention_window_size - 1 tokens) and forward returns none. Each
    recurrent block keeps its state on itself: RecurrentGemmaRecurrentBlock.conv1d_state, the last conv1d_width - 1
    columns of linear_x's output [B, lru_width, 3] in the model dtype (after a decode step a view of 4 columns:
    StateSpec.conv_pinned), and RecurrentGemmaRglru.recurrent_states [B, lru_width] in float32. The 2B default in
    bf16, per sequence and recurrent layer: 2,560 x 3 x 2 + 2,560 x 4 = 25,600 B after a prefill, 30,720 B
    decoding."""
    n = r.num_layers()
    types = recurrent_gemma_types(r, n)
    heads, kv, head_dim = recurrent_gemma_heads(r)
    window = r.req_int("attention_window_size", default=2048)
    width = r.opt_int("lru_width") or r.hidden_size()   # RecurrentGemmaConfig: lru_width or hidden_size
    kernel = r.req_int("conv1d_width", default=4)
    state = StateSpec(conv_shape=(width, kernel - 1), recurrent_shape=(width,), mixer="rg_lru", conv_pinned=1)
    attention = SlidingWindowSpec(kv, head_dim, head_dim, sliding_window=window)
    notes.append(f"RecurrentGemma: {types.count('linear_attention')} recurrent blocks (a conv state of {kernel - 1} "
                 f"columns and an RG-LRU state of {width:,}, held on the modules) and "
                 f"{types.count('sliding_attention')} attention blocks over a {window:,}-token window")
    return [(state,) if t == "linear_attention" else (attention,) for t in types]
