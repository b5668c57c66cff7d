"""A model's architecture in kvplan's own terms: what the weights estimate counts, layer by layer.

Plain frozen dataclasses, no Hugging Face field names: `kvplan.config.arch.read_arch` builds an `ArchShape`
from a config.json (and `kvplan.config.quant.parse_quant` its `QuantDims`), `kvplan.weights` prices it,
`kvplan.planning.engines.hf_peak` sizes activations from it.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from dataclasses import dataclass, field, fields
from functools import cached_property

from ..dtypes import DType


@dataclass(frozen=True)
class AttentionDims:
    """One attention block. `kv_heads` is what the K/V projections emit (Falcon-7B multi_query: 1)."""

    heads: int
    kv_heads: int
    head_dim: int  # Q and K per head; MLA: qk_nope + qk_rope
    v_head_dim: int
    q_bias: bool = False
    k_bias: bool = False
    v_bias: bool = False
    o_bias: bool = False
    fused_qkv: bool = False  # one [q+k+v, hidden] matrix (GPT-2, NeoX, Falcon, Phi-3): same count, other blocks
    qk_norm: str = "none"  # "head": [head_dim] (Qwen3, Gemma 3); "proj": all heads (OLMo-2); "head_ln": Phi LayerNorm
    q_gate: bool = False  # Qwen3-Next: q_proj emits an output gate too, doubling its rows
    sinks: bool = False  # gpt-oss: one learned sink logit per head
    q_lora_rank: int | None = None  # MLA (DeepSeek-V2/V3): set with kv_lora_rank
    kv_lora_rank: int | None = None
    qk_rope_dim: int = 0
    indexer: tuple[int, int] | None = None  # DeepSeek-V3.2 lightning indexer: (index_n_heads, index_head_dim)


@dataclass(frozen=True)
class MambaDims:
    """A Mamba-1 mixer: in_proj [2I, H], depthwise conv [I, k], x_proj [dt + 2S, I], dt_proj, A_log [I, S], D [I]."""

    inner: int
    state: int
    conv_kernel: int
    dt_rank: int
    conv_bias: bool = True
    proj_bias: bool = False
    inner_norms: bool = False  # Jamba: RMSNorm weights on dt [dt_rank], B and C [state]
    a_log_fp32: bool = False  # Zamba: A_log built from a float32 arange, float32 in a bf16 model


@dataclass(frozen=True)
class Mamba2Dims:
    """A Mamba-2 mixer (transformers 5.24 Mamba2Mixer, NemotronHMamba2Mixer): in_proj [inner + conv_dim + heads, H],
    depthwise conv over conv_dim = inner + 2 x groups x state channels, dt_bias / A_log / D [heads], a gated RMSNorm
    [inner], out_proj [H, inner]. Nemotron-H-56B: 256 heads x 64 = 16,384 inner, conv 16,384 + 2 x 8 x 256 = 20,480."""

    inner: int
    heads: int
    conv_dim: int
    conv_kernel: int
    conv_bias: bool = True
    proj_bias: bool = False


@dataclass(frozen=True)
class DeltaNetDims:
    """Qwen3-Next Gated DeltaNet: in_proj_qkvz, in_proj_ba, conv over q/k/v channels, out_proj, per-head A and dt."""

    k_heads: int
    v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int


@dataclass(frozen=True)
class MLPDims:
    """A feed-forward block: gated (gate, up, down; SwiGLU/GeGLU) or not (up, down)."""

    intermediate: int
    gated: bool = True
    bias: bool = False
    fused_gate_up: bool = False  # Phi-3 stores gate and up as one matrix


@dataclass(frozen=True)
class MoEDims:
    """Routed experts (each an `expert` MLP), an optional shared MLP and the router."""

    experts: int
    top_k: int
    expert: MLPDims
    shared: MLPDims | None = None  # DeepSeek: n_shared_experts x moe_intermediate as one MLP
    shared_gate: bool = False  # Qwen3-Next: Linear(hidden, 1) gating the shared expert
    router_bias: bool = False  # gpt-oss
    router_fp32: bool = False  # DeepSeek: transformers keeps gate.weight in fp32 (_keep_in_fp32_modules_strict)
    score_bias: bool = False  # DeepSeek-V3: e_score_correction_bias, a persistent fp32 buffer [experts]
    score_fp32: bool = True  # the buffer's dtype: float32 (DeepSeek), or the model's (MiniMax-M2: bf16)
    score_param: bool = False  # ERNIE-4.5-MoE: the same correction bias as a parameter [1, experts]
    # Nemotron-H latent MoE (moe_latent_size): the experts work in a [latent] space, entered and left through
    # fc1_latent_proj [latent, H] and fc2_latent_proj [H, latent]; 0: the experts read the hidden state itself
    latent: int = 0
    latent_bias: bool = False
    # DeepSeek-V4 hash_moe layers route by token id: tid2eid, a persistent int64 buffer [vocab, top_k]
    # (DeepseekV4HashRouter); 0: a learned router picks the experts
    hash_vocab: int = 0


@dataclass(frozen=True)
class LayerDims:
    """One decoder block: a mixer, a feed-forward (None for pure Mamba blocks) and `norms` hidden-size norms.

    `extra`: (group, elements) of the tensors a family adds that the dims above do not describe, read off
    transformers' modules by tools/gen_family_traits.py (AFMoE's attention output gate [q_dim, hidden]); a layer
    whose mixer is only such tensors (LFM3's short-conv blocks) has `mixer` None.
    """

    mixer: AttentionDims | MambaDims | Mamba2Dims | DeltaNetDims | None
    ffn: MLPDims | MoEDims | None
    norms: int
    # (group, elements, matrix shape or None[, True: float32 whatever the model dtype])
    extra: tuple[tuple, ...] = ()
    # False where the family's tensors differ from what the dims would build (RemBERT, Fuyu): the dims still size
    # activations and TP splits, and the weights are the family's own tensors, listed in `extra`
    mixer_weights: bool = True
    ffn_weights: bool = True


@dataclass(frozen=True)
class QuantDims:
    """A checkpoint's `quantization_config`, in kvplan's terms (see kvplan.weights for the byte rules).

    `skip` holds (group, layer) pairs left unquantized; layer -1 means every layer. A group may name one
    projection of it, "mixer/in_proj_ba" (Gated DeltaNet's in_proj_b and in_proj_a, `Tensor.part`).
    """

    method: str  # fp8 | gptq | awq | compressed-tensors | mxfp4 | bitsandbytes | modelopt | auto-round
    bits: int
    float_weights: bool = False  # fp8 / float-quantized compressed-tensors
    strategy: str = "channel"  # tensor | channel | group | tensor_group | block
    group_size: int | None = None
    block: tuple[int, int] | None = None
    symmetric: bool = True
    static_input_scale: bool = False
    g_idx: bool = False
    packed: bool = False  # compressed-tensors pack-quantized (int32 words)
    double_quant: bool = False  # bitsandbytes 4-bit nested absmax
    scale_bytes: int | None = None  # None: the method's default (fp8 fp32, GPTQ/AWQ fp16, compressed: model dtype)
    global_scales: int = 0  # fp32 per-tensor scales on top (NVFP4: weight_global_scale, input_global_scale)
    skip: frozenset = frozenset()
    lm_head: bool = False  # GPTQ `lm_head: true` quantizes the output projection too
    algo: str = ""  # ModelOpt quant_algo (FP8, NVFP4, W4A16_NVFP4, ...); auto-round: its packing_format
    # ModelOpt MIXED_PRECISION: ((group, layer, part), scheme) for each projection `quantized_layers` names; every
    # projection it does not name stays in the model dtype. Empty: this scheme for every projection not in `skip`.
    layers: tuple[tuple[tuple[str, int, str], "QuantDims"], ...] = ()
    kv_cache_dtype: str | None = None  # the KV cache dtype the checkpoint was calibrated for ("fp8"), if it says
    # the routed experts' own format where it differs from the rest: DeepSeek-V4's fp8 checkpoint with
    # expert_dtype "fp4" (transformers 5.24 FP8Experts: e2m1 pairs in int8 + a scale per 32 inputs)
    experts: "QuantDims | None" = None


@dataclass(frozen=True)
class EagleFc:
    """An EAGLE-3 head's fc: it maps `aux_states` of the target's hidden states, each `target_hidden` wide, to the
    head's hidden size (vLLM 0.33 and SGLang 0.5.23 llama_eagle3.py: fc [hidden, target_hidden_size x
    num_aux_hidden_states]). yuhuili's head for Llama-3.1-8B: 3 x 4,096 into 4,096, 100,663,296 B in bf16."""

    target_hidden: int          # target_hidden_size, or the head's hidden_size
    aux_states: int             # num_aux_hidden_states, or len(eagle_config.eagle_aux_hidden_state_layer_ids), or 3
    norm_before_fc: bool = False   # an RMSNorm over the whole fc input (input_norm)
    fc_norm: bool = False          # one RMSNorm per aux state, each target_hidden wide
    unsized: str = ""           # a setting the engines read apart, which kvplan does not size: named, refused


@dataclass(frozen=True)
class ArchShape:
    """Everything the parameter count needs, per layer. Built only by `parse_dims`."""

    model_type: str
    hidden: int
    vocab: int
    layers: tuple[LayerDims, ...]
    dtype: DType
    tied_embeddings: bool
    norm_bias: bool = False  # LayerNorm (weight + bias) rather than RMSNorm (weight)
    lm_head_bias: bool = False  # GPT-J, Phi-2
    learned_positions: int = 0  # GPT-2 / GPT-BigCode wpe rows
    mtp_layers: int = 0  # DeepSeek-V3 num_nextn_predict_layers: in the checkpoint, not in transformers' model
    # MTP modules a config declares that no engine loads or drafts with (MiniMax-M2's num_mtp_modules 3): the
    # sentence saying so, for `--speculative mtp` to refuse with
    mtp_unloaded: str = ""
    layer_extra: int = 0  # learned scalars per block outside every group (Apertus' xIELU alphas: 2 per layer)
    layer_buffers: int = 0  # persistent buffer elements per block, in the model dtype (Gemma 4's layer_scalar: 1)
    final_norm: bool = True  # a norm after the last block (kvplan.config.traits: read off the family's modules)
    # (group, elements, matrix[, True: float32 whatever the model dtype]) of tensors outside the blocks: BERT's
    # token-type embeddings, DeepSeek-V4's float32 final norm and hc_head
    extra: tuple[tuple, ...] = ()
    top_dims: bool = True  # False: embeddings, final norm and lm_head are the family's own tensors, in `extra`
    # multimodal: (component, parameters) of the vision tower and projector (kvplan.config.towers), or the
    # sentence saying which tower the rule cannot count
    towers: tuple[tuple[str, int], ...] = ()
    towers_missing: str | None = None
    image_tokens: tuple[int, int] = (0, 0)  # (embeddings, placeholder span) of the largest image; 0: not known
    vit: tuple[str, int, int] | None = None  # (architecture, tower layers, tower hidden) as SGLang reads them
    quant: QuantDims | None = None
    draft_vocab: int = 0  # an EAGLE-3 head's draft_vocab_size (its lm_head rows); 0 for other models
    eagle_fc: EagleFc | None = None   # an EAGLE-3 head's fc; None for other models
    # OPT's word_embed_proj_dim where it is not hidden (opt-350m: 512 of 1,024): embed_tokens and lm_head
    # [vocab, embed_dim], with project_in [hidden, embed_dim] and project_out [embed_dim, hidden]; 0: hidden
    embed_dim: int = 0
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __hash__(self) -> int:
        """Hashed once per shape: the planner's caches key on it, and DeepSeek-V3's 61 layers of nested dims cost
        ~0.05 ms a hash (a quarter of a plan). Same fields as the generated __eq__ compares."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:
        """Pickled without the cached hash: string hashes differ between processes."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __reduce__(self):
        """Unpickled as the live shape equal to it (`interned`): the web app's st.cache_data hands every rerun a
        pickled copy of the model, and an equal but distinct shape made each planner cache lookup compare 10,000
        layers (a Capacity rerun of a 10,000-layer upload took 35-40 s)."""
        return _unpickled, (self.__getstate__(),)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @cached_property
    def has_experts(self) -> bool:
        """Any layer with routed experts (what expert parallelism, vLLM's V2-runner rule and MoE notes ask)."""
        return any(isinstance(layer.ffn, MoEDims) for layer in self.layers)


_SHAPES: dict[int, list[weakref.ref]] = {}
_SHAPES_LOCK = threading.Lock()
# Keys whose shapes died, for the next `interned` to drop. A weakref callback runs wherever the collector fires,
# inside `interned`'s locked region too (the hash below walks the dataclass fields and may allocate): a callback
# that took the lock itself hung the process there (mutmut's stats run of the engine tests, 2026-12-02:
# interned -> hash -> gc -> _forget -> the same Lock). deque.append is atomic and takes no lock.
_DEAD: deque[int] = deque()


def interned(shape: ArchShape) -> ArchShape:
    """The one live ArchShape equal to `shape` (notes too), or `shape` itself. The planner's caches key on shapes,
    and a lookup compares a key with an equal but distinct shape field by field: a 10,000-layer config read twice
    (Meta-Llama-3-8B and Llama-3.1-8B deepened alike, or two visitors of the app) compared 10,000 layers per lookup,
    37 s of a fewest-GPU search that takes 1 s."""
    key = hash(shape)
    with _SHAPES_LOCK:
        _drop_dead()
        bucket = _SHAPES.setdefault(key, [])
        bucket[:] = [ref for ref in bucket if ref() is not None]
        for ref in bucket:
            live = ref()
            if live is not None and live == shape and live.notes == shape.notes:
                return live
        bucket.append(weakref.ref(shape, lambda _, key=key: _DEAD.append(key)))
        return shape


def _unpickled(state: dict) -> ArchShape:
    shape = object.__new__(ArchShape)
    shape.__dict__.update(state)
    return interned(shape)


def _drop_dead() -> None:
    """Forget the buckets all of whose shapes died (called with _SHAPES_LOCK held)."""
    while _DEAD:
        key = _DEAD.popleft()
        bucket = [ref for ref in _SHAPES.get(key, []) if ref() is not None]
        if bucket:
            _SHAPES[key] = bucket
        else:
            _SHAPES.pop(key, None)
