"""Tests that kill the mutants tools/mutation.py left alive in kvplan/planning/engines/sglang.py's `_check`,
`_check_hybrid`, `_settings` and `sglang_command` (#26): every refusal of an SGLang plan pinned word for word (the
text is the contract) with the inputs on both sides of its boundary, the SGLang settings a plan resolves (the page
size and the prefill CUDA graphs, seen through block_size, mem_fraction_static and the notes), and the launch
command's text.

Worked reserve (sglang_pool.default_mem_fraction, 0.5.3+ rule `512 + max(chunk, 2048) x 1.5 + max_bs x 2 + TP x PP /
8 x 1024` MB, the 10,240 MB floor above 60 GB, plus 8 MB a prefill graph size or 1,536 MB for MLA where the
graphs are on): an H100 reads nvidia-smi's 81,559 MiB, so chunk 8,192 and max_bs 256 below TP 4, 512 from TP 4.
- TP 1: 512 + 12,288 + 512 + 128 = 13,440 MB -> (81,559 - 13,440) / 81,559 = 0.83521 -> 0.835 (graphs off);
  + 464 MB (58 sizes up to 8,192 x 8 MB) = 13,904 -> 0.82952 -> 0.83; + 1,536 MB (MLA) = 14,976 -> 0.81638 -> 0.816.
- TP 8: 512 + 12,288 + 1,024 + 1,024 = 14,848 MB -> 0.81795 -> 0.818 (graphs off); + 1,536 = 16,384 -> 0.79912 -> 0.799.
The 58 sizes: 4-32 step 4 (8), 48-256 step 16 (14), 288-512 step 32 (8), 576-1,024 step 64 (8), 1,280-4,096
step 256 (12), 4,608-8,192 step 512 (8) (0.5.23 cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan import load_model
from kvplan.dtypes import resolve_dtype
from kvplan.errors import WorkloadError
from kvplan.gpus import resolve_gpu
from kvplan.planning.engines.sglang import plan_sglang, sglang_command
from kvplan.planning.engines.spec_decode import Speculative
from kvplan.planning.planner import plan

CONFIGS = Path(__file__).resolve().parent.parent / "model_configs"
LLAMA = "meta-llama/Llama-3.1-8B"
V32 = "deepseek-ai/DeepSeek-V3.2"
EAGLE_HEAD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3, "model": EAGLE_HEAD}
LORA = {"max_loras": 4, "max_lora_rank": 16}
PREFILL_ON = "prefill CUDA graphs on by default here: their 8 MB a captured size (1.5 GiB for MLA) is in the reserve"
PREFILL_OFF = "prefill CUDA graphs off by default for these settings: nothing reserved for them"


def _sglang(model, **kwargs):
    return plan(model, engine="sglang", **kwargs)


def _refusal(model, **kwargs) -> str:
    with pytest.raises(WorkloadError) as err:
        _sglang(model, **kwargs)
    return str(err.value)


def _config(file: str, **changes):
    data = json.loads((CONFIGS / file).read_text())
    data.update(changes)
    return data


# ----------------------------------------------------------------------------- _check: PP, experts, vocabulary


def test_pp_as_many_stages_as_layers_plans():
    """Llama-3.2-1B has 16 layers: PP 16 is one layer a stage, allowed (`pp > num_layers` refuses, not `>=`);
    0.5.23 get_pp_indices gives 16 / 16 = 1 layer to each of the 16 stages."""
    p = _sglang("meta-llama/Llama-3.2-1B", gpu="H100", max_model_len=8192, pp=16)
    assert p.pipeline_parallel_size == 16 and len(p.stages) == 16
    assert [s.layers for s in p.stages][:2] == ["0-0", "1-1"] and p.stages[-1].layers == "15-15"


def test_pp_past_the_layers_is_refused_by_the_engine():
    """plan_sglang's own check (the planner's resolve_parallel refuses first with its own words): PP 17 over
    Llama-3.2-1B's 16 layers."""
    model = load_model("meta-llama/Llama-3.2-1B")
    bf16 = resolve_dtype("bfloat16")
    with pytest.raises(WorkloadError) as err:
        plan_sglang(model, resolve_gpu("H100"), tp=1, pp=17, mem_fraction=None, max_len=8192, act=bf16, kv=bf16,
                    quantization=None, version=(0, 5, 23), image_limit=None)
    assert str(err.value) == ("PP 17 is more stages than meta-llama/Llama-3.2-1B's 16 layers: use at most 16")


def test_expert_parallel_without_experts():
    assert _refusal(LLAMA, gpu="H100", max_model_len=8192, expert_parallel=True) == (
        "meta-llama/Llama-3.1-8B has no routed experts: leave expert parallelism out")


def test_experts_that_do_not_divide_over_ep():
    """Mixtral-8x7B's 8 experts (one expert count in every layer) over --ep-size 16: 8 % 16 = 8, refused as 0.5.23
    FusedMoE.__init__ asserts `_num_global_routed % storage_ep_size == 0`."""
    assert _refusal("mistralai/Mixtral-8x7B-v0.1", gpu="H100", max_model_len=8192, tp=16, expert_parallel=True) == (
        "mistralai/Mixtral-8x7B-v0.1's 8 routed experts do not divide over --ep-size 16, which SGLang's FusedMoE "
        "asserts at start-up: use a TP that divides them, or no expert parallelism")


PHI3 = "microsoft/Phi-3-medium-4k-instruct"


def test_vocab_that_tp_does_not_divide_before_0_5_22():
    """Phi-3-medium: 40 heads, 10 KV heads (TP 5 divides both), vocabulary 32,064 = 501 x 64, already a multiple of
    64; SGLang 0.5.21 pads to 64 only (pad64) and divide()s the rows: 32,064 % 5 = 4, refused."""
    assert _refusal(PHI3, gpu="H100", max_model_len=4096, tp=5, engine_version="0.5.21") == (
        "microsoft/Phi-3-medium-4k-instruct's vocabulary of 32,064 rows pads to 32,064 (a multiple of 64), which TP 5 "
        "does not divide: SGLang 0.5.21's VocabParallelEmbedding asserts it does at start-up "
        "(vocab_parallel_embedding.py, divide()); use a TP that divides it")


def test_vocab_padded_to_64_x_tp_from_0_5_22():
    """0.5.22 VocabParallelEmbedding ("Support the case where the vocab size is not divisible by the TP size"):
    32,064 % 5 != 0, so the padding is 64 x 5 = 320: ceil(32,064 / 320) = 101 x 320 = 32,320 rows, 6,464 a rank; it
    plans. The rule is keyed by the version: without it the pad64 rule of 0.5.21 would refuse."""
    p = _sglang(PHI3, gpu="H100", max_model_len=4096, tp=5, engine_version="0.5.22")
    assert p.tensor_parallel_size == 5 and p.kv_cache_tokens > 4096   # 4,096-token request fits


# ----------------------------------------------------------------------------- _check: releases


def test_an_unlisted_architecture_has_no_first_release():
    """LlamaForCausalLM is not in sglang_rules.FIRST_RELEASE: no release floor, even 0.0.0 plans (with the 0.4.x
    fraction, validation/sglang_calibration.csv: 0.88 at TP 1); 0.0.9 too."""
    for version in ("0.0.0", "0.0.9"):
        p = _sglang(LLAMA, gpu="H100", max_model_len=8192, engine_version=version)
        assert p.engine_version == version and p.gpu_memory_utilization == 0.88


def test_a_dsa_model_before_its_first_release():
    assert _refusal(V32, gpu="H100", max_model_len=8192, tp=8, engine_version="0.5.2") == (
        "SGLang 0.5.2 has no DeepseekV32ForCausalLM model: plan it with --engine-version 0.5.3 or later")


DSA_DP = ("SGLang {} forces DP attention on DeepSeek-V3.2-style sparse attention (server_args.py), which kvplan does "
          "not plan: use --engine-version 0.5.8 or later")


@pytest.mark.parametrize("version", ["0.5.3", "0.5.7"])
def test_dsa_refused_from_0_5_3_through_0_5_7(version):
    assert _refusal(V32, gpu="H100", max_model_len=8192, tp=8, engine_version=version) == DSA_DP.format(version)


def test_dsa_plans_from_0_5_8():
    p = _sglang(V32, gpu="H100", max_model_len=8192, tp=8, engine_version="0.5.8")
    assert p.engine_version == "0.5.8" and p.block_size == 64   # DSA's page on CUDA (model_overrides/deepseek_v2.py)


# ----------------------------------------------------------------------------- _check: what has no token pool


def test_a_pure_ssm_model_is_refused():
    assert _refusal("state-spaces/mamba-2.8b-hf", gpu="H100", max_model_len=8192) == (
        "state-spaces/mamba-2.8b-hf has no attention layers (its cache is Mamba state per request), and kvplan models "
        "SGLang's token pool only: plan it for vLLM or transformers")


def test_chunked_attention_alone_is_an_attention_model():
    """Llama-3.2-1B's config with attention_chunk_size 8,192 (layout.py: no layer_types + a chunk => every layer
    chunked): 16 chunked layers and no full, MLA or sliding one, still a token pool: 16 layers x 2 (K, V) x 8 KV
    heads x 64 x 2 B = 32,768 B a token."""
    model = load_model(_config("meta-llama__Llama-3.2-1B.json", attention_chunk_size=8192), name="chunked-llama")
    assert {s.kind for _, s in model.specs()} == {"chunked"}
    p = _sglang(model, gpu="H100", max_model_len=8192)
    assert p.kv_bytes_per_token == 32768   # 16 x 2 x 8 x 64 x 2 B


# ----------------------------------------------------------------------------- _check: drafting and LoRA


@pytest.mark.parametrize("extra", [{"lora": LORA}, {"speculative": EAGLE3}])
def test_drafts_and_lora_need_pp_1(extra):
    assert _refusal(LLAMA, gpu="H100", max_model_len=8192, pp=2, **extra) == (
        "kvplan sizes SGLang's drafts and LoRA slots without pipeline parallelism: use PP 1")


def test_eagle_1_is_refused():
    assert _refusal(LLAMA, gpu="H100", max_model_len=8192,
                    speculative={"method": "eagle", "num_speculative_tokens": 3, "model": EAGLE_HEAD}) == (
        "kvplan sizes SGLang's EAGLE-3, MTP (NEXTN) and draft-model (STANDALONE) drafting: use eagle3, mtp or "
        "draft_model")


# ----------------------------------------------------------------------------- _check_hybrid


def _nemotron_196():
    """Nemotron-H-56B's config with 196 Mamba heads (256 in the real one): 64 attention heads and 8 KV heads,
    which TP 8 divides, while 196 % 8 = 4."""
    return load_model(_config("nvidia__Nemotron-H-56B-Base-8K.json", mamba_num_heads=196), name="nemotron-h-196")


def test_mamba_heads_that_attention_tp_does_not_divide():
    """0.5.23 configs/mamba_utils.py Mamba2StateShape.create divides the heads by the attention TP: 196 over 8
    asserts. The state's shape is (196 heads, 64 head dim, 256 state): the message names the heads, 196."""
    assert _refusal(_nemotron_196(), gpu="H100", max_model_len=8192, tp=8) == (
        "nemotron-h-196's 196 mamba2 heads do not split over attention TP 8 (SGLang's Mamba2StateShape.create "
        "divides them): use an attention TP that divides 196")


def test_mamba_heads_split_over_attention_tp_not_tp():
    """TP 8 with DP attention 2: attention TP 8 // 2 = 4, and 196 % 4 = 0, so it plans; TP 4 alone too."""
    model = _nemotron_196()
    assert "--tp-size 8 --attn-dp-size 2" in _sglang(model, gpu="H100", max_model_len=8192, tp=8, dp=2).vllm_command
    assert _sglang(model, gpu="H100", max_model_len=8192, tp=4).tensor_parallel_size == 4


def test_nemotron_h_pp_from_0_5_19():
    """PP_HYBRID_FROM: Nemotron-H's pipeline read from 0.5.19, so 0.5.19 itself plans PP 2 and 0.5.18 refuses."""
    p = _sglang("nvidia/Nemotron-H-56B-Base-8K", gpu="H100", max_model_len=8192, tp=2, pp=2, engine_version="0.5.19")
    assert p.pipeline_parallel_size == 2 and len(p.stages) == 2
    assert _refusal("nvidia/Nemotron-H-56B-Base-8K", gpu="H100", max_model_len=8192, tp=2, pp=2,
                    engine_version="0.5.18") == (
        "kvplan plans SGLang's NemotronHForCausalLM at PP 1 (Qwen3-Next and Falcon-H1 assert one stage; the "
        "pipelines of Nemotron-H and Qwen3.5 are read from 0.5.19): plan nvidia/Nemotron-H-56B-Base-8K with TP "
        "instead, or --engine-version 0.5.19 or later")


def test_qwen3_next_pp_has_no_release_to_name():
    """Qwen3-Next asserts one stage (0.5.23 qwen3_next.py:1036): no PP_HYBRID_FROM entry, the message ends there."""
    assert _refusal("Qwen/Qwen3-Next-80B-A3B-Instruct", gpu="H100", max_model_len=8192, tp=2, pp=2) == (
        "kvplan plans SGLang's Qwen3NextForCausalLM at PP 1 (Qwen3-Next and Falcon-H1 assert one stage; the "
        "pipelines of Nemotron-H and Qwen3.5 are read from 0.5.19): plan Qwen/Qwen3-Next-80B-A3B-Instruct with TP "
        "instead")


# ----------------------------------------------------------------------------- _settings: the page


def test_dsa_page_on_nvidia_before_0_5_12():
    """The ROCm exception (page 1 before 0.5.12) is AMD's alone: DeepSeek-V3.2 on an H100 at 0.5.11 gets DSA's 64."""
    assert _sglang(V32, gpu="H100", max_model_len=8192, tp=8, engine_version="0.5.11").block_size == 64


@pytest.mark.parametrize("version, page", [("0.5.11", 1), ("0.5.12", 64)])
def test_dsa_page_on_rocm_from_0_5_12(version, page):
    """DeepSeek-V3.2 on an MI300X: page 1 on ROCm before 0.5.12, DSA's 64 from 0.5.12 itself."""
    assert _sglang(V32, gpu="MI300X", max_model_len=8192, tp=8, engine_version=version).block_size == page


def test_a_hybrid_keeps_page_1_on_blackwell_before_0_5_19():
    """sglang_rules.sm100_page: Qwen3-Next's trtllm_mha page 64 on a B200 is read from 0.5.19; 0.5.18 keeps 1."""
    assert _sglang("Qwen/Qwen3-Next-80B-A3B-Instruct", gpu="B200", max_model_len=8192, tp=2,
                   engine_version="0.5.18").block_size == 1
    assert _sglang("Qwen/Qwen3-Next-80B-A3B-Instruct", gpu="B200", max_model_len=8192, tp=2,
                   engine_version="0.5.19").block_size == 64


def test_drafting_keeps_page_1_on_blackwell():
    """Llama-3.1-8B on a B200: trtllm_mha's page 64, but with an EAGLE-3 draft the choice is not modelled: page 1."""
    assert _sglang(LLAMA, gpu="B200", max_model_len=8192).block_size == 64
    assert _sglang(LLAMA, gpu="B200", max_model_len=8192, speculative=EAGLE3).block_size == 1


# ----------------------------------------------------------------------------- _settings: prefill CUDA graphs


@pytest.mark.parametrize("version", ["0.5.12", "0.5.16"])
def test_lora_turns_the_prefill_graphs_off(version):
    """0.5.10-0.5.16 turn the prefill graphs off with LoRA: Llama-3.1-8B TP 1 reserves 13,440 MB, 0.835."""
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192, lora=LORA, engine_version=version)
    assert p.gpu_memory_utilization == 0.835 and PREFILL_OFF in p.notes


def test_mla_turns_the_prefill_graphs_off_in_0_5_15():
    """0.5.15's breakable graphs are off for MLA: DeepSeek-V2-Lite TP 1 reserves 13,440 MB, 0.835."""
    p = _sglang("deepseek-ai/DeepSeek-V2-Lite", gpu="H100", max_model_len=8192, engine_version="0.5.15")
    assert p.gpu_memory_utilization == 0.835 and PREFILL_OFF in p.notes


def test_mla_prefill_graphs_reserve_1_5_gib():
    """0.5.23 keeps them on for DeepSeek-V2-Lite, and an MLA backend reserves 1,536 MB for them, not 58 x 8 MB:
    13,440 + 1,536 = 14,976 MB, 0.816 (464 MB would give 0.83)."""
    p = _sglang("deepseek-ai/DeepSeek-V2-Lite", gpu="H100", max_model_len=8192)
    assert p.gpu_memory_utilization == 0.816 and PREFILL_ON in p.notes


def test_dsa_turns_the_prefill_graphs_off_through_0_5_12():
    """DeepSeek-V3.2 at TP 8: 0.5.12 turns them off for a DSA model (`or is_deepseek_nsa`), 14,848 MB, 0.818; 0.5.17
    keeps them on for DSA (MLA but DSA), + 1,536 MB = 16,384 MB, 0.799."""
    p = _sglang(V32, gpu="H100", max_model_len=8192, tp=8, engine_version="0.5.12")
    assert p.gpu_memory_utilization == 0.818 and PREFILL_OFF in p.notes
    p = _sglang(V32, gpu="H100", max_model_len=8192, tp=8, engine_version="0.5.17")
    assert p.gpu_memory_utilization == 0.799 and PREFILL_ON in p.notes


# ----------------------------------------------------------------------------- sglang_command


def test_command_defaults_name_no_dp_or_ep():
    """sglang_command's defaults: DP attention 1 and no expert parallelism add no flag."""
    bf16 = resolve_dtype("bfloat16")
    assert sglang_command("m", 2, 1, 8192, bf16, None, 0.85) == (
        "python -m sglang.launch_server --model-path m --tp-size 2 --context-length 8192 --mem-fraction-static 0.85")


def test_command_rounds_the_fraction_to_4_places():
    """An explicit --mem-fraction-static 0.876543 is printed as 0.8765 (4 places)."""
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192, gpu_memory_utilization=0.876543)
    assert p.vllm_command == ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --tp-size 1 "
                              "--context-length 8192 --mem-fraction-static 0.8765")


def test_command_fp8_e5m2():
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192, kv_dtype="fp8_e5m2")
    assert p.vllm_command.endswith("--mem-fraction-static 0.83 --kv-cache-dtype fp8_e5m2")   # 13,904 MB reserve


def test_command_draft_path():
    """The draft is named by its argument when it has one, else by its name (a Speculative given directly, with
    draft_argument empty)."""
    head = load_model(EAGLE_HEAD)
    named = Speculative("eagle3", 3, head, "/models/eagle3-head")
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192, speculative=named)
    assert "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-draft-model-path "\
           "/models/eagle3-head --context-length" in p.vllm_command
    bare = Speculative("eagle3", 3, head, "")
    p = _sglang(LLAMA, gpu="H100", max_model_len=8192, speculative=bare)
    assert f"--speculative-draft-model-path {EAGLE_HEAD} --context-length" in p.vllm_command
