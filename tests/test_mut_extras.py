"""Tests that kill the mutants tools/mutation.py found surviving in kvplan/planning/engines/vllm_extras.py, and pin
the branches of its second half (extra_notes, suggested_pool, stage_specs, gdn_checkpoint).

Each figure comes from hand arithmetic whose inputs are written beside it (the model's config.json in
model_configs/, the vLLM rule the module cites with its file and version), or from a figure another test derives by
hand (named where it is used)."""
from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvplan import load_model
from kvplan.dtypes import resolve_dtype
from kvplan.gpus import resolve_gpu
from kvplan.planning.engines import vllm_extras as X
from kvplan.planning.engines.lora import LoraSettings
from kvplan.planning.engines.spec_decode import Speculative
from kvplan.planning.engines.vllm_profile import VllmSettings
from kvplan.weights.split import with_online_quant

MiB, GiB = 2**20, 2**30
BF16 = resolve_dtype("bfloat16")
FP8 = resolve_dtype("fp8")

LLAMA = "meta-llama/Llama-3.1-8B"        # 32 layers, hidden 4,096, 32 x 128 heads, 8 KV heads, MLP 14,336, V 128,256
DSV3 = "deepseek-ai/DeepSeek-V3"         # 61 MLA layers: kv_lora_rank 512, 128 heads, qk_nope 128, v_head_dim 128; fp8
ROOT = Path(__file__).resolve().parents[1]
JAMBA = "ai21labs/AI21-Jamba-1.5-Mini"   # Mamba-1 mixers beside attention (hybrid)
QWEN35 = "Qwen/Qwen3.5-27B"              # gated-DeltaNet beside full attention, linear_key_head_dim 128, 1 MTP layer
NEMOTRON_H = "nvidia/Nemotron-H-56B-Base-8K"   # Mamba-2 mixers, attention and MLP-only layers
MAMBA = "state-spaces/mamba-2.8b-hf"     # attention-free (Mamba-1 only)


@lru_cache(maxsize=None)
def _m(name: str):
    return load_model(name)


def _s(version: str = "0.33.0", **kw) -> VllmSettings:
    kw.setdefault("max_num_seqs", 1024)
    kw.setdefault("max_num_batched_tokens", 8192)
    kw.setdefault("dtype", "bfloat16")            # as the planner passes them: resolved names, never 'auto'
    kw.setdefault("kv_cache_dtype", "bfloat16")
    return VllmSettings(version=version, **kw)


H100, B200, A100, RTX5090 = (resolve_gpu(g) for g in ("H100", "B200", "A100", "RTX 5090"))


# ----------------------------------------------------------------------------- mla_copies_bytes

# DeepSeek-V3's fp8 kv_b_proj dequantized to bf16 and split into W_UK_T / W_UV (vLLM 0.33
# layers/attention/mla_attention.py `process_weights_after_loading`, :408 `split_kv_b_proj`): kv_lora_rank x
# heads / TP x (qk_nope + v_head_dim) x 2 B a layer: 512 x 128 x 256 x 2 = 33,554,432 B at TP 1; 4,194,304 at TP 8
MLA_LAYER_TP1 = 512 * 128 * (128 + 128) * 2
MLA_LAYER_TP8 = 512 * 16 * (128 + 128) * 2


def _dsv3_shape(**quant):
    shape = _m(DSV3).require_arch()
    return dataclasses.replace(shape, quant=dataclasses.replace(shape.quant, **quant)) if quant else shape


def test_mla_copies_of_deepseek_v3_fp8_at_tp1_and_tp8():
    assert (MLA_LAYER_TP1, MLA_LAYER_TP8) == (33_554_432, 4_194_304)  # 512 x 128 (or 16) heads x 256 x 2 B
    shape = _dsv3_shape()
    assert X.mla_copies_bytes(shape, 1, range(61), 2) == 61 * MLA_LAYER_TP1 == 2_046_820_352  # 61 layers x 33,554,432 B
    at_tp8 = X.mla_copies_bytes(shape, 8, range(61), 2)
    assert at_tp8 == 61 * MLA_LAYER_TP8 == 255_852_544        # 244 MiB, the docstring's figure
    assert type(at_tp8) is int                                 # *_bytes are ints (a / would give 255852544.0)
    # a float32 model dtype doubles them: 4 B an element
    assert X.mla_copies_bytes(shape, 8, range(61), 4) == 2 * 255_852_544


def test_mla_copies_of_a_pipeline_stage_and_past_the_last_layer():
    shape = _dsv3_shape()
    assert X.mla_copies_bytes(shape, 8, range(30, 61), 2) == 31 * MLA_LAYER_TP8
    # a range past the model's 61 layers (an MTP drafter's index) holds no copies: layer 60 only
    assert X.mla_copies_bytes(shape, 8, range(60, 62), 2) == MLA_LAYER_TP8
    assert X.mla_copies_bytes(shape, 8, range(61, 62), 2) == 0


def test_no_copies_for_an_unquantized_kv_b_proj():
    # a bf16 checkpoint: get_and_maybe_dequant_weights returns the weight itself, no new tensor
    assert X.mla_copies_bytes(dataclasses.replace(_dsv3_shape(), quant=None), 8, range(61), 2) == 0


def test_a_layer_without_mla_is_passed_over_not_the_end():
    # layer 0 made an MLP-only layer (mixer None), the next 60 MLA: the walk goes on past it
    shape = _dsv3_shape()
    layers = (dataclasses.replace(shape.layers[0], mixer=None),) + shape.layers[1:]
    assert X.mla_copies_bytes(dataclasses.replace(shape, layers=layers), 8, range(61), 2) == 60 * MLA_LAYER_TP8
    # layer 0 an attention layer without a latent (kv_lora_rank 0): the same
    plain = dataclasses.replace(shape.layers[0], mixer=dataclasses.replace(shape.layers[0].mixer, kv_lora_rank=0))
    assert X.mla_copies_bytes(dataclasses.replace(shape, layers=(plain,) + shape.layers[1:]), 8, range(61), 2) \
        == 60 * MLA_LAYER_TP8


def test_attention_left_unquantized_by_the_checkpoint_has_no_copies():
    # ("attention", -1): every layer's attention is in the checkpoint's ignore list, so kv_b_proj is bf16 already
    assert X.mla_copies_bytes(_dsv3_shape(skip=frozenset({("attention", -1)})), 8, range(61), 2) == 0
    # ("attention", 3): layer 3's alone; the other 60 layers still get their copies
    assert X.mla_copies_bytes(_dsv3_shape(skip=frozenset({("attention", 3)})), 8, range(61), 2) == \
        60 * MLA_LAYER_TP8
    # a skipped MLP ("mlp", -1) leaves the attention quantized
    assert X.mla_copies_bytes(_dsv3_shape(skip=frozenset({("mlp", -1)})), 8, range(61), 2) == 61 * MLA_LAYER_TP8


# ----------------------------------------------------------------------------- runner_is_v2 (vllm_runner.uses_v2)

def _v2(model, version: str, shape=None, speculative=None, pp: int = 1) -> bool:
    shape = shape if shape is not None else model.require_arch()
    return X.runner_is_v2(model, shape, _s(version, pipeline_parallel_size=pp), X.Extras(speculative=speculative))


def test_llama_runs_on_v2_from_0_23_unless_quantized():
    # config/vllm.py 0.23 DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES lists LlamaForCausalLM, taken only when dense and
    # unquantized (`_is_default_v2_model_runner_model`, 0.22-0.23)
    llama = _m(LLAMA)
    assert _v2(llama, "0.22.0") is False and _v2(llama, "0.23.0") is True
    assert _v2(llama, "0.23.0", shape=with_online_quant(llama.require_arch(), "fp8")) is False


def test_hybrids_stay_on_v1_before_0_27_and_attention_free_models_until_0_29():
    # 0.25-0.28 `_get_v2_model_runner_unsupported_features`: hybrid models before 0.27, attention-free ones always
    qwen35, gemma2, mamba = _m(QWEN35), _m("google/gemma-2-9b"), _m(MAMBA)
    assert qwen35.spec_kinds == {"full", "state"} and gemma2.spec_kinds == {"full", "sliding"}
    assert _v2(qwen35, "0.26.0") is False        # dense hybrid: V1
    assert _v2(gemma2, "0.26.0") is True         # two attention kinds, no state: not a hybrid, dense: V2
    assert _v2(mamba, "0.26.0") is False         # attention-free: V1
    assert _v2(mamba, "0.28.0") is False
    assert _v2(mamba, "0.29.0") is True          # every model on V2 from 0.29


def test_an_attention_free_model_with_mlp_only_layers_is_attention_free():
    # Mamba mixers and MLP-only layers ("none" kinds hold no cache), no attention: attention-free, so V1 at 0.27
    # even with a listed architecture (GraniteMoeForCausalLM is in 0.27's list)
    model = SimpleNamespace(spec_kinds=frozenset({"state", "none"}), architecture="GraniteMoeForCausalLM")
    shape = SimpleNamespace(has_experts=True, quant=None)
    assert X.runner_is_v2(model, shape, _s("0.27.0"), X.Extras()) is False
    listed = SimpleNamespace(spec_kinds=frozenset({"full", "none"}), architecture="GraniteMoeForCausalLM")
    assert X.runner_is_v2(listed, shape, _s("0.27.0"), X.Extras()) is True


def test_speculative_methods_v2_lacks_keep_v1():
    # 0.26 `_get_v2_model_runner_unsupported_features`: a draft model is not among eagle, eagle3, mtp, dflash, dspark
    llama = _m(LLAMA)
    assert _v2(llama, "0.26.0") is True
    assert _v2(llama, "0.26.0", speculative=Speculative("draft_model", 2, _m("meta-llama/Llama-3.2-1B"))) is False
    assert _v2(llama, "0.26.0", speculative=Speculative("eagle", 2)) is True
    # 0.26-0.29 list "EAGLE3 with pipeline parallelism"
    assert _v2(llama, "0.29.0", speculative=Speculative("eagle3", 2), pp=2) is False
    assert _v2(llama, "0.29.0", speculative=Speculative("eagle3", 2), pp=1) is True
    assert _v2(llama, "0.30.0", speculative=Speculative("eagle3", 2), pp=2) is True


# ----------------------------------------------------------------------------- graphs_for

# Llama-3.1-8B, 1,024 sequences, 8,192 tokens: capture sizes 1, 2, 4, 8..248 by 8, 256..512 by 16: 3 + 31 + 17 = 51
# (config/vllm.py `_set_cudagraph_sizes`, 0.33: max 2 x 1,024 capped at 512); PIECEWISE first 2 x 512 x
# (3 x 14,336 + 6 x 4,096) x 2 B = 132 MiB, FULL first 512 x 4,096 x 130 B = 260 MiB, each further graph
# round(32 x 0.19 / 2) x 2 = 6 MiB and round(32 x 0.17 / 2) x 2 = 6 MiB (vllm_cudagraph's calibration):
# V1 = max(132, 260) + 50 x 6 + 50 x 6 = 860 MiB; V2 (both firsts) 132 + 260 + 600 = 992 MiB
PW_FIRST, FULL_FIRST = 2 * 512 * (3 * 14336 + 6 * 4096) * 2, 512 * 4096 * 130


def _graph(model_name=LLAMA, device=H100, extras=X.Extras(), layers=range(32), *args, **settings):
    model = _m(model_name)
    version = settings.pop("version", "0.33.0")
    return X.graphs_for(model, model.require_arch(), device, _s(version, **settings), BF16, extras, *args)(layers)


def test_llama_graph_estimate_v1():
    assert (PW_FIRST, FULL_FIRST) == (132 * MiB, 260 * MiB)
    est = _graph()
    assert (est.piecewise_graphs, est.full_graphs, est.total_bytes) == (51, 51, 860 * MiB)


def test_the_v1_runner_is_the_default_and_v2_estimates_from_0_29():
    # v1/worker/gpu/model_runner.py 0.28:843: V2's profile_cudagraph_memory returns 0 through 0.28
    assert _graph(version="0.28.0").total_bytes == 860 * MiB          # v2 left out: the V1 runner's estimate
    assert _graph(LLAMA, H100, X.Extras(), range(32), True, version="0.28.0") is None
    v2 = _graph(LLAMA, H100, X.Extras(), range(32), True, version="0.29.0")
    assert v2.total_bytes == (132 + 260 + 50 * 6 + 50 * 6) * MiB == 992 * MiB


def test_no_estimate_under_enforce_eager_or_before_0_18():
    assert _graph(enforce_eager=True) is None
    assert _graph(version="0.17.0") is None


def test_sm100_captures_up_to_1024_from_0_28():
    # 0.28 `_set_cudagraph_sizes`: max capture 1,024 on SM10x (B200): 3 + 31 + 49 sizes (256..1,024 by 16) = 83;
    # PIECEWISE first 2 x 1,024 x 67,584 x 2 = 264 MiB, FULL first 1,024 x 4,096 x 130 = 520 MiB:
    # max(264, 520) + 82 x 6 + 82 x 6 = 1,504 MiB
    est = _graph(device=B200)
    assert (est.piecewise_graphs, est.full_graphs, est.total_bytes) == (83, 83, 1504 * MiB)
    assert _graph(device=RTX5090).piecewise_graphs == 51        # SM 12.0: 512, as on an H100


def test_spec_tokens_shape_the_capture_sizes_and_the_full_graphs():
    # 8 sequences, 128 tokens, 2 speculative tokens (q = 3), 0.33: max capture min(2 x 8 x 3, 512) = 48, sizes
    # 1, 2, 4, 8, 16, 24, 32, 40, 48 and the decode batches n x 3 for n in 1, 2, 4, 8: 3, 6, 12, 24 -> 12 sizes;
    # FULL graphs for sizes 3..24: 3, 4, 6, 8, 12, 16, 24 -> 7 (cudagraph_dispatcher.py:203-229)
    est = _graph(max_num_seqs=8, max_num_batched_tokens=128, spec_tokens=2)
    assert (est.piecewise_graphs, est.full_graphs) == (12, 7)
    assert "largest 48 tokens" in est.formula


def test_gpt_oss_caps_its_captures_at_1024():
    # gpt-oss sets max_capture_size 1,024: with 1,025 batched tokens the sizes stop at 1,024 (83 of them), the
    # token budget is not added (1,025 > 1,024)
    est = _graph("openai/gpt-oss-20b", H100, X.Extras(), range(24), max_num_batched_tokens=1025)
    assert est.piecewise_graphs == 83 and "largest 1024 tokens" in est.formula


def test_lora_captures_every_graph_twice_but_the_first_once():
    # graphs with and without active adapters; the first capture is the extrapolation's base, taken once:
    # 2 x 860 - 260 = 1,460 MiB
    est = _graph(extras=X.Extras(lora=LoraSettings(1, 16)))
    assert est.total_bytes == 2 * 860 * MiB - 260 * MiB == 1460 * MiB
    assert est.formula.endswith("= 860 MiB (51 PIECEWISE and 51 FULL graphs, largest 512 tokens) x 2 LoRA cases "
                                "(first captures once)")


# ----------------------------------------------------------------------------- extra_lines

# V2's persistent sampler state per request (vllm_runner.persistent_bytes, 0.33 v1/worker/gpu/sample/): int32
# [V] + [ceil(V/32)] + [ceil(V/32)] x (1 + k) + 3 x 1,024 + 128 + 1,024 + 129 + 128; Llama-3.1-8B V = 128,256,
# ceil(V / 32) = 4,008
SAMPLER_K0 = 1024 * 4 * (128256 + 4008 + 4008 + 4481)        # 576,524,288 B (549.8 MiB)
SAMPLER_K2 = 1024 * 4 * (128256 + 4008 + 3 * 4008 + 4481)    # 609,357,824 B


def _lines(model_name, settings, extras=X.Extras(), layers=None, moe_ranks=1, graph=None, act=BF16, **kw):
    model = _m(model_name)
    layers = layers if layers is not None else range(model.num_layers)
    return X.extra_lines(model, model.require_arch(), settings, act, graph, extras, layers, moe_ranks, **kw)


def test_v2_sampler_buffers_on_the_last_stage_only():
    assert (SAMPLER_K0, SAMPLER_K2) == (576_524_288, 609_357_824)  # 4,096 B x (140,753 or 148,769) int32 rows
    assert _lines(LLAMA, _s(), v2=True) == {X.SAMPLER_BUFFERS: SAMPLER_K0}   # last stage, nothing received
    assert _lines(LLAMA, _s(), v2=True, last=False) == {}
    assert _lines(LLAMA, _s()) == {}                                          # V1 by default: no such buffers
    assert _lines(LLAMA, _s(spec_tokens=2), v2=True) == {X.SAMPLER_BUFFERS: SAMPLER_K2}
    assert _lines(LLAMA, _s(), v2=True, last=False, received=123) == {X.RECEIVE_BUFFERS: 123}


def test_the_mla_copies_line():
    assert _lines(DSV3, _s(tensor_parallel_size=8)) == {X.MLA_COPIES: 255_852_544}    # 61 x 4 MiB, as above


def test_a_draft_models_vocabulary_pads_to_64():
    # gpt2 drafting for gpt2-medium on one GPU: GPT-2 small's 124,439,808 parameters (embeddings tied), its
    # 50,257-row embedding padded to 50,304 (786 x 64): 47 x 768 = 36,096 more; bf16
    assert _lines("openai-community/gpt2-medium", _s(),
                  X.Extras(Speculative("draft_model", 2, _m("openai-community/gpt2")))) == \
        {"draft model weights": (124_439_808 + 47 * 768) * 2}


# Qwen1.5-MoE-A2.7B drafting for itself on TP 8 (as tests/test_mut_spec.py derives it): per layer q/k/v with biases
# and o over TP, 60 experts of 3 x 1,408 x 2,048 x 2 B, a shared expert of 5,632 over TP, the router and the norms
# whole; embed_tokens and lm_head of 151,936 x 2,048 x 2 B over TP, the final norm whole
EXPERT = 3 * 1408 * 2048 * 2
QWEN_MOE_REST = (((3 * 2048 * 2048 + 3 * 2048) * 2 + 2048 * 2048 * 2) // 8 + 3 * 5632 * 2048 * 2 // 8
                 + (60 * 2048 + 2048) * 2 + 2 * 2048 * 2)


def test_a_moe_draft_follows_expert_parallelism():
    qwen = "Qwen/Qwen1.5-MoE-A2.7B-Chat"
    spec = X.Extras(Speculative("draft_model", 2, _m(qwen)))
    sharded = 24 * (QWEN_MOE_REST + 60 * EXPERT // 8) + 2 * 151936 * 2048 * 2 // 8 + 2048 * 2
    whole = sharded + 24 * (8 * EXPERT - 60 * EXPERT // 8)     # ceil(60 / 8) = 8 whole experts: half one more
    # 24 x (4,195,840 attention + 8,650,752 shared + 249,856 router + 8,192 norms + 129,761,280 experts)
    # + 2 x 77,791,232 (embed_tokens, lm_head) + 4,096 final norm
    assert (sharded, whole - sharded) == (3_584_368_640, 207_618_048)
    assert _lines(qwen, _s(tensor_parallel_size=8), spec, moe_ranks=8) == {"draft model weights": sharded}
    assert _lines(qwen, _s(tensor_parallel_size=8, enable_expert_parallel=True), spec, moe_ranks=8) == \
        {"draft model weights": whole}


EAGLE_LAYER_TP2 = (2 * 4096 * 4096 + 2 * 4096 * 1024) * 2 // 2 + 3 * 4096 * 14336 * 2 // 2 + 2 * 4096 * 2  # = 218,120,192 B: attention, MLP, norms


def test_an_eagle_head_is_sized_at_the_settings_version():
    # the one-layer EAGLE-1 head of Llama-3.1-8B on TP 2 (as tests/test_mut_spec.py derives it): q, o, k, v
    # (2 x 4,096 x 4,096 + 2 x 4,096 x 1,024) x 2 B / 2 + gate, up, down 3 x 4,096 x 14,336 x 2 B / 2 + 2 norms
    # 2 x 4,096 x 2 B = 218,120,192 B, and fc [H, 2H] whole, 67,108,864 B; 0.8.4's llama_eagle.py drops layer 0's
    # input_layernorm (4,096 x 2 B), 0.8.3's V0 eagle.py keeps it
    assert EAGLE_LAYER_TP2 == 218_120_192
    spec = X.Extras(Speculative("eagle", 3, _m("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")))
    assert _lines(LLAMA, _s("0.8.3", tensor_parallel_size=2), spec, moe_ranks=2) == \
        {"draft model weights": 218_120_192 + 67_108_864}
    assert _lines(LLAMA, _s("0.8.4", tensor_parallel_size=2), spec, moe_ranks=2) == \
        {"draft model weights": 218_120_192 + 67_108_864 - 8_192}  # less 4,096 x 2 B layer-0 norm


def test_lora_slots_of_a_stage_under_expert_parallelism():
    # Mixtral-8x7B (hidden 4,096, 32 x 128 heads, 8 KV heads, 8 experts of 14,336), TP 2, EP over 2 ranks, rank 16,
    # one adapter, no embedding slots, layers 0-15 (a PP stage): attention 16 x (4 x 4,096 + 2 x 4,096 / 2 + 2 x 512)
    # = 16 x 21,504; experts: 4 whole (lora/layers/fused_moe.py local_num_experts) x 16 x (3 x 4,096 + 3 x 14,336)
    per_layer = 16 * 21504 + 4 * 16 * (3 * 4096 + 3 * 14336)
    lora = X.Extras(lora=LoraSettings(1, 16, embeddings=False))
    s = _s(tensor_parallel_size=2, enable_expert_parallel=True, max_num_seqs=256)
    assert 16 * per_layer * 2 == 124_256_256  # 16 layers x 3,883,008 x 2 B
    assert _lines("mistralai/Mixtral-8x7B-v0.1", s, lora, range(16), 2) == {"LoRA adapter slots": 124_256_256}  # as the line above
    # without EP every expert, its 14,336 rows split over the 2 MoE ranks: 8 x 16 x (3 x 4,096 + 3 x 7,168)
    s = _s(tensor_parallel_size=2, max_num_seqs=256)
    assert _lines("mistralai/Mixtral-8x7B-v0.1", s, lora, range(16), 2) == \
        {"LoRA adapter slots": 16 * (16 * 21504 + 8 * 16 * (3 * 4096 + 3 * 7168)) * 2}


def test_graph_lines_applied_captured_or_left_out():
    graph = SimpleNamespace(total_bytes=860 * MiB)
    assert _lines(LLAMA, _s(), graph=graph) == {X.GRAPHS: 860 * MiB}                      # applied from 0.20
    assert _lines(LLAMA, _s("0.19.0"), graph=graph) == {}                                  # computed, not applied
    assert _lines(LLAMA, _s("0.19.0", cudagraph_estimate=True), graph=graph) == {X.GRAPHS: 860 * MiB}
    assert _lines(LLAMA, _s(cudagraph_estimate=False), graph=graph) == {}
    assert _lines(LLAMA, _s(kv_cache_memory_bytes=GiB), graph=graph) == {X.GRAPHS_CAPTURED: 860 * MiB}
    assert _lines(LLAMA, _s(), graph=SimpleNamespace(total_bytes=0)) == {}


# ----------------------------------------------------------------------------- extra_notes

V2_NOTE = ("vLLM's V2 model runner makes no CUDA-graph estimate before 0.29: the graphs it captures after sizing the "
           "KV cache come out of the (1 - utilization) headroom")
CALIBRATION = ("; calibrated on vLLM's own estimates at v0.19 on H100s (validation/vllm_cudagraph.md: median 0.09 "
               "GiB off)")
POOL_GIVEN = ("--kv-cache-memory-bytes: vLLM takes that pool as given and skips its utilisation budget; the plan fits "
              "only if weights, activation, non-torch memory, the pool and the CUDA graphs captured after it all fit "
              "on the card")
GRAPH = SimpleNamespace(total_bytes=860 * MiB, formula="CUDA graphs = F")


def _notes(model_name=LLAMA, s=None, graph=None, extras=X.Extras(), extra=None):
    return X.extra_notes(_m(model_name), s or _s(), graph, extras, extra or {})


def test_the_v2_note_where_no_estimate_is_made():
    assert _notes() == [V2_NOTE]                                 # graph None at 0.33: the V2 runner before 0.29
    assert _notes(s=_s("0.20.0")) == [V2_NOTE]                   # the note's first release
    assert _notes(s=_s(enforce_eager=True)) == []                # no graphs at all
    assert _notes(s=_s("0.19.0")) == []                          # before 0.20 no V2 runner
    assert _notes(s=_s(kv_cache_memory_bytes=GiB)) == [V2_NOTE, POOL_GIVEN]


def test_an_applied_estimate_has_its_formula_note_only():
    assert _notes(graph=GRAPH, extra={X.GRAPHS: 860 * MiB}) == ["CUDA-graph estimate: CUDA graphs = F" + CALIBRATION]
    assert _notes(graph=GRAPH, extra={X.GRAPHS_CAPTURED: 860 * MiB}) == \
        ["CUDA-graph estimate: CUDA graphs = F" + CALIBRATION]
    assert _notes(graph=SimpleNamespace(total_bytes=0, formula="x")) == []


def test_an_estimate_not_subtracted_says_so():
    before = ("vLLM estimates 860.00 MiB of CUDA graphs but does not subtract it (VLLM_MEMORY_PROFILER_ESTIMATE_"
              "CUDAGRAPHS=0 is its default before 0.20): the graphs come out of the (1 - utilization) headroom")
    assert _notes(s=_s("0.19.0"), graph=GRAPH) == [before, "CUDA-graph estimate: CUDA graphs = F" + CALIBRATION]
    after = ("vLLM estimates 860.00 MiB of CUDA graphs but does not subtract it (VLLM_MEMORY_PROFILER_ESTIMATE_"
             "CUDAGRAPHS=0): the graphs come out of the (1 - utilization) headroom")
    assert _notes(s=_s(cudagraph_estimate=False), graph=GRAPH)[0] == after
    assert _notes(s=_s("0.20.0", cudagraph_estimate=False), graph=GRAPH)[0] == after     # the default is 1 from 0.20


def test_speculative_and_lora_notes():
    spec = X.Extras(Speculative("eagle", 3, _m("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")))
    notes = _notes(s=_s(spec_tokens=3, tensor_parallel_size=2), graph=GRAPH, extras=spec, extra={X.GRAPHS: 1})
    assert len(notes) == 3
    assert notes[1].startswith("speculative decoding (eagle, 3 drafted per step): draft weights "
                               "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: 1 layer(s) 218,120,192 B + fc 67,108,864 B")
    assert notes[1].endswith("; its 1 KV layer(s) share the pool, so every token costs the target's bytes and the "
                             "draft's; vLLM counts the draft in 'Model loading took'")
    assert notes[2] == ("the drafter's own CUDA graphs are not in kvplan's estimate, where vLLM's holds them (V1 "
                        "captures the drafter inside the target's PIECEWISE graphs, gpu_model_runner.py _dummy_run; "
                        "V2 from 0.29 measures `speculator.capture()`): the pool may be smaller by their size")
    assert len(_notes(s=_s(spec_tokens=3), extras=spec)) == 2           # no graph: no drafter-graph note
    # at 0.8.3 the head keeps layer 0's input_layernorm: the note sizes it at the settings' version
    old = _notes(s=_s("0.8.3", spec_tokens=3, tensor_parallel_size=2), extras=spec)
    assert old[0].startswith("speculative decoding (eagle, 3 drafted per step): draft weights "
                             "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: 1 layer(s) 218,120,192 B + fc 67,108,864 B (whole "
                             "on every rank); ") and "input_layernorm" not in old[0]
    # LoRA on Llama-3.1-8B, 1 adapter of rank 16 with embedding slots, the whole model on TP 1: per layer attention
    # 16 x (4 x 4,096 + 2 x 4,096 + 2 x 1,024) = 16 x 26,624, MLP 16 x (3 x 4,096 + 3 x 14,336) = 16 x 55,296;
    # embed / lm_head 2 x 16 x (128,256 + 4,096)
    per_slot, embed = 32 * 16 * (26624 + 55296), 2 * 16 * (128256 + 4096)
    lora = _notes(extras=X.Extras(lora=LoraSettings(1, 16)))
    assert lora == [V2_NOTE, f"LoRA slots = 1 adapters x ({per_slot:,} layer + {embed:,} embed/lm_head elements at "
                             f"rank 16) x 2 B = {(per_slot + embed) * 2:,} B for the whole model (vLLM lora/layers; "
                             "counted in 'Model loading took')"]


def test_deepseek_v3_without_drafting_names_its_idle_mtp_layer():
    # TP 8 x DP 2: the MTP layer's experts over the 16 MoE ranks (tests/test_mut_spec.py derives 959,901,856 B =
    # 228,079,328 whole + 216,059,392 / 8 + 11,277,041,664 / 16 = 915.43 MiB); its KV one more MLA layer,
    # (512 + 64) x 2 B = 1,152 B a token
    notes = _notes(DSV3, _s(tensor_parallel_size=8, data_parallel_size=2), GRAPH, extra={X.GRAPHS: 1})
    assert len(notes) == 2
    assert notes[1] == ("MTP: the checkpoint's 1 MTP layer(s) are not loaded without speculative decoding (vLLM "
                        "deepseek_v2.py / qwen3_next.py / qwen3_5.py skip them), so this plan holds none; drafting "
                        "with them adds 915.43 MiB of weights per GPU and 1,152 B of KV per token: plan with "
                        "--speculative mtp")
    assert 959_901_856 / MiB == pytest.approx(915.43, abs=0.005)  # 959,901,856 / 1,048,576
    # TP 8 x DP 3 with expert parallelism: 11 whole experts on the heaviest of 24 ranks (tests/test_mut_spec.py:
    # 228,079,328 + 27,007,424 + 11 x 44,050,944 = 739,647,136 B = 705.38 MiB)
    ep = _notes(DSV3, _s(tensor_parallel_size=8, data_parallel_size=3, enable_expert_parallel=True), GRAPH,
                extra={X.GRAPHS: 1})
    assert "drafting with them adds 705.38 MiB of weights per GPU" in ep[1]
    assert 739_647_136 / MiB == pytest.approx(705.38, abs=0.005)  # 739,647,136 / 1,048,576
    # an fp8 cache: 576 x 1 B a token
    assert "and 576 B of KV per token" in _notes(DSV3, _s(tensor_parallel_size=8, kv_cache_dtype="fp8"), GRAPH,
                                                 extra={X.GRAPHS: 1})[1]


def test_the_mtp_drafting_note_names_the_targets_layers():
    # --speculative mtp on DeepSeek-V3: the drafter is the checkpoint's one MTP layer (num_nextn_predict_layers 1),
    # a decoder layer like the last; its KV one more MLA layer
    notes = _notes(DSV3, _s(tensor_parallel_size=8, spec_tokens=1), extras=X.Extras(Speculative("mtp", 1)))
    assert notes[1] == ("speculative decoding (mtp, 1 drafted per step): draft weights 1 MTP layer(s): one decoder "
                        "layer like the last, eh_proj [H, 2H] and norms whole on every rank; embed_tokens and the "
                        "head shared with the target; its 1 KV layer(s) share the pool, so every token costs the "
                        "target's bytes and the draft's; vLLM counts the draft in 'Model loading took'")


def test_notes_size_experts_over_tp_times_dp():
    # Mixtral-8x7B LoRA on TP 1 x DP 2, no EP: every expert, its 14,336 rows over the 2 MoE ranks; per layer
    # 16 x (4 x 4,096 + 2 x 4,096 + 2 x 1,024) + 8 x 16 x (3 x 4,096 + 3 x 7,168) = 296,960 x 16, x 32 layers
    per_slot = 32 * 16 * (26624 + 8 * (3 * 4096 + 3 * 7168))
    assert per_slot == 152_043_520
    notes = _notes("mistralai/Mixtral-8x7B-v0.1", _s(data_parallel_size=2),
                   extras=X.Extras(lora=LoraSettings(1, 16, embeddings=False)))
    assert notes[1] == (f"LoRA slots = 1 adapters x (152,043,520 layer + 0 embed/lm_head elements at rank 16) x 2 B = "
                        f"{per_slot * 2:,} B for the whole model (vLLM lora/layers; counted in 'Model loading took')")
    # with expert parallelism 4 whole experts of the 8 on each rank: 8 x 16 x ... becomes 4 x 16 x (3 x 4,096 +
    # 3 x 14,336)
    whole = 32 * 16 * (26624 + 4 * (3 * 4096 + 3 * 14336))
    notes = _notes("mistralai/Mixtral-8x7B-v0.1", _s(data_parallel_size=2, enable_expert_parallel=True),
                   extras=X.Extras(lora=LoraSettings(1, 16, embeddings=False)))
    assert whole == 126_877_696 and notes[1].startswith("LoRA slots = 1 adapters x (126,877,696 layer + 0 ")  # 32 x 16 x 247,808
    # a MoE draft model on TP 2 x DP 2: its routed experts over 4 ranks (fused_moe/config.py, 0.33)
    qwen = "Qwen/Qwen1.5-MoE-A2.7B-Chat"
    notes = _notes(qwen, _s(tensor_parallel_size=2, data_parallel_size=2, spec_tokens=2),
                   extras=X.Extras(Speculative("draft_model", 2, _m(qwen))))
    assert notes[1] == ("speculative decoding (draft_model, 2 drafted per step): draft weights "
                        "Qwen/Qwen1.5-MoE-A2.7B-Chat: every weight, split over TP 2, its routed experts over 4 "
                        "ranks; its 24 KV layer(s) share the pool, so every token costs the target's bytes and the "
                        "draft's; vLLM counts the draft in 'Model loading took'")


# ----------------------------------------------------------------------------- suggested_pool

HEAD = SimpleNamespace(weights_bytes=16 * GiB, activation_bytes=2 * GiB, non_torch_bytes=1 * GiB)


def test_suggested_pool_counts_an_applied_estimate_twice_from_0_27():
    # 80 GiB requested - 19 GiB (weights, activation, non-torch) = 62,464 MiB; less the 500 MiB sampler line, the
    # 860 MiB captured after, and 150 MiB (gpu_worker.py 0.19 :443); 0.27+ the non-KV figure holds the applied 860
    # MiB too
    extra = {X.SAMPLER_BUFFERS: 500 * MiB, X.GRAPHS: 860 * MiB}
    graph = SimpleNamespace(total_bytes=860 * MiB)
    assert X.suggested_pool(_s("0.26.0"), 80 * GiB, HEAD, extra, graph) == (62464 - 500 - 860 - 150) * MiB  # 80 GiB - 19 GiB = 62,464 MiB
    assert X.suggested_pool(_s("0.27.0"), 80 * GiB, HEAD, extra, graph) == (62464 - 500 - 860 - 860 - 150) * MiB  # applied 860 MiB twice
    # a captured-after line is not counted again beside the graph itself
    captured = {X.GRAPHS_CAPTURED: 860 * MiB}
    assert X.suggested_pool(_s("0.27.0"), 80 * GiB, HEAD, captured, graph) == (62464 - 860 - 150) * MiB  # captured once
    assert X.suggested_pool(_s("0.19.0"), 80 * GiB, HEAD, {}, None) == (62464 - 150) * MiB  # 0.19: the 150 MiB only


def test_suggested_pool_none_before_0_19_or_with_a_given_pool_and_never_negative():
    assert X.suggested_pool(_s("0.18.1"), 80 * GiB, HEAD, {}, None) is None
    assert X.suggested_pool(_s(kv_cache_memory_bytes=GiB), 80 * GiB, HEAD, {}, None) is None
    assert X.suggested_pool(_s(), 19 * GiB + 150 * MiB, HEAD, {}, None) == 0
    assert X.suggested_pool(_s(), 19 * GiB + 150 * MiB + 1, HEAD, {}, None) == 1
    assert X.suggested_pool(_s(), 10 * GiB, HEAD, {}, None) == 0


# ----------------------------------------------------------------------------- prefix_caching_default, mamba_states

def test_prefix_caching_defaults():
    assert X.prefix_caching_default(_m(LLAMA), (0, 19, 0)) is True
    assert X.prefix_caching_default(_m(MAMBA), (0, 33, 0)) is False         # attention-free: 'still experimental'
    assert X.prefix_caching_default(_m(JAMBA), (0, 25, 0)) is False
    assert X.prefix_caching_default(_m(JAMBA), (0, 26, 0)) is True
    no_attention = SimpleNamespace(has_state=True, spec_kinds=frozenset({"state", "none"}))
    assert X.prefix_caching_default(no_attention, (0, 33, 0)) is False


def test_mamba_states_by_mode():
    jamba, nemo, qwen = _m(JAMBA), _m(NEMOTRON_H), _m(QWEN35)
    assert X.mamba_states(jamba, (0, 18, 0), 2, True) == ("none", 1)         # before mamba_cache_mode
    assert X.mamba_states(jamba, (0, 19, 0), 2, True) == ("all", 2)          # Mamba-family 'all': k fixed pages
    assert X.mamba_states(jamba, (0, 28, 0), 0, True) == ("all", 0)
    assert X.mamba_states(jamba, (0, 29, 0), 2, True) == ("align", 4)        # 'align' for every model from 0.29
    assert X.mamba_states(jamba, (0, 33, 0), 2, False) == ("none", 3)        # off: 1 + k
    assert X.mamba_states(qwen, (0, 28, 0), 1, True) == ("align", 3)         # not a Mamba-family model
    # Mamba-2's prefill checkpoint block from 0.32 (mamba_mixer2.py)
    assert X.mamba_states(nemo, (0, 31, 0), 0, True) == ("align", 2)
    assert X.mamba_states(nemo, (0, 32, 0), 0, True) == ("align", 3)
    # gated DeltaNet's with FlashInfer's prefill, 0.33 (qwen_gdn_linear_attn.py:739-750): Qwen3.6-27B on an H100
    assert X.mamba_states(qwen, (0, 33, 0), 0, None, H100) == ("align", 3)
    assert X.mamba_states(qwen, (0, 32, 0), 0, None, H100) == ("align", 2)
    assert X.mamba_states(qwen, (0, 33, 0), 0, None, A100) == ("align", 2)


def test_flashinfer_gdn_prefill_by_card():
    qwen = _m(QWEN35)
    assert X.flashinfer_gdn_prefill(qwen, None) is False
    assert X.flashinfer_gdn_prefill(qwen, dataclasses.replace(H100, compute_capability=None)) is False
    assert X.flashinfer_gdn_prefill(qwen, H100) is True
    assert X.flashinfer_gdn_prefill(qwen, B200) is True                      # SM 10.0, key head dim 128
    assert X.flashinfer_gdn_prefill(qwen, RTX5090) is True                   # SM 12.0
    assert X.flashinfer_gdn_prefill(qwen, A100) is False
    assert X.flashinfer_gdn_prefill(qwen, dataclasses.replace(B200, compute_capability=(11, 0))) is False
    other = SimpleNamespace(fields={"linear_key_head_dim": 64})
    assert X.flashinfer_gdn_prefill(other, B200) is False and X.flashinfer_gdn_prefill(other, H100) is True


# ----------------------------------------------------------------------------- stage_specs, gdn_checkpoint

# Jamba-1.5-Mini (config.json): Mamba-1, d_inner 2 x 4,096 = 8,192, d_conv 4, d_state 16, bf16: a conv column
# 8,192 x 2 B = 16,384 B; the state 3 x 16,384 + 8,192 x 16 x 2 B = 311,296 B
JAMBA_COLUMN, JAMBA_STATE = 8192 * 2, 3 * 8192 * 2 + 8192 * 16 * 2
# Qwen3.5-27B: conv channels 2 x 16 x 128 + 48 x 128 = 10,240, x 2 B = 20,480 B a column; kernel 4; the float32
# recurrent state 48 x 128 x 128 x 4 B (mamba_ssm_dtype float32): 3 x 20,480 + 3,145,728 = 3,207,168 B
QWEN_COLUMN, QWEN_STATE = 10240 * 2, 3 * 10240 * 2 + 48 * 128 * 128 * 4


def _mamba(specs):
    found = {x for x in specs if x.kind == "mamba"}
    assert len(found) == 1
    return found.pop()


def test_stage_specs_widen_mamba_states_with_drafting():
    assert (JAMBA_STATE, QWEN_STATE) == (311_296, 3_207_168)  # 3 x 16,384 + 262,144; 3 x 20,480 + 3,145,728
    jamba = _m(JAMBA)
    x = _mamba(X.stage_specs(jamba, range(32), 1, BF16, BF16, (0, 33, 0)))
    assert (x.states, x.states_per_block, x.state_bytes) == (2, False, JAMBA_STATE)     # 'align', k = 0
    x = _mamba(X.stage_specs(jamba, range(32), 1, BF16, BF16, (0, 28, 0)))
    assert (x.states, x.states_per_block, x.state_bytes) == (0, True, JAMBA_STATE)      # 'all' before 0.29
    # Qwen3.5-27B drafting 1 token with its MTP layer on an H100 at 0.33: 2 + 1 + the GDN checkpoint = 4 pages of
    # 3,207,168 + 20,480 B; the MTP layer adds one full-attention layer (64 + 1)
    qwen = _m(QWEN35)
    specs = X.stage_specs(qwen, range(64), 1, BF16, BF16, (0, 33, 0), Speculative("mtp", 1), None, H100)
    assert len(specs) == 65 and specs[-1].kind == "full"
    # its full-attention layers and the MTP layer: 4 KV heads x 256 x (K, V) x 2 B = 4,096 B a token
    assert {y.bytes_per_token for y in specs if y.kind == "full"} == {4 * 256 * 2 * 2}
    x = _mamba(specs)
    assert (x.states, x.states_per_block, x.state_bytes) == (4, False, QWEN_STATE + QWEN_COLUMN)
    assert sum(1 for y in specs if y.kind == "mamba") == 48                  # 3 of every 4 layers, each widened
    assert {(y.states, y.state_bytes) for y in specs if y.kind == "full"} == {(1, 0)}    # attention untouched
    # prefix caching off: 'none', 1 + 1 pages, the conv state still one column wider
    off = _mamba(X.stage_specs(qwen, range(64), 1, BF16, BF16, (0, 33, 0), Speculative("mtp", 1), False, H100))
    assert (off.states, off.states_per_block, off.state_bytes) == (2, False, QWEN_STATE + QWEN_COLUMN)


def test_stage_specs_leave_one_state_page_alone():
    mamba = _m(MAMBA)
    plain = X.stage_specs(mamba, range(64), 1, BF16, BF16, (0, 33, 0))       # prefix caching off: 1 page, k = 0
    assert _mamba(plain).states == 1
    assert X.stage_specs(mamba, range(64), 1, BF16, BF16, (0, 33, 0), prefix_caching=False) == plain
    on = _mamba(X.stage_specs(mamba, range(64), 1, BF16, BF16, (0, 33, 0), prefix_caching=True))
    assert on.states == 2 and on.state_bytes == _mamba(plain).state_bytes
    assert X.stage_specs(_m(LLAMA), range(2), 1, BF16, BF16, (0, 33, 0)) == \
        X.stage_specs(_m(LLAMA), range(2), 1, BF16, BF16, (0, 33, 0), prefix_caching=True)


def test_stage_specs_of_sparse_mla_on_hopper():
    # DeepSeek-V3.2 with an fp8 cache: FLASHMLA_SPARSE on SM 9.0 stores fp8_ds_mla, 656 B a token a layer; SM 10.0's
    # FlashInfer keeps 576 x 1 B; the indexer's keys (132 B) stay; an MTP drafter's layer takes the same layout
    v32 = _m("deepseek-ai/DeepSeek-V3.2")
    hopper = X.stage_specs(v32, range(61), 1, FP8, BF16, (0, 33, 0), device=H100)
    assert sorted({x.bytes_per_token for x in hopper}) == [132, 656]
    assert sorted({x.bytes_per_token for x in X.stage_specs(v32, range(61), 1, FP8, BF16, (0, 33, 0),
                                                           device=B200)}) == [132, 576]
    assert sorted({x.bytes_per_token for x in X.stage_specs(v32, range(61), 1, FP8, BF16, (0, 33, 0))}) == \
        [132, 576]                                                          # no card given: the standard layout
    drafted = X.stage_specs(v32, range(61), 1, FP8, BF16, (0, 33, 0), Speculative("mtp", 1), device=H100)
    assert len(drafted) == len(hopper) + 2 and {x.bytes_per_token for x in drafted[-2:]} == {132, 656}


def test_deepseek_v4_keeps_its_own_caches():
    # DeepSeek-V4's caches are its own (vllm_dsv4, checked by check_dsv4, which refuses a drafter): stage_specs adds
    # no drafter layer and no Mamba widening to them
    from kvplan.planning.engines.vllm_dsv4 import dsv4_layer_specs
    v4 = _m("deepseek-ai/DeepSeek-V4-Flash")
    assert X.stage_specs(v4, range(3), 1, FP8, BF16, (0, 33, 0), Speculative("mtp", 1)) == \
        dsv4_layer_specs(v4, range(3))


def test_gdn_checkpoint():
    qwen = _m(QWEN35)
    assert X.gdn_checkpoint(qwen, (0, 33, 0), None, H100) is True
    assert X.gdn_checkpoint(qwen, (0, 32, 0), None, H100) is False
    assert X.gdn_checkpoint(qwen, (0, 33, 0), False, H100) is False        # 'none': no alignment
    assert X.gdn_checkpoint(qwen, (0, 33, 0), None, A100) is False
    assert X.gdn_checkpoint(_m(NEMOTRON_H), (0, 33, 0), None, H100) is False  # Mamba-2, not gated DeltaNet


def test_a_hybrid_draft_models_states_widen_before_0_19_too():
    # Jamba-1.5-Mini drafting 2 tokens for itself: before 0.19 (MAMBA_MODES_FROM) vLLM has no mamba_cache_mode, one
    # state page a request, but the conv state still holds kernel - 1 + k columns (mamba_utils.py): 311,296 +
    # 2 x 16,384 = 344,064 B in the target's 28 Mamba layers and the drafter's 28 (its states priced in the model
    # dtype, as the target's)
    jamba = _m(JAMBA)
    specs = X.stage_specs(jamba, range(32), 1, BF16, BF16, (0, 18, 0), Speculative("draft_model", 2, jamba))
    mambas = [x for x in specs if x.kind == "mamba"]
    assert len(mambas) == 2 * 28
    assert {(x.states, x.states_per_block, x.state_bytes) for x in mambas} == {(1, False, JAMBA_STATE + 2 * JAMBA_COLUMN)}
    assert JAMBA_STATE + 2 * JAMBA_COLUMN == 344_064        # 311,296 + 32,768


def test_an_eagle3_heads_lm_head_pads_its_draft_vocabulary_to_64():
    # the EAGLE-3 head of Llama-3.1-8B with a draft vocabulary of 32,001 rows: vLLM's ParallelLMHead pads it to
    # 32,064 (501 x 64, vocab_parallel_embedding.py pad_vocab_size, 0.33): 32,064 x 4,096 x 2 B = 262,668,288 B on
    # TP 1, not 32,001 x 8,192 = 262,152,192. The rest as llama_eagle3.py builds it: one layer of attention
    # (2 x 4,096 x 4,096 + 2 x 4,096 x 1,024) x 2 B = 83,886,080 + MLP 3 x 4,096 x 14,336 x 2 B = 352,321,536 + 2 norms
    # 16,384 = 436,224,000 B; fc [H, 3H] 3 x 4,096 x 4,096 x 2 B = 100,663,296; q/k/v's second hidden (4,096 +
    # 2 x 1,024) x 4,096 x 2 B = 50,331,648; d2t 32,001 x 8 B = 256,008
    card = json.loads((ROOT / "model_configs" / "yuhuili__EAGLE3-LLaMA3.1-Instruct-8B.json").read_text())
    head = load_model({**card, "draft_vocab_size": 32001})
    notes = _notes(s=_s(spec_tokens=3), extras=X.Extras(Speculative("eagle3", 3, head)))
    assert notes[1] == ("speculative decoding (eagle3, 3 drafted per step): draft weights custom: 1 layer(s) "
                        "436,224,000 B + fc 100,663,296 B (whole on every rank) + q/k/v over 2 x hidden 50,331,648 B "
                        "+ lm_head 32,001 x 4,096 / TP 262,668,288 B + d2t 256,008 B + hidden_norm and final norm "
                        "16,384 B; embed_tokens shared with the target; its 1 KV layer(s) share the pool, so every "
                        "token costs the target's bytes and the draft's; vLLM counts the draft in 'Model loading "
                        "took'")
    assert 32064 * 4096 * 2 == 262_668_288          # 501 x 64 rows x 4,096 x 2 B
