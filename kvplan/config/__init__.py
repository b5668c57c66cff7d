"""Stage 3, reading a model: a config.json into its one `ModelSpec`, the only folder that knows Hugging Face field
names.

- `load`: `load_model`, the whole read in one pass (source, config, checkpoint);
- `parse`: `parse_config`, the config read once with one `ConfigReader` (`reader`);
- `layout`, `state`, `per_layer`: the cache layout (attention, layer patterns and recurrent state, per-layer
  shapes);
- `arch`, `traits`, `towers`, `quant`: the weight shape (hand-written family rules, family traits read off
  transformers, vision towers, `quantization_config`);
- `context`: each engine's context limit; `verified`: what the conformance sweep proved (refusals, warnings).
"""
