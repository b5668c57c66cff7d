"""Issue #26 item 5: tests for the survivors of the small engine shards (unread.py, vllm_mm.py) at M = 15, each
checked by applying its mutant by hand. Every string is pinned word for word: a refusal or warning is what the user
reads, and its words are read from the engine source named in it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from kvplan import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.unread import refuse_unread
from kvplan.planning.engines.vllm_mm import unsized_profile

RWKV = SimpleNamespace(model_type="rwkv", name="RWKV/rwkv-4-169m-pile")


def test_an_unread_family_is_refused_by_engine_name_word_for_word():
    with pytest.raises(WorkloadError) as vllm:
        refuse_unread(RWKV, "vllm")
    assert str(vllm.value) == ("kvplan does not plan vLLM for RWKV/rwkv-4-169m-pile (vLLM 0.33 has no RWKV model "
                               "(model_executor/models/registry.py)): plan it with --engine hf, whose cache kvplan "
                               "sizes exactly")
    with pytest.raises(WorkloadError) as sglang:
        refuse_unread(RWKV, "sglang")
    assert str(sglang.value) == ("kvplan does not plan SGLang for RWKV/rwkv-4-169m-pile (SGLang 0.5.23 has no RWKV "
                                 "model (sglang/srt/models)): plan it with --engine hf, whose cache kvplan sizes "
                                 "exactly")


def test_a_family_one_engine_plans_is_not_refused_there():
    # DeepSeek-V4: vLLM plans it (engines/vllm_dsv4.py, its own refusals there); SGLang's pools are unread
    v4 = SimpleNamespace(model_type="deepseek_v4", name="deepseek-ai/DeepSeek-V4-Flash")
    assert refuse_unread(v4, "vllm") is None
    with pytest.raises(WorkloadError, match=r"^kvplan does not plan SGLang for deepseek-ai/DeepSeek-V4-Flash "):
        refuse_unread(v4, "sglang")
    assert refuse_unread(SimpleNamespace(model_type="llama", name="x"), "vllm") is None


def _gemma3():
    # gemma-3-27b-it: 256 embeddings per image, a 260-token placeholder span (model_configs/google__gemma-3-27b-it.json)
    return load_model("google/gemma-3-27b-it").require_arch()


def test_the_unsized_profile_warning_word_for_word_and_only_without_an_embedding_count():
    blind = dataclasses.replace(_gemma3(), image_tokens=(0, 0))
    # the figures are vllm_mm.unsized_profile's measurement: Qwen2.5-VL-7B on vLLM 0.27.1, 2.49 GiB of non-KV memory
    # held against kvplan's 0.67 (fs61585879089)
    assert unsized_profile(blind, text_only=False) == (
        "vLLM's multimodal profile run is not sized for gemma3_text: vLLM first runs the vision encoder on dummy "
        "items of the largest size and kvplan knows neither their token count nor the encoder's activation peak, so "
        "the KV pool and tokens leave that memory out and may be GiBs high (Qwen2.5-VL-7B on vLLM 0.27.1 with one "
        "image per prompt: 1.82 GiB, +62.6 % tokens); a text-only server (0 images per prompt, or "
        "language-model-only serving) skips this profile")
    # the embeddings per image (the first count) decide it, not the placeholder span: 256 embeddings and no span
    # known is sized
    assert unsized_profile(dataclasses.replace(_gemma3(), image_tokens=(256, 0)), text_only=False) is None
    assert unsized_profile(dataclasses.replace(_gemma3(), image_tokens=(0, 260)), text_only=False) is not None


# ----------------------------------------------------------------------------- vllm_cudagraph (capture sizes)

def test_one_sequence_captures_batches_of_1_and_2():
    # config/vllm.py `_set_cudagraph_sizes` (0.33): the grid starts 1, 2, 4 up to max_cudagraph_capture_size =
    # min(2 x max_num_seqs x (1 + k), 512) = 2 at one sequence, so 1 and 2 (4 is past it); max_num_seqs 1 is added
    # from 0.31 and is already there
    from kvplan.planning.engines.vllm_cudagraph import capture_sizes
    assert capture_sizes(1, 8192, (0, 33, 0)) == (1, 2)


def test_drafting_sizes_are_the_decode_batches_times_the_drafted_tokens():
    # 0.29+ adds n x (1 + k) for n in the grid up to max_num_seqs and max_num_seqs itself: 7 sequences drafting 32
    # tokens (q = 33) add 33, 66, 132 and 7 x 33 = 231 (8 x 33 = 264 is past 7 sequences); the main grid runs to
    # min(2 x 7 x 33 = 462, 512): 1, 2, 4, 8 ... 248 by 8, then 256 ... 448 by 16
    from kvplan.planning.engines.vllm_cudagraph import capture_sizes
    sizes = capture_sizes(7, 8192, (0, 33, 0), spec_tokens=32)
    assert [s for s in sizes if s > 4 and s % 8] == [33, 66, 132, 231] and 264 not in sizes
    assert sizes[-3:] == (416, 432, 448) and len(sizes) == 51   # 3 + 31 (8 ... 248) + 13 (256 ... 448) + 4


def test_the_estimate_is_computed_from_018():
    # envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS appears in 0.18: computed from 0.18.0, not in 0.17
    from kvplan.planning.engines.vllm_cudagraph import computed
    assert computed((0, 18, 0), False) is True and computed((0, 17, 1), False) is False
    assert computed((0, 18, 0), True) is False   # no CUDA graphs, no estimate
