"""The public API: the exported names, the Estimate model, its breakdown and its formula."""

from __future__ import annotations

import json
import subprocess
import sys

import pydantic
import pytest

import kvplan

EXPECTED_ALL = [
    "ConfigError",
    "Estimate",
    "GroupRow",
    "KVPlanError",
    "ModelNotAvailableError",
    "ModelSpec",
    "Overrides",
    "Plan",
    "UnsupportedArchitectureError",
    "WorkloadError",
    "__version__",
    "bundled_ids",
    "deployable",
    "estimate",
    "fewest_gpus",
    "load_model",
    "parse_config",
    "plan",
    "plan_fixes",
    "recommend",
    "resolve_dtype",
]


def test_all_is_locked():
    """Adding or removing a public name is an API change: update this list on purpose."""
    assert sorted(kvplan.__all__) == EXPECTED_ALL
    assert len(set(kvplan.__all__)) == len(kvplan.__all__)
    for name in kvplan.__all__:
        assert hasattr(kvplan, name), name


def test_error_hierarchy():
    assert issubclass(kvplan.ConfigError, kvplan.KVPlanError)
    assert issubclass(kvplan.UnsupportedArchitectureError, kvplan.ConfigError)
    assert issubclass(kvplan.ModelNotAvailableError, kvplan.KVPlanError)
    assert issubclass(kvplan.WorkloadError, kvplan.KVPlanError)
    assert not issubclass(kvplan.KVPlanError, (ValueError, TypeError))  # callers catch kvplan's own errors


def test_estimate_is_a_frozen_pydantic_model():
    e = kvplan.estimate("meta-llama/Llama-3.1-8B", 4096)
    assert isinstance(e, pydantic.BaseModel) and isinstance(e, kvplan.Estimate)
    assert all(isinstance(g, kvplan.GroupRow) and isinstance(g, pydantic.BaseModel) for g in e.groups)
    with pytest.raises(pydantic.ValidationError):
        e.kv_cache_bytes = 0


@pytest.mark.parametrize(
    "model_id, kwargs",
    [
        ("meta-llama/Llama-3.1-8B", dict(seq_len=4096)),
        ("google/gemma-2-9b", dict(seq_len=8192, batch_size=3, cache="offloaded_static")),
        ("meta-llama/Llama-3.1-8B", dict(seq_len=4200, kv_dtype="int4", cache="quantized", prompt_len=4000)),
        ("ai21labs/AI21-Jamba-1.5-Mini", dict(seq_len=100)),
    ],
)
def test_estimate_round_trips_through_json(model_id, kwargs):
    """The fast construction path builds the same object pydantic's validation would."""
    e = kvplan.estimate(model_id, **kwargs)
    dumped = e.model_dump(mode="json")
    json.dumps(dumped)
    again = kvplan.Estimate.model_validate(dumped)
    assert again == e
    assert again.model_dump() == e.model_dump()
    assert kvplan.Estimate.model_validate_json(e.model_dump_json()) == e


@pytest.mark.parametrize("model_id", ["meta-llama/Llama-3.1-8B", "google/gemma-2-9b", "openai/gpt-oss-20b",
                                      "deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-Next-80B-A3B-Thinking"])
def test_groups_sum_to_the_total(model_id):
    e = kvplan.estimate(model_id, 10_000, 2)
    assert sum(g.bytes for g in e.groups) == e.kv_cache_bytes - e.bookkeeping_bytes
    assert sum(g.logical_bytes for g in e.groups) == e.logical_bytes - e.bookkeeping_bytes
    assert sum(g.layers for g in e.groups) == kvplan.load_model(model_id).num_layers


def test_formula_shows_the_substituted_numbers():
    e = kvplan.estimate("meta-llama/Llama-2-70b-hf", 4096, 2, "fp16")
    for piece in ("80 full layers", "8 KV heads", "128 head_dim", "4,096 tokens", "2 seq", "2 B",
                  "= 2,684,354,560 B", "(2.50 GiB)"):
        assert piece in e.formula, piece
    assert e.groups[0].formula in e.formula


def test_mla_formula_names_latent_and_rope():
    e = kvplan.estimate("deepseek-ai/DeepSeek-V3", 1000)
    assert "61 mla layers x (512 latent + 64 rope) x 1,000 tokens" in e.formula


def test_unit_properties():
    e = kvplan.estimate("meta-llama/Llama-2-70b-hf", 4096, 1, "fp16")
    assert e.kv_cache_gib == 1.25
    assert e.kv_cache_gb == 1.34217728


def test_model_spec_and_overrides():
    spec = kvplan.load_model("meta-llama/Llama-3.1-8B")
    assert isinstance(spec, kvplan.ModelSpec)
    assert (spec.num_layers, spec.kv_heads, spec.head_dim) == (32, 8, 128)
    assert kvplan.load_model("meta-llama/Llama-3.1-8B", overrides=kvplan.Overrides(num_layers=4)).num_layers == 4
    assert "meta-llama/Llama-3.1-8B" in kvplan.bundled_ids()


def test_parse_config_from_a_dict():
    spec = kvplan.parse_config({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
                                "hidden_size": 256, "torch_dtype": "float16"}, name="tiny")
    assert spec.name == "tiny" and spec.kv_heads == 4 and spec.head_dim == 64


def test_import_is_light():
    """`import kvplan` pulls in neither torch, transformers, streamlit nor huggingface_hub."""
    code = ("import sys, kvplan; kvplan.estimate('google/gemma-2-9b', 100); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'torch', 'transformers', 'streamlit', 'huggingface_hub', 'numpy', 'plotly'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plan_fixes_are_data_with_their_plans():
    """Issue #24: the API gives each fix as data; its figures are plan()'s for the settings its flags set."""
    fixes = kvplan.plan_fixes("openai/gpt-oss-120b", max_model_len=131072)
    fp8 = next(f for f in fixes if f.settings == {"kv_dtype": "fp8"})
    again = kvplan.plan("openai/gpt-oss-120b", max_model_len=131072, kv_dtype="fp8")
    assert fp8.fits and (fp8.kv_cache_tokens, fp8.max_concurrency) == (again.kv_cache_tokens, again.max_concurrency)
    assert fp8.flags == "--kv-dtype fp8" and fp8.command == again.command
    assert kvplan.plan_fixes("meta-llama/Llama-3.1-8B", max_model_len=8192) == []   # it fits: nothing to fix


def test_workload_plan_takes_a_model_id():
    """Issue #24: workload_plan("meta-llama/Llama-3.1-8B", ...) raised 'str' object has no attribute
    'require_arch'; the id is read as plan() reads it, and gives the ModelSpec's answer."""
    from kvplan.planning.workload import RequestMix, workload_plan

    p = kvplan.plan("meta-llama/Llama-3.1-8B", max_model_len=8192)
    by_id = workload_plan("meta-llama/Llama-3.1-8B", p, RequestMix(2000, 500))
    by_spec = workload_plan(kvplan.load_model("meta-llama/Llama-3.1-8B"), p, RequestMix(2000, 500))
    assert by_id == by_spec and by_id.concurrent_requests > 0


def test_every_entry_point_takes_a_path_a_name_or_a_config_dict():
    """`kvplan.plan(Path(...))` failed with "'PosixPath' object has no attribute 'dims'" (config.load.as_model now
    reads str, os.PathLike and a config's data alike). Llama-3.1-8B on an H100: 452,096 tokens whichever way it is
    named (the figure test_readme's console block prints for the bundled id)."""
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "model_configs" / "meta-llama__Llama-3.1-8B.json"
    data = json.loads(path.read_text())
    tokens = {kvplan.plan(m, gpu="H100").kv_cache_tokens for m in (path, str(path), data, "meta-llama/Llama-3.1-8B")}
    assert tokens == {452_096}
    # 1,000 tokens x 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072,000 B
    assert kvplan.estimate(path, seq_len=1000).kv_cache_bytes == 131_072_000
    with pytest.raises(kvplan.KVPlanError, match="not int: pass one of those"):
        kvplan.plan(3, gpu="H100")
