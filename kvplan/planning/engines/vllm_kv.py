"""vLLM's KV-cache accounting (v1 engine): per-rank layer specs, pages, groups, blocks, concurrency.

Mirrors `vllm/v1/kv_cache_interface.py` and `vllm/v1/core/kv_cache_utils.py` (see
../shared/reference/kv-rules.md Part 2). Pure integer arithmetic on kvplan's layer specs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from fractions import Fraction
from math import ceil, gcd

from ...errors import WorkloadError
from ...model.layers import (ChunkedAttentionSpec, CompressedAttentionSpec, FullAttentionSpec, IndexedMLASpec, MLASpec,
                             SlidingWindowSpec, StateSpec)
from ...model.spec import ModelSpec


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class VllmLayerSpec:
    """One layer as a vLLM worker allocates it: bytes per token (attention) or per request (Mamba)."""

    kind: str                 # full / sliding / chunked / mla / mamba
    bytes_per_token: int      # attention: KV bytes of one token in this layer on this rank
    state_bytes: int = 0      # mamba: real state bytes per request
    window: int = 0           # sliding window W or chunk size
    states: int = 1           # mamba: state pages a request holds ('none': 1 + k, 'align': 2 + k (+ checkpoint))
    states_per_block: bool = False  # mamba 'all' mode (<= 0.31): a state per block of max_model_len, plus `states`
    conv_bytes_per_column: int = 0  # mamba: one conv-state column on this rank (speculative decoding widens it)
    padded_bytes: int = 0     # mamba: the page vLLM pads the state to (the attention page), when larger
    block_scale: int = 1      # attention: its block is this many times the model's (`unify_page_sizes`)
    pads_page: bool = False   # the release pads this page to the largest it does not divide (`page_rule`)
    typed_page: bool = False  # mamba: its page is part of its type, so states of two sizes are two groups (`page_rule`)
    # DeepSeek-V4's caches (engines/vllm_dsv4.py), grouped by `packed_groups`: a block of `own_block` tokens whatever
    # the model's (0: the model's), one stored entry of `bytes_per_token` B per `tokens_per_state` tokens, the page
    # rounded up to a multiple of `alignment` B (v1/kv_cache_interface.py `_apply_alignment_padding`, 0.33.0)
    own_block: int = 0
    tokens_per_state: int = 1
    alignment: int = 0
    packed: bool = False
    layer: int = -1   # packed: the model layer it belongs to, so that a pipeline stage's share can be told apart
    # attention: (KV heads on this rank, K head size, V head size, bytes an element). vLLM's specs compare them
    # (AttentionSpec num_kv_heads, head_size, head_size_v, dtype; 0.33 kv_cache_interface.py :557-560), so layers of
    # equal bytes a token but other shapes (8 x 64 and 4 x 128) are other buckets in `kv_groups`. Not compared: every
    # figure of a spec follows from its bytes, and only the buckets need the shape
    heads: tuple = field(default=(), compare=False)
    # a drafter's layer (spec_decode.draft_layer_specs): in the pool, bucketed with the target's layers it equals, but
    # left out of the hybrid block size, which vLLM takes from the target's config alone (`hybrid_block_size`)
    draft: bool = field(default=False, compare=False)

    def block_tokens(self, block_size: int) -> int:
        """Tokens one block of this layer covers."""
        return self.own_block or block_size * self.block_scale

    def page_bytes(self, block_size: int) -> int:
        if self.kind == "mamba":
            return max(self.state_bytes, self.padded_bytes)
        # AttentionSpec.page_size_bytes (0.33.0): heads x block // tokens_per_state x entry bytes, padded. A
        # DeepSeek-V4 HCA layer's compressed entries at block 256: 256 // 128 x 584 = 1,168 B -> 3 x 576 = 1,728
        raw = self.block_tokens(block_size) // self.tokens_per_state * self.bytes_per_token
        aligned = cdiv(raw, self.alignment) * self.alignment if self.alignment else raw
        return max(aligned, self.padded_bytes)   # DeepSeek-V4 on 0.20.1-0.26: a state padded to a compressed page


def rank_layer_specs(model: ModelSpec, layer_ids: range, tp: int, kv_bytes: float, act_bytes: int,
                     version: tuple[int, int, int] | None = None) -> list[VllmLayerSpec]:
    """Per-rank specs of the layers a pipeline stage holds (`version`: the vLLM release, for its SSM cache dtype;
    None: the model dtype unless the config sets the engine's).

    KV heads per rank are max(1, kv // tp): Qwen3-Coder-30B's 4 KV heads on TP8 keep 1 head per rank
    (replicated), 24,576 B/token per rank, not 12,288. The MLA latent is one head on every rank, unsharded.
    """
    engine_kv = model.fields.get("engine_kv_heads")
    ssm_bytes = SSM_BYTES.get(vllm_ssm_dtype(model, version), act_bytes)
    specs = []
    for index in layer_ids:
        for spec in model.layers[index]:
            converted = _convert(spec, tp, kv_bytes, act_bytes, engine_kv, ssm_bytes)
            if converted is not None:
                specs.append(converted)
            if isinstance(spec, IndexedMLASpec):
                specs.append(_indexer(spec))
    return specs


# vllm/model_executor/models/deepseek_v2.py (0.19.0) Indexer: `DeepseekV32IndexerCache(head_dim=index_head_dim +
# index_head_dim // quant_block_size * 4, dtype=torch.uint8)` with quant_block_size 128: fp8 keys and one fp32
# scale per 128, a layer of its own reporting MLAAttentionSpec. DeepSeek-V3.2: 128 + 4 = 132 B per token per layer.
INDEXER_QUANT_BLOCK = 128


def _indexer(spec: IndexedMLASpec) -> VllmLayerSpec:
    dim = spec.index_head_dim
    return VllmLayerSpec("mla", dim + dim // INDEXER_QUANT_BLOCK * 4)


SSM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# model_executor/models/config.py `NemotronHForCausalLMConfig` (0.13.0 :493, 0.19.0 :483, 0.20.1 :409, 0.33.0
# :812), for the architectures `MODELS_CONFIG_MAP` gives it: the config's mamba_ssm_cache_dtype, else float16
# (0.13-0.19) / float32 (0.20+). 0.11.0 and 0.12.0 have no such class (the model dtype). The release each
# architecture joined, as read: NemotronHForCausalLM 0.13.0; NemotronHPuzzleForCausalLM in 0.16.0, not 0.14.0;
# NemotronH_Nano_VL_V2 in 0.19.0, not 0.16.0 (the releases between not read: planned from the later one).
NEMOTRON_H = {"NemotronHForCausalLM": (0, 13), "NemotronHPuzzleForCausalLM": (0, 16), "NemotronH_Nano_VL_V2": (0, 19)}
FLOAT16_DEFAULT_UNTIL = (0, 19)


def vllm_ssm_dtype(model: ModelSpec, version: tuple[int, int, int] | None) -> str | None:
    """The dtype vLLM keeps a Mamba layer's SSM state in; None: the model dtype (`mamba_ssm_cache_dtype` 'auto').
    NVIDIA-Nemotron-3-Nano-30B-A3B on 0.20.1: float32, 64 heads x 64 x 128 x 4 B = 2 MiB a layer, which makes
    the hybrid block 2,096 tokens and the printed 22.01x concurrency (bf16 would give 1,072 tokens and 22.47x)."""
    configured = model.fields.get("engine_ssm_dtype")   # Qwen3.5's mamba_ssm_dtype (config/state.py)
    since = NEMOTRON_H.get(model.architecture)
    if configured or version is None or since is None or version[:2] < since:
        return configured
    return model.fields.get("mamba_ssm_cache_dtype") or (
        "float16" if version[:2] <= FLOAT16_DEFAULT_UNTIL else "float32")

# DeepSeek's packed fp8 layout of a sparse-MLA latent ("fp8_ds_mla"): 512 fp8 NoPE values + 512 / 128 x 4 B of
# fp32 scales + 64 x 2 B of bf16 RoPE = 656 B a token a layer, against the standard fp8 latent's 576
# (v1/kv_cache_interface.py MLAAttentionSpec.real_page_size_bytes, 0.20.0 :331-338 and 0.27.1 :409-416: `return
# self.block_size * 656`; 0.33.0 model_executor/layers/attention/mla_attention.py `get_kv_cache_spec`:
# state_content_bytes {"fp8_ds_mla": 656}). The layout is written for the V3.2 / GLM-5 latent (512 + 64) only.
DS_MLA_BYTES = 656
DS_MLA_LATENT = (512, 64)


def ds_mla_layout(model: ModelSpec, kv_bits: int, version: tuple[int, int, int], capability) -> bool:
    """Whether vLLM caches this model's sparse-MLA latent in the 656-byte fp8_ds_mla layout: the backend it picks
    for an indexed (sparse) MLA model and the KV dtype that backend turns into fp8_ds_mla.

    The sparse backends by GPU (platforms/cuda.py `_get_backend_priorities`, 0.20-0.33; a backend is kept only if it
    supports the KV dtype and the compute capability):
    - SM 9.x: FLASHMLA_SPARSE is the only sparse backend taking an fp8 cache (0.27+ FLASH_ATTN_MLA_SPARSE, ahead of
      it, takes auto / bfloat16 alone), and it turns a quantized cache into fp8_ds_mla (0.20-0.23
      mla_attention.py `MLAAttention.__init__`: "Automatically convert fp8 kv-cache format to fp8_ds_mla"; 0.24+
      `_canonicalize_sparse_mla_kv_cache_dtype`). An explicit fp8_e4m3 skips it for FLASHINFER_MLA_SPARSE_SM90
      (0.30+), which kvplan cannot tell from 'fp8'.
    - SM 10.x: an fp8 cache goes to FLASHINFER_MLA_SPARSE first ("Prefer FlashInfer for fp8 kv cache"), which
      keeps the standard 576 B; bf16 stays bf16.
    - SM 12.x (0.24+): FLASHINFER_MLA_SPARSE_SM120 is the one sparse backend and turns auto, fp8 and fp8_e4m3
      into fp8_ds_mla: even an unquantized ('auto') cache is the 656 B fp8 layout there.
    DeepSeek-V3.2 at TP 8 on an H100 with --kv-cache-dtype fp8: 61 x (656 + 132 indexer) = 48,068 B a token, not
    61 x (576 + 132) = 43,188."""
    if not any(isinstance(spec, IndexedMLASpec) and (spec.kv_lora_rank, spec.qk_rope_head_dim) == DS_MLA_LATENT
               for spec in model.distinct_specs):
        return False
    if capability is None or version[:2] < (0, 20):
        return False
    if capability[0] == 9:
        return kv_bits == 8
    if capability[0] == 12:
        return version[:2] >= (0, 24) and kv_bits in (8, 16)
    return False


def with_ds_mla_layout(specs: list[VllmLayerSpec], model: ModelSpec, kv_bits: int) -> list[VllmLayerSpec]:
    """The latent layers (not the indexer's keys) re-priced at fp8_ds_mla's 656 B a token."""
    latent = {int(sum(DS_MLA_LATENT) * kv_bits / 8)}
    packed = VllmLayerSpec("mla", DS_MLA_BYTES)
    return [packed if x.kind == "mla" and x.bytes_per_token in latent else x for x in specs]


def conv_channels(spec: StateSpec, tp: int) -> int:
    """The conv state's channels on one TP rank. A Mamba-2 mixer whose n_groups TP does not divide has its groups
    replicated so that each rank holds the groups its heads read: n_groups + (tp - n_groups), then split (vLLM
    model_executor/layers/mamba/mamba_utils.py `mamba2_state_shape` / `extra_groups_for_head_shards`, 0.19
    :140-165, 0.27.1, 0.33 :186-269; SGLang configs/mamba_utils.py `Mamba2StateShape.create`, 0.5.23 :216-225, in
    every release with a Mamba-2 hybrid: 0.5.3's falcon_h1.py, mamba_utils.py from 0.5.4). A Granite-4.0-H-style
    mixer with 1 group of state 128 and 8,192 inner channels at TP 4: (8,192 + 2 x 4 x 128) / 4
    = 2,304 channels a rank, not (8,192 + 256) // 4 = 2,112."""
    channels = spec.conv_shape[0] if spec.conv_shape else 0   # MiniMax lightning attention: no conv state
    if spec.groups and spec.groups % tp:
        channels += 2 * (tp - spec.groups) * spec.group_state
    return channels // tp


@lru_cache(maxsize=4096)  # layers repeat a handful of distinct specs: 10,000 layers convert one or two
def _convert(spec, tp: int, kv_bytes: float, act_bytes: int, engine_kv, ssm_bytes: int | None = None) -> VllmLayerSpec | None:
    if isinstance(spec, StateSpec):
        # vLLM keeps kernel-1 conv columns (transformers keeps the full kernel) in the model dtype and the SSM
        # state in mamba_ssm_cache_dtype (the model dtype, or a Qwen3.5 config's float32); both sharded over TP.
        # Qwen3.6-27B on a GB10 (vLLM 0.23): the float32 state is what makes its attention block 1,568 tokens.
        kernel = spec.conv_shape[1] if spec.conv_shape else 1
        conv = conv_channels(spec, tp) * (kernel - 1)
        recurrent = spec.recurrent_elems // tp
        return VllmLayerSpec("mamba", 0, state_bytes=conv * act_bytes + recurrent * (ssm_bytes or act_bytes),
                             conv_bytes_per_column=conv_channels(spec, tp) * act_bytes)
    if isinstance(spec, CompressedAttentionSpec):  # refused before planning (engines/unread.py): never "no cache"
        raise WorkloadError("kvplan does not size vLLM's pages for DeepSeek-V4's compressed attention layers: plan "
                            "them with --engine hf")
    if not isinstance(spec, FullAttentionSpec):
        return None  # no cache
    if isinstance(spec, MLASpec):  # the latent alone: an indexer's keys are a layer of their own (_indexer)
        return VllmLayerSpec("mla", int((spec.k_elems_per_token + spec.v_elems_per_token) * kv_bytes),
                             heads=(1, spec.k_elems_per_token, spec.v_elems_per_token, kv_bytes))
    kv = engine_kv or spec.kv_heads
    per_rank = max(1, kv // tp)
    per_token = int(per_rank * (spec.k_head_dim + spec.v_head_dim) * kv_bytes)
    heads = (per_rank, spec.k_head_dim, spec.v_head_dim, kv_bytes)
    if isinstance(spec, SlidingWindowSpec):
        return VllmLayerSpec("sliding", per_token, window=spec.sliding_window, heads=heads)
    if isinstance(spec, ChunkedAttentionSpec):
        return VllmLayerSpec("chunked", per_token, window=spec.chunk_size, heads=heads)
    return VllmLayerSpec("full", per_token, heads=heads)


def max_usage_bytes(spec: VllmLayerSpec, block_size: int, max_model_len: int, batched_tokens: int,
                    inflight: int = 1) -> int:
    """`max_memory_usage_bytes`: what one request of max_model_len tokens can occupy in this layer. `inflight`:
    batches scheduled ahead (`max_concurrent_batches`, 1 before 0.26), whose tokens a sliding or chunked layer must
    hold besides its window (0.26+ kv_cache_interface.py `max_admission_blocks_per_request`: W - 1 + in-flight
    tokens for a window, chunk + in-flight tokens for a chunk; Llama 4's 8,192-token chunks at 8,192 batched tokens
    and 2 batches in flight: cdiv(24,576, 16) = 1,536 blocks, 1,024 before 0.26)."""
    page = spec.page_bytes(block_size)
    block_size = spec.block_tokens(block_size)   # a unified layer counts its tokens in its own, larger blocks
    if spec.kind == "mamba":
        # MambaSpec.max_memory_usage_bytes (0.26 :709-718): 'all' cdiv(L, block) + k, 'align' 2 + k, 'none' 1 + k
        return page * (spec.states + (cdiv(max_model_len, block_size) if spec.states_per_block else 0))
    if spec.kind == "sliding":
        tokens = min(spec.window - 1 + inflight * batched_tokens, max_model_len)
        return (cdiv(tokens, block_size) + 1) * page  # +1: a window can straddle blocks
    if spec.kind == "chunked":
        return cdiv(min(spec.window + inflight * batched_tokens, max_model_len), block_size) * page
    return cdiv(max_model_len, block_size) * page


@dataclass(frozen=True)
class KVGroups:
    """How vLLM splits the layers into KV-cache groups sharing one block pool."""

    block_size: int
    groups: tuple[tuple[VllmLayerSpec, ...], ...]   # padded to equal length for hybrid models
    uniform: bool                                    # one group, possibly with different page sizes per layer
    padding_layers: int
    packed: bool = False  # block-outermost packing (`packed_groups`): groups of unequal sizes side by side
    held: frozenset | None = None   # packed, under PP: the model layers this stage holds (None: all)
    layout: str = ""   # packed: "" 0.31-0.33, TUPLES / SLOTS the layer-tuple layouts of 0.20.1-0.22 / 0.23-0.26

    @property
    def bytes_per_block(self) -> int:
        """Bytes one block id costs across all the layers that share it."""
        if self.layout:
            return tuple_block_bytes(self)
        if self.packed:  # the widest group's pages (kv_cache_planning.py `_get_kv_cache_bytes_per_block`, 0.33.0)
            return max(sum(x.page_bytes(self.block_size) for x in group if self.held is None or x.layer in self.held)
                       for group in self.groups)
        if self.uniform:
            return sum(s.page_bytes(self.block_size) for s in self.groups[0])
        return self.groups[0][0].page_bytes(self.block_size) * len(self.groups[0])


def hybrid_block_size(specs: list[VllmLayerSpec], block_size: int, alignment: int) -> int:
    """Attention block size vLLM forces on Mamba hybrids so an attention page can hold a Mamba state
    (platforms/interface.py `_align_hybrid_block_size`: alignment x cdiv(mamba page, alignment x attention page of
    one token)); `alignment` is the kernel's block alignment (`hybrid_alignment`).

    Qwen3-Next (GDN state ~1.1 MiB per layer, 2 KV heads x 256 x 2 x 2 B = 2 KiB per token): the block
    becomes 16 x cdiv(state, 16 x 2 KiB) tokens, in the hundreds.

    The target's layers alone: vLLM reads the state shapes from the target's model class and the page of a token
    from its model_config (0.33 interface.py :1026-1040; 0.19 model_executor/models/config.py), never the drafter's.
    It then pads every state to that attention page (cache_config.mamba_page_size_padded), a draft model's too: its
    Mamba layers take the same cache config (model_executor/layers/mamba/abstract.py `get_kv_cache_spec`, 0.19-0.33),
    and MambaSpec.page_size_bytes asserts `page_size_padded >= page_size` (0.33 kv_cache_interface.py :1127, 0.19
    :289), so a draft state larger than the page stops the start-up (`_draft_state_refusal`). Qwen3.5-35B-A3B at
    TP 2 drafted by Qwen3.5-27B: the target's 1,088-token blocks of 1,024 B a token pad to 1,114,112 B, which the
    27B's state of 24 heads x 128 x 128 x 4 B = 1,572,864 B (+ its conv state) does not fit.
    """
    target = [s for s in specs if not s.draft]
    states = [s.state_bytes for s in target if s.kind == "mamba"]
    attn = [s.bytes_per_token for s in target if s.kind != "mamba"]
    if not states or not attn:
        return block_size
    block = max(block_size, alignment * cdiv(max(states), alignment * max(attn)))
    page = block * max(attn)
    drafted = max((s.state_bytes for s in specs if s.draft and s.kind == "mamba"), default=0)
    # an attention page equal to the target's state leaves mamba_page_size_padded unset (interface.py :1115): the
    # draft's state keeps its own page, and unify_page_sizes pads the others to it
    if page > max(states) and drafted > page:
        raise WorkloadError(_draft_state_refusal(drafted, page, block, max(attn)))
    return block


def _draft_state_refusal(drafted: int, page: int, block: int, per_token: int) -> str:
    return (f"the draft model's Mamba/linear state is {drafted:,} B a layer on each GPU, more than the {page:,} B page "
            f"vLLM pads the target's states to ({block:,}-token attention blocks x {per_token:,} B a token), and vLLM "
            "stops at start-up on it (MambaSpec.page_size_bytes asserts the padded page holds the state): use a draft "
            f"model whose state is at most {page:,} B a layer on each GPU, such as a smaller one of the target's "
            "family")


def hybrid_alignment(version: tuple[int, int, int], is_mla: bool, gdn_checkpoint: bool = False) -> int:
    """The block alignment `_align_hybrid_block_size` rounds to: FlashAttention's 16 (FlashMLA's 64 for MLA);
    MLA hybrids at least 128 from 0.27 (platforms/interface.py, 0.33 :1061); with FlashInfer's gated-DeltaNet
    prefill in 'align' mode (0.33) the lcm with its 64-token checkpoint alignment (interface.py :1089-1094,
    v1/attention/backends/gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT)."""
    alignment = 64 if is_mla else 16
    if is_mla and version[:2] >= (0, 27):
        alignment = max(alignment, 128)
    if gdn_checkpoint:
        alignment = alignment * 64 // gcd(alignment, 64)
    return alignment


def page_rule(specs: list[VllmLayerSpec], version: tuple[int, int, int]) -> list[VllmLayerSpec]:
    """Mark the attention layers whose page the release pads when it does not divide the largest one
    (`unify_kv_cache_spec_page_size`, read in 0.19.0 :914, 0.20.1 :1007, 0.22.1, 0.23.0, 0.24.0, 0.25.1 :1049,
    0.26.0, 0.27.1, 0.28.0, 0.29.0, 0.30.0, 0.31.0, 0.32.0, 0.33.0 kv_cache_planning.py :346):
    - through 0.23 no page is padded: vLLM raises NotImplementedError at start-up (vllm issue #38979: Gemma 3 with
      a TurboQuant KV dtype at 0.20.0, Qwen3.5-122B at 0.21);
    - 0.24-0.28 pad a page the attention backend reads by block stride (`AttentionSpec.indexes_kv_by_block_stride`,
      set from `AttentionBackend.indexes_kv_by_block_stride`, v1/attention/backend.py 0.25.1 :206): FlashAttention,
      FlashInfer, Triton and the MLA backends (FlashMLA, CUTLASS, FlashInfer, Triton MLA) all put num_blocks first
      in their layered stride order, so every attention page;
    - from 0.29 any attention page but MLA's (sparse MLA indexes its cache in whole token rows).
    Mamba pages (a draft model's state beside its target's): from 0.26 one smaller than the largest is padded to it
    (the `isinstance(layer_spec, MambaSpec)` branch, 0.26.0 kv_cache_utils.py :1098, 0.33 kv_cache_planning.py
    :380); 0.19-0.25 scale its block, which leaves a state's page as it was, and the assert after it fails. From
    0.29 a state's page is part of its type (MambaSpec.is_uniform_with_collection compares page_size_bytes, 0.29.0
    kv_cache_interface.py :915, 0.33 :1163; 0.28 compares the speculative blocks alone), so a Mamba draft model
    beside a Mamba target of another state size is not one group of both but groups of equal pages."""
    if version[:2] < (0, 24):
        return specs
    mla_too = version[:2] < (0, 29)

    def rule(x: VllmLayerSpec) -> VllmLayerSpec:
        if x.kind == "mamba":
            return dataclasses.replace(x, pads_page=version[:2] >= (0, 26), typed_page=version[:2] >= (0, 29))
        return dataclasses.replace(x, pads_page=True) if mla_too or x.kind != "mla" else x
    return _each_once(specs, rule)


def _each_once(specs: list[VllmLayerSpec], change) -> list[VllmLayerSpec]:
    """`change` applied to each distinct spec object once: a model's layers repeat a few objects, and a
    dataclasses.replace per layer made the fewest-GPU search over a 10,000-layer model 3.5 x slower (14 s, not 4)."""
    done = {id(x): change(x) for x in _distinct(specs)}
    return [done[id(x)] for x in specs]


def _distinct(specs: list[VllmLayerSpec]) -> list[VllmLayerSpec]:
    """The distinct spec objects, in first-seen order: a model's layers repeat a few objects (Llama-3.1-8B's 32
    layers are one), so a rule over them runs a few times, not once a layer (10,000 layers in the hostile tests)."""
    return list({id(x): x for x in specs}.values())


def unify_page_sizes(specs: list[VllmLayerSpec], block_size: int) -> list[VllmLayerSpec]:
    """`unify_kv_cache_spec_page_size`: when pages differ, an attention layer whose page divides the largest gets a
    block that many times longer, so all pages are equal. gemma-4-E4B-it: full layers 2 KV heads x 512 x 2 x 2 B =
    4,096 B/token, sliding 2,048: a sliding block holds 32 tokens, and a request's 2,559-token window span (511 +
    2,048 batched) takes cdiv(2,559, 32) + 1 = 81 of those 64 KiB pages, not 161 half-pages (80.5 pages): vLLM 0.25.1
    prints 63.10x concurrency, not 63.20x. A page that does not divide the largest is padded to it where the
    release does (`page_rule`: a 3,072 B-a-token full page beside 2,048 B sliding ones at 16-token blocks, 49,152 B
    and 32,768 B: each sliding page takes 49,152 B for its 16 tokens), and refused where vLLM fails to start. A
    Mamba state takes part (vLLM compares every layer's page_size_bytes), though a hybrid's states are already
    padded to the attention page (`kv_groups`): it is a draft model's state that can be the largest, or a Mamba
    draft beside a Mamba target, whose smaller state is padded to the larger from 0.26."""
    pages = {x.page_bytes(block_size) for x in specs if x.kind == "mamba" or x.bytes_per_token}
    if len(pages) <= 1:
        return specs
    top = max(pages)

    def unified(x: VllmLayerSpec) -> VllmLayerSpec:
        page = x.page_bytes(block_size)
        if not (x.kind == "mamba" or x.bytes_per_token) or page == top:
            return x
        if x.kind != "mamba" and top % page == 0:
            return dataclasses.replace(x, block_scale=x.block_scale * (top // page))
        if x.pads_page:
            return dataclasses.replace(x, padded_bytes=top)
        raise WorkloadError(_odd_page_refusal(x, page, top, specs))
    return _each_once(specs, unified)


def _odd_page_refusal(x: VllmLayerSpec, page: int, top: int, specs: list[VllmLayerSpec]) -> str:
    """Why vLLM does not start: an MLA page from 0.29 (0.33 get_kv_cache_groups falls back to treating sliding
    layers as full only beside regular sliding-window layers, `_try_get_full_allocation_fallback_groups`, which
    kvplan does not plan), any page before 0.24."""
    if x.kind == "mamba":   # before 0.26 (`page_rule`)
        return (f"vLLM cannot put this model's KV layers in one block pool: a {page:,} B Mamba/linear state page "
                f"beside a {top:,} B page, which vLLM before 0.26 cannot pad and fails on at start-up: plan "
                "--engine-version 0.26 or later")
    what = f"a {page:,} B KV page of its {x.kind} layers does not divide the {top:,} B page of the others"
    if x.kind == "mla" and any(y.pads_page for y in specs):
        tail = ("vLLM 0.29+ pads only non-MLA pages and raises NotImplementedError for this one"
                + (" (beside sliding-window layers 0.33 treats them as full attention instead, which kvplan does "
                   "not plan)" if any(y.kind == "sliding" for y in specs) else ""))
    else:
        tail = ("vLLM before 0.24 cannot pad it and raises NotImplementedError at start-up: plan "
                "--engine-version 0.24 or later")
    return f"vLLM cannot put this model's KV layers in one block pool: {what}; {tail}"


def _uniform_type(specs: list[VllmLayerSpec]) -> bool:
    """`UniformTypeKVCacheSpecs.is_uniform_type` (0.33 kv_cache_interface.py :1348; 0.19 :397): one block size and
    one type, where MLA counts as full attention (MLAAttentionSpec subclasses FullAttentionSpec; 0.33
    single_type_kv_cache_manager.py :2708 registers it with uniform_type_base_spec=FullAttentionSpec), sliding layers
    share one window, chunked ones one chunk, and Mamba states are one type (0.19-0.28), of one page from 0.29
    (`page_rule`'s typed_page: falcon-mamba's states beside a Mamba draft model's smaller ones are two types).
    DeepSeek-V2-Lite with a Llama-3.2-1B draft model: 27 MLA + 16 full layers in one group, a block the sum of their
    43 pages."""
    return len({("full", 0) if x.kind == "mla" else (x.kind, x.page_bytes(0) if x.typed_page else x.window)
                for x in _distinct(specs)}) == 1


def kv_groups(specs: list[VllmLayerSpec], block_size: int, layout: str = "") -> KVGroups:
    """`get_kv_cache_groups`: one group when every layer has one type (`_uniform_type`), else groups of equal size
    (`_get_kv_cache_groups_uniform_page_size`, 0.33 kv_cache_planning.py :416): the layers go into buckets of equal
    specs (`same_type_layers`; a draft model's 512-token window is not its target's 1,024), the smallest bucket sets
    the group size unless the largest is under 1.5 times it, and each bucket splits into groups padded to that size.
    A Mamba page is padded to the attention page (0.19 model_executor/models/config.py `mamba_page_size_padded =
    block_size x attn_page_per_token`; 0.24+ kv_cache_utils `unify_kv_cache_spec_page_size` pads it to the max):
    Qwen3.5-27B with fp8 KV, 1,568-token blocks: a 3,207,168 B state in a 3,211,264 B page. `layout`: DeepSeek-V4's
    packed groups as 0.31-0.33 form them (""), or 0.20.1-0.26's layer tuples (TUPLES / SLOTS, `tuple_groups`).
    Buckets are told apart by head shape too (`VllmLayerSpec.heads`), as vLLM's specs are."""
    if not specs:
        # Gemma 4 E2B at PP 2: the second stage's 18 layers all reuse caches of layers on the first
        # (kv_sharing_target_layer_name, gemma4.py 0.33 :473-510); each stage's runner allocates only the layers it
        # holds (get_kv_cache_spec), so the sharing would cross stages, which kvplan has no rule for
        raise WorkloadError("a pipeline stage would hold only layers that reuse other stages' KV caches (KV "
                            "sharing), which kvplan does not plan: use fewer pipeline stages")
    if any(x.packed for x in specs):
        return tuple_groups(specs, block_size, layout) if layout else packed_groups(specs, block_size)
    attention = max((x.page_bytes(block_size) for x in specs if x.kind != "mamba"), default=0)
    if attention:
        specs = _each_once(specs, lambda x: dataclasses.replace(x, padded_bytes=attention)
                           if x.kind == "mamba" and x.state_bytes < attention else x)
    if _uniform_type(specs):
        return KVGroups(block_size, (tuple(specs),), uniform=True, padding_layers=0)
    specs = unify_page_sizes(specs, block_size)   # one group per type would not need equal pages: hybrids do
    buckets: dict[tuple, list[VllmLayerSpec]] = {}   # equal specs of one shape, looked up once per distinct object
    bucket_of = {id(x): buckets.setdefault((x, x.heads), []) for x in _distinct(specs)}
    for spec in specs:
        bucket_of[id(spec)].append(spec)
    counts = [len(v) for v in buckets.values()]
    low, high = min(counts), max(counts)
    group_size = high if high < 1.5 * low else low
    groups, padding = [], 0
    for layers in buckets.values():
        for start in range(0, len(layers), group_size):
            chunk = layers[start:start + group_size]
            padding += group_size - len(chunk)
            groups.append(tuple(chunk) + (chunk[-1],) * (group_size - len(chunk)))
    return KVGroups(block_size, tuple(groups), uniform=False, padding_layers=padding)


def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """`_approximate_gcd` (v1/core/kv_cache_planning.py, 0.33.0): the d in [lower_bound, max(values)] with the least
    total padding sum((d - x % d) % d), ties to the larger d. DeepSeek-V4-Flash: [43, 21, 20] from 21 -> 22 (pad 4:
    1 + 1 + 2; 21 pads 20 + 0 + 1 = 21)."""
    low = max(1, lower_bound)
    if low > max(values):
        return low
    return min(range(low, max(values) + 1), key=lambda d: (sum((d - x % d) % d for x in values), -d))


def packed_groups(specs: list[VllmLayerSpec], block_size: int) -> KVGroups:
    """`_get_packed_kv_cache_groups` (v1/core/kv_cache_planning.py, 0.33.0), the grouping vLLM uses when the KV layout
    is block-outermost (DeepSeek-V4: its indexer backend declares BLHNC / BLNHC only, v1/attention/backends/mla/
    indexer.py `DeepseekV4IndexerBackend.supported_kv_cache_layouts`) and the pages differ:
    - layers go into buckets of one uniform type (`UniformTypeKVCacheSpecs.is_uniform_type`: one block size, and
      full attention alike or one sliding window);
    - a bucket is balanced when each of its page sizes has as many layers; the widest balanced bucket that mixes page
      sizes sets a floor, and `approximate_gcd` of the balanced buckets' layer counts the layers ("repeats") a group
      takes; a balanced bucket splits into cdiv(count, repeats) groups, round-robin; an unbalanced one stays whole;
    - one block id then costs the widest group's pages (`_get_kv_cache_bytes_per_block`), every group drawing block
      ids from the one pool.
    DeepSeek-V4-Flash at block 256: SWA 43 layers -> 2 groups (22 + 21), compressed + indexer keys 62 layers in 1,
    the CSA compressor states 42 in 1, HCA's 20 in 1: 5 groups, a block of 1,002,240 B (the compressed group's)."""
    if any(x.kind == "mamba" for x in specs):
        raise WorkloadError("kvplan does not pack Mamba states beside DeepSeek-V4's caches: plan it with --engine hf")
    buckets: dict[tuple, list[VllmLayerSpec]] = {}
    for x in specs:   # full attention: any full layers of one block size; sliding: one window too
        key = (x.kind, x.block_tokens(block_size), x.window if x.kind == "sliding" else 0)
        buckets.setdefault(key, []).append(x)
    by_page = []
    for layers in buckets.values():
        pages: dict[int, list[VllmLayerSpec]] = {}
        for x in layers:
            pages.setdefault(x.page_bytes(block_size), []).append(x)
        by_page.append((layers, pages, len({len(v) for v in pages.values()}) == 1))
    most = [max(len(v) for v in pages.values()) for _, pages, _ in by_page]
    floor = max((m for m, (_, pages, balanced) in zip(most, by_page) if balanced and len(pages) > 1), default=0)
    repeats = approximate_gcd([m for m, (_, _, b) in zip(most, by_page) if b], floor) if floor else None
    if repeats is None and any(k[0] == "sliding" for k in buckets):
        # sliding buckets then become "state buckets" capped at the states one block holds: not read further
        raise WorkloadError("kvplan does not plan this DeepSeek-V4 layout (sliding caches without a repeating "
                            "pattern): plan it with --engine hf")
    groups = []
    for m, (layers, pages, balanced) in zip(most, by_page):
        count = cdiv(m, repeats) if balanced and repeats else 1
        if count == 1:
            groups.append(tuple(layers))
            continue
        pattern = list(zip(*pages.values()))   # one layer of each page size per repeat
        groups += [tuple(x for repeat in pattern[i::count] for x in repeat) for i in range(count)]
    return KVGroups(block_size, tuple(groups), uniform=False, padding_layers=0, packed=True)


TUPLES, SLOTS = "tuples", "slots"   # DeepSeek-V4's block of 0.22 (and 0.20.1-0.21) / of 0.23-0.26


def _page_counts(layers, block_size: int) -> dict[int, int]:
    counts: dict[int, int] = {}
    for x in layers:
        counts[x.page_bytes(block_size)] = counts.get(x.page_bytes(block_size), 0) + 1
    return counts


def _tuples(layers, block_size: int) -> int:
    """`UniformTypeKVCacheSpecs.get_num_layer_tuples` (v1/kv_cache_interface.py, 0.22.0): the layers of the commonest
    page size in a group."""
    return max(_page_counts(layers, block_size).values())


def tuple_groups(specs: list[VllmLayerSpec], block_size: int, layout: str) -> KVGroups:
    """`group_and_unify_kv_cache_specs` and `_get_kv_cache_groups_uniform_groups` (v1/core/kv_cache_utils.py 0.22.0,
    the same source through 0.26.0): every compressed (MLA) cache in one group; the sliding caches bucketed by block
    and window, each layer's page padded up to the nearest compressed page (`page_size_padded`), then split into
    cdiv(layers per page size, d) groups round-robin, d = `_approximate_gcd` of the buckets' layer tuples from the
    compressed group's. DeepSeek-V4-Flash: [21, 43, 21, 20] from 21 -> 22; the CSA and HCA states' 32,832 B pages
    become 37,440 B, the indexer states' 8,640 B stay; 5 groups of 62, 22, 21, 42 and 20 layers."""
    full = [x for x in specs if x.kind == "mla"]
    pages = sorted({x.page_bytes(block_size) for x in full})
    buckets: dict[tuple, list[VllmLayerSpec]] = {}
    for x in specs:
        if x.kind == "sliding":
            buckets.setdefault((x.block_tokens(block_size), x.window), []).append(x)
    d = approximate_gcd([_tuples(full, block_size)] + [_tuples(b, block_size) for b in buckets.values()],
                        _tuples(full, block_size))
    groups = [tuple(full)]
    for layers in buckets.values():
        by_page: dict[int, list[VllmLayerSpec]] = {}
        for x in layers:
            page = x.page_bytes(block_size)
            fit = min((p for p in pages if p >= page), default=None)
            if fit is None:   # vLLM asserts max(sliding pages) <= max(compressed pages)
                raise WorkloadError("kvplan does not plan this DeepSeek-V4 layout on vLLM 0.20.1-0.26 (a sliding "
                                    "cache larger than every compressed page): plan it with --engine-version 0.33.0")
            by_page.setdefault(fit, []).append(dataclasses.replace(x, padded_bytes=fit))
        if len({len(v) for v in by_page.values()}) != 1:   # vLLM asserts as many layers of each page size
            raise WorkloadError("kvplan does not plan this DeepSeek-V4 layout on vLLM 0.20.1-0.26 (unequal sliding "
                                "page counts): plan it with --engine-version 0.33.0")
        pattern = list(zip(*by_page.values()))
        count = cdiv(len(pattern), d)
        groups += [tuple(x for repeat in pattern[i::count] for x in repeat) for i in range(count)]
    return KVGroups(block_size, tuple(groups), uniform=False, padding_layers=0, packed=True, layout=layout)


def tuple_block_bytes(groups: KVGroups) -> int:
    """Bytes one block id costs in the layer-tuple layouts. TUPLES (0.22.0 `_get_kv_cache_config_deepseek_v4`,
    0.20.1 and 0.21.0 alike): the compressed group's distinct pages x the most tuples of any group, Flash (37,440 +
    1,728 + 8,640) x 22 = 1,051,776 B. SLOTS (0.23.0-0.26.0 `_get_kv_cache_config_packed`): each page size x the
    most layers of it in one group, Flash 22 x 37,440 + 20 x 1,728 + 21 x 8,640 = 1,039,680 B."""
    if groups.layout == TUPLES:
        return _tuple_bytes(groups)
    slots: dict[int, int] = {}
    for group in groups.groups:
        for page, n in _page_counts(group, groups.block_size).items():
            slots[page] = max(slots.get(page, 0), n)
    return sum(page * n for page, n in slots.items())


def _tuple_bytes(groups: KVGroups) -> int:
    bs = groups.block_size
    return sum({x.page_bytes(bs) for x in groups.groups[0]}) * max(_tuples(g, bs) for g in groups.groups)


def tuple_need_bytes(groups: KVGroups, blocks: list[int]) -> int:
    """`_max_memory_usage_bytes_from_groups` (0.22.0-0.26.0, both layouts): each group's blocks x the most tuples x
    the compressed group's distinct pages, summed; no null block held back. Flash at 30,000 tokens, 16,384 batched:
    (2 x 259 + 118 + 4,099 + 2,065) x 22 x 47,808 = 6,800 x 1,051,776 = 7,152,076,800 B (6.66 GiB)."""
    return _tuple_bytes(groups) * sum(blocks)


def tuple_blocks_per_request(groups: KVGroups, blocks: list[int]) -> int:
    """`get_max_concurrency_for_kv_cache_config` (0.22.0-0.26.0): cdiv(L x sum of each group's blocks x its pages,
    L x the first group's pages), L the longest group; L cancels. Flash at 912,128 tokens, 8,192 batched:
    cdiv(3,563 x 1,002,240 + 131 x (823,680 + 786,240) + 2,051 x 967,680 + 1,041 x 748,800, 1,002,240)."""
    bs = groups.block_size
    spent = sum(n * sum(x.page_bytes(bs) for x in g) for n, g in zip(blocks, groups.groups))
    return cdiv(spent, sum(x.page_bytes(bs) for x in groups.groups[0]))


def project_packed(groups: KVGroups, layers) -> KVGroups:
    """`_project_kv_cache_groups_to_worker` (v1/core/kv_cache_planning.py, 0.33.0): the whole model's groups (vLLM
    groups the layers of every stage at once, `get_global_kv_cache_groups`), each cut to the layers this stage holds.
    A cut group keeps its block count per request (its layers all count alike; an emptied one keeps the whole
    group's spec), so only the bytes a block id costs on the stage change."""
    return dataclasses.replace(groups, held=frozenset(layers))


@dataclass(frozen=True)
class KVRules:
    """How a vLLM release counts a request's blocks: `inflight` batches a sliding or chunked layer holds besides its
    window (`vllm_runner.max_concurrent_batches`), "GPU KV cache size" as int(concurrency x max_model_len)
    (0.20.1+), and blocks rounded per KV-cache group (0.27+)."""

    inflight: int = 1
    tokens_from_concurrency: bool = False
    per_group: bool = False

    @staticmethod
    def of(version: tuple[int, int, int], inflight: int) -> "KVRules":
        return KVRules(inflight, version[:3] >= (0, 20, 1), version[:2] >= (0, 27))


@dataclass(frozen=True)
class PoolResult:
    num_blocks: int
    kv_cache_tokens: int          # what vLLM prints as "GPU KV cache size: N tokens"
    max_concurrency: float        # "Maximum concurrency for max_model_len tokens per request"
    blocks_per_request: int


def pool_capacity(groups: KVGroups, pool_bytes: int, max_model_len: int, batched_tokens: int, *,
                  inflight: int = 1, tokens_from_concurrency: bool = False, per_group: bool = False) -> PoolResult:
    """num_blocks from the pool, then the two figures vLLM logs (`_report_kv_cache_config`). Through 0.20.0 the
    "GPU KV cache size" is blocks per group x block size; from 0.20.1 it is int(max concurrency x max_model_len)
    (`get_kv_cache_capacity` from 0.24; `tokens_from_concurrency`), which for a hybrid model counts requests, not
    blocks. The blocks a request needs: through 0.26 one rounding over the groups' summed usage
    (`get_max_concurrency_for_kv_cache_config`: cdiv(layers x sum of usage, layers x page)); from 0.27 (`per_group`)
    each group rounded on its own (0.33 kv_cache_utils.py:1061-1094: sum of cdiv(usage, page)); DeepSeek-V4's
    layer-tuple layouts (0.20.1-0.26) by `tuple_blocks_per_request`."""
    bs = groups.block_size
    per_block = groups.bytes_per_block
    num_blocks = max(0, pool_bytes) // per_block if per_block else 0
    if groups.packed:
        # get_max_concurrency_for_kv_cache_config (v1/core/kv_cache_utils.py, 0.33.0): each group's
        # UniformTypeKVCacheSpecs takes max over its layers of cdiv(usage, page) blocks, summed over the groups
        tokens = num_blocks * bs
        blocks = group_blocks(groups, max_model_len, batched_tokens, inflight)
        per_request = tuple_blocks_per_request(groups, blocks) if groups.layout else sum(blocks)
    elif groups.uniform:
        tokens = num_blocks * bs
        per_request = cdiv(max_model_len, bs)
        if groups.groups[0][0].kind != "full":
            per_request = cdiv(sum(max_usage_bytes(s, bs, max_model_len, batched_tokens, inflight)
                                   for s in groups.groups[0]), per_block)
    else:
        tokens = num_blocks // len(groups.groups) * bs
        layers_per_group = len(groups.groups[0])
        usages = [max_usage_bytes(g[0], bs, max_model_len, batched_tokens, inflight) for g in groups.groups]
        if per_group:
            per_request = sum(cdiv(u, g[0].page_bytes(bs)) for u, g in zip(usages, groups.groups))
        else:
            per_request = cdiv(layers_per_group * sum(usages), per_block)
    concurrency = num_blocks / per_request if per_request else 0.0
    if tokens_from_concurrency:
        tokens = int(concurrency * max_model_len)
    return PoolResult(num_blocks, tokens, concurrency, per_request)


def bytes_per_token(specs: list[VllmLayerSpec]) -> int:
    """KV bytes one more token costs on this rank across its attention layers (no block rounding; an entry per
    `tokens_per_state` tokens counts its share, the sum rounded up: DeepSeek-V4's HCA entries 584 / 128 B a token)."""
    return ceil(sum(Fraction(s.bytes_per_token, s.tokens_per_state) for s in specs if s.kind != "mamba"))


def packed_need_bytes(groups: KVGroups, max_model_len: int, batched_tokens: int, inflight: int) -> int:
    """What vLLM 0.33's start-up check asks of the pool for one request of a packed layout: a block id for each of the
    request's blocks plus the null block (kv_cache_planning.py `get_kv_cache_configs`: check_memory = available -
    one block, against `_max_memory_usage_bytes_from_groups` = bytes per block x blocks); 0.20.1-0.26's layer-tuple
    layouts: `tuple_need_bytes`."""
    if groups.layout:   # 0.20.1-0.26 check the bytes of the groups' blocks alone (`tuple_need_bytes`)
        return tuple_need_bytes(groups, group_blocks(groups, max_model_len, batched_tokens, inflight))
    per_request = pool_capacity(groups, 0, max_model_len, batched_tokens, inflight=inflight).blocks_per_request
    return groups.bytes_per_block * (per_request + 1)


def group_blocks(groups: KVGroups, max_model_len: int, batched_tokens: int, inflight: int) -> list[int]:
    """The blocks one request takes in each packed group: the max over its layers of cdiv(usage, page)
    (`UniformTypeKVCacheSpecs.max_memory_usage_bytes`, 0.22.0 and 0.33.0)."""
    bs = groups.block_size
    return [max(cdiv(max_usage_bytes(x, bs, max_model_len, batched_tokens, inflight), x.page_bytes(bs)) for x in g)
            for g in groups.groups]

