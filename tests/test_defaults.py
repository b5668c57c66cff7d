"""Issue #24 item 5: one set of defaults (kvplan.planning.defaults) that the CLI, the API and the app all plan with.
The app's side is tests/test_app.py::test_capacity_defaults_equal_kvplan_plan; here the CLI and the API agree,
and the defaults are the engines' own (read from their source)."""

from __future__ import annotations

import contextlib
import io
import json
import shlex

import pytest

import kvplan
from kvplan.cli import build_parser, main
from kvplan.planning import defaults

LLAMA = "meta-llama/Llama-3.1-8B"


def cli_json(argv: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) in (0, 3)
    return json.loads(out.getvalue())


@pytest.mark.parametrize("version, expected", [
    ("0.19.0", 0.9),    # vllm 0.19.0 vllm/config/cache.py:41 gpu_memory_utilization Field(default=0.9)
    ("0.20.0", 0.92),   # vllm 0.20.0 vllm/config/cache.py:66 Field(default=0.92)
    ("0.33.0", 0.92),   # vllm 0.33.0 vllm/config/cache.py:215 Field(default=0.92)
    (None, 0.92),       # the latest release kvplan read
])
def test_vllm_utilization_is_the_versions_own(version, expected):
    assert defaults.utilization("vllm", version) == expected
    assert kvplan.plan(LLAMA, max_model_len=8192, engine_version=version).gpu_memory_utilization == expected


def test_the_cli_and_the_api_plan_the_same_defaults():
    """Nothing chosen: the model's context (Llama-3.1-8B: max_position_embeddings 131,072), one H100 SXM, vLLM
    0.33.0 at 0.92, the same in both faces."""
    api = kvplan.plan(LLAMA)
    cli = cli_json(["plan", LLAMA])
    assert (api.max_model_len, api.gpu, api.num_gpus, api.engine_version) == (131_072, "H100-SXM", 1, "0.33.0")
    for key in ("max_model_len", "gpu", "num_gpus", "engine", "engine_version", "gpu_memory_utilization",
                "kv_cache_tokens", "max_concurrency", "max_num_seqs", "max_num_batched_tokens", "block_size"):
        assert cli[key] == getattr(api, key), key


def test_the_parser_reads_the_one_definition():
    plan = build_parser()._subparsers._group_actions[0].choices["plan"]
    got = {a.dest: a.default for a in plan._actions}
    assert (got["engine"], got["gpu"], got["pp"], got["kv_dtype"], got["max_model_len"]) == (
        defaults.ENGINE, defaults.GPU, defaults.PIPELINE_STAGES, defaults.KV_DTYPE, defaults.MAX_MODEL_LEN)
    assert "default vLLM 0.92 (0.90 before 0.20)" in " ".join(plan.format_help().split())


@pytest.mark.parametrize("settings, line", [
    ({}, "kvplan plan meta-llama/Llama-3.1-8B"),   # every setting at its default is left out
    (dict(engine="vllm", gpu="H100-SXM", num_gpus=1, pp=1, kv_dtype="auto", engine_version="0.33.0"),
     "kvplan plan meta-llama/Llama-3.1-8B"),
    (dict(engine="sglang", num_gpus=2, max_model_len=32768, gpu_memory_utilization=0.85),
     "kvplan plan meta-llama/Llama-3.1-8B --engine sglang --num-gpus 2 --max-model-len 32768 "
     "--gpu-memory-utilization 0.85"),
    (dict(engine="sglang", engine_version="0.33.0"),   # 0.33.0 is vLLM's latest, not SGLang's: it stays
     "kvplan plan meta-llama/Llama-3.1-8B --engine sglang --engine-version 0.33.0"),
])
def test_cli_command_names_what_differs_from_the_defaults(settings, line):
    assert defaults.cli_command(LLAMA, **settings) == line


def test_cli_command_plans_what_its_settings_plan():
    settings = dict(gpu="L40S", num_gpus=2, max_model_len=16384, kv_dtype="fp8", expert_parallel=None,
                    lora={"max_loras": 2, "max_lora_rank": 16})
    line = defaults.cli_command(LLAMA, **settings)
    cli = cli_json(shlex.split(line)[1:])
    api = kvplan.plan(LLAMA, **settings)
    assert (cli["kv_cache_tokens"], cli["max_concurrency"]) == (api.kv_cache_tokens, api.max_concurrency)
