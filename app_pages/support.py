"""Everything the web app shows that is not a chart: model sources, tables, exports, speed (the validation files:
`app_pages.validation_data`).

The Streamlit pages only lay these out; every number they print is computed here (or in `app_pages.charts` /
`kvplan.cache.strategies`) from kvplan's API, so tests check the same functions the app calls. Pure apart from the
functions that read committed files under `validation/` (named `read_*`). Imports pandas, never streamlit.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from kvplan.cache.estimate import Estimate, estimate, secondary_figures
from kvplan.config.load import load_model
from kvplan.config.parse import parse_config
from kvplan.errors import ModelNotAvailableError
from kvplan.model.spec import ModelSpec
from kvplan.planning import defaults
# the roofline glue lives in the core (kvplan.planning.speed), where the CLI's workload plans use it too
from kvplan.planning.speed import StepCost, model_compute, plan_speed, step_cost  # noqa: F401
from kvplan.sources.files import MAX_CONFIG_BYTES, parse_json_bytes
from kvplan.sources.library import bundled_ids
from kvplan.sources.locate import HUB_ID
from kvplan.units import fmt_bytes, fmt_gb, fmt_int

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B"
LEARN_MODEL = "meta-llama/Llama-2-70b-hf"
LEARN_CONTEXTS = (100, 1_000, 4_000, 8_192)
MAX_UPLOAD_BYTES = MAX_CONFIG_BYTES
KV_DTYPES = ("auto", "bf16", "fp16", "fp32", "fp8", "int8", "int4", "int2")
CACHES = ("dynamic", "static", "quantized", "offloaded", "offloaded_static")
PLAN_KV_DTYPES = ("auto", "fp8", "fp8_e5m2", "bf16", "fp16", "fp32")
ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------- models


def model_options() -> list[str]:
    """Bundled ids, case-insensitively sorted, for the searchable picker."""
    return sorted(bundled_ids(), key=str.lower)


def default_model_index(options: list[str]) -> int:
    return options.index(DEFAULT_MODEL) if DEFAULT_MODEL in options else 0


def load_hub_model(repo_id: str, token: str | None = None) -> ModelSpec:
    """A Hub id through `kvplan.load_model`, refusing anything that is not `org/name` or that names a local file:
    the web app never reads the server's disk on a visitor's behalf."""
    text = (repo_id or "").strip()
    if not text:
        raise ModelNotAvailableError("enter a Hub id like meta-llama/Llama-3.1-8B")
    if not HUB_ID.match(text) or Path(text).exists():
        raise ModelNotAvailableError(f"{text[:120]!r} is not a Hub id: use the form org/name, "
                                     "e.g. Qwen/Qwen3-8B")
    from kvplan.sources.hub import fetch_config

    # cache_fallback=False: this server's Hub cache is shared by every visitor; only the Hub's yes for this
    # visitor's token (or none) serves a config, never a copy another visitor's token fetched
    data = fetch_config(text, token=token or False, cache_fallback=False)
    from kvplan.config.load import with_checkpoint

    return with_checkpoint(parse_config(data, name=text, source="hub"), text, token=token or False,
                           cache_fallback=False)


def load_uploaded_config(raw: bytes, filename: str) -> ModelSpec:
    """An uploaded config.json, parsed as JSON data only (size-capped by `parse_json_bytes`)."""
    label = Path(filename or "upload").name or "upload"
    data = parse_json_bytes(raw, label)
    name = label.removesuffix(".json") if label != "config.json" else "uploaded config"
    return load_model(data, name=name)


def config_values(model: ModelSpec) -> pd.DataFrame:
    """The config fields that sized the cache, under kvplan's names (what the formula substitutes)."""
    rows = [{"field": k, "value": str(v)} for k, v in model.fields.items()]
    rows.append({"field": "dtype", "value": model.dtype.name})
    rows.append({"field": "layer kinds", "value": ", ".join(f"{n} {k}" for k, n in model.attention_kinds.items())})
    return pd.DataFrame(rows, columns=["field", "value"])


INT64_MAX = 2**63 - 1


def arrow_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Integer columns beyond int64 as '1,234,...' text: Arrow (st.dataframe, st.table) cannot hold them, and a
    context of 10^12 tokens x a batch of 10^5 on Llama-3.1-8B is 1.3e22 bytes."""
    for column in frame.columns:
        values = frame[column]
        if values.dtype == object and any(isinstance(v, int) and abs(v) > INT64_MAX for v in values):
            frame[column] = [fmt_int(v) if isinstance(v, int) else v for v in values]
    return frame


# ---------------------------------------------------------------------------------------------- estimate


@dataclass(frozen=True)
class Workload:
    """The Estimate page's knobs; 0 for max_cache_len / prompt_len means 'same as the context'."""

    seq_len: int
    batch_size: int = 1
    kv_dtype: str = "auto"
    cache: str = "dynamic"
    max_cache_len: int = 0
    prompt_len: int = 0

    def kwargs(self) -> dict[str, Any]:
        return dict(kv_dtype=None if self.kv_dtype == "auto" else self.kv_dtype, cache=self.cache,
                    max_cache_len=self.max_cache_len or None, prompt_len=self.prompt_len or None)


def run_estimate(model: ModelSpec, w: Workload) -> Estimate:
    return estimate(model, w.seq_len, w.batch_size, **w.kwargs())


@dataclass(frozen=True)
class Metric:
    label: str
    value: str
    help: str = ""


def headline(est: Estimate) -> list[Metric]:
    """The four numbers at the top of the Estimate page: binary and decimal units, each labelled."""
    metrics = [
        Metric("KV cache (GiB = 2³⁰ B)", fmt_bytes(est.kv_cache_bytes), "binary units, as nvidia-smi and vLLM print"),
        Metric("KV cache (GB = 10⁹ B)", fmt_gb(est.kv_cache_bytes), "decimal units, as GPU datasheets print"),
        Metric("Exact bytes", fmt_int(est.kv_cache_bytes), "every tensor the cache holds, bookkeeping included"),
        Metric("Per extra token", f"{fmt_int(est.bytes_per_token)} B",
               "growth per token per sequence while every unbounded layer grows (full and MLA layers)"),
    ]
    return metrics


def side_numbers(est: Estimate) -> list[str]:
    """Secondary figures, each a sentence, only when they differ from the headline."""
    return secondary_figures(est)


GROUP_COLUMNS = ["kind", "layers", "layer indices", "detail", "tokens kept", "bytes per token per layer", "bytes",
                 "size", "formula"]


def group_table(est: Estimate, formula: bool = True) -> pd.DataFrame:
    """One row per layer group; `formula=False` leaves the long formula column out (the page prints it whole)."""
    rows = [{"kind": g.kind, "layers": g.layers, "layer indices": g.layer_indices, "detail": g.detail,
             "tokens kept": "constant" if g.tokens is None else fmt_int(g.tokens),
             "bytes per token per layer": g.bytes_per_token, "bytes": g.bytes, "size": fmt_bytes(g.bytes),
             "formula": g.formula} for g in est.groups]
    frame = arrow_safe(pd.DataFrame(rows, columns=GROUP_COLUMNS))
    return frame if formula else frame.drop(columns="formula")


def estimate_json(est: Estimate) -> str:
    return est.model_dump_json(indent=1)


def estimate_csv(est: Estimate) -> str:
    """One row per layer group, then a total row; the workload repeated on each row so the file stands alone."""
    out = io.StringIO()
    fields = ["model", "cache", "seq_len", "batch_size", "kv_dtype", "kind", "layers", "layer_indices", "detail",
              "tokens", "bytes_per_token", "bytes"]
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    common = dict(model=est.model, cache=est.cache, seq_len=est.seq_len, batch_size=est.batch_size,
                  kv_dtype=est.kv_dtype)
    for g in est.groups:
        writer.writerow({**common, "kind": g.kind, "layers": g.layers, "layer_indices": g.layer_indices,
                         "detail": g.detail, "tokens": "" if g.tokens is None else g.tokens,
                         "bytes_per_token": g.bytes_per_token, "bytes": g.bytes})
    writer.writerow({**common, "kind": "total", "layers": sum(g.layers for g in est.groups), "bytes":
                     est.kv_cache_bytes})
    return out.getvalue()


# kvplan's errors say what to do in the CLI's terms; the pages say it in their own (issue #12: "add --cache
# quantized" on the Estimate page). Specific phrases first, then any `--flag value` as the setting's name.
_APP_WORDS = (
    ("add --cache quantized", "choose the quantized cache"), ("use --cache dynamic or static",
                                                               "choose the dynamic or static cache"),
    ("use --cache dynamic", "choose the dynamic cache"), ("--cache quantized", "the quantized cache"),
    ("pass --kv-dtype int4", "choose KV dtype int4"), ("--engine hf", "transformers' generate"),
    ("pass the config.json path", "upload the config.json"),
    # the Capacity and Compare setups pages plan the model's own context unless "Model's context" is off
    ("pass --max-model-len N", "switch off \"Model's context\" and set the context in the sidebar"),
    ("--max-model-len N", "a max model length"),
)
_FLAG = re.compile(r"`?--([a-z][a-z0-9-]*)`?(?: ([A-Za-z0-9_.]+))?")


def app_words(text: str) -> str:
    """A kvplan message with its CLI flags put in the app's words: `--kv-dtype fp8` -> the "kv dtype" setting fp8."""
    for flag, words in _APP_WORDS:
        text = text.replace(flag, words)
    return _FLAG.sub(lambda m: f'the "{m.group(1).replace("-", " ")}" setting' + (
        f" {m.group(2)}" if m.group(2) and m.group(2) != "N" else ""), text)


def file_stem(name: str) -> str:
    """'meta-llama/Llama-3.1-8B' -> 'meta-llama--Llama-3.1-8B' for download names."""
    return "".join(c if c.isalnum() or c in "-._" else "-" for c in name.replace("/", "--"))[:100] or "model"


# ---------------------------------------------------------------------------------------------- strategies


def strategy_table(rows, raw_bytes: bool = True) -> pd.DataFrame:
    """`kvplan.cache.strategies.compare` rows as the Compare page shows them (`raw_bytes=False`: sizes only)."""
    out = []
    for r in rows:
        out.append({"strategy": r.strategy,
                    "on GPU": fmt_bytes(r.device_bytes) if r.applies else "n/a",
                    "in host memory": fmt_bytes(r.host_bytes) if r.host_bytes else "",
                    "bytes on GPU": r.device_bytes,
                    "saving vs model": f"{r.saving_pct:+.1f} %" if r.applies else "",
                    "exact": "yes" if r.exact else "per-element",
                    "how it was computed": app_words(r.how), "note": app_words(r.note)})
    frame = arrow_safe(pd.DataFrame(out))
    return frame if raw_bytes else frame.drop(columns="bytes on GPU")


def strategies_csv(rows) -> str:
    fields = ["strategy", "device_bytes", "host_bytes", "saving_bytes", "saving_pct", "exact", "how", "note"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({f: getattr(r, f) for f in fields})
    return out.getvalue()


def strategies_json(rows) -> str:
    return json.dumps([{**r.__dict__} for r in rows], indent=1)


# ---------------------------------------------------------------------------------------------- capacity


@dataclass(frozen=True)
class PlanInputs:
    engine: str = defaults.ENGINE
    gpu: str = defaults.GPU
    num_gpus: int = defaults.NUM_GPUS
    tp: str = "auto"           # "auto": num_gpus / pp
    pp: int = 1
    utilization: float | None = None  # None: the engine's own default (vLLM 0.92, SGLang's by card and TP)
    max_model_len: int | None = None  # None: the model's context length, the CLI's and the API's default
    kv_dtype: str = "auto"
    language_model_only: bool = False   # a multimodal model served without its vision tower (vLLM)
    version: str | None = None          # None: the latest release kvplan read
    dp: int = 1                         # vLLM: engine replicas; SGLang: DP-attention ranks inside TP
    expert_parallel: bool = False
    speculative: str | None = None      # "mtp", "eagle3", "draft_model"
    draft: str | None = None            # the EAGLE-3 head or draft model (a bundled id)
    speculative_tokens: int = 1
    loras: int = 0                      # LoRA adapter slots; 0: no LoRA
    lora_rank: int = 16
    eager: bool = False                 # vLLM without CUDA graphs
    nvls: bool = True                   # vLLM: NCCL's NVLink SHARP buffers where the GPU has them

    def kwargs(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"language_model_only": True} if self.language_model_only and self.engine == "vllm" else {}
        if self.speculative:
            extra["speculative"] = {"method": self.speculative, "num_speculative_tokens": self.speculative_tokens,
                                    **({"model": self.draft} if self.draft and self.speculative != "mtp" else {})}
        if self.loras:
            extra["lora"] = {"max_loras": self.loras, "max_lora_rank": self.lora_rank}
        if self.engine == "vllm":
            extra.update(enforce_eager=self.eager or None, nvls=None if self.nvls else False)
        return dict(engine=self.engine, gpu=self.gpu, max_model_len=self.max_model_len,
                    gpu_memory_utilization=self.utilization, kv_dtype=self.kv_dtype, engine_version=self.version,
                    dp=self.dp if self.dp > 1 else None, expert_parallel=self.expert_parallel or None, **extra)

    def plan_kwargs(self) -> dict[str, Any]:
        tp = None if self.tp == "auto" else int(self.tp)
        return dict(num_gpus=self.num_gpus, tp=tp, pp=self.pp, **self.kwargs())


def run_plan(model: ModelSpec, p: PlanInputs):
    from kvplan.planning.planner import plan

    return plan(model, **p.plan_kwargs())


def cli_command(model: ModelSpec, p: PlanInputs) -> str:
    """The `kvplan plan` line that gives the Capacity page's plan (settings at their defaults left out)."""
    from kvplan.planning.inputs import model_argument

    return defaults.cli_command(model_argument(model), **p.plan_kwargs())


def defaults_line(plan) -> str:
    """The batch limits and block size the plan used, said as the engine's defaults (the page sets none)."""
    if plan.engine == "sglang":
        return (f"SGLang sizes its batch from the pool: at most {fmt_int(plan.max_num_seqs)} running requests, "
                f"{fmt_int(plan.max_num_batched_tokens)} tokens a prefill chunk, pages of {plan.block_size} token; "
                f"memory fraction {plan.gpu_memory_utilization:.3f}")
    return (f"vLLM's defaults for this GPU: max_num_seqs {fmt_int(plan.max_num_seqs)}, max_num_batched_tokens "
            f"{fmt_int(plan.max_num_batched_tokens)}, blocks of {plan.block_size} tokens; GPU memory utilization "
            f"{plan.gpu_memory_utilization:.2f}")


def run_fixes(model: ModelSpec, p: PlanInputs, current=None, fewest=None) -> list[str]:
    """The nearest changes that fit, in the app's words (the CLI adds its flags); `current`: the page's plan,
    `fewest`: the page's fewest-GPU plan, or False when its search found none (so it is not searched again)."""
    from kvplan.planning.search import fixes

    return [text[0].upper() + text[1:] + "." for text, _ in fixes(model, current, fewest=fewest,
                                                                  **p.plan_kwargs())]


def run_fewest(model: ModelSpec, p: PlanInputs):
    """The fewest GPUs in a deployable layout, with the fewest in any layout beside it (a LayoutChoice)."""
    from kvplan.planning.layouts import deployable

    return deployable(model, max_gpus=64, **p.kwargs())


# The releases whose accounting differs, newest first (kvplan.planning.engines.vllm._version_notes; SGLang's
# sglang_pool and sglang_rules: --attn-dp-size 0.5.22, the 20-35 GB tier 0.5.20, the Mamba padding slot 0.5.17,
# extra_buffer 0.5.14, prefill graphs 0.5.10, the SWA pool 0.5.8, the PP split 0.5.6, the additive reserve 0.5.3)
# The first is the planning layer's default (kvplan.planning.defaults: the latest release kvplan read).
_OLDER_VERSIONS = {"vllm": ("0.29.0", "0.25.0", "0.22.0", "0.20.0", "0.19.0", "0.17.0", "0.11.0", "0.10.1", "0.7.3"),
                   "sglang": ("0.5.22", "0.5.20", "0.5.17", "0.5.14", "0.5.10", "0.5.8", "0.5.6", "0.5.3", "0.5.1",
                              "0.4.6")}
ENGINE_VERSIONS = {engine: (defaults.engine_version(engine), *older) for engine, older in _OLDER_VERSIONS.items()}
DEFAULT_DRAFT = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
SPECULATIVE = {"none": None, "MTP layers of the checkpoint": "mtp", "EAGLE-3 head": "eagle3",
               "Draft model": "draft_model"}


def verdict(plan) -> tuple[bool, str]:
    """(fits, one sentence) for the Capacity page's banner."""
    where = f"{plan.num_gpus} x {plan.gpu} ({layout(plan)})"
    if plan.fits:
        return True, (f"Fits on {where}: {fmt_int(plan.kv_cache_tokens)} KV tokens, "
                      f"{plan.max_concurrency:,.2f} concurrent {fmt_int(plan.max_model_len)}-token requests")
    longest = (f"; the longest request that fits is {fmt_int(plan.max_model_len_that_fits)} tokens"
               if plan.max_model_len_that_fits else "; not even one token of KV fits")
    return False, (f"Does not fit on {where}: one {fmt_int(plan.max_model_len)}-token request misses by "
                   f"{fmt_bytes(plan.shortfall_bytes)}{longest}")


def layout(plan) -> str:
    """TP x PP, and x DP where the engine runs copies (vLLM); expert parallelism when on."""
    text = f"TP {plan.tensor_parallel_size} x PP {plan.pipeline_parallel_size}"
    text += f" x DP {plan.data_parallel_size}" if plan.data_parallel_size > 1 else ""
    return text + (f", experts over {plan.expert_parallel_size}" if plan.expert_parallel_size > 1 else "")


def plan_metrics(plan) -> list[Metric]:
    return [
        Metric("KV pool per GPU", fmt_bytes(plan.kv_pool_bytes), "what the engine hands the KV cache"),
        Metric("KV cache tokens", fmt_int(plan.kv_cache_tokens), "vLLM's 'GPU KV cache size: N tokens'"),
        Metric("Max concurrency", f"{plan.max_concurrency:,.2f}x",
               f"requests of {fmt_int(plan.max_model_len)} tokens the pool holds at once"),
        Metric("GPUs", f"{plan.num_gpus} ({layout(plan)})"),
    ]


def plan_table(plan) -> pd.DataFrame:
    rows = plan.budget_lines()
    return arrow_safe(pd.DataFrame([{"per GPU": k, "bytes": v, "size": fmt_bytes(v)} for k, v in rows]))


def weights_source_lines(plan, model: ModelSpec | None = None) -> list[str]:
    """Where the Capacity page's weights come from, in the app's words, with a multimodal model's split, and why
    one GPU's weights can exceed the whole model's (`per_gpu_weights_line`)."""
    if plan.weights_source == "checkpoint":
        lines = [f"Weights are the checkpoint's own tensors: {plan.weights_provenance}; "
                 f"{fmt_bytes(plan.weights_checkpoint_bytes)} for the whole model once loaded."]
    else:
        lines = [f"Weights follow kvplan's rule for the config ({fmt_bytes(plan.weights_rule_bytes or 0)} for the "
                 "whole model): no checkpoint tensors were read for this model."]
    if (loaded := plan.rule_vs_checkpoint()) is not None:
        lines.append(f"kvplan's rule for the config gives {fmt_bytes(plan.weights_rule_bytes)} ({loaded[1]:+.2f} %).")
    if (stored := plan.rule_vs_stored()) is not None and plan.weights_source != "checkpoint":
        lines.append(f"The published checkpoint holds {fmt_bytes(plan.checkpoint_stored_bytes)}; the rule says "
                     f"{fmt_bytes(plan.rule_stored_bytes)} ({stored[1]:+.3f} %).")
    if len(plan.weights_components) > 1:
        names = {"language_model": "language model", "vision": "vision tower", "projector": "projector",
                 "embeddings": "embeddings", "lm_head": "output head", "audio": "audio tower"}
        lines.append("Split: " + ", ".join(f"{names.get(c, c)} {fmt_bytes(b)}" for c, b in
                                           plan.weights_components.items()) + ".")
    if model is not None and (extra := per_gpu_weights_line(plan, model)):
        lines.append(extra)
    return lines


def per_gpu_weights_line(plan, model: ModelSpec) -> str | None:
    """Why the per-GPU weights line holds more than parameters: the engine's RoPE cos/sin tables sit on every GPU
    (kvplan.weights.split.rope_cache_bytes: Llama-3.1-8B 131,072 x 128 x 2 B = 32 MiB, so 14.99 GiB per GPU over
    14.96 GiB of parameters), and what else the plan adds past the whole model (gpt-oss-20b's MXFP4 padding)."""
    from kvplan.dtypes import resolve_dtype
    from kvplan.weights.split import rope_cache_bytes

    whole = plan.weights_checkpoint_bytes if plan.weights_source == "checkpoint" else plan.weights_rule_bytes
    rope = rope_cache_bytes(model, resolve_dtype(plan.dtype)) if plan.engine in ("vllm", "sglang") else 0
    if not whole or (rope == 0 and plan.weights_bytes <= whole):
        return None
    text = (f"The per-GPU weights ({fmt_bytes(plan.weights_bytes)}) include the engine's RoPE cos/sin "
            f"table{'s' if model.dims and model.dims.rope_tables > 1 else ''} ({fmt_bytes(rope)}, built on every "
            "GPU at start-up; no checkpoint holds it)")
    rest = plan.weights_bytes - whole - rope
    if plan.weights_bytes > whole and rest > 0 and plan.num_gpus == 1:
        text += (f"; that and {fmt_bytes(rest)} more that the notes explain (kernel padding) put them above the "
                 f"whole model's {fmt_bytes(whole)}")
    elif plan.weights_bytes > whole:
        text += f", which puts them above the whole model's {fmt_bytes(whole)}"
    return text + "."


def plan_json(plan) -> str:
    return plan.model_dump_json(indent=1)


def plan_csv(plan) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["field", "value"])
    for key, value in plan.model_dump(mode="json").items():
        if isinstance(value, (list, dict)):
            value = json.dumps(value)
        writer.writerow([key, value])
    return out.getvalue()


def serve_command(plan) -> str:
    """The plan's own command (vLLM's `vllm serve`, SGLang's launch_server): the CLI prints the same line."""
    return plan.vllm_command


# ---------------------------------------------------------------------------------------------- speed


# the Compare setups page: up to four rows, these until the visitor picks others; the first is the sidebar's model
SIDEBAR_MODEL = "the sidebar's model"
COMPARE_DEFAULTS = ((SIDEBAR_MODEL, "H100-SXM"), ("meta-llama/Llama-3.1-70B", "H100-SXM"),
                    ("Qwen/Qwen2.5-72B", "H100-SXM"), ("meta-llama/Llama-3.1-70B", "H200"))


@dataclass(frozen=True)
class SetupInput:
    model: str | ModelSpec     # a bundled id, or the sidebar's model as loaded (a Hub id or an upload too)
    gpu: str
    num_gpus: int


def run_compare(setups: list[SetupInput], engine: str, max_model_len: int | None, prompt: int, output: int):
    """kvplan.planning.compare for the page's rows: every setup at `max_model_len`, or at its model's own context
    length for None (`kvplan compare`'s default); the mix where it fits that context."""
    from kvplan.planning.compare import Setup, compare
    from kvplan.planning.workload import RequestMix

    fits = max_model_len is None or prompt + output <= max_model_len
    return compare([Setup(s.model, s.gpu, s.num_gpus) for s in setups], engine=engine, max_model_len=max_model_len,
                   mix=RequestMix(prompt, output) if fits else None)


def comparison_table(rows) -> pd.DataFrame:
    """One row per setup planned, with short headers so all eleven columns fit the page's width (the model named
    without its organisation: the chart and the setup pickers above name it whole)."""
    records = [{"model": r.model.split("/")[-1], "GPUs": f"{r.num_gpus} x {r.gpu}", "layout": r.layout,
                "fits": "yes" if r.fits else "no", "weights / GPU": fmt_bytes(r.weights_bytes),
                "KV pool / GPU": fmt_bytes(r.kv_pool_bytes), "KV tokens": fmt_int(r.kv_cache_tokens),
                "max-length requests": f"{r.max_concurrency:,.2f}",
                "requests at the mix": "-" if r.concurrent_requests is None else f"{r.concurrent_requests:,.1f}",
                "output tok/s": "-" if r.output_tokens_per_s is None else f"{r.output_tokens_per_s:,.0f}",
                "$ / 1M output": "-" if r.cost_per_million_output_tokens is None
                else f"{r.cost_per_million_output_tokens:,.3f}"} for r in rows if not r.error]
    return arrow_safe(pd.DataFrame(records))


def workload(model: ModelSpec, plan, prompt: int, output: int, price: float | None):
    """kvplan.planning.workload for the Capacity page's request mix (price None or 0: the catalog's)."""
    from kvplan.planning.workload import RequestMix, workload_plan

    return workload_plan(model, plan, RequestMix(int(prompt), int(output)), price or None)


def workload_metrics(w) -> list[Metric]:
    cost = (f"${w.cost_per_million_output_tokens:,.3f}" if w.cost_per_million_output_tokens is not None else "-")
    return [Metric("Requests at once", f"{w.concurrent_requests:,.1f}", f"limited by the {w.limited_by}"),
            Metric("Output tokens/s", f"{w.output_tokens_per_s:,.0f}", "roofline: an upper bound"),
            Metric("Requests/s", f"{w.requests_per_s:,.2f}"),
            Metric("Cost per 1M output tokens", cost,
                   f"at ${w.gpu_price_per_hour:,.2f} per GPU-hour" if w.gpu_price_per_hour else w.price_source)]


def speed_metrics(s) -> list[Metric]:
    return [Metric("TTFT (roofline)", fmt_seconds(s.ttft_s), "prefill FLOPs / (peak FLOP/s x MFU)"),
            Metric("Time per output token", fmt_seconds(s.time_per_output_token_s),
                   "bytes read per step / (bandwidth x MBU)"),
            Metric("Tokens/s per sequence", f"{s.tokens_per_s_per_sequence:,.1f}"),
            Metric("Tokens/s, whole batch", f"{s.tokens_per_s_total:,.1f}")]


def fmt_seconds(value: float) -> str:
    if value >= 1:
        return f"{value:,.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:,.1f} ms"
    return f"{value * 1e6:,.0f} µs"


# ---------------------------------------------------------------------------------------------- learn


def naive_vs_real(model: ModelSpec, contexts: Iterable[int] = LEARN_CONTEXTS, kv_dtype: str = "fp16") -> pd.DataFrame:
    """The textbook MHA formula (all attention heads as KV heads) against the model's real KV heads."""
    from kvplan.cache.strategies import as_mha

    mha = as_mha(model)
    rows = []
    for n in contexts:
        naive = estimate(mha, n, 1, kv_dtype).kv_cache_bytes
        real = estimate(model, n, 1, kv_dtype).kv_cache_bytes
        rows.append({"tokens": n, "naive MHA bytes": naive, "naive MHA": fmt_bytes(naive),
                     "real bytes": real, "real": fmt_bytes(real), "naive / real": f"{naive / real:g}x"})
    return arrow_safe(pd.DataFrame(rows))


@dataclass(frozen=True)
class LearnNumbers:
    """The Learn page's figures for the sidebar's model: the cost of one token at the context, the per-token
    compute curve up to it, and the estimate whose formula the page writes out."""

    cost: StepCost
    curve: pd.DataFrame
    estimate: Estimate


def learn_numbers(model: ModelSpec, seq_len: int, batch_size: int) -> LearnNumbers:
    from app_pages.charts import concurrency_contexts, step_cost_frame

    est = estimate(model, seq_len, batch_size)  # validates the workload first
    mc = model_compute(model)
    return LearnNumbers(step_cost(model, seq_len, mc), step_cost_frame(model, concurrency_contexts(max(seq_len, 256))),
                        est)


@dataclass(frozen=True)
class NaiveVsReal:
    """One row of `naive_vs_real`, as the Learn page quotes it."""

    tokens: int
    naive_bytes: int
    real_bytes: int

    @property
    def times(self) -> str:
        return f"{self.naive_bytes / self.real_bytes:g}x"


def naive_vs_real_at(model: ModelSpec, tokens: int, kv_dtype: str = "fp16") -> NaiveVsReal:
    row = naive_vs_real(model, (tokens,), kv_dtype).iloc[0]
    return NaiveVsReal(tokens, int(row["naive MHA bytes"]), int(row["real bytes"]))


def fmt_flops(value: float) -> str:
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if value >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f} FLOP"


def ratio(a: int, b: int) -> str:
    return f"{a / b:,.0f}x" if b else "n/a"
