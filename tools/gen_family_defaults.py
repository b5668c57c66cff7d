"""Regenerate kvplan/data/family_defaults.json from transformers' config classes.

transformers fills absent config.json keys with its dataclass defaults (MistralConfig: sliding_window 4096,
num_key_value_heads 8). kvplan reads raw JSON without transformers, so it ships those defaults as data.
Run: python tools/gen_family_defaults.py   (needs transformers; tests/test_family_defaults.py checks it).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

# Keys that decide cache layout or size. Other defaults (dropout, rope) never change KV bytes.
CACHE_KEYS = (
    "num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_attention_heads", "n_head", "n_heads",
    "num_heads", "num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num", "hidden_size",
    "n_embd", "d_model", "head_dim", "kv_channels", "attention_head_dim", "sliding_window", "use_sliding_window",
    "max_window_layers", "attention_chunk_size", "no_rope_layer_interval", "multi_query",
    "new_decoder_architecture", "multi_query_attention", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
    "v_head_dim", "attn_layer_period", "attn_layer_offset", "mamba_d_state", "mamba_d_conv", "mamba_expand",
    "state_size", "expand", "conv_kernel", "n_groups", "full_attention_interval", "linear_conv_kernel_dim",
    "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
    "num_kv_shared_layers", "intermediate_size", "vocab_size", "tie_word_embeddings", "max_position_embeddings",
    "n_inner", "n_positions", "moe_intermediate_size", "num_local_experts", "num_experts", "n_routed_experts",
    "n_shared_experts", "num_experts_per_tok", "first_k_dense_replace", "q_lora_rank", "shared_expert_intermediate_size",
    "intermediate_size_mlp", "expert_layer_period", "expert_layer_offset", "use_bidirectional_attention",
)

MODEL_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
    "phi", "phi3", "gpt2", "gptj", "gpt_neox", "gpt_bigcode", "falcon", "starcoder2", "deepseek_v2",
    "deepseek_v3", "gpt_oss", "llama4_text", "mamba", "falcon_mamba", "mamba2", "jamba", "qwen3_next", "olmo2",
    "olmo", "cohere", "cohere2", "granite", "internlm3", "smollm3", "glm", "glm4", "exaone4", "ministral",
    "opt", "bloom", "stablelm", "persimmon", "phimoe", "dbrx", "nemotron", "helium", "arcee", "seed_oss",
)


def defaults_for(model_type: str) -> dict:
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in CACHE_KEYS and f.default is not dataclasses.MISSING and f.default is not None:
            if isinstance(f.default, (int, float, bool, str)):
                out[f.name] = f.default
    return dict(sorted(out.items()))


def main() -> None:
    import transformers

    table = {"_transformers_version": transformers.__version__}
    for model_type in MODEL_TYPES:
        try:
            table[model_type] = defaults_for(model_type)
        except KeyError:
            continue
    path = Path(__file__).resolve().parents[1] / "kvplan" / "data" / "family_defaults.json"
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path} ({len(table) - 1} model types)")


if __name__ == "__main__":
    main()
