"""Issue #14, the config boundary: a malformed quantization_config, sizes past any float, a model that caches
nothing, a lone surrogate, no dtype, bad flags. Each is one line from the CLI (exit 2) and a KVPlanError from the
API, never AttributeError / TypeError / OverflowError / UnicodeEncodeError."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import kvplan
from kvplan.cli import main
from kvplan.errors import ConfigError, KVPlanError, ModelNotAvailableError, WorkloadError
from kvplan.gpus import custom_gpu, resolve_gpu

ROOT = Path(__file__).resolve().parents[1]
LLAMA = "meta-llama/Llama-3.1-8B"
BASE = json.loads((ROOT / "model_configs" / "meta-llama__Llama-3.1-8B.json").read_text())


def config(**changes) -> dict:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


def cli(tmp_path: Path, capsys, data: dict | None, *args: str) -> tuple[int, str, str]:
    """`kvplan ...` in process; `data` is written as ./config.json and passed as the model."""
    argv = list(args)
    if data is not None:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(data))
        argv.insert(1, str(path))
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(rc: int, err: str, words: str) -> None:
    assert rc == 2 and err.count("\n") == 1 and words in err, err[:400]
    assert len(err) < 400


def ct(scheme, **top) -> dict:
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": scheme}, **top}


# ---------------------------------------------------------------------------------------------- A: quantization

@pytest.mark.parametrize("qc, words", [
    # each raised AttributeError / TypeError / ValueError in `kvplan plan` (exit 1)
    (ct("W4A16"), "'config_groups.group_0' must be an object, got 'W4A16'"),
    (ct({"weights": "int4"}), "'weights' must be an object, got 'int4'"),
    (ct({"weights": {}, "input_activations": 5}), "'input_activations' must be an object, got 5"),
    ({"quant_method": "fp8", "modules_to_not_convert": 5}, "skipped modules must be a list of module names, got 5"),
    ({"quant_method": "fp8", "modules_to_not_convert": "lm_head"}, "must be a list of module names, got 'lm_head'"),
    ({"quant_method": "fp8", "modules_to_not_convert": [["lm_head"]]}, "must be module names (text), got ['lm_head']"),
    ({"quant_method": "gptq", "modules_to_not_convert": [{"a": 1}]}, "must be module names (text), got {'a': 1}"),
    (ct({"weights": {"strategy": "block", "block_structure": 5}}), "'block_structure' must be [rows, cols], got 5"),
    ({"quant_method": "fp8", "weight_block_size": "x"}, "'weight_block_size' must be [rows, cols], got 'x'"),
    ({"quant_method": "fp8", "weight_block_size": [128, "x"]}, "'weight_block_size' must be an integer, got 'x'"),
    (ct({"weights": {}}, ignore=["model.layers." + "9" * 5000 + ".mlp"]), "names a layer past 10,000"),
    ({"quant_method": "gptq", "bits": 10**400}, "config field 'bits' must be <= 32"),
])
def test_malformed_quantization_config_is_one_line(tmp_path, capsys, qc, words):
    data = config(quantization_config=qc)
    with pytest.raises(ConfigError, match=None) as caught:
        kvplan.plan(kvplan.parse_config(data), gpu="H100", max_model_len=4096)
    assert words in str(caught.value) and "\n" not in str(caught.value)
    one_line(*cli(tmp_path, capsys, data, "plan", "--max-model-len", "4096")[::2], words)


def test_the_estimate_keeps_its_kv_figure_and_names_the_weights_error():
    """The KV cache needs no quantization_config: the estimate stands, the weights say what is wrong."""
    model = kvplan.parse_config(config(quantization_config={"quant_method": "fp8", "modules_to_not_convert": 5}))
    assert kvplan.estimate(model, seq_len=1024).kv_cache_bytes == 32 * 2 * 8 * 128 * 1024 * 2
    assert "must be a list of module names" in model.arch_error


# ---------------------------------------------------------------------------------------------- B: overflow

@pytest.mark.parametrize("key, value, words", [
    ("head_dim", 10**400, "'head_dim' must be <= 1,099,511,627,776, got an integer of 1,329 bits"),
    ("vocab_size", 10**305, "'vocab_size' must be <= 1,099,511,627,776"),
    # hostile config values (inputs); the limit 1,099,511,627,776 = 2^40, the reader's bound
    ("hidden_size", 1e300, "'hidden_size' must be <= 1,099,511,627,776, got 1e+300"),
    ("num_key_value_heads", 2**41, "'num_key_value_heads' must be <= 1,099,511,627,776"),
    ("num_hidden_layers", 10**30, "'num_hidden_layers' must be <= 10,000"),
    ("num_attention_heads", -(10**400), "must be >= 1, got a negative integer of 1,329 bits"),
])
def test_sizes_past_the_boundary_are_refused(tmp_path, capsys, key, value, words):
    """OverflowError (exit 1) before: 10**400 / 2**30 has no float."""
    data = config(**{key: value})
    with pytest.raises(ConfigError) as caught:
        kvplan.plan(kvplan.parse_config(data), gpu="H100", max_model_len=4096)
    assert words in str(caught.value)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    rc = main(["plan", str(path), "--max-model-len", "4096"])
    one_line(rc, capsys.readouterr().err, words)


@pytest.mark.parametrize("flag", ["--head-dim", "--kv-heads", "--hidden-size", "--num-heads"])
def test_override_flags_have_the_same_ceiling(capsys, flag):
    rc = main(["estimate", LLAMA, "--seq-len", "8", flag, str(10**400)])
    one_line(rc, capsys.readouterr().err, f"{flag} must be between 1 and 1,099,511,627,776")


@pytest.mark.parametrize("spec, words", [
    ("custom:" + "9" * 60 + "GiB", "memory over 1 PiB is no GPU"),
    ("custom:80GiB:" + "9" * 60 + "GB/s", "bandwidth over 1 PB/s is no GPU"),
    ("custom:80GiB:1000GB/s:" + "9" * 30 + "TFLOPS", "compute over 1 EFLOPS is no GPU"),
    ("custom:" + "9" * 400 + "GiB:1000GB/s", "is 419 characters long"),
])
def test_absurd_custom_gpus_are_one_line(capsys, spec, words):
    with pytest.raises(WorkloadError, match="no GPU|characters long"):
        resolve_gpu(spec)
    one_line(main(["plan", LLAMA, "--gpu", spec, "--max-model-len", "4096"]), capsys.readouterr().err, words)


# hostile memory sizes (inputs)
@pytest.mark.parametrize("memory", [1e308, float("inf"), float("nan")])
def test_custom_gpu_api_refuses_what_has_no_byte_count(memory):
    with pytest.raises(WorkloadError, match="no GPU|finite number"):
        custom_gpu(memory, 1000)


def test_plan_lengths_have_a_ceiling():
    with pytest.raises(WorkloadError, match="max_model_len must be between 1 and 1,099,511,627,776, got an integer of 1,329 bits"):
        kvplan.plan(LLAMA, gpu="H100", max_model_len=10**400)


# ---------------------------------------------------------------------------------------------- C: no KV cache

@pytest.mark.parametrize("changes", [
    {"layer_types": ["mlp"] * 32},
])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_model_that_caches_nothing_gets_one_line(tmp_path, capsys, changes, engine):
    """`min() arg is an empty sequence` in vLLM's grouping before; SGLang called it a Mamba model."""
    data = config(**changes)
    model = kvplan.parse_config(data)
    assert kvplan.estimate(model, seq_len=4096).kv_cache_bytes == 0
    with pytest.raises(WorkloadError, match=f"caches nothing .* so {engine} has no KV pool to size"):
        kvplan.plan(model, engine=engine, gpu="H100", max_model_len=4096)
    rc, _, err = cli(tmp_path, capsys, data, "plan", "--engine", engine, "--max-model-len", "4096")
    one_line(rc, err, "its KV cache is 0 B")


def test_every_layer_kv_shared_caches_nothing_too():
    data = json.loads((ROOT / "model_configs" / "google__gemma-3-1b-it.json").read_text())
    data["num_kv_shared_layers"] = data["num_hidden_layers"]
    with pytest.raises(WorkloadError, match="caches nothing"):
        kvplan.plan(kvplan.parse_config(data), gpu="H100", max_model_len=4096)


def test_transformers_plans_it_with_an_empty_cache():
    p = kvplan.plan(kvplan.parse_config(config(layer_types=["mlp"] * 32)), engine="hf", gpu="H100",
                    max_model_len=4096)
    assert p.kv_pool_bytes >= 0 and p.fits


# ---------------------------------------------------------------------------------------------- D: surrogates

@pytest.mark.parametrize("changes, field", [
    ({"model_type": "\ud800"}, "field 'model_type'"),
    ({"architectures": ["\ud800"]}, "field 'architectures'"),
    ({"rope_scaling": {"rope_type": "x\udfff"}}, "field 'rope_scaling'"),
    ({"\ud800": 1}, "a field name"),
])
def test_a_lone_surrogate_is_refused_where_the_config_is_read(tmp_path, capsys, changes, field):
    """UnicodeEncodeError in the CLI and PydanticSerializationError from model_dump_json() before."""
    data = config(**changes)
    with pytest.raises(ConfigError, match=f"not valid Unicode in {field}"):
        kvplan.parse_config(data)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))  # ensure_ascii: the file holds the six characters \ud800, as a hostile one would
    with pytest.raises(ConfigError, match="config.json holds text that is not valid Unicode"):
        kvplan.load_model(path)
    one_line(main(["estimate", str(path), "--seq-len", "8"]), capsys.readouterr().err, "lone surrogate")


def test_a_surrogate_in_a_nested_text_config_too():
    with pytest.raises(ConfigError, match="not valid Unicode in field 'text_config'"):
        kvplan.parse_config({"model_type": "gemma3", "text_config": {**BASE, "model_type": "\udc80"}})


def test_an_undecodable_path_prints_escaped(capsys):
    """argv bytes that are not UTF-8 arrive as surrogateescape'd text: the message escapes them."""
    rc = main(["estimate", "./no-such-\udcff.json", "--seq-len", "8"])
    one_line(rc, capsys.readouterr().err, "no such file or folder: ./no-such-\\udcff.json")


# ---------------------------------------------------------------------------------------------- E: dtype

def test_no_dtype_says_what_was_assumed(capsys):
    est = kvplan.estimate("openai/gpt-oss-20b", seq_len=1000)
    assert est.kv_dtype == "float32"
    assert any("names no dtype, so this assumes float32" in n and "--dtype bf16" in n for n in est.notes)
    assert main(["estimate", "openai/gpt-oss-20b", "--seq-len", "1000"]) == 0
    assert "note: the config names no dtype, so this assumes float32" in capsys.readouterr().out


@pytest.mark.parametrize("model, kwargs", [
    ("openai/gpt-oss-20b", {"dtype": "bf16"}),       # the user chose
    ("openai/gpt-oss-20b", {"kv_dtype": "fp32"}),
    (LLAMA, {}),                                     # the config names bfloat16
])
def test_no_note_when_the_dtype_is_known(model, kwargs):
    est = kvplan.estimate(model, seq_len=1000, **kwargs)
    assert not any("names no dtype" in n for n in est.notes)


def test_the_numbers_of_a_config_with_a_dtype_are_unchanged():
    assert kvplan.estimate(LLAMA, seq_len=1000).kv_cache_bytes == 32 * 2 * 8 * 128 * 1000 * 2


# ---------------------------------------------------------------------------------------------- F: flags

@pytest.mark.parametrize("cache", ["dynamic", "static", "offloaded", "quantized"])
@pytest.mark.parametrize("value", ["-5", "0", str(2**21)])
def test_q_group_size_is_checked_for_every_cache(capsys, cache, value):
    rc = main(["estimate", LLAMA, "--seq-len", "8", "--cache", cache, "--q-group-size", value])
    one_line(rc, capsys.readouterr().err, "q_group_size must be between 1 and 1,048,576")


@pytest.mark.parametrize("value, shown", [("abc", "'abc'"), (-1, "-1"), (0, "0"), (2.5, "2.5"), (True, "True")])
def test_an_invalid_max_position_embeddings_is_not_called_missing(tmp_path, capsys, value, shown):
    data = config(max_position_embeddings=value)
    words = f"sets max_position_embeddings {shown}, not a token count from 1 to 2**40"
    with pytest.raises(WorkloadError, match="not a token count"):
        kvplan.plan(kvplan.parse_config(data), gpu="H100")
    rc, _, err = cli(tmp_path, capsys, data, "plan")
    one_line(rc, err, words)


def test_a_missing_one_is_still_called_missing():
    data = config(model_type="acme")  # a family with no class default (LlamaConfig's is 2048)
    del data["max_position_embeddings"]
    with pytest.raises(WorkloadError, match="has no max_position_embeddings: pass --max-model-len N"):
        kvplan.plan(kvplan.parse_config(data), gpu="H100")


def test_revision_is_for_hub_ids_only(tmp_path, capsys):
    """It sent a bundled id to the Hub unasked (offline: an error about the Hub), and a path ignored it."""
    with pytest.raises(ModelNotAvailableError, match="--revision applies to Hub ids only, and .* is bundled"):
        kvplan.load_model(LLAMA, revision="main")
    one_line(main(["estimate", LLAMA, "--seq-len", "8", "--revision", "v1"]), capsys.readouterr().err,
             f"--revision applies to Hub ids only, and {LLAMA} is bundled")
    rc, _, err = cli(tmp_path, capsys, config(), "estimate", "--seq-len", "8", "--revision", "v1")
    one_line(rc, err, "is a local path")


def test_every_refusal_here_is_a_kvplan_error():
    assert issubclass(ModelNotAvailableError, KVPlanError) and issubclass(ConfigError, KVPlanError)


# ---------------------------------------------------------------------------------------- issue #25: floats, echoes, depth

JAMBA = json.loads((ROOT / "model_configs" / "ai21labs__AI21-Jamba-1.5-Mini.json").read_text())


def nested(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("rope, words", [
    # OverflowError from int(tokens x factor) before
    ({"rope_type": "yarn", "factor": 1e308, "original_max_position_embeddings": 8192},
     "'rope_scaling.factor' must be between 0.001 and 1024, got 1e+308"),
    ({"rope_type": "dynamic", "factor": float("inf")}, "'rope_scaling.factor' must be a number, got inf"),
    # taken as 1.0 without a word before: the plan's context limit then said 131,072 for any of them
    ({"rope_type": "dynamic", "factor": float("nan")}, "'rope_scaling.factor' must be a number, got nan"),
    ({"rope_type": "linear", "factor": -4.0}, "must be between 0.001 and 1024, got -4.0"),
    ({"rope_type": "linear", "factor": "8"}, "'rope_scaling.factor' must be a number, got '8'"),
    ({"rope_type": "dynamic", "factor": 5e-324}, "must be between 0.001 and 1024, got 5e-324"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": -1},
     "'rope_scaling.original_max_position_embeddings' must be >= 1, got -1"),
])
def test_a_hostile_rope_factor_is_one_line(tmp_path, capsys, rope, words):
    data = config(rope_scaling=rope)
    with pytest.raises(ConfigError, match="rope_scaling") as caught:
        kvplan.parse_config(data)
    assert words in str(caught.value)
    rc, _, err = cli(tmp_path, capsys, data, "plan", "--max-model-len", "4096")
    one_line(rc, err, words)


@pytest.mark.parametrize("changes, words", [
    ({"partial_rotary_factor": float("nan")}, "'partial_rotary_factor' must be a number, got nan"),
    ({"partial_rotary_factor": 1.5}, "'partial_rotary_factor' must be between 0.001 and 1, got 1.5"),
])
def test_a_hostile_rotary_fraction_is_refused(changes, words):
    """taken as 1.0 (all of each head rotates) without a word before"""
    with pytest.raises(ConfigError) as caught:
        kvplan.parse_config(config(**changes))
    assert words in str(caught.value)


# hostile inputs
@pytest.mark.parametrize("value", ["x" * 3_000_000, nested(2_000)], ids=["3 MB string", "nested 2,000 deep"])
@pytest.mark.parametrize("key", ["num_hidden_layers", "torch_dtype", "model_type", "num_key_value_heads"])
def test_a_huge_or_deep_value_is_quoted_short(tmp_path, capsys, key, value):
    """A 3 MB string was echoed whole (a 3 MB error line), and the repr of a list nested 2,000 deep raised
    RecursionError through the API (a JSON file that deep is refused as it is parsed); a 3 MB model_type was
    accepted and echoed in every warning."""
    data = config(**{key: value})
    with pytest.raises(ConfigError) as caught:
        kvplan.plan(kvplan.parse_config(data), gpu="H100", max_model_len=4096)
    message = str(caught.value)
    assert repr(key) in message and len(message) < 300 and "…" in message, message[:300]
    if isinstance(value, str):
        rc, _, err = cli(tmp_path, capsys, data, "plan", "--max-model-len", "4096")
        one_line(rc, err, repr(key))


def test_every_kvplan_message_is_bounded():
    """The guard behind `shown`: a path or a name quoted whole still gives one line a person can read."""
    message = str(ModelNotAvailableError("no such file or folder: " + "a/" * 100_000 + ": check the path"))
    assert len(message) == 1_000 and message.startswith("no such file or folder: a/a/")
    assert message.endswith("a/: check the path") and "…" in message


@pytest.mark.parametrize("changes, words", [
    # every layer became Mamba without a word before (offset 50 of period 100 on 32 layers)
    ({"attn_layer_period": 100, "attn_layer_offset": 50}, "'attn_layer_offset' is 50, not below its period 100"),
    ({"attn_layer_offset": 8}, "'attn_layer_offset' is 8, not below its period 8"),
    ({"expert_layer_period": 64, "expert_layer_offset": 40}, "'expert_layer_offset' is 40"),
])
def test_a_jamba_offset_past_its_layers_is_refused(changes, words):
    with pytest.raises(ConfigError) as caught:
        kvplan.plan(kvplan.parse_config({**JAMBA, **changes}), gpu="H100", max_model_len=4096)
    assert words in str(caught.value)
    assert kvplan.parse_config(JAMBA).attention_kinds == {"state": 28, "full": 4}  # the real one: attention 4 of 8


@pytest.mark.parametrize("key", ["load_in_4bit", "bnb_4bit_use_double_quant"])
def test_a_bitsandbytes_switch_must_be_true_or_false(key):
    """load_in_4bit: "yes" was priced as 8-bit without a word"""
    qc = {"quant_method": "bitsandbytes", "load_in_4bit": True, key: "yes"}
    with pytest.raises(ConfigError, match=f"'quantization_config.{key}' must be true or false, got 'yes'"):
        kvplan.plan(kvplan.parse_config(config(quantization_config=qc)), gpu="H100", max_model_len=4096)


@pytest.mark.parametrize("file, path", [
    ("XiaomiMiMo__MiMo-V2-Flash.json", ("swa_head_dim",)),          # named in a note
    ("Qwen__Qwen2.5-VL-7B-Instruct.json", ("architectures",)),        # names the tower's class
    ("meta-llama__Llama-3.1-8B.json", ("quantization_config",)),     # quant_method, strategy, format: str() of them
])
def test_a_deep_value_that_kvplan_only_names_is_named_short(file, path):
    """str() or repr() of a list nested 2,000 deep raised RecursionError through the API."""
    data = json.loads((ROOT / "model_configs" / file).read_text())
    data[path[0]] = {"quant_method": nested(2_000)} if path[0] == "quantization_config" else nested(2_000)
    try:
        model = kvplan.load_model(data)
        plan = kvplan.plan(model, gpu="H100", max_model_len=4096)
    except KVPlanError as exc:
        assert "quant_method" in str(exc) and len(str(exc)) < 300
        return
    assert all(len(n) < 600 for n in (*model.notes, *plan.notes, *plan.warnings))
