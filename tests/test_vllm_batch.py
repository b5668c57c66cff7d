"""vLLM's batch defaults per card, usage context and release (#26 item 4): each tier edge a one-line bug could move.

Source: `EngineArgs.get_batch_defaults` in vllm/engine/arg_utils.py — 0.27.0 (no >= 160 GiB tier), 0.28.0 :2582
(`if device_memory >= 160 * GiB_bytes`: 16384 / 1024 for the LLM class and the API server alike), 0.33.0 :2961-2986
(`is_gb10 = current_platform.is_device_capability((12, 1))` keeps the DGX Spark on the small tier). The values
below are the dict literals there, written out by hand.
"""
from __future__ import annotations

import pytest

from kvplan.planning.engines.vllm_profile import batch_defaults, parse_version
from kvplan.planning.planner import plan
from kvplan.units import GiB

H100 = int(79.19 * GiB)      # torch.cuda.mem_get_info total of an H100 SXM
A100 = int(79.25 * GiB)
B200 = int(178.36 * GiB)
GB10 = int(119.7 * GiB)      # DGX Spark's unified memory as CUDA reports it


@pytest.mark.parametrize("memory, name, usage, version, expected", [
    # H100: 8192 / 1024 for `vllm serve`, 16384 / 1024 for the LLM class
    (H100, "NVIDIA H100 80GB HBM3", "api_server", "0.33.0", (8192, 1024)),
    (H100, "NVIDIA H100 80GB HBM3", "llm_class", "0.33.0", (16384, 1024)),
    # A100 80GB: the name check keeps it small (PR #17885): 2048 / 256 and 8192 / 256
    (A100, "NVIDIA A100-SXM4-80GB", "api_server", "0.33.0", (2048, 256)),
    (A100, "NVIDIA A100-SXM4-80GB", "llm_class", "0.33.0", (8192, 256)),
    # B200: before 0.28 the H100 tier (the API server at 8192); from 0.28 16384 for both contexts
    (B200, "NVIDIA B200", "api_server", "0.27.0", (8192, 1024)),
    (B200, "NVIDIA B200", "api_server", "0.28.0", (16384, 1024)),
    (B200, "NVIDIA B200", "llm_class", "0.28.0", (16384, 1024)),
    # exactly 160 GiB is in the top tier (>=); one byte less is not
    (160 * GiB, "some card", "api_server", "0.28.0", (16384, 1024)),
    (160 * GiB - 1, "some card", "api_server", "0.28.0", (8192, 1024)),
    # GB10: >= 70 GiB and not an A100, so the H100 tier through 0.32; 0.33 keeps it small
    (GB10, "NVIDIA GB10", "api_server", "0.32.0", (8192, 1024)),
    (GB10, "NVIDIA GB10", "api_server", "0.33.0", (2048, 256)),
    (GB10, "NVIDIA GB10", "llm_class", "0.33.0", (8192, 256)),
    # 70 GiB is the big tier's floor
    (70 * GiB, "some card", "api_server", "0.33.0", (8192, 1024)),
    (70 * GiB - 1, "some card", "api_server", "0.33.0", (2048, 256)),
])
def test_batch_default_tiers(memory, name, usage, version, expected):
    assert batch_defaults(memory, name, usage, parse_version(version)) == expected


def test_a_short_model_caps_the_batched_tokens():
    # 0.33 `_set_default_max_num_seqs_and_batched_tokens_args` (arg_utils.py :3221): batched tokens at most
    # max_num_seqs x max_model_len, then max_num_seqs at most the batched tokens. A 4-token model: 1,024 x 4 =
    # 4,096 < 8,192 on an H100, 256 x 4 = 1,024 < 2,048 on an A100; max_num_seqs stays (it is never above)
    v = parse_version("0.33.0")
    assert batch_defaults(H100, "NVIDIA H100", "api_server", v, 4) == (4096, 1024)
    assert batch_defaults(A100, "NVIDIA A100-SXM4-80GB", "api_server", v, 4) == (1024, 256)
    assert batch_defaults(H100, "NVIDIA H100", "api_server", v, 8) == (8192, 1024)     # 8,192: the cap is equal


# ----------------------------------------------------------------------------- 0.8-0.9: the rule moved three times
# Read by hand from each wheel's vllm/engine/arg_utils.py (pip download vllm==X --no-deps):
#   0.8.0 `_set_default_args_v1` :1693 `if "h100" in device_name or "h200" in device_name` picks the batched
#         tokens (8192 API server / 16384 LLM class, else 2048 / 8192); :1715 `default_max_num_seqs = 1024` is
#         outside the if, so every GPU gets 1,024 sequences (0.8.1 :1704, 0.8.2 :1793, 0.8.3 :1647 the same).
#   0.8.4 :1669-1682: the same name test, now with 1024 / 256 sequences.
#   0.8.5 :1596 `if device_memory >= 70 * GiB_bytes` (0.8.5.post1 identical): no name test, A100 80GB is big.
#   0.9.0 :1495 `device_memory >= 70 * GiB_bytes and "a100" not in device_name` (PR #17885), kept to 0.27.
L4 = int(21.95 * GiB)        # an L4's total as CUDA reports it (kvplan/data/gpus.json)
MI300X = int(191.98 * GiB)   # an MI300X's total as ROCm reports it (kvplan/data/gpus.json)
GH200 = 95 * GiB
H20 = int(95.0 * GiB)
L4_NAME, A100_NAME, H100_NAME, MI300X_NAME = "NVIDIA L4", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", \
    "AMD Instinct MI300X"


@pytest.mark.parametrize("memory, name, usage, version, expected", [
    # 0.8.0: tokens by name (:1693), sequences 1024 for all (:1715)
    (L4, L4_NAME, "api_server", "0.8.0", (2048, 1024)),
    (L4, L4_NAME, "llm_class", "0.8.0", (8192, 1024)),
    (A100, A100_NAME, "api_server", "0.8.0", (2048, 1024)),
    (H100, H100_NAME, "api_server", "0.8.0", (8192, 1024)),
    (H100, H100_NAME, "llm_class", "0.8.0", (16384, 1024)),
    (MI300X, MI300X_NAME, "api_server", "0.8.0", (2048, 1024)),   # 192 GiB, but not named h100 / h200
    (GH200, "NVIDIA GH200 480GB", "api_server", "0.8.0", (8192, 1024)),   # "gh200" holds "h200"
    (H20, "NVIDIA H20", "api_server", "0.8.3", (2048, 1024)),   # 95 GiB, a Hopper, but no "h100" / "h200"
    # 0.8.4: the name test picks the sequences too (:1675 1024, :1682 256)
    (L4, L4_NAME, "api_server", "0.8.4", (2048, 256)),
    (A100, A100_NAME, "api_server", "0.8.4", (2048, 256)),
    (H100, H100_NAME, "api_server", "0.8.4", (8192, 1024)),
    (MI300X, MI300X_NAME, "api_server", "0.8.4", (2048, 256)),
    # 0.8.5: memory alone (:1596): the A100 80GB, the MI300X and the H20 are big
    (L4, L4_NAME, "api_server", "0.8.5", (2048, 256)),
    (A100, A100_NAME, "api_server", "0.8.5", (8192, 1024)),
    (A100, A100_NAME, "llm_class", "0.8.5", (16384, 1024)),
    (H100, H100_NAME, "api_server", "0.8.5", (8192, 1024)),
    (MI300X, MI300X_NAME, "api_server", "0.8.5", (8192, 1024)),
    (H20, "NVIDIA H20", "api_server", "0.8.5", (8192, 1024)),
    # 0.9.0: and not an A100 (:1495)
    (L4, L4_NAME, "api_server", "0.9.0", (2048, 256)),
    (A100, A100_NAME, "api_server", "0.9.0", (2048, 256)),
    (H100, H100_NAME, "api_server", "0.9.0", (8192, 1024)),
    (MI300X, MI300X_NAME, "api_server", "0.9.0", (8192, 1024)),
    # 0.10.1 :1638 and 0.19.0 :2053: the 0.9.0 rule, values unchanged
    (A100, A100_NAME, "api_server", "0.10.1", (2048, 256)),
    (MI300X, MI300X_NAME, "llm_class", "0.19.0", (16384, 1024)),
])
def test_batch_defaults_from_0_8_to_0_9(memory, name, usage, version, expected):
    assert batch_defaults(memory, name, usage, parse_version(version)) == expected


def test_0_8_5_post1_is_planned_as_0_8_5():
    # the .post1 wheel's `_set_default_args_v1` (:1565-1625) is 0.8.5's line for line: memory only
    assert batch_defaults(A100, A100_NAME, "api_server", parse_version("0.8.5.post1")) == (8192, 1024)


def test_an_l4_at_0_8_0_profiles_1024_sampler_rows():
    """The plan moves with the rule: Qwen2.5-7B on an L4 at 0.8.0 profiles the sampler over 1,024 rows (0.8.0
    :1715), not 0.9's 256. By hand: 1,024 x 152,064 vocab x 14 B (bf16 logits + three float32 [rows, V]
    tensors, vllm_profile.activation_peak) + 3 [2,048, 3,584] bf16 hidden states = 2,179,989,504 + 44,040,192 B."""
    from kvplan.planning.planner import plan

    at_080 = plan("Qwen/Qwen2.5-7B", gpu="L4", max_model_len=4096, engine_version="0.8.0")
    at_090 = plan("Qwen/Qwen2.5-7B", gpu="L4", max_model_len=4096, engine_version="0.9.0")
    assert at_080.activation_bytes == 1024 * 152064 * 14 + 3 * 2048 * 3584 * 2    # 2,224,029,696 B
    assert at_090.activation_bytes == 256 * 152064 * 14 + 3 * 2048 * 3584 * 2     # 589,031,424 B
    assert at_080.kv_pool_bytes == at_090.kv_pool_bytes - (1024 - 256) * 152064 * 14


def test_an_llm_class_plan_prints_the_batch_it_was_sized_with():
    """`vllm serve` takes the API server's batch defaults, not the LLM class's (0.33 engine/arg_utils.py
    get_batch_defaults): an H100 (>= 70 GiB, not an A100) gives the LLM class 16,384 tokens and `vllm serve` 8,192,
    an L4 (< 70 GiB) 8,192 and 2,048. The command carries the LLM class's budget so that running it sizes the same
    pool; a budget the user gave is printed once."""
    def command(**kw):
        return plan("meta-llama/Llama-3.1-8B", max_model_len=8192, usage_context="llm_class", **kw).vllm_command
    assert command(gpu="H100").endswith(
        "--max-model-len 8192 --max-num-seqs 1024 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.92")
    assert "--max-num-seqs 256 --max-num-batched-tokens 8192 " in command(gpu="L4")
    given = command(gpu="H100", max_num_batched_tokens=4096)   # 4,096 as given, not the default 16,384
    assert given.count("--max-num-batched-tokens") == 1 and "--max-num-batched-tokens 4096 " in given
    assert "--max-num-batched-tokens" not in plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=8192).vllm_command


def test_a_given_budget_is_printed_even_where_its_number_is_another_flags():
    """The command's budget flag is left out only where the flag itself is already there (an LLM-class command):
    --max-model-len 2048 --max-num-batched-tokens 2048 prints both, though "2048" is already in the command."""
    p = plan("meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=2048, max_num_batched_tokens=2048)
    assert p.vllm_command.endswith("--max-model-len 2048 --max-num-seqs 1024 --gpu-memory-utilization 0.92 "
                                   "--max-num-batched-tokens 2048")
