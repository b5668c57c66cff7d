"""vLLM's multimodal profiling: the dummy images' encoder outputs it keeps while it profiles the language model.

`gpu_model_runner.profile_run` (vLLM 0.11.0 lines 3325-3402, 0.19.0 5721-5794, 0.33.0 6072-6144) first runs the
vision encoder on a dummy batch of the modality with the most tokens per item, caches the outputs in
`encoder_cache`, then runs the language model's dummy forward and the sampler, and clears the cache only at the
end. torch's peak is reset once, before all of it, so the cache adds to the forward / sampler peak.

- the batch: N = encoder budget // tokens per item, the budget being max(max_num_batched_tokens, one item)
  (`compute_encoder_budget`: both scheduler limits are max_num_batched_tokens);
- 0.11-0.12: each item counts its whole placeholder span and every output is padded to (budget, hidden)
  ("we create dummy embeddings of size (encode_budget, hidden_size)"): gemma-3-27b-it at 8,192 tokens keeps
  31 x 8,192 x 5,376 x 2 B = 2.54 GiB;
- 0.13 on: items count their embeddings only and outputs stay unpadded: 32 x 256 x 5,376 x 2 B = 84 MiB.

Language-model-only serving (`--language-model-only` from 0.17, or a zero `--limit-mm-per-prompt` for every
modality) skips both the profiling and, from 0.15 (`_mark_tower_model`), the tower's weights.
"""

from __future__ import annotations

from ...model.arch import ArchShape

PADDED_UNTIL = (0, 13)          # outputs padded to the encoder budget before this version
LANGUAGE_MODEL_ONLY_FLAG = (0, 17)  # `--language-model-only` exists from this version
TOWERS_SKIPPED_FROM = (0, 15)   # a zero limit skips loading the tower for every model from here (_mark_tower_model)
# ...and before that for these (vllm 0.11 mistral3.py 439-457: no vision tower when every limit is 0, and
# load_weights' skip_prefixes)
TOWERS_SKIPPED_EARLY = frozenset({"Mistral3ForConditionalGeneration"})


DEFAULT_LIMIT = 999  # images per prompt when --limit-mm-per-prompt is not given (vllm config/multimodal.py)


def encoder_cache_bytes(shape: ArchShape, version: tuple[int, int, int], budget_tokens: int, act_bytes: int,
                        text_only: bool, max_num_seqs: int = 1024, max_model_len: int = 1 << 30,
                        limit: int | None = None) -> tuple[int, str]:
    """(bytes the profile run keeps, the formula or why it is not modelled) on the first pipeline stage.

    N = max(1, min(budget // item, max_num_seqs x max(1, min(limit, max_model_len // item))))
    (`MultiModalBudget`: vllm 0.11 v1/worker/utils.py, 0.19 multimodal/encoder_budget.py): the second term binds
    only with few sequences or a small --limit-mm-per-prompt."""
    if not shape.towers or text_only:
        return 0, ""
    embeds, span = shape.image_tokens
    if not embeds:
        return 0, (f"vLLM's multimodal profiling is not modelled for {shape.model_type}: the dummy images' encoder "
                   "outputs it keeps during the profile run are not subtracted (tens of MiB from vLLM 0.13; up to "
                   "GiBs before), so the KV pool may be that much high")
    padded = version[:2] < PADDED_UNTIL
    item = span if padded else embeds
    budget = max(budget_tokens, item)
    per_prompt = max(1, min(DEFAULT_LIMIT if limit is None else limit, max_model_len // item))
    n = max(1, min(budget // item, max_num_seqs * per_prompt))
    width = budget if padded else embeds
    kept = n * width * shape.hidden * act_bytes
    how = "padded to the encoder budget (vLLM < 0.13)" if padded else "unpadded (vLLM >= 0.13)"
    return kept, (f"encoder cache of the profile run: {n} dummy images (budget {budget:,} // {item:,} tokens, at most "
                  f"{max_num_seqs:,} sequences x {per_prompt:,} per prompt) x "
                  f"{width:,} x {shape.hidden:,} x {act_bytes} B = {kept:,} B, {how}")


def limit_flags(version: tuple[int, int, int], limit: int) -> str:
    """The vllm serve flag for at most `limit` images per prompt; 0 serves the language model alone."""
    if limit == 0 and version[:2] >= LANGUAGE_MODEL_ONLY_FLAG:
        return "--language-model-only"
    return f"--limit-mm-per-prompt '{{\"image\": {limit}}}'"
