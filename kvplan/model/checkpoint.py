"""What a checkpoint holds, as a summary of its safetensors headers: bytes by component, layer and dtype.

The header readers (a local folder: `kvplan.sources.safetensors`; the Hub: `kvplan.sources.hub_headers`) and the
bundled records (`kvplan.sources.library`) all meet in `CheckpointWeights`, a list of `WeightRow`s, never a
tensor. `stage_bytes` is one GPU's share of it, the layout the planner prices the config rule with too
(`kvplan.weights.split`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from math import ceil

from ..dtypes import DType
from .ranks import layers_span, rank_share

# Bits per element of each safetensors dtype (safetensors/src/tensor.rs Dtype::bitsize).
DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
              "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64,
              "U64": 64, "F64": 64, "C64": 64}
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})


def is_usize(value) -> bool:
    """A count as safetensors stores one (a usize, 0 to 2**64 - 1) and JSON gives it: not 1.9, "99", true, or
    Infinity and 1e400 (floats both)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


COMPONENTS = ("language_model", "embeddings", "lm_head", "vision", "projector", "audio", "mtp")
TOWERS = frozenset({"vision", "projector", "audio"})


@dataclass(frozen=True)
class WeightRow:
    """Tensors of one kind, summed: `bytes` as stored, in `tensors` tensors of safetensors `dtype`.

    `layer` is the language-model layer (-1 outside the layers); `replicated` marks norms, which every TP rank
    holds whole; `castable` marks float weights an engine loads into the model dtype (a float32 copy of a
    bf16 model is served in bf16), where scales and packed data stay as stored.
    """

    component: str
    layer: int
    replicated: bool
    dtype: str
    castable: bool
    tensors: int
    bytes: int
    expert: bool = False   # a routed expert's tensor (`.experts.`, not `shared_experts`): spread over the MoE ranks
    attention: bool = False  # an attention tensor (`self_attn.`): split over the attention TP ranks
    kv: bool = False  # a k_proj / v_proj tensor: whole KV heads a rank, one past TP = KV heads (kvplan.model.ranks)

    def resident(self, model_dtype: DType, keep_f32: bool = False) -> int:
        """Bytes once loaded: castable floats in the model dtype, everything else as stored (`keep_f32`: float32
        tensors too, in a checkpoint that stores its other floats in 16 bits)."""
        if not self.castable or (keep_f32 and self.dtype == "F32"):
            return self.bytes
        elements = self.bytes * 8 // DTYPE_BITS[self.dtype]
        return ceil(elements * model_dtype.bits / 8)


@dataclass(frozen=True)
class CheckpointWeights:
    """A checkpoint's tensors by component, layer and dtype; `source` says where the headers came from."""

    source: str
    rows: tuple[WeightRow, ...]
    files: int

    @cached_property  # every stage of a plan asks (is it complete?): summed once
    def stored_bytes(self) -> int:
        return sum(r.bytes for r in self.rows)

    @cached_property
    def tensors(self) -> int:
        return sum(r.tensors for r in self.rows)

    def by_component(self) -> dict[str, int]:
        out = dict.fromkeys(COMPONENTS, 0)
        for r in self.rows:
            out[r.component] += r.bytes
        return {k: v for k, v in out.items() if v}

    def by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for r in self.rows:
            out[r.dtype] += r.bytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def has(self, component: str) -> bool:
        return component in self._components

    @cached_property
    def _components(self) -> frozenset[str]:
        return frozenset(r.component for r in self.rows)

    @cached_property
    def keeps_f32(self) -> bool:
        """True when float32 tensors sit among 16-bit floats: the model keeps those in float32 on purpose
        (MiniMax-M2's router and e_score_correction_bias: vllm 0.19 minimax_m2.py builds the gate with
        params_dtype=torch.float32), where an all-float32 checkpoint is a copy served in the model dtype."""
        return any(r.castable and r.dtype in ("F16", "BF16") for r in self.rows)

    def resident_bytes(self, model_dtype: DType, skip: frozenset[str] = frozenset({"mtp"})) -> int:
        """Bytes one copy of the loaded model holds (MTP layers are not loaded without speculative decoding)."""
        keep = self.keeps_f32
        return sum(r.resident(model_dtype, keep) for r in self.rows if r.component not in skip)

    def stage_bytes(self, model_dtype: DType, tp: int, layers: range, first: bool, last: bool, tied: bool,
                    skip: frozenset[str] = frozenset({"mtp"}), moe_ranks: int | None = None,
                    attn_ranks: int | None = None, head_everywhere: bool = False,
                    towers_everywhere: bool = False, ranks: RankRules | None = None) -> int:
        """One GPU's share: TP rank of the pipeline stage owning `layers` (vLLM's layout, as
        kvplan.weights.split prices the config rule): layers to their stage, embeddings and towers to the
        first, lm_head and final norm to the last (a tied head materialised there again when PP > 1), everything
        split across TP ranks but norms; routed experts across `moe_ranks` (TP x DP; TP when None), attention
        across `attn_ranks` (SGLang's TP / DP with DP attention; TP when None); `head_everywhere`: the lm_head on
        every stage (SGLang's Llama); `towers_everywhere`: the towers on every stage (SGLang's Qwen3.5); `ranks`: how
        the engine splits the vocabulary, KV heads and experts (`RankRules`; None: plain splits)."""
        parts = self._shares(model_dtype, tp, skip, moe_ranks or tp, attn_ranks or tp, ranks or RankRules())
        total = layers_span(parts.prefix, layers)
        total += (parts.first if first else 0) + (parts.last if last else 0)
        total += parts.towers if first or towers_everywhere else 0
        total += parts.head if last or head_everywhere else 0
        copy_head = tied and last and not first and not self.has("lm_head")
        return total + (parts.embeddings_share if copy_head else 0)

    @cached_property
    def _share_tables(self) -> dict:
        return {}

    def _shares(self, model_dtype: DType, tp: int, skip: frozenset[str], moe_ranks: int,
                attn_ranks: int, rules: RankRules) -> _Shares:
        """Each row's share on one rank, summed by where a stage takes it, once per dtype and layout: a stage is
        two lookups (a 10,000-layer checkpoint over PP 10,000 summed every row once per stage)."""
        key = (model_dtype, tp, skip, moe_ranks, attn_ranks, rules)
        if key not in self._share_tables:
            keep = self.keeps_f32
            layer_rows = [r for r in self.rows if r.layer >= 0 and r.component == "language_model"]
            per_layer = [0] * (max((r.layer for r in layer_rows), default=-1) + 1)
            first = towers = last = head = whole = 0
            for r in self.rows:
                if r.component in skip:
                    continue
                size = r.resident(model_dtype, keep)
                share = rules.share(r, size, tp, moe_ranks, attn_ranks)
                if r.layer >= 0 and r.component == "language_model":
                    per_layer[r.layer] += share
                elif r.component == "embeddings":
                    first += share
                    whole += share
                elif r.component in TOWERS:
                    towers += share
                elif r.component == "lm_head":
                    head += share
                else:  # the final norm
                    last += share
            prefix = [0]
            for share in per_layer:
                prefix.append(prefix[-1] + share)
            self._share_tables[key] = _Shares(tuple(prefix), first, towers, last, head, whole)
        return self._share_tables[key]


@dataclass(frozen=True)
class _Shares:
    prefix: tuple[int, ...]   # layers 0 to i - 1
    first: int                # the embeddings
    towers: int               # vision / audio towers: the first stage's, or every stage's (SGLang's Qwen3.5)
    last: int                 # the final norm (and what else only the last stage holds)
    head: int                 # the lm_head: the last stage's, or every stage's (SGLang's Llama)
    embeddings_share: int     # one rank's embeddings: what a tied head materialises again on the last stage


@dataclass(frozen=True)
class RankRules:
    """What a checkpoint's rows need from the config to split as the engine does (kvplan.model.ranks): the
    vocabulary (0: a plain split, as for a model with learned positions in its embeddings rows), the padding rule
    it takes (kvplan.model.ranks.vocab_rule), the KV heads (0: a plain split) and each layer's routed experts, whole
    under expert parallelism."""

    vocab: int = 0
    vocab_rule: str = ""
    kv_heads: int = 0
    experts: tuple[int, ...] = ()
    expert_parallel: bool = False

    def share(self, r: WeightRow, size: int, tp: int, moe_ranks: int, attn_ranks: int) -> int:
        """The row's bytes on one rank, by the config rule's own split (kvplan.model.ranks.rank_share)."""
        split: tuple = ()
        if self.vocab and r.component in ("embeddings", "lm_head"):
            split = ("vocab", self.vocab)
        elif r.expert:
            split = ("experts", self.experts[r.layer] if 0 <= r.layer < len(self.experts) else 0)
        elif r.kv and self.kv_heads:   # a k / v projection: its rows are whole KV heads
            split = ("kv", 0, self.kv_heads, self.kv_heads)
        group = "experts" if r.expert else "attention" if r.attention else ""
        return rank_share(group, size, r.replicated, split, tp, moe_ranks, attn_ranks, self.vocab_rule,
                          self.expert_parallel)


@dataclass(frozen=True)
class CheckpointTotal:
    """What a bundled record knows when no per-tensor header was found: the checkpoint's total stored bytes
    (an index's metadata.total_size, summed shard sizes, a quoted hf-mem sum) and why the config rule differs."""

    total_bytes: int
    what: str
    source: str
    explained: str = ""
