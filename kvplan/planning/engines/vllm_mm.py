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
        return 0, ""    # `unsized_profile` says so in the plan's warnings
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


# the head of the warning a plan carries when the profile run's encoder pass is not sized; validation/vllm_holdout.py
# makes no whole-budget check of such a plan
UNSIZED = "vLLM's multimodal profile run is not sized"


def unsized_profile(shape: ArchShape, text_only: bool) -> str | None:
    """The warning for a multimodal model whose largest item kvplan cannot size (no fixed image token count:
    Qwen2.5-VL's dynamic resolution, Llama 4's tiles, Qwen3.5's tower), or None.

    Before the language model's dummy forward, `profile_run` runs the vision encoder on dummy items of the
    modality with the most tokens per item, at their largest size, and keeps the outputs (vLLM 0.27.1
    v1/worker/gpu/model_runner.py `profile_run` :702-717 -> gpu/mm/encoder_runner.py `profile_encoder_cache`
    :60-96, 'profiled with N ... items of the maximum feature size'; the V1 runner's gpu_model_runner.py
    `profile_run` the same, 0.33.0 :6072-6144). torch's peak then holds the encoder's own activations, which grow
    with the item (a Qwen2.5-VL image of 12,845,056 max_pixels is 65,536 patches through 32 ViT blocks), and the
    item's token count is the processor's (`get_mm_max_tokens_per_item`), which kvplan does not reproduce for
    these towers. Measured: Qwen2.5-VL-7B-Instruct on vLLM 0.27.1 (RTX 4090, one image per prompt, 8,192 tokens)
    held 21.59 - 15.67 - 62,736 x 57,344 B = 2.49 GiB of non-KV memory where kvplan's terms come to 0.67
    (fs61585879089); on vLLM 0.23.0 (A100, 128,000 tokens) one video of the maximum feature size drove the pool
    to -14.28 GiB (fs55021192520). No bound holds across items and versions, so the plan's pool is kvplan's
    text-model arithmetic and says so."""
    if not shape.towers or text_only or shape.image_tokens[0]:
        return None
    return (f"{UNSIZED} for {shape.model_type}: vLLM first runs the vision encoder on dummy items of the "
            "largest size and kvplan knows neither their token count nor the encoder's activation peak, so the KV "
            "pool and tokens leave that memory out and may be GiBs high (Qwen2.5-VL-7B on vLLM 0.27.1 with one "
            "image per prompt: 1.82 GiB, +62.6 % tokens); a text-only server (0 images per prompt, or "
            "language-model-only serving) skips this profile")


def limit_flags(version: tuple[int, int, int], limit: int) -> str:
    """The vllm serve flag for at most `limit` images per prompt; 0 serves the language model alone."""
    if limit == 0 and version[:2] >= LANGUAGE_MODEL_ONLY_FLAG:
        return "--language-model-only"
    return f"--limit-mm-per-prompt '{{\"image\": {limit}}}'"
