"""Issue #25, the checkpoint reader: safetensors headers and index files as hostile as a file can be, in a folder
and on a Hub on 127.0.0.1 (tests/test_hub.py's FakeHub). kvplan reads them as strictly as safetensors itself
(safetensors/src/tensor.rs `Metadata::validate`), opens no file outside the model folder, never shows a byte of a
file that is not a checkpoint, and does not trust a checkpoint that holds far fewer bytes than its config implies.
Each refusal is one line that names the tensor, the shard or the field; with the default `--weights auto` the plan
then prices the config rule and says why."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from test_hub import MAIN, FakeRepo, cache_file, fake_hub, git_blob_sha1, go_offline, hub_env  # noqa: F401

import kvplan
from kvplan.cli import main
from kvplan.errors import ConfigError, KVPlanError
from kvplan.model.checkpoint import DTYPE_BITS

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 160,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
        # inputs: a tiny Llama config
        "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def tiny_tensors() -> dict:
    """The 2-layer TINY Llama's tensors, as (dtype, shape): 428,672 B in bfloat16, what the config rule counts."""
    h, inter, vocab, kv = 64, 160, 1000, 32
    out = {"model.embed_tokens.weight": [vocab, h], "model.norm.weight": [h], "lm_head.weight": [vocab, h]}
    for i in range(2):
        p = f"model.layers.{i}"
        out.update({f"{p}.input_layernorm.weight": [h], f"{p}.post_attention_layernorm.weight": [h],
                    f"{p}.self_attn.q_proj.weight": [h, h], f"{p}.self_attn.k_proj.weight": [kv, h],
                    f"{p}.self_attn.v_proj.weight": [kv, h], f"{p}.self_attn.o_proj.weight": [h, h],
                    f"{p}.mlp.gate_proj.weight": [inter, h], f"{p}.mlp.up_proj.weight": [inter, h],
                    f"{p}.mlp.down_proj.weight": [h, inter]})
    return {name: ("BF16", shape) for name, shape in out.items()}


def header_of(tensors: dict) -> dict:
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = -(-math.prod(shape) * DTYPE_BITS[dtype] // 8)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return header


def write_shard(path: Path, header: dict | bytes, data_bytes: int | None = None) -> Path:
    """A safetensors file: 8-byte length, the header, then `data_bytes` of data (a hole: sparse), by default as
    many as the header's offsets end at."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    if data_bytes is None:
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"] if isinstance(header, dict) \
            else [0]
        data_bytes = max(ends, default=0)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(8 + len(raw) + data_bytes)
    return path


def folder_with(tmp_path: Path, header: dict | bytes, data_bytes: int | None = None, name="model") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    write_shard(folder / "model.safetensors", header, data_bytes)
    return folder


def refusal(source, words: str, error: type = KVPlanError) -> str:
    """The checkpoint of `source` (a folder, a Hub id) is refused in one line naming what is wrong: an error with
    weights="checkpoint", the note of the model without it with the default."""
    with pytest.raises(error) as caught:
        kvplan.load_model(source, weights="checkpoint")
    message = str(caught.value)
    assert words in message and "\n" not in message and len(message) < 400, message
    auto = kvplan.load_model(source)
    assert auto.checkpoint is None and words in auto.checkpoint_note
    return message


def refused(folder: Path, capsys, words: str) -> str:
    """`refusal`, and the plan prices the config rule; the CLI's --weights checkpoint exits 2 with the one line."""
    message = refusal(folder, words, ConfigError)
    assert kvplan.plan(kvplan.load_model(folder), gpu="L4", max_model_len=2048).weights_source == "config rule"
    assert main(["plan", str(folder), "--gpu", "L4", "--weights", "checkpoint"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err
    return message


# ---------------------------------------------------------------------------------------------- values in a header

BAD_VALUES = [
    # OverflowError on `kvplan plan FOLDER` before
    ('{"lm_head.weight": {"dtype": "BF16", "shape": [Infinity], "data_offsets": [0, 2]}}',
     "tensor 'lm_head.weight' has shape [inf], not a list"),
    ('{"lm_head.weight": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 1e400]}}',
     "tensor 'lm_head.weight' has data_offsets [0, inf], not [start, end]"),
    (json.dumps({"lm_head.weight": {"dtype": "BF16", "shape": [10**200, 10**200], "data_offsets": [0, 2]}}),
     "has shape [an integer of 665 bits, an integer of 665 bits], not a list"),
    # coerced by int() before: [1.9, 1.9] was [1, 1], "99" was [9, 9]
    ('{"lm_head.weight": {"dtype": "BF16", "shape": [1.9, 1.9], "data_offsets": [0, 2]}}', "has shape [1.9, 1.9]"),
    ('{"lm_head.weight": {"dtype": "BF16", "shape": "99", "data_offsets": [0, 162]}}', "has shape '99'"),
    ('{"lm_head.weight": {"dtype": "BF16", "shape": [true], "data_offsets": [0, 2]}}', "has shape [True]"),
    ('{"lm_head.weight": {"dtype": "BF16", "shape": [1], "data_offsets": [-2, 0]}}', "data_offsets [-2, 0]"),
    ('{"lm_head.weight": {"dtype": "BF16", "shape": [1], "data_offsets": [2, 0]}}', "data_offsets [2, 0]"),
    ('{"lm_head.weight": {"dtype": "BF16", "shape": [' + ", ".join(["1"] * 17) + '], "data_offsets": [0, 2]}}',
     "not a list of at most 16"),
    ('{"lm_head.weight": 5}', "tensor 'lm_head.weight' has dtype None"),
    # ValueError (int() of a 5,000-digit layer number) before
    (json.dumps({"model.layers." + "9" * 5000 + ".mlp.weight": {"dtype": "BF16", "shape": [1],
                                                                "data_offsets": [0, 2]}}),
     "names a tensor 'model.layers.99999"),
]


@pytest.mark.parametrize("raw, words", BAD_VALUES, ids=[w[:40] for _, w in BAD_VALUES])
def test_a_header_value_safetensors_refuses_is_refused(tmp_path, capsys, raw, words):
    refused(folder_with(tmp_path, raw.encode(), data_bytes=2), capsys, words)


@pytest.mark.parametrize("header, data_bytes, words", [
    # a 136-byte file was priced as 1 PiB "from the checkpoint"
    ({"lm_head.weight": {"dtype": "U8", "shape": [2**50], "data_offsets": [0, 2**50]}}, 0,
     "its tensors end at byte 1,125,899,906,842,624 of the 0 the file holds past its header"),
    # 1,000 tensors over the same bytes were 8 TiB
    ({f"model.layers.0.mlp.{i}.weight": {"dtype": "U8", "shape": [2**33], "data_offsets": [0, 2**33]}
      for i in range(1000)}, 2**33, "starts at byte 0 where the tensors before it end at 8,589,934,592"),
    ({"a.weight": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
      "b.weight": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]}}, 12,
     "tensor 'b.weight' starts at byte 8 where the tensors before it end at 4"),
    (header_of(tiny_tensors()), 428_672 + 100, "end at byte 428,672 of the 428,772 the file holds"),
])
def test_offsets_are_contiguous_and_inside_the_file(tmp_path, capsys, header, data_bytes, words):
    refused(folder_with(tmp_path, header, data_bytes), capsys, words)


def test_a_file_that_is_not_safetensors_shows_none_of_its_bytes(tmp_path, capsys):
    """The error printed the first 8 bytes as a 'header length' number: of /proc/self/environ, the environment."""
    folder = folder_with(tmp_path, b"{}")
    secret = b"HF_TOKEN=hf_secret_value\n" * 4
    (folder / "model.safetensors").write_bytes(secret)
    message = refused(folder, capsys, "does not start like a safetensors file")
    assert str(int.from_bytes(secret[:8], "little")) not in message and "HF_TOKEN" not in message


# ---------------------------------------------------------------------------------------------- what a checkpoint is

def test_no_tensors_is_no_checkpoint(tmp_path, capsys):
    """{} was trusted: weights 0 B, FITS"""
    refused(folder_with(tmp_path, {}), capsys, "holds no tensors")


def test_one_numbered_shard_without_its_index_is_refused(tmp_path, capsys):
    """model-00001-of-00004.safetensors alone was priced as the whole model"""
    folder = folder_with(tmp_path, header_of(tiny_tensors()))
    (folder / "model.safetensors").rename(folder / "model-00001-of-00004.safetensors")
    refused(folder, capsys, "holds 1 of the 4 shards their names count and no model.safetensors.index.json")


def test_a_checkpoint_without_some_layers_is_refused(tmp_path, capsys):
    tensors = {k: v for k, v in tiny_tensors().items() if ".layers.1." not in k}
    refused(folder_with(tmp_path, header_of(tensors)), capsys, "holds tensors of 1 of the model's 2 layers (none of "
                                                               "layer 1): the checkpoint is incomplete")


def test_a_checkpoint_far_smaller_than_its_config_is_not_trusted(tmp_path):
    """One norm per layer passes the layer check but stores 0.12 % of the weights: the plan says so and prices the
    config rule."""
    whole = kvplan.plan(kvplan.load_model(folder_with(tmp_path, header_of(tiny_tensors()), name="whole")), gpu="L4",
                        max_model_len=2048)
    assert (whole.weights_source, whole.weights_checkpoint_bytes, whole.weights_rule_bytes) == (
        # TINY's 214,336 parameters x 2 B, worked by hand further down this file
        "checkpoint", 428_672, 428_672)  # the reference: every tensor, contiguous, as long as the file
    tensors = {k: v for k, v in tiny_tensors().items() if "layernorm" in k}
    model = kvplan.load_model(folder_with(tmp_path, header_of(tensors)), weights="checkpoint")
    plan = kvplan.plan(model, gpu="L4", max_model_len=2048)
    assert model.checkpoint.stored_bytes == 512
    assert plan.weights_source == "config rule" and plan.weights_bytes == kvplan.plan(
        kvplan.load_model(TINY), gpu="L4", max_model_len=2048).weights_bytes
    assert any("hold 512 B, 0.12% of the 428,672 B its config implies: the checkpoint is incomplete" in w
               for w in plan.warnings), plan.warnings


# ---------------------------------------------------------------------------------------------- outside the folder

def index_folder(tmp_path: Path, names: list[str]) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    tensors = list(tiny_tensors())
    weight_map = {t: names[i % len(names)] for i, t in enumerate(tensors)}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


@pytest.fixture
def opened(monkeypatch):
    """Every path kvplan opens with os.open (its readers of configs, indexes and headers)."""
    paths: list[str] = []
    real = os.open

    def recording(path, *args, **kwargs):
        paths.append(os.path.realpath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording)
    return paths


@pytest.mark.parametrize("name", ["../outside.safetensors", "/etc/hostname", "/proc/self/environ",
                                  "sub/../../outside.safetensors", "C:\\x.safetensors", "x" * 300 + ".safetensors",
                                  "config.json", "", 5])
def test_an_index_names_no_file_outside_the_folder(tmp_path, capsys, opened, name):
    """kvplan opened ../x.safetensors, /etc/hostname and /proc/self/environ; a 256-byte name raised OSError."""
    write_shard(tmp_path / "outside.safetensors", header_of(tiny_tensors()))  # a checkpoint that would be read
    folder = index_folder(tmp_path, [name])
    message = refused(folder, capsys, "which is not a .safetensors file inside the model folder")
    assert "model.safetensors.index.json names the shard" in message
    assert not [p for p in opened if not p.startswith(str(folder.resolve())) and "outside" in p or p.startswith(
        ("/etc", "/proc"))], opened


def test_a_link_out_of_the_folder_is_not_followed(tmp_path, capsys, opened):
    outside = write_shard(tmp_path / "outside.safetensors", header_of(tiny_tensors()))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    (folder / "model.safetensors").symlink_to(outside)
    refused(folder, capsys, "leads outside the model folder")
    assert str(outside) not in opened


def test_a_hub_cache_snapshot_folder_is_read_through_its_links_and_no_further(hub_env, capsys):
    """~/.cache/huggingface/hub/models--org--name/snapshots/<commit>/ links every file to ../../blobs/: inside the
    repository's cache folder, so it is the model's own; a link past that folder is not."""
    shard = write_shard(hub_env.parent / "shard.safetensors", header_of(tiny_tensors()))
    cache_file(hub_env, "acme/tiny", MAIN, json.dumps(TINY).encode())
    cache_file(hub_env, "acme/tiny", MAIN, shard.read_bytes(), filename="model.safetensors")
    snapshot = hub_env / "models--acme--tiny" / "snapshots" / MAIN
    assert (snapshot / "model.safetensors").is_symlink()
    # TINY by hand: embed + head 2 x 1,000 x 64 + 2 layers x (q, o 2 x 64^2 + k, v 2 x 64 x 32 + MLP 3 x 64 x 160
    # + norms 128) + final norm 64 = 214,336 parameters x 2 B = 428,672
    assert kvplan.load_model(snapshot, weights="checkpoint").checkpoint.stored_bytes == 428_672
    (snapshot / "model.safetensors").unlink()
    (snapshot / "model.safetensors").symlink_to(shard)
    refused(snapshot, capsys, "leads outside the model folder")


def test_a_huge_local_index_is_refused_unread(tmp_path, capsys):
    folder = index_folder(tmp_path, ["model.safetensors"])
    with open(folder / "model.safetensors.index.json", "r+b") as f:
        f.truncate(60 * 2**20)  # 60 MB: what a hostile Hub index held
    refused(folder, capsys, "is larger than 33,554,432 bytes, too large for a safetensors index")


# ---------------------------------------------------------------------------------------------- the Hub on 127.0.0.1

def hub_repo(fake_hub, repo_id: str, files: dict[str, bytes], **repo) -> None:
    fake_hub.repos[repo_id] = FakeRepo({MAIN: {"config.json": json.dumps(TINY).encode(), **files}}, {"main": MAIN},
                                       **repo)


def shard_bytes(header: dict | bytes, data_bytes: int = 0) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + bytes(data_bytes)


def test_hub_headers_are_checked_as_strictly(fake_hub):
    hub_repo(fake_hub, "acme/inf", {"model.safetensors": shard_bytes(BAD_VALUES[0][0].encode(), 2)})
    refusal("acme/inf", "acme/inf/model.safetensors on the Hub: tensor 'lm_head.weight' has shape [inf]")
    # a Hub that says the file is 1 PiB where it sends 136 bytes
    claim = {"lm_head.weight": {"dtype": "U8", "shape": [2**50], "data_offsets": [0, 2**50]}}
    hub_repo(fake_hub, "acme/claim", {"model.safetensors": shard_bytes(claim)})
    refusal("acme/claim", "its tensors end at byte 1,125,899,906,842,624 of the 0 the file holds")


def test_a_hub_header_over_25_mb_is_not_fetched(fake_hub):
    raw = (30_000_000).to_bytes(8, "little") + b"{" + bytes(99_999)
    hub_repo(fake_hub, "acme/big-header", {"model.safetensors": raw}, sizes={"model.safetensors": 10**9})
    refusal("acme/big-header", "does not start like a safetensors file")
    # a GET per load, never the second one for the 30 MB header
    assert len([r for r in fake_hub.requests if r.path.endswith("/model.safetensors")]) == 2


def test_a_hub_index_is_capped_and_never_cached(fake_hub, hub_env):
    """A 60 MB index was downloaded whole into the Hub cache every app visitor shares."""
    index = json.dumps({"weight_map": {"lm_head.weight": "model-1.safetensors"}}).encode()
    hub_repo(fake_hub, "acme/huge-index", {"model.safetensors.index.json": index},
             sizes={"model.safetensors.index.json": 60_000_000})
    refusal("acme/huge-index", "is 60,000,000 bytes, larger than a safetensors index can be (33,554,432)")
    assert not list(hub_env.rglob("*index.json"))
    hub_repo(fake_hub, "acme/tiny", {"model.safetensors.index.json": json.dumps({"weight_map": {
        t: "model-1.safetensors" for t in tiny_tensors()}}).encode(),
        "model-1.safetensors": shard_bytes(header_of(tiny_tensors()), 428_672)})
    # the same 428,672 B (TINY by hand, test_a_hub_cache_snapshot_folder_is_read_through_its_links...)
    assert kvplan.load_model("acme/tiny", weights="checkpoint").checkpoint.stored_bytes == 428_672
    blobs = {p.name for p in hub_env.rglob("*") if p.is_file() and "blobs" in p.parts}
    assert blobs == {git_blob_sha1(json.dumps(TINY).encode())}  # the config.json alone, never an index


@pytest.mark.parametrize("name", ["../x.safetensors", "/etc/hostname", "a/../../b.safetensors"])
def test_a_hub_index_with_names_outside_the_repository(fake_hub, name):
    index = json.dumps({"weight_map": {"lm_head.weight": name}}).encode()
    hub_repo(fake_hub, "acme/dots", {"model.safetensors.index.json": index})
    refusal("acme/dots", "names the shard")
    assert not [r for r in fake_hub.requests if "hostname" in r.path or "x.safetensors" in r.path]


def test_a_cached_hub_index_with_dots_offline_is_one_line(hub_env, monkeypatch):
    """uncaught ValueError from huggingface_hub's try_to_load_from_cache before"""
    cache_file(hub_env, "acme/dots", MAIN, json.dumps(TINY).encode())
    index = json.dumps({"weight_map": {"lm_head.weight": "../../../x.safetensors"}}).encode()
    cache_file(hub_env, "acme/dots", MAIN, index, filename="model.safetensors.index.json")
    go_offline(monkeypatch)
    refusal("acme/dots", "names the shard '../../../x.safetensors', which is not a .safetensors file inside")


def test_a_shard_missing_on_the_hub_says_so_quietly(fake_hub, capfd):
    """It was reported as 'has no config.json', and huggingface_hub's tqdm bar reached stderr."""
    index = json.dumps({"weight_map": {t: f"model-{i % 2}.safetensors" for i, t in enumerate(tiny_tensors())}})
    hub_repo(fake_hub, "acme/half", {"model.safetensors.index.json": index.encode(),
                                     "model-0.safetensors": shard_bytes(header_of(tiny_tensors()), 428_672)})
    capfd.readouterr()
    message = refusal("acme/half", "acme/half on the Hub lacks the shard 'model-1.safetensors' its "
                                       "model.safetensors.index.json names")
    assert "config.json" not in message.split("names")[0]
    assert capfd.readouterr().err == ""


def test_the_cli_on_a_hostile_hub_checkpoint_is_one_line(fake_hub, capsys):
    hub_repo(fake_hub, "acme/inf", {"model.safetensors": shard_bytes(BAD_VALUES[0][0].encode(), 2)})
    assert main(["plan", "acme/inf", "--gpu", "L4", "--weights", "checkpoint"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tensor 'lm_head.weight' has shape [inf]" in err
    assert main(["plan", "acme/inf", "--gpu", "L4"]) == 0
    assert "weights: config rule" in capsys.readouterr().out


def test_a_deep_checkpoint_over_many_stages_is_planned_in_bounded_work(tmp_path, monkeypatch):
    """Every stage summed every row of the checkpoint (and its stored bytes again): 10,000 layers of headers over
    PP 10,000 was 10^8 rows. Now each stage is two lookups; the per-stage bytes equal the config rule's.

    The work is counted, not timed: rows priced (WeightRow.resident) stay a few whole walks of the 40,003 rows
    (4 a layer: 10,000 x 4 + the embeddings, final norm and head), where a walk per stage prices 10,000 x 40,003.
    The seconds are benchmarks/bench_worst_case.py's to print."""
    from kvplan.model import checkpoint

    layers = 10_000
    config = {**TINY, "num_hidden_layers": layers}
    one = {k.replace("layers.0.", "layers.{i}."): v for k, v in tiny_tensors().items() if ".layers.1." not in k}
    tensors = {k: v for k, v in one.items() if "{i}" not in k}
    for i in range(layers):
        tensors.update({k.format(i=i): v for k, v in one.items() if "{i}" in k})
    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    write_shard(folder / "model.safetensors", header_of(tensors))
    model = kvplan.load_model(folder, weights="checkpoint")
    assert len(model.checkpoint.rows) == layers * 4 + 3
    priced, real = [], checkpoint.WeightRow.resident
    monkeypatch.setattr(checkpoint.WeightRow, "resident", lambda row, *a: priced.append(row) or real(row, *a))
    p = kvplan.plan(model, gpu="L4", max_model_len=2048, pp=layers)
    assert p.weights_source == "checkpoint" and len(p.stages) == layers
    assert len(priced) <= 4 * len(model.checkpoint.rows)  # 3 walks today: the shares, two resident totals
    rule = kvplan.plan(kvplan.load_model(folder, weights="config"), gpu="L4", max_model_len=2048, pp=7)
    assert [s.weights_bytes for s in kvplan.plan(model, gpu="L4", max_model_len=2048, pp=7).stages] == [
        s.weights_bytes for s in rule.stages]
