"""Where a plan's weights came from: the checkpoint's headers or the config rule, both whole-model figures where
both exist, a multimodal model's split by component, and the warning for a tower no rule counts (kvplan.planning.planner
adds these fields to every Plan)."""

from __future__ import annotations

from ..dtypes import DType
from ..model.checkpoint import COMPONENTS
from ..model.spec import ModelSpec
from .split import checkpoint_for, incomplete_checkpoint, whole_model, with_online_quant


def weights_provenance(model: ModelSpec, quantization: str | None, act: DType) -> dict:
    """Plan fields saying where the weights came from: the checkpoint's headers or the config rule, both whole-model
    figures where both exist (Llama-3.1-8B bf16: 16,060,522,496 B each), the split by component (a multimodal
    model's tower and projector), and what the checkpoint stores beside what the rule says it stores. `act`: the
    dtype the plan serves the model in."""
    shape = model.arch
    language, towers, stored = whole_model(shape, act) if shape is not None else (None, (), None)
    rule = language + sum(b for _, b in towers) if language is not None else None
    parts = {"language_model": language, **dict(towers)} if towers else {}
    found = checkpoint_for(model, with_online_quant(shape, quantization)) if shape is not None else None
    total = model.checkpoint_total
    out = {"weights_rule_bytes": rule, "rule_stored_bytes": stored, "weights_components": parts}
    if model.checkpoint is not None or total is not None:
        out["checkpoint_stored_bytes"] = model.checkpoint.stored_bytes if total is None else total.total_bytes
    if found is None:
        why = model.checkpoint_note or "no checkpoint was read"
        if model.checkpoint is not None:
            why = incomplete_checkpoint(model) or ("online quantization rewrites the checkpoint's weights, so the "
                                                   "config rule prices them")
        if total is not None and total.explained:
            why += f"; the rule differs because {total.explained}"
        return {**out, "weights_source": "config rule", "weights_provenance": why}
    loaded = found.resident_bytes(act)
    split = {c: found.resident_bytes(act, skip=frozenset(COMPONENTS) - {c}) for c in found.by_component()}
    return {**out, "weights_source": "checkpoint", "weights_checkpoint_bytes": loaded,
            "weights_components": {c: b for c, b in split.items() if c != "mtp"},
            "weights_provenance": f"{found.source}: {found.tensors:,} tensors in {found.files} file(s), "
                                  f"{found.stored_bytes:,} B stored"}


def weights_warnings(model: ModelSpec, weights_source: str, engine: str) -> list[str]:
    """A checkpoint too small to be the model's (never a silent fall-back to the rule), and a multimodal model whose
    tower the rule cannot count, planned without its checkpoint: the weights are low."""
    out = [why] if (why := incomplete_checkpoint(model)) else []
    missing = model.arch.towers_missing if model.arch is not None else None
    if missing and weights_source != "checkpoint" and engine != "hf":
        out.append(f"{model.name}: {missing}, so the weights leave it out and the KV pool is high by its size: pass "
                   "the checkpoint folder (or the Hub id online) for its exact bytes")
    return out
