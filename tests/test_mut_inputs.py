"""The plan's input checks (kvplan.planning.inputs), pinned against the mutants tools/mutation.py left alive (#26).

Every refusal is asserted whole (it is what the user reads and acts on); every accepted value at its boundary.
Engine facts come from the sources inputs.py cites: vLLM's `_resolve_auto_dtype` / `check_if_supports_dtype`
(bfloat16 needs compute capability 8.0), SGLang 0.5.23's `maybe_downgrade_dtype_for_legacy_gpu` (float16 below
SM80), vLLM's LoRAConfig (max_loras 1, max_lora_rank 16) and SGLang's server_args (max_loras_per_batch 8)."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from kvplan.cache.estimate import MAX_TOKENS
from kvplan.config.load import as_model, load_model
from kvplan.dtypes import FLOAT16, FLOAT32
from kvplan.errors import WorkloadError
from kvplan.gpus import resolve_gpu
from kvplan.planning.engines.lora import LoraSettings
from kvplan.planning.inputs import (
    MODEL_PLACEHOLDER, image_limit, lora_settings, model_argument, model_dtype, positive, resolve_max_len,
    resolve_parallel, resolve_utilization, speculative_settings)

REPO = Path(__file__).resolve().parents[1]
LLAMA = "meta-llama/Llama-3.2-1B"     # 32 heads, 8 KV heads, 16 layers, bfloat16
HEAD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def _refused(message: str):
    return pytest.raises(WorkloadError, match="^" + re.escape(message) + "$")


def _config(name: str) -> dict:
    return json.loads((REPO / "model_configs" / (name.replace("/", "__") + ".json")).read_text())


# ----------------------------------------------------------------------------- counts and fractions

def test_positive_takes_the_largest_token_count_and_refuses_one_more():
    assert positive("max_model_len", MAX_TOKENS) == MAX_TOKENS            # 2**40 = 1,099,511,627,776
    with _refused("max_model_len must be between 1 and 1,099,511,627,776, got 1,099,511,627,777"):
        positive("max_model_len", MAX_TOKENS + 1)


def test_utilization_default_and_refusal():
    assert resolve_utilization(None) == 0.9          # vLLM's gpu_memory_utilization default
    with _refused("gpu_memory_utilization must be in (0, 1], got 1.5"):
        resolve_utilization(1.5)


# ----------------------------------------------------------------------------- TP x PP x DP

def test_gpus_alone_are_all_tensor_parallel_and_stages_default_to_one():
    llama = load_model(LLAMA)
    assert resolve_parallel(llama, 4, None, None) == (4, 1)        # 4 GPUs / (PP 1 x DP 1)
    assert resolve_parallel(llama, None, 2, None) == (2, 1)


@pytest.mark.parametrize("num_gpus, tp, pp, message", [
    (None, None, 0, "pipeline parallel size must be a positive whole number, got 0"),
    (0, None, None, "num_gpus must be a positive whole number, got 0"),
    (None, 0, None, "tensor parallel size must be a positive whole number, got 0"),
    (8, 2, 2, "TP 2 x PP 2 = 4 GPUs, not the 8 asked for: make them agree"),
])
def test_parallel_refusals_name_the_setting(num_gpus, tp, pp, message):
    with _refused(message):
        resolve_parallel(load_model(LLAMA), num_gpus, tp, pp)


def test_a_mismatch_with_data_parallel_names_dp():
    with _refused("TP 2 x PP 1 x DP 2 = 4 GPUs, not the 8 asked for: make them agree"):
        resolve_parallel(load_model(LLAMA), 8, 2, 1, dp=2)


def test_kv_heads_checked_are_the_ones_the_engine_caches():
    # a Falcon of the new decoder architecture: 12 heads, num_kv_heads 4. transformers caches all 12 heads, vLLM the
    # 4 KV heads (falcon.py :116-130): TP 6 divides the 12 heads but neither splits nor replicates 4 KV heads
    small = as_model({**_config("tiiuae/falcon-40b-instruct"), "hidden_size": 768, "num_attention_heads": 12,
                      "num_kv_heads": 4, "num_hidden_layers": 2})
    assert (small.fields.get("engine_kv_heads"), small.kv_heads) == (4, 12)
    with _refused("4 KV heads cannot be split or replicated over TP 6: use a TP that divides 4 or a multiple of it"):
        resolve_parallel(small, None, 6, None)


def test_a_spec_without_sizes_skips_the_head_check_and_names_the_missing_length():
    # a ModelSpec built without dims (its default): no head count to check TP against, no max_position_embeddings
    bare = dataclasses.replace(load_model(LLAMA), dims=None)
    assert resolve_parallel(bare, None, 2, None) == (2, 1)
    with _refused("meta-llama/Llama-3.2-1B's config has no max_position_embeddings: pass --max-model-len N"):
        resolve_max_len(bare, None)


def test_an_invalid_context_length_is_named():
    bad = as_model({**_config(LLAMA), "max_position_embeddings": -5})
    with _refused("custom's config sets max_position_embeddings -5, not a token count from 1 to 2**40: pass "
                  "--max-model-len N or fix the config.json"):
        resolve_max_len(bad, None)


# ----------------------------------------------------------------------------- compute dtype by card and engine

def test_bfloat16_on_a_v100():
    llama, v100 = load_model(LLAMA), resolve_gpu("V100")            # compute capability 7.0, no bfloat16
    message = ("vLLM refuses bfloat16 on the V100-SXM2-16GB (compute capability 7.0: bfloat16 needs 8.0): plan "
               "--dtype float16, or auto, which vLLM casts to float16 there")
    with _refused(message):
        model_dtype(llama, "bfloat16", v100)                          # the engine defaults to vLLM
    with _refused(message):
        model_dtype(llama, "bfloat16", v100, "vllm")
    assert model_dtype(llama, "float16", v100, "vllm") == FLOAT16
    assert model_dtype(llama, "float32", v100, "vllm") == FLOAT32


def test_sglang_downcasts_bfloat16_alone_below_sm80():
    llama, t4 = load_model(LLAMA), resolve_gpu("T4")                  # 7.5: SGLang runs, without bfloat16
    assert model_dtype(llama, "bfloat16", t4, "sglang") == FLOAT16
    assert model_dtype(llama, "float32", t4, "sglang") == FLOAT32


def test_a_float32_config_runs_float16_in_transformers_on_a_card_without_bfloat16():
    f32 = as_model({**_config(LLAMA), "torch_dtype": "float32"})
    assert model_dtype(f32, None, resolve_gpu("V100"), "hf") == FLOAT16


# ----------------------------------------------------------------------------- images, LoRA, drafting

def test_image_limits():
    assert image_limit(0, True) == 0 and image_limit(None, True) == 0
    assert image_limit(0, False) == 0 and image_limit(999, False) == 999 and image_limit(None, False) is None
    with _refused("language-model-only serving takes no images: leave out the images per prompt, or set it to 0"):
        image_limit(1, True)
    for value, shown in [(1000, "1,000"), ("3", "'3'"), (True, "True"), (-1, "-1")]:
        with _refused(f"images per prompt must be a whole number from 0 to 999, got {shown}"):
            image_limit(value, False)


def test_lora_settings_defaults_and_refusals():
    assert lora_settings({"max_lora_rank": 64}, "vllm") == LoraSettings(1, 64, embeddings=True)
    assert lora_settings({}, "sglang") == LoraSettings(8, 16, embeddings=False)
    assert lora_settings(LoraSettings(2, 8), "vllm") == LoraSettings(2, 8)
    with _refused('LoRA takes max_loras and max_lora_rank: e.g. {"max_loras": 4, "max_lora_rank": 16}'):
        lora_settings([1], "vllm")
    for value in (["max_loras"], 5):                 # not a dict, even one whose items are the right names
        with _refused('LoRA takes max_loras and max_lora_rank: e.g. {"max_loras": 4, "max_lora_rank": 16}'):
            lora_settings(value, "vllm")


def test_speculative_settings_defaults_and_refusals():
    eagle = speculative_settings({"method": "eagle3", "model": HEAD}, load_model)
    assert (eagle.method, eagle.num_speculative_tokens, eagle.draft_argument) == ("eagle3", 1, HEAD)
    mtp = speculative_settings({"method": "mtp"}, load_model)
    assert (mtp.method, mtp.num_speculative_tokens, mtp.draft, mtp.draft_argument) == ("mtp", 1, None, "")
    assert speculative_settings({"num_speculative_tokens": 2}, load_model).method == ""
    with _refused('speculative decoding takes method, num_speculative_tokens and model (the draft): e.g. {"method": '
                  '"eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'):
        speculative_settings(["eagle3"], load_model)
    with pytest.raises(WorkloadError, match="^speculative decoding takes method"):
        speculative_settings(["method"], load_model)     # a list of the right names is still no dict
    with _refused("the draft model is named by a Hub id or a path to its config.json"):
        speculative_settings({"method": "eagle3", "model": 5}, load_model)


# ----------------------------------------------------------------------------- what a serve command names

def test_model_argument_by_source(tmp_path):
    llama = load_model(LLAMA)
    assert model_argument(dataclasses.replace(llama, source="hub")) == LLAMA
    loose = tmp_path / "llama.json"                      # a loose JSON file: its folder is no model
    loose.write_text(json.dumps(_config(LLAMA)))
    assert model_argument(load_model(str(loose))) == MODEL_PLACEHOLDER
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_config(LLAMA)))
    assert model_argument(load_model(str(folder / "config.json"))) == str(folder)
