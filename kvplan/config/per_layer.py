"""Per-layer attention shapes where layers differ (part of the config boundary).

transformers 5.24 builds some models with a per-layer config (`per_layer_config`: layer index -> the fields that
layer overrides), and a few families derive one in code that no field spells out. Each family rule below names
the model and the number.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError, shown
from .reader import ConfigReader, check_int
from .state import nas_attention

# Families whose attention caches values of their own width (`v_head_dim` beside `head_dim`) without MLA.
V_HEAD_DIM_FAMILIES = frozenset({"mimo_v2_flash"})


def layer_overrides(r: ConfigReader, types: list[str], base: tuple[int, int, int],
                    notes: list[str]) -> dict[int, tuple[int, int, int]]:
    """layer index -> (kv heads, K head dim, V head dim) for the layers that differ from the model's `base`."""
    kv, base_k, base_v = base
    out = {}
    mla = r.used.get("kv_lora_rank") is not None
    for i, fields in _per_layer_config(r, types).items():
        if mla:  # Dots3-Note's sliding layers: their own latent (kv_lora_rank 1024 + qk_rope_head_dim 64)
            rank = check_int("per_layer_config.kv_lora_rank", fields.get("kv_lora_rank", base_k))
            rope = check_int("per_layer_config.qk_rope_head_dim", fields.get("qk_rope_head_dim", base_v))
            out[i] = (1, rank, rope)
            continue
        heads = check_int("per_layer_config.num_key_value_heads", fields.get("num_key_value_heads", kv))
        head_dim = check_int("per_layer_config.head_dim", fields.get("head_dim", base_k))
        out[i] = (heads, head_dim, head_dim if base_k == base_v else base_v)
    blocks = r.get("block_configs")
    if isinstance(blocks, list) and len(blocks) == len(types):
        # Llama-Nemotron (DeciLM): KV heads per block = num_attention_heads // n_heads_in_group (64 // 8 = 8)
        heads = r.num_heads()
        for i, block in enumerate(blocks):
            group = nas_attention(block).get("n_heads_in_group")
            if types[i] != "mlp" and group:
                out[i] = (heads // check_int("block_configs.attention.n_heads_in_group", group), base_k, base_v)
    if r.model_type == "mimo_v2_flash":
        out.update(_mimo_sliding(r, types, base, notes))
    return out


def _mimo_sliding(r: ConfigReader, types: list[str], base: tuple[int, int, int],
                  notes: list[str]) -> dict[int, tuple[int, int, int]]:
    """MiMoV2FlashAttention: sliding layers run num_key_value_heads x 2 (4 -> 8), whatever the published
    `swa_num_key_value_heads` says; transformers also ignores `hybrid_layer_pattern` (1 = sliding) and derives its
    own. Both are read, and where they disagree with what transformers builds, a note says so."""
    kv, k_dim, v_dim = base
    for key, want in (("swa_num_key_value_heads", 2 * kv), ("swa_head_dim", k_dim), ("swa_v_head_dim", v_dim),
                      ("swa_num_attention_heads", r.num_heads())):
        if r.get(key) is not None and r.get(key) != want:
            notes.append(f"{key} {shown(r.get(key))} is ignored: transformers' MiMo-V2-Flash attention uses {want} "
                         "(serving engines may read it)")
    pattern = r.get("hybrid_layer_pattern")
    if isinstance(pattern, list) and [bool(p) for p in pattern] != [t == "sliding_attention" for t in types]:
        notes.append("hybrid_layer_pattern is ignored: transformers derives layer 0 and every 6th layer as full")
    return {i: (2 * kv, k_dim, v_dim) for i, t in enumerate(types) if t == "sliding_attention"}


def _per_layer_config(r: ConfigReader, types: list[str]) -> dict[int, dict]:
    value = r.get("per_layer_config")
    if value is None and r.model_type in ("gemma4_text", "gemma4"):
        # Gemma4TextConfig.__post_init__: full layers take global_head_dim (default 512, 2x the sliding 256), and
        # num_global_key_value_heads where attention_k_eq_v is set
        fields: dict[str, Any] = {"head_dim": r.get("global_head_dim", 512)}
        if r.get("attention_k_eq_v") and r.get("num_global_key_value_heads") is not None:
            fields["num_key_value_heads"] = r.get("num_global_key_value_heads")
        return {i: fields for i, t in enumerate(types) if t == "full_attention"}
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError("config field 'per_layer_config' must map layer indices to fields: fix the config.json")
    out = {}
    for key, fields in value.items():
        index = check_int("per_layer_config index", int(key) if isinstance(key, str) and key.isdigit() else key,
                          minimum=0, maximum=len(types) - 1)
        if not isinstance(fields, dict):
            raise ConfigError("config field 'per_layer_config' must map layer indices to fields: fix the config.json")
        out[index] = fields
    return out
