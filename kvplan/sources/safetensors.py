"""A checkpoint's safetensors headers, read from a local folder and summarised; never its tensors.

A `.safetensors` file starts with an 8-byte little-endian length N and N bytes of JSON, one entry per tensor:
`{"model.embed_tokens.weight": {"dtype": "BF16", "shape": [128256, 4096], "data_offsets": [0, 1050673152]}}`.
`data_offsets` are the stored bytes themselves (128,256 x 4,096 x 2 = 1,050,673,152), so the sum over every
file is exactly what the checkpoint holds: packed GPTQ `qweight` int32, fp8 `weight_scale_inv`, mxfp4 `_blocks`
and their scales included, whatever the quantizer. kvplan keeps only a summary (`kvplan.model.checkpoint`'s
`WeightRow`s), which is also what the bundled records in `model_configs/checkpoints/` store. The Hub's headers
(`hub_headers`) are checked and summarised by the same functions.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from math import ceil
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import ConfigError
from ..model.checkpoint import DTYPE_BITS, FLOAT_DTYPES, CheckpointWeights, WeightRow

# safetensors' own cap on a header (safetensors/src/tensor.rs MAX_HEADER_SIZE = 100,000,000)
MAX_HEADER_BYTES = 100_000_000
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

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


# Whole on every TP rank whatever their shape (kvplan.weights.rule keeps the same ones whole): an MoE router
# (vLLM's GateLinear is a ReplicatedLinear; SGLang's gates are ReplicatedLinear / MoEGate) and MLA's q_a / kv_a
# projections (vLLM deepseek_v2.py `fused_qkv_a_proj ... disable_tp=True`; SGLang ReplicatedLinear).
_WHOLE = re.compile(r"\.(gate|router|shared_expert_gate)\.(weight|bias|e_score_correction_bias)$|"
                    r"\.(q_a_proj|kv_a_proj_with_mqa)\.")


def _replicated(name: str, shape: tuple[int, ...], hidden: int | None) -> bool:
    """A tensor every TP rank holds whole: a router or an MLA down-projection (`_WHOLE`), or a norm over the hidden
    size or over one head (Qwen3's q_norm [128]). A norm over all heads (MiniMax-M2's q_norm [48 x 128], k_norm
    [8 x 128]) is sharded with them (vllm 0.19 minimax_m2.py MiniMaxText01RMSNormTP)."""
    if _WHOLE.search(name):
        return True
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
