"""Issue #23's first acceptance line: every bundled model plans (`kvplan plan MODEL --gpu H100 --max-model-len 4096
--fewest-gpus`) with no refusal and no warning except the kinds that bound a real effect (ALLOWED).

Refusals other engineers are closing as this is written are EXPECTED by model id, each with the words of today's
refusal, so that the test passes now and fails only for a new refusal or a new kind of warning; shrink EXPECTED as
their work merges (a model that plans is held to ALLOWED like every other)."""

from __future__ import annotations

import re

import pytest

import kvplan
from kvplan.sources.library import bundled_index

# Kinds of warning that bound a real effect, each a pattern a warning must match in full.
ALLOWED = {
    # vLLM refuses max_model_len past the config's position limit unless told to, and outputs past it are wrong:
    # gpt2's 1,024 tokens (n_positions) under a 4,096-token plan
    "context limit": re.compile(r"max_model_len [\d,]+ is past .+'s context limit of [\d,]+ tokens \(\w+\): .+"),
    # families that exist only as remote code (ChatGLM, Phi-3-small): nothing in transformers to verify against
    "remote code": re.compile(r"model_type '(chatglm|phi3small|nemotron-nas)' is not one transformers [\d.]+ "
                              r"ships: .+"),
    # vLLM's encoder profile run for towers without a fixed image token count (Qwen2.5-VL's dynamic resolution,
    # Llama 4's tiles, Qwen3.5 / 3.6, Qwen3-VL, GLM-4.6V, Gemma 4): the warning says which way the pool errs, by how
    # much a published log erred (1.82 GiB), and what to do (a text-only server skips the profile)
    "encoder profile": re.compile(r"vLLM's multimodal profile run is not sized for \w+: .+ may be GiBs high .+ a "
                                  r"text-only server .+ skips this profile"),
    # a tower only remote code builds (Kimi-K2.5's MoonViT): the warning says which way the pool errs and what to
    # pass (the checkpoint folder, whose safetensors headers hold the tower's real bytes)
    "remote-code tower": re.compile(r".+: its vision tower \(no model_type in kimi_k25\) is not counted by kvplan's "
                                    r"rule, so the weights leave it out and the KV pool is high by its size: pass the "
                                    r"checkpoint folder.+"),
    # DeepSeek-V4 on vLLM: its profile run read from the engine's source into the activation figure, the one choice
    # kvplan cannot see (Marlin's MoE kernel instead of Humming's) bounding how high the pool is, and what to pass
    # (vLLM's own pool) to plan the KV from it
    "dsv4 profile": re.compile(r"vLLM's DeepSeek-V4 profile run is sized from vLLM [\d.]+'s source, .+ the profile "
                               r"run takes 0 to [\d,.]+ MiB more than kvplan's activation figure .+ "
                               r"--kv-cache-memory-bytes .+"),
    # Phi-3-small's block-sparse layers read a subset of a cache kept whole: the figures are its upper bound
    "block-sparse": re.compile(r"config field\(s\) blocksparse_\w+.*: Phi-3-small's block-sparse attention .+"
                               r"an upper bound .+"),
}

# model id (lower case) -> (owner, why, the words of today's refusal). Planned models in here are still held to
# ALLOWED; a refused one must refuse with exactly these words.
REFUSED: dict[str, tuple[str, str, str]] = {
    # empty: DeepSeek-V4-Flash and -Pro, the last refused, plan on vLLM 0.33 (planning/engines/vllm_dsv4.py)
}
# Partial bundled configs: their plans are to say what the trimmed copy lacks (the "library" engineer; Kimi-K2's
# missing quantization_config: the "quant" engineer). Until then and after, that one more kind is allowed for them.
PARTIAL = frozenset({
    "qwen/qwen2-0.5b", "thudm/chatglm3-6b", "thudm/glm-4-9b-chat", "ai21labs/ai21-jamba-1.5-mini",
    "allenai/olmo-2-0325-32b", "allenai/olmo-2-1124-13b", "allenai/olmo-2-1124-7b", "deepseek-ai/deepseek-v2-lite",
    "deepseek-ai/deepseek-v2.5", "google/gemma-3-4b-it", "meta-llama/llama-4-scout-17b-16e-instruct",
    "mistralai/mistral-7b-v0.1", "tiiuae/falcon-40b-instruct",
    "tiiuae/falcon-7b-instruct", "tiiuae/falcon-mamba-7b", "moonshotai/kimi-k2-thinking", "minimaxai/minimax-m2.5",
    "meta-llama/llama-4-maverick-17b-128e-instruct", "qwen/qwen1.5-moe-a2.7b-chat", "google/gemma-3-27b-it",
    "yuhuili/eagle3-llama3.1-instruct-8b",
})
PARTIAL_KIND = re.compile(r".*\b(partial|trimmed|missing|lacks?|not in the bundled)\b.*", re.IGNORECASE)

IDS = sorted(bundled_index())


def kind(warning: str, model_id: str) -> str | None:
    """The allowed kind a warning is, or None."""
    for name, pattern in ALLOWED.items():
        if pattern.fullmatch(warning):
            return name
    if model_id in PARTIAL and PARTIAL_KIND.fullmatch(warning):
        return "partial config"
    return None


@pytest.mark.parametrize("model_id", IDS)
def test_bundled_model_plans_with_only_warnings_that_bound_an_effect(model_id):
    try:
        plan = kvplan.fewest_gpus(model_id, gpu="H100", max_model_len=4096)
    except kvplan.KVPlanError as exc:
        assert model_id in REFUSED, f"{model_id} is refused: {exc}"
        assert REFUSED[model_id][2] in str(exc), f"{model_id} is refused for another reason: {exc}"
        return
    stray = [w for w in plan.warnings if kind(w, model_id) is None]
    assert not stray, f"{model_id}: warning(s) that bound no effect: {stray}"


def test_the_kinds_match_what_they_are_for():
    """Each allowed kind catches today's warning of its kind and none catches the old catch-all."""
    assert kind("max_model_len 4,096 is past openai-community/gpt2's context limit of 1,024 tokens "
                "(n_positions): vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", "openai-community/gpt2")
    old = ("config field(s) sliding_window_size may change the cache or the weights and kvplan does not read them: "
           "the figures ignore them")
    assert kind(old, "google/gemma-2-9b") is None
    assert kind("model_type 'qwen2_5_vl' is not one transformers 5.24.0 ships: kvplan's figures ...",
                "qwen/qwen2.5-vl-7b-instruct") is None


def test_expected_refusals_and_partials_are_bundled_ids():
    assert set(REFUSED) <= set(IDS) and PARTIAL <= set(IDS)
