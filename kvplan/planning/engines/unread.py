"""Families whose serving-engine cache kvplan has not read yet, or that the engine does not run. Their transformers cache is exact (kvplan.cache),
but each engine keeps them in layouts of its own, so a vLLM or SGLang plan from the generic rules would be a guess:
kvplan refuses it in one line that names what the engine does and what to plan instead."""

from __future__ import annotations

from ...errors import WorkloadError
from ...model.spec import ModelSpec


def release_text(version: tuple[int, ...]) -> str:
    """A release as its wheel names it, (0, 5, 23) -> "0.5.23": the release warnings and the defaults write it."""
    return ".".join(map(str, version))


# model_type prefix -> (what vLLM 0.33 does, what SGLang 0.5.23 has), each read from the engine's source
UNREAD = {
    # vLLM 0.20.1-0.26 and 0.31-0.33: planned (engines/vllm_dsv4.py), its refusals there
    "deepseek_v4": (None, "SGLang 0.5.23 sizes DeepSeek-V4's compressed pools in sglang/srt/models/deepseek_v4.py"),
    "inkling": (
        "vLLM 0.33 keeps Inkling's four short-convolution states per layer beside its KV pages "
        "(vllm/models/inkling)",
        "SGLang 0.5.23 keeps Inkling's convolution states in sglang/srt/models/inkling.py"),
    "dots3_note": (
        "vLLM 0.33 pads Dots3-Note's MLA rows to its sliding layers' width (vllm/models/dots3_note/nvidia/model.py, "
        "Dots3NotePaddedMLAAttention) and keeps its indexer keys beside them",
        "SGLang 0.5.23 sizes Dots3-Note's pools in sglang/srt/models/dots3.py"),
    "rwkv": ("vLLM 0.33 has no RWKV model (model_executor/models/registry.py)",
             "SGLang 0.5.23 has no RWKV model (sglang/srt/models)"),
    "recurrent_gemma": ("vLLM 0.33 has no RecurrentGemma model (model_executor/models/registry.py)",
                        "SGLang 0.5.23 has no RecurrentGemma model (sglang/srt/models)"),
}


def refuse_unread(model: ModelSpec, engine: str) -> None:
    """Raise the one-line refusal for a family whose `engine` ("vllm" / "sglang") cache kvplan has not read."""
    found = next((why for prefix, why in UNREAD.items() if model.model_type.startswith(prefix)), None)
    if found is None:
        return
    what = found[0] if engine == "vllm" else found[1]
    if what is None:
        return
    raise WorkloadError(f"kvplan does not plan {'vLLM' if engine == 'vllm' else 'SGLang'} for {model.name} ({what}): "
                        "plan it with --engine hf, whose cache kvplan sizes exactly")


# What a release past the newest read is known to change, by a reading of its source not yet built into rules
# (docs/readings/): vLLM 0.34.0 config/cache.py :495-501 (the utilization resolves to 1.0 under the extensible KV
# cache), v1/worker/extensible_kv_cache.py :592-619 (the pool measured after warm-up and graph capture, less
# max(1 GiB, 0.75 x the transient peak) and that peak), config/cache.py :185 (DEFAULT_BLOCK_SIZE 64). Llama-3.1-8B
# on one H100 at 8,192 tokens: 55.19 GiB by 0.33's rules, about 60.0-60.5 GiB with no utilization flag
KNOWN_CHANGES = {
    ("vLLM", (0, 34)): "by its source, 0.34 sizes the KV pool after warm-up at a default utilization of 1.0 (about 9 % "
                       "more KV than this plan for Llama-3.1-8B on an H100 when --gpu-memory-utilization is left out; "
                       "the 0.92 in this plan's command keeps about this plan's pool) and its default block is 64 "
                       "tokens, not 16",
}


def newer_release(engine: str, version: tuple[int, int, int], newest: tuple[int, int, int]) -> list[str]:
    """The warning for a release past `newest`, the newest one whose source kvplan's rules for `engine` ("vLLM" /
    "SGLang") were read from: it is planned with those rules, unverified. vLLM 0.34.0 (PyPI, 2026-11-16) is not
    0.33.0: its v1/core/kv_cache_planning.py differs by 276 lines, gpu_worker.py by 596, and the V1 runner's
    gpu_model_runner.py is gone."""
    if version <= newest:
        return []
    asked, read = release_text(version), release_text(newest)
    known = KNOWN_CHANGES.get((engine, version[:2]))
    return [f"{engine} {asked} is newer than {read}, the newest release kvplan read: its figures follow {read}'s "
            f"rules, not checked against {asked}" + (f"; {known}" if known else "")
            + f"; plan --engine-version {read} for a release kvplan has read"]
