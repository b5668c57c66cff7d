"""Which families kvplan has proven against transformers, and what it says about the rest.

`kvplan/data/conformance.json` is written by the conformance sweep (`python -m validation.conformance
--write-data`): for every causal-LM architecture transformers ships, whether kvplan's KV bytes and parameter count
equalled what transformers builds on its default config and its cache-switching variants. Here that record
becomes behaviour, in every face alike (CLI, JSON, API, app, plan notes):

- measured exact: the number stands, `verified` is true;
- measured wrong: kvplan refuses that figure and names the class and the measured error, rather than print a
  number it knows to be off (the sweep re-measures the raw rule, so a fixed rule lifts the refusal);
- never measured (a family transformers lacks, remote code only): the number carries a warning.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import UnsupportedArchitectureError
from .reader import SAME_ARCHITECTURE
from .unread import RULES, verdicts

_DATA = Path(__file__).parent.parent / "data" / "conformance.json"
ENFORCE = True  # the sweep itself turns the refusals off, to measure the raw rules again


@dataclass(frozen=True)
class FamilyStatus:
    """The sweep's verdict on one model_type: 'exact', 'wrong', 'refused', 'no-build' or '' (not measured)."""

    model_type: str
    kv: str = ""
    params: str = ""
    cls: str = ""
    kv_error: str = ""      # "-35.7 %" where kv is wrong
    params_error: str = ""
    transformers: str = ""
    known_keys: frozenset = frozenset()   # structural keys of the family's own config class
    needs_decoder: bool = False           # BERT-style: a causal LM only with is_decoder true

    @property
    def measured(self) -> bool:
        return self.kv in ("exact", "wrong", "refused")


@lru_cache(maxsize=1)
def _table() -> dict:
    if not _DATA.exists():
        return {"transformers": "?", "families": {}}
    return json.loads(_DATA.read_text())


def family_status(model_type: str, wrapper_type: str | None = None) -> FamilyStatus:
    """The record of the multimodal wrapper a text model sits in when the sweep built that wrapper (Mllama, a
    Qwen3 text model inside MOSS's audio wrapper: what it measured is this architecture), else of the text family."""
    table = _table()
    families = table["families"]
    key = SAME_ARCHITECTURE.get(model_type, model_type)  # Kimi-K2 is checked as the DeepSeek-V3 it ships
    wrapper = families.get(wrapper_type) if wrapper_type != model_type else None
    if wrapper is not None and (wrapper.get("kv") in ("exact", "wrong", "refused") or key not in families):
        key = wrapper_type
    row = families.get(key)
    if row is None:
        return FamilyStatus(model_type, transformers=table["transformers"])
    keys = frozenset(row.get("keys", ()))
    if key == wrapper_type:
        # the wrapper's row names its own top-level keys (gemma3: boi_token_index, image_token_index, ...); the text
        # config is the text class's, whose keys are its own row's: gemma-3-27b-it's attn_logit_softcapping is
        # Gemma3TextConfig's, and was named "unread" inside the wrapper but not on the flat gemma-3-1b-it
        keys |= frozenset(families.get(SAME_ARCHITECTURE.get(model_type, model_type), {}).get("keys", ()))
    return FamilyStatus(model_type, row.get("kv", ""), row.get("params", ""), row.get("cls", ""),
                        row.get("kv_error", ""), row.get("params_error", ""), table["transformers"],
                        keys, bool(row.get("needs_decoder")))


def kv_refusal(status: FamilyStatus, name: str) -> UnsupportedArchitectureError | None:
    """The error for a family whose KV rule the sweep measured wrong, or None."""
    if status.kv != "wrong":
        return None
    return UnsupportedArchitectureError(
        f"{name}: kvplan's cache rule for model_type {status.model_type!r} ({status.cls}) does not match "
        f"transformers {status.transformers} yet ({status.kv_error} on its default config), so it gives no "
        "number: open an issue with the model id")


def params_refusal(status: FamilyStatus, name: str) -> str | None:
    """Why the weights of a family the sweep measured and did not find exact are not counted, or None.

    Stricter than the cache: a family whose default config kvplan could not count (Nemotron-H's Mamba-2 mixers)
    would be counted by the llama-like fallback on a fuller config, and that number is known to be wrong."""
    if status.params == "wrong":
        return (f"{name}: kvplan's parameter rule for model_type {status.model_type!r} ({status.cls}) does not "
                f"match transformers {status.transformers} yet ({status.params_error} on its default config), so "
                "its weights are not counted and no plan is made: open an issue with the model id")
    if status.params in ("refused", "no-build") and status.kv != "no-build":
        return (f"{name}: kvplan's parameter rule for model_type {status.model_type!r} ({status.cls}) is not "
                f"verified against transformers {status.transformers}, so its weights are not counted and no plan "
                "is made: open an issue with the model id")
    return None


@lru_cache(maxsize=1)
def _probes() -> dict:
    """model_type -> {"fixed": {key: class default}, ...}: the structural keys kvplan's parameter count was found
    not to follow when each was changed alone (tools/gen_field_probes.py)."""
    path = _DATA.parent / "field_probes.json"
    return json.loads(path.read_text())["families"] if path.exists() else {}


def fixed_field_refusal(status: FamilyStatus, text: dict, name: str, top: dict | None = None,
                        top_type: str | None = None) -> str | None:
    """Why the weights are not counted when the config sets a key the family's rule does not follow to a value
    other than the one it was proven at, or None. AXK2's rule reads its MLA ranks as constants: at
    kv_lora_rank 64 transformers builds 20,295,617,536 parameters and the rule would say 20,314,494,976. A
    multimodal wrapper's keys were probed at its top level (Emu3's tie_word_embeddings), so they are read there."""
    if status.params != "exact":
        return None
    probes = _probes()
    fixed = probes.get(SAME_ARCHITECTURE.get(status.model_type, status.model_type), {}).get("fixed", {})
    moved = [(k, text[k], v) for k, v in fixed.items() if k in text and text[k] is not None and text[k] != v]
    if top is not None and top_type and top_type != status.model_type:
        outer = probes.get(top_type, {}).get("fixed", {})
        moved += [(k, top[k], v) for k, v in outer.items() if k in top and top[k] is not None and top[k] != v]
    if not moved:
        return None
    shown = ", ".join(_moved(k, value, default) for k, value, default in moved[:4])
    return (f"{name}: kvplan's parameter rule for model_type {status.model_type!r} does not follow this config's "
            f"{shown} as transformers {status.transformers} builds it, so its weights are not counted and no plan is "
            "made: open an issue with the model id")


@lru_cache(maxsize=1)
def _kv_probes() -> dict:
    """model_type -> {"kv_fixed": {key: {"default": class default, ...}}, ...}: the int / bool keys kvplan's KV
    figure was found not to follow when each was changed alone (tools/gen_kv_field_probes.py)."""
    path = _DATA.parent / "kv_field_probes.json"
    return json.loads(path.read_text())["families"] if path.exists() else {}


def kv_fixed_refusal(status: FamilyStatus, text: dict, name: str) -> UnsupportedArchitectureError | None:
    """The error for a config that sets a key the family's cache rule does not follow (kv_field_probes.json
    `kv_fixed`) to a value other than the class default the rule was proven at, or None: a KV figure known to be
    off is not printed."""
    if status.kv != "exact":
        return None
    row = _kv_probes().get(SAME_ARCHITECTURE.get(status.model_type, status.model_type), {})
    fixed = row.get("kv_fixed", {}) if isinstance(row, dict) else {}
    moved = [(k, text[k], v["default"]) for k, v in fixed.items()
             if k in text and text[k] is not None and text[k] != v["default"]]
    if not moved:
        return None
    shown = ", ".join(_moved(k, value, default) for k, value, default in moved[:4])
    return UnsupportedArchitectureError(
        f"{name}: kvplan's cache rule for model_type {status.model_type!r} does not follow this config's {shown} as "
        f"transformers {status.transformers} builds it, so it gives no KV figure: open an issue with the model id")


def _moved(key: str, value, default) -> str:
    """One moved key for the refusal: a layer list by the layers that differ (MiniMax-M3's 60 MLP types)."""
    if isinstance(value, list) and isinstance(default, list) and len(value) == len(default):
        layers = [i for i, (a, b) in enumerate(zip(value, default)) if a != b]
        return f"{key} (layers {', '.join(map(str, layers[:6]))}{' ...' if len(layers) > 6 else ''} unlike its " \
               "class default, where it was proven)"
    return f"{key} {value!r} (proven at its class default {default!r})"


def unverified_warnings(status: FamilyStatus) -> tuple[str, ...]:
    """What to say beside a number kvplan has not proven for this family."""
    if status.measured and status.kv == "exact":
        return ()
    if status.kv == "no-build":
        return (f"model_type {status.model_type!r}: transformers {status.transformers} cannot build its default "
                "config here, so kvplan's figures for it are not verified against it",)
    if status.kv == "refused":
        return (f"model_type {status.model_type!r}: kvplan could not size its default config when it was checked "
                f"against transformers {status.transformers}, so its figures for this config are not verified",)
    shipped_as = _multimodal_types().get(status.model_type)
    if shipped_as:
        return (f"model_type {status.model_type!r} ships in transformers {status.transformers} only as "
                f"{shipped_as}, a multimodal class the conformance sweep (causal LMs) does not build: kvplan's "
                "figures for its language model follow its general rules and are not verified",)
    return (f"model_type {status.model_type!r} is not one transformers {status.transformers} ships: kvplan's "
            "figures for it follow its general rules and are not verified",)


@lru_cache(maxsize=1)
def _multimodal_types() -> dict[str, str]:
    """model_type -> class, for families transformers ships only as multimodal models (Qwen2-VL), generated by
    tools/gen_multimodal_types.py."""
    path = _DATA.parent / "multimodal_types.json"
    return json.loads(path.read_text())["types"] if path.exists() else {}


# Words in a config key that may change what a layer caches or holds: `hybrid_override_pattern`, `block_configs`,
# `index_topk`, `num_kv_shared_layers`, `moe_layer_freq`. A key with one of them that the family's own config class
# does not define and kvplan did not read is named in a warning.
STRUCTURAL = re.compile(r"layer|block|pattern|expert|moe|window|chunk|kv|lora|index|linear|mamba|ssm|conv|state|"
                        r"shared|sparse|dense|attn|attention|head|hybrid|nextn|mtp|group|rank|intermediate|ffn")
IGNORED = frozenset({"num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_topk", "router_aux_loss_coef", "output_router_logits", "attention_dropout",
                     "attn_implementation", "_attn_implementation", "head_dim", "norm_topk_prob",
                     # a generation setting of PretrainedConfig's old signature (diverse beam search: beams per
                     # group), written into some configs (Kimi-K2.5); no module reads it
                     "num_beam_groups"})


# `multiplier`: muP's scalars (Phi-3-small's mup_attn_multiplier 1.0 multiplies attention logits, no tensor)
NOT_STRUCTURAL = re.compile(r"eps|dropout|softmax|init|scal|rope|theta|temperature|loss|coef|jitter|fp32|output_|"
                            r"multiplier|return_|use_cache|token_id|_std|implementation|torch_dtype|checkpoint|topk|top_k|n_group|routed_scaling|"
                            r"scoring_func|aux_loss")


def structural_keys(config: dict) -> list[str]:
    return sorted(k for k in config if isinstance(k, str) and STRUCTURAL.search(k) and k not in IGNORED
                  and not NOT_STRUCTURAL.search(k))


def unread_fields(text: dict, reader, status: FamilyStatus) -> tuple[str, ...]:
    """The warnings for structural keys kvplan neither read nor knows the family's class to have: those
    `unread.RULES` or an alias proves redundant on this config are silent, those it judges carry its bounded
    warning, and the rest are named in one warning."""
    off = {"sliding_window", "max_window_layers"} if text.get("use_sliding_window") is False else set()
    # a switched-off field (false, 0, null) changes nothing, unless its rule says that off is what matters
    # (MiMo-V2-Flash's add_swa_attention_sink_bias false: vLLM builds no sinks)
    candidates = [k for k in structural_keys(text) if k not in reader.used and k not in status.known_keys
                  and k not in off and (text.get(k) not in (None, False, 0, [], {}) or (reader.family, k) in RULES)]
    unread, judged = verdicts(candidates, text, reader)
    if not unread:
        return tuple(judged)
    shown = ", ".join(unread[:6]) + (f" and {len(unread) - 6} more" if len(unread) > 6 else "")
    return tuple(judged) + (f"config field(s) {shown} may change the cache or the weights and kvplan does not read "
                            "them: the figures ignore them",)
