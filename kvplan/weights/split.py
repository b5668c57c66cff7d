"""How a model's weights land on each GPU under tensor and pipeline parallelism (vLLM's layout).

Projections, experts and the vocabulary-parallel embedding / lm_head are split across TP ranks; norms are
replicated. The vocabulary pads first (64 rows in vLLM), KV heads are whole past TP = kv_heads, and expert
parallelism puts whole experts on a rank, the heaviest ceil(E / EP) of them (kvplan.model.ranks). Pipeline stages
hold their own layers, the first stage the embeddings, the last the final norm and the lm_head (a tied lm_head is
materialised again on the last stage when PP > 1).
Llama-3.1-8B bf16: TP1 14.96 GiB; TP2 7.48 GiB per rank; PP2 stage 0: embeddings 0.98 + 16 layers x 0.41 GiB.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from math import ceil

from ..dtypes import DType
from ..model.arch import ArchShape, AttentionDims, MoEDims, QuantDims
from ..model.checkpoint import RankRules
from ..model.layers import MLASpec
from ..model.ranks import layers_span, rank_share
from .rule import priced_tensors, weights_bytes

TOWER_GROUPS = frozenset({"vision", "projector", "audio"})
ONLINE_QUANT = {
    # vLLM `--quantization fp8` on a 16-bit checkpoint: per-tensor fp8 weights for every linear layer
    "fp8": QuantDims(method="fp8", bits=8, float_weights=True, strategy="tensor"),
}


def with_online_quant(shape: ArchShape, quantization: str | None) -> ArchShape:
    if not quantization or quantization in ("none", "None") or shape.quant is not None:
        return shape
    if not isinstance(quantization, str) or quantization not in ONLINE_QUANT:
        from ..errors import WorkloadError, shown

        raise WorkloadError(f"online quantization {shown(quantization)} is not modelled: use fp8, or a quantized "
                            "checkpoint whose config.json has a quantization_config")
    return _online_quant(shape, quantization)


@lru_cache(maxsize=64)  # one shape per (shape, method): every plan of it hits the same caches (see `interned`)
def _online_quant(shape: ArchShape, quantization: str) -> ArchShape:
    return dataclasses.replace(shape, quant=ONLINE_QUANT[quantization])


def stage_weight_bytes(shape: ArchShape, dtype: DType, tp: int, layers: range, first: bool, last: bool,
                       towers: bool = True, moe_ranks: int | None = None, attn_ranks: int | None = None,
                       head_everywhere: bool = False, towers_everywhere: bool = False, vocab_rule: str = "pad64",
                       expert_parallel: bool = False) -> int:
    """Bytes of weights one GPU holds: TP rank of the pipeline stage owning `layers`; a multimodal model's vision
    tower and projector on the first stage, split across TP ranks (`towers=False`: language-model-only serving).
    `moe_ranks`: the ranks the routed experts are spread over, TP x DP in vLLM (whole experts with
    --enable-expert-parallel, each one TP-sharded over all of them without; the bytes are the same), TP when None.
    `attn_ranks`: the ranks attention is split over, SGLang's attention TP = TP / DP with DP attention.
    `head_everywhere`: the lm_head on every pipeline stage, not the last alone (SGLang's Llama builds it on every
    PP rank: 0.5.23 models/llama.py LlamaForCausalLM.__init__, no is_last_rank gate; 2.10 GB a stage at TP1 for
    Llama-3.1-70B's 128,256 x 8,192 head).
    `towers_everywhere`: the vision tower on every pipeline stage, not the first alone (SGLang's Qwen3.5 builds it
    on every PP rank: 0.5.23 models/qwen3_vl.py Qwen3VLForConditionalGeneration.__init__, no pp gate).
    `vocab_rule`: how the embeddings and head pad their rows before the split (kvplan.model.ranks.vocab_rule:
    "pad64" for vLLM, "pad64_tp" for SGLang 0.5.22+, "" for none).
    `expert_parallel`: whole routed experts over the MoE ranks, the heaviest rank's ceil(E / EP) (vLLM's
    --enable-expert-parallel, SGLang's --ep-size); else each expert sharded over all of them.

    Cached: the shape, dtype and range are immutable and hashable, and walking DeepSeek-V3's ~900-tensor
    inventory twice cost ~10 ms of every plan() (a planner sweep asks for the same stages again and again).
    """
    return _stage_weight_bytes(shape, dtype, tp, layers, first, last, towers, moe_ranks or tp, attn_ranks or tp,
                               head_everywhere, towers_everywhere, vocab_rule, expert_parallel)


@lru_cache(maxsize=4096)
def _stage_weight_bytes(shape: ArchShape, dtype: DType, tp: int, layers: range, first: bool, last: bool,
                        towers: bool, moe_ranks: int, attn_ranks: int, head_everywhere: bool = False,
                        towers_everywhere: bool = False, vocab_rule: str = "pad64",
                        expert_parallel: bool = False) -> int:
    parts = _stage_parts(shape, dtype, tp, moe_ranks, attn_ranks, vocab_rule, expert_parallel)
    total = parts.layers(layers) + parts.every_stage
    total += (parts.towers if towers and (first or towers_everywhere) else 0) + (parts.embeddings if first else 0)
    total += (parts.last if last else 0) + (parts.head if last or head_everywhere else 0)
    tied_embedding = parts.tied_head if shape.tied_embeddings and last and not first else 0
    return total + tied_embedding + ceil(parts.buffers * len(layers) / max(1, len(shape.layers)))


@dataclasses.dataclass(frozen=True)
class _StageParts:
    """One rank's share of each tensor (`rank_share`), summed by where a stage takes it: `prefix[i]` is layers 0 to
    i - 1, so a stage's layers cost two lookups whatever their number (a 10,000-layer config over PP 10,000 walked
    every tensor once per stage: 86 s)."""

    prefix: tuple[int, ...]
    every_stage: int        # outside the layers and no component's own (taken by every stage)
    towers: int
    embeddings: int
    tied_head: int          # one rank's share of embed_tokens: the tied head the last stage materialises again
    last: int               # the final norm
    head: int               # the lm_head: the last stage's, or every stage's (SGLang's Llama)
    buffers: int

    def layers(self, layers: range) -> int:
        return layers_span(self.prefix, layers)


@lru_cache(maxsize=256)
def _stage_parts(shape: ArchShape, dtype: DType, tp: int, moe_ranks: int, attn_ranks: int,
                 vocab_rule: str = "pad64", expert_parallel: bool = False) -> _StageParts:
    priced = priced_tensors(shape, dtype)

    def share(group: str, size: int, whole: bool, split: tuple = ()) -> int:
        return rank_share(group, size, whole, split, tp, moe_ranks, attn_ranks, vocab_rule, expert_parallel)

    kinds: dict[int, int] = {}   # layers alike share one tuple of priced tensors: summed once
    prefix = [0]
    for rows in priced.layers:
        if id(rows) not in kinds:
            kinds[id(rows)] = sum(share(group, size, whole, split) for group, _, size, whole, split in rows)
        prefix.append(prefix[-1] + kinds[id(rows)])
    sums = dict.fromkeys(("every", "towers", "embeddings", "tied", "last", "head"), 0)
    towers = _priced(shape, dtype)
    for group, size, whole, split in ([(g, b, w, s) for g, _, b, w, s in priced.outer]
                                      + [(g, b, False, ()) for g, b in towers.towers]):
        where = ("towers" if group in TOWER_GROUPS else "embeddings" if group == "embeddings"
                 else "head" if group == "lm_head" else "last" if group == "norms" else "every")
        part = share(group, size, whole, split)
        sums[where] += part
        if group == "embeddings" and split:   # embed_tokens, not GPT-2's learned positions: what a tied head is
            sums["tied"] += part
    return _StageParts(tuple(prefix), sums["every"], sums["towers"], sums["embeddings"], sums["tied"], sums["last"],
                       sums["head"], towers.buffers_bytes)


def checkpoint_for(model, shape: ArchShape):
    """The checkpoint summary a plan prices, or None for the config rule: none was read, online quantization
    (`--quantization fp8`) rewrites what the checkpoint stores, which the config rule prices, or the checkpoint is
    incomplete (`incomplete_checkpoint`)."""
    if model.checkpoint is None or shape is not model.arch or incomplete_checkpoint(model):
        return None
    return model.checkpoint


# A checkpoint stores at least this share of what its config implies: a 4-bit one whose config lacks its
# quantization_config stores about 30 % of the 16-bit rule, a 2-bit one 15 %. Below it, shards are missing.
COMPLETE_SHARE = 0.1


def incomplete_checkpoint(model) -> str | None:
    """Why the model's checkpoint cannot be its weights: it stores under a tenth of the bytes the config rule says
    it stores (one shard of several, a header of one norm per layer), or None. Priced once per shape."""
    if model.checkpoint is None or model.arch is None:
        return None
    expected = whole_model(model.arch, model.arch.dtype)[2]
    stored = model.checkpoint.stored_bytes
    if stored >= COMPLETE_SHARE * expected:
        return None
    return (f"the checkpoint's headers ({model.checkpoint.source}) hold {stored:,} B, {stored / expected:.2%} of "
            f"the {expected:,} B its config implies: the checkpoint is incomplete, so the weights come from the "
            "config rule (finish the download for its exact bytes)")


def gpu_weight_bytes(model, shape: ArchShape, dtype: DType, tp: int, layers: range, first: bool, last: bool,
                     towers: bool = True, moe_ranks: int | None = None, attn_ranks: int | None = None,
                     head_everywhere: bool = False, towers_everywhere: bool = False, vocab_rule: str = "pad64",
                     expert_parallel: bool = False) -> int:
    """One GPU's weights: from the checkpoint's headers when the model has them, else the config rule."""
    found = checkpoint_for(model, shape)
    if found is None:
        return stage_weight_bytes(shape, dtype, tp, layers, first, last, towers, moe_ranks, attn_ranks,
                                  head_everywhere, towers_everywhere, vocab_rule, expert_parallel)
    skip = frozenset({"mtp"}) if towers else frozenset({"mtp"}) | TOWER_GROUPS
    return found.stage_bytes(dtype, tp, layers, first, last, shape.tied_embeddings, skip, moe_ranks or tp,
                             attn_ranks or tp, head_everywhere, towers_everywhere,
                             rank_rules(shape, vocab_rule, expert_parallel))


@lru_cache(maxsize=256)
def rank_rules(shape: ArchShape, vocab_rule: str, expert_parallel: bool) -> RankRules:
    """What a checkpoint's rows need from the config to split as the rule does: the vocabulary (none where the
    embeddings rows also hold learned positions, which are not vocabulary rows), one KV head count when every
    attention layer has the same (else a plain split), each layer's routed experts."""
    kv = {l.mixer.kv_heads for l in shape.layers if isinstance(l.mixer, AttentionDims) and not l.mixer.kv_lora_rank}
    experts = tuple(l.ffn.experts if isinstance(l.ffn, MoEDims) else 0 for l in shape.layers)
    return RankRules(0 if shape.learned_positions else shape.vocab, vocab_rule, kv.pop() if len(kv) == 1 else 0,
                     experts, expert_parallel)


@lru_cache(maxsize=256)
def whole_model(shape: ArchShape, dtype: DType) -> tuple[int, tuple[tuple[str, int], ...], int]:
    """(language-model bytes, the towers' (component, bytes), what the rule says the checkpoint stores), priced
    once per shape and dtype: every plan reports them, and pricing DeepSeek-V3 costs ~8 ms."""
    from .rule import stored_bytes_by_rule

    priced = _priced(shape, dtype)
    return priced.total_bytes, priced.towers, stored_bytes_by_rule(shape, _priced(shape, shape.dtype))


@lru_cache(maxsize=256)
def _priced(shape: ArchShape, dtype: DType):
    return weights_bytes(shape, dtype)


LEARNED_POSITIONS = {"gpt2", "gpt_bigcode", "opt", "bloom", "mamba", "falcon_mamba", "mamba2"}


def rope_cache_bytes(model, act: DType, per_layer_type: bool = False) -> int:
    """vLLM builds one rotary cos/sin table per distinct RoPE on each GPU: max_position x rotary width in the
    model dtype (Llama-3.1-8B: 131,072 x 128 x 2 B = 32 MiB, the gap between 14.96 GiB of parameters and the
    14.99 GiB vLLM reports). The width is the rotating part of a head (Qwen3-Next: 256 x 0.25 = 64; MLA: the
    64-wide RoPE key); Gemma 3 keeps two tables (local and global bases). A linear-scaled RoPE caches
    max_position x factor positions (vllm 0.11-0.19 rotary_embedding/linear_scaling_rope.py: "the maximum length
    after applying the rope scaling is self.max_position_embeddings * self.scaling_factor"): gemma-3-4b-it's
    global table is 131,072 x 8 x 256 x 2 B = 512 MiB, its local one 64 MiB. `per_layer_type` (vLLM): a table per
    layer type's RoPE where the config sets them so (`ArchDims.rope_widths`): gemma-4-31B-it 262,144 x (256 + 512)
    x 2 B = 384 MiB; SGLang's Gemma 4 tables are not read (one table)."""
    dims = model.dims
    if model.model_type in LEARNED_POSITIONS or dims is None or not dims.max_position_embeddings:
        return 0
    if per_layer_type and dims.rope_widths:
        return dims.max_position_embeddings * sum(dims.rope_widths) * int(act.bytes)
    if model.is_mla:
        spec = next(s for _, s in model.specs() if isinstance(s, MLASpec))
        width = spec.qk_rope_head_dim
    elif model.head_dim:
        width = dims.rotary_dim or int(model.head_dim * dims.rotary_fraction)
    else:
        return 0
    positions = dims.max_position_embeddings
    scaled = int(positions * dims.rope_linear_factor)
    return ((dims.rope_tables - 1) * positions + scaled) * width * int(act.bytes)
