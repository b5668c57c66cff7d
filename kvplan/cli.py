"""`kvplan` command line: `estimate`, `models`. Thin: parse, call the pure API, format.

Bad input exits with code 2 and one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from typing import Sequence

from .cache.hf import CACHE_CHOICES, QUANT_BACKENDS
from .config.reader import Overrides
from .dtypes import KV_DTYPE_CHOICES
from .errors import KVPlanError, bounded
from .planning import defaults
from .units import fmt_bytes, fmt_gb, fmt_int, parse_tokens


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line with exit code 2, with the nearest name for a mistyped
    subcommand, choice or flag ("did you mean")."""

    def error(self, message: str):  # type: ignore[override]
        message += _did_you_mean(self, message)
        # argparse quotes the value it refused whole ("invalid int value: '9999...'", 5,000 digits): cut it
        message = bounded(re.sub(r"'([^']{40})[^']{20,}'", lambda m: f"'{m.group(1)}…'", message))
        self.exit(EXIT_USAGE, f"kvplan: error: {message} (see `{self.prog} --help`)\n")


# argparse 3.11's two messages for a mistyped name: "argument command: invalid choice: 'plna' (choose from 'estimate',
# 'plan', ...)" and "unrecognized arguments: --gpu-memory-utilisation 0.9"
_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")
_UNRECOGNIZED = "unrecognized arguments: "


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """'; did you mean 'plan'?' for the closest known name (difflib, ratio >= 0.6), or ''."""
    if (choice := _CHOICE.search(message)) is not None:
        wrong, known = choice.group(1), re.findall(r"'([^']*)'", choice.group(2))
    elif message.startswith(_UNRECOGNIZED):
        flags = [w.split("=")[0] for w in message[len(_UNRECOGNIZED):].split() if w.startswith("--")]
        wrong, known = (flags[0] if flags else ""), [o for a in parser._actions for o in a.option_strings]
    else:
        return ""
    close = difflib.get_close_matches(wrong, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


class _Version(argparse.Action):
    """--version: kvplan's version and the engine releases its rules were read from (imported only when asked,
    so a plain estimate never loads the planner)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from . import __version__
        from .planning.engines.sglang_pool import DEFAULT_VERSION
        from .planning.engines.vllm_profile import LATEST
        sys.stdout.write(f"kvplan {__version__} (rules read from vLLM {'.'.join(map(str, LATEST))} and SGLang "
                         f"{'.'.join(map(str, DEFAULT_VERSION))} and older)\n")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvplan", description="Exact KV-cache memory from a Hugging Face config.json.",
                     epilog="exit codes:\n" + "\n".join(f"  {code}  {what}" for code, what in EXIT_CODES.items()),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, help="kvplan's version and the newest engine releases it knows")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_estimate(sub.add_parser("estimate", help="KV cache bytes for a workload, layer group by group"))
    _add_plan(sub.add_parser("plan", help="what fits on which GPUs with vLLM, SGLang or transformers"))
    _add_compare(sub.add_parser("compare", help="two to four models or setups side by side (MODEL@GPUxN)"))
    _add_recommend(sub.add_parser("recommend", help="the cheapest GPU, layout and replicas that serve a workload "
                                  "within latency targets, over the whole catalog"))
    models = sub.add_parser("models", help="list the bundled models")
    models.add_argument("--json", action="store_true", help="one JSON array on stdout")
    gpus = sub.add_parser("gpus", help="list the GPU catalog")
    gpus.add_argument("--json", action="store_true", help="one JSON array on stdout")
    sub.add_parser("validate", add_help=False, help="predicted vs measured on real transformers runs (the validation "
                   "harness, `python -m validation`; every option after `validate` goes to it)")
    return parser


def _add_plan(p: argparse.ArgumentParser) -> None:
    _add_model_args(p)
    p.add_argument("--engine", choices=("vllm", "sglang", "hf"), default=defaults.ENGINE,
                   help=f"vllm, sglang or hf (transformers generate, one GPU); default {defaults.ENGINE}")
    p.add_argument("--gpu", default=defaults.GPU, help="GPU name (kvplan gpus) or custom:24GiB:1000GB/s; default "
                   f"{defaults.GPU}")
    p.add_argument("--num-gpus", type=int, help="GPUs in all (vLLM: TP x PP x DP; SGLang: TP x PP)")
    p.add_argument("--tp", type=int, help="tensor parallel size (default: --num-gpus / (--pp x --dp))")
    p.add_argument("--pp", type=int, default=defaults.PIPELINE_STAGES,
                   help=f"pipeline parallel size; default {defaults.PIPELINE_STAGES}")
    p.add_argument("--dp", type=int, help="data parallel size (vLLM: engine replicas; SGLang: DP-attention ranks "
                   "inside TP); default 1")
    p.add_argument("--enable-expert-parallel", action="store_true",
                   help="MoE: whole experts per rank (vLLM --enable-expert-parallel; SGLang --ep-size = TP)")
    p.add_argument("--max-model-len", type=_length, help=f"default: {defaults.DEFAULTS['max_model_len']}; -1 or "
                   "auto: the longest that fits (vLLM)")
    p.add_argument("--gpu-memory-utilization", type=float, help="fraction of GPU memory the engine may use; "
                   f"default {defaults.DEFAULTS['gpu_memory_utilization']}")
    p.add_argument("--kv-cache-memory-bytes", type=int, help="vLLM: the KV pool itself, in bytes (skips the "
                   "utilization budget)")
    p.add_argument("--enforce-eager", action="store_true", help="vLLM: no CUDA graphs (no graph estimate)")
    p.add_argument("--no-nvls", action="store_true", help="vLLM TP > 1: NCCL without NVLink SHARP buffers "
                   "(NCCL_NVLS_ENABLE=0, or no NVSwitch), ~1.6 GiB less non-torch memory on H100 / H200 / B200")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                   help="vLLM: prefix caching on / off (default: the version's; it sets how many Mamba states a "
                        "hybrid model's request holds)")
    p.add_argument("--cudagraph-estimate", choices=("on", "off"),
                   help="vLLM: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (default: on from vLLM 0.20)")
    p.add_argument("--speculative", metavar="METHOD", choices=("mtp", "eagle3", "eagle", "draft_model"),
                   help="speculative decoding: mtp (the checkpoint's MTP layers), eagle3 / eagle (a head named by "
                        "--draft-model), draft_model (a whole model named by --draft-model)")
    p.add_argument("--draft-model", help="the EAGLE head or draft model: bundled id, config path or Hub id")
    p.add_argument("--num-speculative-tokens", type=int, default=None, help="tokens drafted per step; default 1 "
                   "(3 with an EAGLE head)")
    p.add_argument("--max-loras", type=int, help="LoRA: adapter slots (vLLM --max-loras, default 1; SGLang "
                   "--max-loras-per-batch, default 8)")
    p.add_argument("--max-lora-rank", type=int, help="LoRA: largest adapter rank; default 16")
    p.add_argument("--kv-dtype", default=defaults.KV_DTYPE, choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16",
                   "fp16", "fp32"), help=f"KV cache dtype; default {defaults.DEFAULTS['kv_dtype']}")
    p.add_argument("--dtype", default=defaults.DTYPE, choices=("auto", "bfloat16", "float16", "float32", "bf16", "fp16",
                                                         "fp32"), help="model dtype; default the config's")
    p.add_argument("--quantization", help="online weight quantization (fp8)")
    p.add_argument("--engine-version", help=f"engine version whose accounting to use (default: "
                   f"{defaults.DEFAULTS['engine_version']}; vLLM from 0.6; SGLang before 0.5 picks "
                   "mem_fraction_static by TP size)")
    p.add_argument("--max-num-batched-tokens", type=_tokens, help="default: vLLM's for this GPU")
    p.add_argument("--max-num-seqs", type=int, help="default: vLLM's for this GPU")
    p.add_argument("--block-size", type=int, help="KV block size; default 16 (64 for MLA on Hopper and newer)")
    p.add_argument("--weights", choices=("auto", "checkpoint", "config"), default="auto",
                   help="where the weights' bytes come from: the checkpoint's safetensors headers (a bundled record, "
                        "the model folder, or the Hub) or the config rule; auto = the checkpoint when it can be read")
    p.add_argument("--language-model-only", action="store_true",
                   help="vision models: serve the language model alone (vLLM --language-model-only)")
    p.add_argument("--images-per-prompt", type=int,
                   help="vision models: vLLM's --limit-mm-per-prompt image count (default 999; 0 = text only)")
    p.add_argument("--prompt-mean", type=_tokens, help="workload: mean prompt tokens of the requests served (with "
                   "--output-mean: concurrency, throughput and cost at that mix)")
    p.add_argument("--output-mean", type=_tokens, help="workload: mean output tokens")
    p.add_argument("--prompt-p95", type=_tokens, help="workload: 95th-percentile prompt tokens")
    p.add_argument("--output-p95", type=_tokens, help="workload: 95th-percentile output tokens")
    p.add_argument("--gpu-price", type=float, help="workload: USD per GPU-hour (default: the catalog's on-demand "
                   "price, kvplan gpus)")
    p.add_argument("--fewest-gpus", action="store_true", help="search the fewest GPUs that fit in a deployable "
                   "layout (TP a power of two dividing the heads, inside a node; PP over whole nodes; EP for MoE), "
                   "with the fewest in any layout beside it")
    p.add_argument("--any-layout", action="store_true", help="with --fewest-gpus: the fewest GPUs in any TP x PP "
                   "(TP inside a node, any number of stages), the plain count")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per node, the group TP stays inside (default: the "
                   "catalog's for the GPU, 8; GH200 1)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def _add_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("setups", nargs="+", metavar="SETUP",
                   help="MODEL, MODEL@GPU or MODEL@GPUxN (meta-llama/Llama-3.1-70B@H100-80GBx4); 2 to 4 of them")
    p.add_argument("--engine", choices=("vllm", "sglang"), default=defaults.ENGINE,
                   help=f"vllm or sglang; default {defaults.ENGINE}")
    p.add_argument("--gpu", default=defaults.GPU, help=f"the GPU of setups that name none; default {defaults.GPU}")
    p.add_argument("--num-gpus", type=int, help=f"the GPU count of setups that name none (default: "
                   f"{defaults.NUM_GPUS})")
    p.add_argument("--max-model-len", type=_tokens, help="default: each model's context length")
    p.add_argument("--kv-dtype", default=defaults.KV_DTYPE, choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16",
                   "fp16"), help=f"KV cache dtype; default {defaults.DEFAULTS['kv_dtype']}")
    p.add_argument("--gpu-memory-utilization", type=float,
                   help=f"default: {defaults.DEFAULTS['gpu_memory_utilization']}")
    p.add_argument("--engine-version", help=f"default: {defaults.DEFAULTS['engine_version']}")
    p.add_argument("--prompt-mean", type=_tokens, help="workload: mean prompt tokens (with --output-mean)")
    p.add_argument("--output-mean", type=_tokens, help="workload: mean output tokens")
    p.add_argument("--gpu-price", type=float, help="workload: USD per GPU-hour for every setup (default: the catalog's)")
    p.add_argument("--json", action="store_true", help="one JSON array on stdout")


# ---------------------------------------------------------------------------------------------- recommend


def _add_recommend(p: argparse.ArgumentParser) -> None:
    _add_model_args(p)
    p.add_argument("--prompt-mean", type=_tokens, required=True, help="mean prompt tokens of the requests")
    p.add_argument("--output-mean", type=_tokens, required=True, help="mean output tokens")
    p.add_argument("--prompt-p95", type=_tokens, help="95th-percentile prompt tokens (the TTFT target is checked at "
                   "it)")
    p.add_argument("--output-p95", type=_tokens, help="95th-percentile output tokens")
    p.add_argument("--rate", type=float, required=True, help="requests per second to serve")
    p.add_argument("--ttft-ms", type=float, help="time-to-first-token target in ms (roofline, no queueing)")
    p.add_argument("--tpot-ms", type=float, help="time-per-output-token target in ms, under load")
    p.add_argument("--budget", type=float, help="most USD per hour for all GPUs")
    p.add_argument("--engine", choices=("vllm", "sglang"), default="vllm", help="vllm or sglang; default vllm")
    p.add_argument("--engine-version", help="default: the latest release kvplan read")
    p.add_argument("--gpus", help="comma-separated catalog GPUs to search (default: the whole catalog)")
    p.add_argument("--gpu-price", action="append", default=[], metavar="GPU=USD",
                   help="USD per GPU-hour for a GPU (repeatable; a GPU without one is shown without cost)")
    p.add_argument("--max-model-len", type=_tokens, help="default: the mix's longest request, rounded up to 1,024")
    p.add_argument("--kv-dtype", default="auto", choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16", "fp16"),
                   help="KV cache dtype; default auto")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: the catalog's for each GPU, 8)")
    p.add_argument("--top", type=int, default=5, help="cheapest setups to list; default 5")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.epilog = (f"exit codes: 0 a setup meets the targets; {EXIT_USAGE} bad input; {EXIT_DOES_NOT_FIT} no catalog "
                "GPU meets them (the GPUs skipped say why)")


def cmd_recommend(args) -> int:
    from .planning.recommend import parse_prices, recommend
    from .planning.workload import RequestMix

    model = _load(args)
    mix = RequestMix(args.prompt_mean, args.output_mean, args.prompt_p95, args.output_p95)
    ms = {k: None if v is None else v / 1e3 for k, v in (("ttft", args.ttft_ms), ("tpot", args.tpot_ms))}
    if args.top < 1:
        raise KVPlanError("--top must be at least 1")
    result = recommend(model, mix, args.rate, ttft_s=ms["ttft"], tpot_s=ms["tpot"], budget_per_hour=args.budget,
                       engine=args.engine, engine_version=args.engine_version, kv_dtype=args.kv_dtype,
                       gpus=[g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None,
                       prices=parse_prices(args.gpu_price), max_model_len=args.max_model_len,
                       gpus_per_node=args.gpus_per_node, top=args.top)
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), indent=1))
    else:
        print(format_recommendation(result))
    return 0 if result.cheapest or result.unpriced else EXIT_DOES_NOT_FIT


def _setup_line(s) -> str:
    cost = f"${s.cost_per_hour:,.2f}/h" if s.cost_per_hour is not None else "no price"
    replicas = f"{s.replicas} replicas of " if s.replicas > 1 else ""
    cap = "--max-running-requests" if s.engine == "sglang" else "--max-num-seqs"
    return (f"{replicas}{s.gpus_per_replica} x {s.gpu} ({s.layout}, {cap} {s.max_num_seqs}, limited by "
            f"the {s.limited_by}): {cost}, {s.requests_per_s:,.2f} req/s ({s.load:.0%} loaded), TTFT "
            f"{s.ttft_s * 1e3:,.0f} ms, TPOT {s.tpot_s * 1e3:,.1f} ms")


def format_recommendation(r) -> str:
    t = r.targets
    aims = ", ".join(x for x in (f"TTFT <= {t.ttft_s * 1e3:,.0f} ms" if t.ttft_s else "",
                                 f"TPOT <= {t.tpot_s * 1e3:,.1f} ms" if t.tpot_s else "",
                                 f"<= ${t.budget_per_hour:,.2f}/h" if t.budget_per_hour else "") if x)
    warned = next((s.warnings for s in [*r.cheapest, *r.unpriced] if s.warnings), [])
    lines = [f"{r.model}, {r.engine}: {t.rate_per_s:,g} requests/s of {t.prompt_mean:,} prompt + {t.output_mean:,} "
             f"output tokens" + (f" ({aims})" if aims else ""), *_warning_lines(warned), ""]
    if r.cheapest:
        best = r.cheapest[0]
        lines += [f"cheapest: {_setup_line(best)}"
                  + (f", ${best.cost_per_million_output_tokens:,.3f} per 1M output tokens"
                     if best.cost_per_million_output_tokens is not None else ""), f"  {best.command}",
                  *(f"  {f}" for f in best.formula), "", "next cheapest (one line per GPU):",
                  *(f"  {_setup_line(s)}" for s in r.cheapest[1:])]
    else:
        lines.append("no priced catalog GPU meets these targets" + (" (see the GPUs without a price)" if r.unpriced
                                                                     else ""))
    if r.pareto:
        lines += ["", "cost against latency (Pareto front: each is faster than every cheaper one):",
                  *(f"  {_setup_line(s)}, end to end {s.e2e_latency_s:,.2f} s" for s in r.pareto)]
    if r.unpriced:
        lines += ["", "GPUs without a price (pass --gpu-price GPU=USD to rank them):",
                  *(f"  {_setup_line(s)}" for s in r.unpriced)]
    lines += ["", *(f"skipped: {s}" for s in r.skipped), *(f"assumption: {a}" for a in r.assumptions),
              f"searched {r.searched['gpus']} GPUs, {r.searched['plans']} plans, {r.searched['setups']} setups "
              "that meet the targets"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- shared arguments


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="bundled id (kvplan models), path to config.json or its folder, or a Hub id")
    p.add_argument("--revision", help="Hub revision (branch, tag or commit)")
    p.add_argument("--num-layers", type=int, help="override: number of layers")
    p.add_argument("--num-heads", type=int, help="override: attention heads")
    p.add_argument("--kv-heads", type=int, help="override: KV heads per layer")
    p.add_argument("--head-dim", type=int, help="override: head dimension")
    p.add_argument("--hidden-size", type=int, help="override: hidden size")


def _add_estimate(p: argparse.ArgumentParser) -> None:
    _add_model_args(p)
    p.add_argument("--seq-len", type=_tokens, required=True, help="tokens cached per sequence (prompt + generated)")
    p.add_argument("--batch-size", type=int, default=defaults.BATCH_SIZE,
                   help=f"sequences (x beams); default {defaults.BATCH_SIZE}")
    p.add_argument("--kv-dtype", choices=KV_DTYPE_CHOICES, help="cache dtype; default: the config's dtype (fp8 with "
                   "the dynamic cache: the engine-neutral bytes vLLM and SGLang store)")
    p.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), help="activation dtype; default: the config's")
    p.add_argument("--cache", choices=CACHE_CHOICES, default="dynamic", help="transformers cache; default dynamic")
    p.add_argument("--max-cache-len", type=_tokens, help="static caches: preallocated tokens (default: --seq-len)")
    p.add_argument("--prompt-len", type=_tokens, help="prefill tokens (default: --seq-len)")
    p.add_argument("--quant-backend", choices=QUANT_BACKENDS, help="quantized cache backend")
    p.add_argument("--q-group-size", type=int, default=64, help="quantized cache group size; default 64")
    p.add_argument("--residual-length", type=int, default=128, help="quantized cache residual; default 128")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def _overrides(args) -> Overrides:
    return Overrides(num_layers=args.num_layers, num_heads=args.num_heads, kv_heads=args.kv_heads,
                     head_dim=args.head_dim, hidden_size=args.hidden_size)


def _load(args):
    from .config.load import load_model

    return load_model(args.model, revision=args.revision, overrides=_overrides(args),
                      weights=getattr(args, "weights", "config"))


def cmd_estimate(args) -> int:
    from .cache.estimate import estimate

    model = _load(args)
    est = estimate(model, args.seq_len, args.batch_size, args.kv_dtype, args.cache, max_cache_len=args.max_cache_len,
                   prompt_len=args.prompt_len, dtype=args.dtype, quant_backend=args.quant_backend,
                   q_group_size=args.q_group_size, residual_length=args.residual_length)
    if args.json:
        print(json.dumps(est.model_dump(mode="json"), indent=1))
    else:
        print(format_estimate(est))
    return 0


def format_estimate(est) -> str:
    from .cache.estimate import secondary_figures

    head = (f"{est.model}  ({est.model_type})  cache={est.cache}  seq_len={fmt_int(est.seq_len)}  "
            f"batch={est.batch_size}  kv_dtype={est.kv_dtype}")
    rows = [("group", "layers", "detail", "tokens", "bytes")]
    for g in est.groups:
        tokens = "const" if g.tokens is None else fmt_int(g.tokens)
        rows.append((g.kind, str(g.layers), g.detail, tokens, fmt_int(g.bytes)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    table = ["  ".join(c.rjust(w) if i in (1, 3, 4) else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines = [head, *_warning_lines(est.warnings), "", *table, "",
             f"KV cache: {fmt_int(est.kv_cache_bytes)} B = {fmt_bytes(est.kv_cache_bytes)} = "
             f"{fmt_gb(est.kv_cache_bytes)}"]
    lines += secondary_figures(est)
    lines += ["", "formula: " + est.formula, *("note: " + n for n in est.notes)]
    return "\n".join(lines)


EXIT_OK = 0
EXIT_USAGE = 2
EXIT_DOES_NOT_FIT = 3
# every code `kvplan` exits with (`validate` returns the harness's: 0 every prediction matched, 1 a mismatch or a
# failed run, 2 bad input); listed under `kvplan --help` and in README
EXIT_CODES = {
    EXIT_OK: "done (and --help, --version, output cut short by a closed pipe)",
    EXIT_USAGE: "bad input: a mistyped flag or value, an unknown model or GPU, settings that cannot be\n"
                "     planned (one line on stderr saying what to do)",
    EXIT_DOES_NOT_FIT: "`kvplan plan`: the deployment does not fit (the plan and the nearest fixes that do\n"
                       "     are printed); `kvplan compare`: a setup was planned and does not fit",
}


def _tokens(text: str) -> int:
    """A token count as vLLM reads it: 32768, 32k (32,000), 128K (131,072), 1M (1,048,576)."""
    try:
        return parse_tokens(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _length(text: str) -> int | str:
    """--max-model-len: a token count, or -1 / auto for the longest that fits."""
    if text.strip().lower() in ("auto", "-1"):
        return "auto"
    try:
        return parse_tokens(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e}, or auto") from None


def _speculative(args) -> dict | None:
    if args.speculative is None:
        if args.draft_model or args.num_speculative_tokens is not None:
            raise KVPlanError("--draft-model and --num-speculative-tokens go with --speculative METHOD: add it")
        return None
    default = 3 if args.speculative.startswith("eagle") else 1
    out = {"method": args.speculative, "num_speculative_tokens": args.num_speculative_tokens or default}
    return {**out, "model": args.draft_model} if args.draft_model else out


def _lora(args) -> dict | None:
    if args.max_loras is None and args.max_lora_rank is None:
        return None
    return {k: v for k, v in (("max_loras", args.max_loras), ("max_lora_rank", args.max_lora_rank)) if v is not None}


def cmd_plan(args) -> int:
    from .planning.planner import plan
    from .planning.search import fewest_gpus, fixes

    model = _load(args)
    kwargs = dict(engine=args.engine, gpu=args.gpu, max_model_len=args.max_model_len,
                  gpu_memory_utilization=args.gpu_memory_utilization, kv_dtype=args.kv_dtype, dtype=args.dtype,
                  quantization=args.quantization, engine_version=args.engine_version,
                  max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
                  block_size=args.block_size, language_model_only=args.language_model_only,
                  images_per_prompt=args.images_per_prompt, dp=args.dp,
                  expert_parallel=args.enable_expert_parallel or None, enforce_eager=args.enforce_eager or None,
                  cudagraph_estimate=None if args.cudagraph_estimate is None else args.cudagraph_estimate == "on",
                  kv_cache_memory_bytes=args.kv_cache_memory_bytes, speculative=_speculative(args),
                  lora=_lora(args), nvls=False if args.no_nvls else None,
                  enable_prefix_caching=args.enable_prefix_caching)
    choice = None
    if args.any_layout and not args.fewest_gpus:
        raise KVPlanError("--any-layout goes with --fewest-gpus: add it")
    if args.fewest_gpus:
        if args.tp is not None or args.num_gpus is not None or args.pp != 1:
            raise KVPlanError("--fewest-gpus searches TP and PP itself: leave out --tp, --pp and --num-gpus")
        from .planning.layouts import deployable, node_size

        per_node = node_size(args.gpu, args.gpus_per_node)
        if args.any_layout:
            result = fewest_gpus(model, gpus_per_node=per_node, **kwargs)
        else:
            choice = deployable(model, gpus_per_node=per_node, **kwargs)
            result = choice.plan
    else:
        result = plan(model, num_gpus=args.num_gpus, tp=args.tp, pp=args.pp, **kwargs)
    layout = dict(num_gpus=args.num_gpus, tp=args.tp, pp=args.pp)
    nearest = [] if result.fits else fixes(model, result, **layout, gpus_per_node=args.gpus_per_node, **kwargs)
    load = _workload(args, model, result)
    if args.json:
        from .planning.fix_plans import planned

        # "fixes": the sentences, as before; "fix_plans": each as data, with the plan its flags give
        print(json.dumps({**result.model_dump(mode="json"), "fixes": [f"{text} ({flag})" for text, flag in nearest],
                          "fix_plans": [f.model_dump(mode="json") for f in planned(model, nearest, **layout,
                                                                                    **kwargs)],
                          **({"layout": choice.summary()} if choice else {}),
                          **({"workload": load.model_dump(mode="json")} if load else {})}, indent=1))
    else:
        head, _, rest = format_plan(result).partition("\n")   # the layout's reason right under the headline
        print(head + ("\n" + _layout_lines(choice) if choice else "") + "\n" + rest
              + "".join(f"\nto fit: {text} ({flag})" for text, flag in nearest)
              + (format_workload(load) if load else ""))
    return 0 if result.fits else EXIT_DOES_NOT_FIT


def _layout_lines(choice) -> str:
    """The deployable layout's reason and the fewest count in any layout, beside it."""
    s = choice.summary()
    gpus = f"{s['num_gpus']} GPU{'s' if s['num_gpus'] > 1 else ''}"
    lines = [f"layout: {s['layout']} on {gpus} ({s['nodes']} node{'s' if s['nodes'] > 1 else ''} "
             f"of {s['gpus_per_node']}), {s['total_concurrency']:,.2f}x requests of max_model_len"]
    f = s["fewest_any_layout"]
    if f is not None and (f["num_gpus"], f["layout"]) == (s["num_gpus"], s["layout"]):
        lines[0] += "; also the fewest GPUs in any layout"
    if f is not None and (f["num_gpus"], f["layout"]) != (s["num_gpus"], s["layout"]):
        lines.append(f"fewest GPUs in any layout: {f['num_gpus']} ({f['layout']}, {f['nodes']} node"
                     f"{'s' if f['nodes'] > 1 else ''}, {f['max_concurrency']:,.2f}x) (--fewest-gpus --any-layout)")
    if (ep := s["expert_parallel_alternative"]) is not None:
        lines.append(f"expert parallel on the same {ep['num_gpus']} GPUs: {ep['layout']} holds "
                     f"{ep['total_concurrency']:,.2f}x ({ep['flags']})")
    return "\n".join(lines)


def _workload(args, model, result):
    """The plan at the request mix the flags give, or None without one (--gpu-price alone asks for a mix)."""
    given = (args.prompt_mean, args.output_mean, args.prompt_p95, args.output_p95)
    if all(v is None for v in given):
        if args.gpu_price is not None:
            raise KVPlanError("--gpu-price prices a workload: add --prompt-mean N --output-mean N")
        return None
    if args.prompt_mean is None or args.output_mean is None:
        raise KVPlanError("a workload needs both --prompt-mean and --output-mean (the p95s are optional)")
    from .planning.workload import RequestMix, workload_plan

    if not result.fits:
        return None   # the plan says what would fit; a workload on it would only repeat that
    return workload_plan(model, result, RequestMix(args.prompt_mean, args.output_mean, args.prompt_p95,
                                                   args.output_p95), args.gpu_price)


def format_workload(w) -> str:
    cost = (f"${w.cost_per_million_output_tokens:,.3f} per million output tokens at ${w.gpu_price_per_hour:,.2f} per "
            f"GPU-hour ({w.price_source})" if w.cost_per_million_output_tokens is not None else
            w.price_source)
    p95 = (f"; {w.concurrent_requests_p95:,.2f} if all were p95 ({w.p95_context:,} tokens)"
           if w.concurrent_requests_p95 is not None else "")
    lines = ["", f"workload: {w.prompt_mean:,} prompt + {w.output_mean:,} output tokens per request",
             f"  concurrent requests  {w.concurrent_requests:,.2f} (limited by the {w.limited_by}){p95}",
             f"  output tokens/s      {w.output_tokens_per_s:,.0f} ({w.time_per_output_token_s * 1e3:,.2f} ms per "
             f"token, TTFT {w.ttft_s * 1e3:,.0f} ms)",
             f"  requests/s           {w.requests_per_s:,.2f}",
             f"  cost                 {cost}", *w.formula, *("note: " + n for n in w.notes)]
    return "\n".join(lines)


def format_plan(p) -> str:
    verdict = "FITS" if p.fits else f"DOES NOT FIT (short by {fmt_bytes(p.shortfall_bytes)})"
    dp = f" x DP {p.data_parallel_size}" if p.data_parallel_size > 1 else ""
    ep = f", experts over {p.expert_parallel_size}" if p.expert_parallel_size > 1 else ""
    lines = [f"{p.model} on {p.num_gpus} x {p.gpu} ({fmt_bytes(p.gpu_memory_bytes)} each), {p.engine} "
             f"{p.engine_version}, TP {p.tensor_parallel_size} x PP {p.pipeline_parallel_size}{dp}{ep}, "
             f"max_model_len {fmt_int(p.max_model_len)}: {verdict}", *_warning_lines(p.warnings), "",
             "per GPU:",
             *_budget_lines(p), "",
             *_capacity_lines(p)]
    if not p.fits:
        lines.append(f"longest request that fits: {fmt_int(p.max_model_len_that_fits)} tokens")
    lines += ["", p.vllm_command, "", *p.formula, *weights_lines(p), *("note: " + n for n in p.notes)]
    return "\n".join(lines)


_BUDGET_LABELS = {"activation peak": "activation", "non-torch overhead": "non-torch"}


def _budget_lines(p) -> list[str]:
    """One line per figure of the per-GPU budget (Plan.budget_lines: the extras too), the widest label setting the
    column."""
    rows = [(_BUDGET_LABELS.get(name, name), value) for name, value in p.budget_lines()]
    width = max(12, *(len(name) for name, _ in rows))
    tail = {"weights": f"  (from the {p.weights_source})",
            "KV pool": f"  ({fmt_int(p.kv_bytes_per_token)} B per token)"}
    return [f"  {name:<{width}} {fmt_bytes(value):>12}{tail.get(name, '')}" for name, value in rows]


def weights_lines(p) -> list[str]:
    """Where the weights came from, both whole-model figures where both exist, and a multimodal model's split."""
    stored = p.rule_vs_stored()
    lines = [f"weights: checkpoint, {fmt_int(p.weights_checkpoint_bytes)} B for the whole model as loaded "
             f"({p.weights_provenance})"] if p.weights_source == "checkpoint" else [
        f"weights: config rule, {fmt_int(p.weights_rule_bytes or 0)} B for the whole model ({p.weights_provenance})"]
    if (loaded := p.rule_vs_checkpoint()) is not None:
        lines.append(f"weights: the config rule gives {fmt_int(p.weights_rule_bytes)} B ({loaded[0]:+,} B, "
                     f"{loaded[1]:+.2f} %)")
    if p.weights_components:
        lines.append(f"weights by component ({p.weights_source}): "
                     + ", ".join(f"{c} {fmt_bytes(b)}" for c, b in p.weights_components.items()))
    if stored is not None:
        lines.append(f"weights: the checkpoint stores {fmt_int(p.checkpoint_stored_bytes)} B, the config rule says "
                     f"{fmt_int(p.rule_stored_bytes)} B ({stored[0]:+,} B, {stored[1]:+.3f} %)")
    return lines


def _warning_lines(warnings) -> list[str]:
    """Unverified figures say so right under the headline, before any number."""
    return [f"WARNING: {w}" for w in warnings]


def _capacity_lines(p) -> list[str]:
    if p.engine == "hf":
        return [f"largest batch of {fmt_int(p.max_model_len)}-token prompts: {int(p.max_concurrency)}",
                f"longest prompt at batch 1: {fmt_int(p.max_model_len_that_fits)} tokens"]
    return [f"GPU KV cache size: {fmt_int(p.kv_cache_tokens)} tokens",
            f"Maximum concurrency for {fmt_int(p.max_model_len)} tokens per request: {p.max_concurrency:.2f}x"]


def cmd_compare(args) -> int:
    from .planning.compare import compare
    from .planning.workload import RequestMix

    if (args.prompt_mean is None) != (args.output_mean is None):
        raise KVPlanError("a workload needs both --prompt-mean and --output-mean")
    if args.gpu_price is not None and args.prompt_mean is None:
        raise KVPlanError("--gpu-price prices a workload: add --prompt-mean N --output-mean N")
    mix = RequestMix(args.prompt_mean, args.output_mean) if args.prompt_mean is not None else None
    rows = compare(args.setups, gpu=args.gpu, num_gpus=args.num_gpus, mix=mix, gpu_price_per_hour=args.gpu_price,
                   engine=args.engine, max_model_len=args.max_model_len, kv_dtype=args.kv_dtype,
                   gpu_memory_utilization=args.gpu_memory_utilization, engine_version=args.engine_version)
    failed = [r for r in rows if r.error]
    if failed:  # a setup kvplan cannot plan is bad input (an unknown model): exit 2, not "does not fit"
        more = f" (and {len(failed) - 1} more setups cannot be planned)" if len(failed) > 1 else ""
        raise KVPlanError(f"setup {failed[0].setup}: {failed[0].error}{more}")
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=1))
    else:
        print(format_comparison(rows))
    return 0 if all(r.fits for r in rows) else EXIT_DOES_NOT_FIT


def format_comparison(rows) -> str:
    head = ["setup", "GPUs", "layout", "fits", "weights/GPU", "KV pool/GPU", "KV tokens", "max conc."]
    workload = any(r.concurrent_requests is not None for r in rows)
    head += ["at the mix", "out tok/s", "$/1M out"] if workload else []
    table = [head]
    for r in rows:
        if r.error:
            table.append([r.setup, "-", "-", "no", *["-"] * (len(head) - 4)])
            continue
        cells = [r.setup, f"{r.num_gpus} x {r.gpu}", r.layout, "yes" if r.fits else "NO", fmt_bytes(r.weights_bytes),
                 fmt_bytes(r.kv_pool_bytes), fmt_int(r.kv_cache_tokens), f"{r.max_concurrency:,.2f}x"]
        if workload:
            cells += ["-" if r.concurrent_requests is None else f"{r.concurrent_requests:,.1f}",
                      "-" if r.output_tokens_per_s is None else f"{r.output_tokens_per_s:,.0f}",
                      "-" if r.cost_per_million_output_tokens is None else f"{r.cost_per_million_output_tokens:,.3f}"]
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i in (0, 1, 2, 3) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in table]
    lines += [f"{r.setup}: {r.error}" for r in rows if r.error]
    lines += [f"{r.setup}: not verified (see `kvplan plan` for the warning)" for r in rows if not r.error and not r.verified]
    return "\n".join(lines)


def cmd_gpus(args) -> int:
    from .gpus import list_gpus

    gpus = list_gpus()
    if args.json:
        print(json.dumps([{"name": g.name, "memory_bytes": g.memory_bytes, "bandwidth_bytes_per_s":
                           g.bandwidth_bytes_per_s, "bf16_flops": g.bf16_flops, "fp8_flops": g.fp8_flops,
                           "usd_per_gpu_hour": g.price_per_hour} for g in gpus], indent=1))
        return 0
    width = max(len(g.name) for g in gpus)
    for g in gpus:
        price = f"  ${g.price_per_hour:5.2f}/h" if g.price_per_hour is not None else ""
        print(f"{g.name:<{width}} {fmt_bytes(g.memory_bytes):>11}  {g.bandwidth_bytes_per_s / 1e12:5.2f} TB/s{price}")
    print("prices: on-demand USD per GPU-hour, kvplan/data/gpu_prices.json (where read, when); --gpu-price overrides")
    return 0


def cmd_models(args) -> int:
    from .config.load import load_model
    from .sources.library import bundled_ids

    rows = []
    for model_id in bundled_ids():
        m = load_model(model_id)
        kinds = ",".join(f"{k}:{n}" for k, n in m.attention_kinds.items())
        rows.append({"id": model_id, "family": m.model_type, "layers": m.num_layers, "kv_heads": m.kv_heads,
                     "head_dim": m.head_dim, "kinds": kinds, "dtype": m.dtype.name})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    cols = ("id", "family", "layers", "kv_heads", "head_dim", "kinds")
    table = [cols] + [tuple("-" if r[c] is None else str(r[c]) for c in cols) for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(cols))]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip() for t in table))
    return 0


COMMANDS = {"compare": cmd_compare, "estimate": cmd_estimate, "plan": cmd_plan, "models": cmd_models, "gpus": cmd_gpus,
            "recommend": cmd_recommend}


def cmd_validate(rest: Sequence[str]) -> int:
    """`kvplan validate ...` runs `python -m validation ...` (imported here only: it pulls in torch)."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if (root / "validation" / "__init__.py").is_file() and str(root) not in sys.path:
        sys.path.insert(0, str(root))   # a checkout: the harness sits next to the package, outside the wheel
    try:
        from validation.harness import main as harness_main
    except ImportError as exc:
        print(f"kvplan: error: the validation harness is not available ({exc}): run it from a checkout of the "
              "repository with `pip install -e .[validate]`", file=sys.stderr)
        return 2
    return harness_main(list(rest))


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[command]


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["validate"]:
        return cmd_validate(args_in[1:])
    parser = build_parser()
    args, unknown = parser.parse_known_args(args_in)
    if unknown:  # said by the subcommand's parser, which knows its flags (and so the nearest one)
        _subparser(parser, args.command).error(_UNRECOGNIZED + " ".join(unknown))
    try:
        return COMMANDS[args.command](args)
    except KVPlanError as exc:
        # a path from argv may hold surrogateescape'd bytes ("\\udcff"): escaped, never UnicodeEncodeError
        print(f"kvplan: error: {exc}".encode("utf-8", "backslashreplace").decode("utf-8"), file=sys.stderr)
        return 2
    except BrokenPipeError:  # `kvplan models | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
