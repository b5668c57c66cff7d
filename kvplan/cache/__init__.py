"""Stage 5, KV cache bytes: what transformers' caches keep per layer (`hf`), `estimate()` for a workload with its
breakdown and formula (`estimate`), and cache strategies side by side (`strategies`)."""
