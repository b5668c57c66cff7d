"""`load_model`: a model read completely, once, before anything plans with it.

One pass, down the stages: the source is found (`kvplan.sources.locate.find_config`: a dict, a bundled id, a local
file or folder, a Hub id), the config read into its `ModelSpec` (`parse.parse_config`), and the checkpoint's own
bytes attached where they can be read (`find_checkpoint`: the bundled record, the folder's or the Hub's safetensors
headers), or the reason they cannot. Every later stage takes the finished ModelSpec and reads no source again.
"""

from __future__ import annotations

import dataclasses
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..errors import KVPlanError, ModelNotAvailableError, shown
from ..model.checkpoint import CheckpointTotal
from ..model.spec import ModelSpec
from ..sources.library import find_bundled, partial_copy
from ..sources.locate import find_checkpoint, find_config
from .parse import parse_config
from .reader import Overrides

WEIGHT_SOURCES = ("auto", "checkpoint", "config")


def load_model(
    source: str | Path | Mapping[str, Any],
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    overrides: Overrides | None = None,
    name: str | None = None,
    weights: str = "auto",
) -> ModelSpec:
    """Resolve `source` to a ModelSpec.

    Order: a config dict; a bundled model id (no network, works for gated models); a path to a
    config.json or a folder holding one; otherwise a Hub id fetched with `huggingface_hub`
    (`revision`, `token`, `HF_TOKEN`, `HF_HUB_OFFLINE` and the Hub cache honoured).

    `weights`: "auto" attaches the checkpoint's own tensor bytes where they can be read (the bundled record,
    the safetensors headers in the folder, or on the Hub) and says why not in `checkpoint_note`; "checkpoint"
    makes their absence an error; "config" never looks (the config rule only).
    """
    if weights not in WEIGHT_SOURCES:
        raise ModelNotAvailableError(f"unknown weights source {shown(weights)}: use one of {', '.join(WEIGHT_SOURCES)}")
    found = find_config(source, revision, token, name)
    model = parse_config(found.data, name=found.name, source=found.source, overrides=overrides)
    if found.source == "bundled":
        model = with_library_caveat(model, find_bundled(str(source))[0])
    if weights == "config" or (isinstance(source, Mapping) and weights == "auto"):
        return model
    if overrides is not None and any(v is not None for v in dataclasses.astuple(overrides)):
        why = "the overrides change the model's sizes, so its checkpoint's bytes do not apply"
        if weights == "checkpoint":
            raise ModelNotAvailableError(f"{why}, and weights from the checkpoint were asked for: drop the overrides")
        return dataclasses.replace(model, checkpoint_note=f"{why}: the weights come from the config rule")
    return with_checkpoint(model, source, revision, token, weights == "checkpoint")


def with_library_caveat(model: ModelSpec, model_id: str) -> ModelSpec:
    """A bundled config that is not the Hub file verbatim says what it lacks: a warning when that moves a figure
    (a copy without its vision_config plans the weights low by the tower: Llama-4-Maverick's trimmed copy was
    1.62 GiB low), else a note on the model, which every estimate and plan of it shows (`ModelSpec.library_note`)."""
    gap = partial_copy(model_id)
    if gap is None:
        return model
    said = gap.sentence(model_id)
    if gap.warn:
        return dataclasses.replace(model, warnings=(*model.warnings, said), library_note=said)
    return dataclasses.replace(model, notes=(*model.notes, said), library_note=said)


def with_checkpoint(model: ModelSpec, source, revision=None, token=None, required: bool = False,
                    cache_fallback: bool = True) -> ModelSpec:
    """The model with its checkpoint summary, or (not `required`) with the one-line reason there is none.
    `cache_fallback=False` (the shared web app): Hub headers only with the Hub's yes for this token."""
    layers = len(model.arch.layers) if model.arch is not None else model.num_layers
    hidden = model.arch.hidden if model.arch is not None else None
    try:
        found = find_checkpoint(model.source, source, layers, hidden, revision, token, cache_fallback)
    except KVPlanError as exc:
        if required:
            raise
        return dataclasses.replace(model, checkpoint_note=str(exc))
    if isinstance(found, str):
        if required:
            raise ModelNotAvailableError(found)
        return dataclasses.replace(model, checkpoint_note=found)
    if isinstance(found, CheckpointTotal):  # a total, no tensors: the rule keeps the per-GPU shares
        if required:
            raise ModelNotAvailableError(f"kvplan's record of {model.name}'s checkpoint holds its total bytes only "
                                         f"({found.what}): pass the downloaded checkpoint folder for its tensors")
        return dataclasses.replace(model, checkpoint_total=found, checkpoint_note=(
            f"kvplan bundles the checkpoint's total, not its tensors: {found.total_bytes:,} B ({found.what}; "
            f"{found.source})"))
    return dataclasses.replace(model, checkpoint=found)


def load_cached(name: str) -> ModelSpec:
    """A model by name; bundled ones are read once per process (ModelSpec is frozen, safe to share)."""
    return _load_bundled(name) if find_bundled(name) else load_model(name)


def as_model(model: Any) -> ModelSpec:
    """What every public entry point takes as its model: a ModelSpec as it is; a name, Hub id or path (str or
    `pathlib.Path`) read through load_cached; a config's data read by load_model. `kvplan.plan(Path(...))` used to
    fail with "'PosixPath' object has no attribute 'dims'"."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if isinstance(model, str):
        return load_cached(model)
    if isinstance(model, Mapping):
        return load_model(model)
    raise ModelNotAvailableError(f"a model is a bundled name, a Hub id, a config.json path or a config's data, not "
                                 f"{type(model).__name__}: pass one of those")


@lru_cache(maxsize=256)
def _load_bundled(name: str) -> ModelSpec:
    return load_model(name)
