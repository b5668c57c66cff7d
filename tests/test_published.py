"""The published configs that kvplan used to get badly wrong, pinned (the equality with transformers' own cache and
parameter count for each is proven in test_truth_meta.py and test_weights.py, which run every bundled config).

Before the structure-reading rules, on these same files: Nemotron-H had 52 attention layers instead of 10 (+767 %
KV), Llama-Nemotron-Super cached all 80 layers at 64 KV heads (+1206 %), MiMo-V2-Flash made every layer a
128-token window (-98 %), DeepSeek-V3.2 lost its indexer keys (-18 %), Qwen1.5-MoE lost its experts (-87 % params).
"""

from __future__ import annotations

import pytest

import kvplan
from kvplan.weights.rule import param_count

T = 32_768  # tokens per sequence, batch 1, the config's bf16


def groups(model_id: str) -> dict[str, tuple[int, int]]:
    est = kvplan.estimate(model_id, T)
    return {g.kind: (g.layers, g.bytes) for g in est.groups}


def test_nemotron_h_reads_its_hybrid_override_pattern():
    # 118 characters: 10 "*" attention, 54 "M" Mamba-2, 54 "-" MLP blocks
    g = groups("nvidia/Nemotron-H-56B-Base-8K")
    assert g["full"] == (10, 10 * 2 * 8 * 128 * T * 2)            # 1,342,177,280 B
    # Mamba-2: conv (I + 2 G N = 16,384 + 2 x 8 x 256 = 20,480) x 4 in bf16, state 256 heads x 64 x 256 in fp32
    assert g["state"] == (54, 54 * (20_480 * 4 * 2 + 256 * 64 * 256 * 4))
    assert g["none"][0] == 54


def test_llama_nemotron_super_reads_block_configs():
    # 31 of 80 blocks have attention no_op / replace_with_linear; the rest cache 64 // n_heads_in_group 8 = 8 heads
    g = groups("nvidia/Llama-3_3-Nemotron-Super-49B-v1")
    assert g["full"] == (49, 49 * 2 * 8 * 128 * T * 2)            # 6,576,668,672 B
    assert g["none"][0] == 31
    assert not kvplan.load_model("nvidia/Llama-3_3-Nemotron-Super-49B-v1").verified  # DeciLM is remote code only


def test_mimo_v2_flash_full_and_sliding_layers():
    # transformers' MiMo-V2-Flash: layer 0 and every 6th full with 4 KV heads, the rest sliding with 2 x 4 heads;
    # window sliding_window_size + 1 = 129; K 192, V 128 per head
    g = groups("XiaomiMiMo/MiMo-V2-Flash")
    assert g["full"] == (9, 9 * 4 * (192 + 128) * T * 2)
    assert g["sliding"] == (39, 39 * 8 * (192 + 128) * 129 * 2)


def test_deepseek_v32_caches_indexer_keys_in_transformers_and_in_vllm():
    est = kvplan.estimate("deepseek-ai/DeepSeek-V3.2", T)
    assert est.kv_cache_bytes == 61 * (512 + 64 + 128) * T * 2      # V3's latent + 128 indexer elements
    v32 = kvplan.plan("deepseek-ai/DeepSeek-V3.2", gpu="H200", tp=8, max_model_len=T)
    v3 = kvplan.plan("deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, max_model_len=T)
    # vLLM 0.19: the latent in bf16 (576 x 2) plus an fp8 indexer cache with one fp32 scale per 128 (132 B)
    assert (v3.kv_bytes_per_token, v32.kv_bytes_per_token) == (61 * 1152, 61 * (1152 + 132))


@pytest.mark.parametrize("model_id,params", [
    ("Qwen/Qwen1.5-MoE-A2.7B-Chat", 14_315_784_192),   # 60 experts + a gated shared expert, q/k/v biases
    ("MiniMaxAI/MiniMax-M2.5", 228_689_748_992),        # 256 experts x 62 layers
])
def test_moe_parameters_keep_their_experts(model_id, params):
    assert param_count(kvplan.load_model(model_id).require_arch()).total == params
