"""Weights memory: a parameter count per architecture, then bytes per storage format (pure arithmetic).

`param_count(shape)` lists every tensor transformers 5.24 builds for the `ArchShape` (embeddings, attention
incl. MLA, Mamba / Gated-DeltaNet mixers, dense MLPs, routed and shared experts, routers, norms, biases, an
untied lm_head) and returns a named breakdown, as nanoGPT's sizing notebook does; tests/test_weights.py checks
its total against `sum(p.numel() for p in model.parameters())` of the model built on the meta device.
Tied weights count once. Persistent buffers (DeepSeek-V3's e_score_correction_bias) are reported apart.

`weights_bytes(shape, dtype)` prices each tensor: the config dtype (or `dtype`) for unquantized weights, the
checkpoint's `quantization_config` for the projections a quantizer packs (rules and worked numbers at
`_RULES`). Embeddings, lm_head, norms, routers, biases, convolutions and SSM scalars stay in the model dtype.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from math import ceil

from ..dtypes import DType, resolve_dtype
from ..model.arch import (ArchShape, AttentionDims, DeltaNetDims, LayerDims, Mamba2Dims, MambaDims, MLPDims, MoEDims,
                          QuantDims)

GROUPS = ("embeddings", "attention", "mixer", "mlp", "experts", "shared_experts", "router", "norms", "lm_head",
          "other")
LINEAR_GROUPS = frozenset({"attention", "mixer", "mlp", "experts", "shared_experts"})  # what quantizers pack
PACKED_GROUPS = {"mxfp4": frozenset({"experts"})}  # transformers' mxfp4 swaps only GptOssExperts


@dataclass(frozen=True)
class Tensor:
    """`copies` tensors of `numel` elements. `matrix` (rows, cols) marks a projection weight a quantizer may pack."""

    group: str
    numel: int
    copies: int = 1
    matrix: tuple[int, int] | None = None
    layer: int = -1
    bias: bool = False
    fp32: bool = False  # float32 whatever the model dtype (DeepSeek's router: _keep_in_fp32_modules_strict)
    replicated: bool = False  # whole on every TP rank in vLLM and SGLang (MLA's q_a / kv_a projections)
    # one projection a quantizer may treat apart from its group: "in_proj_ba" (Gated DeltaNet's b, a), an attention
    # projection's module name ("o_proj", "kv_b_proj": nvidia's DeepSeek NVFP4 checkpoints exclude every MLA
    # projection but o_proj, which they pack)
    part: str = ""
    # how TP splits its rows when they are not plain (kvplan.model.ranks): ("vocab", V) for embed_tokens / lm_head
    # (padded first), ("kv", even rows, KV rows, KV heads) for a projection holding KV heads (replicated past TP)
    split: tuple = ()


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameter counts by group; `total` is what `model.parameters()` holds (tied weights once).

    `buffers`: persistent buffers in the state dict (not parameters). `mtp`: DeepSeek multi-token-prediction
    layers, stored in the checkpoint but not built by transformers (not in `total`; embeddings and head they
    share are not repeated). `active`: parameters one token uses (top-k of each MoE layer's routed experts).
    """

    embeddings: int = 0
    attention: int = 0
    mixer: int = 0
    mlp: int = 0
    experts: int = 0
    shared_experts: int = 0
    router: int = 0
    norms: int = 0
    lm_head: int = 0
    other: int = 0      # learned scalars outside the groups (kvplan.model.arch.ArchShape.layer_extra)
    buffers: int = 0
    mtp: int = 0
    active: int = 0

    @property
    def total(self) -> int:
        return sum(getattr(self, g) for g in GROUPS)

    def rows(self) -> tuple[tuple[str, int], ...]:
        """(group, count) for the non-empty groups, in GROUPS order, then ('total', total)."""
        return tuple((g, getattr(self, g)) for g in GROUPS if getattr(self, g)) + (("total", self.total),)


@dataclass(frozen=True)
class WeightsEstimate:
    """Bytes of resident weights: parameters by group, plus persistent buffers; `rules` says how each was priced."""

    params: ParamBreakdown
    dtype: DType
    quant_method: str | None
    group_bytes: tuple[tuple[str, int], ...]
    buffers_bytes: int = 0
    rules: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)
    # a multimodal model's vision tower and projector, (component, bytes), apart from the language model's
    # `total_bytes`: serving engines load them, transformers' causal LM of some families does not
    towers: tuple[tuple[str, int], ...] = ()

    @property
    def params_bytes(self) -> int:
        return sum(b for _, b in self.group_bytes)

    @property
    def towers_bytes(self) -> int:
        return sum(b for _, b in self.towers)

    @property
    def total_bytes(self) -> int:
        return self.params_bytes + self.buffers_bytes


# ---------------------------------------------------------------- the tensor inventory


def inventory(shape: ArchShape) -> list[Tensor]:
    """Every parameter tensor of the model, grouped as ParamBreakdown reports them."""
    before, after = _outer(shape)
    for i, layer in enumerate(shape.layers):
        before += _layer_tensors(shape, layer, i)
    return before + after


def _outer(shape: ArchShape) -> tuple[list[Tensor], list[Tensor]]:
    """The tensors outside the blocks: (before them, after them)."""
    h = shape.hidden
    e = shape.embed_dim or h   # OPT's word_embed_proj_dim: the token table and head are [vocab, e]
    vocab = ("vocab", shape.vocab)   # VocabParallelEmbedding / ParallelLMHead rows, padded (kvplan.model.ranks)
    before = [Tensor("embeddings", shape.vocab * e, split=vocab)] if shape.top_dims else []
    if e != h:
        # modeling_opt.py OPTDecoder: project_in nn.Linear(word_embed_proj_dim, hidden) and project_out
        # nn.Linear(hidden, word_embed_proj_dim), no biases; vLLM 0.33 opt.py builds both as ReplicatedLinear
        before += [Tensor("embeddings", h * e, matrix=(h, e), replicated=True),
                   Tensor("embeddings", e * h, matrix=(e, h), replicated=True)]
    if shape.learned_positions:
        # GPT-2 wpe [n_positions, hidden]: a plain nn.Embedding, whole on every rank (vLLM 0.33 gpt2.py:210
        # `self.wpe = nn.Embedding(...)`, opt.py OPTLearnedPositionalEmbedding(nn.Embedding); SGLang 0.5.23 gpt2.py:195)
        before.append(Tensor("embeddings", shape.learned_positions * h, replicated=True))
    after = [_extra_tensor(e) for e in shape.extra]
    if shape.final_norm and shape.top_dims:
        after.append(Tensor("norms", h * (2 if shape.norm_bias else 1)))
    if not shape.tied_embeddings and shape.top_dims:
        after.append(Tensor("lm_head", shape.vocab * e, matrix=(shape.vocab, e), split=vocab))
    if shape.lm_head_bias:  # GPT-J, Phi-2: a bias even when the weight is tied
        after.append(Tensor("lm_head", shape.vocab, bias=True, split=vocab))
    return before, after


def _layer_tensors(shape: ArchShape, layer: LayerDims, i: int) -> list[Tensor]:
    out = _layer(layer, shape.hidden, i, shape.norm_bias)
    return out + [Tensor("other", shape.layer_extra, layer=i)] if shape.layer_extra else out


@dataclass(frozen=True)
class PricedTensors:
    """The inventory priced: (group, elements, bytes) per tensor, for each layer and outside the layers. Layers
    alike share one tuple (`layers[i] is layers[j]`), so a sum over a layer is computed once per kind of layer: a
    10,000-layer config built and priced 110,000 tensors three times per plan (1.8 s)."""

    layers: tuple[tuple[tuple[str, int, int], ...], ...]
    outer: tuple[tuple[str, int, int], ...]


@lru_cache(maxsize=64)
def priced_tensors(shape: ArchShape, dtype: DType) -> PricedTensors:
    """Each layer's tensors priced in `dtype` once per kind of layer: the same dims, and the same groups a
    quantizer skips at that layer (q.skip names layers: `model.layers.3.mlp`)."""
    q = shape.quant
    skipped: dict[int, set] = {}
    for group, at in (q.skip if q else ()):
        skipped.setdefault(at, set()).add(group)
    for key, scheme in (q.layers if q else ()):  # ModelOpt MIXED_PRECISION: a layer's kind includes its formats
        skipped.setdefault(key[1], set()).add((key, scheme))
    kinds: dict[tuple, tuple[tuple[str, int, int], ...]] = {}
    layers = []
    for i, layer in enumerate(shape.layers):
        key = (layer, frozenset(skipped.get(i, ())))
        if key not in kinds:
            kinds[key] = _priced_rows(_layer_tensors(shape, layer, i), dtype, q)
        layers.append(kinds[key])
    before, after = _outer(shape)
    return PricedTensors(tuple(layers), _priced_rows(before + after, dtype, q))


def _priced_rows(tensors: list[Tensor], dtype: DType,
                 q: QuantDims | None) -> tuple[tuple[str, int, int, bool, tuple], ...]:
    """(group, elements, bytes, whole on every TP rank, how TP splits it) per tensor. Whole: norms, routers (vLLM's
    GateLinear is a ReplicatedLinear, 0.19-0.33 fused_moe/router/gate_linear.py; SGLang's MoE gates are
    ReplicatedLinear or MoEGate, whole) and MLA's q_a / kv_a projections and their norms (`Tensor.replicated`). The
    split: `Tensor.split`, or ("experts", E) for routed experts (whole ones under expert parallelism)."""
    return tuple((t.group, t.numel * t.copies, tensor_bytes(t, dtype, q), t.replicated or t.group in WHOLE_GROUPS,
                  t.split or (("experts", t.copies) if t.group == "experts" else ())) for t in tensors)


WHOLE_GROUPS = frozenset({"norms", "router"})


def _group_sums(shape: ArchShape, dtype: DType, column: int) -> dict[str, int]:
    """Elements (column 1) or bytes (column 2) by group over the whole inventory."""
    priced = priced_tensors(shape, dtype)
    sums = dict.fromkeys(GROUPS, 0)
    per_kind: dict[int, dict[str, int]] = {}
    for rows in priced.layers:
        if id(rows) not in per_kind:
            kind = per_kind[id(rows)] = {}
            for row in rows:
                kind[row[0]] = kind.get(row[0], 0) + row[column]
        for group, value in per_kind[id(rows)].items():
            sums[group] += value
    for row in priced.outer:
        sums[row[0]] += row[column]
    return sums


def _layer(layer: LayerDims, h: int, i: int, norm_bias: bool) -> list[Tensor]:
    out = _mixer(layer.mixer, h, i) if layer.mixer is not None and layer.mixer_weights else []
    if layer.ffn_weights and isinstance(layer.ffn, MoEDims):
        out += _moe(layer.ffn, h, i)
    elif layer.ffn_weights and layer.ffn is not None:
        out += _mlp(layer.ffn, h, i, "mlp")
    # one tensor per norm weight and bias (replicated on every TP rank, so the split changes no byte)
    out += [Tensor("norms", h, layer=i, bias=b) for _ in range(layer.norms) for b in ((False, True) if norm_bias
                                                                                       else (False,))]
    return out + [_extra_tensor(e, i) for e in layer.extra]


def _extra_tensor(extra: tuple, layer: int = -1) -> Tensor:
    """A family tensor (group, elements, matrix[, fp32]): a fourth element True keeps it float32 in any model dtype
    (Inkling 2's short convolutions and block-attention queries, _keep_in_fp32_modules_strict)."""
    group, numel, matrix, *fp32 = extra
    return Tensor(group, numel, matrix=matrix, layer=layer, fp32=bool(fp32 and fp32[0]))


def _linear(group: str, rows: int, cols: int, bias: bool, layer: int, copies: int = 1,
            replicated: bool = False, part: str = "", split: tuple = ()) -> list[Tensor]:
    """nn.Linear(cols -> rows): weight [rows, cols] and an optional bias [rows]."""
    out = [Tensor(group, rows * cols, copies, (rows, cols), layer, replicated=replicated, part=part, split=split)]
    return out + [Tensor(group, rows, copies, layer=layer, bias=True, replicated=replicated, split=split)] \
        if bias else out


def _mixer(m, h: int, i: int) -> list[Tensor]:
    if isinstance(m, MambaDims):
        return _mamba(m, h, i)
    if isinstance(m, Mamba2Dims):
        return _mamba2(m, h, i)
    if isinstance(m, DeltaNetDims):
        return _deltanet(m, h, i)
    return _mla(m, h, i) if m.kv_lora_rank else _attention(m, h, i)


def _attention(a: AttentionDims, h: int, i: int) -> list[Tensor]:
    q = a.heads * a.head_dim * (2 if a.q_gate else 1)  # Qwen3-Next: 16 heads x 256 x 2 = 8,192 rows
    k, v = a.kv_heads * a.head_dim, a.kv_heads * a.v_head_dim
    # k and v rows are whole KV heads, one a rank past TP = kv_heads (kvplan.model.ranks.kv_heads_per_rank)
    if a.fused_qkv:  # Falcon-7B: 71 x 64 + 2 x 64 = 4,672 rows
        out = _linear("attention", q + k + v, h, a.q_bias, i, part="qkv_proj", split=("kv", q, k + v, a.kv_heads))
    else:
        out = _linear("attention", q, h, a.q_bias, i, part="q_proj")
        out += _linear("attention", k, h, a.k_bias, i, part="k_proj", split=("kv", 0, k, a.kv_heads))
        out += _linear("attention", v, h, a.v_bias, i, part="v_proj", split=("kv", 0, v, a.kv_heads))
    out += _linear("attention", h, a.heads * a.v_head_dim, a.o_bias, i, part="o_proj")
    norm = {"none": 0, "head": 2 * a.head_dim, "head_ln": 4 * a.head_dim, "proj": q + k}[a.qk_norm]
    # a norm over one head is whole on every rank: vLLM 0.33 qwen3.py Qwen3Attention.__init__:153 `self.q_norm =
    # RMSNorm(self.head_dim, ...)`, k_norm alike (gemma3.py:149, glm4_moe.py:297 the same; SGLang 0.5.23 qwen3.py:193;
    # Persimmon's "head_ln" nn.LayerNorm(self.head_dim), vLLM 0.14.1 persimmon.py:132, SGLang 0.5.23 persimmon.py:89);
    # Qwen3-8B's 2 x 128 bf16 weights are 512 B a layer at any TP, not 256 B at TP 2 (checkpoint rows: the same,
    # kvplan.sources.safetensors `_replicated`). A norm over all heads ("proj") stays split with them, as MiniMax-M2's
    # (vLLM minimax_m2.py MiniMaxText01RMSNormTP); OLMoE's vLLM holds whole after an all-gather (olmoe.py:164)
    head_norm = a.qk_norm in ("head", "head_ln")
    out += [Tensor("attention", norm, layer=i, replicated=True)] if norm and head_norm else []
    extra = (0 if head_norm else norm) + (a.heads if a.sinks else 0)   # gpt-oss's sinks: heads / TP a rank
    return out + ([Tensor("attention", extra, layer=i)] if extra else [])


def _mla(a: AttentionDims, h: int, i: int) -> list[Tensor]:
    """DeepSeek MLA: q (through q_lora_rank when set), kv_a [kv_lora + rope, H], kv_b, o, two RMSNorms.

    The engines keep q_a and kv_a whole on every TP rank (vLLM 0.11-0.33 deepseek_v2.py: `fused_qkv_a_proj =
    DeepSeekV2FusedQkvAProjLinear(..., disable_tp=True)`, `kv_a_proj_with_mqa = ReplicatedLinear` without
    q_lora_rank; SGLang 0.5.23 deepseek_v2.py `fused_qkv_a_proj_with_mqa = ReplicatedLinear`): DeepSeek-V3's
    2,112 x 7,168 per layer, 15.1 M fp8 weights a rank at any TP."""
    q_rows = a.heads * a.head_dim  # DeepSeek-V3: 128 x (128 + 64) = 24,576
    if a.q_lora_rank:
        out = _linear("attention", a.q_lora_rank, h, a.q_bias, i, replicated=True, part="q_a_proj")
        out += _linear("attention", q_rows, a.q_lora_rank, False, i, part="q_b_proj")
        out.append(Tensor("attention", a.q_lora_rank, layer=i, replicated=True))  # q_a_layernorm, whole (below)
    else:
        out = _linear("attention", q_rows, h, False, i, part="q_proj")
    out += _linear("attention", a.kv_lora_rank + a.qk_rope_dim, h, a.k_bias, i, replicated=True,
                   part="kv_a_proj_with_mqa")
    nope = a.head_dim - a.qk_rope_dim
    out += _linear("attention", a.heads * (nope + a.v_head_dim), a.kv_lora_rank, False, i, part="kv_b_proj")
    # kv_a_layernorm and q_a_layernorm are plain RMSNorms, not TP-sharded: whole on every rank (vLLM 0.33
    # deepseek_v2.py DeepseekV2MLAAttention.__init__:1082 `self.q_a_layernorm = RMSNorm(self.q_lora_rank, ...)`,
    # DeepseekV2Attention:501/525 alike; 0.6.0 deepseek_v2.py:208/230; SGLang 0.5.23 deepseek_v2.py:2077/2163).
    # DeepSeek-V3's 1,536 + 512 bf16 weights are 4,096 B a rank at any TP, not 512 B at TP 8
    out.append(Tensor("attention", a.kv_lora_rank, layer=i, replicated=True))
    if a.indexer:  # DeepSeek-V3.2: wq_b [64 x 128, 1536], wk [128, 7168], k_norm (LayerNorm 128), weights_proj [64, H]
        heads, dim = a.indexer
        out += _linear("attention", heads * dim, a.q_lora_rank or h, False, i, part="indexer")
        out += _linear("attention", dim, h, False, i, part="indexer")
        # weights_proj is in DeepSeek-V3.2's _keep_in_fp32_modules: fp8 checkpoints leave it unquantized
        out += [Tensor("attention", 2 * dim, layer=i), Tensor("attention", heads * h, layer=i)]
    return out + _linear("attention", h, a.heads * a.v_head_dim, a.o_bias, i, part="o_proj")


def _mamba(m: MambaDims, h: int, i: int) -> list[Tensor]:
    """Mamba-2.8B: in_proj [10240, 2560], x_proj [160 + 2 x 16, 5120], dt_proj [5120, 160], A_log [5120, 16]."""
    n, s = m.inner, m.state
    out = _linear("mixer", 2 * n, h, m.proj_bias, i)
    out.append(Tensor("mixer", n * m.conv_kernel + (n if m.conv_bias else 0), layer=i))  # depthwise conv1d
    out += _linear("mixer", m.dt_rank + 2 * s, n, False, i) + _linear("mixer", n, m.dt_rank, True, i)
    if m.a_log_fp32:  # Zamba's A_log [I, S] stays float32 (torch.arange(..., dtype=torch.float32)), D follows the model
        out += [Tensor("mixer", n * s, layer=i, fp32=True), Tensor("mixer", n, layer=i)]
    else:
        out.append(Tensor("mixer", n * s + n + ((m.dt_rank + 2 * s) if m.inner_norms else 0), layer=i))  # A_log, D
    return out + _linear("mixer", h, n, m.proj_bias, i)


def _mamba2(m: Mamba2Dims, h: int, i: int) -> list[Tensor]:
    """Nemotron-H-56B: in_proj [16,384 + 20,480 + 256 = 37,120, 8192], conv [20,480, 1, 4] + bias, dt_bias / A_log /
    D [256] each, the gated norm [16,384], out_proj [8192, 16,384]."""
    out = _linear("mixer", m.inner + m.conv_dim + m.heads, h, m.proj_bias, i)
    conv = m.conv_dim * m.conv_kernel + (m.conv_dim if m.conv_bias else 0)
    out.append(Tensor("mixer", conv + 3 * m.heads + m.inner, layer=i))
    return out + _linear("mixer", h, m.inner, m.proj_bias, i)


def _deltanet(d: DeltaNetDims, h: int, i: int) -> list[Tensor]:
    """Qwen3-Next-80B: qkvz [2 x 16 x 128 + 2 x 32 x 128 = 12,288, 2048], ba [64, 2048], conv [8192, 4]."""
    key, value = d.k_heads * d.k_head_dim, d.v_heads * d.v_head_dim
    # in_proj_b and in_proj_a [v_heads, H] each: ModelOpt's nvidia/Qwen3.6-27B-NVFP4 keeps them in bf16
    out = _linear("mixer", 2 * key + 2 * value, h, False, i) + _linear("mixer", 2 * d.v_heads, h, False, i,
                                                                      part="in_proj_ba")
    out.append(Tensor("mixer", (2 * key + value) * d.conv_kernel + 2 * d.v_heads + d.v_head_dim, layer=i))
    return out + _linear("mixer", h, value, False, i)


def _mlp(m: MLPDims, h: int, i: int, group: str, copies: int = 1) -> list[Tensor]:
    n = m.intermediate
    if not m.gated:
        return _linear(group, n, h, m.bias, i, copies) + _linear(group, h, n, m.bias, i, copies)
    if m.fused_gate_up:  # Phi-3: gate_up_proj [2I, H]
        up = _linear(group, 2 * n, h, m.bias, i, copies)
    else:
        up = _linear(group, n, h, m.bias, i, copies) + _linear(group, n, h, m.bias, i, copies)
    return up + _linear(group, h, n, m.bias, i, copies)


def _moe(m: MoEDims, h: int, i: int) -> list[Tensor]:
    out = _mlp(m.expert, m.latent or h, i, "experts", copies=m.experts)
    if m.latent:  # Nemotron-H: fc1_latent_proj [latent, H], fc2_latent_proj [H, latent], dense beside the experts
        out += _linear("mlp", m.latent, h, m.latent_bias, i) + _linear("mlp", h, m.latent, m.latent_bias, i)
    if m.shared:
        out += _mlp(m.shared, h, i, "shared_experts")
    router = (m.experts * h + (m.experts if m.router_bias else 0) + (h if m.shared_gate else 0)
              + (m.experts if m.score_param else 0))
    return out + [Tensor("router", router, layer=i, fp32=m.router_fp32)]


# ---------------------------------------------------------------- counting


def param_count(shape: ArchShape) -> ParamBreakdown:
    """Parameters per group. Llama-3.1-8B: 525,336,576 embeddings + 32 layers + 525,336,576 lm_head = 8,030,261,248."""
    counts = _group_sums(shape, shape.dtype, 1)
    total = sum(counts.values())
    return ParamBreakdown(**counts, buffers=_buffers(shape), mtp=_mtp(shape), active=total - _idle_experts(shape))


def _buffer_bytes(shape: ArchShape, act: DType) -> int:
    scores = sum(l.ffn.experts * (4 if l.ffn.score_fp32 else ceil(act.bits / 8)) for l in shape.layers
                 if isinstance(l.ffn, MoEDims) and l.ffn.score_bias)
    return scores + 8 * _hash_tables(shape) + ceil(shape.layer_buffers * shape.num_layers * act.bits / 8)


def _buffers(shape: ArchShape) -> int:
    """Persistent buffers: e_score_correction_bias per MoE layer, DeepSeek-V4's tid2eid per hash_moe layer, and
    per-block buffers (Gemma 4's layer_scalar)."""
    scores = sum(l.ffn.experts for l in shape.layers if isinstance(l.ffn, MoEDims) and l.ffn.score_bias)
    return scores + _hash_tables(shape) + shape.layer_buffers * shape.num_layers


def _hash_tables(shape: ArchShape) -> int:
    """int64 tid2eid entries [vocab, top_k] of DeepSeek-V4's hash_moe layers: V4-Flash 3 x 129,280 x 6 =
    2,327,040 (18,616,320 B)."""
    return sum(l.ffn.hash_vocab * l.ffn.top_k for l in shape.layers if isinstance(l.ffn, MoEDims))


def _idle_experts(shape: ArchShape) -> int:
    """Routed-expert parameters a token does not use: (experts - top_k) x one expert, per MoE layer."""
    idle = 0
    for i, layer in enumerate(shape.layers):
        if isinstance(layer.ffn, MoEDims) and layer.ffn.top_k and layer.ffn_weights:
            one = sum(t.numel for t in _mlp(layer.ffn.expert, layer.ffn.latent or shape.hidden, i, "experts"))
            idle += max(layer.ffn.experts - layer.ffn.top_k, 0) * one
    return idle


def mtp_module(shape: ArchShape) -> list[Tensor]:
    """One DeepSeek-V3 MTP module: one decoder block like the last, eh_proj [H, 2H] (left unquantized in the fp8
    checkpoint) and enorm, hnorm and a final norm. The block is numbered after the last layer, as the checkpoint
    names it (DeepSeek-V3's model.layers.61), so a skip of that layer reaches it."""
    h = shape.hidden
    block = _layer(shape.layers[-1], h, len(shape.layers), shape.norm_bias)
    return block + [Tensor("other", 2 * h * h), Tensor("norms", 3 * h)]


def mtp_quant(shape: ArchShape) -> QuantDims | None:
    """The format the MTP module is stored in: the checkpoint's, or the model dtype where the quantization config
    leaves the whole module out (ModelOpt's "mtp*": nvidia/Qwen3.5-122B-A10B-NVFP4's exclude_modules)."""
    q = shape.quant
    return None if q is not None and ("mtp", -1) in q.skip else q


def _mtp(shape: ArchShape) -> int:
    """DeepSeek-V3 MTP parameters: 11,610,067,968 (the checkpoint also repeats embed_tokens and the head:
    +1,853,358,080)."""
    if not shape.mtp_layers:
        return 0
    return shape.mtp_layers * sum(t.numel * t.copies for t in mtp_module(shape))


# ---------------------------------------------------------------- bytes


def weights_bytes(shape: ArchShape, dtype: DType | str | None = None) -> WeightsEstimate:
    """Resident bytes of the weights: `dtype` (default: the config's) for what is not quantized, the
    checkpoint's quantization_config for the projections it packs.

    Llama-3.1-8B in bf16: 8,030,261,248 x 2 = 16,060,522,496 B (14.96 GiB).
    """
    act = resolve_dtype(dtype) if dtype is not None else shape.dtype
    q = shape.quant
    by_group = _group_sums(shape, act, 2)
    notes = list(shape.notes)
    if q is None and act.bits < 16:
        notes.append(f"{act.name} without a quantization_config is priced as a plain cast: no scales counted")
    return WeightsEstimate(
        params=param_count(shape), dtype=act, quant_method=q.method if q else None,
        group_bytes=tuple((g, b) for g, b in by_group.items() if b),
        buffers_bytes=_buffer_bytes(shape, act),  # e_score_correction_bias: float32 in DeepSeek
        rules=_rules(shape, act), notes=tuple(notes), towers=tower_bytes(shape, act),
    )


def tower_bytes(shape: ArchShape, act: DType) -> tuple[tuple[str, int], ...]:
    """Vision tower and projector in the model dtype: quantized checkpoints leave them unquantized (their
    quantization_config's ignore / modules_to_not_convert lists name them). Gemma-3-4b bf16: 833,732,064 B."""
    return tuple((c, ceil(n * act.bits / 8)) for c, n in shape.towers)


def tensor_bytes(t: Tensor, act: DType, q: QuantDims | None) -> int:
    if t.fp32:
        return 4 * t.numel * t.copies
    scheme = scheme_of(t, q) if q and t.matrix else None
    if scheme is not None:
        return t.copies * matrix_bytes(scheme, *t.matrix, act_bytes=ceil(act.bits / 8))
    if q and q.method == "mxfp4" and t.bias and t.group == "experts":
        return 4 * t.numel * t.copies  # Mxfp4GptOssExperts keeps gate_up/down biases in float32
    return ceil(t.numel * t.copies * act.bits / 8)


def scheme_of(t: Tensor, q: QuantDims) -> QuantDims | None:
    """The format a projection weight is stored in, or None for the model dtype."""
    if q.experts is not None and t.group == "experts" and _quantized(t, q):
        return q.experts  # DeepSeek-V4: fp4 experts in an fp8 checkpoint
    if q.layers:  # ModelOpt MIXED_PRECISION: only what quantized_layers names
        table = _mixed_table(q)
        return table.get((t.group, t.layer, t.part), table.get((t.group, -1, t.part)))
    return q if _quantized(t, q) else None


@lru_cache(maxsize=32)
def _mixed_table(q: QuantDims) -> dict[tuple[str, int, str], QuantDims]:
    return dict(q.layers)


def _quantized(t: Tensor, q: QuantDims) -> bool:
    if t.group not in PACKED_GROUPS.get(q.method, LINEAR_GROUPS) and not (t.group == "lm_head" and q.lm_head):
        return False
    if t.part and ((f"{t.group}/{t.part}", -1) in q.skip or (f"{t.group}/{t.part}", t.layer) in q.skip):
        return False
    return (t.group, -1) not in q.skip and (t.group, t.layer) not in q.skip


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def matrix_bytes(q: QuantDims, rows: int, cols: int, act_bytes: int = 2) -> int:
    """Stored bytes of one quantized [rows, cols] weight (cols = input features), scales and metadata included."""
    return _RULES[q.method][0](q, rows, cols, act_bytes)


def _fp8(q: QuantDims, rows: int, cols: int, act: int) -> int:
    scales = _cdiv(rows, q.block[0]) * _cdiv(cols, q.block[1]) if q.block else 1
    return rows * cols + (q.scale_bytes or 4) * scales + (4 if q.static_input_scale else 0)


def _groups(q: QuantDims, cols: int) -> int:
    return _cdiv(cols, q.group_size) if q.group_size else 1


def _fp4(q: QuantDims, rows: int, cols: int, act: int) -> int:
    """DeepSeek-V4's fp4 experts as transformers 5.24 loads them (integrations/finegrained_fp8.py FP8Experts with
    expert_dtype "fp4", _alloc_expert_proj): int8 [rows, cols // 2] holding two e2m1 values a byte, and a scale
    per row per 32 inputs (sf_gran_n 1, sf_gran_k 32), 1 B as ue8m0 (else float32)."""
    return rows * (cols // 2) + (q.scale_bytes or 4) * rows * _cdiv(cols, 32)


def _gptq(q: QuantDims, rows: int, cols: int, act: int) -> int:
    g = _groups(q, cols)
    qweight = _cdiv(cols * q.bits, 32) * 4 * rows  # int32 [cols x bits / 32, rows]
    qzeros = g * _cdiv(rows * q.bits, 32) * 4  # int32 [groups, rows x bits / 32]
    return qweight + qzeros + 2 * g * rows + 4 * cols  # + fp16 scales [groups, rows] + int32 g_idx [cols]


def _auto_round(q: QuantDims, rows: int, cols: int, act: int) -> int:
    """auto-round 0.16's qlinear_torch_zp (auto_round:auto_gptq): GPTQ's tensors without g_idx; auto_awq: AWQ's."""
    if q.algo.endswith("awq"):
        return _awq(q, rows, cols, act)
    return _gptq(q, rows, cols, act) - 4 * cols


def _awq(q: QuantDims, rows: int, cols: int, act: int) -> int:
    g = _groups(q, cols)
    packed_rows = _cdiv(rows * q.bits, 32) * 4  # int32 words along the output dim
    return cols * packed_rows + (0 if q.symmetric else g * packed_rows) + 2 * g * rows


def _compressed(q: QuantDims, rows: int, cols: int, act: int) -> int:
    block = q.block or (128, 128)
    scales = {"tensor": 1, "channel": rows, "group": rows * _groups(q, cols), "tensor_group": rows * _groups(q, cols),
              "block": _cdiv(rows, block[0]) * _cdiv(cols, block[1])}[q.strategy]
    if q.packed:  # weight_packed int32 [rows, cols x bits / 32] + weight_shape int64 [2]
        weight = rows * _cdiv(cols * q.bits, 32) * 4 + 16
        zeros = _cdiv(rows * q.bits, 32) * 4 * (scales // rows) if q.strategy in ("group", "channel") else 0
    else:  # int8 / fp8 weight, or uint8 holding two fp4 values (nvfp4-, mxfp4-pack-quantized)
        weight, zeros = rows * _cdiv(cols * q.bits, 8), scales
    zeros = 0 if q.symmetric else zeros
    scale = q.scale_bytes or act
    extra = (4 * cols if q.g_idx else 0) + (scale if q.static_input_scale else 0) + 4 * q.global_scales
    return weight + scale * scales + zeros + extra


def _mxfp4(q: QuantDims, rows: int, cols: int, act: int) -> int:
    blocks = rows * _cdiv(cols, 32)
    return 16 * blocks + blocks  # 32 fp4 values in 16 bytes + one e8m0 scale byte per block


def _bnb(q: QuantDims, rows: int, cols: int, act: int) -> int:
    n = rows * cols
    if q.bits == 8:
        return n + 4 * rows  # int8 weight + fp32 SCB per output row
    blocks = _cdiv(n, 64)
    # double quant: uint8 absmax, then an fp32 absmax per 256 of them, a 256-entry fp32 code and an fp32 offset
    stats = blocks + 4 * _cdiv(blocks, 256) + 4 * 256 + 4 if q.double_quant else 4 * blocks
    return _cdiv(n, 2) + stats + 4 * 16  # + the 16-entry fp32 nf4/fp4 quant_map; the ~100 B JSON state is not counted


# method -> (bytes of one [rows, cols] weight, rule with a worked number on a [4096, 4096] projection)
_RULES = {
    "fp8": (_fp8, "fp8: 1 B per weight + a float32 scale per weight_block_size block (per tensor when unset); "
                  "[4096, 4096] at 128x128: 16,777,216 + 1,024 x 4 = 16,781,312 B"),
    "fp4": (_fp4, "fp4 experts (DeepSeek-V4 expert_dtype): two e2m1 values a byte + a ue8m0 scale per row per 32 "
                  "inputs = 4.25 bits; one expert's gate_up [4096, 4096]: 8,388,608 + 524,288 = 8,912,896 B"),
    "gptq": (_gptq, "gptq: bits/8 B per weight (int32-packed) + per group of group_size inputs an fp16 scale and "
                    "a packed zero per output, + int32 g_idx per input; 4-bit g128 [4096, 4096]: 8,388,608 + "
                    "65,536 zeros + 262,144 scales + 16,384 g_idx = 8,732,672 B (4.26 bits)"),
    "awq": (_awq, "awq: bits/8 B per weight + per group an fp16 scale and a packed zero per output; 4-bit g128 "
                  "[4096, 4096]: 8,388,608 + 65,536 + 262,144 = 8,716,288 B (4.16 bits)"),
    "compressed-tensors": (_compressed, "compressed-tensors: num_bits/8 B per weight (int32-packed for "
                           "pack-quantized) + a model-dtype scale per tensor/channel/group/block (+ zero points "
                           "if asymmetric); w4a16 g128 [4096, 4096]: 8,388,608 + 16 + 131,072 x 2 = 8,650,768 B; "
                           "w8a8 per channel: 16,777,216 + 4,096 x 2 = 16,785,408 B; nvfp4: 8,388,608 + 1,048,576 "
                           "fp8 scales per 16 + 2 x 4 global = 9,437,192 B (4.5 bits)"),
    "modelopt": (_compressed, "modelopt: FP8 = 1 B per weight + fp32 weight_scale and input_scale ([4096, 4096]: "
                              "16,777,224 B); NVFP4 = 0.5 B per weight + an fp8 scale per 16 + fp32 weight_scale_2 "
                              "and input_scale ([4096, 4096]: 9,437,192 B, 4.5 bits)"),
    "auto-round": (_auto_round, "auto-round (GPTQ packing): bits/8 B per weight (int32-packed) + per group an fp16 "
                                "scale and a packed zero per output, no g_idx; 4-bit g128 [4096, 4096]: 8,388,608 + "
                                "65,536 + 262,144 = 8,716,288 B (4.16 bits)"),
    "mxfp4": (_mxfp4, "mxfp4 (gpt-oss experts only): 4 bits per weight + an 8-bit scale per 32 = 4.25 bits; "
                      "[5760, 2880]: 8,294,400 + 518,400 = 8,812,800 B; expert biases float32"),
    "bitsandbytes": (_bnb, "bitsandbytes: 8-bit = 1 B per weight + an fp32 scale per output row ([4096, 4096]: "
                           "16,793,600 B); 4-bit = 0.5 B + an fp32 absmax per 64 weights (double quant: 1 B per "
                           "64 + fp32 per 16,384) + tables; [4096, 4096] nf4 double quant: 8,655,940 B"),
}


def _rules(shape: ArchShape, act: DType) -> tuple[str, ...]:
    q = shape.quant
    if q is None:
        rules = [f"every parameter in {act.name}: {act.bits / 8:g} B each"]
    else:
        head = q.lm_head or any(key[0] == "lm_head" for key, _ in q.layers)
        kept = "embeddings, norms, routers, biases" + ("" if head else ", lm_head")
        rules = [_RULES[q.method][1]] + ([_RULES[q.experts.method][1]] if q.experts else [])
        if q.method == "fp8" and q.scale_bytes == 1:  # scale_fmt ue8m0 (DeepSeek-V3.1, V4): [4096, 4096] 16,778,240 B
            rules.append("scales stored as ue8m0 (scale_fmt): 1 B per block, not 4")
        rules.append(f"kept in {act.name}: {kept}")
        if q.skip:
            rules.append(f"left unquantized by the config: {_skipped_text(q.skip)}")
        if q.layers:
            rules.append(_mixed_rule(q))
        if q.kv_cache_dtype:
            rules.append(f"checkpoint KV cache calibrated for {q.kv_cache_dtype} (vLLM 0.19+ and SGLang 0.5.16+ "
                         "take it for --kv-cache-dtype auto)")
    if any(isinstance(l.ffn, MoEDims) and l.ffn.router_fp32 for l in shape.layers):
        rules.append("router weights in float32 (transformers' _keep_in_fp32_modules_strict)")
    if _buffers(shape) and shape.layer_buffers:
        rules.append(f"persistent buffers: {_buffers(shape):,} values (layer_scalar: {shape.layer_buffers} a block)")
    elif _hash_tables(shape):
        rules.append(f"persistent buffers: {_buffers(shape) - _hash_tables(shape):,} float32 e_score_correction_bias "
                     f"values and {_hash_tables(shape):,} int64 tid2eid entries (the hash_moe layers' token-to-expert "
                     "tables)")
    elif _buffers(shape):
        rules.append(f"persistent buffers: {_buffers(shape):,} e_score_correction_bias values")
    fp32 = _fp32_by_group(shape)
    if fp32:
        rules.append(f"{sum(fp32.values()):,} parameters in float32 whatever the model dtype (transformers' "
                     f"_keep_in_fp32_modules_strict: {', '.join(f'{g} {n:,}' for g, n in fp32.items())})")
    if shape.towers:
        rules.append(" + ".join(f"{c} {n:,}" for c, n in shape.towers) + f" parameters in {act.name} "
                     "(kvplan.config.towers: the tower's modules in transformers 5.24)")
    return tuple(rules)


def _fp32_by_group(shape: ArchShape) -> dict[str, int]:
    """Elements of the family tensors marked float32 (an `extra` whose fourth element is True), in the blocks and
    outside them, by group: DeepSeek-V4-Flash attention 1,510,720 + norms 356,352 + other 33,884,439 = 35,751,511.
    Layers share their extras tuple by kind, so each kind is summed once and multiplied by its count."""
    counts = Counter(id(l.extra) for l in shape.layers)
    kinds = [(l.extra, counts[id(l.extra)]) for l in {id(l.extra): l for l in shape.layers}.values()]
    sums: dict[str, int] = {}
    for extras, times in [*kinds, (shape.extra, 1)]:
        for e in extras:
            if len(e) > 3 and e[3]:
                sums[e[0]] = sums.get(e[0], 0) + e[1] * times
    return sums


_BLOCK_GROUPS = frozenset({"attention", "mixer", "mlp", "experts", "shared_experts", "router"})


def _skipped_text(skip: frozenset) -> str:
    """q.skip by group, layers as runs: "attention/kv_b_proj (layers 0-60), lm_head, whole block (layer 61)" (a
    layer every group of which is skipped, ModelOpt's "model.layers.61*")."""
    at: dict[str, set[int]] = {}
    for group, layer in skip:
        at.setdefault("the MTP module" if group == "mtp" else group, set()).add(layer)
    whole = set.intersection(*(at.get(g, set()) for g in _BLOCK_GROUPS)) - {-1}
    if whole:
        at = {g: (layers - whole if g in _BLOCK_GROUPS else layers) for g, layers in at.items()}
        at = {g: layers for g, layers in at.items() if layers} | {"whole block": whole}
    return ", ".join(g if -1 in layers else f"{g} ({_runs(sorted(layers))})" for g, layers in sorted(at.items()))


def _runs(layers: list[int]) -> str:
    runs: list[list[int]] = []
    for i in layers:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return ("layer " if len(layers) == 1 else "layers ") + text


def _mixed_rule(q: QuantDims) -> str:
    """ModelOpt MIXED_PRECISION's formats by group: "attention FP8 (16 layers), mlp W4A16_NVFP4 (64 layers)"."""
    layers: dict[tuple[str, str], set[int]] = {}
    for (group, layer, part), scheme in q.layers:  # attention's q/k/v/o entries count one layer once
        key = (group + (f"/{part}" if part and group != "attention" else ""), scheme.algo)
        layers.setdefault(key, set()).add(layer)
    counts = {key: len(at) for key, at in layers.items()}
    listed = ", ".join(f"{g} {a}" + (f" ({n} layers)" if g != "lm_head" else "")
                       for (g, a), n in sorted(counts.items()))
    return f"ModelOpt MIXED_PRECISION per quantized_layers: {listed}; every other projection in the model dtype"


# MTP layers that store their own copy of embed_tokens and the head (DeepSeek-V3's model.layers.61.embed_tokens
# and shared_head.head; GLM-5's kept as before, no table of its checkpoint found). Qwen3-Next's and Qwen3.5's
# `mtp.*` have none: Qwen3-Next-80B-A3B-Instruct's tensor table lists no mtp.embed_tokens, and vLLM 0.33
# qwen3_5_mtp.py Qwen3_5MTP.load_weights reads embed_tokens and lm_head from the target's own tensors
_OWN_EMBEDDINGS_MTP = frozenset({"deepseek_v3", "deepseek_v32", "glm_moe_dsa"})


def stored_bytes_by_rule(shape: ArchShape, priced: WeightsEstimate | None = None) -> int:
    """What the config rule says the checkpoint stores: the resident weights, the towers, and the MTP module
    (the block priced like the last layer, eh_proj / fc [H, 2H] and its norms), which the engines skip without
    speculative decoding; DeepSeek's fp8 checkpoint also keeps its own copy of the embeddings and the head in bf16.
    DeepSeek-R1: 673,363,472,736 + 15,427,896,544 = 688,791,369,280 B; Qwen3-Next-80B-A3B-Instruct:
    159,348,782,592 + 3,300,942,848 = 162,649,725,440 B. `priced`: weights_bytes(shape), if known."""
    w = priced or weights_bytes(shape)
    own = shape.model_type in _OWN_EMBEDDINGS_MTP
    module = mtp_module(shape) + ([Tensor("embeddings", 2 * shape.vocab * shape.hidden)] if own else []) \
        if shape.mtp_layers else []
    return w.total_bytes + w.towers_bytes + shape.mtp_layers * sum(tensor_bytes(t, shape.dtype, mtp_quant(shape))
                                                                   for t in module)
