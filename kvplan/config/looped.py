"""Models that run their blocks more than once, block by block as transformers 5.24 builds them (part of the
config boundary). Their caches count a layer per pass (kvplan.config.layout), their weights a layer per block.

- Dory (modeling_dory.py): `num_hidden_layers` blocks (half that where layer_types lists "mlp" entries), the
  middle ones looped. Each block: q/k/v/o (attention_bias)
  and an output gate [q_dim, H] with per-channel scales `sqk` and `s_gate` [q_dim]; a gated MLP (mlp_bias) with
  `suv_gate` and `suv_up` [intermediate]; `lambda_1`, `lambda_2` [H]. Its norms are L2 norms without weights, and
  the LM head carries a `logit_scale` [vocab] whether or not its weight is tied.
- HRM-Text (modeling_hrm_text.py): two stacks (H and L) of `num_layers_per_stack` blocks each, run H_cycles x
  (L_cycles + 1) times (`num_hidden_layers` is that product, what the cache counts). Each block: MHA q/k/v/o and a
  sigmoid gate [heads x head_dim, H] (attention_bias), a gated MLP (mlp_bias); weightless RMSNorms; `z_L_init` [H]
  at the top.
"""

from __future__ import annotations

from ..model.arch import AttentionDims, LayerDims, MLPDims
from .reader import ConfigReader

Extra = tuple[str, int, tuple[int, int] | None]


def _attention(r: ConfigReader, heads: int, kv: int) -> AttentionDims:
    head_dim, bias = r.req_int("head_dim"), r.flag("attention_bias")
    return AttentionDims(heads, kv, head_dim, head_dim, bias, bias, bias, bias)


def dory(r: ConfigReader, hidden: int, heads: int, n: int) -> tuple[list[LayerDims], tuple[Extra, ...]]:
    """Dory defaults: 36 blocks of 16 heads x 256, 4 KV heads, MLP 7,168: per block 4,096 x 2,560 gate + 3 x 4,096
    scales-and-gates + 2 x 7,168 + 2 x 2,560 beside the plain decoder's tensors."""
    attn = _attention(r, heads, r.req_int("num_key_value_heads"))
    q_dim, inter = heads * attn.head_dim, r.req_int("intermediate_size")
    extra = (("attention", q_dim * hidden, (q_dim, hidden)), ("attention", 2 * q_dim, None),
             ("mlp", 2 * inter, None), ("other", 2 * hidden, None))
    layer = LayerDims(attn, MLPDims(inter, bias=r.flag("mlp_bias")), 0, extra)
    return [layer] * dory_blocks(r, n), (("lm_head", r.req_int("vocab_size"), None),)


def dory_blocks(r: ConfigReader, n: int) -> int:
    """DoryConfig.__post_init__: released config.jsons (and to_dict) list each block as an attention entry and an
    "mlp" entry, so a layer_types with "mlp" in it counts num_hidden_layers twice (the default: 72 for 36)."""
    types = r.get("layer_types")
    return n // 2 if isinstance(types, list) and "mlp" in types else n


def layers_per_stack(r: ConfigReader) -> int:
    """HrmTextConfig.__post_init__: num_layers_per_stack, or (absent) num_hidden_layers itself."""
    return r.opt_int("num_layers_per_stack") or r.req_int("num_hidden_layers")


def hrm_text(r: ConfigReader, hidden: int, heads: int) -> tuple[list[LayerDims], tuple[Extra, ...]]:
    """HRM-Text defaults: 2 stacks x 16 blocks of 12 heads x 128 (5 x [1,536, 1,536] projections) and MLP 4,096."""
    attn = _attention(r, heads, heads)   # num_key_value_groups = 1: MHA whatever the config says
    q_dim = heads * attn.head_dim
    gate = (("attention", q_dim * hidden, (q_dim, hidden)),) + ((("attention", q_dim, None),) if attn.q_bias else ())
    layer = LayerDims(attn, MLPDims(r.req_int("intermediate_size"), bias=r.flag("mlp_bias")), 0, gate)
    return [layer] * (2 * layers_per_stack(r)), (("other", hidden, None),)
