"""Tests that kill the mutants tools/mutation.py found surviving in the engines and the planner (#26 item 5).

Each pins a figure from an independent source: hand arithmetic whose inputs are written here, the engine's source,
or the generate peak model (kvplan.planning.engines.hf_peak, measured against torch in validation/) taken as the
input of the transformers plan, whose own arithmetic (the budget, the searches, the pool) is what is checked."""
from __future__ import annotations

import dataclasses
import re

import pytest

from kvplan import estimate, load_model
from kvplan.errors import WorkloadError
from kvplan.gpus import resolve_gpu
from kvplan.planning.engines.hf import _largest
from kvplan.planning.engines.hf_peak import CUDA_CONTEXT_BYTES, hf_peak_for
from kvplan.planning.planner import plan

GiB = 2**30


def _exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


# ----------------------------------------------------------------------------- hf.py: the transformers plan

@pytest.mark.parametrize("upper", [1, 2, 3, 7, 16, 33])
def test_largest_finds_every_boundary(upper):
    # a monotone predicate true up to k: the search must return k for each k in [0, upper]
    for k in range(upper + 1):
        assert _largest(lambda n, k=k: n <= k, upper) == k, (k, upper)


def _llama_1b():
    # Llama-3.2-1B: 16 layers, hidden 2,048, 32 heads / 8 KV heads of 64, MLP 8,192, vocabulary 128,256, tied head
    return load_model("meta-llama/Llama-3.2-1B")


def _card(budget: int, util: float = 1.0):
    """An L4 whose util x memory - the 0.5 GiB CUDA context is exactly `budget` (util 1.0 keeps int() exact)."""
    return dataclasses.replace(resolve_gpu("L4"), name="test card", memory_bytes=budget + CUDA_CONTEXT_BYTES)


def _peak(model, length: int, batch: int) -> int:
    return hf_peak_for(model, estimate(model, length, batch)).peak_allocated_bytes


def test_a_peak_equal_to_the_budget_fits_with_batch_one():
    model = _llama_1b()
    budget = _peak(model, 4096, 1)                   # the budget is exactly the batch-1 peak: it fits, batch 1 only
    p = plan(model, engine="hf", gpu=_card(budget), max_model_len=4096, gpu_memory_utilization=1.0)
    assert p.fits and p.max_concurrency == 1.0 and p.max_num_seqs == 1
    assert p.shortfall_bytes == 0 and p.max_model_len_that_fits == 4096


def test_the_longest_prompt_may_end_exactly_on_the_budget():
    model = _llama_1b()
    budget = _peak(model, 1000, 1)                   # 4,096 tokens cannot fit; 1,000 fit to the byte
    assert _peak(model, 1001, 1) > budget
    p = plan(model, engine="hf", gpu=_card(budget), max_model_len=4096, gpu_memory_utilization=1.0)
    assert not p.fits and p.max_concurrency == 0 and p.max_model_len_that_fits == 1000
    assert p.shortfall_bytes == _peak(model, 4096, 1) - budget


def test_batch_search_stops_at_4096_sequences():
    model = _llama_1b()
    # a 10 TiB card holds far more than 4,096 prompts of 16 tokens: the search's upper bound is what comes back
    p = plan(model, engine="hf", gpu=_card(10 * 1024 * GiB), max_model_len=16, gpu_memory_utilization=1.0)
    assert p.max_concurrency == 4096.0 and p.max_num_seqs == 4096


def test_an_explicit_dtype_is_the_one_planned():
    # 1,235,814,400 parameters: embed 128,256 x 2,048 = 262,668,288 (tied head), per layer q / o 2 x 2,048^2 +
    # k / v 2 x 2,048 x 512 + MLP 3 x 2,048 x 8,192 + 2 norms x 2,048 = 60,821,504, x 16 = 973,144,064, final norm 2,048
    model = _llama_1b()
    p = plan(model, engine="hf", gpu="L4", max_model_len=4096, dtype="float32")
    assert p.dtype == "float32" and p.kv_cache_dtype == "float32"
    # 1,235,814,400 parameters (transformers LlamaForCausalLM on meta; by hand in the comment above) x 4 B
    assert p.weights_bytes == 1_235_814_400 * 4
    assert p.kv_bytes_per_token == 16 * 2 * 8 * 64 * 4     # 16 layers x K and V x 8 heads x 64 x 4 B = 65,536


def test_the_plan_fields_of_generate_on_llama_8b():
    model = load_model("meta-llama/Llama-3.1-8B")
    p = plan(model, engine="hf", gpu="L4", max_model_len=8192)
    weights, per_token = 16_060_522_496, 131_072       # 8,030,261,248 params x 2 B; 32 x 2 x 8 x 128 x 2 B
    cache = per_token * 8192                           # the DynamicCache right after an 8,192-token prefill
    # the batch-1 peak by hand (tests/test_plan_hf.py's docstring): weights + 8,192 x 242,192 B a prompt token
    # (16 inputs + 131,072 cache + 25,088 residual stream and RoPE + 86,016 MLP) = 18,044,559,360
    peak = weights + 242_192 * 8192
    assert _peak(model, 8192, 1) == peak == 18_044_559_360
    budget = int(0.9 * resolve_gpu("L4").memory_bytes) - CUDA_CONTEXT_BYTES
    transient = peak - weights - cache                 # what the peak holds beyond the weights and the cache
    assert p.activation_bytes == transient > 0
    assert p.kv_pool_bytes == budget - weights - transient
    assert p.kv_cache_tokens == (budget - weights - transient) // per_token
    assert p.engine_version == "transformers 5.24" and p.block_size == 1 and p.num_blocks == 0
    # max_num_batched_tokens: the 8,192-token prompt generate prefills at once
    assert p.max_num_batched_tokens == 8192 and p.non_torch_bytes == CUDA_CONTEXT_BYTES
    (stage,) = p.stages
    assert (stage.stage, stage.layers, stage.num_blocks) == (0, "0-31", 0)
    assert (stage.weights_bytes, stage.activation_bytes, stage.kv_pool_bytes) == (weights, transient, p.kv_pool_bytes)
    assert p.vllm_command == ("AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B', dtype=torch.bfloat16, "
                              "device_map='cuda').generate(input_ids, max_new_tokens=N)  # prompt + N <= 8192")
    assert p.notes[:2] == ["transformers generate, DynamicCache, prompt of max_model_len tokens (worst-case prefill)",
                           "max concurrency = the largest batch whose peak fits (all sequences prefilled together)"]


def test_a_model_too_big_for_the_card_has_no_pool():
    # Llama-3.1-70B: 70,553,706,496 params x 2 B = 141 GB of weights on a 22 GiB L4: nothing left for a cache
    p = plan("meta-llama/Llama-3.1-70B", engine="hf", gpu="L4", max_model_len=4096)
    assert p.kv_pool_bytes == 0 and p.kv_cache_tokens == 0 and p.stages[0].kv_pool_bytes == 0


def test_a_cache_without_per_token_bytes_has_no_token_count():
    # Mamba-2.8B caches a fixed state per sequence (0 bytes per token): the pool holds no token count
    p = plan("state-spaces/mamba-2.8b-hf", engine="hf", gpu="L4", max_model_len=1024)
    assert p.fits and p.kv_bytes_per_token == 0 and p.kv_cache_tokens == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"tp": 2}, ("the transformers plan covers one GPU (generate has no tensor parallelism): "
                 "use --engine vllm or sglang for TP / PP")),
    ({"kv_dtype": "fp8"}, ("transformers' dynamic cache stores the model dtype: use --kv-dtype auto "
                           "(kvplan estimate --cache quantized sizes int4 / fp8 caches)")),
])
def test_hf_refusals_word_for_word(kwargs, message):
    with pytest.raises(WorkloadError, match=_exact(message)):
        plan("meta-llama/Llama-3.1-8B", engine="hf", gpu="H100", max_model_len=4096, **kwargs)


# ----------------------------------------------------------------------------- vllm_mm.py: the profile run's images

from kvplan.planning.engines.vllm_mm import encoder_cache_bytes, limit_flags


def _gemma3():
    # gemma-3-27b-it: 256 embeddings per image, a 260-token placeholder span (boi, 256 soft tokens, eoi, newlines),
    # hidden 5,376 (model_configs/google__gemma-3-27b-it.json)
    return load_model("google/gemma-3-27b-it").require_arch()


def test_gemma3_encoder_cache_formula_word_for_word():
    # 999 per prompt: vLLM's default limit (config/multimodal.py) under an unbounded max_model_len
    kept, how = encoder_cache_bytes(_gemma3(), (0, 19, 0), 8192, 2, text_only=False)
    assert kept == 32 * 256 * 5376 * 2 == 88_080_384
    assert how == ("encoder cache of the profile run: 32 dummy images (budget 8,192 // 256 tokens, at most 1,024 "
                   "sequences x 999 per prompt) x 256 x 5,376 x 2 B = 88,080,384 B, unpadded (vLLM >= 0.13)")
    kept, how = encoder_cache_bytes(_gemma3(), (0, 12, 9), 8192, 2, text_only=False)   # the last padded version
    # padded (< 0.13): 31 images x the 8,192-token encoder budget x 5,376 x 2 B (the line below)
    assert kept == 31 * 8192 * 5376 * 2 == 2_730_491_904
    assert how == ("encoder cache of the profile run: 31 dummy images (budget 8,192 // 260 tokens, at most 1,024 "
                   "sequences x 999 per prompt) x 8,192 x 5,376 x 2 B = 2,730,491,904 B, padded to the encoder budget "
                   "(vLLM < 0.13)")
    # 32 images x 256 tokens x 5,376 x 2 B, unpadded from vLLM 0.13 (the line above)
    assert encoder_cache_bytes(_gemma3(), (0, 13, 0), 8192, 2, text_only=False)[0] == 88_080_384


@pytest.mark.parametrize("kwargs, images", [
    ({"max_num_seqs": 4, "limit": 1}, 4),          # min(8,192 // 256 = 32, 4 sequences x 1 image) = 4
    ({"max_num_seqs": 2, "limit": 3}, 6),          # 2 x 3
    ({"max_num_seqs": 1, "limit": 0}, 1),          # a zero limit still profiles one item: max(1, 0)
    ({"max_num_seqs": 1, "max_model_len": 600}, 2),  # 600 // 256 = 2 images fit one prompt
    ({"max_num_seqs": 1, "max_model_len": 100}, 1),  # not one image fits: max(1, 0)
    ({"max_num_seqs": 1}, 32),                     # the default limit, 999, binds nothing: 8,192 // 256
])
def test_the_profiled_batch_is_bounded_by_sequences_and_limits(kwargs, images):
    # images x 256 tokens an image x gemma-3's hidden 5,376 x 2 B
    assert encoder_cache_bytes(_gemma3(), (0, 19, 0), 8192, 2, text_only=False, **kwargs)[0] == \
        images * 256 * 5376 * 2


def test_a_budget_smaller_than_one_image_profiles_one():
    kept, how = encoder_cache_bytes(_gemma3(), (0, 19, 0), 100, 2, text_only=False)
    # one image: 256 x 5,376 x 2 B
    assert kept == 1 * 256 * 5376 * 2 and "(budget 256 // 256 tokens" in how
    kept, _ = encoder_cache_bytes(_gemma3(), (0, 11, 0), 100, 2, text_only=False)   # padded to the 260-token budget
    assert kept == 1 * 260 * 5376 * 2


def test_models_without_towers_or_image_tokens():
    assert encoder_cache_bytes(load_model("meta-llama/Llama-3.1-8B").require_arch(), (0, 19, 0), 8192, 2,
                               text_only=False) == (0, "")
    blind = dataclasses.replace(_gemma3(), image_tokens=(0, 0))
    # no image token count: no encoder cache is sized, and the plan's warning (unsized_profile) says why instead
    assert encoder_cache_bytes(blind, (0, 19, 0), 8192, 2, text_only=False) == (0, "")
    from kvplan.planning.engines.vllm_mm import unsized_profile

    assert unsized_profile(blind, text_only=False).startswith(
        "vLLM's multimodal profile run is not sized for gemma3_text: vLLM first runs the vision encoder on dummy "
        "items of the largest size")
    assert unsized_profile(blind, text_only=True) is None and unsized_profile(_gemma3(), text_only=False) is None


@pytest.mark.parametrize("version, limit, flag", [
    ((0, 17, 0), 0, "--language-model-only"),              # the flag exists from vLLM 0.17
    ((0, 16, 5), 0, "--limit-mm-per-prompt '{\"image\": 0}'"),
    ((0, 19, 0), 2, "--limit-mm-per-prompt '{\"image\": 2}'"),
])
def test_limit_flags(version, limit, flag):
    assert limit_flags(version, limit) == flag


# ----------------------------------------------------------------------------- sglang_layers.py: SGLang's cell

from kvplan.dtypes import resolve_dtype
from kvplan.planning.engines import sglang_layers as sl
from kvplan.planning.engines.vllm_kv import VllmLayerSpec

BF16, FP8 = resolve_dtype("bf16"), resolve_dtype("fp8_e4m3")


def _dsa_spec():
    from kvplan.model.layers import IndexedMLASpec
    # DeepSeek-V3.2: kv_lora_rank 512, qk_rope_head_dim 64, index_head_dim 128 (its config.json)
    return next(s for _, s in load_model("deepseek-ai/DeepSeek-V3.2").specs() if isinstance(s, IndexedMLASpec))


@pytest.mark.parametrize("kv, gpu, version, architecture, expected", [
    (BF16, "H100", (0, 5, 23), "", (512 + 64) * 2),                   # 16 bits: the raw row, 1,152 B
    (FP8, "H100", (0, 5, 17), "", 512 + 512 // 128 * 4 + 64 * 2),     # flashmla_kv's scaled row: 656 B
    (FP8, "A100", (0, 5, 17), "", 656),                               # SM 8.0: below 10, the scaled row
    (FP8, "H100", (0, 5, 16), "", 576),                               # the cell counted the raw row until 0.5.17
    (FP8, "B200", (0, 5, 23), "", 576),                               # SM 10.0: trtllm keeps the raw 576
    (FP8, "MI300X", (0, 5, 23), "", 576),                             # ROCm: raw
    (FP8, "RTX-PRO-6000", (0, 5, 23), "DeepseekV32ForCausalLM", 576),  # SM 12.x, not GLM-5: trtllm
    (FP8, "RTX-PRO-6000", (0, 5, 23), "GlmMoeDsaForCausalLM", 656),    # GLM-5 on SM 12.x: flashinfer_sparse_mla
])
def test_dsa_latent_bytes(kv, gpu, version, architecture, expected):
    assert sl.dsa_latent_bytes(_dsa_spec(), kv, resolve_gpu(gpu), version, architecture) == expected


@pytest.mark.parametrize("default, gpu, version, expected", [
    (True, "B200", (0, 5, 5), "float8_e4m3"),     # SM 10 and 0.5.5+: auto is fp8_e4m3
    (True, "RTX-PRO-6000", (0, 5, 23), "float8_e4m3"),
    (True, "B200", (0, 5, 4), "bfloat16"),        # before 0.5.5: the dtype given
    (True, "H100", (0, 5, 23), "bfloat16"),       # SM 9: bfloat16
    (True, "MI300X", (0, 5, 23), "bfloat16"),     # AMD: no SM, major 0
    (False, "B200", (0, 5, 23), "bfloat16"),      # an explicit --kv-cache-dtype stands
])
def test_dsa_kv_dtype(default, gpu, version, expected):
    assert sl.dsa_kv_dtype(BF16, default, resolve_gpu(gpu), version).name == expected


def test_dsa_cells_and_index_keys():
    assert sl.dsa_index_bytes(_dsa_spec()) == 128 + 128 // 128 * 4 == 132
    v32 = load_model("deepseek-ai/DeepSeek-V3.2")
    assert sl.is_dsa(v32) and not sl.is_dsa(load_model("deepseek-ai/DeepSeek-V3"))
    cells = sl.cell_specs(v32, range(2), 8, FP8, 2, resolve_gpu("H100"), (0, 5, 23), swa_pool=False)
    assert cells == [VllmLayerSpec("mla", 656), VllmLayerSpec("mla", 132)] * 2   # latent + index keys per layer


def test_sliding_layers_are_sliding_only_in_the_swa_pool():
    # gemma-3-27b-it: 5 sliding (window 1,024) then 1 full layer; 16 KV heads of 128 over attention TP 2:
    # 8 x 128 x (K + V) x 2 B = 4,096 B per token per layer
    g = load_model("google/gemma-3-27b-it")
    swa = sl.cell_specs(g, range(6), 2, BF16, 2, resolve_gpu("H100"), (0, 5, 23), swa_pool=True)
    assert [(c.kind, c.bytes_per_token, c.window) for c in swa] == [("sliding", 4096, 1024)] * 5 + [("full", 4096, 0)]
    full = sl.cell_specs(g, range(6), 2, BF16, 2, resolve_gpu("H100"), (0, 5, 23), swa_pool=False)
    assert [c.kind for c in full] == ["full"] * 6
    # Qwen3-Next's first 4 layers: 3 Gated DeltaNet layers (a per-request state, no cell) and 1 full-attention layer
    # of 2 KV heads x 256 x 2 x 2 B = 2,048 B
    nxt = load_model("Qwen/Qwen3-Next-80B-A3B-Thinking")
    assert sl.cell_specs(nxt, range(4), 1, BF16, 2, resolve_gpu("H100"), (0, 5, 23), False) == \
        [VllmLayerSpec("full", 2048)]


# Qwen3-Next per DeltaNet layer (its config.json: conv channels 2 x 16 x 128 + 32 x 128 = 8,192, kernel 4; state
# 32 value heads x 128 x 128): conv 8,192 x 3 x 2 B = 49,152, SSM 524,288 elements x 4 B (float32) = 2,097,152
@pytest.mark.parametrize("layers, tp, version, ssm_dtype, expected", [
    (range(48), 1, (0, 5, 23), None, 36 * (49_152 + 2_097_152)),               # 77,266,944
    (range(48), 2, (0, 5, 23), None, 36 * (24_576 + 1_048_576)),               # halves over 2 ranks
    (range(4), 1, (0, 5, 23), None, 3 * (49_152 + 2_097_152)),                 # 3 state layers of 4
    (range(48), 1, (0, 5, 9), "bfloat16", 36 * (49_152 + 524_288 * 2)),         # the config's dtype, from 0.5.9
    (range(48), 1, (0, 5, 8), "bfloat16", 36 * (49_152 + 2_097_152)),          # not read before 0.5.9
    (range(48), 1, (0, 5, 23), "int8", 36 * (49_152 + 2_097_152)),             # unknown: float32
])
def test_state_bytes_per_request(layers, tp, version, ssm_dtype, expected):
    model = load_model("Qwen/Qwen3-Next-80B-A3B-Thinking")
    if ssm_dtype:
        model = dataclasses.replace(model, fields={**model.fields, "engine_ssm_dtype": ssm_dtype})
    assert sl.state_bytes_per_request(model, layers, tp, version) == expected


# ----------------------------------------------------------------------------- planner.py: what every engine shares

@pytest.mark.parametrize("engine, version, expected", [
    ("vllm", "0.18.1", "bfloat16"),        # before vLLM 0.19's resolve_kv_cache_dtype_string: the model's dtype
    ("vllm", "0.19.0", "float8_e4m3"),     # 0.19.0 itself reads kv_cache_scheme {num_bits 8, type float}
    ("sglang", "0.5.15", "bfloat16"),      # before SGLang 0.5.16's mem_cache/kv_cache_dtype.py
    ("sglang", "0.5.16", "float8_e4m3"),   # 0.5.16: kv_cache_quant_algo FP8 -> float8_e4m3fn for auto
    ("sglang", None, "float8_e4m3"),       # no version: SGLang's default (0.5.23), past 0.5.16
    ("vllm", None, "float8_e4m3"),         # no version: vLLM's latest read (0.33)
])
def test_the_checkpoints_fp8_kv_from_the_first_version_that_reads_it(engine, version, expected):
    # nvidia/Qwen3.6-27B-NVFP4's config.json: quantization_config.kv_cache_scheme {"num_bits": 8, "type": "float"}
    p = plan("nvidia/Qwen3.6-27B-NVFP4", gpu="H100", max_model_len=4096, engine=engine, engine_version=version)
    assert p.kv_cache_dtype == expected


_LLAMA2_PAST = "max_model_len 8,192 is past meta-llama/Llama-2-7b-hf's context limit of 4,096 tokens " \
               "(max_position_embeddings): "


@pytest.mark.parametrize("engine, refusal", [
    ("hf", "positions past it were never trained and give wrong outputs"),
    ("vllm", "vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (in the command), and positions past the limit "
             "give wrong outputs"),
    ("sglang", "SGLang refuses it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (in the command), and positions "
               "past the limit give wrong outputs"),
])
def test_the_context_warning_word_for_word(engine, refusal):
    # Llama-2-7b-hf's config.json: max_position_embeddings 4,096, no rope_scaling, so every engine's limit is 4,096
    p = plan("meta-llama/Llama-2-7b-hf", engine=engine, gpu="H100", max_model_len=8192)
    assert p.warnings == [_LLAMA2_PAST + refusal + "; plan 4,096 or fewer"]
    # transformers' generate has no variable to set: its command is not prefixed
    assert p.vllm_command.startswith("AutoModelForCausalLM" if engine == "hf" else ("VLLM_ALLOW", "SGLANG_ALLOW"))


def test_a_card_without_bfloat16_says_so_at_the_head_of_the_notes():
    # the T4 is compute capability 7.5, no bfloat16: vLLM's platforms/cuda.py logs the fall back to float16
    p = plan("meta-llama/Llama-3.1-8B", gpu="T4", max_model_len=1024)
    assert p.dtype == "float16" and p.notes[0] == (
        "the T4 (compute capability 7.5) has no bfloat16: vLLM falls back to float16 ('Your device ... doesn't "
        "support torch.bfloat16. Falling back to torch.float16'); the bytes are the same")


@pytest.mark.parametrize("kwargs, message", [
    ({"engine": "x"}, "unknown engine 'x': use one of vllm, sglang, hf"),
    ({"engine": "hf", "engine_version": "0.19.0"},
     "transformers' generate has no engine_version setting kvplan models: leave it out, or plan for vLLM"),
    ({"enable_prefix_caching": "y" * 50}, "enable_prefix_caching must be true or false, got '" + "y" * 40 + "'"),
    # "LLM" once planned `vllm serve`'s defaults without a word: only "llm_class" picks the LLM class's
    ({"usage_context": "LLM"},
     "unknown usage context 'LLM': use api_server (`vllm serve`) or llm_class (vLLM's offline LLM class)"),
    ({"usage_context": "llm_class", "engine": "sglang"},
     "SGLang has no LLM-class batch defaults (usage context llm_class is vLLM's offline LLM class): leave it out, "
     "or plan with vllm"),
    ({"usage_context": "llm_class", "engine": "hf"},
     "transformers' generate has no LLM-class batch defaults (usage context llm_class is vLLM's offline LLM class): "
     "leave it out, or plan with vllm"),
])
def test_planner_refusals_word_for_word(kwargs, message):
    with pytest.raises(WorkloadError, match=_exact(message)):
        plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=1024, **kwargs)


def test_the_llm_class_is_vllms_to_take():
    """usage_context llm_class is accepted for vLLM and picks the LLM class's batch defaults (0.33
    engine/arg_utils.py get_batch_defaults: 16,384 tokens on an H100, >= 70 GiB and not an A100, where `vllm serve`
    takes 8,192)."""
    p = plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=1024, usage_context="llm_class")
    assert p.max_num_batched_tokens == 16_384     # the LLM class's, worked above
    assert plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=1024).max_num_batched_tokens == 8_192  # serve


def test_vllms_dp_engines_are_replicas_and_sglangs_gpus_are_its_tp():
    # vLLM --data-parallel-size 2 over 4 GPUs: 2 replicas of TP 4 / 2 = 2; SGLang's DP attention splits its TP group,
    # so 2 SGLang GPUs are TP 2 (not 2 / 2); transformers' generate has no TP: 2 GPUs (TP 2, not 2 / 2) are refused
    v = plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=4096, num_gpus=4, dp=2)
    assert (v.num_gpus, v.tensor_parallel_size, v.data_parallel_size) == (4, 2, 2)
    s = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100", max_model_len=4096, num_gpus=2)
    assert (s.num_gpus, s.tensor_parallel_size) == (2, 2)
    with pytest.raises(WorkloadError, match="^the transformers plan covers one GPU"):
        plan("meta-llama/Llama-3.1-8B", engine="hf", gpu="H100", max_model_len=4096, num_gpus=2)


@pytest.mark.parametrize("kwargs, message", [
    ({"dp": 0}, "data parallel size must be a positive whole number, got 0"),
    ({"max_model_len": -2}, "max_model_len must be a positive whole number, got -2"),   # only -1 means "auto"
    ({"max_num_seqs": 0}, "max_num_seqs must be a positive whole number, got 0"),
    ({"max_num_batched_tokens": 0}, "max_num_batched_tokens must be a positive whole number, got 0"),
    ({"block_size": 0}, "block_size must be a positive whole number, got 0"),
])
def test_parallel_and_length_refusals_word_for_word(kwargs, message):
    with pytest.raises(WorkloadError, match=_exact(message)):
        plan("meta-llama/Llama-3.1-8B", gpu="H100", **kwargs)


def test_minus_one_and_auto_are_the_longest_length_that_fits():
    # vLLM's max_model_len -1: Llama-3.1-8B on a 24 GiB L4 holds far less than its 131,072-token context
    minus, auto = (plan("meta-llama/Llama-3.1-8B", gpu="L4", max_model_len=v) for v in (-1, "auto"))
    assert minus.max_model_len == auto.max_model_len == minus.max_model_len_that_fits < 131_072
    assert plan("meta-llama/Llama-3.1-8B", gpu="L4", max_model_len=minus.max_model_len).fits


@pytest.mark.parametrize("version, expected", [("0.19.0", 0.9), ("0.20.0", 0.92)])
def test_the_default_utilization_is_the_versions(version, expected):
    # vLLM config/cache.py gpu_memory_utilization: 0.9 through 0.19 (0.19 :41), 0.92 from 0.20.0 (0.33 :215)
    assert plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=4096,
                engine_version=version).gpu_memory_utilization == expected


def _mlp_only_llama():
    # Llama-3.1-8B's config.json with every one of its 32 layers an MLP-only layer: no layer caches anything
    import json
    from pathlib import Path

    from kvplan import parse_config
    data = json.loads((Path(__file__).resolve().parents[1] / "model_configs" / "meta-llama__Llama-3.1-8B.json")
                      .read_text())
    return parse_config({**data, "layer_types": ["mlp"] * 32})


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_model_that_caches_nothing_word_for_word(engine):
    with pytest.raises(WorkloadError, match=_exact(
            "custom caches nothing (every layer is MLP-only or reuses another layer's KV), so " + engine + " has no "
            "KV pool to size: its KV cache is 0 B (`kvplan estimate`); plan it with --engine hf for the weights "
            "alone")):
        plan(_mlp_only_llama(), engine=engine, gpu="H100", max_model_len=4096)


_HF_TOWER = "transformers' generate loads what its model class builds: image limits and language-model-only " \
            "serving are vLLM settings"


@pytest.mark.parametrize("kwargs, message", [
    ({"kv_dtype": "int8"}, "KV cache dtype int8 is not one vllm stores: use auto, fp8, fp8_e5m2, bf16, fp16 or fp32"),
    ({"engine": "sglang", "kv_dtype": "int4"},
     "KV cache dtype int4 is not one sglang stores: use auto, fp8, fp8_e5m2, bf16, fp16 or fp32"),
    ({"engine": "sglang", "max_model_len": -1}, "SGLang has no automatic context length: pass --max-model-len N"),
    ({"engine": "sglang", "max_model_len": "auto"}, "SGLang has no automatic context length: pass --max-model-len N"),
    ({"kv_cache_memory_bytes": 0}, "kv_cache_memory_bytes must be a positive whole number, got 0"),
    ({"engine": "hf", "language_model_only": True}, _HF_TOWER),
    ({"engine": "hf", "images_per_prompt": 0}, _HF_TOWER),
])
def test_engine_setting_refusals_word_for_word(kwargs, message):
    kwargs = {"max_model_len": 4096, **kwargs}
    with pytest.raises(WorkloadError, match=_exact(message)):
        plan("meta-llama/Llama-3.1-8B", gpu="H100", **kwargs)


def test_kv_cache_memory_bytes_is_the_pool():
    # vLLM --kv-cache-memory-bytes 10 GiB on Llama-3.1-8B (32 layers x 8 KV heads x 128 x (K + V) x 2 B = 131,072 B
    # a token): 10 x 2**30 / 131,072 = 81,920 tokens
    p = plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=4096, kv_cache_memory_bytes=10 * GiB)
    assert p.kv_cache_tokens == 81_920 and "--kv-cache-memory-bytes 10737418240" in p.vllm_command


def test_an_explicit_sglang_fraction_is_the_users():
    # --mem-fraction-static 0.8 is taken as given; without it SGLang picks its own (not vLLM's 0.92)
    s = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100", max_model_len=4096, gpu_memory_utilization=0.8)
    assert s.gpu_memory_utilization == 0.8
    assert plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100",
                max_model_len=4096).gpu_memory_utilization not in (0.8, 0.92)


def test_online_quantization_prices_a_read_checkpoint_by_the_rule(tmp_path):
    # the 2-layer TINY Llama of test_checkpoint_hostile, its 428,672 B of bf16 headers written by hand: read as they
    # are without --quantization; vLLM's --quantization fp8 rewrites the weights at load, so the config rule prices
    # them (and the headers' bytes no longer apply)
    import json

    from test_checkpoint_hostile import TINY, header_of, tiny_tensors, write_shard

    from kvplan import load_model
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    write_shard(tmp_path / "model.safetensors", header_of(tiny_tensors()))
    model = load_model(tmp_path, weights="checkpoint")
    read = plan(model, gpu="L4", max_model_len=2048)
    # the tiny checkpoint's headers sum to 428,672 B (tests/test_checkpoint.py's TINY Llama, by hand there)
    assert read.weights_source == "checkpoint" and read.weights_checkpoint_bytes == 428_672
    online = plan(model, gpu="L4", max_model_len=2048, quantization="fp8")
    assert online.weights_source == "config rule" and online.weights_provenance == (
        "online quantization rewrites the checkpoint's weights, so the config rule prices them")


_FALCON_COPY = ("the bundled config.json of tiiuae/falcon-7b-instruct is an older Hub revision (remote-code auto_map, "
                "transformers 4.28.1), not today's file, so no figure moves")


def test_a_bundled_copys_gap_is_said_once_at_the_head_of_the_notes():
    # kvplan/data/partial_configs.json: falcon-7b-instruct's copy moves no figure (a note, not a warning); its
    # max_position_embeddings is 2,048
    quiet = plan("tiiuae/falcon-7b-instruct", gpu="H100", max_model_len=2048)
    assert quiet.verified and quiet.warnings == [] and quiet.notes[0].startswith(_FALCON_COPY)
    assert sum(_FALCON_COPY in n for n in quiet.notes) == 1
    past = plan("tiiuae/falcon-7b-instruct", gpu="H100", max_model_len=4096)
    assert not past.verified and len(past.warnings) == 1 and past.warnings[0].startswith(
        "max_model_len 4,096 is past tiiuae/falcon-7b-instruct's context limit of 2,048 tokens")
    # the warning first, marked, then the copy's note once, then the engine's own notes
    assert past.notes[0] == "not verified: " + past.warnings[0] and past.notes[1].startswith(_FALCON_COPY)
    assert past.notes[2:] == quiet.notes[1:]


def test_a_bundled_copys_gap_that_moves_a_figure_is_a_warning_said_once(monkeypatch):
    """Since Llama-4-Maverick's copy gained its vision_config no bundled copy's gap moves a figure, so the rule is
    held on a synthetic record: Llama-3.1-8B's copy said to lack a tower of 1,743,864,832 B (warn true)."""
    from kvplan.sources import library

    gap = library.PartialCopy("a trimmed copy", "the weights are 1,743,864,832 B low", True)
    from kvplan.config import load

    monkeypatch.setattr(library, "partial_copies", lambda: {"meta-llama/Llama-3.1-8B": gap})
    load._load_bundled.cache_clear()   # bundled models are read once per process: read this one with the record
    try:
        p = plan("meta-llama/Llama-3.1-8B", gpu="H200", num_gpus=1, max_model_len=4096)
    finally:
        load._load_bundled.cache_clear()
    said = "the bundled config.json of meta-llama/Llama-3.1-8B is a trimmed copy"
    assert not p.verified and len(p.warnings) == 1 and p.warnings[0].startswith(said)
    assert [n.startswith(said) or n.startswith("not verified: " + said) for n in p.notes].count(True) == 1


_VLLM_SETTING = "{} has no {} setting kvplan models: leave it out, or plan for vLLM"


@pytest.mark.parametrize("engine, name, value", [
    # kvplan.planning.inputs._NOT_FOR: what only vLLM has (SGLang's page is one token and it sizes its batch itself)
    ("sglang", "block_size", 16), ("sglang", "max_num_seqs", 8), ("sglang", "max_num_batched_tokens", 8),
    ("sglang", "enforce_eager", True), ("sglang", "cudagraph_estimate", True),
    ("sglang", "kv_cache_memory_bytes", GiB), ("sglang", "nvls", False), ("sglang", "enable_prefix_caching", True),
    # and what transformers' generate has not either: a version, online quantization, DP, EP, drafts, adapters
    ("hf", "engine_version", "0.19.0"), ("hf", "quantization", "fp8"), ("hf", "dp", 2),
    ("hf", "expert_parallel", True), ("hf", "speculative", {"method": "mtp", "num_speculative_tokens": 1}),
    ("hf", "lora", {"max_loras": 1, "max_lora_rank": 8}),
])
def test_a_setting_the_engine_lacks_is_refused_by_name(engine, name, value):
    words = {"sglang": "SGLang", "hf": "transformers' generate"}[engine]
    with pytest.raises(WorkloadError, match=_exact(_VLLM_SETTING.format(words, name))):
        plan("meta-llama/Llama-3.1-8B", engine=engine, gpu="H100", max_model_len=4096, **{name: value})


def test_sglangs_dp_attention_ranks_are_inside_its_tp_group():
    # SGLang --tp 2 --dp 2 with DP attention is 2 GPUs (dp_attention.py: attn_tp_size = tp_size // dp_size), not 4
    s = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100", max_model_len=4096, num_gpus=2, dp=2)
    assert (s.num_gpus, s.tensor_parallel_size) == (2, 2) and "--tp-size 2 --attn-dp-size 2" in s.vllm_command


def test_transformers_is_one_gpu_however_tp_and_pp_split():
    # TP 2 x PP 2 is 4 GPUs for generate, which has no tensor or pipeline parallelism
    with pytest.raises(WorkloadError, match=_exact("the transformers plan covers one GPU (generate has no tensor "
                                                   "parallelism): use --engine vllm or sglang for TP / PP")):
        plan("meta-llama/Llama-3.1-8B", engine="hf", gpu="H100", max_model_len=4096, tp=2, pp=2)


def test_transformers_without_a_length_plans_the_config_limit():
    # Llama-2-7b-hf's config.json: max_position_embeddings 4,096
    assert plan("meta-llama/Llama-2-7b-hf", engine="hf", gpu="H100", max_model_len=None).max_model_len == 4096


def test_sglang_refuses_a_card_below_sm75():
    # SGLang: 'SGLang only supports sm75 and above'; the V100 is compute capability 7.0 (vLLM still runs on it)
    with pytest.raises(WorkloadError, match=_exact(
            "SGLang runs on compute capability 7.5 and newer ('SGLang only supports sm75 and above'), and the "
            "V100-SXM2-16GB has 7.0: plan it for vLLM, or pick a newer card")):
        plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="V100", max_model_len=4096)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_quantized_checkpoint_without_an_fp8_kv_keeps_the_model_dtype(engine):
    # gpt-oss-20b's quantization_config is MXFP4 weights with no kv_cache_scheme: auto is its bfloat16
    assert plan("openai/gpt-oss-20b", engine=engine, gpu="H100", max_model_len=4096).kv_cache_dtype == "bfloat16"


_SGLANG = {"engine": "sglang", "gpu": "H100", "max_model_len": 4096}   # inputs: the settings every case plans


@pytest.mark.parametrize("kwargs", [{"language_model_only": True}, {"images_per_prompt": 0}])
def test_sglang_refuses_image_limits(kwargs):
    with pytest.raises(WorkloadError, match=_exact(
            "kvplan models image limits and language-model-only serving for vLLM; SGLang 0.5 loads the vision tower "
            "of most models whatever its flags: plan it with the tower")):
        plan("google/gemma-3-4b-it", **kwargs, **_SGLANG)


def test_sglangs_settings_reach_its_plan():
    # each setting shows in the launch command SGLang is given (server_args.py flag names)
    eagle = plan("meta-llama/Llama-3.1-8B", speculative={"method": "eagle3", "num_speculative_tokens": 3,
                                                         "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}, **_SGLANG)
    assert "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-draft-model-path " \
           "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" in eagle.vllm_command
    lora = plan("meta-llama/Llama-3.1-8B", lora={"max_loras": 2, "max_lora_rank": 16}, **_SGLANG)
    assert "--enable-lora --max-loras-per-batch 2 --max-lora-rank 16" in lora.vllm_command
    plain = plan("meta-llama/Llama-3.1-8B", **_SGLANG)
    fp8 = plan("meta-llama/Llama-3.1-8B", quantization="fp8", **_SGLANG)
    # fp8 weights: 1 B for each of the 6.98e9 linear weights instead of 2 (embeddings and head stay bf16)
    assert fp8.vllm_command.endswith("--quantization fp8") and fp8.weights_bytes < 0.6 * plain.weights_bytes
    ep = plan("Qwen/Qwen3-30B-A3B", tp=2, expert_parallel=True, **_SGLANG)
    assert "--tp-size 2 --ep-size 2" in ep.vllm_command
    t4 = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="T4", max_model_len=1024)
    assert t4.notes[0] == ("the T4 (compute capability 7.5) has no bfloat16: SGLang runs float16 below SM80; the "
                           "bytes are the same")


@pytest.mark.parametrize("kv_dtype, expected", [("auto", "float8_e4m3"), ("bf16", "bfloat16")])
def test_sglangs_dsa_default_kv_on_blackwell_is_fp8(kv_dtype, expected):
    # SGLang 0.5.23 arg_groups/overrides.py _dsa_kv_cache_dtype_default: "fp8_e4m3" if major >= 10; the B200 is
    # SM 10.0; an explicit --kv-cache-dtype is kept
    p = plan("deepseek-ai/DeepSeek-V3.2", engine="sglang", gpu="B200", num_gpus=8, max_model_len=4096,
             kv_dtype=kv_dtype)
    assert p.kv_cache_dtype == expected


@pytest.mark.parametrize("version, expected", [(None, "0.5.23"), ("0.5.21", "0.5.21")])
def test_sglang_plans_its_own_default_version_or_the_given_one(version, expected):
    # no --engine-version: SGLang's default release kvplan read (0.5.23), not vLLM's 0.33
    s = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100", max_model_len=4096, engine_version=version)
    assert s.engine_version == expected


_VLLM = {"gpu": "H100", "max_model_len": 4096}   # inputs: the settings every case plans


@pytest.mark.parametrize("model, kwargs, flag", [
    # each setting that changes vLLM's memory is in the command it runs (engine_flags.json: vLLM's arg_utils.py)
    ("meta-llama/Llama-3.1-8B", {"max_num_batched_tokens": 2048}, " --max-num-batched-tokens 2048"),
    ("meta-llama/Llama-3.1-8B", {"block_size": 32}, " --block-size 32"),
    ("meta-llama/Llama-3.1-8B", {"max_num_seqs": 64}, " --max-num-seqs 64 "),
    ("meta-llama/Llama-3.1-8B", {"enforce_eager": True}, " --enforce-eager"),
    ("meta-llama/Llama-3.1-8B", {"cudagraph_estimate": False}, "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 vllm serve"),
    ("meta-llama/Llama-3.1-8B", {"tp": 2, "nvls": False}, "NCCL_NVLS_ENABLE=0 vllm serve"),
    ("meta-llama/Llama-3.1-8B", {"lora": {"max_loras": 2, "max_lora_rank": 16}},
     " --enable-lora --max-loras 2 --max-lora-rank 16"),
    ("meta-llama/Llama-3.1-8B", {"speculative": {"method": "eagle3", "num_speculative_tokens": 3,
                                                 "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}},
     """ --speculative-config '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", """
     """"num_speculative_tokens": 3}'"""),
    ("Qwen/Qwen3-30B-A3B", {"tp": 2, "expert_parallel": True}, " --tensor-parallel-size 2 --enable-expert-parallel "),
    ("google/gemma-3-4b-it", {"images_per_prompt": 2}, """ --limit-mm-per-prompt '{"image": 2}'"""),
])
def test_vllms_settings_reach_its_command(model, kwargs, flag):
    assert flag in plan(model, **kwargs, **_VLLM).vllm_command


def test_the_batch_the_plan_was_sized_with_is_the_one_vllm_runs():
    # was a defect: --max-num-batched-tokens 2048 changed the plan (a smaller activation peak) but not the command,
    # so vLLM ran its H100 default of 8,192 and a smaller pool than planned
    given = plan("meta-llama/Llama-3.1-8B", max_num_batched_tokens=2048, **_VLLM)
    default = plan("meta-llama/Llama-3.1-8B", **_VLLM)
    assert (given.max_num_batched_tokens, default.max_num_batched_tokens) == (2048, 8192)
    assert given.activation_bytes < default.activation_bytes
    assert given.vllm_command == default.vllm_command + " --max-num-batched-tokens 2048"
    assert "--block-size" not in default.vllm_command and "--max-num-batched-tokens" not in default.vllm_command


def test_the_weights_rule_prices_the_dtype_served():
    # gpt2's config.json says float32; vLLM serves it in bfloat16 on an H100 (config/model.py _resolve_auto_dtype):
    # the rule prices GPT2LMHeadModel's 124,439,808 parameters (tied head) at 2 B, not 4
    p = plan("openai-community/gpt2", gpu="H100", max_model_len=1024)
    assert p.dtype == "bfloat16" and p.weights_rule_bytes == 124_439_808 * 2


def test_a_missing_tower_is_a_warning_only_without_the_checkpoint(tmp_path):
    # a model whose config cannot count a tower: the rule's weights are low by it, the checkpoint's headers are not
    import json

    from test_checkpoint_hostile import TINY, header_of, tiny_tensors, write_shard

    from kvplan import load_model
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    write_shard(tmp_path / "model.safetensors", header_of(tiny_tensors()))
    gap = "its vision tower is not in the config"

    def towerless(weights):
        m = load_model(tmp_path, weights=weights)
        return dataclasses.replace(m, arch=dataclasses.replace(m.arch, towers_missing=gap))
    read = plan(towerless("checkpoint"), gpu="L4", max_model_len=2048)
    assert read.weights_source == "checkpoint" and read.warnings == []
    rule = plan(towerless("config"), gpu="L4", max_model_len=2048)
    assert rule.verified is False and rule.warnings == [
        f"{rule.model}: {gap}, so the weights leave it out and the KV pool is high by its size: pass the checkpoint "
        "folder (or the Hub id online) for its exact bytes"]
    # transformers' generate loads what its class builds, the tower with it or not at all: no warning
    assert plan(towerless("config"), engine="hf", gpu="L4", max_model_len=2048).warnings == []


@pytest.mark.parametrize("engine, flag", [
    ("sglang", "--enable-lora --max-loras-per-batch 8 --max-lora-rank 16"),   # server_args.py max_loras_per_batch 8
    ("vllm", "--enable-lora --max-loras 1 --max-lora-rank 16"),               # vLLM's LoRAConfig max_loras 1
])
def test_lora_slots_default_to_the_engines_own(engine, flag):
    p = plan("meta-llama/Llama-3.1-8B", engine=engine, gpu="H100", max_model_len=4096, lora={"max_lora_rank": 16})
    assert flag in p.vllm_command


# ----------------------------------------------------------------------------- vllm_kv.py: vLLM's KV accounting

from kvplan.planning.engines import vllm_kv as vk


@pytest.mark.parametrize("version, is_mla, gdn, expected", [
    ((0, 26, 9), False, False, 16),    # FlashAttention's block alignment
    ((0, 26, 9), True, False, 64),     # FlashMLA's
    ((0, 27, 0), True, False, 128),    # MLA hybrids at least 128 from 0.27 (platforms/interface.py)
    ((0, 27, 0), False, False, 16),    # not for attention that is not MLA
    ((0, 33, 0), False, True, 64),     # FlashInfer GDN 'align' mode: lcm(16, 64)
    ((0, 33, 0), True, True, 128),     # lcm(128, 64)
])
def test_hybrid_alignment(version, is_mla, gdn, expected):
    assert vk.hybrid_alignment(version, is_mla, gdn) == expected


@pytest.mark.parametrize("version, expected", [
    ((0, 20, 0), (False, False)), ((0, 20, 1), (True, False)),      # tokens from concurrency from 0.20.1
    ((0, 26, 5), (True, False)), ((0, 27, 0), (True, True)),        # blocks per KV-cache group from 0.27
])
def test_kv_rules_by_release(version, expected):
    rules = vk.KVRules.of(version, 2)
    assert (rules.inflight, rules.tokens_from_concurrency, rules.per_group) == (2, *expected)


def test_the_hybrid_block_holds_the_largest_state():
    # a 1,000,000 B state beside 2,048 B a token of attention, alignment 16: 16 x cdiv(1,000,000, 16 x 2,048) =
    # 16 x 31 = 496 tokens; no Mamba layer or no attention layer: the block as given
    mamba, attn = vk.VllmLayerSpec("mamba", 0, state_bytes=1_000_000), vk.VllmLayerSpec("full", 2048)
    assert vk.hybrid_block_size([mamba, attn], 16, 16) == 496
    assert vk.hybrid_block_size([attn], 16, 16) == 16 and vk.hybrid_block_size([mamba], 16, 16) == 16
    assert vk.hybrid_block_size([mamba, attn], 1024, 16) == 1024     # a larger block given stays


def test_the_hybrid_block_is_the_targets_and_a_draft_state_must_fit_its_page():
    """The target's 1,000,000 B state beside 2,048 B a token, alignment 16: 496 tokens (above), a 1,015,808 B page
    (496 x 2,048), padded to by every state. A drafter's wider attention (8,192 B a token) or larger state does not
    move the block; a draft state of exactly the page fits, one byte more stops vLLM (MambaSpec.page_size_bytes
    asserts page_size_padded >= page_size). A target whose state fills the page exactly (16 x 2,048 = 32,768 B)
    leaves the padding unset, and a larger draft state is the largest page instead (unify_page_sizes): no
    refusal. A draft with state beside an attention-only target: the block as given (refused before, by
    spec_decode.check_vllm_draft_state)."""
    import dataclasses

    mamba, attn = vk.VllmLayerSpec("mamba", 0, state_bytes=1_000_000), vk.VllmLayerSpec("full", 2048)

    def drafted(x):
        return dataclasses.replace(x, draft=True)

    wide = drafted(vk.VllmLayerSpec("full", 8192))
    assert vk.hybrid_block_size([mamba, attn, wide], 16, 16) == 496             # not 16 x cdiv(1e6, 16 x 8,192) = 128
    fits = drafted(vk.VllmLayerSpec("mamba", 0, state_bytes=1_015_808))         # 496 x 2,048
    assert vk.hybrid_block_size([mamba, attn, fits, wide], 16, 16) == 496
    over = drafted(vk.VllmLayerSpec("mamba", 0, state_bytes=1_015_809))
    with pytest.raises(WorkloadError, match=_exact(
            "the draft model's Mamba/linear state is 1,015,809 B a layer on each GPU, more than the 1,015,808 B page "
            "vLLM pads the target's states to (496-token attention blocks x 2,048 B a token), and vLLM stops at "
            "start-up on it (MambaSpec.page_size_bytes asserts the padded page holds the state): use a draft model "
            "whose state is at most 1,015,808 B a layer on each GPU, such as a smaller one of the target's family")):
        vk.hybrid_block_size([mamba, attn, over], 16, 16)
    exact = vk.VllmLayerSpec("mamba", 0, state_bytes=32_768)                    # 16 x 2,048: no padding
    assert vk.hybrid_block_size([exact, attn, over], 16, 16) == 16
    assert vk.hybrid_block_size([attn, over], 16, 16) == 16


def test_pages_are_unified_to_the_largest_that_they_divide():
    # gemma-4-E4B-it: full 4,096 B a token, sliding 2,048: the sliding block is twice as long (block_scale 2); a
    # 3,000 B page (48,000 at 16 tokens) does not divide 16 x 4,096 = 65,536 and is padded to it at 0.33, and so is
    # a 10 B Mamba state (0.33 kv_cache_planning.py :380, the MambaSpec branch); zero-byte layers are left alone
    full, sliding = vk.VllmLayerSpec("full", 4096), vk.VllmLayerSpec("sliding", 2048, window=512)
    odd, mamba = vk.VllmLayerSpec("full", 3000), vk.VllmLayerSpec("mamba", 0, state_bytes=10)
    empty = vk.VllmLayerSpec("full", 0)
    out = vk.unify_page_sizes(vk.page_rule([full, sliding, odd, mamba, empty], (0, 33, 0)), 16)
    assert [x.block_scale for x in out] == [1, 2, 1, 1, 1]
    assert [x.padded_bytes for x in out] == [0, 0, 65_536, 65_536, 0]   # 16 x 4,096
    assert vk.unify_page_sizes([full, full], 16) == [full, full]           # one page size: unchanged


def test_a_draft_state_larger_than_every_page_sets_the_page():
    # a hybrid whose attention page equals its state (16 x 4,096 = 65,536 B: vLLM leaves mamba_page_size_padded
    # unset) beside a draft model's 131,072 B state: the attention block doubles (131,072 / 65,536) and the
    # target's state is padded to 131,072 from 0.26; 0.25 cannot pad a Mamba page (it scales the state's block,
    # which leaves its page as it was, and asserts) and is refused
    full = vk.VllmLayerSpec("full", 4096)
    state, drafted = vk.VllmLayerSpec("mamba", 0, state_bytes=65_536), vk.VllmLayerSpec("mamba", 0, state_bytes=131_072)
    out = vk.unify_page_sizes(vk.page_rule([full, state, drafted], (0, 26, 0)), 16)
    assert [(x.block_scale, x.padded_bytes) for x in out] == [(2, 0), (1, 131_072), (1, 0)]   # 2 x 65,536
    with pytest.raises(WorkloadError, match=r"^vLLM cannot put this model's KV layers in one block pool: a 65,536 B "
                       r"Mamba/linear state page beside a 131,072 B page, which vLLM before 0\.26 cannot pad and "
                       r"fails on at start-up: plan --engine-version 0\.26 or later$"):
        vk.unify_page_sizes(vk.page_rule([full, state, drafted], (0, 25, 1)), 16)


@pytest.mark.parametrize("conv, groups, tp, expected", [
    ((8192, 3), 1, 4, (8192 + 2 * 3 * 128) // 4),   # 1 group over TP 4: 3 replicas more of its 2 x 128: 2,240
    ((8192, 3), 8, 4, 8192 // 4),                   # 8 groups split evenly over 4 ranks
    ((8192, 3), 0, 4, 8192 // 4),                   # not Mamba-2: no groups
    ((8190, 3), 0, 4, 2047),                        # whole channels a rank (8,190 / 4 = 2,047.5)
    ((), 0, 1, 0),                                  # MiniMax lightning attention: no conv state
])
def test_conv_channels_per_rank(conv, groups, tp, expected):
    from kvplan.model.layers import StateSpec
    spec = StateSpec(conv_shape=conv, recurrent_shape=(1,), mixer="mamba2", groups=groups, group_state=128)
    assert vk.conv_channels(spec, tp) == expected


@pytest.mark.parametrize("model, gpu, kwargs, expected", [
    # DeepSeek-V3.2: 61 layers of a 576-element latent (512 + 64 rope) and a 128-dim indexer key of 128 + 128 // 128
    # x 4 = 132 B (deepseek_v2.py Indexer); fp8_ds_mla packs the latent into 656 B (platforms/cuda.py sparse
    # backends, as ds_mla_layout's docstring reads them)
    ("deepseek-ai/DeepSeek-V3.2", "H100", {"kv_dtype": "fp8"}, 61 * (656 + 132)),                   # 48,068
    ("deepseek-ai/DeepSeek-V3.2", "H100", {"kv_dtype": "fp8", "engine_version": "0.19.0"}, 61 * (576 + 132)),
    ("deepseek-ai/DeepSeek-V3.2", "B200", {"kv_dtype": "fp8"}, 61 * (576 + 132)),   # SM 10: FlashInfer keeps 576
    ("deepseek-ai/DeepSeek-V3.2", "MI300X", {"kv_dtype": "fp8"}, 61 * (576 + 132)),  # no CUDA capability
    ("deepseek-ai/DeepSeek-V3.2", "H100", {}, 61 * (576 * 2 + 132)),                 # bf16: 78,324
    ("deepseek-ai/DeepSeek-V3.2", "RTX PRO 6000", {}, 61 * (656 + 132)),             # SM 12 from 0.24: even auto
    ("deepseek-ai/DeepSeek-V3.2", "RTX PRO 6000", {"engine_version": "0.23.0"}, 61 * (576 * 2 + 132)),
    ("deepseek-ai/DeepSeek-V3", "H100", {"kv_dtype": "fp8"}, 61 * 576),              # dense MLA: no ds_mla layout
])
def test_the_sparse_mla_latent_layout_by_card_and_release(model, gpu, kwargs, expected):
    assert plan(model, gpu=gpu, tp=8, max_model_len=4096, **kwargs).kv_bytes_per_token == expected


def test_max_usage_bytes_of_each_kind():
    # 16-token blocks, a 1,000-token request, 256 batched tokens
    full = vk.VllmLayerSpec("full", 100)                       # page 1,600 B; cdiv(1,000, 16) = 63 blocks
    assert vk.max_usage_bytes(full, 16, 1000, 256) == 63 * 1600
    sliding = vk.VllmLayerSpec("sliding", 100, window=128)     # 127 + 256 = 383 tokens: cdiv(383, 16) + 1 = 25
    assert vk.max_usage_bytes(sliding, 16, 1000, 256) == 25 * 1600
    # 2 batches in flight (0.26+): 127 + 512 = 639 tokens, cdiv(639, 16) + 1 = 41 pages
    assert vk.max_usage_bytes(sliding, 16, 1000, 256, inflight=2) == 41 * 1600
    chunked = vk.VllmLayerSpec("chunked", 100, window=128)     # 128 + 256 = 384 tokens: 24 blocks
    assert vk.max_usage_bytes(chunked, 16, 1000, 256) == 24 * 1600
    none = vk.VllmLayerSpec("mamba", 0, state_bytes=5000, states=2)             # 'align' / 'none': k states
    assert vk.max_usage_bytes(none, 16, 1000, 256) == 2 * 5000
    every = vk.VllmLayerSpec("mamba", 0, state_bytes=5000, states=1, states_per_block=True)  # 'all': 63 + 1
    assert vk.max_usage_bytes(every, 16, 1000, 256) == 64 * 5000
    scaled = vk.VllmLayerSpec("sliding", 50, window=128, block_scale=2)  # 32-token blocks of 1,600 B: 12 + 1
    assert vk.max_usage_bytes(scaled, 16, 1000, 256) == 13 * 1600


def test_pool_capacity_of_one_full_group():
    # one group of 2 full layers at 100 B a token, 16-token blocks: 3,200 B a block; a 10,000 B pool is 3 blocks,
    # 48 tokens; a 40-token request takes cdiv(40, 16) = 3 blocks: concurrency 1.0
    groups = vk.KVGroups(16, ((vk.VllmLayerSpec("full", 100), vk.VllmLayerSpec("full", 100)),), True, 0)
    r = vk.pool_capacity(groups, 10_000, 40, 256)
    assert (r.num_blocks, r.kv_cache_tokens, r.max_concurrency, r.blocks_per_request) == (3, 48, 1.0, 3)
    assert vk.pool_capacity(groups, -5, 40, 256).num_blocks == 0            # an overdrawn pool holds no block
    assert vk.pool_capacity(groups, 10_000, 40, 256, tokens_from_concurrency=True).kv_cache_tokens == 40
    # a uniform group led by a sliding layer counts a request by its layers' usage: sliding (cdiv(min(383, 40), 16)
    # + 1) = 4 pages, full cdiv(40, 16) = 3, of 1,600 B: cdiv(11,200, 3,200) = 4 blocks, not the full layer's 3
    slide = vk.KVGroups(16, ((vk.VllmLayerSpec("sliding", 100, window=128),
                              vk.VllmLayerSpec("full", 100)),), True, 0)
    assert vk.pool_capacity(slide, 10_000, 40, 256).blocks_per_request == 4


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_model_whose_weights_are_refused_says_why_on_every_engine(engine):
    """planner._checkpoint_kv reads a checkpoint's KV scheme off the weight shape; a model whose weights kvplan
    refuses (arch None: a family measured wrong, a field its rule does not follow) reaches it with no shape and must
    end in that refusal, word for word, not an AttributeError."""
    import dataclasses

    from kvplan.errors import KVPlanError

    model = dataclasses.replace(load_model("meta-llama/Llama-3.1-8B"), arch=None,
                                arch_error="x: kvplan's parameter rule does not follow this config (test)")
    with pytest.raises(KVPlanError, match=r"^x: kvplan's parameter rule does not follow this config \(test\)$"):
        plan(model, engine=engine, gpu="H100", max_model_len=4096)
