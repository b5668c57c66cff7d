"""Tests that kill the mutants tools/mutation.py found surviving in kvplan/sources/safetensors.py (#26).

Pinned here: every refusal's text word for word where a mutant changed its label or its figure (the error is the
contract: `{label}: tensor 'b' is 10 bytes ...` names the file and the tensor's own byte count), the read path's
odd corners (a platform without os.O_NONBLOCK, a file cut between its fstat and its read, a disk error inside the
read, a path whose resolve() fails, a name too long to stat), and summarise's keys by hand (layers past the config's
count are MTP, a norm over 1,024 = 8 heads x 128 is sharded when the hidden size is 2,048, two tensors of one kind
count 2). Headers are written by hand in the safetensors layout (8-byte little-endian length N, N bytes of JSON,
then the data; safetensors/src/tensor.rs)."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from test_mut_readers import _bf16, _exact, _write  # headers written by hand in the safetensors layout

from kvplan.errors import ConfigError
from kvplan.model.checkpoint import WeightRow
from kvplan.sources import safetensors as st


def _layer(i, start):
    return {f"model.layers.{i}.mlp.up_proj.weight": _bf16((2, 2), start)}   # 2 x 2 x 2 B = 8 B each


_CORRUPT = "the header is corrupt (re-download the file)"
_OUTSIDE = ("leads outside the model folder: kvplan reads only the model's own files (copy the shard into the "
            "folder, or pass the config.json alone)")
_NOT_ST = ("does not start like a safetensors file (8 bytes of header length, then that much JSON): re-download "
           "it, or pass the config.json alone")


# ----------------------------------------------------------------------------- header_tensors

def test_a_wrong_size_names_the_tensors_own_byte_count():
    """b sits at bytes [4, 14): 14 - 4 = 10 B, where [2, 3] BF16 is 2 x 3 x 2 = 12 B (end + start would say 18)."""
    header = {"a": _bf16((2,), 0), "b": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [4, 14]}}
    with pytest.raises(ConfigError, match=_exact(f"f: tensor 'b' is 10 bytes for shape [2, 3] in BF16: {_CORRUPT}")):
        st.header_tensors(header, "f", 14)


# ----------------------------------------------------------------------------- read_header

def test_a_platform_without_o_nonblock_opens_read_only(tmp_path, monkeypatch):
    """Windows' os has no O_NONBLOCK: the flags are O_RDONLY | 0. A default of 1 would be O_WRONLY (Linux
    fcntl.h: O_RDONLY 0, O_WRONLY 1) and the read fail with EBADF; no default, an AttributeError; None, a
    TypeError. [3] BF16 = 3 x 2 = 6 B of data."""
    path = _write(tmp_path / "m.safetensors", {"a": _bf16((3,), 0)})
    monkeypatch.delattr(os, "O_NONBLOCK")
    assert st.read_header(path) == ({"a": _bf16((3,), 0)}, 6)


def _cut_after_fstat(monkeypatch, path: Path, keep: int) -> None:
    """The file is cut to `keep` bytes between read_header's fstat and its reads (a download rewritten under it):
    the size fstat gave is the old one."""
    real_fstat = os.fstat

    def fstat_then_cut(fd):
        info = real_fstat(fd)
        os.truncate(path, keep)
        return info
    monkeypatch.setattr(os, "fstat", fstat_then_cut)


def test_a_file_cut_inside_its_length_prefix_does_not_start_like_safetensors(tmp_path, monkeypatch):
    """20 bytes at fstat (8 + "{}" + 10), 2 left when read: a 2-byte prefix is no length (size -1). Read as a
    length anyway, b"\\x02\\x00" would be 2, pass 2 <= 2 <= 20 - 8 and end as "cut short inside its header"."""
    path = tmp_path / "m.safetensors"
    path.write_bytes((2).to_bytes(8, "little") + b"{}" + b"\0" * 10)
    _cut_after_fstat(monkeypatch, path, 2)
    with pytest.raises(ConfigError, match=_exact(f"{path} {_NOT_ST}")):
        st.read_header(path)


def test_a_file_cut_inside_its_header_says_so(tmp_path, monkeypatch):
    """20 bytes at fstat, 9 left when read: the 8-byte length says 2, only 1 byte ("{") of the header is there."""
    path = tmp_path / "m.safetensors"
    path.write_bytes((2).to_bytes(8, "little") + b"{}" + b"\0" * 10)
    _cut_after_fstat(monkeypatch, path, 9)
    with pytest.raises(ConfigError, match=_exact(f"{path} is cut short inside its header: re-download it")):
        st.read_header(path)


class _FailingDisk:
    """A file object whose reads fail as a dying disk's do (EIO, errno 5 on Linux)."""

    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def read(self, n):
        raise OSError(errno.EIO, "Input/output error")


def test_a_read_error_names_the_file_and_the_os_words(tmp_path, monkeypatch):
    """The OSError's strerror ("Input/output error"), not its repr "[Errno 5] Input/output error"."""
    path = _write(tmp_path / "m.safetensors", {"a": _bf16((3,), 0)})
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, mode: _FailingDisk(real_fdopen(fd, mode)))
    with pytest.raises(ConfigError, match=_exact(f"cannot read {path} (Input/output error): check the file")):
        st.read_header(path)


# ----------------------------------------------------------------------------- inside, _is_file, shard_names

def test_a_path_that_cannot_be_resolved_is_refused_with_its_label(tmp_path, monkeypatch):
    """A relative path from a deleted working folder: resolve() raises FileNotFoundError (os.getcwd), and the
    path is refused as outside the folder, not an AttributeError."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(ConfigError, match=_exact(f"lbl {_OUTSIDE}")):
        st.inside(Path("x.safetensors"), tmp_path, "lbl")


def test_a_name_too_long_to_stat_is_no_file(tmp_path):
    """A 256-byte name is past Linux's NAME_MAX of 255: stat raises OSError(36, 'File name too long'), which
    Path.is_file lets through (3.11 pathlib ignores only ENOENT, ENOTDIR, EBADF, ELOOP): not a file."""
    assert st._is_file(tmp_path / ("n" * 256)) is False


def test_an_index_that_links_out_of_the_folder_is_refused_by_its_path(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"weight_map": {"a": "a.safetensors"}}))
    folder = tmp_path / "model"
    folder.mkdir()
    index = folder / "model.safetensors.index.json"
    index.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=_exact(f"{index} {_OUTSIDE}")):
        st.shard_names(folder)


def test_a_shard_that_links_out_of_the_folder_is_refused_by_its_index_and_name(tmp_path):
    outside = _write(tmp_path / "elsewhere.safetensors", {"a": _bf16((1,), 0)})
    folder = tmp_path / "model"
    folder.mkdir()
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "a.safetensors"}}))
    (folder / "a.safetensors").symlink_to(outside)
    with pytest.raises(ConfigError, match=_exact(f"{index}'s shard 'a.safetensors' {_OUTSIDE}")):
        st.shard_names(folder)



def test_a_dangling_model_safetensors_link_is_passed_over_for_the_index(tmp_path):
    """A model.safetensors left as a link to a file deleted outside the folder holds no weights: the index's shards
    are the checkpoint (inside() alone would refuse the folder, since the link resolves outside it)."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(tmp_path / "gone.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "a.safetensors"}}))
    _write(folder / "a.safetensors", {"a": _bf16((1,), 0)})
    assert st.shard_names(folder) == ["a.safetensors"]

# ----------------------------------------------------------------------------- read_folder

def test_a_corrupt_shard_is_named_by_its_path(tmp_path):
    """[2, 3] BF16 is 12 B, the header gives it [0, 10): 10 B."""
    shard = _write(tmp_path / "model.safetensors", {"a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 10]}})
    with pytest.raises(ConfigError, match=_exact(f"{shard}: tensor 'a' is 10 bytes for shape [2, 3] in BF16: "
                                                 f"{_CORRUPT}")):
        st.read_folder(tmp_path, 1)


def test_as_many_tensors_as_the_cap_over_the_shards_are_read(tmp_path, monkeypatch):
    """A cap of 2 and two shards of one 8-B tensor each: 2 is not more than 2."""
    _write(tmp_path / "a.safetensors", _layer(0, 0))
    _write(tmp_path / "b.safetensors", _layer(1, 0))
    monkeypatch.setattr(st, "MAX_TENSORS", 2)
    w = st.read_folder(tmp_path, 2)
    assert w.tensors == 2 and w.stored_bytes == 16 and w.files == 2   # 2 x 8 B


def test_read_folder_counts_layers_past_the_config_as_mtp(tmp_path):
    """Layers 0, 1, 2 of 8 B each and a config of 2 layers: layer 2 is DeepSeek-style MTP (8 B), not a third
    language-model layer (the language model holds 2 x 8 = 16 B)."""
    _write(tmp_path / "model.safetensors", {**_layer(0, 0), **_layer(1, 8), **_layer(2, 16)})
    w = st.read_folder(tmp_path, 2)
    assert w.by_component() == {"language_model": 16, "mtp": 8}


def test_read_folder_passes_the_hidden_size_to_the_norm_rule(tmp_path):
    """q_norm over 1,024 = 8 heads x 128 with a hidden size of 2,048: neither the hidden size nor <= 512 (one
    head), so sharded with the heads (not replicated); 1,024 x 2 B = 2,048 B. With no hidden size it would be
    taken for a whole norm."""
    name = "model.layers.0.self_attn.q_norm.weight"
    _write(tmp_path / "model.safetensors", {name: _bf16((1024,), 0)})   # 1,024 x 2 B
    w = st.read_folder(tmp_path, 1, hidden=2048)   # 2,048: the hidden size
    assert w.rows == (WeightRow("language_model", 0, False, "BF16", True, tensors=1, bytes=2048, expert=False,
                                attention=True, kv=False),)   # 2,048 B: 1,024 x 2 B


# ----------------------------------------------------------------------------- summarise

def test_summarise_counts_tensors_and_takes_the_layer_count_and_hidden_size():
    """Two 8-B up_proj of layer 0 (one cell: tensors 2, bytes 16), a layer-1 tensor with 1 layer configured
    (MTP), a q_norm of 1,024 with hidden 2,048 (sharded: replicated False)."""
    rows = st.summarise([
        ("model.layers.0.mlp.up_proj.weight", "BF16", (2, 2), 8),
        ("model.layers.0.mlp.up_proj.bias", "BF16", (2, 2), 8),
        ("model.layers.1.mlp.up_proj.weight", "BF16", (2, 2), 8),
        ("model.layers.0.self_attn.q_norm.weight", "BF16", (1024,), 2048),   # 1,024 x 2 B
    ], num_layers=1, hidden=2048)   # 2,048: the hidden size
    assert rows == (   # sorted by key: ("language_model", 0, ...) before ("mtp", -1, ...); attention after not
        WeightRow("language_model", 0, False, "BF16", True, tensors=2, bytes=16),
        WeightRow("language_model", 0, False, "BF16", True, tensors=1, bytes=2048, attention=True),  # 1,024 x 2 B
        WeightRow("mtp", -1, False, "BF16", True, tensors=1, bytes=8),
    )


def test_a_name_without_a_dot_is_summarised():
    """"w" has no dot: its last part is "w" itself, a castable BF16 tensor of [1] = 2 B."""
    assert st.summarise([("w", "BF16", (1,), 2)], num_layers=0) == \
        (WeightRow("language_model", -1, False, "BF16", True, tensors=1, bytes=2),)


def test_a_scale_name_is_judged_by_its_last_dotted_part_as_stored():
    """"x.weight_scale " (a trailing space): its last dotted part "weight_scale " does not end in a scale word
    (`$` after the space), so the F32 [1] (4 B) is castable; stripping the space would make it a scale."""
    assert st.summarise([("x.weight_scale ", "F32", (1,), 4)], num_layers=0) == \
        (WeightRow("language_model", -1, False, "F32", True, tensors=1, bytes=4),)
    # and the plain scale stays as stored (castable False)
    assert st.summarise([("x.weight_scale", "F32", (1,), 4)], num_layers=0) == \
        (WeightRow("language_model", -1, False, "F32", False, tensors=1, bytes=4),)


# ----------------------------------------------------------------------------- which files are the checkpoint

def test_model_safetensors_alone_is_the_checkpoint_beside_consolidated(tmp_path):
    """Mistral's repos ship consolidated.safetensors (the same weights under Mistral's names) beside the Hugging
    Face files. transformers 5.24 (modeling_utils.py `_get_resolved_checkpoint_files`) loads model.safetensors and
    nothing else; a glob of *.safetensors read both: files 2, 16 B, where the model holds one 8 B tensor."""
    _write(tmp_path / "model.safetensors", _layer(0, 0))                                       # 8 B
    _write(tmp_path / "consolidated.safetensors", {"layers.0.feed_forward.w3.weight": _bf16((2, 2), 0)})  # 8 B
    assert st.shard_names(tmp_path) == ["model.safetensors"]
    found = st.read_folder(tmp_path, 1)
    assert (found.files, found.stored_bytes, found.tensors) == (1, 8, 1)


def test_numbered_shards_are_counted_by_their_numbers(tmp_path):
    """model-00001-of-00002 and other-00001-of-00002 are two names but one shard number of 2: shard 2 is missing.
    Counting names passed it as complete."""
    _write(tmp_path / "model-00001-of-00002.safetensors", _layer(0, 0))
    _write(tmp_path / "other-00001-of-00002.safetensors", _layer(1, 0))
    with pytest.raises(ConfigError, match=_exact(
            f"{tmp_path} holds 1 of the 2 shards their names count and no model.safetensors.index.json: finish the "
            "download, or pass the config.json alone")):
        st.shard_names(tmp_path)


def test_a_globbed_shard_that_links_out_of_the_folder_is_refused_by_its_path(tmp_path):
    """No model.safetensors and no index: every *.safetensors is read, and one that links out is named by its path."""
    outside = _write(tmp_path / "elsewhere.safetensors", {"a": _bf16((1,), 0)})
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "a.safetensors").symlink_to(outside)
    with pytest.raises(ConfigError, match=_exact(f"{folder / 'a.safetensors'} {_OUTSIDE}")):
        st.shard_names(folder)


def test_a_tensor_past_2_to_the_53_bytes_is_refused_for_the_file_not_for_its_size():
    """U8 of shape [2**55 + 1] claims 2**55 + 1 B, exactly what its offsets span (the integer size, 8 bits // 8); the
    file holds none of it, so the refusal is the file's. A float size (2**55 + 1) / 1 rounds to 2**55 and would
    call the header's size wrong instead."""
    big = 2**55 + 1  # past float's 53-bit mantissa
    with pytest.raises(ConfigError, match=_exact(
            f"f: its tensors end at byte {big:,} of the 0 the file holds past its header: the file is cut short or not "
            "the one its header describes (re-download it)")):
        st.header_tensors({"x": {"dtype": "U8", "shape": [big], "data_offsets": [0, big]}}, "f", 0)
