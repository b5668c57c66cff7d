"""A model as kvplan sees it: per-layer cache specs plus the config values that fed them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .dtypes import DType
from .layers import FullAttentionSpec, LayerSpec, MLASpec, StateSpec


@dataclass(frozen=True)
class ModelSpec:
    """A model as kvplan reads it, once, from its config. Built only by `kvplan.config.parse_config`.

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
    dims: object = None  # kvplan.config.ArchDims: sizes for weights and activations (planner)
    arch: object = field(default=None, compare=False, repr=False)  # kvplan.arch.ArchShape: what the weights hold
    arch_error: str | None = None  # why `arch` is None: the config sizes the cache but not the weights
    warnings: tuple[str, ...] = ()  # what kvplan has not verified about this model (kvplan.verified)
    dtype_named: bool = True  # False: the config names no dtype, so `dtype` is transformers' float32 default
    # kvplan.checkpoint.CheckpointWeights: the checkpoint's own tensor bytes (safetensors headers or a bundled
    # record); None when only the config is known. `checkpoint_note` says why there is none, where one was sought.
    checkpoint: object = field(default=None, compare=False, repr=False)
    checkpoint_note: str | None = None
    checkpoint_total: object = field(default=None, compare=False, repr=False)  # kvplan.checkpoint.CheckpointTotal

    @property
    def verified(self) -> bool:
        """True when every figure for this model follows rules proven against transformers (no warnings)."""
        return not self.warnings

    def require_arch(self):
        """The weight shape, or the ConfigError that says which field the weights need."""
        if self.arch is None:
            from .errors import ConfigError

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

    def _first_attention(self) -> FullAttentionSpec | None:
        return next((s for _, s in self.specs() if isinstance(s, FullAttentionSpec)), None)

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

    @property
    def has_state(self) -> bool:
        return any(isinstance(s, StateSpec) for _, s in self.specs())

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

