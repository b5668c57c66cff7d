"""What a checkpoint holds, read from its safetensors headers, never its tensors: bytes by component and dtype.

A `.safetensors` file starts with an 8-byte little-endian length N and N bytes of JSON, one entry per tensor:
`{"model.embed_tokens.weight": {"dtype": "BF16", "shape": [128256, 4096], "data_offsets": [0, 1050673152]}}`.
`data_offsets` are the stored bytes themselves (128,256 x 4,096 x 2 = 1,050,673,152), so the sum over every
file is exactly what the checkpoint holds: packed GPTQ `qweight` int32, fp8 `weight_scale_inv`, mxfp4 `_blocks`
and their scales included, whatever the quantizer. kvplan keeps only a summary (`WeightRow`s), which is also
what the bundled records in `model_configs/checkpoints/` store.

The header readers (a local folder here, the Hub in kvplan.hub_weights) and the bundled records meet in
`CheckpointWeights`; the planner prices a GPU's share from it (`stage_bytes`).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from math import ceil
from pathlib import Path
from typing import Any, Iterable, Mapping

from .dtypes import DType
from .errors import ConfigError

# safetensors' own cap on a header (safetensors/src/tensor.rs MAX_HEADER_SIZE = 100,000,000)
MAX_HEADER_BYTES = 100_000_000
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

# Bits per element of each safetensors dtype (safetensors/src/tensor.rs Dtype::bitsize).
DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
              "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64,
              "U64": 64, "F64": 64, "C64": 64}
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})

COMPONENTS = ("language_model", "embeddings", "lm_head", "vision", "projector", "audio", "mtp")
TOWERS = frozenset({"vision", "projector", "audio"})

# Name patterns, tried in order. Multimodal checkpoints prefix their towers (Gemma 3 `vision_tower.`,
# Mistral 3 `vision_tower.` + `multi_modal_projector.`, Llama 4 `vision_model.`, Qwen-VL `visual.`).
_COMPONENT_PATTERNS = (
    ("projector", re.compile(r"(^|\.)(multi_modal_projector|mm_projector|embed_vision|vision_projection|"
                             r"vision_proj|mlp1|connector|mm_proj)\.")),
    ("audio", re.compile(r"(^|\.)(audio_tower|audio_model|audio_encoder|embed_audio|audio)\.")),
    ("vision", re.compile(r"(^|\.)(vision_tower|vision_model|visual|vision_encoder|image_encoder|vision|vit)\.")),
    ("mtp", re.compile(r"(^|\.)(mtp|mtp_layers|nextn)[._]")),
    ("lm_head", re.compile(r"(^|\.)(lm_head|embed_out|output_layer)\.|^output\.")),
    ("embeddings", re.compile(r"(^|\.)(embed_tokens|wte|wpe|word_embeddings|tok_embeddings|embed_in|"
                              r"embed_positions|position_embeddings|embedding)\.")),
)
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|block|decoder\.layers)\.(\d+)\.")
_NORM = re.compile(r"(norm|ln_|_ln|layernorm)", re.IGNORECASE)
# Stored with the packed weights and kept as stored whatever the model dtype: quantizer scales and metadata.
_AS_STORED = re.compile(r"(scale|scales|scale_inv|zeros|zero_point|g_idx|_blocks|absmax|quant_map|quant_state|"
                        r"SCB|global_scale|e_score_correction_bias)(_\d)?$")


@dataclass(frozen=True)
class WeightRow:
    """Tensors of one kind, summed: `bytes` as stored, in `tensors` tensors of safetensors `dtype`.

    `layer` is the language-model layer (-1 outside the layers); `replicated` marks norms, which every TP rank
    holds whole; `castable` marks float weights an engine loads into the model dtype (a float32 copy of a
    bf16 model is served in bf16), where scales and packed data stay as stored.
    """

    component: str
    layer: int
    replicated: bool
    dtype: str
    castable: bool
    tensors: int
    bytes: int
    expert: bool = False   # a routed expert's tensor (`.experts.`, not `shared_experts`): spread over the MoE ranks
    attention: bool = False  # an attention tensor (`self_attn.`): split over the attention TP ranks

    def resident(self, model_dtype: DType, keep_f32: bool = False) -> int:
        """Bytes once loaded: castable floats in the model dtype, everything else as stored (`keep_f32`: float32
        tensors too, in a checkpoint that stores its other floats in 16 bits)."""
        if not self.castable or (keep_f32 and self.dtype == "F32"):
            return self.bytes
        elements = self.bytes * 8 // DTYPE_BITS[self.dtype]
        return ceil(elements * model_dtype.bits / 8)


@dataclass(frozen=True)
class CheckpointWeights:
    """A checkpoint's tensors by component, layer and dtype; `source` says where the headers came from."""

    source: str
    rows: tuple[WeightRow, ...]
    files: int

    @property
    def stored_bytes(self) -> int:
        return sum(r.bytes for r in self.rows)

    @property
    def tensors(self) -> int:
        return sum(r.tensors for r in self.rows)

    def by_component(self) -> dict[str, int]:
        out = dict.fromkeys(COMPONENTS, 0)
        for r in self.rows:
            out[r.component] += r.bytes
        return {k: v for k, v in out.items() if v}

    def by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for r in self.rows:
            out[r.dtype] += r.bytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def has(self, component: str) -> bool:
        return any(r.component == component for r in self.rows)

    @cached_property
    def keeps_f32(self) -> bool:
        """True when float32 tensors sit among 16-bit floats: the model keeps those in float32 on purpose
        (MiniMax-M2's router and e_score_correction_bias: vllm 0.19 minimax_m2.py builds the gate with
        params_dtype=torch.float32), where an all-float32 checkpoint is a copy served in the model dtype."""
        return any(r.castable and r.dtype in ("F16", "BF16") for r in self.rows)

    def resident_bytes(self, model_dtype: DType, skip: frozenset[str] = frozenset({"mtp"})) -> int:
        """Bytes one copy of the loaded model holds (MTP layers are not loaded without speculative decoding)."""
        keep = self.keeps_f32
        return sum(r.resident(model_dtype, keep) for r in self.rows if r.component not in skip)

    def stage_bytes(self, model_dtype: DType, tp: int, layers: range, first: bool, last: bool, tied: bool,
                    skip: frozenset[str] = frozenset({"mtp"}), moe_ranks: int | None = None,
                    attn_ranks: int | None = None) -> int:
        """One GPU's share: TP rank of the pipeline stage owning `layers` (vLLM's layout, as
        kvplan.engines.weights_split prices the config rule): layers to their stage, embeddings and towers to the
        first, lm_head and final norm to the last (a tied head materialised there again when PP > 1), everything
        split across TP ranks but norms; routed experts across `moe_ranks` (TP x DP; TP when None), attention
        across `attn_ranks` (SGLang's TP / DP with DP attention; TP when None)."""
        total = tied_copy = 0
        keep, copy_head = self.keeps_f32, tied and last and not first and not self.has("lm_head")
        for r in self.rows:
            if r.component in skip:
                continue
            size = r.resident(model_dtype, keep)
            if r.layer >= 0 and r.component == "language_model":
                if r.layer not in layers:
                    continue
            elif r.component == "embeddings" or r.component in TOWERS:
                if r.component == "embeddings" and copy_head:
                    tied_copy += size
                if not first:
                    continue
            elif not last:  # lm_head, the final norm
                continue
            ranks = (moe_ranks or tp) if r.expert else (attn_ranks or tp) if r.attention else tp
            total += size if r.replicated else ceil(size / ranks)
        return total + ceil(tied_copy / tp)


# ---------------------------------------------------------------- summarising a header


def component_of(name: str, num_layers: int) -> tuple[str, int]:
    """(component, layer) of a tensor name. DeepSeek-V3 stores its MTP block as `model.layers.61.*` past its
    61 layers (transformers: `_keys_to_ignore_on_load_unexpected = [r"model\\.layers\\.61.*"]`), Qwen3-Next as
    `mtp.*`: both are MTP."""
    for component, pattern in _COMPONENT_PATTERNS:
        if pattern.search(name):
            return component, -1
    match = _LAYER.search(name)
    if match is None:
        return "language_model", -1
    layer = int(match.group(1))
    return ("mtp", -1) if num_layers and layer >= num_layers else ("language_model", layer)


def _replicated(name: str, shape: tuple[int, ...], hidden: int | None) -> bool:
    """A norm every TP rank holds whole: over the hidden size, or over one head (Qwen3's q_norm [128]). A norm
    over all heads (MiniMax-M2's q_norm [48 x 128], k_norm [8 x 128]) is sharded with them (vllm 0.19
    minimax_m2.py MiniMaxText01RMSNormTP)."""
    if len(shape) > 1 or not _NORM.search(name):
        return False
    size = shape[0] if shape else 1
    return hidden is None or size == hidden or size <= 512


# a routed expert's tensor: DeepSeek / Qwen MoE `mlp.experts.3.gate_proj.weight`, gpt-oss `mlp.experts.gate_up_proj`,
# Mixtral `block_sparse_moe.experts.0.w1.weight`; not Qwen's or DeepSeek's `shared_experts` / `shared_expert`
_EXPERT = re.compile(r"(?<![a-z_])experts\.")
_ATTENTION = re.compile(r"\.(self_attn|attention|attn)\.")


def summarise(tensors: Iterable[tuple[str, str, tuple[int, ...], int]], num_layers: int,
              hidden: int | None = None) -> tuple[WeightRow, ...]:
    """(name, dtype, shape, stored bytes) per tensor -> rows summed by (component, layer, replicated, dtype,
    castable, routed expert)."""
    sums: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for name, dtype, shape, nbytes in tensors:
        component, layer = component_of(name, num_layers)
        replicated = _replicated(name, shape, hidden)
        castable = dtype in FLOAT_DTYPES and not _AS_STORED.search(name.rsplit(".", 1)[-1])
        cell = sums[(component, layer, replicated, dtype, castable, bool(_EXPERT.search(name)),
                     bool(_ATTENTION.search(name)))]
        cell[0] += 1
        cell[1] += nbytes
    return tuple(WeightRow(*key[:5], tensors=n, bytes=b, expert=key[5], attention=key[6])
                 for key, (n, b) in sorted(sums.items()))


def header_tensors(header: Mapping[str, Any], label: str) -> list[tuple[str, str, tuple[int, ...], int]]:
    """(name, dtype, shape, bytes) of each tensor in one parsed header, checked as safetensors checks it."""
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape = str(info["dtype"]), tuple(int(d) for d in info["shape"])
            start, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{label}: tensor {name[:80]!r} has no valid dtype, shape and data_offsets: the file "
                              "is not a safetensors checkpoint (re-download it)") from None
        if dtype not in DTYPE_BITS or end < start or min(shape, default=0) < 0:
            raise ConfigError(f"{label}: tensor {name[:80]!r} has dtype {dtype[:20]!r} or offsets safetensors does "
                              "not accept: re-download the file")
        elements = 1
        for d in shape:
            elements *= d
        if ceil(elements * DTYPE_BITS[dtype] / 8) != end - start:
            raise ConfigError(f"{label}: tensor {name[:80]!r} is {end - start:,} bytes for shape {list(shape)} in "
                              f"{dtype}: the header is corrupt (re-download the file)")
        out.append((name, dtype, shape, end - start))
    return out


# ---------------------------------------------------------------- a local folder


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one .safetensors file: 8 + N bytes read, the tensors never touched."""
    try:
        with open(path, "rb") as f:
            prefix = f.read(8)
            size = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
            if not 2 <= size <= MAX_HEADER_BYTES:
                raise ConfigError(f"{path} does not start like a safetensors file (header length {size}): "
                                  "re-download it, or pass the config.json alone")
            raw = f.read(size)
    except OSError as exc:
        raise ConfigError(f"cannot read {path} ({exc.strerror or exc}): check the file and its permissions") from None
    if len(raw) != size:
        raise ConfigError(f"{path} is cut short inside its header ({len(raw):,} of {size:,} bytes): re-download it")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ConfigError(f"{path} has a header that is not JSON: re-download it") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path} has a header that is not a JSON object: re-download it")
    return header


def index_shards(index: Path, label: str) -> list[str]:
    """The shard files a model.safetensors.index.json names, sorted, or the ConfigError `label` names."""
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        return sorted({str(v) for v in data["weight_map"].values()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(f"{label} is not a valid safetensors index (no weight_map): re-download it") from None


def shard_names(folder: Path) -> list[str] | None:
    """The files the checkpoint consists of: the index's shards, else every *.safetensors (None: there are none)."""
    index = folder / INDEX_FILE
    if index.is_file():
        names = index_shards(index, str(index))
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise ConfigError(f"{folder} lacks {len(missing)} of the {len(names)} shards its index names (first: "
                              f"{missing[0][:80]}): finish the download, or pass the config.json alone")
        return names
    names = sorted(p.name for p in folder.glob("*.safetensors") if p.is_file())
    return names or None


def read_folder(folder: Path, num_layers: int, hidden: int | None = None) -> CheckpointWeights | None:
    """The headers of a downloaded checkpoint; None when the folder holds no safetensors."""
    names = shard_names(folder)
    if names is None:
        return None
    tensors = []
    for name in names:
        tensors += header_tensors(read_header(folder / name), str(folder / name))
    return CheckpointWeights(source=f"safetensors headers in {folder}", rows=summarise(tensors, num_layers, hidden),
                             files=len(names))


# ---------------------------------------------------------------- bundled records


@dataclass(frozen=True)
class CheckpointTotal:
    """What a bundled record knows when no per-tensor header was found: the checkpoint's total stored bytes
    (an index's metadata.total_size, summed shard sizes, a quoted hf-mem sum) and why the config rule differs."""

    total_bytes: int
    what: str
    source: str
    explained: str = ""


def record_json(weights: CheckpointWeights) -> dict[str, Any]:
    """The bundled record: the header summary, no weights."""
    return {"source": weights.source, "files": weights.files, "stored_bytes": weights.stored_bytes,
            "rows": [[r.component, r.layer, r.replicated, r.dtype, r.castable, r.tensors, r.bytes, r.expert,
                      r.attention] for r in weights.rows]}


def from_record(data: Mapping[str, Any], label: str) -> CheckpointWeights | CheckpointTotal:
    if data.get("kind") in ("index", "file_sizes", "quoted"):
        try:
            return CheckpointTotal(int(data["total_bytes"]), str(data["what"]), str(data["source"]),
                                   str(data.get("explained", "")))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{label} is not a kvplan checkpoint record: restore it from the repository") from None
    try:
        rows = tuple(WeightRow(str(c), int(l), bool(rep), str(d), bool(cast), int(n), int(b),
                               bool(rest[0]) if rest else False, bool(rest[1]) if len(rest) > 1 else False)
                     for c, l, rep, d, cast, n, b, *rest in data["rows"])
        weights = CheckpointWeights(source=str(data["source"]), rows=rows, files=int(data["files"]))
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{label} is not a kvplan checkpoint record: restore it from the repository") from None
    if weights.stored_bytes != data.get("stored_bytes") or any(r.dtype not in DTYPE_BITS for r in rows):
        raise ConfigError(f"{label} does not add up to its stored_bytes: restore it from the repository")
    return weights
