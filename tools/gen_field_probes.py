"""Regenerate kvplan/data/field_probes.json: does kvplan's parameter count follow each structural field of a family?

The conformance sweep (validation/conformance.py) proves a family's rule at its config class's defaults and
tools/gen_family_traits.py at one resized config (hidden, intermediate and vocabulary sizes changed). A field neither
touches can still move transformers' model while kvplan's count stays put: AXK2's `kv_lora_rank` at 64 in place of
its default 512 gives transformers 20,295,617,536 parameters and kvplan 20,314,494,976 (its extras had read the
constant 512 as `n_routed_experts`, equal by chance at the default). So this changes each structural key of the
family's class (the sweep's `keys` and every other top-level int or bool of the class default's to_dict() but the
token ids: a bool flipped, an int doubled below 64 and halved from 64) one at a time,
builds the model on the meta device and compares `sum(p.numel() for p in model.parameters())` with kvplan's count.

A key the count follows is listed under `follows`; one it does not is recorded under `fixed` with the class default,
and kvplan refuses the parameter count of a config that sets that key to another value (kvplan.config.verified
`fixed_field_refusal`), naming the key, rather than print a number known to be off. A family whose default kvplan does
not count exactly by this plain comparison (a multimodal wrapper whose towers the sweep counts its own way) is not
probed, and says so.

Run: python tools/gen_field_probes.py [model_type ...]   (needs torch and transformers; ~40 minutes for all on 2
cores; with names, only those families are probed again and the rest of the file is kept)
"""

from __future__ import annotations

import json
import signal
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "kvplan" / "data" / "field_probes.json"
CONFORMANCE = ROOT / "kvplan" / "data" / "conformance.json"
# sizes the sweep and the traits generator already change (default and resized): probed there
SIZES = frozenset({"num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
                   "hidden_size", "vocab_size"})
TIMEOUT_S = 60


class _Timeout(Exception):
    pass


class KvplanRefuses(Exception):
    """kvplan's reading raised on a config transformers builds (an encoder-decoder flag): a refusal, not a count."""


def _alarm(*_):
    raise _Timeout


def changed(value):
    """The probe value for a class default: a bool flipped, an int doubled (below 64) or halved; else None. A 1 is
    doubled too: Zaya's depthwise conv reads as [channels, num_experts_per_tok, cca_time0] at its default top-1 (the
    conv's 1 is groups', not the expert count), so only num_experts_per_tok 2 shows which it is."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int) and value >= 1:
        return value * 2 if value < 64 else value // 2
    if isinstance(value, list) and len(value) > 2 and set(value) <= {"dense", "sparse"}:
        # an MLP layer-type list: layer 1 and the last flipped (HY-V4's default has layer 0 dense only, and a rule
        # that read its dense MLP as "the first layer's" was 3,219,521,536 parameters high at this probe)
        flip = {"dense": "sparse", "sparse": "dense"}
        return [flip[v] if i in (1, len(value) - 1) else v for i, v in enumerate(value)]
    return None


def probe_value(key: str, base: dict):
    """The value a key is probed at: `changed` of its class default; num_key_value_heads halved (probed only where
    it equals the head count: doubled it could not build)."""
    if key == "num_key_value_heads":
        kv = base.get(key)
        return kv // 2 if isinstance(kv, int) and not isinstance(kv, bool) and kv > 1 and kv % 2 == 0 else None
    return changed(base.get(key))


def _tie_as_loaded(cfg) -> None:
    """A multimodal config's causal LM is built from its text config, which ties the embeddings by its own flag;
    the class a checkpoint loads into may tie them by the top-level one: Qwen3_5MoeForConditionalGeneration ties
    at the top-level tie_word_embeddings true (as kvplan counts it), Llama4ForConditionalGeneration does not. So
    the text config's flag is set to what that class does (its lm_head is its input embeddings or not), and the
    causal LM counted as the checkpoint's language model."""
    import torch
    from transformers import AutoModelForImageTextToText

    text = cfg.get_text_config(decoder=True)
    if text is cfg:
        return
    try:
        with torch.device("meta"):
            full = AutoModelForImageTextToText.from_config(cfg, dtype=torch.bfloat16)
    except Exception:  # noqa: BLE001 - no image-text class: the causal LM is what loads
        return
    out = full.get_output_embeddings()
    text.tie_word_embeddings = out is not None and out.weight is full.get_input_embeddings().weight


def counts(mt: str, changes: dict) -> tuple[int, int | None]:
    """(transformers' parameters on meta, kvplan's count or None) for the class default with `changes`."""
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    from kvplan.config import verified
    from kvplan.config.parse import parse_config
    from kvplan.weights.rule import param_count

    cfg = CONFIG_MAPPING[mt](**changes)
    written = cfg.to_dict()       # what a checkpoint's config.json says, before the text config is set as loaded
    if "tie_word_embeddings" in changes:
        _tie_as_loaded(cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    truth = sum(p.numel() for p in model.parameters())
    verified.ENFORCE = False      # the raw rule, as the sweep measures it
    try:
        spec = parse_config(written)
    except Exception as exc:      # noqa: BLE001 - kvplan refuses the config itself: no number, so nothing to compare
        raise KvplanRefuses(f"{type(exc).__name__}") from exc
    finally:
        verified.ENFORCE = True
    return truth, (param_count(spec.arch).total if spec.arch is not None else None)


def probed_keys(sweep_keys: list[str], base: dict) -> list[str]:
    """The sweep's structural keys and every other top-level int or bool of the class default's to_dict() (no
    token ids), and its dense / sparse MLP layer-type lists: the sweep's list misses fields that move the model (AXK2's `qk_rope_head_dim`, JetMoE's
    `num_experts_per_tok`, Kimi-Linear's `head_dim`), so nothing the config can set to a number is left out."""
    extra = [k for k, v in base.items() if (isinstance(v, (bool, int)) or changed(v) is not None)
             and not k.endswith("_token_id")]
    return sorted(set(sweep_keys) | set(extra))


def probe(mt: str, keys: list[str]) -> dict:
    from transformers import CONFIG_MAPPING

    try:
        base = CONFIG_MAPPING[mt]().to_dict()   # plain values: a per-layer config refuses a global getattr
        keys = probed_keys(keys, base)
        truth, ours = counts(mt, {})
    except Exception as exc:  # noqa: BLE001
        return {"not_probed": f"the default does not build here ({type(exc).__name__})"}
    if truth != ours:
        return {"not_probed": "kvplan's plain count of the causal LM is not transformers' at the default (the "
                              "sweep compares this family its own way)"}
    out: dict = {"follows": [], "fixed": {}, "not_probed": {}}
    kv = base.get("num_key_value_heads")
    # KV heads equal to the heads at the default hide a k/v projection read at q_dim (Helium's, before its traits
    # probed it: 2,172,643,840 for transformers' 2,015,357,440 at 10 KV heads of 20): halved, the one size probed
    # here (more KV heads than heads cannot build)
    extra = ["num_key_value_heads"] if isinstance(kv, int) and kv == base.get("num_attention_heads") else []
    for key, value in [(k, probe_value(k, base)) for k in [k for k in keys if k not in SIZES] + extra]:
        default = base.get(key)
        if value is None:
            continue
        signal.alarm(TIMEOUT_S)
        try:
            truth, ours = counts(mt, {key: value})
        except _Timeout:
            out["not_probed"][key] = f"the model at {key}={value} took over {TIMEOUT_S} s to build"
            continue
        except KvplanRefuses as exc:
            out["not_probed"][key] = f"kvplan refuses the config at {key}={value} ({exc})"
            continue
        except Exception as exc:  # noqa: BLE001 - transformers cannot build it so: no checkpoint can have it
            out["not_probed"][key] = f"transformers cannot build {key}={value} ({type(exc).__name__})"
            continue
        finally:
            signal.alarm(0)
        if truth == ours:
            out["follows"].append(key)
        else:
            out["fixed"][key] = default
            print(f"  {mt}: {key}={value}: transformers {truth:,}, kvplan "
                  f"{'refused' if ours is None else f'{ours:,}'}", file=sys.stderr, flush=True)
    return {k: v for k, v in out.items() if v}


def main(argv: list[str]) -> int:
    import transformers
    from transformers import CONFIG_MAPPING
    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore")
    hf_logging.set_verbosity_error()
    signal.signal(signal.SIGALRM, _alarm)
    families = json.loads(CONFORMANCE.read_text())["families"]
    old = json.loads(OUT.read_text())["families"] if OUT.exists() and argv else {}
    types = argv or sorted(mt for mt, f in families.items() if f.get("params") == "exact" and mt in CONFIG_MAPPING)
    if argv == ["--resume"]:   # the families a stopped run had not written yet
        types = sorted(mt for mt, f in families.items() if f.get("params") == "exact" and mt in CONFIG_MAPPING
                       and mt not in old)
    for mt in types:
        old[mt] = probe(mt, families[mt].get("keys", []))
        print(f"{mt:28s} {len(old[mt].get('fixed', {}))} fixed, {len(old[mt].get('follows', []))} follow",
              flush=True)
        OUT.write_text(json.dumps({"transformers": transformers.__version__, "families": old}, indent=1,
                                  sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
