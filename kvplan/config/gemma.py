"""Gemma 3n and Gemma 4 language models, block by block as transformers 5.24 builds them (part of the config
boundary: modeling_gemma3n.py, modeling_gemma4.py and their config classes).

Both differ from a plain decoder in ways no generic trait says:
- KV-shared layers (the last `num_kv_shared_layers`) keep q_proj, q_norm and o_proj but build no k/v projection
  and no k_norm (`kv_sharing_modes` "reuse");
- per-layer inputs (`hidden_size_per_layer_input` p > 0): a second embedding table [vocab_size_per_layer_input,
  layers x p], a projection [layers x p, H] and its norm [p] at the top, and in every block a gate [p, H], a
  projection [H, p] and one more norm;
- Gemma 3n adds AltUp (n = altup_num_inputs streams: (n - 1) x 2 [H, H] projections at the top; per block a
  correction scale [H], coefficients [n, n] and [n x n, n], a router [n, H] and its norm) and LAuReL (per block a
  rank-r [r, H] / [H, r] pair and its norm), with one MLP width per layer (`intermediate_size` as a list);
- Gemma 4 sizes full-attention layers apart (head_dim 512 where sliding ones have 256, kvplan.config.per_layer),
  drops v_proj on non-sliding layers with `attention_k_eq_v`, doubles the MLP of KV-shared layers with
  `use_double_wide_mlp`, adds a 1-element `layer_scalar` buffer per block, and with `enable_moe_block` puts a
  routed-expert block (gate_up [E, 2I, H], down [E, H, I], router proj [E, H], scale [H], per_expert_scale [E],
  three more norms) beside the dense MLP, which kvplan counts as the MoE's always-on "shared" MLP.

The attention projections are listed tensor by tensor (`extra`, with `mixer_weights` off); the dims beside them
still size activations and TP splits.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..model.arch import AttentionDims, LayerDims, MLPDims, MoEDims
from .per_layer import layer_overrides
from .reader import ConfigReader, check_int

Extra = tuple[str, int, tuple[int, int] | None]


def _linear(group: str, rows: int, cols: int, bias: bool) -> list[Extra]:
    return [(group, rows * cols, (rows, cols))] + ([(group, rows, None)] if bias else [])


def _types(r: ConfigReader, n: int, every: int, full_first: bool) -> list[str]:
    """layer_types, or the config class's default pattern: Gemma 4 one full layer in 6 (and the last forced
    full), Gemma 3n one in 5."""
    types = r.get("layer_types")
    if isinstance(types, list) and len(types) == n:
        types = list(types)
    else:
        types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n)]
    if full_first and types:   # Gemma4TextConfig.__post_init__: "Last layer must use full_attention"
        types[-1] = "full_attention"
    return types


def _shared(r: ConfigReader, n: int) -> list[bool]:
    """kv_sharing_modes == "reuse": the last num_kv_shared_layers layers (Gemma 3n E4B: 15 of 35)."""
    shared = r.opt_int("num_kv_shared_layers", minimum=0) or 0
    return [i >= n - shared for i in range(n)]


def _attention(r: ConfigReader, hidden: int, heads: int, kv: int, head_dim: int, shared: bool,
               no_v: bool) -> list[Extra]:
    """q_proj, q_norm [head_dim], then k_proj, k_norm (v_norm has no weight) and v_proj unless KV-shared, o_proj."""
    bias = r.flag("attention_bias")
    out = _linear("attention", heads * head_dim, hidden, bias) + [("attention", head_dim, None)]
    if not shared:
        out += _linear("attention", kv * head_dim, hidden, bias) + [("attention", head_dim, None)]
        if not no_v:
            out += _linear("attention", kv * head_dim, hidden, bias)
    return out + _linear("attention", hidden, heads * head_dim, bias)


def _per_layer_inputs(r: ConfigReader, hidden: int, n: int) -> tuple[int, list[Extra], list[Extra]]:
    """(p, the block's PLE tensors, the top-level ones); p = 0: none (Gemma-4-26B-A4B)."""
    p = r.opt_int("hidden_size_per_layer_input", minimum=0) or 0
    if not p:
        return 0, [], []
    vocab = r.req_int("vocab_size_per_layer_input")
    block = _linear("other", p, hidden, False) + _linear("other", hidden, p, False)
    top = [("embeddings", vocab * n * p, None)] + _linear("other", n * p, hidden, False) + [("norms", p, None)]
    return p, block, top


def gemma4(r: ConfigReader, hidden: int, heads: int, n: int) -> tuple[list[LayerDims], tuple[Extra, ...]]:
    """Gemma4TextModel's blocks and its tensors outside them. Gemma-4-26B-A4B: 25 sliding layers of 8 KV heads x
    256 and 5 full ones of 2 x 512 without v_proj, 128 experts of 704 beside a 2,112-wide dense MLP."""
    kv, head_dim = r.req_int("num_key_value_heads"), r.req_int("head_dim")
    types = _types(r, n, 6, full_first=True)
    per_layer = layer_overrides(r, types, (kv, head_dim, head_dim), [])
    shared = _shared(r, n)
    k_eq_v = r.flag("attention_k_eq_v")
    p, ple, top = _per_layer_inputs(r, hidden, n)
    inter = r.req_int("intermediate_size")
    moe = _gemma4_moe(r, hidden) if r.flag("enable_moe_block") else None
    layers = []
    for i, layer_type in enumerate(types):
        kv_i, dim_i, _ = per_layer.get(i, (kv, head_dim, head_dim))
        sliding = layer_type == "sliding_attention"
        extra = _attention(r, hidden, heads, kv_i, dim_i, shared[i], no_v=k_eq_v and not sliding) + ple
        wide = r.flag("use_double_wide_mlp") and shared[i]
        dense = MLPDims(inter * (2 if wide else 1))
        ffn: MLPDims | MoEDims = dense
        norms = 4 + (1 if p else 0)
        if moe is not None:   # the router's scale [H] and per_expert_scale [E]; post_feedforward_layernorm_1/_2, pre_2
            ffn = MoEDims(moe.experts, moe.top_k, moe.expert, shared=dense)
            extra.append(("router", hidden + moe.experts, None))
            norms += 3
        layers.append(LayerDims(AttentionDims(heads, kv_i, dim_i, dim_i), ffn, norms, tuple(extra),
                                mixer_weights=False))
    return layers, tuple(top)


def _gemma4_moe(r: ConfigReader, hidden: int) -> MoEDims:
    """Gemma4TextExperts: gate_up_proj [E, 2 x moe_intermediate_size, H] (fused), down_proj [E, H, I]."""
    experts = r.req_int("num_experts")
    return MoEDims(experts, r.req_int("top_k_experts"), MLPDims(r.req_int("moe_intermediate_size"),
                                                                fused_gate_up=True))


def gemma3n(r: ConfigReader, hidden: int, heads: int, n: int) -> tuple[list[LayerDims], tuple[Extra, ...]]:
    """Gemma3nTextModel's blocks and its tensors outside them. Gemma 3n defaults: 35 layers, the last 15
    KV-shared, 4 AltUp streams, LAuReL rank 64, per-layer inputs of 256."""
    kv, head_dim = r.req_int("num_key_value_heads"), r.req_int("head_dim")
    shared = _shared(r, n)
    widths = _widths(r, n)
    streams = r.req_int("altup_num_inputs")
    rank = r.req_int("laurel_rank")
    p, ple, top = _per_layer_inputs(r, hidden, n)
    # AltUp: correct_output_scale [H], correction_coefs [n, n], prediction_coefs [n x n, n], modality_router [n, H]
    altup = [("other", hidden + streams ** 2 + streams ** 3, None)] + _linear("other", streams, hidden, False)
    laurel = _linear("other", rank, hidden, False) + _linear("other", hidden, rank, False)
    layers = []
    for i in range(n):
        extra = _attention(r, hidden, heads, kv, head_dim, shared[i], no_v=False) + altup + laurel + ple
        # input, post_attention, pre/post_feedforward, altup.router_norm, post_laurel_norm (+ post_per_layer_input)
        layers.append(LayerDims(AttentionDims(heads, kv, head_dim, head_dim), MLPDims(widths[i]),
                                6 + (1 if p else 0), tuple(extra), mixer_weights=False))
    # altup_projections and altup_unembed_projections: (n - 1) [H, H] each
    top += [("other", hidden * hidden, (hidden, hidden))] * (2 * (streams - 1))
    return layers, tuple(top)


def _widths(r: ConfigReader, n: int) -> list[int]:
    value: Any = r.get("intermediate_size")
    if isinstance(value, list):
        if len(value) != n:
            raise ConfigError(f"config field 'intermediate_size' lists {len(value)} widths for {n} layers: fix the "
                              "config.json", field="intermediate_size")
        return [check_int("intermediate_size", v) for v in value]
    return [r.req_int("intermediate_size")] * n
