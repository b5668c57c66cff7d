"""The GPU catalog: physical memory as the runtime reports it, bandwidth and dense tensor FLOP/s, by name.

Data lives in `data/gpus.json` (one entry per GPU, each number with its source). `memory_bytes` is what
`torch.cuda.mem_get_info()[1]` returns and what vLLM prints as total memory: an H100-80GB is 79.19 GiB,
not 80 GB (peers.md, mistake 8). Names resolve the way people write them: "H100-80GB", "h100_sxm5",
"A100-40GB", "RTX4090", "NVIDIA GeForce RTX 4090" (the torch device name). A GPU that is not in the
catalog is written "custom:24GiB:1000GB/s" or built with `custom_gpu(...)`.

Pure: reads one bundled JSON file, no network, no torch.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import WorkloadError
from .units import GB, GiB, KiB, MiB

__all__ = ["GPU", "custom_gpu", "list_gpus", "load_catalog", "parse_custom_gpu", "resolve_gpu"]

_CATALOG_PATH = Path(__file__).parent / "data" / "gpus.json"

CUSTOM_HINT = "define your own as 'custom:<memory>GiB:<bandwidth>GB/s', e.g. custom:24GiB:1000GB/s"


@dataclass(frozen=True)
class GPU:
    """One accelerator. Memory in bytes as the runtime reports it; rates are dense peaks (None = unsupported/unknown)."""

    name: str
    memory_bytes: int
    bandwidth_bytes_per_s: int | None
    bf16_flops: int | None
    fp8_flops: int | None
    fp16_flops: int | None
    vendor: str
    source: str
    aliases: tuple[str, ...] = ()
    marketing_memory_gb: int | None = None
    memory_kind: str = ""
    tdp_watts: int | None = None
    compute_capability: tuple[int, int] | None = None  # NVIDIA SM version (8.0 A100, 9.0 H100); None: AMD, custom
    price_per_hour: float | None = None   # USD per GPU-hour, on demand (kvplan/data/gpu_prices.json); None: unknown
    price_source: str = ""
    # nvidia-smi's memory.total, the size SGLang reads for its default fraction (utils get_nvgpu_memory_capacity;
    # 0.5.23 srt/utils/common.py :802-830, `nvidia-smi --query-gpu=memory.total`): 81,559 MiB on an H100 SXM whose
    # runtime total is 81,090 MiB; None where no source gave it
    smi_memory_bytes: int | None = None
    smi_source: str = ""
    # GPUs in one node (kvplan/data/gpu_nodes.json): TP stays inside one, PP stages span whole nodes
    gpus_per_node: int = 8
    node_source: str = ""

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GiB

    @property
    def is_custom(self) -> bool:
        return self.vendor == "custom"

    @property
    def has_bfloat16(self) -> bool:
        """Whether the card computes in bfloat16: NVIDIA from SM 8.0 (vLLM platforms/cuda.py, 0.33: 'Pascal, Volta
        and Turing NVIDIA GPUs, BF16 is not supported': T4, V100); a card without an SM version, where the catalog
        gives it a bfloat16 rate, and custom cards."""
        cc = self.compute_capability
        if cc is not None:
            return cc >= (8, 0)
        return self.bf16_flops is not None or self.is_custom


# ---------------------------------------------------------------------------------------------- catalog


def _gpu_from_entry(entry: dict) -> GPU:
    src = entry["source"]
    source = f"memory ({src['memory_kind']}): {src['memory']}; specs: {src['specs']}"
    return GPU(
        name=entry["name"],
        memory_bytes=int(entry["memory_bytes"]),
        bandwidth_bytes_per_s=_int_or_none(entry["memory_bandwidth_bytes_per_s"]),
        bf16_flops=_int_or_none(entry["bf16_dense_flops"]),
        fp8_flops=_int_or_none(entry["fp8_dense_flops"]),
        fp16_flops=_int_or_none(entry["fp16_dense_flops"]),
        vendor=entry["vendor"],
        source=source,
        aliases=(entry["device_name"], *entry["aliases"]),
        marketing_memory_gb=entry["marketing_memory_gb"],
        memory_kind=src["memory_kind"],
        tdp_watts=entry.get("tdp_watts"),
        compute_capability=_capability(entry.get("compute_capability")),
        smi_memory_bytes=entry["nvidia_smi_memory_mib"] * MiB if "nvidia_smi_memory_mib" in entry else None,
        smi_source=src.get("nvidia_smi", ""),
        **_price_of(entry["name"]),
        **_node_of(entry["name"]),
    )


def _price_of(name: str) -> dict:
    """The catalog GPU's on-demand price per GPU-hour and where it was read (kvplan/data/gpu_prices.json)."""
    found = _prices().get(name)
    if found is None:
        return {}
    return {"price_per_hour": float(found["usd_per_gpu_hour"]),
            "price_source": f"{found['provider']} {found['sku']}, {found['date']}: {found['source']}"}


def _node_of(name: str) -> dict:
    """The catalog GPU's node size and where it comes from (kvplan/data/gpu_nodes.json)."""
    raw = _nodes()
    found = next((n for n in raw["nodes"] if n["gpu"] == name), None)
    if found is None:
        return {"gpus_per_node": int(raw["default"]), "node_source": raw["default_source"]}
    return {"gpus_per_node": int(found["gpus_per_node"]), "node_source": found["source"]}


@lru_cache(maxsize=1)
def _nodes() -> dict:
    return json.loads((Path(__file__).resolve().parent / "data" / "gpu_nodes.json").read_text())


@lru_cache(maxsize=1)
def _prices() -> dict:
    path = Path(__file__).resolve().parent / "data" / "gpu_prices.json"
    if not path.is_file():
        return {}
    return {p["gpu"]: p for p in json.loads(path.read_text())["prices"]}


def _capability(text: str | None) -> tuple[int, int] | None:
    """'8.9' -> (8, 9)."""
    if text is None:
        return None
    major, minor = str(text).split(".")
    return int(major), int(minor)


def _int_or_none(value) -> int | None:
    return None if value is None else int(value)


@lru_cache(maxsize=1)
def load_catalog() -> tuple[GPU, ...]:
    """Every catalog GPU, in file order (the order also picks the default when a short name is ambiguous)."""
    raw = json.loads(_CATALOG_PATH.read_text())
    return tuple(_gpu_from_entry(entry) for entry in raw["gpus"])


def list_gpus() -> tuple[GPU, ...]:
    """The catalog for listings (CLI `gpus`, the app's picker)."""
    return load_catalog()


# ---------------------------------------------------------------------------------------------- names

# Words people add or leave out without changing the GPU: "NVIDIA GeForce RTX 4090" == "RTX 4090".
_VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct"})
_MEMORY_TOKEN = re.compile(r"^(\d+)(?:gb|g|gib)$")


def _split_name(text: str) -> tuple[str, int | None]:
    """'NVIDIA A100-SXM4-80GB' -> ('a100sxm4', 80); 'h100_sxm5' -> ('h100sxm5', None); '4090' -> ('4090', None)."""
    lowered = re.sub(r"(\d)\s+(gib|gb|g)\b", r"\1\2", text.strip().lower())   # "80 GB" -> "80gb"
    tokens = [t for t in re.split(r"[\s_\-/.,()]+", lowered) if t and t not in _VENDOR_WORDS]
    memory_gb = None
    kept = []
    for token in tokens:
        match = _MEMORY_TOKEN.match(token)
        if match and memory_gb is None:
            memory_gb = int(match.group(1))
        else:
            kept.append(token)
    return re.sub(r"[^a-z0-9]", "", "".join(kept)), memory_gb


@lru_cache(maxsize=1)
def _name_index() -> dict[str, tuple[tuple[GPU, int | None], ...]]:
    """base name -> ((gpu, memory the alias spelled out or None), ...) in catalog order.

    "A100-40GB" is indexed under "a100" with 40, so bare "a100" only sees aliases without a size.
    """
    index: dict[str, list[tuple[GPU, int | None]]] = {}
    for gpu in load_catalog():
        for alias in (gpu.name, *gpu.aliases):
            base, memory_gb = _split_name(alias)
            slot = index.setdefault(base, [])
            if (gpu, memory_gb) not in slot:
                slot.append((gpu, memory_gb))
    return {base: tuple(slots) for base, slots in index.items()}


def _lookup(base: str, memory_gb: int | None) -> GPU | None:
    for gpu, alias_memory in _name_index().get(base, ()):
        if memory_gb is None and alias_memory is None:
            return gpu
        if memory_gb is not None and memory_gb == (alias_memory or gpu.marketing_memory_gb):
            return gpu
    return None


def _close_matches(text: str, limit: int = 5) -> list[str]:
    """Canonical names whose spellings look like `text`, best first."""
    base, memory_gb = _split_name(text)
    query = base + (str(memory_gb) if memory_gb else "")
    spellings: dict[str, str] = {}
    for gpu in load_catalog():
        for alias in (gpu.name, *gpu.aliases):
            alias_base, alias_memory = _split_name(alias)
            spellings.setdefault(alias_base + (str(alias_memory) if alias_memory else ""), gpu.name)
            spellings.setdefault(alias_base + str(gpu.marketing_memory_gb), gpu.name)
    names: list[str] = []
    for key in difflib.get_close_matches(query, spellings, n=limit * 4, cutoff=0.5):
        if spellings[key] not in names:
            names.append(spellings[key])
    return names[:limit]


MAX_NAME_CHARS = 80  # "custom:24GiB:1000GB/s:165TFLOPS" is 31


def resolve_gpu(name: str | GPU) -> GPU:
    """A catalog GPU by any usual spelling, or a "custom:..." GPU; raises WorkloadError naming close matches.

    Case, spaces, dashes and underscores do not matter; vendor words (NVIDIA, GeForce, Tesla, AMD,
    Instinct) are optional; a memory suffix ("80GB", "40G") picks the variant. Bare "A100" is the
    SXM 80GB (the A100 most clouds rent today); "H100" is the SXM; "V100" is the 16GB SXM2.
    """
    if isinstance(name, GPU):
        return name
    text = str(name).strip()
    if len(text) > MAX_NAME_CHARS:  # echoed in every message and plan: never a 100,000-character name
        raise WorkloadError(f"the GPU name {text[:40]!r}... is {len(text):,} characters long, more than any GPU's "
                            f"{MAX_NAME_CHARS}: use a catalog name (`kvplan gpus`) or {CUSTOM_HINT}")
    if text.lower().startswith("custom:"):
        return parse_custom_gpu(text)
    base, memory_gb = _split_name(text)
    found = _lookup(base, memory_gb) if base else None
    if found is not None:
        return found
    close = _close_matches(text) if base else []
    hint = f"close matches: {', '.join(close)}" if close else "no close match in the catalog"
    raise WorkloadError(f"unknown GPU {text!r} ({hint}); use a catalog name or {CUSTOM_HINT}")


# ---------------------------------------------------------------------------------------------- custom GPUs

_MEMORY_UNITS = {"tib": 2**40, "gib": GiB, "mib": MiB, "kib": KiB, "tb": 10**12, "gb": GB}
_BANDWIDTH_UNITS = {"tb/s": 10**12, "gb/s": GB}
_FLOPS_UNITS = {"pflops": 10**15, "tflops": 10**12}
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)\s*([a-z/]+)$")
# Beyond these a "GPU" is a typo, and its figures would overflow floats: a B200 holds 180 GB at 8 TB/s and
# 2.25 dense PFLOPS, so 1 PiB, 1 PB/s and 1 EFLOPS leave room for 5,000x that and more.
_LIMITS = {"memory": (2**50, "1 PiB"), "bandwidth": (10**15, "1 PB/s"), "flops": (10**18, "1 EFLOPS")}


def custom_gpu(
    memory_gib: float,
    bandwidth_gbps: float | None = None,
    bf16_tflops: float | None = None,
    *,
    fp8_tflops: float | None = None,
    name: str | None = None,
) -> GPU:
    """A GPU the catalog lacks. memory_gib in GiB (2**30 bytes, as the runtime reports it), bandwidth in GB/s
    (10**9 bytes/s, as datasheets print it), FLOP/s in dense TFLOPS. Unknown rates stay None."""
    if name is None:
        name = f"custom:{memory_gib:g}GiB" + (f":{bandwidth_gbps:g}GB/s" if bandwidth_gbps is not None else "")
    return _custom(
        name,
        _amount("memory", memory_gib, GiB, name),
        None if bandwidth_gbps is None else _amount("bandwidth", bandwidth_gbps, GB, name),
        None if bf16_tflops is None else _amount("flops", bf16_tflops, 10**12, name),
        None if fp8_tflops is None else _amount("flops", fp8_tflops, 10**12, name),
    )


def _amount(kind: str, number: float, unit: int, label: str) -> int:
    """number x unit as a whole count, refused when it is not a finite amount up to the kind's limit."""
    limit, words = _LIMITS[kind]
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
        raise WorkloadError(f"custom GPU {label!r}: its {kind} must be a finite number; {CUSTOM_HINT}")
    if number * unit > limit:
        raise WorkloadError(f"custom GPU {label!r}: {'compute' if kind == 'flops' else kind} over {words} is no GPU; "
                            f"{CUSTOM_HINT}")
    return round(number * unit)


def parse_custom_gpu(text: str) -> GPU:
    """'custom:24GiB:1000GB/s[:165TFLOPS]' -> GPU. Fields after 'custom:' are told apart by their units."""
    fields = {"memory": None, "bandwidth": None, "flops": None}
    for part in text.split(":")[1:]:
        kind, value = _parse_quantity(part, text)
        if fields[kind] is not None:
            raise WorkloadError(f"custom GPU {text!r} gives its {kind} twice; {CUSTOM_HINT}")
        fields[kind] = value
    if fields["memory"] is None:
        raise WorkloadError(f"custom GPU {text!r} needs a memory size with a unit (GiB = 2**30, GB = 10**9); {CUSTOM_HINT}")
    return _custom(text, fields["memory"], fields["bandwidth"], fields["flops"], None)


def _parse_quantity(part: str, text: str) -> tuple[str, int]:
    match = _QUANTITY.match(part.strip().lower())
    if match:
        number, unit = float(match.group(1)), match.group(2)
        for kind, units in (("memory", _MEMORY_UNITS), ("bandwidth", _BANDWIDTH_UNITS), ("flops", _FLOPS_UNITS)):
            if unit in units:
                return kind, _amount(kind, number, units[unit], text)
    raise WorkloadError(
        f"custom GPU {text!r}: cannot read {part!r} (use GiB/GB for memory, GB/s or TB/s for bandwidth, "
        f"TFLOPS for bf16 compute); {CUSTOM_HINT}"
    )


def _custom(label: str, memory_bytes: int, bandwidth: int | None, bf16: int | None, fp8: int | None) -> GPU:
    for what, value in (("memory", memory_bytes), ("bandwidth", bandwidth), ("bf16 FLOP/s", bf16), ("fp8 FLOP/s", fp8)):
        if value is not None and value <= 0:
            raise WorkloadError(f"custom GPU {label!r}: {what} must be positive; {CUSTOM_HINT}")
    return GPU(
        name=label,
        memory_bytes=memory_bytes,
        bandwidth_bytes_per_s=bandwidth,
        bf16_flops=bf16,
        fp8_flops=fp8,
        fp16_flops=bf16,
        vendor="custom",
        source="user-defined",
        memory_kind="custom",
    )
