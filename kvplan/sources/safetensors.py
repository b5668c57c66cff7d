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
import os
import re
import stat
from collections import defaultdict
from math import prod
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import ConfigError, shown
from ..model.checkpoint import DTYPE_BITS, FLOAT_DTYPES, CheckpointWeights, WeightRow, is_usize
from .files import INDEX, is_utf8, read_config_file

# safetensors' own cap on a header (safetensors/src/tensor.rs MAX_HEADER_SIZE = 100,000,000)
MAX_HEADER_BYTES = 100_000_000
# kvplan's caps, each far past any published checkpoint: Kimi-K2 holds about 140,000 tensors, DeepSeek-V3 163 shards,
# a tensor has at most 5 dimensions, and the longest names are about 120 characters
MAX_TENSORS = 2_000_000
MAX_SHARDS = 10_000
MAX_RANK = 16
MAX_NAME_CHARS = 1_000
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
# names are at most MAX_NAME_CHARS long, so int() of a layer number never meets Python's 4,300-digit limit
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
# projections (vLLM deepseek_v2.py `fused_qkv_a_proj ... disable_tp=True`; SGLang ReplicatedLinear) and their
# RMSNorms (vLLM 0.33 deepseek_v2.py:1082 `self.q_a_layernorm = RMSNorm(self.q_lora_rank, ...)`: DeepSeek-V3's
# q_a_layernorm [1,536] is neither the hidden size nor a head's, so the norm rule below left it split).
_WHOLE = re.compile(r"\.(gate|router|shared_expert_gate)\.(weight|bias|e_score_correction_bias)$|"
                    r"\.(q_a_proj|kv_a_proj_with_mqa|q_a_layernorm|kv_a_layernorm)\.")


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
# whole KV heads, one a rank past TP = KV heads (vLLM / SGLang QKVParallelLinear: num_kv_head_replicas)
_KV = re.compile(r"\.(k_proj|v_proj)\.")


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
                     bool(_ATTENTION.search(name)), bool(_KV.search(name)))]
        cell[0] += 1
        cell[1] += nbytes
    return tuple(WeightRow(*key[:5], tensors=n, bytes=b, expert=key[5], attention=key[6], kv=key[7])
                 for key, (n, b) in sorted(sums.items()))


def header_tensors(header: Mapping[str, Any], label: str,
                   data_bytes: int) -> list[tuple[str, str, tuple[int, ...], int]]:
    """(name, dtype, shape, bytes) of each tensor in one parsed header, checked as safetensors itself checks it
    (safetensors/src/tensor.rs `Metadata::validate`): a known dtype, a shape of non-negative integers whose size
    is the tensor's bytes, offsets that start at 0 and follow each other without a gap or an overlap to the
    `data_bytes` the file holds past its header. A 136-byte file claimed 1 PiB, 1,000 overlapping tensors 8 TiB,
    and int() made [1.9, 1.9] a [1, 1] and "99" a [9, 9]."""
    out, spans = [], []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if len(out) >= MAX_TENSORS:
            raise ConfigError(f"{label} holds more than {MAX_TENSORS:,} tensors, more than any checkpoint: "
                              "re-download it, or pass the config.json alone")
        dtype, shape, (start, end) = _tensor_info(name, info, label)
        # integers throughout: a shape whose product passes 1e308 raised OverflowError from a float division
        elements = prod(shape)
        bits = elements * DTYPE_BITS[dtype]
        if bits % 8:
            # safetensors 0.8.0 refuses it on opening ("the slice does not end up at a byte boundary"): 3 F4
            # elements are 12 bits, a byte and a half
            raise ConfigError(f"{label}: tensor {shown(name)} has {elements:,} elements of {dtype}, {bits:,} bits, "
                              "which do not end at a byte boundary: the header is corrupt (re-download the file)")
        if bits // 8 != end - start:
            raise ConfigError(f"{label}: tensor {shown(name)} is {end - start:,} bytes for shape {shown(list(shape))} "
                              f"in {dtype}: the header is corrupt (re-download the file)")
        out.append((name, dtype, shape, end - start))
        spans.append((start, end, name))
    at = 0
    for start, end, name in sorted(spans):
        if start != at:
            raise ConfigError(f"{label}: tensor {shown(name)} starts at byte {start:,} where the tensors before it end "
                              f"at {at:,} (safetensors keeps them contiguous): the header is corrupt (re-download the "
                              "file)")
        at = end
    if at != data_bytes:
        raise ConfigError(f"{label}: its tensors end at byte {at:,} of the {data_bytes:,} the file holds past its "
                          "header: the file is cut short or not the one its header describes (re-download it)")
    return out


def _tensor_info(name: Any, info: Any, label: str) -> tuple[str, tuple[int, ...], tuple[int, int]]:
    """A header entry's dtype, shape and data_offsets, each exactly what safetensors accepts."""
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
        raise ConfigError(f"{label} names a tensor {shown(name)}, longer than {MAX_NAME_CHARS:,} characters: the "
                          "file is not a checkpoint (re-download it)")
    if not isinstance(info, Mapping):
        info = {}
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise ConfigError(f"{label}: tensor {shown(name)} has dtype {shown(dtype)}, which safetensors does not know: "
                          "re-download the file")
    if not isinstance(shape, list) or len(shape) > MAX_RANK or not all(is_usize(d) for d in shape):
        raise ConfigError(f"{label}: tensor {shown(name)} has shape {shown(shape)}, not a list of at most {MAX_RANK} "
                          "whole numbers from 0 to 2**64 - 1: the header is corrupt (re-download the file)")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(is_usize(o) for o in offsets) \
            or offsets[0] > offsets[1]:
        raise ConfigError(f"{label}: tensor {shown(name)} has data_offsets {shown(offsets)}, not [start, end] with "
                          "0 <= start <= end: the header is corrupt (re-download the file)")
    return dtype, tuple(shape), (offsets[0], offsets[1])


def read_header(path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header of one .safetensors file and the bytes it holds past it: 8 + N bytes read, the tensors never
    touched. A file that is not safetensors (a shard name pointing at another file) is refused without a byte of
    it shown."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ConfigError(f"cannot read {path} ({exc.strerror or exc}): check the file and its permissions") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path} is not a regular file: pass the model's folder as downloaded")
        try:
            prefix = f.read(8)
            size = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
            if not 2 <= size <= min(MAX_HEADER_BYTES, info.st_size - 8):
                raise ConfigError(f"{path} does not start like a safetensors file (8 bytes of header length, then "
                                  "that much JSON): re-download it, or pass the config.json alone")
            raw = f.read(size)
        except OSError as exc:
            raise ConfigError(f"cannot read {path} ({exc.strerror or exc}): check the file") from None
    if len(raw) != size:
        raise ConfigError(f"{path} is cut short inside its header: re-download it")
    return parse_header(raw, str(path)), info.st_size - 8 - size


def parse_header(raw: bytes, label: str) -> dict[str, Any]:
    """A header's JSON, as an object."""
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ConfigError(f"{label} has a header that is not JSON: re-download it") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{label} has a header that is not a JSON object: re-download it")
    return header


def index_shards(index: Mapping[str, Any], label: str) -> list[str]:
    """The shard files a parsed model.safetensors.index.json names, sorted and each checked by `shard_name`."""
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, Mapping) or not weight_map or len(weight_map) > MAX_TENSORS:
        raise ConfigError(f"{label} is not a valid safetensors index (no weight_map of tensor names to shards): "
                          "re-download it, or pass the config.json alone")
    names = {shard_name(v, label) for v in weight_map.values()}
    if len(names) > MAX_SHARDS:
        raise ConfigError(f"{label} names {len(names):,} shards, more than any checkpoint ({MAX_SHARDS:,}): "
                          "re-download it, or pass the config.json alone")
    return sorted(names)


def shard_name(name: Any, label: str) -> str:
    """A shard an index names: a relative path to a .safetensors file that stays where the index is (no '..', no
    absolute path, no drive, each part a name the file system takes). `../x.safetensors`, /etc/hostname and
    /proc/self/environ were opened; a 256-byte name raised OSError: File name too long."""
    parts = name.split("/") if isinstance(name, str) else [""]
    if not isinstance(name, str) or not name.endswith(".safetensors") or not is_utf8(name) \
            or any(p in ("", ".", "..") or len(p.encode("utf-8")) > 255 for p in parts) \
            or any(c in name for c in "\\:\x00") or len(name) > MAX_NAME_CHARS:
        raise ConfigError(f"{label} names the shard {shown(name)}, which is not a .safetensors file inside the model "
                          "folder: re-download the index, or pass the config.json alone")
    return name


def inside(path: Path, root: Path, label: str) -> Path:
    """`path` once its links are followed, refused when that leaves `root`: a shard is the model's own file."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        real = None
    if real is None or not real.is_relative_to(root):
        raise ConfigError(f"{label} leads outside the model folder: kvplan reads only the model's own files "
                          "(copy the shard into the folder, or pass the config.json alone)")
    return real


def folder_root(folder: Path) -> Path:
    """Where a folder's shards may really be: the folder itself, or for a Hub cache snapshot
    (`models--org--name/snapshots/<commit>/`, whose files link to `../../blobs/<hash>`) the repository's cache."""
    real = folder.resolve()
    return real.parent.parent if real.parent.name == "snapshots" else real


_NUMBERED = re.compile(r"-(\d{1,6})-of-(\d{1,6})\.safetensors$")


def shard_names(folder: Path) -> list[str] | None:
    """The files the checkpoint consists of, in transformers' order (5.24 modeling_utils.py
    `_get_resolved_checkpoint_files`: model.safetensors, then the index; the Hub reader, hub_headers._from_hub, asks
    the same): model.safetensors alone, else the index's shards, else every *.safetensors (None: there are none).
    model.safetensors alone: Mistral's repos keep consolidated.safetensors beside it, the same weights under
    Mistral's names, which a glob would count twice. Each is a regular file inside the folder; numbered shards
    without an index must all be there, counted by their numbers (a second family's shard 1 of 2 is not shard 2)."""
    index = folder / INDEX_FILE
    root = folder_root(folder)
    single = folder / SINGLE_FILE
    # is_file first: a dangling link named model.safetensors (to a path outside) holds no weights and is passed
    # over for the index, where inside() alone would refuse the folder
    if _is_file(single) and _is_file(inside(single, root, str(single))):
        return [SINGLE_FILE]
    if index.is_file():
        names = index_shards(read_config_file(inside(index, root, str(index)), INDEX), str(index))
        missing = [n for n in names if not _is_file(inside(folder / n, root, f"{index}'s shard {shown(n)}"))]
        if missing:
            raise ConfigError(f"{folder} lacks {len(missing)} of the {len(names)} shards its index names (first: "
                              f"{shown(missing[0])}): finish the download, or pass the config.json alone")
        return names
    names = sorted(p.name for p in folder.glob("*.safetensors") if _is_file(inside(p, root, str(p))))
    found = [m for n in names if (m := _NUMBERED.search(n))]
    totals = {int(m.group(2)) for m in found}
    held = {int(m.group(1)) for m in found}
    if len(totals) == 1 and (total := totals.pop()) > len(held):
        raise ConfigError(f"{folder} holds {len(held)} of the {total} shards their names count and no {INDEX_FILE}: "
                          "finish the download, or pass the config.json alone")
    return names or None


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def complete(weights: CheckpointWeights, num_layers: int, where: str) -> CheckpointWeights:
    """The summary, once it holds tensors of every layer the config has: a checkpoint with no tensors, or one
    shard of several, was priced as the whole model (weights 0 B, FITS)."""
    if not weights.rows:
        raise ConfigError(f"{where} holds no tensors: the checkpoint is empty or cut short (finish the download, or "
                          "pass the config.json alone)")
    layers = {r.layer for r in weights.rows if r.component == "language_model" and r.layer >= 0}
    if layers and len(layers) < num_layers:
        first = min(set(range(num_layers)) - layers)
        raise ConfigError(f"{where} holds tensors of {len(layers):,} of the model's {num_layers:,} layers (none of "
                          f"layer {first}): the checkpoint is incomplete (finish the download, or pass the config.json "
                          "alone)")
    return weights


def read_folder(folder: Path, num_layers: int, hidden: int | None = None) -> CheckpointWeights | None:
    """The headers of a downloaded checkpoint; None when the folder holds no safetensors."""
    names = shard_names(folder)
    if names is None:
        return None
    tensors = []
    for name in names:
        header, data_bytes = read_header(folder / name)
        tensors += header_tensors(header, str(folder / name), data_bytes)
        if len(tensors) > MAX_TENSORS:
            raise ConfigError(f"{folder} holds more than {MAX_TENSORS:,} tensors, more than any checkpoint: pass the "
                              "config.json alone")
    found = CheckpointWeights(source=f"safetensors headers in {folder}", rows=summarise(tensors, num_layers, hidden),
                              files=len(names))
    return complete(found, num_layers, f"the checkpoint in {folder}")
