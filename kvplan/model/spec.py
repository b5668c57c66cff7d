"""A model as kvplan sees it: per-layer cache specs, the weight shape, the sizes around them, the checkpoint's own
bytes where one was read, and the config values that fed them. One `ModelSpec` per model, read once by
`kvplan.config` (`parse_config`, `load_model`) and shared, frozen, by every later stage."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property

from ..dtypes import DType
from .arch import ArchShape
from .checkpoint import CheckpointTotal, CheckpointWeights
from .layers import FullAttentionSpec, LayerSpec, MLASpec, StateSpec


@dataclass(frozen=True)
class ContextLimit:
    """The longest max_model_len an engine accepts without its override variable, and the field it comes from."""

    tokens: int
    key: str


@dataclass(frozen=True)
class ArchDims:
    """Model sizes beyond the cache, used by the planner (weights, activations). Absent = None."""

    hidden_size: int | None
    num_heads: int | None
    intermediate_size: int | None
    vocab_size: int | None
    max_position_embeddings: int | None
    tie_word_embeddings: bool
    rotary_dim: int | None = None   # RoPE width per head when only part of it rotates (GPT-J 64 of 256)
    rotary_fraction: float = 1.0    # partial_rotary_factor / rotary_pct (Qwen3-Next 0.25, Phi-2 0.4)
    rope_tables: int = 1            # distinct RoPE tables (Gemma 3: local and global bases)
    rope_linear_factor: float = 1.0  # rope_scaling {"rope_type": "linear", "factor": 8} of the (global) RoPE
    rope_widths: tuple[int, ...] = ()  # vLLM's table widths when RoPE is set per layer type (Gemma 4: 256, 512)
    vllm_limit: ContextLimit | None = None    # the longest max_model_len vLLM accepts (kvplan.config.context)
    sglang_limit: ContextLimit | None = None  # ... and SGLang
    invalid: tuple[str, ...] = ()   # "max_position_embeddings 'abc'": set but unusable, so None above
    invalid_positions: str | None = None  # the one of `invalid` that sets the context length, if any


@dataclass(frozen=True)
class ModelSpec:
    """A model as kvplan reads it, once, from its config. Built only by `kvplan.config.parse.parse_config`.

    `layers[i]` is the tuple of specs layer i caches: usually one, two for a hybrid layer that is
    attention and SSM at once (Falcon-H1), none for a layer that caches nothing.
    `fields` holds the config values used, under kvplan's own names, for formulas and display.
    """

    name: str
    model_type: str
    dtype: DType
    layers: tuple[tuple[LayerSpec, ...], ...]
    fields: dict = field(default_factory=dict, compare=False, hash=False)
    notes: tuple[str, ...] = ()
    source: str = ""
    dims: ArchDims | None = None  # sizes for weights and activations (planner)
    arch: ArchShape | None = field(default=None, compare=False, repr=False)  # what the weights hold
    arch_error: str | None = None  # why `arch` is None: the config sizes the cache but not the weights
    warnings: tuple[str, ...] = ()  # what kvplan has not verified about this model (kvplan.config.verified)
    # a bundled config that is not the Hub file verbatim: what it lacks and how that moves the figures (in
    # `warnings` too when it moves one, in `notes` when not; kvplan.config.load.with_library_caveat)
    library_note: str | None = None
    dtype_named: bool = True  # False: the config names no dtype, so `dtype` is transformers' float32 default
    # the checkpoint's own tensor bytes (safetensors headers or a bundled record); None when only the config is
    # known. `checkpoint_note` says why there is none, where one was sought (kvplan.config.load).
    checkpoint: CheckpointWeights | None = field(default=None, compare=False, repr=False)
    checkpoint_note: str | None = None
    checkpoint_total: CheckpointTotal | None = field(default=None, compare=False, repr=False)  # a record's total
    # the class a serving engine builds for it (the config's first `architectures` entry, "LlamaForCausalLM"):
    # vLLM keys its runner rules on it, SGLang its pools and pipeline layout; "" when the config names none
    architecture: str = ""

    @property
    def verified(self) -> bool:
        """True when every figure for this model follows rules proven against transformers (no warnings)."""
        return not self.warnings

    def require_arch(self):
        """The weight shape, or the ConfigError that says which field the weights need."""
        if self.arch is None:
            from ..errors import ConfigError

            raise ConfigError(self.arch_error or f"{self.name}: the config does not describe the weights")
        return self.arch

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def specs(self):
        """Every (layer index, spec) pair, in layer order."""
        for index, layer in enumerate(self.layers):
            for spec in layer:
                yield index, spec

    @property
    def attention_kinds(self) -> dict[str, int]:
        """Layer count per cache kind, e.g. {'sliding': 21, 'full': 21} for gemma-2-9b."""
        return dict(Counter(spec.kind for _, spec in self.specs()))

    @cached_property
    def _attention_spec(self) -> FullAttentionSpec | None:
        return next((s for _, s in self.specs() if isinstance(s, FullAttentionSpec)), None)

    def _first_attention(self) -> FullAttentionSpec | None:
        """The first attention layer's spec, found once (a Mamba model walked all of its layers per question)."""
        return self._attention_spec

    @property
    def kv_heads(self) -> int | None:
        spec = self._first_attention()
        return spec.kv_heads if spec else None

    @property
    def head_dim(self) -> int | None:
        spec = self._first_attention()
        if spec is None or isinstance(spec, MLASpec):
            return None
        return spec.k_head_dim

    @property
    def is_mla(self) -> bool:
        return isinstance(self._first_attention(), MLASpec)

    @cached_property
    def distinct_specs(self) -> tuple[LayerSpec, ...]:
        """Each different layer spec once, in first-seen order (specs are frozen, so equal ones hash alike): a
        question every pipeline stage asks walks a few specs, not every layer (PP 10,000: 10^8 spec checks, 48 s).
        The one walk of every layer the kind and state questions below share."""
        return tuple(dict.fromkeys(s for _, s in self.specs()))

    @cached_property
    def spec_kinds(self) -> frozenset[str]:
        """The kinds of cached layer the model has ("full", "sliding", "mamba" ...)."""
        return frozenset(s.kind for s in self.distinct_specs)

    @cached_property
    def state_mixers(self) -> frozenset[str]:
        """The kinds of recurrent state the layers keep ("mamba", "gated_deltanet" ...), asked by every pipeline
        stage of a plan (PP 10,000 of 10,000 layers walked 10^8 layers when each stage walked them)."""
        return frozenset(s.mixer for s in self.distinct_specs if isinstance(s, StateSpec))

    @property
    def has_state(self) -> bool:
        return bool(self.state_mixers)

    @property
    def all_full_attention(self) -> bool:
        """True when every layer is plain full attention (what transformers' QuantizedCache accepts)."""
        return all(
            len(layer) == 1 and type(layer[0]) in (FullAttentionSpec, MLASpec) for layer in self.layers
        )

    @property
    def family(self) -> str:
        return self.model_type

    def summary(self) -> str:
        kinds = ", ".join(f"{n} {k}" for k, n in self.attention_kinds.items())
        return f"{self.name}: {self.num_layers} layers ({kinds})"

