"""Which GPU model runner vLLM gives a model, and what the runner costs the KV budget (vLLM 0.20-0.33).

From 0.22 vLLM moves models from its V1 runner (v1/worker/gpu_model_runner.py) to the V2 runner
(v1/worker/gpu/model_runner.py), and from 0.29 every model runs on V2 unless it needs a feature V2 lacks. The two
runners differ in what moves the pool:

- the CUDA-graph estimate: V2's `profile_cudagraph_memory` returns 0 through 0.28 (0.28 model_runner.py:843);
- the profile run's sampler peak (`sampler_entry_bytes`);
- V2's persistent sampler buffers, which count against the pool from 0.27, when the budget starts counting every
  byte allocated after the start-up snapshot (`persistent_bytes`);
- the batches in flight a sliding or chunked layer must hold (`max_concurrent_batches`).

Read from the released wheels (`pip download vllm==X --no-deps`); each rule names its file, function and versions.
"""

from __future__ import annotations

from math import ceil


# config/vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, by the release that set it. 0.22-0.24: the architectures that
# run on V2 (0.22-0.23 only when dense and unquantized, `_is_default_v2_model_runner_model`); 0.25-0.28: MoE
# architectures allowed on V2 (every dense generative model goes there; 0.27+ a hybrid one only when listed).
V2_ARCHITECTURES = {
    (0, 22): frozenset({"Qwen3ForCausalLM"}),
    (0, 23): frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"}),
    (0, 24): frozenset({"Qwen3ForCausalLM", "DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM",
                        "LlamaForCausalLM", "MistralForCausalLM"}),
    (0, 25): frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"}),
    (0, 26): frozenset({"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "InklingForCausalLM",
                        "InklingForConditionalGeneration", "LongcatFlashNgramForCausalLM", "Qwen2MoeForCausalLM"}),
    (0, 27): frozenset({"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "InklingForCausalLM",
                        "InklingForConditionalGeneration", "KimiK3ForConditionalGeneration",
                        "LongcatFlashNgramForCausalLM", "Qwen2MoeForCausalLM"}),
    (0, 28): frozenset({"DeepseekV2ForCausalLM", "DeepseekV4ForCausalLM", "GraniteMoeForCausalLM",
                        "InklingForCausalLM", "InklingForConditionalGeneration", "KimiK3ForConditionalGeneration",
                        "LongcatFlashNgramForCausalLM", "Qwen2MoeForCausalLM"}),
}
V2_FROM = (0, 22)
V2_FOR_ALL = (0, 29)
# Speculative methods the V2 runner takes before 0.29 (0.26 config/vllm.py
# `_get_v2_model_runner_unsupported_features`: eagle, eagle3, mtp, dflash, dspark); a draft model keeps the engine
# on V1 there.
V2_SPECULATIVE = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})


def uses_v2(version: tuple[int, int, int], architecture: str, *, moe: bool, quantized: bool, hybrid: bool,
            attention_free: bool, speculative: str | None = None, pp: int = 1) -> bool:
    """vLLM's `use_v2_model_runner` with VLLM_USE_V2_MODEL_RUNNER unset (config/vllm.py, 0.22-0.33). Llama-3.1-8B:
    V1 through 0.22, V2 from 0.23; Qwen3-32B: V2 from 0.22; Llama 4, DeepSeek-V3 and the gated-DeltaNet hybrids:
    V2 from 0.29."""
    v = version[:2]
    if v < V2_FROM:
        return False
    if speculative == "eagle3" and pp > 1 and v < (0, 30):  # 0.26-0.29 list "EAGLE3 with pipeline parallelism"
        return False
    if v >= V2_FOR_ALL:
        return True
    if speculative is not None and speculative not in V2_SPECULATIVE:
        return False
    listed = architecture in V2_ARCHITECTURES[max(k for k in V2_ARCHITECTURES if k <= v)]
    if v < (0, 24):
        return listed and not moe and not quantized
    if v < (0, 25):
        return listed
    if attention_free or (hybrid and (v < (0, 27) or not listed)):
        return False
    return listed or not moe


def max_concurrent_batches(version: tuple[int, int, int], pp: int, v2: bool) -> int:
    """Batches in flight, whose tokens a sliding-window or chunked layer must hold besides its window (0.26+,
    config/vllm.py `max_concurrent_batches`, 0.33 :588-598): async scheduling, on by default, gives pp + 1 on V2
    and 2 (PP 1) on V1; V1 with PP runs without async scheduling, pp. Before 0.26 the window held one batch."""
    if version[:2] < (0, 26):
        return 1
    if v2:
        return pp + 1
    return 2 if pp <= 1 else pp


def sampler_entry_bytes(version: tuple[int, int, int], v2: bool, act_bytes: int) -> int:
    """Bytes per (request x vocabulary entry) at the peak of the profile run's dummy sampler step.

    V1 (`_dummy_sampler_run`, then sample/sampler.py): the model-dtype logits, a float32 copy, the probabilities
    and the exponential noise of random sampling: act + 12 B (Llama-3.1-8B, 1,024 rows x 128,256: 1.71 GiB).
    V2 (v1/worker/gpu/sample/sampler.py `apply_sampling_params`): 0.20-0.25 copy the logits to float32
    unconditionally (act + 4 B); 0.26-0.32 make no copy for the dummy batch, whose requests set no sampling
    parameter (act B); 0.33 runs a second warm-up pass with every parameter set (`SamplingParams.for_sampler_
    warmup`), which pays for the float32 pipeline again (act + 4 B; FlashInfer's sampling workspace not counted).
    """
    if not v2:
        return act_bytes + 12
    v = version[:2]
    if v < (0, 26) or v >= (0, 33):
        return act_bytes + 4
    return act_bytes


def persistent_bytes(version: tuple[int, int, int], v2: bool, max_num_seqs: int, vocab: int,
                     spec_tokens: int = 0) -> int:
    """V2's sampler state allocated once after the start-up snapshot, which the budget counts from 0.27
    (utils/mem_utils.py `memory_profiling`: non-KV memory = what free memory fell by from the snapshot, plus the
    profile's transient peak; before 0.27 it was weights + peak increase + non-torch increase, which missed
    tensors allocated between the snapshot and the profile). Per request (0.33 v1/worker/gpu/):

    - sample/penalties.py `PenaltiesState.__init__` (0.33 :26-50, built by sample/sampler.py `Sampler.__init__`
      :65, which model_runner.py `load_model` makes, :495): `output_bin_counts` int32 [V] and `prompt_bin_mask`
      int32 [ceil(V/32)] (bit-packed);
    - structured_outputs.py `StructuredOutputsWorker.__init__` (0.33 :52-66, made in `load_model` :528): the
      grammar bitmask int32 [ceil(V/32)] per logit row (1 + k rows with k draft tokens);
    - sample/logit_bias.py `LogitBiasState`, bad_words.py `BadWordsState`, logprob.py `LogprobTokenIdsState`:
      3 x 1,024 + 128 + 1,024 + 129 + 128 int32 entries.

    Llama-3.1-8B at 1,024 sequences: 501.0 + 15.7 + 15.7 + 17.5 MiB = 549.8 MiB. The block tables (two copies
    per KV-cache group: block_table.py `BlockTables.__init__`, a staged table and `input_block_tables`) come after
    the budget (0.33 v1/worker/gpu/model_runner.py `initialize_kv_cache` :623, `BlockTables(` :718) and do not
    enter it.
    """
    if not v2 or version[:2] < (0, 27):
        return 0
    words = ceil(vocab / 32)
    per_request = 4 * (vocab + words + words * (1 + spec_tokens) + 3 * 1024 + 128 + 1024 + 129 + 128)
    return max_num_seqs * per_request


# What a non-first pipeline stage receives the previous stage's output into: the model's
# `make_empty_intermediate_tensors(batch_size=max_num_batched_tokens, dtype=model dtype)`. Most models pass
# hidden_states and residual, [N, H] each (make_empty_intermediate_tensors_factory(["hidden_states", "residual"]):
# llama.py:399, qwen2.py:391, deepseek_v2.py:1489, qwen3_moe.py:480, gpt_oss.py:500, nemotron_h.py:616, 0.33; the
# same in 0.19; the multimodal models take their language model's). These pass hidden_states alone (their layers add
# the residual inside): ["hidden_states"] in chatglm.py:291, falcon.py:396, gpt2.py:217, gpt_j.py:211 (0.19-0.33),
# gpt_bigcode.py, gpt_neox.py, olmo2.py, phi.py, starcoder2.py (0.19), and the Transformers backend that GPTBigCode,
# Olmo2, Phi, Starcoder2 (0.27+) and GPTNeoX (0.33) move to (transformers/base.py:200, 0.33).
HIDDEN_ONLY = frozenset({"ChatGLMModel", "FalconForCausalLM", "GPT2LMHeadModel", "GPTJForCausalLM",
                         "GPTBigCodeForCausalLM", "GPTNeoXForCausalLM", "Olmo2ForCausalLM", "PhiForCausalLM",
                         "Starcoder2ForCausalLM"})
# The architectures whose receive buffers were read (both lists above, DeepSeek-V4 and Gemma 4 below); another
# architecture is planned with hidden_states + residual and a note saying so.
RECEIVE_READ = HIDDEN_ONLY | frozenset({
    "DeciLMForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
    "DeepseekV4ForCausalLM", "FalconMambaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "GemmaForCausalLM",
    "Glm4MoeForCausalLM", "Glm4vMoeForConditionalGeneration", "GlmMoeDsaForCausalLM", "GptOssForCausalLM",
    "JambaForCausalLM", "KimiK25ForConditionalGeneration", "Llama4ForConditionalGeneration", "LlamaForCausalLM",
    "MambaForCausalLM", "MiMoV2FlashForCausalLM", "MiniMaxM2ForCausalLM", "Mistral3ForConditionalGeneration",
    "MistralForCausalLM", "MixtralForCausalLM", "NemotronHForCausalLM", "Phi3ForCausalLM", "Qwen2ForCausalLM",
    "Qwen2MoeForCausalLM", "Qwen2_5_VLForConditionalGeneration", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "Qwen3NextForCausalLM", "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
GEMMA4_HIDDEN_ONLY_FROM = (0, 21)   # gemma4.py `_make_empty_intermediate_tensors`: residual too in 0.19-0.20


def receive_buffers(model, version: tuple[int, int, int], tokens: int, act_bytes: int) -> tuple[int, str]:
    """(bytes, how) of the tensors a non-first pipeline stage receives into, [tokens = max_num_batched_tokens, ...]
    in the model dtype (the first stage has none). Qwen3-32B at 8,192 tokens in bf16: 2 x 8,192 x 5,120 x 2 B =
    160 MiB. DeepSeek-V4 passes its hc_mult streams, one [N, hc_mult, H] tensor (deepseek_v4/nvidia/model.py
    `make_empty_intermediate_tensors`, 0.24-0.33): 8,192 x 4 x 4,096 x 2 B = 256 MiB; Gemma 4 adds its
    per-layer inputs [N, num_hidden_layers, hidden_size_per_layer_input] (gemma4.py:1176-1196, 0.33): E2B at
    8,192 tokens, 8,192 x 35 x 256 x 2 B = 140 MiB beside the 24 MiB of hidden states."""
    H, b = model.require_arch().hidden, act_bytes
    if model.architecture == "DeepseekV4ForCausalLM":
        n = int(model.fields.get("hc_mult") or 1)
        return tokens * n * H * b, f"hidden_states [{tokens:,}, {n}, {H:,}] x {b} B"
    gemma4 = model.model_type in ("gemma4", "gemma4_text")
    alone = model.architecture in HIDDEN_ONLY or (gemma4 and version[:2] >= GEMMA4_HIDDEN_ONLY_FROM)
    names = ("hidden_states",) if alone else ("hidden_states", "residual")
    total, how = len(names) * tokens * H * b, f"{' + '.join(names)} {len(names)} x [{tokens:,}, {H:,}] x {b} B"
    ple = int(model.fields.get("hidden_size_per_layer_input") or 0) if gemma4 else 0
    if ple:
        layers = int(model.fields.get("num_hidden_layers") or model.num_layers)
        total += tokens * layers * ple * b
        how += f" + per_layer_inputs [{tokens:,}, {layers}, {ple}] x {b} B"
    return total, how


def receive_buffer_term(version: tuple[int, int, int], v2: bool) -> str:
    """Where vLLM's budget counts a non-first stage's receive buffers: "peak", "persistent" or "uncounted".

    V0 (worker/model_runner.py `profile_run`, 0.6.4 :1302-1307) and V1 (v1/worker/gpu_model_runner.py `_dummy_run`,
    0.10.1 :2363-2371, 0.19 :5437-5447, 0.33 :5737-5746) make them in the profile run itself, on non-first ranks
    only (`get_pp_group().is_first_rank`: None): alive through the forward and the sampler, so in the torch peak
    ("peak"). The V2 runner makes them in `load_model` (v1/worker/gpu/model_runner.py, 0.22 :317-327, 0.27.1 :395,
    0.33 :541-551), after 'Model loading took' is measured and before the profile: 0.22-0.26 count weights + peak
    increase + non-torch increase (utils/mem_utils.py `memory_profiling`, 0.26 :311), which misses them
    ("uncounted"); from 0.27 the budget counts what free memory fell by from the start-up snapshot (0.27.1 :326),
    so they count once, as persistent memory ("persistent")."""
    if not v2:
        return "peak"
    return "persistent" if version[:2] >= (0, 27) else "uncounted"
