"""Stage 2, where a model comes from: config.json and checkpoint headers as data, never code.

- `files`: a config.json read as JSON data only (size cap, regular files, valid Unicode);
- `library`: the bundled `model_configs/` (ids, close matches, checkpoint records);
- `hub`: config.json from the Hugging Face Hub with the real `huggingface_hub` client, every failure one sentence;
- `safetensors`, `hub_headers`: a checkpoint's safetensors headers from a folder or the Hub, summarised;
- `locate`: which of these a name means (`find_config`, `find_checkpoint`).

Only `kvplan.config.load` calls `locate`; `huggingface_hub` is imported inside the functions that need it.
"""
