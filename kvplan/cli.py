"""`kvplan` command line: `estimate`, `models`. Thin: parse, call the pure API, format.

Bad input exits with code 2 and one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from .config import Overrides
from .dtypes import KV_DTYPE_CHOICES
from .errors import KVPlanError
from .hf_cache import CACHE_CHOICES, QUANT_BACKENDS
from .units import fmt_bytes, fmt_gb, fmt_int


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line with exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"kvplan: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvplan", description="Exact KV-cache memory from a Hugging Face config.json.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_estimate(sub.add_parser("estimate", help="KV cache bytes for a workload, layer group by group"))
    models = sub.add_parser("models", help="list the bundled models")
    models.add_argument("--json", action="store_true", help="one JSON array on stdout")
    return parser


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
    p.add_argument("--seq-len", type=int, required=True, help="tokens cached per sequence (prompt + generated)")
    p.add_argument("--batch-size", type=int, default=1, help="sequences (x beams); default 1")
    p.add_argument("--kv-dtype", choices=KV_DTYPE_CHOICES, help="cache dtype; default: the config's dtype")
    p.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), help="activation dtype; default: the config's")
    p.add_argument("--cache", choices=CACHE_CHOICES, default="dynamic", help="transformers cache; default dynamic")
    p.add_argument("--max-cache-len", type=int, help="static caches: preallocated tokens (default: --seq-len)")
    p.add_argument("--prompt-len", type=int, help="prefill tokens (default: --seq-len)")
    p.add_argument("--quant-backend", choices=QUANT_BACKENDS, help="quantized cache backend")
    p.add_argument("--q-group-size", type=int, default=64, help="quantized cache group size; default 64")
    p.add_argument("--residual-length", type=int, default=128, help="quantized cache residual; default 128")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def _overrides(args) -> Overrides:
    return Overrides(num_layers=args.num_layers, num_heads=args.num_heads, kv_heads=args.kv_heads,
                     head_dim=args.head_dim, hidden_size=args.hidden_size)


def _load(args):
    from .library import load_model

    for flag in ("num_layers", "num_heads", "kv_heads", "head_dim", "hidden_size"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise KVPlanError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    return load_model(args.model, revision=args.revision, overrides=_overrides(args))


def cmd_estimate(args) -> int:
    from .estimate import estimate

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
    head = (f"{est.model}  ({est.model_type})  cache={est.cache}  seq_len={fmt_int(est.seq_len)}  "
            f"batch={est.batch_size}  kv_dtype={est.kv_dtype}")
    rows = [("group", "layers", "detail", "tokens", "bytes")]
    for g in est.groups:
        tokens = "const" if g.tokens is None else fmt_int(g.tokens)
        rows.append((g.kind, str(g.layers), g.detail, tokens, fmt_int(g.bytes)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    table = ["  ".join(c.rjust(w) if i in (1, 3, 4) else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines = [head, "", *table, "",
             f"KV cache: {fmt_int(est.kv_cache_bytes)} B = {fmt_bytes(est.kv_cache_bytes)} = "
             f"{fmt_gb(est.kv_cache_bytes)}"]
    if est.logical_bytes != est.kv_cache_bytes:
        lines.append(f"logical (tokens attention still reads): {fmt_int(est.logical_bytes)} B")
    if est.prefill_peak_bytes != est.kv_cache_bytes:
        lines.append(f"right after a {fmt_int(est.prompt_len)}-token prefill: {fmt_int(est.prefill_peak_bytes)} B "
                     f"({fmt_bytes(est.prefill_peak_bytes)})")
    if est.host_bytes:
        lines.append(f"on the GPU: {fmt_bytes(est.device_bytes)}; in host memory: {fmt_bytes(est.host_bytes)}")
    lines += ["", "formula: " + est.formula, *("note: " + n for n in est.notes)]
    return "\n".join(lines)


def cmd_models(args) -> int:
    from .library import bundled_ids, load_model

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


COMMANDS = {"estimate": cmd_estimate, "models": cmd_models}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KVPlanError as exc:
        print(f"kvplan: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `kvplan models | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
