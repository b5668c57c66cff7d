"""Hand arithmetic for kvplan.planning.engines.vllm_runner, one figure per rule, written for the survivors of its
mutation shard (docs/mutation.md): the receive buffers' shapes and their text, the sampler state's default draft
rows, and which runner a release gives a hybrid or an EAGLE-3 model."""

import dataclasses

from kvplan import load_model
from kvplan.planning.engines.vllm_runner import persistent_bytes, receive_buffers, uses_v2

MiB = 2**20


def test_the_sampler_state_holds_one_bitmask_row_without_drafting():
    # Llama-3.1-8B's 128,256 entries at 1,024 sequences (0.33 v1/worker/gpu/ PenaltiesState, the grammar bitmask,
    # the logit-bias / bad-words / logprob tables): words = ceil(128,256 / 32) = 4,008, and a request holds
    # 4 x (128,256 + 4,008 + 4,008 x 1 row + 3 x 1,024 + 128 + 1,024 + 129 + 128) = 4 x 140,753 = 563,012 B; x 1,024
    # = 576,524,288 B = 549.8 MiB (the docstring's 501.0 + 15.7 + 15.7 + 17.5). Without draft tokens the bitmask
    # has one row; 3 draft tokens add 3 x 4,008 x 4 x 1,024 = 49,250,304 B
    assert persistent_bytes((0, 33, 0), True, 1024, 128_256) == 576_524_288
    assert persistent_bytes((0, 33, 0), True, 1024, 128_256, 3) - 576_524_288 == 49_250_304
    assert persistent_bytes((0, 26, 0), True, 1024, 128_256) == 0     # before 0.27 the budget misses them


def test_a_model_that_passes_hidden_states_alone_says_so():
    # gpt2 (GPT2LMHeadModel, gpt2.py:217 ["hidden_states"]) at 8,192 tokens in fp16: 8,192 x 768 x 2 B = 12,582,912
    model = load_model("openai-community/gpt2")
    assert receive_buffers(model, (0, 33, 0), 8192, 2) == (12_582_912, "hidden_states 1 x [8,192, 768] x 2 B")


def test_gemma4_per_layer_inputs_and_their_text():
    # gemma-4-E2B-it at 0.33 (gemma4.py :1176-1196): hidden_states 8,192 x 1,536 x 2 B = 25,165,824 beside
    # per_layer_inputs [8,192, 35 layers, 256] x 2 B = 146,800,640: 171,966,464 B
    model = load_model("google/gemma-4-E2B-it")
    assert receive_buffers(model, (0, 33, 0), 8192, 2) == (
        171_966_464, "hidden_states 1 x [8,192, 1,536] x 2 B + per_layer_inputs [8,192, 35, 256] x 2 B")
    # the same rule for a config whose model_type is the multimodal "gemma4" (not its text config's "gemma4_text")
    renamed = dataclasses.replace(model, model_type="gemma4")
    assert receive_buffers(renamed, (0, 33, 0), 8192, 2)[0] == 171_966_464
    # 0.20.1 passes a residual too (`_make_empty_intermediate_tensors`): 2 x 25,165,824 + 146,800,640
    assert receive_buffers(renamed, (0, 20, 1), 8192, 2)[0] == 197_132_288


def test_gemma4_without_per_layer_inputs_receives_its_hidden_states_only():
    # gemma-4-31B-it (hidden_size_per_layer_input 0): 8,192 x 5,376 x 2 B = 88,080,384 at 0.33, no per-layer term
    model = load_model("google/gemma-4-31B-it")
    assert receive_buffers(model, (0, 33, 0), 8192, 2) == (88_080_384, "hidden_states 1 x [8,192, 5,376] x 2 B")


def test_only_gemma4_takes_per_layer_inputs():
    # a per-layer-input width on another family is not Gemma 4's tensor: Qwen3-32B keeps hidden_states + residual,
    # 2 x 8,192 x 5,120 x 2 B = 167,772,160
    model = load_model("Qwen/Qwen3-32B")
    odd = dataclasses.replace(model, fields={**model.fields, "hidden_size_per_layer_input": 256})
    assert receive_buffers(odd, (0, 33, 0), 8192, 2)[0] == 167_772_160


def test_deepseek_v4_without_hc_mult_passes_one_stream():
    # DeepSeek-V4-Flash passes [N, hc_mult = 4, 4,096]: 8,192 x 4 x 4,096 x 2 B = 268,435,456; a config without
    # hc_mult is one stream, 67,108,864
    model = load_model("deepseek-ai/DeepSeek-V4-Flash")
    assert receive_buffers(model, (0, 33, 0), 8192, 2)[0] == 268_435_456
    bare = dataclasses.replace(model, fields={k: v for k, v in model.fields.items() if k != "hc_mult"})
    assert receive_buffers(bare, (0, 33, 0), 8192, 2) == (   # 8,192 x 1 x 4,096 x 2 B
        67_108_864, "hidden_states [8,192, 1, 4,096] x 2 B")


def _v2(version, architecture="LlamaForCausalLM", hybrid=False, **kw):
    return uses_v2(version, architecture, moe=False, quantized=False, hybrid=hybrid, attention_free=False, **kw)


def test_eagle3_without_pipeline_stages_runs_on_v2_before_029():
    # 0.26-0.29 list "EAGLE3 with pipeline parallelism" unsupported on V2; at PP 1 (the default) EAGLE-3 stays on V2
    assert _v2((0, 28, 0), speculative="eagle3")
    assert not _v2((0, 28, 0), speculative="eagle3", pp=2)


def test_a_dense_hybrid_runs_on_v2_only_when_listed_from_027():
    # 0.27-0.28 (config/vllm.py `_is_default_v2_model_runner_model`): a hybrid architecture goes to V2 only when
    # DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES lists it; before 0.27 no hybrid does, listed or not
    assert not _v2((0, 28, 0), "Qwen3NextForCausalLM", hybrid=True)
    assert _v2((0, 28, 0), "InklingForCausalLM", hybrid=True)
    assert not _v2((0, 26, 0), "InklingForCausalLM", hybrid=True)
