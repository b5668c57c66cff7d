"""Tests that kill the mutants tools/mutation.py found surviving in the checkpoint and config readers (#26 item 5).

Headers here are written by hand in the safetensors layout (8-byte little-endian length N, N bytes of JSON, then
the data; safetensors/src/tensor.rs), with every figure's arithmetic beside it. Refusals are the product's
one-line errors, so they are pinned word for word."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from kvplan.errors import ConfigError, shown
from kvplan.model.checkpoint import CheckpointWeights, WeightRow
from kvplan.sources import safetensors as st


def _exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


def _write(path: Path, header: dict, data_bytes: int | None = None) -> Path:
    raw = json.dumps(header).encode()
    if data_bytes is None:
        data_bytes = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * data_bytes)
    return path


def _bf16(shape, start):
    n = 2
    for d in shape:
        n *= d
    return {"dtype": "BF16", "shape": list(shape), "data_offsets": [start, start + n]}


# ----------------------------------------------------------------------------- tensor names -> components

@pytest.mark.parametrize("name, num_layers, expected", [
    ("model.layers.3.mlp.up_proj.weight", 4, ("language_model", 3)),
    ("model.layers.4.mlp.up_proj.weight", 4, ("mtp", -1)),          # past the config's 4 layers: DeepSeek's MTP
    ("model.layers.4.mlp.up_proj.weight", 0, ("language_model", 4)),  # layer count unknown: keep the number
    ("model.norm.weight", 4, ("language_model", -1)),
    ("mtp.layers.0.eh_proj.weight", 4, ("mtp", -1)),
    ("lm_head.weight", 4, ("lm_head", -1)),
    ("output.weight", 4, ("lm_head", -1)),
    ("model.embed_tokens.weight", 4, ("embeddings", -1)),
    ("vision_tower.blocks.0.attn.qkv.weight", 4, ("vision", -1)),
    ("multi_modal_projector.linear_1.weight", 4, ("projector", -1)),
    ("audio_tower.layers.0.fc1.weight", 4, ("audio", -1)),
])
def test_component_of(name, num_layers, expected):
    assert st.component_of(name, num_layers) == expected


@pytest.mark.parametrize("name, shape, hidden, expected", [
    ("model.layers.0.mlp.gate.weight", (128, 2048), 2048, True),            # an MoE router: whole on every rank
    ("model.layers.0.self_attn.q_a_proj.weight", (1536, 7168), 7168, True),  # MLA down-projection
    # MLA's q_a_layernorm [1,536]: neither the hidden size nor one head's, an RMSNorm whole on every rank (vLLM
    # 0.33 deepseek_v2.py:1082)
    ("model.layers.0.self_attn.q_a_layernorm.weight", (1536,), 7168, True),
    ("model.layers.0.input_layernorm.weight", (2048,), 2048, True),          # a norm over the hidden size
    ("model.layers.0.self_attn.q_norm.weight", (128,), 2048, True),          # Qwen3's q_norm over one head
    ("model.layers.0.self_attn.q_norm.weight", (512,), 2048, True),          # 512: the one-head bound, inclusive
    ("model.layers.0.self_attn.q_norm.weight", (513,), 2048, False),         # past it: sharded with the heads
    ("model.layers.0.self_attn.q_norm.weight", (6144,), 3072, False),        # MiniMax-M2's 48 x 128: sharded
    ("model.layers.0.self_attn.q_norm.weight", (6144,), None, True),         # hidden unknown: a norm is whole
    ("model.layers.0.input_layernorm.weight", (), 2048, True),               # a scalar norm (size 1)
    ("model.layers.0.input_layernorm.weight", (2, 2048), 2048, False),       # 2-D: not a norm vector
    ("model.layers.0.mlp.up_proj.weight", (8192,), 2048, False),             # not a norm
])
def test_replicated(name, shape, hidden, expected):
    assert st._replicated(name, shape, hidden) is expected


def test_summarise_sums_by_kind():
    # two BF16 layer-0 projections of 4 x 4 (32 B each), one F32 scale (16 B, kept as stored), one routed expert
    rows = st.summarise([
        ("model.layers.0.self_attn.q_proj.weight", "BF16", (4, 4), 32),
        ("model.layers.0.self_attn.k_proj.weight", "BF16", (4, 4), 32),
        ("model.layers.0.self_attn.k_proj.weight_scale", "F32", (4,), 16),
        ("model.layers.0.mlp.experts.0.up_proj.weight", "BF16", (4, 4), 32),
    ], num_layers=1, hidden=4)
    assert rows == (   # sorted by their key: expert False before True, then k_proj's (kv) after q_proj's
        WeightRow("language_model", 0, False, "BF16", True, tensors=1, bytes=32, expert=False, attention=True),
        WeightRow("language_model", 0, False, "BF16", True, tensors=1, bytes=32, expert=False, attention=True,
                  kv=True),
        WeightRow("language_model", 0, False, "BF16", True, tensors=1, bytes=32, expert=True, attention=False),
        WeightRow("language_model", 0, False, "F32", False, tensors=1, bytes=16, expert=False, attention=True,
                  kv=True),
    )


# ----------------------------------------------------------------------------- header checks, word for word

def test_header_tensors_reads_contiguous_tensors():
    header = {"__metadata__": {"format": "pt"}, "a": _bf16((2, 3), 0), "b": _bf16((5,), 12)}   # 12 B then 10 B
    assert st.header_tensors(header, "f", 22) == [("a", "BF16", (2, 3), 12), ("b", "BF16", (5,), 10)]
    # F4: 4 bits, 4 elements are 16 bits, 2 bytes
    assert st.header_tensors({"x": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}}, "f", 2) == \
        [("x", "F4", (4,), 2)]


def test_a_sub_byte_tensor_that_ends_inside_a_byte_is_refused():
    """3 F4 elements are 12 bits: safetensors 0.8.0 refuses the file on opening ("The slice is slicing for subbytes
    dtypes, and the slice does not end up at a byte boundary, this is invalid.", checked with safe_open); kvplan
    rounded it up to 2 bytes and read on."""
    with pytest.raises(ConfigError, match=re.escape(
            "f: tensor 'x' has 3 elements of F4, 12 bits, which do not end at a byte boundary: the header is corrupt "
            "(re-download the file)")):
        st.header_tensors({"x": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, "f", 2)


_CORRUPT = "the header is corrupt (re-download the file)"


@pytest.mark.parametrize("header, data, message", [
    ({"a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 10]}}, 10,
     f"f: tensor 'a' is 10 bytes for shape [2, 3] in BF16: {_CORRUPT}"),
    ({"a": _bf16((2,), 4)}, 8,
     (f"f: tensor 'a' starts at byte 4 where the tensors before it end at 0 (safetensors keeps them contiguous): "
     f"{_CORRUPT}")),
    ({"a": _bf16((2,), 0)}, 8,
     ("f: its tensors end at byte 4 of the 8 the file holds past its header: the file is cut short or not the one "
     "its header describes (re-download it)")),
    ({"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, 1,
     "f: tensor 'a' has dtype 'Q7', which safetensors does not know: re-download the file"),
    ({"a": "not an entry"}, 0, "f: tensor 'a' has dtype None, which safetensors does not know: re-download the file"),
    ({"a": {"dtype": "BF16", "shape": [1.5], "data_offsets": [0, 2]}}, 2,
     f"f: tensor 'a' has shape [1.5], not a list of at most 16 whole numbers from 0 to 2**64 - 1: {_CORRUPT}"),
    ({"a": {"dtype": "BF16", "shape": [1] * 17, "data_offsets": [0, 2]}}, 2,
     (f"f: tensor 'a' has shape {shown([1] * 17)}, not a list of at most 16 whole numbers from 0 to 2**64 - 1: "
     f"{_CORRUPT}")),
    ({"a": {"dtype": "BF16", "shape": [1], "data_offsets": [2, 0]}}, 2,
     f"f: tensor 'a' has data_offsets [2, 0], not [start, end] with 0 <= start <= end: {_CORRUPT}"),
    ({"a": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2, 4]}}, 2,
     f"f: tensor 'a' has data_offsets [0, 2, 4], not [start, end] with 0 <= start <= end: {_CORRUPT}"),
    ({"a": {"dtype": "BF16", "shape": [1], "data_offsets": [0, "2"]}}, 2,
     f"f: tensor 'a' has data_offsets [0, '2'], not [start, end] with 0 <= start <= end: {_CORRUPT}"),
    # hostile inputs
    ({"n" * 1001: _bf16((1,), 0)}, 2,
     (f"f names a tensor {shown('n' * 1001)}, longer than 1,000 characters: the file is not a checkpoint "
     "(re-download it)")),
])
def test_header_refusals_word_for_word(header, data, message):
    with pytest.raises(ConfigError, match=_exact(message)):
        st.header_tensors(header, "f", data)


def test_a_name_of_exactly_1000_characters_and_a_16_dimension_shape_are_read():
    name = "n" * 1000
    assert st.header_tensors({name: {"dtype": "BF16", "shape": [1] * 16, "data_offsets": [0, 2]}}, "f", 2) == \
        [(name, "BF16", (1,) * 16, 2)]
    # start == end: an empty tensor is a valid [start, end]
    assert st.header_tensors({"e": {"dtype": "BF16", "shape": [0], "data_offsets": [0, 0]}}, "f", 0) == \
        [("e", "BF16", (0,), 0)]


def test_more_tensors_than_the_cap_are_refused(monkeypatch):
    monkeypatch.setattr(st, "MAX_TENSORS", 2)
    assert len(st.header_tensors({"a": _bf16((1,), 0), "b": _bf16((1,), 2)}, "f", 4)) == 2   # 2 is allowed
    with pytest.raises(ConfigError, match=_exact("f holds more than 2 tensors, more than any checkpoint: "
                                                 "re-download it, or pass the config.json alone")):
        st.header_tensors({"a": _bf16((1,), 0), "b": _bf16((1,), 2), "c": _bf16((1,), 4)}, "f", 6)


# ----------------------------------------------------------------------------- files

def test_read_header_returns_the_json_and_the_data_bytes(tmp_path):
    path = _write(tmp_path / "m.safetensors", {"a": _bf16((3,), 0)}, data_bytes=6)
    header, data = st.read_header(path)
    assert header == {"a": _bf16((3,), 0)} and data == 6


def test_a_two_byte_header_is_the_smallest_read(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes((2).to_bytes(8, "little") + b"{}")       # N = 2: "{}", no tensors, 0 data bytes
    assert st.read_header(path) == ({}, 0)
    path.write_bytes((4).to_bytes(8, "little") + b"{}  ")     # N = 4 = file size - 8: the header fills the file
    assert st.read_header(path) == ({}, 0)


_NOT_ST = ("does not start like a safetensors file (8 bytes of header length, then that much JSON): re-download "
           "it, or pass the config.json alone")


@pytest.mark.parametrize("raw, message", [
    ((1).to_bytes(8, "little") + b"{", _NOT_ST),
    (b"\x05\0\0", _NOT_ST),
    ((9).to_bytes(8, "little") + b"{}", _NOT_ST),
    ((2).to_bytes(8, "little") + b"\xff\xfe", "has a header that is not JSON: re-download it"),
    ((2).to_bytes(8, "little") + b"[]", "has a header that is not a JSON object: re-download it"),
])
def test_read_header_refusals_word_for_word(tmp_path, raw, message):
    path = tmp_path / "m.safetensors"
    path.write_bytes(raw)
    with pytest.raises(ConfigError, match=_exact(f"{path} {message}")):
        st.read_header(path)


def test_an_unreadable_path_says_so(tmp_path):
    path = tmp_path / "absent.safetensors"
    with pytest.raises(ConfigError, match=_exact(f"cannot read {path} (No such file or directory): check the file "
                                                 "and its permissions")):
        st.read_header(path)
    fifo = tmp_path / "pipe.safetensors"          # a named pipe: opened without blocking, refused by its fstat
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=_exact(f"{fifo} is not a regular file: pass the model's folder as "
                                                 "downloaded")):
        st.read_header(fifo)


# ----------------------------------------------------------------------------- indexes and shard names

def test_index_shards_sorted_and_deduplicated():
    index = {"weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                            "c": "model-00001-of-00002.safetensors"}}
    assert st.index_shards(index, "i") == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


@pytest.mark.parametrize("index", [{}, {"weight_map": {}}, {"weight_map": ["a"]}])
def test_an_index_without_a_weight_map_is_refused(index):
    with pytest.raises(ConfigError, match=_exact("i is not a valid safetensors index (no weight_map of tensor names "
                                                 "to shards): re-download it, or pass the config.json alone")):
        st.index_shards(index, "i")


def test_an_index_over_the_caps_is_refused(monkeypatch):
    monkeypatch.setattr(st, "MAX_SHARDS", 1)
    two = {"weight_map": {"a": "x.safetensors", "b": "y.safetensors"}}
    with pytest.raises(ConfigError, match=_exact("i names 2 shards, more than any checkpoint (1): re-download it, "
                                                 "or pass the config.json alone")):
        st.index_shards(two, "i")
    assert st.index_shards({"weight_map": {"a": "x.safetensors"}}, "i") == ["x.safetensors"]   # 1 is allowed
    monkeypatch.setattr(st, "MAX_SHARDS", 10)
    monkeypatch.setattr(st, "MAX_TENSORS", 2)
    assert st.index_shards(two, "i") == ["x.safetensors", "y.safetensors"]    # as many tensors as the cap: read
    monkeypatch.setattr(st, "MAX_TENSORS", 1)
    with pytest.raises(ConfigError, match="^i is not a valid safetensors index"):
        st.index_shards(two, "i")


@pytest.mark.parametrize("name", ["../x.safetensors", "/etc/x.safetensors", "a//x.safetensors", "./x.safetensors",
                                  "x.bin", "c:x.safetensors", "a\\x.safetensors", "x\x00.safetensors",
                                  "n" * 256 + ".safetensors", 7, "\ud800.safetensors"])
def test_shard_names_that_leave_the_folder_are_refused(name):
    with pytest.raises(ConfigError, match=_exact(f"i names the shard {shown(name)}, which is not a .safetensors file "
                                                 "inside the model folder: re-download the index, or pass the "
                                                 "config.json alone")):
        st.shard_name(name, "i")


def test_a_shard_name_of_255_bytes_and_a_subfolder_are_taken():
    long = "n" * 243 + ".safetensors"                          # 243 + 12 = 255 bytes, the file-system limit
    assert st.shard_name(long, "i") == long
    assert st.shard_name("sub/x.safetensors", "i") == "sub/x.safetensors"
    assert st.shard_name("model-XX.safetensors", "i") == "model-XX.safetensors"   # X is no backslash, colon or NUL
    with pytest.raises(ConfigError, match="^i names the shard"):
        st.shard_name("n" * 244 + ".safetensors", "i")          # 256 bytes: one past the limit
    # 1,000 characters in all (3 folders of 250 + 3 slashes + 235 + 12) is the cap; 1,001 is past it
    name = ("n" * 250 + "/") * 3 + "n" * 235 + ".safetensors"
    assert len(name) == 1000 and st.shard_name(name, "i") == name
    with pytest.raises(ConfigError, match="^i names the shard"):
        st.shard_name(("n" * 250 + "/") * 3 + "n" * 236 + ".safetensors", "i")


def test_a_link_out_of_the_folder_is_refused(tmp_path):
    outside = _write(tmp_path / "elsewhere.safetensors", {})
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(outside)
    with pytest.raises(ConfigError, match=_exact(f"{folder / 'model.safetensors'} leads outside the model folder: "
                                                 "kvplan reads only the model's own files (copy the shard into the "
                                                 "folder, or pass the config.json alone)")):
        st.shard_names(folder)


def test_a_hub_snapshot_may_link_into_its_blobs(tmp_path):
    blobs = tmp_path / "models--org--name" / "blobs"
    snap = tmp_path / "models--org--name" / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    _write(blobs / "deadbeef", {"a": _bf16((1,), 0)})
    (snap / "model.safetensors").symlink_to(blobs / "deadbeef")
    assert st.folder_root(snap) == (tmp_path / "models--org--name").resolve()
    assert st.shard_names(snap) == ["model.safetensors"]
    assert st.folder_root(blobs) == blobs.resolve()


def test_numbered_shards_without_an_index_must_all_be_there(tmp_path):
    _write(tmp_path / "model-00001-of-00003.safetensors", {})
    _write(tmp_path / "model-00002-of-00003.safetensors", {})
    with pytest.raises(ConfigError, match=_exact(f"{tmp_path} holds 2 of the 3 shards their names count and no "
                                                 "model.safetensors.index.json: finish the download, or pass the "
                                                 "config.json alone")):
        st.shard_names(tmp_path)
    _write(tmp_path / "model-00003-of-00003.safetensors", {})
    assert st.shard_names(tmp_path) == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]


def test_an_index_naming_missing_shards_is_refused(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "a.safetensors", "b": "b.safetensors", "c": "c.safetensors"}}))
    _write(tmp_path / "b.safetensors", {})
    with pytest.raises(ConfigError, match=_exact(f"{tmp_path} lacks 2 of the 3 shards its index names (first: "
                                                 "'a.safetensors'): finish the download, or pass the config.json "
                                                 "alone")):
        st.shard_names(tmp_path)


def test_a_folder_without_safetensors_has_no_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert st.shard_names(tmp_path) is None and st.read_folder(tmp_path, 2) is None


# ----------------------------------------------------------------------------- whole folders

def _layer(i, start):
    return {f"model.layers.{i}.mlp.up_proj.weight": _bf16((2, 2), start)}   # 2 x 2 x 2 B = 8 B each


def test_read_folder_sums_every_shard(tmp_path):
    _write(tmp_path / "model-00001-of-00002.safetensors", {**_layer(0, 0), "model.embed_tokens.weight": _bf16((4,), 8)})
    _write(tmp_path / "model-00002-of-00002.safetensors", _layer(1, 0))
    w = st.read_folder(tmp_path, 2, hidden=2)
    assert w.files == 2 and w.stored_bytes == 8 + 8 + 8 and w.tensors == 3      # two layers of 8 B, 4 x 2 B embed
    assert w.source == f"safetensors headers in {tmp_path}"
    assert w.by_component() == {"language_model": 16, "embeddings": 8}


def test_a_checkpoint_missing_layers_is_refused(tmp_path):
    _write(tmp_path / "model.safetensors", {**_layer(0, 0), **_layer(2, 8)})
    with pytest.raises(ConfigError, match=_exact(f"the checkpoint in {tmp_path} holds tensors of 2 of the model's 4 "
                                                 "layers (none of layer 1): the checkpoint is incomplete (finish the "
                                                 "download, or pass the config.json alone)")):
        st.read_folder(tmp_path, 4)


def test_an_empty_checkpoint_is_refused(tmp_path):
    _write(tmp_path / "model.safetensors", {})
    with pytest.raises(ConfigError, match=_exact(f"the checkpoint in {tmp_path} holds no tensors: the checkpoint is "
                                                 "empty or cut short (finish the download, or pass the config.json "
                                                 "alone)")):
        st.read_folder(tmp_path, 2)


def test_complete_keeps_a_checkpoint_whose_layers_are_all_there():
    rows = tuple(WeightRow("language_model", i, False, "BF16", True, 1, 8) for i in range(3))
    w = CheckpointWeights("s", rows, 1)
    assert st.complete(w, 3, "w") is w
    # a checkpoint of non-layer tensors alone (the head) is not judged by its layers
    head = CheckpointWeights("s", (WeightRow("lm_head", -1, False, "BF16", True, 1, 8),), 1)
    assert st.complete(head, 3, "w") is head


def test_more_tensors_than_the_cap_over_the_shards_are_refused(tmp_path, monkeypatch):
    _write(tmp_path / "a.safetensors", _layer(0, 0))
    _write(tmp_path / "b.safetensors", _layer(1, 0))
    monkeypatch.setattr(st, "MAX_TENSORS", 1)
    with pytest.raises(ConfigError, match=_exact(f"{tmp_path} holds more than 1 tensors, more than any checkpoint: "
                                                 "pass the config.json alone")):
        st.read_folder(tmp_path, 2)


# ----------------------------------------------------------------------------- kvplan.model.checkpoint

from kvplan.dtypes import BFLOAT16, FLOAT32


def _row(component, layer, nbytes, *, dtype="BF16", castable=True, replicated=False, expert=False, attention=False):
    return WeightRow(component, layer, replicated, dtype, castable, tensors=1, bytes=nbytes, expert=expert,
                     attention=attention)


# A two-layer checkpoint in bf16, by hand: layer 0 holds attention (400 B), one routed expert (800 B) and a norm
# (10 B, whole on every rank); layer 1 a 602-byte MLP; embeddings 1,002 B, a vision tower 300 B, the final norm
# 10 B, the head 1,000 B, an MTP block 5,000 B (not loaded without speculative decoding).
ROWS = (_row("language_model", 0, 400, attention=True), _row("language_model", 0, 800, expert=True),
        _row("language_model", 0, 10, replicated=True), _row("language_model", 1, 602),
        _row("embeddings", -1, 1002), _row("vision", -1, 300), _row("language_model", -1, 10, replicated=True),
        _row("lm_head", -1, 1000), _row("mtp", -1, 5000))


def _ckpt(rows=ROWS):
    return CheckpointWeights("hand", rows, 1)


def test_stage_bytes_by_hand():
    w = _ckpt()
    # TP 2, experts over 4 ranks, attention over 1 (SGLang's DP attention): layer 0 = 400 + 800 / 4 + 10 = 610,
    # layer 1 = 602 / 2 = 301, first = 1,002 / 2 + 300 / 2 = 651, last = 10, head = 1,000 / 2 = 500
    kw = {"tp": 2, "tied": False, "moe_ranks": 4, "attn_ranks": 1}
    assert w.stage_bytes(BFLOAT16, layers=range(2), first=True, last=True, **kw) == 610 + 301 + 651 + 10 + 500
    assert w.stage_bytes(BFLOAT16, layers=range(1), first=True, last=False, **kw) == 610 + 651
    assert w.stage_bytes(BFLOAT16, layers=range(1, 2), first=False, last=True, **kw) == 301 + 10 + 500
    assert w.stage_bytes(BFLOAT16, layers=range(1), first=True, last=False, head_everywhere=True, **kw) == \
        610 + 651 + 500
    # SGLang's Qwen3.5 builds its vision tower on every stage: the later stage takes 300 / 2 = 150 of it, the first
    # stage's 651 unchanged (the tower is in it already)
    assert w.stage_bytes(BFLOAT16, layers=range(1, 2), first=False, last=True, towers_everywhere=True, **kw) == \
        301 + 10 + 500 + 150
    assert w.stage_bytes(BFLOAT16, layers=range(1), first=True, last=False, towers_everywhere=True, **kw) == 610 + 651
    assert w.stage_bytes(BFLOAT16, layers=range(9), first=False, last=False, **kw) == 610 + 301   # past the end
    assert w.stage_bytes(BFLOAT16, layers=range(1, 5, 2), first=False, last=False, **kw) == 301     # 3 is past it
    assert w.stage_bytes(BFLOAT16, layers=range(0, 2, 2), first=False, last=False, **kw) == 610
    # MTP loaded (speculative decoding) sits with the final norm on the last stage: + ceil(5,000 / 2)
    assert w.stage_bytes(BFLOAT16, layers=range(1, 2), first=False, last=True, skip=frozenset(), **kw) == \
        301 + 10 + 500 + 2500
    # defaults: experts and attention over the TP ranks; TP 4: 400 / 4 + 800 / 4 + 10, layer 1 ceil(602 / 4) = 151
    assert w.stage_bytes(BFLOAT16, 4, range(2), first=False, last=False, tied=False) == 100 + 200 + 10 + 151


def test_a_tied_head_is_copied_to_the_last_stage_once_the_checkpoint_has_none():
    untied = _ckpt(tuple(r for r in ROWS if r.component != "lm_head"))
    kw = {"tp": 2, "tied": True}
    # the last of two stages materialises the embeddings again as its head: 1,002 / 2 = 501
    assert untied.stage_bytes(BFLOAT16, layers=range(1, 2), first=False, last=True, **kw) == 301 + 10 + 501
    # one stage (first and last) shares the embeddings: nothing copied
    assert untied.stage_bytes(BFLOAT16, layers=range(2), first=True, last=True, **kw) == 610 + 301 + 651 + 10
    assert untied.stage_bytes(BFLOAT16, layers=range(1), first=True, last=False, **kw) == 610 + 651
    # a checkpoint that stores its head does not get a second one
    assert _ckpt().stage_bytes(BFLOAT16, layers=range(1, 2), first=False, last=True, **kw) == 301 + 10 + 500


def test_resident_bytes_cast_floats_and_keep_the_rest():
    assert _row("lm_head", -1, 1000).resident(FLOAT32) == 2000          # 500 bf16 elements x 4 B
    assert _row("lm_head", -1, 1000, dtype="F32").resident(BFLOAT16) == 500   # 250 elements x 2 B
    assert _row("lm_head", -1, 1000, dtype="F32").resident(BFLOAT16, keep_f32=True) == 1000
    assert _row("lm_head", -1, 1000, castable=False).resident(FLOAT32) == 1000    # scales stay as stored
    assert _row("lm_head", -1, 3, dtype="F16").resident(FLOAT32) == 4   # 3 B of F16 hold 1 whole element: 4 B
    w = _ckpt()
    assert w.stored_bytes == 400 + 800 + 10 + 602 + 1002 + 300 + 10 + 1000 + 5000 and w.tensors == 9
    assert w.resident_bytes(BFLOAT16) == w.stored_bytes - 5000
    assert w.resident_bytes(BFLOAT16, skip=frozenset()) == w.stored_bytes
    # sums of the synthetic ROWS sizes (inputs written above)
    assert w.resident_bytes(FLOAT32) == 2 * (w.stored_bytes - 5000)


def test_float32_among_16_bit_floats_is_kept():
    # MiniMax-M2 keeps its router in float32 beside bf16 weights; an all-float32 copy is served in the model dtype
    mixed = _ckpt((_row("language_model", 0, 1000), _row("language_model", 0, 400, dtype="F32")))
    assert mixed.keeps_f32 and mixed.resident_bytes(BFLOAT16) == 1000 + 400
    f16 = _ckpt((_row("language_model", 0, 1000, dtype="F16"), _row("language_model", 0, 400, dtype="F32")))
    assert f16.keeps_f32
    all32 = _ckpt((_row("language_model", 0, 400, dtype="F32"),))
    assert not all32.keeps_f32 and all32.resident_bytes(BFLOAT16) == 200
    scales = _ckpt((_row("language_model", 0, 1000, castable=False), _row("language_model", 0, 400, dtype="F32")))
    assert not scales.keeps_f32 and scales.resident_bytes(BFLOAT16) == 1000 + 200


def test_breakdowns_by_component_and_dtype():
    w = _ckpt(ROWS + (_row("projector", -1, 7, dtype="F32"),))
    # sums of the synthetic ROWS sizes (inputs written above)
    assert list(w.by_component().items()) == [("language_model", 400 + 800 + 10 + 602 + 10), ("embeddings", 1002),
                                              ("lm_head", 1000), ("vision", 300), ("projector", 7), ("mtp", 5000)]
    assert list(w.by_dtype().items()) == [("BF16", w.stored_bytes - 7), ("F32", 7)]
    assert w.has("vision") and w.has("mtp") and not w.has("audio")


# ----------------------------------------------------------------------------- kvplan.config.parse

from kvplan.config.parse import parse_config, parse_dims
from kvplan.errors import UnsupportedArchitectureError
from kvplan.weights.rule import param_count

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 160,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
         # inputs: a tiny Llama config
         "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_parse_config_reads_the_dims():
    m = parse_config(LLAMA, name="tiny", source="here")
    assert (m.name, m.model_type, m.source, m.architecture) == ("tiny", "llama", "here", "LlamaForCausalLM")
    d = m.dims
    # the config's own values (LLAMA above)
    assert (d.hidden_size, d.num_heads, d.intermediate_size, d.vocab_size, d.max_position_embeddings) == \
        (64, 4, 160, 1000, 2048)
    assert d.tie_word_embeddings is False and d.rotary_fraction == 1.0 and d.rope_tables == 1
    assert d.invalid == () and d.invalid_positions is None and m.dtype_named and m.warnings == ()
    # 2 layers x K and V x 2 KV heads x 16 (64 / 4) = 128 values per token
    assert sum(s.k_elems_per_token + s.v_elems_per_token for layer in m.layers for s in layer) == 128
    # parameters by hand: embed 64,000 + head 64,000 + 2 x (q 4,096 + k 2,048 + v 2,048 + o 4,096 + MLP 3 x 64 x 160
    # + 2 norms x 64) + final norm 64 = 214,336 (tests/test_checkpoint_hostile.py's TINY: 428,672 B in bf16)
    assert param_count(parse_dims(LLAMA)).total == 214_336


def test_unusable_soft_sizes_are_named_and_absent_ones_are_none():
    m = parse_config({**LLAMA, "max_position_embeddings": "long", "rotary_dim": -3, "tie_word_embeddings": "yes"})
    assert m.dims.invalid == ("max_position_embeddings 'long'", "rotary_dim -3")
    assert m.dims.invalid_positions == "max_position_embeddings 'long'"
    assert m.dims.max_position_embeddings is None and m.dims.rotary_dim is None
    assert m.dims.tie_word_embeddings is True       # not a bool: transformers' default (tied) stands
    no_tie = dict(LLAMA)
    del no_tie["tie_word_embeddings"]
    assert parse_config(no_tie).dims.tie_word_embeddings is False   # LlamaConfig's default: untied
    assert parse_config({**LLAMA, "rotary_dim": 8}).dims.invalid_positions is None
    assert not parse_config({k: v for k, v in LLAMA.items() if k != "torch_dtype"}).dtype_named


def test_partial_rotary_fraction_is_read_and_bounded():
    assert parse_config({**LLAMA, "partial_rotary_factor": 0.5}).dims.rotary_fraction == 0.5
    assert parse_config({**LLAMA, "partial_rotary_factor": 1e-3}).dims.rotary_fraction == 1e-3
    with pytest.raises(ConfigError):
        parse_config({**LLAMA, "partial_rotary_factor": 1.5})


@pytest.mark.parametrize("names, expected", [
    (["LlamaForCausalLM", "Other"], "LlamaForCausalLM"), ([], ""), ("LlamaForCausalLM", ""), ([7], ""),
    (["A" * 150], "A" * 100),
])
def test_the_architecture_named_first(names, expected):
    assert parse_config({**LLAMA, "architectures": names}).architecture == expected


def test_encoders_are_refused_word_for_word():
    with pytest.raises(UnsupportedArchitectureError, match=_exact(
            "m: model_type 'bert' is an encoder unless its config says is_decoder: true, and as an encoder it keeps "
            "no KV cache: set is_decoder to true in the config.json to size it as a decoder")):
        parse_config({"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
                     name="m")
    with pytest.raises(UnsupportedArchitectureError, match=_exact(
            "m: model_type 'llama' is an encoder-decoder model: kvplan sizes decoder-only KV caches")):
        parse_config({**LLAMA, "is_encoder_decoder": True}, name="m")


def test_parse_dims_takes_the_overrides():
    from kvplan.config.reader import Overrides
    # a config without num_hidden_layers, sized with --num-layers 3: 3 x 43,136 per layer + 128,064 outside them
    # (per layer q / o 2 x 4,096 + k / v 2 x 2,048 + MLP 30,720 + 2 norms x 64; embed + head 128,000 + final norm 64)
    bare = {k: v for k, v in LLAMA.items() if k != "num_hidden_layers"}
    shape = parse_dims(bare, overrides=Overrides(num_layers=3))
    assert shape.num_layers == 3 and param_count(shape).total == 3 * 43_136 + 128_064


# ----------------------------------------------------------------------------- kvplan.config.reader

from kvplan.config.reader import ConfigReader, check_float


def _refusal(call) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        call()
    return info.value


@pytest.mark.parametrize("value, message", [
    ("x", "config field 'rope_factor' must be a number, got 'x': fix the config.json"),
    (float("nan"), "config field 'rope_factor' must be a number, got nan: fix the config.json"),
    (4.5, "config field 'rope_factor' must be between 1 and 4, got 4.5: fix the config.json"),
    (0.5, "config field 'rope_factor' must be between 1 and 4, got 0.5: fix the config.json"),
])
def test_check_float_refusals_name_the_field(value, message):
    error = _refusal(lambda: check_float("rope_factor", value, minimum=1, maximum=4))
    assert str(error) == message and error.field == "rope_factor"


def test_check_float_takes_both_ends_of_its_range():
    assert check_float("f", 4, minimum=1, maximum=4) == 4.0 and check_float("f", 1.0, minimum=1, maximum=4) == 1.0


def test_a_layer_period_may_start_at_layer_zero():
    # JambaConfig._check_supported_offset: the offset must be below the period; 0 (the first layer) is allowed
    reader = ConfigReader({"attn_layer_period": 8, "attn_layer_offset": 0}, "jamba")
    assert reader.layer_period("attn", 32) == (8, 0)
    late = ConfigReader({"attn_layer_period": 8, "attn_layer_offset": 8}, "jamba")
    error = _refusal(lambda: late.layer_period("attn", 32))
    assert error.field == "attn_layer_offset" and str(error) == (
        "config field 'attn_layer_offset' is 8, not below its period 8 and the 32 layers: no layer would have it; "
        "fix the config.json")


from kvplan.config.reader import MAX_LAYERS, MAX_SIZE, Overrides, check_int, config_dtype, multimodal, text_config


@pytest.mark.parametrize("kwargs, message", [
    ({"num_layers": "x"}, "--num-layers must be a whole number, got 'x'"),
    ({"kv_heads": True}, "--kv-heads must be a whole number, got True"),
    ({"num_layers": 10_001}, "--num-layers must be between 1 and 10,000, got 10,001"),  # MAX_LAYERS 10,000 + 1
    ({"hidden_size": 2**40 + 1}, "--hidden-size must be between 1 and 1,099,511,627,776, got 1,099,511,627,777"),
    ({"num_heads": 0}, "--num-heads must be between 1 and 1,099,511,627,776, got 0"),
    ({"head_dim": -1}, "--head-dim must be between 1 and 1,099,511,627,776, got -1"),
])
def test_overrides_refusals_name_their_flag(kwargs, message):
    error = _refusal(lambda: Overrides(**kwargs))
    name = next(iter(kwargs))
    assert str(error) == message and error.field == name and error.flag == "--" + name.replace("_", "-")


def test_overrides_take_both_ends_of_their_range():
    o = Overrides(num_layers=MAX_LAYERS, num_heads=1, kv_heads=MAX_SIZE, head_dim=MAX_SIZE, hidden_size=1)
    # the caps: MAX_LAYERS 10,000 and MAX_SIZE 2**40 (kvplan/config/reader.py)
    assert (o.num_layers, o.num_heads, o.kv_heads, o.head_dim, o.hidden_size) == (10_000, 1, 2**40, 2**40, 1)


@pytest.mark.parametrize("value, kwargs, message", [
    (2.5, {}, "config field 'k' must be an integer, got 2.5: fix the config.json"),
    (float("inf"), {}, "config field 'k' must be an integer, got inf: fix the config.json"),
    (True, {}, "config field 'k' must be an integer, got True: fix the config.json"),
    ("2", {}, "config field 'k' must be an integer, got '2': fix the config.json"),
    (0, {}, "config field 'k' must be >= 1, got 0: fix the config.json"),
    (11, {"maximum": 10}, "config field 'k' must be <= 10, got 11: fix the config.json"),
    (2**40 + 1, {}, "config field 'k' must be <= 1,099,511,627,776, got 1,099,511,627,777: fix the config.json"),
])
def test_check_int_refusals_name_the_field(value, kwargs, message):
    error = _refusal(lambda: check_int("k", value, **kwargs))
    assert str(error) == message and error.field == "k"


def test_check_int_takes_whole_floats_and_both_ends():
    two = check_int("k", 2.0)
    assert two == 2 and type(two) is int
    assert check_int("k", 0, minimum=0) == 0 and check_int("k", 10, maximum=10) == 10 and check_int("k", 2**40) == 2**40


def test_need_int_says_which_aliases_and_which_flag():
    bare = ConfigReader({}, "unknown")     # no family defaults to fall back on
    error = _refusal(bare.num_layers)
    assert (str(error), error.field, error.flag) == (
        "config has no num_layers (num_hidden_layers / n_layer / n_layers / num_layers): pass --num-layers N",
        "num_layers", "--num-layers")
    error = _refusal(bare.num_heads)
    assert (str(error), error.field, error.flag) == (
        "config has no num_heads (num_attention_heads / n_head / n_heads / num_heads / attention_heads): pass "
        "--num-heads N", "num_heads", "--num-heads")
    error = _refusal(lambda: bare.hidden_size("--hidden"))
    assert (str(error), error.flag) == (
        "config has no hidden_size (hidden_size / n_embd / d_model / n_embed / model_dim / emb_dim): pass --hidden N",
        "--hidden")
    assert str(_refusal(lambda: bare.need_int(("a", "b"), "thing"))) == \
        "config has no thing (a / b): add it to the config.json"


def test_need_int_bounds_layers_by_max_layers_and_sizes_by_max_size():
    error = _refusal(ConfigReader({"num_hidden_layers": 10_001}, "llama").num_layers)
    assert str(error) == "config field 'num_hidden_layers' must be <= 10,000, got 10,001: fix the config.json"
    assert ConfigReader({"num_hidden_layers": 10_000}, "llama").num_layers() == 10_000   # MAX_LAYERS itself (10,000, kvplan/config/reader.py)
    assert ConfigReader({"num_attention_heads": 10_001}, "llama").num_heads() == 10_001      # a size: up to 2**40
    assert str(_refusal(ConfigReader({"hidden_size": 2**40 + 1}, "llama").hidden_size)) == (
        "config field 'hidden_size' must be <= 1,099,511,627,776, got 1,099,511,627,777: fix the config.json")


def test_overrides_win_and_are_recorded_under_the_concept():
    r = ConfigReader({"num_hidden_layers": 4}, "llama", Overrides(num_layers=5, num_heads=3, hidden_size=96))
    assert (r.num_layers(), r.num_heads(), r.hidden_size()) == (5, 3, 96)
    assert r.used == {"num_layers": 5, "num_heads": 3, "hidden_size": 96}


def test_the_first_alias_set_wins_and_the_config_before_the_defaults():
    # an older Falcon config.json says n_head 8: it wins over FalconConfig's default num_attention_heads 71
    falcon = ConfigReader({"n_head": 8}, "falcon")
    assert falcon.num_heads() == 8 and falcon.defaults["num_attention_heads"] == 71 and falcon.used == {"n_head": 8}
    assert ConfigReader({"n_layer": 3, "num_layers": 9}, "unknown").num_layers() == 3   # LAYER_KEYS order
    assert ConfigReader({"num_hidden_layers": None, "n_layer": 3}, "unknown").num_layers() == 3   # null is unset
    assert ConfigReader({}, "llama").num_layers() == 32      # LlamaConfig's default num_hidden_layers


def test_a_bart_style_decoder_is_read_under_its_decoder_keys():
    # distil-whisper-large-v3: num_hidden_layers 32 (the encoder) beside decoder_layers 2; WhisperForCausalLM
    # builds the 2 decoder layers
    r = ConfigReader({"decoder_layers": 2, "num_hidden_layers": 32, "decoder_attention_heads": 20,
                      "num_attention_heads": 4}, "whisper")
    assert r.decoder_layout and (r.num_layers(), r.num_heads()) == (2, 20)
    assert not ConfigReader({"num_hidden_layers": 32}, "llama").decoder_layout


def test_req_and_opt_int_read_defaults_minimums_and_refuse_by_name():
    r = ConfigReader({"zero": 0}, "unknown")
    error = _refusal(lambda: r.req_int("foo"))
    assert (str(error), error.field) == ("config has no 'foo', which sizes this model: fix the config.json", "foo")
    assert r.req_int("zero", minimum=0) == 0 and r.req_int("foo", default=3) == 3
    assert str(_refusal(lambda: r.req_int("zero"))) == "config field 'zero' must be >= 1, got 0: fix the config.json"
    assert r.opt_int("foo") is None and r.opt_int("foo", default=2) == 2 and r.opt_int("zero", minimum=0) == 0
    assert str(_refusal(lambda: r.opt_int("zero"))) == "config field 'zero' must be >= 1, got 0: fix the config.json"
    assert r.used == {"zero": 0, "foo": 2}


def test_layer_sets_and_what_get_records():
    r = ConfigReader({"moe_layers": [0, 2, 2], "bad": 3, "neg": [-1], "top": [10_000], "off": None, "lst": [1, 2, 3]},
                     "unknown")
    assert r.layer_set("moe_layers") == {0, 2} and r.layer_set("absent") is None and r.layer_set("off") is None
    assert r.layer_set("top") == {10_000}   # MAX_LAYERS (10,000, kvplan/config/reader.py) itself is an index
    assert str(_refusal(lambda: r.layer_set("bad"))) == \
        "config field 'bad' must list layer indices, got 3: fix the config.json"
    assert str(_refusal(lambda: r.layer_set("neg"))) == "config field 'neg' must be >= 0, got -1: fix the config.json"
    assert r.get("lst") == [1, 2, 3] and r.get("off", 5) is None and r.get("absent", 5) == 5
    # a list is recorded by its length, a null not at all (kvplan.config.verified: "unread")
    assert r.used == {"moe_layers": "3 entries", "top": "1 entries", "lst": "3 entries", "bad": 3, "neg": "1 entries"}


def test_flags_take_null_as_the_default_and_refuse_the_rest():
    assert ConfigReader({"f": None}, "unknown").flag("f", True) is True
    assert ConfigReader({}, "unknown").flag("f") is False
    r = ConfigReader({"f": False}, "unknown")
    assert r.flag("f", True) is False and r.used == {"f": False}
    assert str(_refusal(lambda: ConfigReader({"f": "yes"}, "unknown").flag("f"))) == \
        "config field 'f' must be true or false, got 'yes': fix the config.json"


def test_family_defaults_follow_the_shared_architecture():
    # Kimi-K2 ships DeepseekV3ForCausalLM: DeepseekV3Config's defaults, and its own kv_lora_rank 512
    kimi = ConfigReader({}, "kimi_k2")
    assert kimi.family == "deepseek_v3" and kimi.get("kv_lora_rank") == 512 and kimi.has("kv_lora_rank")
    assert not kimi.has("zzz") and kimi.has("qk_rope_head_dim")
    assert ConfigReader({}, "gpt_neox").get("attention_bias") is True      # GPTNeoXConfig's default
    assert ConfigReader({"x": 1}, "unknown").has("x")


def test_text_config_unwraps_as_get_text_config_does():
    assert str(_refusal(lambda: text_config([1]))) == \
        "config.json must hold a JSON object: pass the model's config.json, not a list or a value"
    # Gemma 3's wrapper: text_config without a model_type is gemma3_text, the dtype inherited from the wrapper
    assert text_config({"model_type": "gemma3", "dtype": "bfloat16", "text_config": {"hidden_size": 8}}) == \
        ({"hidden_size": 8, "dtype": "bfloat16"}, "gemma3_text")
    # the text config's own dtype stays; the wrapper's torch_dtype comes along beside it; LLaVA's is llama
    assert text_config({"model_type": "llava", "torch_dtype": "float16",
                        "text_config": {"hidden_size": 8, "dtype": "float32"}}) == \
        ({"hidden_size": 8, "dtype": "float32", "torch_dtype": "float16"}, "llama")
    assert text_config({"model_type": "x", "llm_config": {"model_type": "qwen2"}}) == ({"model_type": "qwen2"}, "qwen2")
    assert text_config({"model_type": "x", "text_config": {}}) == ({"model_type": "x", "text_config": {}}, "x")
    assert text_config({}) == ({}, "unknown") and text_config({"model_type": "a" * 100})[1] == "a" * 100


@pytest.mark.parametrize("model_type, shown_as", [("a" * 101, shown("a" * 101)), (5, "5")])
def test_a_model_type_that_is_no_short_name_is_refused(model_type, shown_as):
    assert str(_refusal(lambda: text_config({"model_type": model_type}))) == \
        f"config field 'model_type' must be a short name like 'llama', got {shown_as}: fix the config.json"


def test_config_dtype_reads_dtype_then_torch_dtype_else_float32():
    assert config_dtype({"torch_dtype": "float16"}).name == "float16"
    assert config_dtype({"dtype": None, "torch_dtype": "float16"}).name == "float16"
    assert config_dtype({"dtype": "bfloat16", "torch_dtype": "float16"}).name == "bfloat16"
    assert config_dtype({}).name == "float32"          # transformers' from_config without a dtype
    for value in ("weird", ["x"], "a" * 101):
        assert str(_refusal(lambda: config_dtype({"dtype": value}))) == \
            f"config field 'dtype' has unknown dtype {shown(value)}: pass --dtype explicitly"
    assert str(_refusal(lambda: config_dtype({"torch_dtype": "weird"}))) == \
        "config field 'torch_dtype' has unknown dtype 'weird': pass --dtype explicitly"


def test_multimodal_is_a_nested_text_config_or_a_tower():
    assert multimodal({"vision_config": {"a": 1}}) and multimodal({"text_config": {"a": 1}})
    assert multimodal({"audio_config": {"a": 1}}) and multimodal({"llm_config": {"a": 1}})
    assert not multimodal({"vision_config": {}}) and not multimodal({"a": 1}) and not multimodal({"vision_config": 3})
