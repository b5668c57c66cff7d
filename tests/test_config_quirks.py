"""Config keys a family's modeling code ignores must not change kvplan's answer (checked against transformers)."""

import pytest

import kvplan

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("model_type, base", [
    # GPT-2 and GPT-BigCode attention compute embed_dim // heads; a stray head_dim key is never read.
    ("gpt2", {"n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 97, "n_positions": 64}),
    ("gpt_bigcode", {"n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 97, "n_positions": 64,
                     "multi_query": True}),
])
def test_stray_head_dim_is_ignored_like_transformers_does(model_type, base):
    data = {"model_type": model_type, "head_dim": 40, **base}
    cfg = transformers.CONFIG_MAPPING[model_type].from_dict(data)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        cache = model(input_ids=torch.zeros((2, 7), dtype=torch.long), use_cache=True).cache
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    est = kvplan.estimate(kvplan.parse_config(data), 7, 2, dtype="fp32")
    assert est.kv_cache_bytes == held  # 64 // 4 = 16 per head, not the stray 40
