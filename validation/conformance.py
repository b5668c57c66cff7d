"""Conformance against transformers itself: every causal-LM architecture it ships, kvplan against the real thing.

For each `model_type` in transformers' `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` and each variant of its default
config that switches the cache behaviour on (sliding window, MoE, hybrid pattern: see `variants`), this:

1. builds the config class's defaults (`CONFIG_MAPPING[mt]()`), applies the variant, and hands kvplan the
   dict a `save_pretrained` would write (`to_dict()`, in bf16: `config_dict`), never the config object;
2. instantiates the model on the `meta` device in bf16 (shapes only, any size, seconds) and counts
   `model.parameters()` (tied weights once, as `parameters()` deduplicates them); a multimodal family whose
   causal LM leaves its towers out (Llama4ForCausalLM) is counted whole as its `MODEL_FOR_MULTIMODAL_LM` class
   (Llama4ForConditionalGeneration), the model its checkpoints hold (`whole_model`);
3. runs one prefill of `PROMPT` tokens at batch 1 and walks the cache it returns (attributes, lists and dicts:
   `validation.measure.walk_cache`), storage and logical bytes;
4. where meta cannot run a model (`.item()` on meta, data-dependent shapes), runs it on CPU with the hidden
   sizes shrunk but the cache geometry kept (`cpu_fallback`), rather than dropping it;
5. compares with kvplan: KV storage / logical bytes of `estimate(...)` right after that prefill, and the
   parameter count: kvplan's language model plus the towers it counts against transformers' whole model, or,
   where kvplan says it counts the language model only (a tower it has no rule for), against transformers'
   language model, the reason recorded (`judge`). Each architecture ends `exact`, `refused` (a typed kvplan
   error, with its one line) or `wrong` (a number that is not transformers'), or `no-build` (transformers itself
   cannot build it here).

`python -m validation.conformance` runs the whole sweep (about 10 minutes on 2 cores) and writes
`docs/coverage.md` and `docs/coverage.json`; `--only a,b` runs some. tests/test_conformance.py runs a fast
subset in the default test run and reads the committed table; tests/test_conformance_live.py re-runs kvplan on
every row's config (config classes only, no model built) against the figures stored here (`config_for`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROMPT = 1000          # a 1000-token prefill, above every default window that is <= 999 ...
PROMPT_LONG = 5000     # ... and above most default windows (4096) when the model has one
TIMEOUT_S = 120        # per architecture, per variant
DTYPE = "bfloat16"     # the models are built in it (config_dict writes it into the config kvplan reads)


@dataclass
class Row:
    model_type: str
    variant: str
    cls: str = ""
    device: str = ""            # meta | cpu-shrunk | -
    prompt: int = 0
    kv_status: str = ""         # exact | refused | wrong | no-build
    params_status: str = ""
    kv_measured: int | None = None
    kv_logical_measured: int | None = None
    kv_kvplan: int | None = None
    kv_logical_kvplan: int | None = None
    params_measured: int | None = None   # transformers' count kvplan's is compared with: the whole or the text
    params_kvplan: int | None = None
    params_whole_measured: int | None = None   # transformers' whole model (towers included)
    params_text_measured: int | None = None    # its language model (the parameters outside NON_TEXT)
    params_text_only: bool = False             # kvplan counted the language model only, and said so
    params_cls: str = ""                       # the class counted for the parameters where it is not `cls`
    config_sha: str = ""                       # sha256 of the config dict kvplan was given (config_for rebuilds it)
    verified: bool | None = None
    reason: str = ""
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # the default config's structural keys (kvplan.config.verified)


# ---------------------------------------------------------------- transformers side (imported lazily)


def _alarm(signum, frame):
    raise TimeoutError(f"over {TIMEOUT_S} s")


def _build(mt: str, variant: dict, device: str, dtype):
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    cfg = CONFIG_MAPPING[mt](**variant)
    kwargs = {}
    if device == "meta":
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, **kwargs)
    else:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, **kwargs)
    return cfg, model.eval()


# Families whose generate() cache is a DynamicCache it is handed and does not return, with the rest of their state
# kept on their modules: RecurrentGemma (transformers 5.24 modeling_recurrent_gemma.py; its CausalLMOutput has no
# cache field, GenerationMixin._prepare_cache_for_generation passes `cache=DynamicCache(config)`, and each
# RecurrentGemmaRecurrentBlock holds conv1d_state, its rg_lru recurrent_states). The walk measures both.
MODULE_STATE = frozenset({"recurrent_gemma"})


def module_states(model) -> list:
    """The tensors a model's modules hold as plain attributes, outside their parameters and buffers (the state a
    stateful model carries between forward calls: RecurrentGemma's conv1d_state and recurrent_states)."""
    import torch

    return [value for module in model.modules() for value in vars(module).values() if isinstance(value, torch.Tensor)]


def _prefill(model, cfg, length: int):
    import torch

    device = next(model.parameters()).device
    vocab = cfg.get_text_config(decoder=True).vocab_size
    if device.type == "meta":
        ids = torch.zeros((1, length), dtype=torch.long, device=device)
    else:
        ids = torch.randint(3, max(4, vocab), (1, length), generator=torch.Generator().manual_seed(0))
    if cfg.model_type in MODULE_STATE:
        from transformers import DynamicCache

        cache = DynamicCache(config=cfg.get_text_config(decoder=True))   # what generate() hands it
        with torch.no_grad():
            model(input_ids=ids, use_cache=True, cache=cache)
        return {"cache": cache, "modules": module_states(model)}
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    cache = getattr(out, "past_key_values", None)
    if cache is None:
        cache = getattr(out, "cache", None)
    if cache is None:  # RWKV (modeling_rwkv.py): RwkvOutput.state, the five [B, hidden, layers] tensors generate feeds back
        cache = getattr(out, "state", None)
    return cache


# Sub-modules of a multimodal wrapper that are not the language model (kvplan counts the language model and says so).
NON_TEXT = ("vision", "visual", "audio", "multi_modal_projector", "mm_projector", "image", "speech", "patch_embed",
            "vqmodel")
# Settings that let a whole multimodal class build where its config's defaults leave a table it reads None
# (Emu3ForConditionalGeneration reads vocabulary_map); none of them holds parameters, and kvplan never sees them.
WHOLE_REPAIRS = ({"vocabulary_map": {}},)
CPU_PROMPT = 128   # shrunk CPU runs: enough tokens to fill every cache, few enough for a real forward
CPU_LIMIT_BYTES = 6e9   # two such runs side by side must fit a 24 GiB machine (DeepSeek-V2: 4.2 GB)


def measure_truth(mt: str, variant: dict, length: int) -> dict:
    """(parameters, text-model parameters, cache storage and logical bytes, device, prompt) of transformers' own
    model, or raises."""
    import torch

    from validation.measure import walk_cache

    torch.set_num_threads(1)
    cfg, model = _build(mt, variant, "meta", getattr(torch, DTYPE))
    try:
        whole = whole_model(mt, variant) or (*_counts(model), type(model).__name__, "")
    except Exception as exc:  # noqa: BLE001 - its KV still stands; its parameters have no truth to compare with
        whole = (None, None, "", f"the whole model does not build: {type(exc).__name__}: {str(exc)[:150]}")
    params, text_params, params_cls, whole_note = whole
    device = "meta"
    try:
        cache = _prefill(model, cfg, length)
    except Exception as exc:  # noqa: BLE001 - meta cannot run every model: fall back to CPU
        del model
        length = min(length, CPU_PROMPT)
        cache, device = cpu_fallback(mt, variant, length, exc), "cpu-shrunk"
    held = walk_cache(cache) if cache is not None else None
    return {"cls": type(model).__name__ if device == "meta" else _class_name(cfg), "params": params,
            "text_params": text_params, "params_cls": params_cls, "whole_note": whole_note,
            "device": device, "prompt": length,
            "storage": held.storage if held else 0, "logical": held.logical if held else 0,
            "config": config_dict(mt, variant)}


def _counts(model) -> tuple[int, int]:
    """(parameters, parameters of the language model) of a built model."""
    params = sum(p.numel() for p in model.parameters())
    text = sum(p.numel() for name, p in model.named_parameters() if not any(word in name for word in NON_TEXT))
    return params, text


def whole_model(mt: str, variant: dict) -> tuple[int, int, str, str] | None:
    """(parameters, language-model parameters, class, note) of the whole multimodal model where transformers'
    causal LM for `mt` is not it: MODEL_FOR_MULTIMODAL_LM names Llama4ForConditionalGeneration (the tower and
    projector a Llama 4 checkpoint holds) where MODEL_FOR_CAUSAL_LM names the text-only Llama4ForCausalLM.
    None where the causal LM is the whole model. Raises when the whole class cannot build at all."""
    import torch
    import transformers
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES)

    name = MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES.get(mt)
    if name is None or name == MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(mt):
        return None
    cls = getattr(transformers, name)
    error: Exception | None = None
    for fix in ({}, *WHOLE_REPAIRS):
        try:
            with torch.device("meta"):
                model = cls._from_config(CONFIG_MAPPING[mt](**variant, **fix), dtype=getattr(torch, DTYPE))
        except Exception as exc:  # noqa: BLE001 - the next repair, or the first error
            error = error or exc
            continue
        note = f"{name} built with {fix} (no parameters)" if fix else ""
        return (*_counts(model), name, note)
    raise error


def _class_name(cfg) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(cfg.model_type, "?")


def cpu_fallback(mt: str, variant: dict, length: int, error: Exception):
    """Run the model on CPU with the MLP / vocab shrunk but the cache geometry (heads, head dims, layers,
    windows, state sizes) untouched. Raises the meta error when even that cannot run."""
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    shrink = {"vocab_size": 512, "intermediate_size": 64, "moe_intermediate_size": 32,
              "shared_expert_intermediate_size": 32}
    cfg = CONFIG_MAPPING[mt](**variant)
    for key, value in shrink.items():
        if isinstance(getattr(cfg, key, None), int):
            setattr(cfg, key, value)
    with torch.device("meta"):   # weigh the shrunk copy first: a 9B Mamba mixer stays 9B (Bamba: 17 GB)
        size = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).parameters())
    if 2 * size > CPU_LIMIT_BYTES:
        raise RuntimeError(f"meta cannot run it ({type(error).__name__}) and its shrunk CPU copy would hold "
                           f"{2 * size / 1e9:.1f} GB") from None
    torch.manual_seed(0)
    try:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
        return _prefill(model, cfg, length)
    except Exception:
        raise error from None


# ---------------------------------------------------------------- kvplan side


def kvplan_figures(config: dict, length: int) -> dict:
    """kvplan's raw rules on `config` (the refusals of kvplan.config.verified off: this is what re-measures them)."""
    import kvplan
    from kvplan.config import verified
    from kvplan.errors import KVPlanError
    from kvplan.weights.rule import param_count

    verified.ENFORCE = False
    out: dict[str, Any] = {}
    try:
        spec = kvplan.parse_config(config, name=config.get("model_type", "?"))
    except KVPlanError as exc:
        out["kv_refused"] = out["params_refused"] = f"{type(exc).__name__}: {exc}"
        return out
    try:
        est = kvplan.estimate(spec, seq_len=length, batch_size=1, dtype="bf16", prompt_len=length)
        out["storage"], out["logical"] = est.prefill_peak_bytes, est.logical_bytes
    except KVPlanError as exc:
        out["kv_refused"] = f"{type(exc).__name__}: {exc}"
    out["warnings"] = list(spec.warnings)
    if spec.arch is None:
        out["params_refused"] = f"ConfigError: {spec.arch_error}"
        return out
    # the language model only where kvplan says so (a tower it has no rule for), else the whole model: the
    # language model plus the towers it counts, as a plan loads them
    arch = spec.arch
    out["text_only"] = arch.towers_missing or next((n for n in arch.notes if "language model only" in n), "")
    out["params"] = param_count(arch).total + (0 if out["text_only"] else sum(n for _, n in arch.towers))
    return out


def judge(row: Row, ours: dict) -> None:
    """kvplan's figures `ours` (kvplan_figures) against the transformers figures already in `row`: fills kvplan's
    side, the statuses and the reasons. The sweep and tests/test_conformance_live.py judge alike."""
    def because(text: str) -> None:
        row.reason = (row.reason + " | " if row.reason else "") + text

    row.warnings = ours.get("warnings", [])
    if "kv_refused" in ours:
        row.kv_status = "refused"
        because(ours["kv_refused"])
    else:
        row.kv_kvplan, row.kv_logical_kvplan = ours["storage"], ours["logical"]
        ok = row.kv_kvplan == row.kv_measured and (row.device != "meta" or row.kv_logical_kvplan == row.kv_logical_measured)
        row.kv_status = "exact" if ok else "wrong"
    row.params_text_only = bool(ours.get("text_only"))
    row.params_measured = row.params_text_measured if row.params_text_only else row.params_whole_measured
    if row.params_whole_measured is None:   # whole_model could not build it: nothing to compare with
        row.params_status = "no-build"
        return
    if row.params_text_only:
        whole = row.params_cls or row.cls
        because(f"language model only ({ours['text_only']}): compared with {whole}'s language model, "
                f"{row.params_whole_measured - row.params_text_measured:,} parameters of other towers not counted")
    if "params_refused" in ours:
        row.params_status = "refused"
        because(ours["params_refused"])
    else:
        row.params_kvplan = ours["params"]
        row.params_status = "exact" if row.params_kvplan == row.params_measured else "wrong"


# ---------------------------------------------------------------- one architecture


# Settings that let a config class whose defaults cannot build or run do so (a default left None that its model
# needs), tried in order when the plain default fails: the first that builds stands in for the default.
REPAIRS = ({"num_experts_per_tok": 2}, {"rope_theta": 10000.0}, {"rope_parameters": {"rope_type": "default",
           "rope_theta": 10000.0}}, {"head_dim": 128})


def variants(mt: str) -> list[tuple[str, dict]]:
    """The default config, plus the switches that turn a cache behaviour on where the default has it off:
    a sliding window (Qwen2-style `use_sliding_window`), decoding (BERT-style `is_decoder`)."""
    from transformers import CONFIG_MAPPING

    out = [("default", {})]
    cfg = CONFIG_MAPPING[mt]()
    if getattr(cfg, "use_sliding_window", None) is False and hasattr(cfg, "sliding_window"):
        out.append(("sliding", {"use_sliding_window": True, "sliding_window": 512,
                                **({"max_window_layers": 1} if hasattr(cfg, "max_window_layers") else {})}))
    if getattr(cfg, "is_decoder", None) is False and not getattr(cfg, "is_encoder_decoder", False):
        out.append(("decoder", {"is_decoder": True}))
    return out


def settings(mt: str, variant_name: str) -> dict:
    """The settings of a row's variant, its repair included: `default+head_dim` is the default with REPAIRS'
    {"head_dim": 128} (`_repaired` names it so)."""
    name, _, repair = variant_name.partition("+")
    out = dict(variants(mt))[name]
    if repair:
        out = {**out, **next(fix for fix in REPAIRS if ",".join(fix) == repair)}
    return out


def config_dict(mt: str, variant: dict) -> dict:
    """The config dict the sweep hands kvplan: the config class with `variant` applied, `to_dict()` (what
    `save_pretrained` writes), in the dtype the model is built in, written where `from_config(dtype=...)` writes
    it (the config and each sub-config). Taken before any model is built: a model class may change its config
    (BartForCausalLM sets is_decoder), a published config.json does not."""
    from transformers import CONFIG_MAPPING

    def typed(d: dict) -> dict:
        return {k: typed(v) if isinstance(v, dict) and "dtype" in v else v for k, v in d.items()} | {"dtype": DTYPE}

    return typed(CONFIG_MAPPING[mt](**variant).to_dict())


def config_for(mt: str, variant_name: str) -> dict:
    """The config dict the sweep handed kvplan for a row (`variant_name` as the row names it). Config classes
    only: no model is built."""
    return config_dict(mt, settings(mt, variant_name))


def config_sha(config: dict) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(config, sort_keys=True, default=repr).encode()).hexdigest()


def prompt_length(mt: str, variant: dict) -> int:
    """PROMPT tokens, or fewer where learned positions end sooner (BERT-style decoders: 512)."""
    from transformers import CONFIG_MAPPING

    text = CONFIG_MAPPING[mt](**variant).get_text_config(decoder=True)
    limit = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)
    return min(PROMPT, limit) if isinstance(limit, int) and limit > 0 else PROMPT


def _repaired(mt: str, variant: dict, length: int, row: Row) -> dict | None:
    """The default with the first REPAIRS entry that makes it build, recorded in the row's reason."""
    for fix in REPAIRS:
        try:
            truth = measure_truth(mt, {**variant, **fix}, length)
        except TimeoutError:
            raise
        except Exception:  # noqa: BLE001
            continue
        row.variant = "default+" + ",".join(fix)
        row.reason = f"default repaired with {fix}"
        return truth
    return None


def run_one(mt: str, variant_name: str, variant: dict) -> Row:
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    row = Row(mt, variant_name)
    start = time.perf_counter()
    try:
        length = prompt_length(mt, variant)
        try:
            truth = measure_truth(mt, variant, length)
        except TimeoutError:
            raise
        except Exception as exc:  # noqa: BLE001
            truth = _repaired(mt, variant, length, row) if variant_name == "default" else None
            if truth is None:
                row.kv_status = row.params_status = "no-build"
                row.reason = f"transformers: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                return row
        row.cls, row.device, row.prompt = truth["cls"], truth["device"], truth["prompt"]
        length = truth["prompt"]
        row.kv_measured, row.kv_logical_measured = truth["storage"], truth["logical"]
        row.params_whole_measured, row.params_text_measured = truth["params"], truth["text_params"]
        row.params_cls = truth["params_cls"] if truth["params_cls"] != row.cls else ""
        if truth["whole_note"]:
            row.reason = (row.reason + " | " if row.reason else "") + truth["whole_note"]
        from kvplan.config.verified import structural_keys

        row.keys = structural_keys(truth["config"])
        row.config_sha = config_sha(truth["config"])
        judge(row, kvplan_figures(truth["config"], length))
    except TimeoutError as exc:
        row.kv_status = row.params_status = "no-build"
        row.reason = f"timed out ({exc})"
    except Exception as exc:  # noqa: BLE001 - a crash in kvplan is a "wrong", with its traceback's last line
        row.kv_status = row.kv_status or "wrong"
        row.params_status = row.params_status or "wrong"
        row.reason = f"kvplan crashed: {type(exc).__name__}: {exc}"[:300]
        traceback.print_exc(file=sys.stderr)
    finally:
        signal.alarm(0)
        row.seconds = round(time.perf_counter() - start, 2)
    return row


def _work(types: list[str], out: Path) -> None:
    """Worker mode: run `types` in order, appending one JSON line per row (a `started` line first, so that a
    crash, e.g. a kernel OOM kill, is pinned on the architecture that caused it)."""
    import transformers

    transformers.logging.set_verbosity_error()
    with out.open("a") as sink:
        for mt in types:
            sink.write(json.dumps({"started": mt}) + "\n")
            sink.flush()
            try:
                vs = variants(mt)
            except Exception as exc:  # noqa: BLE001
                rows = [Row(mt, "default", kv_status="no-build", params_status="no-build",
                            reason=f"transformers config: {type(exc).__name__}: {exc}"[:300])]
            else:
                rows = [run_one(mt, name, variant) for name, variant in vs]
            for row in rows:
                sink.write(json.dumps(asdict(row)) + "\n")
            sink.flush()


def architectures() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _read(path: Path) -> tuple[list[dict], set[str], str | None]:
    rows, done, current = [], set(), None
    if path.exists():
        for line in path.read_text().splitlines():
            item = json.loads(line)
            if "started" in item:
                current = item["started"]
            else:
                rows.append(item)
                done.add(item["model_type"])
    return rows, done, current if current not in done else None


def sweep(only: list[str] | None = None, workers: int = 2, scratch: Path | None = None) -> list[dict]:
    """Every architecture through `workers` subprocesses; one that dies is restarted past the culprit."""
    import tempfile

    types = only or architectures()
    scratch = scratch or Path(tempfile.mkdtemp(prefix="kvplan-conformance-"))
    # no empty share: `--worker ""` is no worker at all, and ran the whole sweep behind a one-family --only
    shares = [share for share in (types[i::workers] for i in range(workers)) if share]
    crashed: list[dict] = []
    procs = {}
    for k, share in enumerate(shares):
        procs[k] = (share, scratch / f"worker{k}.jsonl", _spawn(share, scratch / f"worker{k}.jsonl"))
    skipped: set[str] = set()   # culprits stay skipped across restarts (their rows are the crash rows)
    while procs:
        for k, (share, path, proc) in list(procs.items()):
            if proc.poll() is None:
                _watchdog(path, proc)
                continue
            rows, done, culprit = _read(path)
            if culprit is not None and culprit not in skipped:
                crashed.append(asdict(Row(culprit, "default", kv_status="no-build", params_status="no-build",
                                          reason=f"the process running it died (exit {proc.returncode})")))
                skipped.add(culprit)
            done |= skipped
            left = [mt for mt in share if mt not in done]
            if left and proc.returncode != 0:
                procs[k] = (share, path, _spawn(left, path))
            else:
                del procs[k]
        time.sleep(0.5)
    rows = crashed
    for k in range(workers):
        rows += _read(scratch / f"worker{k}.jsonl")[0]
    return sorted(rows, key=lambda r: (r["model_type"], r["variant"]))


def _watchdog(path: Path, proc) -> None:
    """Kill a worker whose current architecture has run past twice the per-architecture limit: SIGALRM cannot
    interrupt one long C call (a real CPU forward), so the parent ends it and the restart skips the culprit.
    The clock starts at the later of the worker's start and its last line."""
    last = max(proc.started, path.stat().st_mtime if path.exists() else 0.0)
    if time.time() - last > 2 * TIMEOUT_S:
        proc.kill()


def _spawn(types: list[str], out: Path):
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "validation.conformance", "--worker", ",".join(types),
                             "--out", str(out)], cwd=ROOT, env=env)
    proc.started = time.time()
    return proc


# ---------------------------------------------------------------- the record


ORDER = ("wrong", "refused", "no-build", "exact")


def _verdict(statuses: list[str]) -> str:
    """A family's verdict over its variants: one wrong variant makes it wrong; else exact where any variant is
    (kvplan refusing a variant is no wrong number: BERT-style configs with is_decoder false cache nothing)."""
    for status in ("wrong", "exact", "refused"):
        if status in statuses:
            return status
    return "no-build"


def _error(measured, predicted) -> str:
    if measured is None or predicted is None:
        return ""
    if not measured:
        return f"kvplan {predicted:,} B where transformers holds 0 B"
    return f"{(predicted / measured - 1) * 100:+.1f} %"


def families(rows: list[dict]) -> dict[str, dict]:
    """model_type -> its verdicts, errors, class and keys, over all its variants."""
    by_type: dict[str, list[dict]] = {}
    for row in rows:
        by_type.setdefault(row["model_type"], []).append(row)
    out = {}
    for mt, group in sorted(by_type.items()):
        kv = _verdict([r["kv_status"] for r in group])
        params = _verdict([r["params_status"] for r in group])
        kv_bad = next((r for r in group if r["kv_status"] == "wrong"), group[0])
        p_bad = next((r for r in group if r["params_status"] == "wrong"), group[0])
        entry = {"kv": kv, "params": params, "cls": next((r["cls"] for r in group if r.get("cls")), ""),
                 "keys": sorted({k for r in group for k in r.get("keys", [])})}
        default = next((r for r in group if r["variant"].startswith("default")), None)
        decoder = next((r for r in group if r["variant"] == "decoder"), None)
        if default and decoder and not default.get("kv_measured") and decoder.get("kv_measured"):
            entry["needs_decoder"] = True   # BERT-style: no cache at all unless is_decoder (GPT-NeoX caches either way)
        if kv == "wrong":
            entry["kv_error"] = _error(kv_bad["kv_measured"], kv_bad["kv_kvplan"])
        if params == "wrong":
            entry["params_error"] = _error(p_bad["params_measured"], p_bad["params_kvplan"])
        out[mt] = entry
    return out


def counts(fams: dict[str, dict]) -> dict[str, dict[str, int]]:
    built = [f for f in fams.values() if f["kv"] != "no-build"]
    out = {}
    for aspect in ("kv", "params"):
        out[aspect] = {s: sum(1 for f in built if f[aspect] == s) for s in ("exact", "refused", "wrong")}
        out[aspect]["built"] = len(built)
    return out


def write_data(rows: list[dict], version: str) -> Path:
    path = ROOT / "kvplan" / "data" / "conformance.json"
    fams = families(rows)
    path.write_text(json.dumps({"transformers": version, "families": fams}, indent=1, sort_keys=True) + "\n")
    return path


def write_markdown(rows: list[dict], version: str, out: Path) -> None:
    fams = families(rows)
    c = counts(fams)
    lines = [f"# Conformance against transformers {version}", "",
             "Every `model_type` in transformers' `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, built from its config class's "
             "defaults (and the variants that switch a cache behaviour on), instantiated on the `meta` device (or on "
             "CPU with the MLP and vocabulary shrunk where meta cannot run it), one prefill, the real cache walked. "
             "kvplan's KV bytes (storage and logical) and parameter count against it: kvplan's language model plus "
             "the towers it counts against transformers' whole model (for a family whose causal LM leaves its towers "
             "out, its `MODEL_FOR_MULTIMODAL_LM` class, e.g. Llama4ForConditionalGeneration), or, where kvplan says "
             "it counts the language model only, against transformers' language model, the reason given. Written by "
             "`python -m validation.conformance`; `kvplan/data/conformance.json` is the same record, which kvplan "
             "reads to refuse what it measured wrong and to warn about what it never measured.", ""]
    for aspect, label in (("kv", "KV bytes"), ("params", "parameters")):
        n = c[aspect]
        lines.append(f"- {label}: {n['exact']} exact, {n['refused']} refused, {n['wrong']} wrong (kvplan refuses "
                     f"these at run time), of {n['built']} architectures that build "
                     f"({100 * n['exact'] / max(n['built'], 1):.1f} % exact)")
    no_build = sorted(mt for mt, f in fams.items() if f["kv"] == "no-build")
    lines += [f"- {len(no_build)} do not build or run in transformers {version} at their defaults, even on CPU: "
              f"{', '.join(no_build)}", "",
              "| architecture | variant | class | ran on | KV | params | why |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        kv = r["kv_status"] + (f" ({_error(r['kv_measured'], r['kv_kvplan'])})" if r["kv_status"] == "wrong" else "")
        pa = r["params_status"] + (f" ({_error(r['params_measured'], r['params_kvplan'])})"
                                   if r["params_status"] == "wrong" else "")
        why = "; ".join(w for w in (_params_note(r), r["reason"].replace("|", "/").replace("\n", " ")[:220]) if w)
        lines.append(f"| {r['model_type']} | {r['variant']} | {r['cls']} | {r['device'] or '-'} | {kv} | {pa} | {why} |")
    out.write_text("\n".join(lines) + "\n")


def _params_note(r: dict) -> str:
    """What the parameter verdict compared, where the row's class does not say it all."""
    whole, text = r.get("params_whole_measured"), r.get("params_text_measured")
    if r["params_status"] == "wrong" and not r.get("params_text_only") and r["params_kvplan"] == text != whole:
        return (f"kvplan counts the language model only and does not say so: {whole - text:,} parameters of "
                f"{r.get('params_cls') or r['cls']} outside it")
    if r.get("params_cls") and not r.get("params_text_only"):
        return f"parameters: the whole {r['params_cls']}"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated model_types")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "docs" / "coverage.json"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run these, append JSON lines to --out
    parser.add_argument("--rows", help="re-write the record from a rows JSON of an earlier sweep")
    parser.add_argument("--write-data", action="store_true",
                        help="also write kvplan/data/conformance.json and docs/coverage.md (whole sweep only)")
    parser.add_argument("--update", action="store_true",
                        help="with --only: re-measure those model_types and replace their rows in --out's record")
    args = parser.parse_args(argv)
    if args.worker:
        _work(args.worker.split(","), Path(args.out))
        return 0
    import transformers

    if args.rows:
        rows = json.loads(Path(args.rows).read_text())
    else:
        only = args.only.split(",") if args.only else None
        rows = sweep(only, args.workers)
        if args.update and only:  # the rest of the record stands: rows of these types are measured again
            kept = [r for r in json.loads(Path(args.out).read_text()) if r["model_type"] not in only]
            rows = sorted(kept + rows, key=lambda r: (r["model_type"], r["variant"]))
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    if args.write_data:
        write_data(rows, transformers.__version__)
        write_markdown(rows, transformers.__version__, ROOT / "docs" / "coverage.md")
    for row in rows:
        print(f"{row['model_type']:28s} {row['variant']:8s} kv={row['kv_status']:8s} "
              f"params={row['params_status']:8s} {row['seconds']:6.1f}s {row['reason'][:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
