"""Regenerate kvplan/data/kv_field_probes.json: does kvplan's KV figure follow each int/bool field of a family?

The conformance sweep (validation/conformance.py) proves a family's cache rule at its config class's defaults (and
its cache-switching variants), and the traits generator at one resized config. A field neither touches can still
change the cache transformers builds while kvplan's figure stays put: CPM-Ant's `dim_head` at 256 (its default is
128, equal to hidden_size / num_attention_heads) makes each head 256 wide in transformers while kvplan's figure
stays where it was. So this changes each top-level int or bool field of the class default one at a time (a bool
flipped, an int doubled below 64 and halved from 64; token ids, the sizes the sweep already resizes and the
PretrainedConfig output switches are left alone), runs the conformance sweep's own measurement on it (one prefill on
the meta device, or on CPU with the MLP and vocabulary shrunk where meta cannot run the model: conformance
`_build` / `_prefill` / `cpu_fallback`, the cache walked by validation.measure.walk_cache) and compares the bytes
with kvplan's raw KV figure for the same config dict at the same tokens (conformance `kvplan_figures`). The prefill
is the sweep's long prompt (5,000 tokens, or the learned positions' end where sooner) so that a window of 4,096
and its half both bind, or its 1,000 tokens for a family whose prefill does not run 5,000 in time (a chunked
linear-attention loop on meta); the CPU fallback runs 128 tokens, and each row says what it ran (`prompt`).

A key kvplan follows is listed under `follows` with the value it was changed to and transformers' figures there
(tests/test_kv_field_probes.py re-runs kvplan against them); one it does not is recorded under `kv_fixed` with the
class default and both figures, and kvplan refuses the KV figure of a config that sets that key to another value
(kvplan.config.verified `kv_fixed_refusal`), naming the key. One where kvplan already refuses the changed config
in one line (BERT-style `is_decoder` false, `is_encoder_decoder` true) is listed under `refuses`. A key whose changed config transformers cannot build
or run is `not_probed`, with the reason; a family the run did not reach says so.

Run: python tools/gen_kv_field_probes.py [--scratch DIR (default /tmp/kv-field-probes)] [model_type ...]   (needs torch and transformers). Each
family's result is written to DIR/<model_type>.json as it ends, so two runs on disjoint families can share the
work; `--merge DIR` writes the record from DIR, keeping the families of the old record DIR does not hold and
marking every KV-exact family neither has as not probed.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "kvplan" / "data" / "kv_field_probes.json"
CONFORMANCE = ROOT / "kvplan" / "data" / "conformance.json"
COVERAGE = ROOT / "docs" / "coverage.json"
# sizes the sweep and the traits generator already change (default and resized): probed there
SIZES = frozenset({"num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
                   "hidden_size", "vocab_size"})
# PretrainedConfig's own output switches and feed-forward chunking: what a forward returns or how it loops, never a
# tensor the cache holds (the prefill asks for the cache itself)
OUTPUTS = frozenset({"output_attentions", "output_hidden_states", "return_dict", "chunk_size_feed_forward"})
TIMEOUT_S = 90
LONG_S = 12   # a family whose default prefill takes longer at 5,000 tokens is probed at 1,000
# probed first: the families people plan most, and CPM-Ant, whose dim_head this guard was written for
FIRST = ("cpmant", "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma2", "gemma3_text", "deepseek_v3",
         "gpt_oss", "phi3", "mixtral", "qwen3_next", "glm4_moe", "olmo2", "cohere2", "gemma", "falcon", "gpt2")


class _Timeout(BaseException):
    """Not an Exception: conformance's cpu_fallback answers any Exception with the meta error it was handed."""


def _alarm(*_):
    raise _Timeout


def changed(value):
    """The probe value for a class default: a bool flipped, a positive int doubled (below 64) or halved; else None."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int) and value >= 1:
        return value * 2 if value < 64 else value // 2
    return None


def probe_keys(mt: str, base: dict) -> list[str]:
    """The fields of a family's class default the probe changes, in name order."""
    return sorted(k for k, v in base.items() if changed(v) is not None and "token_id" not in k
                  and k not in SIZES and k not in OUTPUTS)


def base_variant(mt: str) -> tuple[str, dict]:
    """The sweep's variant a family was proven KV-exact on (the plain default where it was; a BERT-style family's
    `decoder`; a default the sweep had to repair, with its repair): (its name, its settings)."""
    from validation.conformance import settings

    rows = [r for r in json.loads(COVERAGE.read_text()) if r["model_type"] == mt and r["kv_status"] == "exact"]
    rows.sort(key=lambda r: (not r["variant"].startswith("default"), r["variant"] != "decoder"))
    name = rows[0]["variant"] if rows else "default"
    return name, settings(mt, name)


def measure(mt: str, variant: dict, prompt: int) -> dict:
    """transformers' cache after one prefill of the config `variant` sets (`prompt` tokens, fewer where its learned
    positions end sooner or it runs on CPU), beside kvplan's raw figure there."""
    import torch

    from transformers import CONFIG_MAPPING

    from validation.conformance import (CPU_PROMPT, DTYPE, _build, _prefill, config_dict, cpu_fallback,
                                        kvplan_figures)
    from validation.measure import walk_cache

    torch.set_num_threads(1)
    text = CONFIG_MAPPING[mt](**variant).get_text_config(decoder=True)
    limit = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)
    length = min(prompt, limit) if isinstance(limit, int) and limit > 0 else prompt
    cfg, model = _build(mt, variant, "meta", getattr(torch, DTYPE))
    device = "meta"
    try:
        cache = _prefill(model, cfg, length)
    except Exception as exc:  # noqa: BLE001 - meta cannot run every model: the sweep's CPU fallback
        del model
        length = min(length, CPU_PROMPT)
        cache, device = cpu_fallback(mt, variant, length, exc), "cpu-shrunk"
    held = walk_cache(cache) if cache is not None else None
    truth = {"device": device, "prompt": length, "storage": held.storage if held else 0,
             "logical": held.logical if held else 0}
    ours = kvplan_figures(config_dict(mt, variant), length)
    return {"truth": truth, "kvplan": ours.get("kv_refused") or {"storage": ours["storage"],
                                                                "logical": ours["logical"]}}


def agrees(m: dict) -> bool:
    t, k = m["truth"], m["kvplan"]
    return isinstance(k, dict) and k["storage"] == t["storage"] and (t["device"] != "meta"
                                                                     or k["logical"] == t["logical"])


def probe(mt: str) -> dict:
    from transformers import CONFIG_MAPPING

    from validation.conformance import PROMPT, PROMPT_LONG

    name, variant = base_variant(mt)
    at_base = None
    for prompt in (PROMPT_LONG, PROMPT):   # the long prompt where the family's prefill runs it in time
        signal.alarm(TIMEOUT_S)
        at_base = None
        try:
            base = CONFIG_MAPPING[mt](**variant).to_dict()   # plain values: a per-layer config refuses getattr
            start = time.perf_counter()
            at_base = measure(mt, variant, prompt)
            if prompt == PROMPT or time.perf_counter() - start < LONG_S:
                break
        except _Timeout:
            continue
        except Exception as exc:  # noqa: BLE001
            return {"not_probed": f"the {name} config does not run here ({type(exc).__name__}: {str(exc)[:150]})"}
        finally:
            signal.alarm(0)
    if at_base is None:
        return {"not_probed": f"one prefill of the {name} config takes over {TIMEOUT_S} s even at {PROMPT} tokens"}
    if not agrees(at_base):
        return {"not_probed": f"kvplan's raw figure is not transformers' at the {name} config here ({at_base})"}
    out: dict = {"variant": name, "follows": {}, "kv_fixed": {}, "refuses": {}, "not_probed": {}}
    for key in probe_keys(mt, base):
        if key in variant:
            continue
        default, value = base[key], changed(base[key])
        signal.alarm(TIMEOUT_S)
        try:
            m = measure(mt, {**variant, key: value}, prompt)
        except _Timeout:
            out["not_probed"][key] = f"{key}={value} took over {TIMEOUT_S} s"
            continue
        except Exception as exc:  # noqa: BLE001 - transformers cannot build or run it so: no checkpoint has it
            out["not_probed"][key] = f"transformers cannot run {key}={value} ({type(exc).__name__})"
            continue
        finally:
            signal.alarm(0)
        if agrees(m):
            out["follows"][key] = {"value": value, **m["truth"]}
        elif isinstance(m["kvplan"], str):   # a refusal in one line already: no silent number to guard
            out["refuses"][key] = {"value": value, "truth": m["truth"], "kvplan": m["kvplan"][:300]}
        else:
            out["kv_fixed"][key] = {"default": default, "value": value, "truth": m["truth"], "kvplan": m["kvplan"]}
            print(f"  {mt}: {key}={value}: transformers {m['truth']}, kvplan {m['kvplan']}", file=sys.stderr,
                  flush=True)
    return {k: v for k, v in out.items() if v}


def exact_families() -> list[str]:
    from transformers import CONFIG_MAPPING

    fams = json.loads(CONFORMANCE.read_text())["families"]
    return sorted(mt for mt, f in fams.items() if f.get("kv") == "exact" and mt in CONFIG_MAPPING)


def ordered(types: list[str]) -> list[str]:
    return [mt for mt in FIRST if mt in types] + [mt for mt in types if mt not in FIRST]


def merge(scratch: Path) -> None:
    import transformers

    old = json.loads(OUT.read_text())["families"] if OUT.exists() else {}
    for path in sorted(scratch.glob("*.json")):
        old[path.stem] = json.loads(path.read_text())
    for mt in exact_families():
        old.setdefault(mt, {"not_probed": "the probe run stopped before this family (time)"})
    OUT.write_text(json.dumps({"transformers": transformers.__version__, "families": old}, indent=1,
                              sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore")
    hf_logging.set_verbosity_error()
    if argv[:1] == ["--merge"]:
        merge(Path(argv[1]))
        return 0
    scratch = Path("/tmp/kv-field-probes")
    if argv[:1] == ["--scratch"]:
        scratch, argv = Path(argv[1]), argv[2:]
    scratch.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGALRM, _alarm)
    types = argv or ordered(exact_families())
    for mt in types:
        if (scratch / f"{mt}.json").exists():
            continue
        row = probe(mt)
        (scratch / f"{mt}.json").write_text(json.dumps(row, indent=1, sort_keys=True) + "\n")
        print(f"{mt:28s} {len(row.get('kv_fixed', {}))} kv_fixed, {len(row.get('follows', {}))} follow, "
              f"{len(row.get('not_probed', {})) if isinstance(row.get('not_probed'), dict) else row.get('not_probed')}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
