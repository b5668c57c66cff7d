"""Which of SGLang's version-keyed behaviours a model gets, looked up by its architecture (the config's
`architectures[0]`, the class SGLang builds) and the release: the pipeline split, where the lm_head lives, which
models get a sliding-window pool or a Mamba state pool, which SGLang treats as multimodal, when the prefill CUDA
graphs are reserved for. Every rule was read in the released wheels (`pip download sglang==X --no-deps`, each minor
release 0.5.1-0.5.23); paths are under `sglang/srt/`. The pool's arithmetic is in `sglang_pool`."""

from __future__ import annotations

from .unread import release_text   # sglang.py and sglang_notes.py take it from here

Version = tuple[int, int, int]

# ------------------------------------------------------------------------------------- pipeline parallelism


def pp_layer_split(num_layers: int, pp: int, version: Version) -> list[range]:
    """distributed/utils.py `get_pp_indices`. From 0.5.6 the last L % pp stages take one more layer; 0.5.1-0.5.5
    gave the whole remainder to the last stage. 62 layers at PP 4: 15/15/16/16 (0.5.6+), 15/15/15/17 (0.5.5)."""
    base, extra = divmod(num_layers, pp)
    if version >= (0, 5, 6):
        sizes = [base + (stage >= pp - extra) for stage in range(pp)]
    else:
        sizes = [base] * (pp - 1) + [base + extra]
    starts = [sum(sizes[:stage]) for stage in range(pp)]
    return [range(start, start + size) for start, size in zip(starts, sizes)]


# models/<family>.py `<Arch>.__init__`: the lm_head is a ParallelLMHead built with no `pp_group.is_last_rank` gate,
# so every PP rank holds it (0.5.23 llama.py LlamaForCausalLM, qwen3_moe.py:1017, gpt_oss.py:768, mixtral.py:355,
# qwen2_moe.py:1238; the same in 0.5.1 and 0.5.12)
LM_HEAD_EVERY_STAGE = frozenset({"LlamaForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM",
                                 "Qwen3MoeForCausalLM", "GptOssForCausalLM"})
# ... and the ones that build it `if self.pp_group.is_last_rank` (a PPMissingLayer elsewhere), from the release
# named: qwen2.py / qwen3.py in every 0.5.x; deepseek_v2.py DeepseekV2ForCausalLM from 0.5.6 (0.5.5 built it on
# every rank), DeepseekV3ForCausalLM its subclass
LM_HEAD_LAST_FROM = {"Qwen2ForCausalLM": (0, 5, 0), "Qwen3ForCausalLM": (0, 5, 0),
                     "DeepseekV2ForCausalLM": (0, 5, 6), "DeepseekV3ForCausalLM": (0, 5, 6),
                     # nemotron_h.py NemotronHForCausalLM (read in 0.5.19 and 0.5.23; kvplan plans its PP from 0.5.19)
                     "NemotronHForCausalLM": (0, 5, 19),
                     # qwen3_vl.py Qwen3VLForConditionalGeneration.__init__, which Qwen3.5's classes subclass
                     # (qwen3_5.py; read in 0.5.19 :1332 and 0.5.23 :1362; kvplan plans their PP from 0.5.19)
                     "Qwen3_5ForConditionalGeneration": (0, 5, 19),
                     "Qwen3_5MoeForConditionalGeneration": (0, 5, 19)}

# The Mamba hybrids kvplan plans under PP, from the release read: models/nemotron_h.py builds embed_tokens on the
# first stage and the lm_head on the last (PPMissingLayer elsewhere), and kv_cache_configurator.py
# `_handle_max_mamba_cache` charges every rank the largest stage's share of the state (0.5.19 :2210-2233, 0.5.23
# :3229-3251). Qwen3.5 / 3.6 the same (qwen3_5.py Qwen3_5ForCausalLM: embed_tokens `if pp_group.is_first_rank`, the
# final norm on the last, its layers by make_layers / make_pp_layers over get_pp_indices; 0.5.19 :1560-1641, 0.5.23
# :1786-1867), but its vision tower on every stage (TOWER_EVERY_STAGE). Qwen3-Next and Falcon-H1 assert one stage
# (0.5.23 qwen3_next.py:1036, falcon_h1.py:456).
PP_HYBRID_FROM = {"NemotronHForCausalLM": (0, 5, 19), "Qwen3_5ForConditionalGeneration": (0, 5, 19),
                  "Qwen3_5MoeForConditionalGeneration": (0, 5, 19)}
# models/qwen3_vl.py Qwen3VLForConditionalGeneration.__init__ builds `self.visual` (Qwen3VLMoeVisionModel) on every
# rank, with no pp_group gate (0.5.19 :1300-1302, 0.5.23 :1328-1332; only language_model_only leaves it out), and
# load_weights loads it wherever the parameters exist: under PP each stage holds the whole tower (its TP share),
# where the embeddings stay on the first and the lm_head on the last. Qwen3.5-27B at PP 2: 0.86 GiB of tower a stage.
TOWER_EVERY_STAGE = frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})


def lm_head_every_stage(architecture: str, version: Version) -> bool | None:
    """True where SGLang builds the lm_head on every PP stage, False on the last alone, None: not read."""
    if architecture in LM_HEAD_EVERY_STAGE:
        return True
    if architecture in LM_HEAD_LAST_FROM:
        return version < LM_HEAD_LAST_FROM[architecture]
    return None


# ------------------------------------------------------------------------------------- which models SGLang serves

# The first release whose wheel has the model (models/qwen3_next.py 0.5.2, falcon_h1.py 0.5.3, nemotron_h.py 0.5.4,
# mimo_v2_flash.py 0.5.7, qwen3_5.py 0.5.9, gemma4_causal.py / gemma4_mm.py 0.5.11; DeepseekV32ForCausalLM in
# deepseek_v2.py 0.5.3, GlmMoeDsaForCausalLM in glm4_moe.py 0.5.9)
FIRST_RELEASE = {"Qwen3NextForCausalLM": (0, 5, 2), "FalconH1ForCausalLM": (0, 5, 3), "NemotronHForCausalLM": (0, 5, 4),
                 "MiMoV2FlashForCausalLM": (0, 5, 7), "Qwen3_5ForConditionalGeneration": (0, 5, 9),
                 "Qwen3_5MoeForConditionalGeneration": (0, 5, 9), "Gemma4ForCausalLM": (0, 5, 11),
                 "Gemma4ForConditionalGeneration": (0, 5, 11), "DeepseekV32ForCausalLM": (0, 5, 3),
                 "GlmMoeDsaForCausalLM": (0, 5, 9)}
# configs/hybrid_arch.py `mambaish_config` (0.5.23: hybrid_gdn_config, mamba2_config): the hybrids whose recurrent
# state SGLang keeps in a MambaPool beside the KV pool, "gdn" (gated DeltaNet) or "mamba2"
MAMBA_POOL_ARCHS = {"Qwen3NextForCausalLM": "gdn", "Qwen3_5ForConditionalGeneration": "gdn",
                    "Qwen3_5MoeForConditionalGeneration": "gdn", "NemotronHForCausalLM": "mamba2",
                    "FalconH1ForCausalLM": "mamba2"}


# ------------------------------------------------------------------------------------- sliding-window pool

# configs/model_config.py `is_hybrid_swa_model` (from 0.5.8; 0.5.23 2651-2697 with SWA_SINK_ARCHS 88-96): the
# architectures whose sliding layers get a pool of their own, from the release that listed them. DeepSeek-V4's
# compressed pool and draft-only classes are left out.
SWA_POOL_FROM = {"GptOssForCausalLM": (0, 5, 8), "Llama4ForConditionalGeneration": (0, 5, 8),
                 "MiMoV2FlashForCausalLM": (0, 5, 8), "Step3p5ForCausalLM": (0, 5, 9), "Gemma4ForCausalLM": (0, 5, 11),
                 "Gemma4ForConditionalGeneration": (0, 5, 11), "MiMoV2ForCausalLM": (0, 5, 11),
                 "LagunaForCausalLM": (0, 5, 12), "Gemma4UnifiedForConditionalGeneration": (0, 5, 13),
                 "Step3p7ForConditionalGeneration": (0, 5, 13), "MellumForCausalLM": (0, 5, 16),
                 "InklingForConditionalGeneration": (0, 5, 16), "MuseGlimmerForCausalLM": (0, 5, 18),
                 "MuseGlimmerForConditionalGeneration": (0, 5, 18), "GraniteSWAForCausalLM": (0, 5, 19),
                 "GraniteMoeSWAForCausalLM": (0, 5, 19), "IQuestQ1ForCausalLM": (0, 5, 21), "BeamForCausalLM": (0, 5, 23)}
# 0.5.1 server_args.py:2284-2295 and 0.5.23 arg_groups/model_overrides/gemma2_gemma3.py: "Disable hybrid SWA memory
# for {arch} as it is not yet supported", in every 0.5.x
GEMMA_NO_SWA = frozenset({"Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration",
                          "Gemma3nForCausalLM", "Gemma3nForConditionalGeneration"})


def swa_pool(architecture: str, version: Version, sm_major: int | None, speculative: bool) -> tuple[bool, str]:
    """(whether the sliding layers get SGLang's SWA pool, why, in words). Without it every layer is cached at full
    length in the one MHA pool (gemma-2-9b: 42 layers x 8,192 B = 344,064 B a token)."""
    if architecture in GEMMA_NO_SWA:
        return False, (f"SGLang disables its SWA pool for {architecture} in every 0.5.x (disable_hybrid_swa_memory, "
                       "model_overrides/gemma2_gemma3.py): every layer holds the full context")
    if version < (0, 5, 8):
        return False, (f"SGLang {release_text(version)} has no SWA pool by default (0.5.1-0.5.7 model_runner: only "
                       "Gemma and gpt-oss ask for one and both are disabled): every layer holds the full context")
    if architecture == "GptOssForCausalLM" and version < (0, 5, 10) and (sm_major == 10 or speculative):
        # 0.5.8 server_args.py:1278-1290: trtllm_mha (the SM100 default) and drafting turn it off
        why = "trtllm_mha, Blackwell's default backend" if sm_major == 10 else "speculative decoding"
        return False, (f"SGLang {release_text(version)} disables gpt-oss's SWA pool with {why} (server_args.py): "
                       "every layer holds the full context")
    if version >= SWA_POOL_FROM.get(architecture, (9, 9, 9)):
        return True, ("sliding layers in SGLang's SWA pool, which holds swa_full_tokens_ratio x the full pool's "
                      "tokens (model_config.is_hybrid_swa_model)")
    return False, (f"{architecture or 'this architecture'} is not in SGLang {release_text(version)}'s SWA list "
                   "(model_config.is_hybrid_swa_model): every layer holds the full context")


# ------------------------------------------------------------------------------------- Blackwell pages

# Falcon-H1 keeps triton on SM 10.x (0.5.23 model_overrides/falcon_h1.py), and triton keeps SGLang's one-token page
SM100_TRITON = frozenset({"FalconH1ForCausalLM"})
# MLA models SGLang runs on trtllm_mla on SM 10.x, whose pages are 32 or 64 (page_size None -> 64): 0.5.9
# server_args.py _handle_model_specific_adjustments ("Use trtllm_mla as attention backend on sm100 for
# DeepseekV3ForCausalLM"), 0.5.19 / 0.5.23 model_overrides/deepseek_v2.py; other MLA models get flashinfer (page 1)
SM100_TRTLLM_MLA = frozenset({"DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration",
                              "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration"})


def sm100_page(architecture: str, version: Version, sm_major: int | None, *, mla: bool, asymmetric: bool,
               hybrid: bool, speculative: bool) -> int | None:
    """The page SGLang's default attention backend forces on a datacenter Blackwell (SM 10.x: `is_sm100_supported`,
    0.5.23 utils/common.py `device_capability_majors=[10]`), or None where it keeps its one-token page (or kvplan
    has not read the choice). An MHA model gets trtllm_mha (0.5.9 server_args.py "Use trtllm_mha for SM100/SM103";
    0.5.19 / 0.5.23 arg_groups/model_override_base.py `get_default_attn_backend`), which takes pages of 16-128
    and turns page_size None into 64 (0.5.23 overrides.py `_mla_backend_page_constraints`: "TensorRT-LLM MHA only
    supports page_size of 16, 32, 64 or 128, changing page_size from None to 64"); from 0.5.19 a model whose K and V
    rows differ gets fa4 instead, whose non-MLA page is 128 (overrides.py "FA4 backend only supports page size 128
    for non-MLA model architectures"). Qwen3-Next / Qwen3.5 (model_overrides/qwen3_5.py, trtllm_mha with the
    extra-buffer radix cache, page 64) and Nemotron-H (model_overrides/nemotron_h.py) are read in 0.5.23 and 0.5.19;
    Falcon-H1 keeps triton. Qwen3-8B on a B200 (0.5.x, 2026-04): "changing page_size from None to 64", 992,896
    tokens = 15,514 pages. DeepSeek-V3-architecture MLA models get trtllm_mla's 64 (SM100_TRTLLM_MLA). Drafting
    (eagle top-k) changes an MHA model's choice: not modelled, the page stays 1."""
    if sm_major != 10 or version < (0, 5, 9):
        return None
    if mla:   # the override does not look at drafting
        return 64 if architecture in SM100_TRTLLM_MLA else None
    if speculative or architecture in SM100_TRITON:
        return None
    if hybrid and version < (0, 5, 19):
        return None
    if asymmetric:
        return 128 if version >= (0, 5, 19) else 64
    return 64


# ------------------------------------------------------------------------------------- multimodal

# configs/model_config.py `multimodal_model_archs` as 0.5.1 has them (the vision-language ones), and the models
# whose multimodal input is off unless --enable-multimodal (`mm_disabled_models`); later releases add the ones
# in MULTIMODAL_FROM (Qwen3.5 from 0.5.9, Gemma 4 from 0.5.11, its unified class from 0.5.13)
MULTIMODAL_ARCHS = frozenset({"DeepseekVL2ForCausalLM", "Gemma3ForConditionalGeneration",
                              "Gemma3nForConditionalGeneration", "Glm4vForConditionalGeneration",
                              "Glm4vMoeForConditionalGeneration", "Grok1VForCausalLM", "LlavaLlamaForCausalLM",
                              "Llama4ForConditionalGeneration", "LlavaMistralForCausalLM", "LlavaQwenForCausalLM",
                              "LlavaForConditionalGeneration", "LlavaVidForCausalLM", "MiniCPMV",
                              "Mistral3ForConditionalGeneration", "MllamaForConditionalGeneration",
                              "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
                              "KimiVLForConditionalGeneration", "InternVLChatModel", "InternS1ForConditionalGeneration",
                              "VILAForConditionalGeneration", "Step3VLForConditionalGeneration"})
MULTIMODAL_FROM = {"Qwen3_5ForConditionalGeneration": (0, 5, 9), "Qwen3_5MoeForConditionalGeneration": (0, 5, 9),
                   "Gemma4ForConditionalGeneration": (0, 5, 11), "Gemma4UnifiedForConditionalGeneration": (0, 5, 13)}
MM_DISABLED = frozenset({"Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                         "Step3VLForConditionalGeneration"})


def multimodal(architecture: str, version: Version) -> bool:
    """SGLang's `model_config.is_multimodal` at its defaults: a vision-language class whose images are on."""
    listed = architecture in MULTIMODAL_ARCHS or version >= MULTIMODAL_FROM.get(architecture, (9, 9, 9))
    return listed and architecture not in MM_DISABLED


# ------------------------------------------------------------------------------------- prefill CUDA graphs

# model_config.py `multimodal_breakable_cuda_graph_supported_model_archs`: multimodal classes that keep the
# breakable prefill graph (Qwen3.5 from 0.5.16)
BREAKABLE_MULTIMODAL_FROM = {"Qwen3_5ForConditionalGeneration": (0, 5, 16),
                             "Qwen3_5MoeForConditionalGeneration": (0, 5, 16)}


def prefill_graphs_reserved(version: Version, *, architecture: str, pp: int, dp_attention: int, lora: bool,
                            speculative: bool, mla: bool, dsa: bool) -> bool:
    """Whether SGLang's default reserve counts the prefill CUDA graphs (8 MB a captured size, 1.5 GiB for MLA):
    only where the release leaves them on for these settings, which it decides before the memory settings.
    - before 0.5.10 they are opt-in (--enable-piecewise-cuda-graph): never in the default reserve;
    - 0.5.10-0.5.14, torch.compile piecewise graphs (server_args.py `_handle_piecewise_cuda_graph`; 0.5.14
      `_disable_tc_piecewise_cudagraph_if_incompatible`): off with DP attention, PP > 1, LoRA, a multimodal model,
      Qwen3-Next (`piecewise_cuda_graph_disabled_model_archs`), a DSA model through 0.5.12 (`or
      is_deepseek_nsa`), speculative decoding in 0.5.10;
    - 0.5.15-0.5.18, breakable graphs on CUDA (`_disable_breakable_cudagraph_if_incompatible`): off for MLA
      (0.5.15-0.5.16; MLA but DSA in 0.5.17), LoRA and DP attention (0.5.15-0.5.16), Nemotron-H (0.5.17), a
      multimodal model off the breakable list;
    - 0.5.19-0.5.23 (arg_groups/cuda_graph_hook.py `apply_cuda_graph_compatibility`): off at PP > 1 ("Disabling
      breakable prefill CUDA graph by default for pipeline parallelism") and for a multimodal model off the list.
    """
    vlm = multimodal(architecture, version) and version < BREAKABLE_MULTIMODAL_FROM.get(architecture, (9, 9, 9))
    if version < (0, 5, 10):
        return False
    if version < (0, 5, 15):
        off = [dp_attention > 1, pp > 1, lora, vlm, architecture == "Qwen3NextForCausalLM",
               dsa and version < (0, 5, 13), speculative and version < (0, 5, 11)]
    elif version < (0, 5, 19):
        off = [vlm, mla and version < (0, 5, 17), mla and not dsa and version < (0, 5, 18),
               (lora or dp_attention > 1) and version < (0, 5, 17),
               architecture == "NemotronHForCausalLM" and version[:3] == (0, 5, 17)]
    else:
        off = [pp > 1, vlm]
    return not any(off)
