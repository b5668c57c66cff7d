"""Shared helpers for the truth tests: real transformers caches against kvplan's numbers.

Nothing here trusts remote code: a config is built with `CONFIG_MAPPING[model_type].from_dict(text dict)`,
the class transformers itself would pick for that model_type. The cache is measured by walking
`cache.layers` (keys, values, conv/recurrent states, quantized tensors, 0-d bookkeeping scalars), with
tensor subclasses (optimum-quanto's QTensors) opened through `__tensor_flatten__`:

- logical = sum of numel x element_size over distinct tensors,
- storage = sum of nbytes over distinct storages (a sliding layer's W-1 view pins the whole concatenation),
- scalars = the 0-d tensors among them (counted in both totals and reported on their own).

Distinct storages are told apart by the StorageImpl pointer (`untyped_storage()._cdata`), which also works
on the meta device, where every data_ptr() is 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import CONFIG_MAPPING, AutoModelForCausalLM  # noqa: E402

import kvplan  # noqa: E402
from kvplan.config.reader import text_config  # noqa: E402
from kvplan.sources.files import read_config_file
from kvplan.sources.library import bundled_index  # noqa: E402
from validation.measure import walk_cache  # noqa: E402  (validation/ is importable through pytest's pythonpath)

transformers.logging.set_verbosity_error()

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

# Families transformers 5.24 does not ship, and the native family with the same architecture (checked instead).
SAME_ARCHITECTURE = {"kimi_k2": "deepseek_v3"}


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    """Tiny models run 10-20x faster on one intra-op thread than on an oversubscribed pool of two."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# ---------------------------------------------------------------- configs


def bundled_configs() -> list[tuple[str, dict[str, Any]]]:
    """(model id, config.json dict) of every bundled model, in id order."""
    return [(path.stem.replace("__", "/", 1), read_config_file(path)) for path in bundled_index().values()]


def hf_config(data: Mapping[str, Any], model_type: str | None = None):
    """The transformers config class of the (text) model a config.json describes, never remote code.

    `model_type` replaces the text model_type (kimi_k2 -> deepseek_v3). Raises KeyError when transformers
    does not know the family.
    """
    text, mt = text_config(data)
    mt = model_type or mt
    if mt not in CONFIG_MAPPING:
        raise KeyError(mt)
    text = {**text, "model_type": mt}
    return CONFIG_MAPPING[mt].from_dict(text)


def known_to_transformers(data: Mapping[str, Any]) -> tuple[bool, str]:
    _, mt = text_config(data)
    return mt in CONFIG_MAPPING, mt


def config_windows(data: Mapping[str, Any], spec: kvplan.ModelSpec) -> list[int]:
    """Every window or chunk size the config or kvplan names (also ones kvplan decides are unused, like
    Qwen2's sliding_window without use_sliding_window: prompts longer than those prove them unused)."""
    text, _ = text_config(data)
    found = {s.window for _, s in spec.specs() if getattr(s, "window", None)}
    for key in ("sliding_window", "attention_chunk_size"):
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            found.add(value)
    return sorted(found)


def shrink(data: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy of a config dict with `changes` applied to its text model (nested text_config included)."""
    out = json.loads(json.dumps(data))
    for key in ("text_config", "llm_config", "language_config", "text_model_config"):
        if isinstance(out.get(key), dict) and out[key]:
            out[key].update(changes)
            return out
    out.update(changes)
    return out


# ---------------------------------------------------------------- models


def meta_model(cfg, dtype: torch.dtype):
    """The model on the meta device. Outside bf16 the MoE experts run `batched_mm`: torch 2.13's meta kernel
    for grouped_mm (transformers' default) accepts only bf16, and `eager` needs nonzero(), which meta cannot
    do. Experts never touch the cache."""
    kwargs = {} if dtype == torch.bfloat16 else {"experts_implementation": "batched_mm"}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, **kwargs)
    return model.eval()


def cpu_model(cfg, dtype: torch.dtype, seed: int = 0):
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def prompt(model, batch: int, length: int) -> torch.Tensor:
    device = model_device(model)
    if device.type == "meta":
        return torch.zeros((batch, length), dtype=torch.long, device=device)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    gen = torch.Generator().manual_seed(batch * 1000 + length)
    return torch.randint(3, max(4, vocab), (batch, length), generator=gen)


def prefill(model, batch: int, length: int, cache=None):
    """One forward over a `batch` x `length` prompt; returns (cache, next token ids)."""
    ids = prompt(model, batch, length)
    kwargs = {"cache": cache} if cache is not None else {}
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, **kwargs)
    return out.cache, out.logits[:, -1:].argmax(-1)


def decode(model, cache, token: torch.Tensor, steps: int):
    """`steps` single-token forwards feeding back the greedy token; returns the next token."""
    with torch.no_grad():
        for _ in range(steps):
            out = model(input_ids=token, cache=cache, use_cache=True)
            cache = out.cache
            token = out.logits[:, -1:].argmax(-1)
    return token


# ---------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Measured:
    logical: int    # numel x element_size, distinct tensors, scalars included
    storage: int    # nbytes of distinct storages, scalars included
    scalars: int    # the 0-d tensors' bytes
    tensors: int    # distinct tensors counted

    def __str__(self) -> str:
        return f"logical {self.logical:,} B, storage {self.storage:,} B, scalars {self.scalars:,} B"


def measure(cache) -> Measured:
    """Bytes a transformers cache holds, read by the harness's own walk (validation.measure.walk_cache):
    every tensor its layers reference, views counted by the storage they pin, 0-d scalars separately."""
    held = walk_cache(cache)
    return Measured(held.logical, held.storage, held.scalars, held.tensors)


# ---------------------------------------------------------------- comparing


@dataclass
class Tally:
    """Counts (model, workload) pairs checked and collects mismatches, for the summary line."""

    label: str
    checked: int = 0
    mismatches: list[str] | None = None

    def __post_init__(self):
        self.mismatches = []

    def summary(self) -> str:
        return f"truth({self.label}): {self.checked} (model, workload) pairs checked, {len(self.mismatches)} mismatches"


def compare(tally: Tally, what: str, measured: Measured, est, *, after_prefill: bool) -> None:
    """One (model, workload) pair: logical, storage and scalars must all be exact."""
    tally.checked += 1
    storage_predicted = est.prefill_peak_bytes if after_prefill else est.kv_cache_bytes
    for label, got, want in (("logical", measured.logical, est.logical_bytes),
                             ("storage", measured.storage, storage_predicted),
                             ("scalars", measured.scalars, est.bookkeeping_bytes)):
        if got != want:
            tally.mismatches.append(f"{what}: {label} measured {got:,} B, kvplan {want:,} B ({want - got:+,} B)")


# ---------------------------------------------------------------- meta-device runs (one bundled model)


@dataclass(frozen=True)
class Point:
    """One (model, workload) pair: what was run, what the cache held, what kvplan said."""

    what: str
    measured: Measured
    logical: int          # kvplan logical_bytes
    storage: int          # kvplan prefill_peak_bytes right after a prefill, else kv_cache_bytes
    scalars: int          # kvplan bookkeeping_bytes

    def mismatches(self) -> list[str]:
        out = []
        for label, got, want in (("logical", self.measured.logical, self.logical),
                                 ("storage", self.measured.storage, self.storage),
                                 ("scalars", self.measured.scalars, self.scalars)):
            if got != want:
                out.append(f"{self.what}: {label} measured {got:,} B, kvplan {want:,} B ({want - got:+,} B)")
        return out


def meta_workloads(windows: list[int], full: bool = False) -> list[tuple[str, int, int, int]]:
    """(dtype, batch, prompt, decode steps) run on the meta device for one model.

    Default: both dtypes, batch 1 and 3, a prompt above every window followed by a decode step (steady
    state), one below every window, and for each window a prompt ending its W-1 view exactly, so that the
    decode step after it is the first token whose storage is W tokens. `full` runs the whole cross product
    (every dtype x batch x prompt), about 3x the forwards.
    """
    low = max(1, min([5] + [w - 2 for w in windows]))
    high = max(windows) + 3 if windows else 40
    edges = [w - 1 for w in windows if w > 1]
    if not full:
        return ([("bf16", 3, high, 1), ("fp32", 1, low, 0)]
                + [("bf16" if i % 2 == 0 else "fp32", 1, p, 1) for i, p in enumerate(edges)])
    return [(dtype, batch, length, 1) for dtype in ("bf16", "fp32") for batch in (1, 3)
            for length in [low, high] + edges]


def meta_points(model_id: str, data: dict, model_type: str | None = None, full: bool = False) -> list[Point]:
    """Build `data` on the meta device once per dtype, run every meta workload, measure each point.

    `model_type` swaps the family transformers builds (kimi_k2 -> deepseek_v3); kvplan still parses the
    original dict. Top-level so a process pool can run it.
    """
    torch.set_num_threads(1)
    spec = kvplan.parse_config(data, name=model_id)
    cfg = hf_config(data, model_type)
    points: list[Point] = []
    models: dict[str, Any] = {}
    for dtype, batch, length, steps in meta_workloads(config_windows(data, spec), full):
        if dtype not in models:
            models[dtype] = meta_model(cfg, DTYPES[dtype])
        model = models[dtype]
        cache, token = prefill(model, batch, length)
        for step in range(steps + 1):
            if step:
                token = decode(model, cache, token, 1)
            T = length + step
            est = kvplan.estimate(spec, seq_len=T, batch_size=batch, dtype=dtype, prompt_len=length)
            storage = est.prefill_peak_bytes if step == 0 else est.kv_cache_bytes
            what = f"{model_id} {dtype} B={batch} P={length} T={T}" + (" (after prefill)" if step == 0 else "")
            points.append(Point(what, measure(cache), est.logical_bytes, storage, est.bookkeeping_bytes))
    return points
