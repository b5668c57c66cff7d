"""`plan()` / `fewest_gpus()` and `kvplan plan`: the output contract, bad input, and a fuzz of the arguments.

Bad input is a one-line KVPlanError (the CLI: exit 2, one stderr line); a model that cannot fit is an
answer (fits false, a shortfall), never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvplan
from kvplan.cli import main
from kvplan.config import load
from kvplan.config.load import load_model
from kvplan.errors import KVPlanError, ModelNotAvailableError, WorkloadError
from kvplan.gpus import list_gpus
from kvplan.planning.planner import plan
from kvplan.planning.result import Plan
from kvplan.planning.search import fewest_gpus
from kvplan.sources.library import bundled_ids
from kvplan.weights import split as weights_split

REPO = Path(__file__).resolve().parents[1]
JSON_KEYS = ("weights_bytes", "activation_bytes", "non_torch_bytes", "kv_pool_bytes", "kv_bytes_per_token",
             "kv_cache_tokens", "max_concurrency", "fits", "vllm_command")


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `kvplan plan ...` (argparse usage errors exit through SystemExit)."""
    try:
        code = main(["plan", *argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------- output contract


def test_cli_json_has_the_contract_keys(capsys):
    code, out, err = _cli(capsys, "meta-llama/Llama-3.1-8B", "--engine", "vllm", "--gpu", "H100-80GB",
                          "--max-model-len", "8192", "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    for key in JSON_KEYS:
        assert key in data, key
    assert data["fits"] is True
    # 32 x 2 x 8 x 128 x 2 B
    assert data["kv_bytes_per_token"] == 131_072
    assert data["kv_cache_tokens"] == data["num_blocks"] * 16
    # vLLM 0.33 by default: 0.92 of the card, and its CUDA-graph estimate is one more line of the budget
    assert data["engine_version"] == "0.33.0" and data["gpu_memory_utilization"] == 0.92
    assert list(data["extra"]) == ["V2 sampler buffers", "CUDA graphs (estimate)"]
    assert data["kv_pool_bytes"] == (math.ceil(0.92 * data["gpu_memory_bytes"]) - data["weights_bytes"]
                                     - data["activation_bytes"] - data["non_torch_bytes"] - sum(data["extra"].values()))
    assert Plan.model_validate(data).model == "meta-llama/Llama-3.1-8B"


def test_cli_json_with_every_flag(capsys):
    code, out, _ = _cli(capsys, "meta-llama/Llama-3.1-70B", "--engine", "vllm", "--gpu", "H100-80GB",
                        "--num-gpus", "4", "--tp", "2", "--pp", "2", "--max-model-len", "16384",
                        "--gpu-memory-utilization", "0.92", "--kv-dtype", "fp8", "--dtype", "bfloat16",
                        "--engine-version", "0.18.0", "--json")
    assert code == 0
    data = json.loads(out)
    assert (data["tensor_parallel_size"], data["pipeline_parallel_size"], data["num_gpus"]) == (2, 2, 4)
    assert data["engine_version"] == "0.18.0" and data["kv_cache_dtype"] == "float8_e4m3"
    command = data["vllm_command"]
    for flag in ("--tensor-parallel-size 2", "--pipeline-parallel-size 2", "--max-model-len 16384",
                 f"--max-num-seqs {data['max_num_seqs']}", "--kv-cache-dtype fp8", "--gpu-memory-utilization 0.92"):
        assert flag in command, flag


def test_vllm_command_flags():
    p = plan("meta-llama/Llama-3.1-8B", gpu="L40S", tp=2, max_model_len=4096)
    assert p.vllm_command.startswith("vllm serve meta-llama/Llama-3.1-8B ")
    assert "--tensor-parallel-size 2" in p.vllm_command
    assert "--pipeline-parallel-size" not in p.vllm_command          # only when PP > 1
    assert "--max-model-len 4096" in p.vllm_command
    assert "--max-num-seqs 256" in p.vllm_command                    # vLLM's default below 70 GiB
    assert "--gpu-memory-utilization 0.9" in p.vllm_command
    assert "--kv-cache-dtype" not in p.vllm_command
    assert "--quantization fp8" in plan("meta-llama/Llama-3.1-8B", max_model_len=4096,
                                        quantization="fp8").vllm_command


def test_cli_text_output(capsys):
    code, out, _ = _cli(capsys, "meta-llama/Llama-3.1-8B", "--max-model-len", "8192")
    assert code == 0
    assert ": FITS" in out.splitlines()[0]
    assert "GPU KV cache size:" in out and "Maximum concurrency for 8,192 tokens per request" in out
    assert "vllm serve meta-llama/Llama-3.1-8B" in out


def test_num_gpus_alone_means_tp():
    p = plan("meta-llama/Llama-3.1-8B", num_gpus=4, max_model_len=8192)
    assert (p.tensor_parallel_size, p.pipeline_parallel_size, p.num_gpus) == (4, 1, 4)
    p = plan("meta-llama/Llama-3.1-8B", num_gpus=4, pp=2, max_model_len=8192)
    assert (p.tensor_parallel_size, p.pipeline_parallel_size) == (2, 2)


def test_default_max_model_len_is_the_config_context():
    # Llama-3.1-8B config.json max_position_embeddings 131,072
    assert plan("meta-llama/Llama-3.1-8B").max_model_len == 131_072


def test_float32_checkpoints_are_served_in_16_bit_by_default():
    """vLLM's dtype "auto" downcasts float32 configs (and configs naming no dtype) to bf16, fp16 without bf16."""
    assert load_model("openai-community/gpt2").dtype.name == "float32"
    assert plan("openai-community/gpt2", gpu="H100-80GB").dtype == "bfloat16"
    assert plan("openai-community/gpt2", gpu="T4").dtype == "float16"
    explicit = plan("openai-community/gpt2", dtype="float32")
    assert explicit.dtype == "float32"
    assert explicit.kv_bytes_per_token == 2 * plan("openai-community/gpt2").kv_bytes_per_token


# ------------------------------------------------------------------------------------- bad input: plan()


BAD = [
    (dict(gpu="Z9000"), "unknown GPU"),
    (dict(gpu=""), "unknown GPU"),
    (dict(gpu="custom:24"), "custom GPU"),
    (dict(tp=3), "attention heads"),
    (dict(tp=64), "attention heads"),
    (dict(tp=0), "tensor parallel size"),
    (dict(tp=-2), "tensor parallel size"),
    (dict(tp=2.0), "tensor parallel size"),
    (dict(pp=0), "pipeline parallel size"),
    (dict(pp=33), "exceeds the model's 32 layers"),
    (dict(num_gpus=4, tp=2), "not the 4 asked for"),
    (dict(num_gpus=3, pp=2), "pipeline stages"),
    (dict(num_gpus=0), "num_gpus"),
    (dict(max_model_len=0), "max_model_len"),
    # bad inputs
    (dict(max_model_len=-8192), "max_model_len"),
    (dict(max_model_len=8192.5), "max_model_len"),
    (dict(max_model_len=True), "max_model_len"),
    (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(max_num_batched_tokens=-1), "max_num_batched_tokens"),
    (dict(block_size=0), "block_size"),
    (dict(block_size=7), "--block-size takes 1, 8, 16, 32, 64, 128, 256"),
    (dict(block_size=512), "not 512"),
    (dict(gpu_memory_utilization=0), "gpu_memory_utilization"),
    (dict(gpu_memory_utilization=-0.5), "gpu_memory_utilization"),
    (dict(gpu_memory_utilization=1.2), "gpu_memory_utilization"),
    (dict(gpu_memory_utilization="high"), "gpu_memory_utilization"),
    (dict(kv_dtype="fp7"), "unknown dtype"),
    (dict(kv_dtype="int4"), "KV cache dtype int4"),
    (dict(dtype="fp8"), "not a compute dtype"),
    (dict(engine="trtllm"), "unknown engine"),
    (dict(engine_version="latest"), "engine version"),
    (dict(quantization="awq"), "online quantization"),
]


@pytest.mark.parametrize("kwargs, fragment", BAD, ids=[f"{k}" for k, _ in BAD])
def test_bad_input_is_a_one_line_kvplan_error(kwargs, fragment):
    base = dict(max_model_len=8192)
    base.update(kwargs)
    with pytest.raises(KVPlanError) as info:
        plan("meta-llama/Llama-3.1-8B", **base)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message and len(message) < 400


def test_unknown_model_is_a_kvplan_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(KVPlanError):
        plan("no-such-org/no-such-model-xyz", max_model_len=8192)
    with pytest.raises(ModelNotAvailableError):
        plan("not a model id", max_model_len=8192)


def test_model_without_context_length_needs_max_model_len():
    with pytest.raises(WorkloadError, match="max-model-len"):
        plan("tiiuae/falcon-mamba-7b")
    p = plan("tiiuae/falcon-mamba-7b", max_model_len=4096)
    assert p.fits and p.kv_bytes_per_token == 0          # Mamba: a state per request, no per-token KV
    assert any("Mamba" in n for n in p.notes)


# ------------------------------------------------------------------------------------- does not fit


def test_model_that_cannot_fit_is_an_answer_with_a_shortfall():
    p = plan("meta-llama/Llama-3.1-405B", gpu="L4", max_model_len=8192)
    assert p.fits is False
    assert p.kv_pool_bytes == 0                      # the weights alone overflow the GPU: no pool, never < 0
    assert p.shortfall_bytes > p.weights_bytes - p.gpu_memory_bytes > 0
    assert p.max_model_len_that_fits == 0
    assert p.num_blocks == 0 and p.kv_cache_tokens == 0 and p.max_concurrency == 0


def test_request_longer_than_the_pool_reports_the_length_that_fits():
    p = plan("meta-llama/Llama-3.1-8B", gpu="L4", max_model_len=131_072)
    assert not p.fits and p.shortfall_bytes > 0
    # 131,072 the asked length (input)
    assert 0 < p.max_model_len_that_fits < 131_072
    assert p.max_model_len_that_fits * 131_072 <= p.kv_pool_bytes          # it fits, block-rounded ...
    fitted = plan("meta-llama/Llama-3.1-8B", gpu="L4", max_model_len=p.max_model_len_that_fits)
    assert fitted.fits                                                      # ... and planning it says so
    assert not plan("meta-llama/Llama-3.1-8B", gpu="L4", max_model_len=p.max_model_len_that_fits + 16).fits


def test_cli_does_not_fit_text_and_json(capsys):
    """A plan that does not fit exits 3 (kvplan --help) and prints the nearest fixes, each one planned."""
    code, out, err = _cli(capsys, "meta-llama/Llama-3.1-405B", "--gpu", "L4")
    assert code == 3 and err == ""
    assert "DOES NOT FIT (short by" in out.splitlines()[0]
    code, out, _ = _cli(capsys, "meta-llama/Llama-3.1-405B", "--gpu", "L4", "--json")
    data = json.loads(out)
    assert code == 3 and data["fits"] is False and data["shortfall_bytes"] > 0
    assert data["fixes"][0].startswith(f"{fewest_gpus('meta-llama/Llama-3.1-405B', gpu='L4').num_gpus} x L4")


def test_does_not_fit_suggests_what_does():
    """Issue #12: Mixtral-8x7B on one H100 was "short by 21.60 GiB" and nothing more. Each fix is a plan that fits."""
    from kvplan.planning.search import fixes

    found = fixes("mistralai/Mixtral-8x7B-v0.1", gpu="H100-SXM", max_model_len=8192)
    assert found[0][0].startswith("2 x H100-SXM") and ("weights quantized to fp8" in found[1][0]
                                                        and found[1][1] == "--quantization fp8")
    assert plan("mistralai/Mixtral-8x7B-v0.1", gpu="H100-SXM", max_model_len=8192, quantization="fp8").fits
    code = main(["plan", "mistralai/Mixtral-8x7B-v0.1", "--max-model-len", "8192", *found[0][1].split()])
    assert code == 0  # the flags printed beside a fix make that plan
    assert fixes("meta-llama/Llama-3.1-8B", gpu="H100-SXM", max_model_len=8192) == []  # it fits: nothing to fix


# ------------------------------------------------------------------------------------- bad input: CLI


CLI_BAD = [
    ("--gpu", "Z9000"),
    ("--tp", "3"),
    ("--tp", "abc"),
    ("--pp", "0"),
    ("--num-gpus", "4", "--tp", "2"),
    ("--max-model-len", "0"),
    ("--max-model-len", "-2"),
    ("--max-model-len", "eight"),
    ("--gpu-memory-utilization", "0"),
    ("--gpu-memory-utilization", "1.5"),
    ("--gpu-memory-utilization", "-0.2"),
    ("--gpu-memory-utilization", "nan"),
    ("--gpu-memory-utilization", "lots"),
    ("--kv-dtype", "int4"),
    ("--engine", "trtllm"),
    ("--engine-version", "newest"),
    ("--max-num-seqs", "0"),
    ("--num-heads", "0"),
]


@pytest.mark.parametrize("argv", CLI_BAD, ids=[" ".join(a) for a in CLI_BAD])
def test_cli_bad_input_exits_2_with_one_line(capsys, argv):
    code, out, err = _cli(capsys, "meta-llama/Llama-3.1-8B", *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("kvplan: error: ")
    assert "Traceback" not in err


def test_cli_unknown_model_exits_2(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = _cli(capsys, "./no/such/config.json")
    assert code == 2 and out == "" and err.count("\n") == 1


def test_cli_subprocess_no_traceback():
    for argv, want in ((["meta-llama/Llama-3.1-8B", "--gpu-memory-utilization", "0"], 2),
                       (["meta-llama/Llama-3.1-405B", "--gpu", "L4", "--max-model-len", "4096"], 3)):
        run = subprocess.run([sys.executable, "-m", "kvplan", "plan", *argv], capture_output=True, text=True,
                             cwd=REPO, timeout=120)
        assert run.returncode == want, run.stderr
        assert "Traceback" not in run.stderr
        if want == 2:
            assert run.stdout == "" and run.stderr.count("\n") == 1
        else:
            assert "DOES NOT FIT" in run.stdout


# ------------------------------------------------------------------------------------- fewest_gpus


def test_fewest_gpus_finds_the_smallest_fitting_layout():
    p = fewest_gpus("meta-llama/Llama-3.1-70B", gpu="H100-80GB", max_model_len=8192)
    assert p.fits and p.num_gpus == 2
    assert not plan("meta-llama/Llama-3.1-70B", gpu="H100-80GB", tp=1, max_model_len=8192).fits


def test_fewest_gpus_is_the_true_minimum_over_tp_and_pp():
    """Issue #12: the search tried TP 16 before any PP and never PP with TP < 8. Over every TP x PP with TP in a
    node: Qwen2.5-72B on L4s needs 10 (TP 2 x PP 5: TP 16 was 16 GPUs); at 12 the best layout holds more."""
    p = fewest_gpus("Qwen/Qwen2.5-72B", gpu="L4")
    assert (p.num_gpus, p.tensor_parallel_size, p.pipeline_parallel_size) == (10, 2, 5) and p.fits
    for tp, pp in ((1, 9), (3, 3)):  # nothing smaller fits (TP 3 does not divide the heads, 9 x 1 is too small)
        with contextlib.suppress(WorkloadError):
            assert not plan("Qwen/Qwen2.5-72B", gpu="L4", tp=tp, pp=pp).fits
    assert not any(plan("Qwen/Qwen2.5-72B", gpu="L4", tp=tp, pp=8 // tp).fits for tp in (1, 2, 4, 8))
    assert any("span 2 nodes of 8" in n for n in p.notes)


def test_fewest_gpus_picks_the_layout_with_the_most_room():
    """DeepSeek-V3 on H100s at its 163,840 tokens: the fewest is 11 (TP 1 x PP 11; the issue counted 12 over
    even layouts). At 16 GPUs TP 8 x PP 2 holds about twice TP 16's requests, as the MLA latent is replicated on
    every TP rank; TP 16 crosses two nodes, so the search never proposes it."""
    p = fewest_gpus("deepseek-ai/DeepSeek-V3", gpu="H100")
    assert (p.num_gpus, p.tensor_parallel_size, p.pipeline_parallel_size) == (11, 1, 11)
    assert not any(plan("deepseek-ai/DeepSeek-V3", gpu="H100", tp=tp, pp=10 // tp).fits for tp in (1, 2))
    wide = plan("deepseek-ai/DeepSeek-V3", gpu="H100", tp=16)
    deep = plan("deepseek-ai/DeepSeek-V3", gpu="H100", tp=8, pp=2)
    assert deep.max_concurrency > 1.9 * wide.max_concurrency
    big = fewest_gpus("meta-llama/Llama-3.1-405B", gpu="L4")
    assert (big.num_gpus, big.tensor_parallel_size) == (48, 8)
    assert any("TP 8 x PP 6 holds the most requests" in n for n in big.notes)


def test_fewest_gpus_gives_up_with_a_one_line_error():
    with pytest.raises(WorkloadError) as info:
        fewest_gpus("meta-llama/Llama-3.1-405B", gpu="L4", max_gpus=2, max_model_len=8192)
    assert "does not fit on 2 GPUs" in str(info.value) and "\n" not in str(info.value)


def test_cli_fewest_gpus(capsys):
    code, out, _ = _cli(capsys, "meta-llama/Llama-3.1-70B", "--fewest-gpus", "--max-model-len", "8192", "--json")
    assert code == 0 and json.loads(out)["num_gpus"] == 2


# ------------------------------------------------------------------------------------- caching


def test_caches_do_not_change_results():
    names = ("meta-llama/Llama-3.1-8B", "deepseek-ai/DeepSeek-V3", "google/gemma-2-9b", "Qwen/Qwen3-30B-A3B")
    settings_ = [dict(gpu="H200", tp=8, max_model_len=8192), dict(gpu="H100-80GB", pp=2, max_model_len=4096),
                 dict(engine="sglang", gpu="H200", tp=4, max_model_len=8192)]
    warm = [plan(n, **s).model_dump() for n in names for s in settings_]
    load._load_bundled.cache_clear()
    weights_split._stage_weight_bytes.cache_clear()
    weights_split._stage_parts.cache_clear()
    weights_split.priced_tensors.cache_clear()
    cold = [plan(load_model(n), **s).model_dump() for n in names for s in settings_]
    assert warm == cold


def test_model_by_name_and_by_spec_agree():
    assert plan("Llama-3.1-8B", max_model_len=8192) == plan(load_model("meta-llama/Llama-3.1-8B"),
                                                            max_model_len=8192)


# ------------------------------------------------------------------------------------- fuzz

MODELS = bundled_ids()


def _calibrated_fp8_kv(path) -> bool:
    """A card whose quantization_config calibrates an fp8 KV cache, read from its raw JSON: ModelOpt's
    kv_cache_scheme {num_bits 8, type float} or the older kv_cache_quant_algo "FP8"."""
    q = json.loads(path.read_text()).get("quantization_config") or {}
    scheme, algo = q.get("kv_cache_scheme") or {}, q.get("kv_cache_quant_algo") or (q.get("quantization") or {}).get(
        "kv_cache_quant_algo")
    return (scheme.get("num_bits") == 8 and scheme.get("type") == "float") or str(algo).upper() == "FP8"


# nvidia/Qwen3.6-27B-NVFP4 alone when this was written
CHECKPOINT_FP8_KV = {p.stem.replace("__", "/", 1) for p in (REPO / "model_configs").glob("*.json")
                     if _calibrated_fp8_kv(p)}
GPUS = [g.name for g in list_gpus()] + ["custom:1GiB", "custom:0.01GiB:1TB/s", "custom:", "Z9000", "", "h100"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(MODELS),
    engine=st.sampled_from(["vllm", "sglang", "hf", "tgi", ""]),
    gpu=st.sampled_from(GPUS),
    tp=st.one_of(st.none(), st.integers(-2, 20), st.sampled_from([1.0, "2", True])),
    pp=st.one_of(st.integers(-1, 8), st.sampled_from([None, 100, 2.5])),
    num_gpus=st.one_of(st.none(), st.integers(-1, 20)),
    max_model_len=st.one_of(st.none(), st.integers(-10, 3_000_000), st.sampled_from([1, 15, 16, 17, 8193])),
    util=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1, 1.0, "0.9"])),
    kv_dtype=st.sampled_from(["auto", None, "fp8", "fp8_e5m2", "bf16", "fp16", "fp32", "int8", "int4", "bogus"]),
    dtype=st.sampled_from(["auto", None, "bfloat16", "float16", "float32", "fp8", "int4", "bogus"]),
    engine_version=st.sampled_from([None, "0.6.4", "0.16.0", "v0.17", "0.19.0", "0.21.0rc1", "x", ""]),
)
def test_fuzz_plan_raises_only_kvplan_errors(model, engine, gpu, tp, pp, num_gpus, max_model_len, util, kv_dtype,
                                             dtype, engine_version):
    try:
        p = plan(model, engine=engine, gpu=gpu, tp=tp, pp=pp, num_gpus=num_gpus, max_model_len=max_model_len,
                 gpu_memory_utilization=util, kv_dtype=kv_dtype, dtype=dtype, engine_version=engine_version)
    except KVPlanError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert p.fits == (p.shortfall_bytes == 0)
    assert p.num_blocks >= 0 and p.kv_cache_tokens >= 0 and p.max_concurrency >= 0
    assert 0 <= p.max_model_len_that_fits <= p.max_model_len
    assert p.fits == (p.max_model_len_that_fits == p.max_model_len) or engine == "sglang"
    assert p.num_gpus == p.tensor_parallel_size * p.pipeline_parallel_size
    json.dumps(p.model_dump(mode="json"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(MODELS),
    engine=st.sampled_from(["vllm", "sglang"]),
    gpu=st.sampled_from([g.name for g in list_gpus()] + ["custom:4GiB", "custom:300GiB"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.integers(1, 4),
    max_model_len=st.one_of(st.integers(1, 300_000), st.sampled_from([1, 16, 17, 8192, 8193, 1_000_000])),
    util=st.floats(0.05, 1.0),
    kv_dtype=st.sampled_from(["auto", "fp8", "fp8_e5m2", "fp32"]),
    batched=st.one_of(st.none(), st.integers(1, 40_000)),
    engine_version=st.sampled_from(["0.6.4", "0.8.0", "0.16.0", "0.17.1", "0.19.0", "0.21.0"]),
)
def test_fuzz_valid_settings_give_consistent_plans(model, engine, gpu, tp, pp, max_model_len, util, kv_dtype,
                                                  batched, engine_version):
    try:
        p = plan(model, engine=engine, gpu=gpu, tp=tp, pp=pp, max_model_len=max_model_len,
                 gpu_memory_utilization=util, kv_dtype=kv_dtype, max_num_batched_tokens=batched,
                 engine_version=engine_version)
    except KVPlanError as exc:   # TP the heads cannot take, PP beyond the layers
        assert "\n" not in str(exc)
        return
    assert p.fits == (p.shortfall_bytes == 0)
    assert 0 <= p.max_model_len_that_fits <= p.max_model_len
    if engine == "vllm":
        assert p.fits == (p.max_model_len_that_fits == p.max_model_len)
        assert p.num_blocks == min(s.num_blocks for s in p.stages)
        assert f"--tensor-parallel-size {tp}" in p.vllm_command
        # auto takes fp8 from a checkpoint calibrated for it, from vLLM 0.19 (engine/arg_utils.py ->
        # resolve_kv_cache_dtype_string), and the command then says fp8 outright
        from_card = kv_dtype == "auto" and model in CHECKPOINT_FP8_KV and engine_version in ("0.19.0", "0.21.0")
        assert ("--kv-cache-dtype" in p.vllm_command) == (kv_dtype in ("fp8", "fp8_e5m2") or from_card)
        assert (p.kv_cache_dtype == "float8_e4m3") == (kv_dtype == "fp8" or from_card)


@pytest.mark.parametrize("block", [1, 32, 256])
def test_every_vllm_block_size_plans(block):
    """The sizes `vllm serve --block-size` accepts are planned with that block (tokens come in whole blocks)."""
    p = plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=8192, block_size=block)
    assert p.block_size == block and p.kv_cache_tokens == p.num_blocks * block


# ------------------------------------------------------------------------------------- context limits


def test_context_limit_is_a_warning_and_the_override_in_the_command(capsys):
    """Issue #12: Llama-2-7b at 32,768 (its limit 4,096) was a silent FITS and a command vLLM refuses ("User-
    specified max_model_len ... greater than the derived max_model_len"). Now: the warning in every face, and
    the variable that lets the engine start in the command."""
    p = plan("meta-llama/Llama-2-7b-hf", max_model_len=32768)
    assert not p.verified and any("past meta-llama/Llama-2-7b-hf's context limit of 4,096" in w for w in p.warnings)
    assert p.vllm_command.startswith("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve")
    s = plan("google/gemma-2-27b", engine="sglang", max_model_len=131072)
    assert s.vllm_command.startswith("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python -m sglang.launch_server")
    inside = plan("meta-llama/Llama-2-7b-hf", max_model_len=4096)
    assert inside.verified and inside.vllm_command.startswith("vllm serve")
    code, out, _ = _cli(capsys, "meta-llama/Llama-2-7b-hf", "--max-model-len", "32768")
    assert code == 0 and "WARNING: max_model_len 32,768 is past" in out
    est = kvplan.estimate("meta-llama/Llama-2-7b-hf", 32768)
    assert any("past the model's max_position_embeddings of 4,096" in n for n in est.notes)


def test_context_limits_as_the_engines_derive_them():
    """vLLM multiplies by the RoPE factor except for su / longrope / llama3 and Gemma 3 (yarn: the original
    length x factor); SGLang takes its first key x the factor unless rope_scaling has the original length."""
    dims = kvplan.load_model("deepseek-ai/DeepSeek-V3").dims
    # DeepSeek-V3 rope_scaling: yarn original_max_position_embeddings 4,096 x factor 40 (vLLM 0.19 config/model.py
    # _get_and_verify_max_len)
    assert dims.vllm_limit.tokens == 4096 * 40 == 163840 and "original_max_position_embeddings" in dims.vllm_limit.key
    assert kvplan.load_model("meta-llama/Llama-3.1-8B").dims.vllm_limit.tokens == 131072  # llama3: no factor
    gemma = kvplan.load_model("google/gemma-3-27b-it").dims
    assert (gemma.vllm_limit.tokens, gemma.sglang_limit.tokens) == (131072, 131072 * 8)
    assert kvplan.load_model("meta-llama/Llama-2-7b-hf").dims.sglang_limit.tokens == 4096


# ------------------------------------------------------------------------------------- commands that run


ENGINE_FLAGS = json.loads((REPO / "kvplan" / "data" / "engine_flags.json").read_text())


def _flags(command: str) -> tuple[list[str], list[str]]:
    """(the words a shell splits the command into, its --flags)."""
    words = shlex.split(command)
    return words, [w for w in words if w.startswith("--")]


@pytest.mark.parametrize("engine, version", [("vllm", "0.11.0"), ("vllm", "0.19.0"), ("vllm", "0.33.0"),
                                             ("sglang", "0.5.1"), ("sglang", "0.5.23")])
def test_commands_parse_and_use_only_real_flags(tmp_path, engine, version):
    """Issue #12: `vllm serve uploaded config ...` (two words) and the folder name for a path. Every command
    kvplan prints splits as a shell would split it, names the Hub id, the folder given or a placeholder, and uses
    only flags the engine release has (kvplan/data/engine_flags.json, read from its wheel by
    tools/gen_engine_flags.py)."""
    folder = tmp_path / "my model"
    folder.mkdir()
    (folder / "config.json").write_bytes((REPO / "model_configs" / "google__gemma-3-4b-it.json").read_bytes())
    sources = {"hub id": ("google/gemma-3-4b-it", "google/gemma-3-4b-it"),
               "path": (folder / "config.json", str(folder)),
               "upload": (json.loads((folder / "config.json").read_text()), "<path-to-model>")}
    known = set(ENGINE_FLAGS[engine][version])
    extra = dict(engine_version=version)
    for label, (source, named) in sources.items():
        model = kvplan.load_model(source, name="uploaded config" if label == "upload" else None)
        for kwargs in (dict(max_model_len=32768), dict(max_model_len=4096, kv_dtype="fp8", tp=2),
                       dict(max_model_len=4096, pp=2), dict(max_model_len=4096, images_per_prompt=2),
                       dict(max_model_len=4096, language_model_only=True), dict(max_model_len=4096, quantization="fp8")):
            if engine == "sglang" and ("images_per_prompt" in kwargs or "language_model_only" in kwargs):
                continue  # kvplan models image limits for vLLM only (a WorkloadError for SGLang)
            p = plan(model, engine=engine, **kwargs, **extra)
            words, flags = _flags(p.vllm_command)
            assert named in words, (label, p.vllm_command)
            assert set(flags) <= known, (engine, version, set(flags) - known)


@pytest.mark.parametrize("engine, version", [("vllm", "0.33.0"), ("sglang", "0.5.23")])
def test_parallel_drafting_and_lora_commands_use_real_flags(engine, version):
    """DP / EP, speculative decoding and LoRA as each release spells them (vLLM --data-parallel-size
    --enable-expert-parallel --speculative-config --enable-lora; SGLang --dp-size --enable-dp-attention --ep-size
    --speculative-algorithm --enable-lora --max-loras-per-batch), plus vLLM's eager and pool flags."""
    known = set(ENGINE_FLAGS[engine][version])
    cases = [("Qwen/Qwen3-30B-A3B", dict(tp=2, dp=2, expert_parallel=True)),
             ("deepseek-ai/DeepSeek-V3", dict(tp=8, speculative={"method": "mtp", "num_speculative_tokens": 1})),
             ("meta-llama/Llama-3.1-8B", dict(speculative={"method": "eagle3", "num_speculative_tokens": 3,
                                                           "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"})),
             ("meta-llama/Llama-3.1-8B", dict(lora={"max_loras": 4, "max_lora_rank": 16}))]
    if engine == "vllm":
        cases += [("meta-llama/Llama-3.1-8B", dict(enforce_eager=True, kv_cache_memory_bytes=20 * 2**30)),
                  ("meta-llama/Llama-3.1-70B", dict(tp=4, nvls=False, cudagraph_estimate=False))]
    for model, kwargs in cases:
        if engine == "sglang" and "dp" in kwargs:
            kwargs = {**kwargs, "tp": 4, "dp": 2}      # SGLang's DP attention splits the TP group
        p = plan(model, engine=engine, gpu="H200", max_model_len=8192, engine_version=version, **kwargs)
        words, flags = _flags(p.vllm_command)
        assert set(flags) <= known, (model, kwargs, set(flags) - known)



@pytest.mark.parametrize("engine, asked, read", [("vllm", "0.34.0", "0.33.0"), ("sglang", "0.5.24", "0.5.23")])
def test_a_release_newer_than_the_newest_read_is_not_verified(engine, asked, read):
    # vLLM 0.34.0 (PyPI, 2026-11-16) changes v1/core/kv_cache_planning.py by 276 lines and drops the V1 runner's
    # gpu_model_runner.py: planned with 0.33.0's rules, the figures are unverified and say so; the release read is not
    p = plan("meta-llama/Llama-3.1-8B", engine=engine, gpu="H100", engine_version=asked)
    # vLLM 0.34's reading (docs/readings/vllm-0.34.0.md) is said in the warning: which way its pool moves and why
    known = ("; by its source, 0.34 sizes the KV pool after warm-up at a default utilization of 1.0 (about 9 % more "
             "KV than this plan for Llama-3.1-8B on an H100 when --gpu-memory-utilization is left out; the 0.92 in "
             "this plan's command keeps about this plan's pool) and its default block is 64 tokens, not 16"
             if engine == "vllm" else "")
    warning = (f"{'vLLM' if engine == 'vllm' else 'SGLang'} {asked} is newer than {read}, the newest release kvplan "
               f"read: its figures follow {read}'s rules, not checked against {asked}{known}; plan --engine-version "
               f"{read} for a release kvplan has read")
    assert p.verified is False and p.warnings == [warning] and p.notes[0] == f"not verified: {warning}"
    assert plan("meta-llama/Llama-3.1-8B", engine=engine, gpu="H100", engine_version=read).warnings == []
