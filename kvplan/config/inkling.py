"""Inkling, Inkling 2 and Inkling 2 Loop language models, block by block as transformers 5.24 builds them (part of
the config boundary: models/inkling/modeling_inkling.py, models/inkling2/modeling_inkling2.py and
models/inkling2_loop/modeling_inkling2_loop.py, their config classes). The cache layout is
kvplan.config.families.build_inkling; these are the weights. Inkling (the first) is `inkling1`, below.

Inkling 2, every layer (`layer_types[i]`: "hybrid_sliding" sizes attention by swa_num_attention_heads,
swa_num_key_value_heads and swa_head_dim, and its relative bias by sliding_window_size; "hybrid" by
num_attention_heads, num_key_value_heads, head_dim and rel_extent):
- q/k/v/o `.linear` projections (the dims), a per-head query scale [heads, head_dim] (Inkling2ScaledL2Clip; keys
  are clipped without a weight, values RMS-normed without one), an output gate [q_dim, H]
  (Inkling2GatedOutputProjection.gate_proj) and a sink projection [heads, H];
- the relative position bias: linear [heads x d_rel, H], scale [heads, d_rel], profiles [d_rel, rel extent];
- k and v short convolutions over the KV width: a float32 depthwise conv [kv_dim, 1, kernel] on sliding layers
  (Inkling2ShortConvolution), a dynamic one on full layers (Inkling2DynamicShortConvolution: static_weight
  [kernel, kv_dim] and weight_proj [kv_heads x kernel, H], model dtype);
- float32 depthwise convs after attention and after the MLP [H, 1, kernel];
- block attention-residual queries in float32 (Inkling2BlockAttentionResidual): mlp_input [H] on every layer,
  attention_input [H] (sliding) or [3, H] (full) on every layer but the first;
- norms: input and post-attention on sliding layers; q, k, v input norms and post-attention on full layers;
- routed experts on every layer: gate_up [E, 2I, H], down [E, H, I], a float32 router [E, H] and its float32
  e_score_correction_bias buffer; no shared expert.
Outside the layers: embed_tokens [vocab_size, H] with its own RMSNorm [H], the final norm [H], final_input [H]
(float32), and an lm_head of `unpadded_vocab_size` rows, never tied (Inkling2ForCausalLM._tied_weights_keys = {}).

Inkling 2 Loop adds, on the looped layers loop_layer_index_start .. end - 1 (built once, run loop_num_passes times,
and built even with one pass), four message gates (q, k, v, mlp: Inkling2LoopMessageGate) of down_proj
[loop_gate_rank, 2H] and float32 forget / message projections [H, loop_gate_rank], and at the top message_input
[looped layers, 4, H] in float32. Inkling-2-Small defaults: 48 layers of 4,608, 384 experts of 2,304:
593,718,478,848 parameters; Inkling-2-Mini (Loop): 24 layers of 2,304, 128 experts: 26,068,156,416.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..model.arch import AttentionDims, LayerDims, MLPDims, MoEDims
from .families import INKLING_TYPES, _inkling_derived, _types, loop_fields
from .reader import ConfigReader

# (group, elements, matrix or None, float32)
Extra = tuple[str, int, tuple[int, int] | None, bool]


def _linear(rows: int, cols: int, group: str = "attention", fp32: bool = False) -> Extra:
    return group, rows * cols, (rows, cols), fp32


def _derived(r: ConfigReader, n: int) -> list[str]:
    """Inkling2TextConfig.__post_init__ (and the Loop's): every 6th layer full ("hybrid"), the rest sliding."""
    return ["hybrid" if (i + 1) % 6 == 0 else "hybrid_sliding" for i in range(n)]


def _attention(r: ConfigReader, hidden: int, sliding: bool) -> tuple[AttentionDims, list[Extra]]:
    """The attention dims of one layer type and the tensors beside its q/k/v/o: Inkling-2-Small's full layer, 48
    heads x 128, 8 KV heads: gate 6,144 x 4,608, sinks 48 x 4,608, relative bias 768 x 4,608 + 48 x 16 + 16 x 1,024,
    dynamic convs 2 x (4 x 1,024 + 32 x 4,608)."""
    prefix = "swa_" if sliding else ""
    heads = r.req_int(f"{prefix}num_attention_heads")
    kv, head_dim = r.req_int(f"{prefix}num_key_value_heads"), r.req_int(f"{prefix}head_dim")
    kernel = _kernel(r)
    extent = r.req_int("sliding_window_size") if sliding else r.req_int("rel_extent")
    d_rel = r.req_int("d_rel")
    q_dim, kv_dim = heads * head_dim, kv * head_dim
    extra: list[Extra] = [("attention", q_dim, None, False), _linear(q_dim, hidden), _linear(heads, hidden),
                          _linear(heads * d_rel, hidden), ("attention", heads * d_rel, None, False),
                          ("attention", d_rel * extent, None, False)]
    if sliding:   # Inkling2ShortConvolution(...).to(dtype=torch.float32), for k and for v
        extra += [("attention", kv_dim * kernel, None, True)] * 2
    else:
        extra += [("attention", kernel * kv_dim, None, False), _linear(kv * kernel, hidden)] * 2
    return AttentionDims(heads, kv, head_dim, head_dim), extra


def _message_gates(hidden: int, rank: int) -> list[Extra]:
    """Inkling2LoopMessageGate x 4 (q, k, v, mlp): down_proj [rank, 2H], forget and message projections [H, rank]
    built in float32 (nn.Linear(..., dtype=torch.float32)). Mini: 4 x (64 x 4,608 + 2 x 2,304 x 64)."""
    one = [_linear(rank, 2 * hidden, "other"), _linear(hidden, rank, "other", fp32=True),
           _linear(hidden, rank, "other", fp32=True)]
    return one * 4


def _moe(r: ConfigReader) -> MoEDims:
    experts = r.need_int(("n_routed_experts", "num_local_experts"), "expert count")   # attribute_map
    size = r.need_int(("moe_intermediate_size", "intermediate_size"), "expert size")
    expert = MLPDims(size, gated=True, fused_gate_up=True)   # gate_up_proj [E, 2I, H]
    return MoEDims(experts, r.req_int("num_experts_per_tok", minimum=0), expert, router_fp32=True,
                   score_bias=True, score_fp32=True)


def inkling2(r: ConfigReader, hidden: int, n: int) -> tuple[list[LayerDims], tuple[Extra, ...]]:
    """The blocks and the tensors outside them (embeddings and lm_head too: the head has unpadded_vocab_size
    rows, the embeddings vocab_size, 201,024 against 200,058 by default)."""
    types = _types(r, n, INKLING_TYPES, _derived)
    found = loop_fields(r)
    looped = range(found[0], found[1]) if found else range(0)
    moe = _moe(r)
    kinds = {sliding: _attention(r, hidden, sliding) for sliding in set(t == "hybrid_sliding" for t in types)}
    gates = _message_gates(hidden, found[3]) if found else []
    convs = [("other", hidden * _kernel(r), None, True)] * 2   # post_attention / post_mlp_convolution
    out = []
    for i, kind in enumerate(types):
        sliding = kind == "hybrid_sliding"
        attn, extra = kinds[sliding]
        queries = [("other", hidden, None, True)]                                  # mlp_input
        if i > 0:
            queries.append(("other", hidden * (1 if sliding else 3), None, True))  # attention_input
        own = tuple(extra + convs + queries + (gates if i in looped else []))
        out.append(LayerDims(attn, moe, 2 if sliding else 4, own))
    vocab, head = r.req_int("vocab_size"), r.req_int("unpadded_vocab_size")
    top: list[Extra] = [("embeddings", vocab * hidden, None, False), ("embeddings", hidden, None, False),
                        ("norms", hidden, None, False), ("norms", hidden, None, True),   # norm, final_input
                        ("lm_head", head * hidden, (head, hidden), False)]
    if found:   # Inkling2LoopMessageAttentionResidual.query [looped layers, 4, H], float32
        top.append(("other", len(looped) * 4 * hidden, None, True))
    return out, tuple(top)


def _kernel(r: ConfigReader) -> int:
    """conv_kernel_size, which checkpoints call sconv_kernel_size (attribute_map); the class default 4."""
    found = r.first(("conv_kernel_size", "sconv_kernel_size"))
    return r.int_(*found) if found else 4


# ---------------------------------------------------------------- Inkling (the first; modeling_inkling.py)


def _inkling_attention(r: ConfigReader, hidden: int, sliding: bool) -> tuple[AttentionDims, list[Extra]]:
    """InklingAttention: q/k/v/o with q_norm and k_norm [head_dim], r_proj [heads x d_rel, H], float32 k and v
    short convolutions [kv_dim, 1, kernel], relative logits [d_rel, window (sliding) or rel_extent]. Inkling's
    sliding layer: 64 heads x 128, 16 KV heads: r_proj 1,024 x 6,144, convs 2 x 2,048 x 4, logits 16 x 512."""
    prefix = "swa_" if sliding else ""
    heads = r.req_int(f"{prefix}num_attention_heads")
    kv, head_dim = r.req_int(f"{prefix}num_key_value_heads"), r.req_int(f"{prefix}head_dim")
    extent = r.req_int("sliding_window_size") if sliding else r.req_int("rel_extent")
    d_rel = r.req_int("d_rel")
    extra: list[Extra] = [_linear(heads * d_rel, hidden), ("attention", d_rel * extent, None, False)]
    extra += [("attention", kv * head_dim * _kernel(r), None, True)] * 2
    return AttentionDims(heads, kv, head_dim, head_dim, qk_norm="head"), extra


def _inkling_sparse(r: ConfigReader, n: int) -> list[bool]:
    """InklingTextConfig.__post_init__: `mlp_layer_types` ("dense" / "sparse"), else the first `dense_mlp_idx`
    layers dense (a checkpoint's kwarg; 0 by default: every layer sparse)."""
    types = r.get("mlp_layer_types")
    if types is None:
        first = r.opt_int("dense_mlp_idx", minimum=0) or 0
        return [i >= first for i in range(n)]
    if not isinstance(types, list) or len(types) != n or any(t not in ("dense", "sparse") for t in types):
        raise ConfigError(f"config field 'mlp_layer_types' must give \"dense\" or \"sparse\" for each of the {n} "
                          "layers: fix the config.json", field="mlp_layer_types")
    return [t == "sparse" for t in types]


def _inkling_widths(r: ConfigReader) -> tuple[int, int]:
    """(dense MLP, expert) widths. A checkpoint with `dense_intermediate_size` says intermediate_size for the
    experts' width (InklingTextConfig.__post_init__, transformers #49416)."""
    if r.get("dense_intermediate_size") is not None:
        return r.req_int("dense_intermediate_size"), r.req_int("intermediate_size")
    return r.req_int("intermediate_size"), r.req_int("moe_intermediate_size")


def inkling1(r: ConfigReader, hidden: int, n: int) -> tuple[list[LayerDims], tuple[Extra, ...]]:
    """Inkling (InklingForCausalLM): per layer the attention above, input and post-attention norms, float32
    attn_sconv and mlp_sconv [H, 1, kernel], and a sparse or dense MLP. Sparse: routed experts gate_up [E, 2I, H],
    down [E, H, I], n_shared_experts shared ones [n, I, H] x 3 (kvplan's shared MLP of n x I), a router [E + n, H]
    in the model dtype with a float32 global_scale [1] and e_score_correction_bias buffer [E]. Dense: gate, up,
    down of intermediate_size and a global_scale [1]. embed_tokens carries an RMSNorm [H]; the lm_head has
    vocab_size rows and is never tied (_tied_weights_keys = {}); transformers builds no MTP layers (model.mtp.*
    is ignored at load). Defaults: 66 layers of 6,144, 256 + 2 experts of 3,072: 975,340,270,146."""
    types = _types(r, n, INKLING_TYPES, _inkling_derived)
    dense_width, expert_width = _inkling_widths(r)
    experts = r.need_int(("n_routed_experts", "num_local_experts"), "expert count")
    shared = r.req_int("n_shared_experts")
    moe = MoEDims(experts, r.req_int("num_experts_per_tok", minimum=0),
                  MLPDims(expert_width, gated=True, fused_gate_up=True), shared=MLPDims(shared * expert_width),
                  score_bias=True, score_fp32=True)
    routed = [("router", shared * hidden, None, False), ("router", 1, None, True)]   # shared rows, global_scale
    dense = [("mlp", 1, None, False)]                                                # InklingMLP.global_scale
    kinds = {sliding: _inkling_attention(r, hidden, sliding) for sliding in set(t == "hybrid_sliding" for t in types)}
    convs = [("other", hidden * _kernel(r), None, True)] * 2
    out = []
    for kind, sparse in zip(types, _inkling_sparse(r, n)):
        attn, extra = kinds[kind == "hybrid_sliding"]
        ffn, own = (moe, routed) if sparse else (MLPDims(dense_width), dense)
        out.append(LayerDims(attn, ffn, 2, tuple(extra + convs + own)))
    return out, (("embeddings", hidden, None, False),)   # embed_tokens.embed_norm
