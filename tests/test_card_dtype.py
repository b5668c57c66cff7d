"""What the card decides before any byte is counted: the compute dtype on cards without bfloat16 and the cards
FP8 weights run on (vLLM config/model.py `_resolve_auto_dtype`, platforms/cuda.py; quantization/fp8.py
`Fp8Config.get_min_capability`; SGLang load_model_utils.py `maybe_downgrade_dtype_for_legacy_gpu`)."""
import pytest

import kvplan
from kvplan.planning.search import fixes
from kvplan.dtypes import BFLOAT16, FLOAT16
from kvplan.errors import WorkloadError

MODEL = "Qwen/Qwen2.5-7B"   # bfloat16 in its config.json


def _plan(gpu, engine="vllm", **kw):
    kw.setdefault("max_model_len", 4096)
    return kvplan.plan(MODEL, engine=engine, gpu=gpu, **kw)


@pytest.mark.parametrize("gpu, engine", [("T4", "vllm"), ("V100", "vllm"), ("T4", "sglang")])  # SGLang: no SM70
def test_auto_is_float16_on_a_card_without_bfloat16_and_says_so(gpu, engine):
    p = _plan(gpu, engine)
    assert p.dtype == FLOAT16.name
    note = next(n for n in p.notes if "has no bfloat16" in n)
    assert ("vLLM falls back to float16" if engine == "vllm" else "SGLang runs float16 below SM80") in note


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_bfloat16_card_keeps_the_config_dtype_without_a_note(engine):
    p = _plan("A100", engine)
    assert p.dtype == BFLOAT16.name
    assert not any("has no bfloat16" in n for n in p.notes)


def test_the_kv_bytes_are_the_same_in_float16():
    """The fallback changes the kernels, not the bytes: the T4 plan's per-token KV equals the A100's."""
    t4, a100 = _plan("T4"), _plan("A100")
    assert t4.kv_bytes_per_token == a100.kv_bytes_per_token == 28 * 2 * 4 * 128 * 2   # 57,344 B


def test_vllm_refuses_an_explicit_bfloat16_on_a_t4():
    with pytest.raises(WorkloadError, match=r"vLLM refuses bfloat16 on the T4 \(compute capability 7.5"):
        _plan("T4", dtype="bfloat16")
    assert _plan("T4", dtype="float16").dtype == FLOAT16.name


def test_sglang_casts_an_explicit_bfloat16_to_float16_below_sm80():
    p = _plan("T4", "sglang", dtype="bfloat16")
    assert p.dtype == FLOAT16.name
    assert any("SGLang runs float16 below SM80" in n for n in p.notes)


def test_sglang_refuses_cards_below_sm75():
    with pytest.raises(WorkloadError, match=r"SGLang runs on compute capability 7.5 and newer.*has 7.0"):
        _plan("V100", "sglang")


@pytest.mark.parametrize("gpu, version, runs", [
    ("T4", "0.11.0", False),     # Fp8Config 0.11: 80
    ("T4", "0.13.0", False),     # 0.13.0: 80
    ("T4", "0.14.0", True),      # 0.14.0+: 75 (weight-only Marlin below 8.9)
    ("T4", "0.18.0", True),
    ("T4", "0.19.0", True),
    ("T4", "0.33.0", True),
    ("V100", "0.19.0", False),   # 7.0 < 7.5 at every release
    ("V100", "0.33.0", False),
    ("A100", "0.11.0", True),
])
def test_fp8_weights_run_from_the_releases_minimum_capability(gpu, version, runs):
    if runs:
        assert _plan(gpu, quantization="fp8", engine_version=version).weights_bytes > 0
    else:
        with pytest.raises(WorkloadError, match=r"runs FP8 weights on compute capability (8\.0|7\.5) and newer"):
            _plan(gpu, quantization="fp8", engine_version=version)


def test_the_t4_refusal_at_011_names_the_release_that_runs_it():
    with pytest.raises(WorkloadError, match=r"or vLLM 0\.14\+ \(7\.5\), or leave --quantization fp8 out"):
        _plan("T4", quantization="fp8", engine_version="0.11.0")


def test_the_weights_are_priced_in_float16_on_a_t4():
    """Same 2 bytes a parameter: the T4's weights equal the A100's (the cast moves no byte)."""
    assert _plan("T4").weights_bytes == _plan("A100").weights_bytes


@pytest.mark.parametrize("gpu, marlin", [("T4", True), ("A10", True), ("A100", True), ("L40S", False), ("H100", False)])
def test_fp8_below_sm89_is_said_to_run_weight_only_through_marlin(gpu, marlin):
    notes = _plan(gpu, quantization="fp8").notes
    assert any("weight-only Marlin kernel" in n for n in notes) == marlin


@pytest.mark.parametrize("gpu, version, runs", [
    ("T4", "0.33.0", False), ("V100", "0.24.0", False),   # 0.24+: no backend below SM80 takes fp8 KV
    ("T4", "0.23.0", True),                               # FlashInfer's floor was 7.5 before 0.24
    ("A100", "0.33.0", True), ("H100", "0.33.0", True),
])
def test_an_fp8_kv_cache_below_sm80_is_refused_from_vllm_024(gpu, version, runs):
    if runs:
        assert _plan(gpu, kv_dtype="fp8", engine_version=version).kv_cache_dtype.startswith("float8")
    else:
        with pytest.raises(WorkloadError, match=r"has no attention backend with an fp8 KV cache .*--kv-cache-dtype auto"):
            _plan(gpu, kv_dtype="fp8", engine_version=version)


def test_no_fix_offers_what_the_card_cannot_run():
    """Qwen2.5-7B does not fit one V100-16GB: the fixes are planned, so neither fp8 KV (no backend) nor fp8
    weights (Fp8Config needs 7.5) is offered; the flags offered are more GPUs or a shorter context."""
    flags = [flag for _, flag in fixes(MODEL, engine="vllm", gpu="V100", max_model_len=32768)]
    assert flags and not any("fp8" in f for f in flags)


def test_a_higher_utilization_is_offered_where_it_fits_with_its_margin():
    """vLLM's first suggestion (v1/worker/utils.py request_memory): gpt-oss-120b at 131,072 tokens on one H100 at
    0.33 is 1.73 GiB short at 0.92; 0.94 is still short, 0.95 fits and leaves 79.19 - 75.23 = 3.96 GiB."""
    settings = dict(engine="vllm", gpu="H100", max_model_len=131072)
    p = kvplan.plan("openai/gpt-oss-120b", **settings)
    assert not p.fits and p.gpu_memory_utilization == 0.92
    assert not kvplan.plan("openai/gpt-oss-120b", gpu_memory_utilization=0.94, **settings).fits
    assert kvplan.plan("openai/gpt-oss-120b", gpu_memory_utilization=0.95, **settings).fits
    offered = dict((flag, why) for why, flag in fixes("openai/gpt-oss-120b", **settings))
    assert "leaving 3.96 GiB of each 79.19 GiB GPU outside vLLM" in offered["--gpu-memory-utilization 0.95"]


def test_no_utilization_past_the_cap_is_offered(monkeypatch):
    """The same plan with the cap at 0.94 (where it is still short) is offered no utilization."""
    import kvplan.planning.search as search
    settings = dict(engine="vllm", gpu="H100", max_model_len=131072)
    monkeypatch.setattr(search, "MAX_UTILIZATION", 0.94)
    assert not any(f.startswith("--gpu-memory-utilization") for _, f in fixes("openai/gpt-oss-120b", **settings))
    monkeypatch.undo()
    assert any(f.startswith("--gpu-memory-utilization") for _, f in fixes("openai/gpt-oss-120b", **settings))
