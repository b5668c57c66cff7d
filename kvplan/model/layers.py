"""One frozen spec per kind of cached layer (the vocabulary of vLLM's `kv_cache_interface.py`).

A spec says what one layer stores for one sequence. How many tokens it keeps under a given cache
strategy is the business of `kvplan.cache.hf` (transformers) and of the engine profiles; a model's
layout is the tuple of its layers' specs, and every total is a sum over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod


@dataclass(frozen=True)
class FullAttentionSpec:
    """Keys `[B, kv_heads, T, k_head_dim]` and values `[B, kv_heads, T, v_head_dim]`, every token kept."""

    kv_heads: int
    k_head_dim: int
    v_head_dim: int
    kind = "full"

    @property
    def k_elems_per_token(self) -> int:
        return self.kv_heads * self.k_head_dim

    @property
    def v_elems_per_token(self) -> int:
        return self.kv_heads * self.v_head_dim

    @property
    def elems_per_token(self) -> int:
        # Llama-3.1-8B: 8 heads x (128 + 128) = 2,048 elements per token per layer
        return self.k_elems_per_token + self.v_elems_per_token

    @property
    def window(self) -> int | None:
        """Tokens the layer attends to (None: all of them)."""
        return None

    def bytes_per_token(self, kv_bytes: int) -> int:
        """Bytes one token of one sequence takes in this layer when the cache stores `kv_bytes` per element."""
        return self.elems_per_token * kv_bytes

    def describe(self) -> str:
        if self.k_head_dim == self.v_head_dim:
            return f"2 x {self.kv_heads} KV heads x {self.k_head_dim}"
        return f"{self.kv_heads} KV heads x ({self.k_head_dim} + {self.v_head_dim})"


@dataclass(frozen=True)
class PrefixedAttentionSpec(FullAttentionSpec):
    """Full attention over `prefix_tokens` learned prompt tokens the model prepends to every sequence, plus the
    sequence (CPM-Ant: prompt_length 32, so a 1,000-token prompt caches 1,032 positions)."""

    prefix_tokens: int = 0

    def describe(self) -> str:
        return f"{super().describe()}, + {self.prefix_tokens} learned prompt tokens"


@dataclass(frozen=True)
class SlidingWindowSpec(FullAttentionSpec):
    """Attends to the last `sliding_window` tokens (Mistral, Gemma 2/3 local layers, gpt-oss)."""

    sliding_window: int = 0
    kind = "sliding"

    @property
    def window(self) -> int:
        return self.sliding_window

    def describe(self) -> str:
        return f"{super().describe()}, window {self.sliding_window}"


@dataclass(frozen=True)
class ChunkedAttentionSpec(FullAttentionSpec):
    """Attends within chunks of `chunk_size` tokens (Llama 4 RoPE layers); transformers caches it as a window."""

    chunk_size: int = 0
    kind = "chunked"

    @property
    def window(self) -> int:
        return self.chunk_size

    def describe(self) -> str:
        return f"{super().describe()}, chunk {self.chunk_size}"


@dataclass(frozen=True)
class MLASpec(FullAttentionSpec):
    """DeepSeek-style latent: one 'head' holding `kv_lora_rank` (as keys) and the RoPE key part (as values).

    No K/V pair and no per-head expansion: DeepSeek-V3 caches 512 + 64 = 576 elements per token per layer,
    not 2 x 128 heads x 192 = 49,152.
    """

    kind = "mla"

    @property
    def kv_lora_rank(self) -> int:
        return self.k_head_dim

    @property
    def qk_rope_head_dim(self) -> int:
        return self.v_head_dim

    def describe(self) -> str:
        return f"latent {self.kv_lora_rank} + rope {self.qk_rope_head_dim}"


@dataclass(frozen=True)
class IndexedMLASpec(MLASpec):
    """DeepSeek-V3.2 / GLM-5 sparse attention: the MLA latent plus the lightning indexer's keys, one
    `[B, T, index_head_dim]` tensor per layer (transformers' DynamicIndexedLayer). V3.2: 512 + 64 + 128 = 704
    elements per token per layer, 18 % more than V3's 576."""

    index_head_dim: int = 0
    # bytes per indexer key element when the family fixes them whatever the cache dtype; 0: the cache dtype. Dots3-Note
    # (transformers 5.24 modeling_dots3_note.py, Dots3NoteTextModel.forward) computes its indexed layers' RoPE from
    # `inputs_embeds.float()`, so its indexer keys come out float32 beside the bf16 latent: 128 x 4 = 512 B per token
    # per layer, not 256
    index_bytes: int = 0
    kind = "mla"

    @property
    def elems_per_token(self) -> int:
        return self.k_elems_per_token + self.v_elems_per_token + self.index_head_dim

    def bytes_per_token(self, kv_bytes: int) -> int:
        # Dots3-Note in bf16: (512 + 64) x 2 + 128 x 4 = 1,664 B per token per layer
        latent = self.k_elems_per_token + self.v_elems_per_token
        return latent * kv_bytes + self.index_head_dim * (self.index_bytes or kv_bytes)

    def describe(self) -> str:
        fp32 = " (float32)" if self.index_bytes == 4 else ""
        return f"{super().describe()} + indexer {self.index_head_dim}{fp32}"


@dataclass(frozen=True)
class CompressedAttentionSpec:
    """DeepSeek-V4's compressed attention layers (transformers 5.24 modeling_deepseek_v4.py, DeepseekV4HCACache and
    DeepseekV4CSACache): a sliding window of one shared-KV head, K and V the same tensor `[B, 1, W-1, head_dim]`,
    beside a compressor that pools every `compress_rate` tokens into one entry.

    Per layer and sequence, at T tokens (m = compress_rate, d = head_dim + index_head_dim):
    - the window: like a sliding layer's, but one tensor (K is V): W-1 tokens x head_dim, W stored in decode;
    - the compressed entries, kept for ever: T // m x d (the compressor's head_dim, and the CSA indexer's keys);
    - the tokens of the window not yet closed, as projected (kv and gate, each `2 x d` wide where windows overlap,
      CSA, else `d`): T mod m tokens, a view of the prefill's whole projection until the first decode step;
    - CSA only, once a window has closed: the last window's first half (`overlap_kv` in the model dtype and
      `overlap_gate` in float32, the gate having had the float32 position_bias added), m x d each.
    HCA (m 128): 512 x 2 B per 128 tokens, 8 B per token per layer in the long run; CSA (m 4): (512 + 128) x 2 B per
    4 tokens, 320 B per token.
    """

    head_dim: int
    sliding_window: int
    compress_rate: int
    index_head_dim: int = 0   # CSA: the lightning indexer's keys, compressed at the same rate (128)
    overlap: bool = False     # CSA: windows of 2m tokens at stride m, so projections are 2 x d wide
    kind = "compressed"

    @property
    def window(self) -> int:
        return self.sliding_window

    @property
    def entry_elems(self) -> int:
        """Elements one compressed entry holds (compressor + indexer)."""
        return self.head_dim + self.index_head_dim

    @property
    def buffer_elems(self) -> int:
        """Elements one not-yet-compressed token holds: kv and gate, each 2 x d wide where windows overlap."""
        return 2 * self.entry_elems * (2 if self.overlap else 1)

    def describe(self) -> str:
        indexer = f" + indexer {self.index_head_dim}" if self.index_head_dim else ""
        name = "CSA" if self.overlap else "HCA"
        return (f"{name}: window {self.sliding_window} x 1 shared KV head x {self.head_dim}, 1 entry per "
                f"{self.compress_rate} tokens of {self.head_dim}{indexer}")


@dataclass(frozen=True)
class StateSpec:
    """Constant-size recurrent state per sequence (Mamba, gated DeltaNet): it does not grow with T.

    transformers keeps the conv state `[B, *conv_shape]` (full kernel width) in the model dtype and the
    recurrent state `[B, *recurrent_shape]` in float32 on its torch path.
    """

    conv_shape: tuple[int, ...]
    recurrent_shape: tuple[int, ...]
    mixer: str = "mamba"
    recurrent_fp32: bool = True  # False: the recurrent state is in the model dtype (MiniMax lightning attention)
    conv_fp32: bool = False  # True: the conv state is float32 whatever the model dtype (Inkling's short convolutions)
    counter: bool = False  # the cache's int64 position counter sits with this layer (xLSTMCache.seqlen_offset)
    # Mamba-2: the conv state's n_groups and SSM state size, which the engines' TP sharding reads (0: not Mamba-2)
    groups: int = 0
    group_state: int = 0
    # columns of storage a decode step pins beyond conv_shape: RecurrentGemma keeps `conv_state[:, :, 1:]` of the
    # [B, W, kernel] concatenation (modeling_recurrent_gemma.py), a view that holds kernel columns for kernel - 1
    # read; right after a prefill it is a fresh [B, W, kernel - 1] tensor (2B default: 2,560 x 2 B more a decode)
    conv_pinned: int = 0
    kind = "state"

    def pinned_bytes(self, act_bytes: int) -> int:
        """Bytes of one sequence's conv storage beyond its state, once decoding (0 for every family but one)."""
        if not self.conv_pinned:
            return 0
        return prod(self.conv_shape[:-1]) * self.conv_pinned * (4 if self.conv_fp32 else act_bytes)

    def recurrent_bytes(self, act_bytes: int) -> int:
        """Bytes of one sequence's recurrent state."""
        return self.recurrent_elems * (4 if self.recurrent_fp32 else act_bytes)

    def conv_bytes(self, act_bytes: int) -> int:
        """Bytes of one sequence's conv state."""
        return self.conv_elems * (4 if self.conv_fp32 else act_bytes)

    @property
    def conv_elems(self) -> int:
        return prod(self.conv_shape) if self.conv_shape else 0

    @property
    def recurrent_elems(self) -> int:
        return prod(self.recurrent_shape) if self.recurrent_shape else 0

    @property
    def window(self) -> None:
        return None

    def describe(self) -> str:
        conv = "x".join(map(str, self.conv_shape))
        rec = "x".join(map(str, self.recurrent_shape))
        if not self.recurrent_shape:  # short convolutions only (LFM2, Inkling)
            return f"{self.mixer}: conv {conv} ({'float32' if self.conv_fp32 else 'model dtype'})"
        return f"{self.mixer}: conv {conv} + state {rec} ({'float32' if self.recurrent_fp32 else 'model dtype'})"


@dataclass(frozen=True)
class NoCacheSpec:
    """A layer that stores nothing: KV shared with another layer, or MLP/MoE only."""

    reason: str = "no attention"
    # a KV-shared layer: the spec its own layer type would cache (SGLang's Gemma 4 pool allocates it anyway:
    # planning/engines/sglang_layers.py POOL_COUNTS_SHARED_KV); None for every other layer that stores nothing
    shares: "LayerSpec | None" = None
    kind = "none"

    @property
    def window(self) -> None:
        return None

    def describe(self) -> str:
        return self.reason


LayerSpec = FullAttentionSpec | CompressedAttentionSpec | StateSpec | NoCacheSpec
