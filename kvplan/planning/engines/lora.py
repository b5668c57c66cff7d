"""LoRA adapter slots the engines preallocate at start-up, before the KV cache is sized.

vLLM 0.33 (lora/layers/*.py, `create_lora_weights`): every linear layer of the model gets stacked A / B buffers
for `max_loras` adapters of rank `max_lora_rank`, in the LoRA dtype (the model dtype by default), and so do
embed_tokens and lm_head for models that list them in `embedding_modules` (Llama, Qwen, Mistral and most
causal LMs). Per slot and layer:

    qkv      A 3 x [R, H]          B [R, (q + 2 kv) / TP]      (column-parallel: A whole, B split)
    o        A [R, q / TP]         B [H, R]                    (row-parallel: A split, B whole)
    gate_up  A 2 x [R, H]          B [R, 2 I / TP]
    down     A [R, I / TP]         B [H, R]
    = R x (7 H + 2 q / TP + 2 kv_rank + 3 I / TP), kv_rank = max(1, KV heads / TP) x head_dim
    embed_tokens A [R, V] + B [H, R];  lm_head A [R, H] + B [V, R]   (whole vocabulary, not split)
    routed experts: E_rank x R x (3 H + 3 I_rank)

Llama-3.1-8B, TP 1, 4 adapters of rank 16, bf16: 4 x 16 x (32 x 81,920 + 2 x 132,352) x 2 B = 369,426,432 B. The
buffers are allocated with the weights, so vLLM's "Model loading took" includes them; its CUDA graphs are
captured twice (with and without active adapters).

SGLang 0.5.23 (srt/lora/mem_pool.py): `max_loras_per_batch` (default 8) slots for the targeted modules (default:
all linear layers), no embed_tokens or lm_head unless asked, with the same per-layer shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import WorkloadError, shown
from ...model.arch import AttentionDims, MLPDims, MoEDims


@dataclass(frozen=True)
class LoraSettings:
    max_loras: int          # vLLM --max-loras (default 1); SGLang --max-loras-per-batch (default 8)
    max_lora_rank: int      # --max-lora-rank (vLLM default 16)
    embeddings: bool = True  # vLLM: embed_tokens and lm_head slots (embedding_modules); SGLang: off by default


def check(lora: LoraSettings) -> LoraSettings:
    for name, value, top in (("max_loras", lora.max_loras, 1024), ("max_lora_rank", lora.max_lora_rank, 4096)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise WorkloadError(f"{name} must be a whole number from 1 to {top}, got {shown(value)}")
    return lora


def lora_bytes(shape, lora_dtype_bytes: int, tp: int, moe_ranks: int, lora: LoraSettings,
               layers: range | None = None, expert_parallel: bool = False) -> tuple[int, str]:
    """(bytes one rank holds for the adapter slots of the layers in `layers`, the formula).

    The experts' slots follow the MoE layer's own split (vLLM 0.33 lora/layers/fused_moe.py: `local_num_experts`
    and `intermediate_size_per_partition` of its moe_config): under expert parallelism whole experts,
    ceil(E / moe_ranks) on the heaviest rank; without it every expert, its intermediate split over all `moe_ranks`
    (FusedMoE flattens TP x DP into its TP when EP is off). Mixtral at TP 1 x DP 2 without EP: 8 experts x
    14,336 / 2 rows each, not 4 whole experts."""
    H, R, L = shape.hidden, lora.max_lora_rank, lora.max_loras
    layers = layers if layers is not None else range(len(shape.layers))
    per_slot = 0
    for i in layers:
        layer = shape.layers[i]
        m = layer.mixer
        if isinstance(m, AttentionDims) and not m.kv_lora_rank:
            q = m.heads * m.head_dim
            kv_rank = max(1, m.kv_heads // tp) * m.head_dim
            per_slot += R * (4 * H + 2 * q // tp + 2 * kv_rank)
        f = layer.ffn
        if isinstance(f, MLPDims):
            per_slot += R * (3 * H + 3 * f.intermediate // tp)
        elif isinstance(f, MoEDims):
            experts = -(-f.experts // moe_ranks) if expert_parallel else f.experts
            inter = f.expert.intermediate if expert_parallel else f.expert.intermediate // moe_ranks
            per_slot += R * experts * (3 * H + 3 * inter)
            if f.shared:
                per_slot += R * (3 * H + 3 * f.shared.intermediate // tp)
    embed = 2 * R * (shape.vocab + H) if lora.embeddings else 0
    total = L * (per_slot + embed) * lora_dtype_bytes
    return total, (f"LoRA slots = {L} adapters x ({per_slot:,} layer + {embed:,} embed/lm_head elements at rank {R}) "
                   f"x {lora_dtype_bytes} B = {total:,} B")


def unsupported(shape) -> str | None:
    """Why kvplan cannot size the slots for this model, or None (MLA's low-rank projections are not modelled)."""
    if any(isinstance(layer.mixer, AttentionDims) and layer.mixer.kv_lora_rank for layer in shape.layers):
        return "kvplan sizes LoRA slots for MHA / GQA attention, not MLA's low-rank projections"
    if any(layer.mixer is not None and not isinstance(layer.mixer, AttentionDims) for layer in shape.layers):
        return "kvplan sizes LoRA slots for attention models, not Mamba / linear-attention mixers"
    if any(_own_linears(layer) for layer in shape.layers):
        # vLLM wraps every linear it supports (LFM2's short-conv in_proj / out_proj, MiMo-V2-Flash's own
        # attention shapes), which the q/k/v/o + gate/up/down sum above does not describe
        return ("kvplan sizes LoRA slots for the standard attention and MLP projections, and this model's blocks "
                "carry linears of their own (a short convolution or family-specific projections)")
    return None


def _own_linears(layer) -> bool:
    """A block whose weights are not the dims' standard projections: a mixer that is only family tensors
    (LFM2's short convolution), tensors that replace the dims', or extra matrices in a projection group."""
    if layer.mixer is None and layer.extra or not (layer.mixer_weights and layer.ffn_weights):
        return True
    return any(matrix is not None and group in ("attention", "mlp", "experts", "shared_experts", "mixer")
               for group, _, matrix, *_ in layer.extra)
