"""The bundled model library and local config files: `kvplan.load_model` on ids and paths, and its errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import kvplan
from kvplan.cli import main
from kvplan.errors import ConfigError, KVPlanError, ModelNotAvailableError
from kvplan.sources.files import MAX_CONFIG_BYTES, parse_json_bytes, read_config_file
from kvplan.sources.library import bundled_ids, bundled_index, library_dir, partial_copies
from kvplan.weights.rule import weights_bytes

REPO_ROOT = Path(__file__).resolve().parents[1]
BUNDLED = bundled_ids()
QWEN3 = "Qwen/Qwen3-0.6B"  # 28 layers, 8 KV heads, head_dim 128 (not 1024 / 16)


def llama_config(**extra) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4,
            "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2, "torch_dtype": "float16",
            **extra}


def write_config(folder: Path, data, name: str = "config.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return path


def one_line(exc_info) -> str:
    message = str(exc_info.value)
    assert "\n" not in message and ": " in message, message
    return message


# --------------------------------------------------------------------------------------------------
# The bundled library


def test_library_is_the_repository_folder():
    assert library_dir() == REPO_ROOT / "model_configs"
    files = sorted(p.name for p in (REPO_ROOT / "model_configs").glob("*.json"))
    assert len(BUNDLED) == len(files) > 50
    assert sorted(p.name for p in bundled_index().values()) == files


def test_bundled_ids_are_unique_hub_ids():
    assert len({i.lower() for i in BUNDLED}) == len(BUNDLED)
    for model_id in BUNDLED:
        org, name = model_id.split("/")
        assert org and name and "__" not in model_id


@pytest.mark.parametrize("model_id", BUNDLED)
def test_every_bundled_config_parses(model_id):
    model = kvplan.load_model(model_id)
    assert (model.name, model.source) == (model_id, "bundled")
    assert model.num_layers > 0
    assert kvplan.estimate(model, seq_len=128).kv_cache_bytes > 0


@pytest.mark.parametrize("spelling", [QWEN3, QWEN3.lower(), QWEN3.upper(), f"  {QWEN3}\n", "qwen3-0.6b", "Qwen3-0.6B"])
def test_bundled_ids_resolve_case_insensitively_and_by_bare_name(spelling):
    model = kvplan.load_model(spelling)
    assert (model.name, model.source) == (QWEN3, "bundled")
    assert (model.num_layers, model.kv_heads, model.head_dim) == (28, 8, 128)


def test_bare_names_that_are_unique_resolve():
    names = [i.split("/")[1] for i in BUNDLED]
    for model_id, name in zip(BUNDLED, names):
        if names.count(name) == 1:
            assert kvplan.load_model(name).name == model_id


def test_name_overrides_the_id():
    assert kvplan.load_model(QWEN3, name="my model").name == "my model"


def test_not_bundled_not_a_path_not_a_hub_id():
    with pytest.raises(ModelNotAvailableError, match="run `kvplan models`") as err:
        kvplan.load_model("Qwen3-0.6B-typo")
    one_line(err)


@pytest.mark.parametrize("source", ["", "   "])
def test_empty_source(source):
    with pytest.raises(ModelNotAvailableError, match="no model given"):
        kvplan.load_model(source)


# hostile inputs
@pytest.mark.parametrize("source", ["a" * 5000, "a\0b"])
def test_sources_no_file_system_accepts_are_not_paths(source):
    with pytest.raises(ModelNotAvailableError) as err:
        kvplan.load_model(source)
    assert len(one_line(err)) < 300


# --------------------------------------------------------------------------------------------------
# Partial copies: what a bundled config that is not the Hub file verbatim lacks, said by every plan of it


def sources_rows() -> dict[str, tuple[str, str]]:
    """model_configs/SOURCES.md's table rows: hf_id -> (file, status), every table in the file."""
    rows = {}
    for line in (REPO_ROOT / "model_configs" / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            assert len(cells) >= 5, line[:80]
            assert cells[1] not in rows, f"two SOURCES.md rows for {cells[1]}"
            rows[cells[1]] = (cells[0].strip("`"), cells[3])
    return rows


PARTIAL = sorted(partial_copies())


def test_every_bundled_file_has_one_sources_row_and_back():
    rows = sources_rows()
    assert {f for f, _ in rows.values()} == {p.name for p in bundled_index().values()}
    for hf_id, (file, _) in rows.items():
        assert file == hf_id.replace("/", "__", 1) + ".json"


def test_the_partial_list_is_sources_md_row_for_row():
    """kvplan/data/partial_configs.json holds exactly the rows SOURCES.md marks partial (a row made complete
    drops its entry; one made partial needs one), each saying what the copy lacks and how the figures move."""
    marked = sorted(h for h, (_, status) in sources_rows().items() if status.startswith("partial"))
    assert PARTIAL == marked
    for model_id, gap in partial_copies().items():
        assert model_id in BUNDLED and isinstance(gap.warn, bool)
        assert len(gap.lacks) > 20 and len(gap.effect) > 20
        # a note moves no figure and says so; a warning names the bytes or the GPUs it moves
        assert gap.effect.startswith("no figure moves") != gap.warn or "B " in gap.effect, model_id
        if "priced in bf16" in gap.effect:  # said of a copy without the checkpoint's quantization_config only
            config = json.loads((library_dir() / (model_id.replace("/", "__") + ".json")).read_text())
            assert "quantization_config" not in config, f"{model_id} is priced quantized now: update its entry"


@pytest.mark.parametrize("model_id", PARTIAL)
def test_every_plan_and_estimate_of_a_partial_copy_says_what_it_lacks(model_id):
    gap = partial_copies()[model_id]
    said = gap.sentence(model_id)
    model = kvplan.load_model(model_id)
    assert model.library_note == said
    assert (said in model.warnings) is gap.warn and (said in model.notes) is not gap.warn
    est = kvplan.estimate(model, seq_len=256)
    assert said in (est.warnings if gap.warn else est.notes)
    try:
        plan = kvplan.plan(model, gpu="H100", max_model_len=2048)
    except KVPlanError as exc:  # a model kvplan refuses to plan says so first; the estimate above said the gap
        pytest.skip(f"not planned: {exc}")
    assert (said in plan.warnings) is gap.warn
    assert (f"not verified: {said}" if gap.warn else said) in plan.notes
    assert plan.notes.count(said) + plan.notes.count(f"not verified: {said}") == 1


@pytest.mark.parametrize("model_id", ["tiiuae/falcon-7b-instruct", "meta-llama/Llama-4-Maverick-17B-128E-Instruct"])
def test_the_cli_says_it_in_text_and_json(model_id, capsys):
    said = partial_copies()[model_id].sentence(model_id)
    args = ["plan", model_id, "--gpu", "H100", "--max-model-len", "2048", "--fewest-gpus"]
    assert main(args) == 0
    assert said in capsys.readouterr().out.replace("\n", " ")
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert said in out["notes"] or f"not verified: {said}" in out["notes"]
    assert (said in out["warnings"]) is partial_copies()[model_id].warn


def test_a_verbatim_copy_carries_no_library_note():
    model = kvplan.load_model("allenai/OLMo-2-1124-7B")  # a partial mlc preset until the Hub file replaced it
    assert model.library_note is None and model.verified
    assert kvplan.load_model(dict(json.loads((library_dir() / "tiiuae__falcon-7b-instruct.json").read_text()))) \
        .library_note is None  # the same config given as data is the user's file, not the bundled copy


def test_llama_4_scout_copy_moves_no_figure():
    """The trimmed Scout copy lacks text_config's layer lists and attention scalars; the published ones (as the
    unsloth mirror of the -Instruct file lists them: every 4th layer without RoPE, every layer MoE) are
    transformers' defaults, so the cache and the weights are the same with them written out."""
    data = json.loads((library_dir() / "meta-llama__Llama-4-Scout-17B-16E-Instruct.json").read_text())
    full = json.loads(json.dumps(data))
    full["text_config"].update(no_rope_layers=[0 if (i + 1) % 4 == 0 else 1 for i in range(48)],
                               moe_layers=list(range(48)), attn_temperature_tuning=True, floor_scale=8192,
                               attn_scale=0.1, bos_token_id=200000, eos_token_id=[200001, 200007, 200008],
                               pad_token_id=200018)
    trimmed, published = kvplan.load_model(data), kvplan.load_model(full)
    assert kvplan.estimate(trimmed, seq_len=16384).kv_cache_bytes == \
        kvplan.estimate(published, seq_len=16384).kv_cache_bytes
    assert kvplan.plan(trimmed, gpu="H100", max_model_len=8192, tp=4).weights_bytes == \
        kvplan.plan(published, gpu="H100", max_model_len=8192, tp=4).weights_bytes


def test_llama_4_maverick_copy_counts_the_vision_tower():
    """Maverick's copy (TensorRT-LLM's test config, its edits undone) carries the vision_config the trimmed copy
    lacked: transformers' own count of the tower and projector built from it (bf16) is what the plan adds,
    1,743,864,832 B, the tower the trimmed copy's warning said its weights were low by."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    data = json.loads((library_dir() / "meta-llama__Llama-4-Maverick-17B-128E-Instruct.json").read_text())
    assert (data["text_config"]["num_hidden_layers"], data["vision_config"]["num_hidden_layers"]) == (48, 34)
    assert "no_rope_layer_interval" not in data["text_config"]  # the test's edit, undone
    data["text_config"]["num_hidden_layers"] = 1  # the text model's depth does not enter the tower
    with torch.device("meta"):
        built = transformers.Llama4ForConditionalGeneration(transformers.Llama4Config(**data))
    tower = sum(p.numel() for m in (built.vision_model, built.multi_modal_projector) for p in m.parameters()) * 2
    # transformers live: Llama4ForConditionalGeneration built on meta above counts the tower and projector
    assert tower == 1_743_864_832
    maverick = kvplan.load_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert weights_bytes(maverick.require_arch()).towers_bytes == tower
    plan = kvplan.plan(maverick, gpu="H100", max_model_len=4096, pp=12)
    assert plan.weights_components["vision"] > 0 and not any("vision tower" in w for w in plan.warnings)


def test_eagle_head_bound_is_forty_lm_head_rows():
    head = json.loads((library_dir() / "yuhuili__EAGLE3-LLaMA3.1-Instruct-8B.json").read_text())
    rows = head["draft_vocab_size"] - 31960  # SpecForge's training template writes 31960
    assert (rows, head["hidden_size"]) == (40, 4096)
    assert f"{rows * head['hidden_size'] * 2:,} B" in partial_copies()["yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"].effect


# --------------------------------------------------------------------------------------------------
# Local files and folders


def test_path_to_a_file_and_to_its_folder(tmp_path):
    path = write_config(tmp_path / "tiny-llama", llama_config())
    by_file = kvplan.load_model(path)
    by_folder = kvplan.load_model(str(path.parent))
    for model in (by_file, by_folder):
        assert (model.name, model.source, model.num_layers, model.kv_heads) == ("tiny-llama", str(path), 4, 2)


def test_relative_and_home_paths(tmp_path, monkeypatch):
    write_config(tmp_path / "tiny-llama", llama_config())
    monkeypatch.chdir(tmp_path / "tiny-llama")
    assert kvplan.load_model("./config.json").name == "tiny-llama"  # named after the folder, not ""
    assert kvplan.load_model(".").num_layers == 4
    monkeypatch.setenv("HOME", str(tmp_path))
    assert kvplan.load_model("~/tiny-llama").num_layers == 4


def test_json_file_with_another_name(tmp_path):
    path = write_config(tmp_path, llama_config(), name="llama-variant.json")
    assert kvplan.load_model(path).name == "llama-variant"


def test_bundled_id_wins_over_a_folder_of_that_name(tmp_path, monkeypatch):
    write_config(tmp_path / "Qwen" / "Qwen3-0.6B", llama_config())
    monkeypatch.chdir(tmp_path)
    assert kvplan.load_model(QWEN3).source == "bundled"
    assert kvplan.load_model("./Qwen/Qwen3-0.6B").num_layers == 4


def test_folder_without_config_json(tmp_path):
    (tmp_path / "weights-only").mkdir()
    (tmp_path / "weights-only" / "model.safetensors").write_bytes(b"\0" * 8)
    with pytest.raises(ModelNotAvailableError, match="has no config.json") as err:
        kvplan.load_model(tmp_path / "weights-only")
    one_line(err)


@pytest.mark.parametrize("source", ["./missing/config.json", "missing.json", "/nonexistent/folder", "~/nope-kvplan"])
def test_missing_paths(source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotAvailableError, match="no such file or folder") as err:
        kvplan.load_model(source)
    one_line(err)


BAD_FILES = [
    # (why, bytes, words the error must hold)
    ("truncated JSON", b'{"model_type": "llama",', "is not valid JSON (Expecting"),
    ("a JSON list", b"[1, 2, 3]", "holds a JSON list, not an object"),
    ("a JSON string", b'"config"', "holds a JSON str, not an object"),
    ("JSON null", b"null", "holds a JSON NoneType, not an object"),
    ("Latin-1 bytes", '{"model_type": "llamá"}'.encode("latin-1"), "is not UTF-8 text"),
    ("UTF-16", json.dumps(llama_config()).encode("utf-16"), "is not UTF-8 text"),
    ("empty file", b"", "is not valid JSON"),
    # hostile inputs (their size named in each label)
    ("nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("an integer of 5,000 digits", b'{"num_hidden_layers": ' + b"9" * 5000 + b"}", "number too long to parse"),
]


@pytest.mark.parametrize(("content", "words"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_malformed_files_are_one_line_config_errors(tmp_path, content, words):
    path = write_config(tmp_path, content)
    with pytest.raises(ConfigError) as err:
        kvplan.load_model(path)
    message = one_line(err)
    assert words in message and str(path) in message and message.endswith("pass the model's config.json")


def test_oversized_file(tmp_path):
    padding = " " * (MAX_CONFIG_BYTES + 1 - len(json.dumps(llama_config())))  # valid JSON, 1 byte over the cap
    path = write_config(tmp_path, (json.dumps(llama_config()) + padding).encode())
    assert path.stat().st_size == MAX_CONFIG_BYTES + 1
    with pytest.raises(ConfigError, match="too large for a config.json") as err:
        kvplan.load_model(path)
    one_line(err)
    path.write_bytes(json.dumps(llama_config()).encode() + b" " * 1000)
    assert kvplan.load_model(path).num_layers == 4


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_device_is_refused_at_once():
    """A device's stat size says nothing and /dev/zero never ends: regular files only."""
    with pytest.raises(ConfigError, match="/dev/zero is not a regular file") as err:
        kvplan.load_model("/dev/zero")
    assert "\n" not in str(err.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_named_pipe_is_refused_without_blocking(tmp_path):
    """open() on a FIFO blocks until a writer comes: the CLI in a subprocess, so a hang fails the test."""
    os.mkfifo(tmp_path / "config.json")
    result = subprocess.run([sys.executable, "-m", "kvplan", "estimate", str(tmp_path / "config.json"), "--seq-len",
                             "5"], capture_output=True, text=True, timeout=30, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "config.json is not a regular file (a pipe, socket or device)" in result.stderr


@pytest.mark.parametrize("name", ["loop", "org/name"])  # a path, and a link named like a Hub id
def test_symlink_loop_has_its_own_message(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    Path(name).parent.mkdir(exist_ok=True)
    os.symlink(Path(name).name + "2", name)
    os.symlink(Path(name).name, name + "2")
    with pytest.raises(ModelNotAvailableError, match=f"{name} is a symlink loop .*: point it at the real config.json"):
        kvplan.load_model(name)
    with pytest.raises(ConfigError, match="is a symlink loop"):
        read_config_file(Path(name))


def test_utf8_bom_is_accepted(tmp_path):
    path = write_config(tmp_path, b"\xef\xbb\xbf" + json.dumps(llama_config()).encode())
    assert kvplan.load_model(path).num_layers == 4


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file: the two tests below "
                    "fail the open and the read for root too")
def test_unreadable_file(tmp_path):
    path = write_config(tmp_path, llama_config())
    path.chmod(0)
    with pytest.raises(ConfigError, match="cannot read .*Permission denied.*: check the path and its permissions"):
        kvplan.load_model(path)


def test_a_file_the_open_refuses_whoever_runs_it(tmp_path):
    # a path through a regular file: the open fails with ENOTDIR, as root too (CI runs as root)
    path = write_config(tmp_path, llama_config())
    with pytest.raises(ConfigError, match=r"cannot read .*config.json/config.json \(Not a directory\): check the path"):
        read_config_file(path / "config.json")


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="Linux /proc only")
def test_a_regular_file_whose_read_fails_whoever_runs_it():
    # /proc/self/mem is a regular file that opens for its own process, root or not, and fails the read at offset 0
    # (EIO): the read's own error branch, which a chmod cannot reach
    with pytest.raises(ConfigError, match=r"cannot read /proc/self/mem \(Input/output error\)"):
        read_config_file(Path("/proc/self/mem"))


def test_read_config_file_on_a_folder(tmp_path):
    with pytest.raises(ConfigError, match="is a folder: pass the config.json inside it"):
        read_config_file(tmp_path)


def test_parse_json_bytes_labels_its_errors():
    with pytest.raises(ConfigError, match=r"^org/name config.json holds a JSON list"):
        parse_json_bytes(b"[]", "org/name config.json")
    assert parse_json_bytes(b'{"a": 1}', "x") == {"a": 1}


def test_dict_source():
    model = kvplan.load_model(llama_config())
    assert (model.name, model.source, model.num_layers) == ("custom", "dict", 4)


# --------------------------------------------------------------------------------------------------
# auto_map names code: kvplan reads the config as data and never imports or opens anything else

AUDIT_SCRIPT = r"""
import json, sys
folder = sys.argv[1]
import kvplan  # warm up, so the audit sees only what this load does
kvplan.estimate(kvplan.load_model(kvplan.bundled_ids()[0]), seq_len=10)
opened, before = [], set(sys.modules)
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)) and str(args[0]).startswith(folder):
        opened.append(str(args[0]))
    if event == "import" and not str(args[0]).startswith("kvplan"):
        opened.append("import " + str(args[0]))
sys.addaudithook(hook)
model = kvplan.load_model(folder)
est = kvplan.estimate(model, seq_len=10)
print(json.dumps({"opened": opened, "new_modules": sorted(set(sys.modules) - before),
                  "layers": model.num_layers, "bytes": est.kv_cache_bytes}))
"""


def test_auto_map_is_data_only(tmp_path):
    """A folder as `save_pretrained(..., trust_remote_code)` leaves it: config.json naming its own classes."""
    folder = tmp_path / "remote-code-model"
    write_config(folder, llama_config(auto_map={"AutoConfig": "configuration_evil.EvilConfig",
                                                "AutoModelForCausalLM": "modeling_evil.EvilModel"}))
    sentinel = tmp_path / "ran"
    for module in ("configuration_evil.py", "modeling_evil.py", "__init__.py"):
        (folder / module).write_text(f"open({str(sentinel)!r}, 'w').write('ran remote code')\n")
    result = subprocess.run([sys.executable, "-c", AUDIT_SCRIPT, str(folder)], cwd=folder, capture_output=True,
                            text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["opened"] == [str(folder / "config.json")]  # no other file opened, nothing imported
    assert not [m for m in report["new_modules"] if not m.startswith("kvplan")]
    assert (report["layers"], report["bytes"]) == (4, 4 * 2 * 2 * 32 * 10 * 2)
    assert not sentinel.exists()


# --------------------------------------------------------------------------------------------------
# The `kvplan models` command


def test_cli_models_json_lists_every_bundled_id(capsys):
    assert main(["models", "--json"]) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)
    assert [row["id"] for row in rows] == BUNDLED and err == ""
    qwen = next(row for row in rows if row["id"] == QWEN3)
    assert (qwen["layers"], qwen["kv_heads"], qwen["head_dim"]) == (28, 8, 128)


def test_cli_models_table(capsys):
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["id", "family"]
    assert [line.split()[0] for line in lines[1:]] == BUNDLED


def test_cli_bad_local_file_is_one_line(tmp_path, capsys):
    path = write_config(tmp_path, b"[]")
    assert main(["estimate", str(path), "--seq-len", "5"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("kvplan: error: ")


def test_errors_are_kvplan_errors():
    assert issubclass(ConfigError, KVPlanError) and issubclass(ModelNotAvailableError, KVPlanError)


# --------------------------------------------------------------------------------------------------
# Packaging: the wheel carries model_configs/ as package data and loads it from there


@pytest.mark.slow
def test_wheel_ships_and_loads_the_bundled_configs(tmp_path):
    """Build the wheel offline from a copy of the sources, unpack it, import kvplan from there (not the checkout)."""
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for item in ("pyproject.toml", "README.md", "LICENSE", "kvplan", "model_configs"):
        if (REPO_ROOT / item).is_dir():
            shutil.copytree(REPO_ROOT / item, src / item, ignore=shutil.ignore_patterns("__pycache__"))
        elif (REPO_ROOT / item).exists():
            shutil.copy2(REPO_ROOT / item, src / item)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-q", "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("kvplan-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.rsplit("/", 1)[1] for n in names
                     if n.startswith("kvplan/model_configs/") and n.endswith(".json") and n.count("/") == 2)
    assert shipped == sorted(p.name for p in (src / "model_configs").glob("*.json"))
    records = sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("kvplan/model_configs/checkpoints/"))
    assert records == sorted(p.name for p in (src / "model_configs" / "checkpoints").iterdir())
    sources = {p.relative_to(src).as_posix() for p in (src / "kvplan").rglob("*.py")}
    assert sources - set(names) == set()  # a subpackage missing from pyproject's `packages` list
    data = {p.relative_to(src).as_posix() for p in (src / "kvplan" / "data").glob("*.json")}
    assert data - set(names) == set()

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = ("import kvplan, kvplan.sources.library as lib; "
             "print(kvplan.__file__); print(lib.library_dir()); print(len(kvplan.bundled_ids())); "
             f"print(kvplan.load_model({QWEN3!r}).num_layers); "
             "print(kvplan.load_model('openai/gpt-oss-20b').checkpoint_total.total_bytes)")
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(site)})
    assert run.returncode == 0, run.stderr
    module, folder, count, layers, record = run.stdout.split()
    assert int(record) == 13_761_264_768  # the bundled checkpoint record, read from the installed package
    assert Path(module).is_relative_to(site)
    assert Path(folder) == site / "kvplan" / "model_configs"
    assert (int(count), int(layers)) == (len(shipped), 28)


def test_unknown_ids_get_the_closest_bundled_ones(monkeypatch):
    """Issue #12: a near miss names the bundled ids it is close to, in the one line (offline, so the Hub miss is
    the cache's)."""
    from kvplan.config.load import load_model
    from kvplan.errors import ModelNotAvailableError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for typed, expected in (("Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
                            ("qwen3-8b-instruct", "Qwen/Qwen3-8B"),
                            ("meta-llama/Lama-3.1-8B", "meta-llama/Llama-3.1-8B")):
        with pytest.raises(ModelNotAvailableError) as info:
            load_model(typed)
        message = str(info.value)
        assert f"bundled ids close to it: {expected}" in message and "\n" not in message, message
    with pytest.raises(ModelNotAvailableError) as info:
        load_model("foo/bar")
    assert "close to it" not in str(info.value)
