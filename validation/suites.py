"""The cases each suite runs: models x caches x prompt lengths x new tokens x batch sizes x dtypes.

- smoke: tiny shape-faithful models of the families whose cache rules differ most (GQA, alternating sliding,
  Qwen2 max_window_layers, MLA, linear-attention state, Mamba, Falcon multi_query), CPU, seconds.
- cpu: one model of every bundled family with its real layer count, heads, head_dim and windows, shrunk
  hidden / intermediate / vocab / experts (see validation.models); prompts cross each window where that is
  affordable on a CPU (gpt-oss 128, Gemma 3 512, Phi-3 2047), and families with windows of 4096 or more run
  below the window plus a shrunk-window variant labelled as such.
- gpu: real-size models that fit one GPU in bf16 at 1k / 8k / 32k tokens and batch 1 / 8, cheapest first
  (tiered), so a --time-budget cuts the expensive end.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib.util import find_spec

from .models import Recipe

DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
QUANT_KV_DTYPE = {("quanto", 2): "int2", ("quanto", 4): "int4", ("hqq", 2): "int2", ("hqq", 4): "int4",
                  ("hqq", 8): "int8", ("fp8", 8): "fp8"}


@dataclass(frozen=True)
class Quant:
    backend: str                # quanto / hqq / fp8
    nbits: int = 4
    group: int = 64
    residual: int = 128

    @property
    def label(self) -> str:
        if self.backend == "fp8":
            return "fp8"
        return f"{self.backend}-int{self.nbits}-G{self.group}-R{self.residual}"

    @property
    def kv_dtype(self) -> str:
        return QUANT_KV_DTYPE[(self.backend, self.nbits)]

    def cache_config(self) -> dict:
        if self.backend == "fp8":
            return {"backend": "fp8"}
        return {"backend": self.backend, "nbits": self.nbits, "q_group_size": self.group,
                "residual_length": self.residual}


@dataclass(frozen=True)
class Case:
    recipe: Recipe
    cache: str = "dynamic"
    batch_size: int = 1
    prompt_len: int = 16
    new_tokens: int = 8
    dtype: str = "fp32"
    quant: Quant | None = None
    tier: int = 0               # gpu: 0 = 1k, 1 = 8k, 2 = 32k (order of execution)
    note: str = ""

    @property
    def id(self) -> str:
        cache = self.cache + (f"-{self.quant.label}" if self.quant else "")
        variant = self.recipe.variant.split(",")[0].replace(" ", "-")
        return (f"{self.recipe.key}/{variant}/{cache}/B{self.batch_size}/P{self.prompt_len}/N{self.new_tokens}/"
                f"{self.dtype}")

    @property
    def seq_len(self) -> int:
        """Tokens cached after generate(max_new_tokens=N): the last sampled token is never fed back."""
        return self.prompt_len + self.new_tokens - 1


def backend_installed(backend: str) -> bool:
    if backend == "quanto":
        return find_spec("optimum") is not None and find_spec("optimum.quanto") is not None
    if backend == "hqq":
        return find_spec("hqq") is not None
    return True


def _keep(cases: list[Case]) -> list[Case]:
    """Drop quantized cases whose backend is not installed; the suite then simply has fewer of them."""
    return [c for c in cases if c.quant is None or backend_installed(c.quant.backend)]


# ---------------------------------------------------------------- smoke

def _tiny(model_type: str, **fields) -> dict:
    base = {"model_type": model_type, "hidden_size": 64, "intermediate_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 128,
            "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None or k == "q_lora_rank"}


SMOKE_RECIPES = {
    "llama": Recipe("tiny-llama-gqa", "inline", "tiny", inline=_tiny("llama")),
    "gemma2": Recipe("tiny-gemma2-sliding", "inline", "tiny", inline=_tiny(
        "gemma2", num_hidden_layers=4, sliding_window=8, layer_types=["sliding_attention", "full_attention"] * 2)),
    "qwen2": Recipe("tiny-qwen2-max-window-layers", "inline", "tiny", inline=_tiny(
        "qwen2", num_hidden_layers=4, use_sliding_window=True, sliding_window=8, max_window_layers=2)),
    "mla": Recipe("tiny-deepseek-v3-mla", "inline", "tiny", inline=_tiny(
        "deepseek_v3", moe_intermediate_size=16, first_k_dense_replace=1, num_key_value_heads=4, kv_lora_rank=32,
        q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, head_dim=None, rope_scaling=None)),
    "qwen3_next": Recipe("tiny-qwen3-next-state", "inline", "tiny", inline=_tiny(
        "qwen3_next", num_hidden_layers=4, layer_types=["linear_attention"] * 3 + ["full_attention"],
        linear_num_key_heads=2, linear_key_head_dim=8, linear_num_value_heads=4, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=16)),
    "mamba": Recipe("tiny-mamba", "inline", "tiny", inline={
        "model_type": "mamba", "hidden_size": 32, "intermediate_size": 64, "state_size": 8, "conv_kernel": 4,
        "num_hidden_layers": 2, "vocab_size": 128, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}),
    "falcon": Recipe("tiny-falcon-multi-query", "inline", "tiny", inline={
        "model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
        "multi_query": True, "new_decoder_architecture": False, "vocab_size": 128, "bos_token_id": 1,
        "eos_token_id": 2}),
}


def smoke_cases() -> list[Case]:
    r = SMOKE_RECIPES
    cases = []
    for recipe in r.values():
        cases.append(Case(recipe, "dynamic", 1, 12, 4, "fp32"))
        cases.append(Case(recipe, "dynamic", 2, 9, 5, "bf16"))
    cases += [
        Case(r["llama"], "static", 2, 10, 4, "fp32"),
        Case(r["gemma2"], "static", 1, 12, 4, "fp32"),
        Case(r["gemma2"], "dynamic", 1, 5, 8, "fp32", note="crosses the window (8) while decoding"),
        Case(r["mla"], "static", 1, 7, 3, "bf16"),
        Case(r["llama"], "quantized", 1, 12, 7, "fp32", quant=Quant("quanto", 4, 32, 4)),
        Case(r["llama"], "quantized", 2, 8, 4, "bf16", quant=Quant("fp8", 8)),
    ]
    return _keep(cases)


# ---------------------------------------------------------------- cpu


def _r(key: str, source: str, variant: str = "shrunk", **kw) -> Recipe:
    return Recipe(key, source, variant, shrink=True, **kw)


CPU_RECIPES = [
    _r("llama-3.1-8b", "meta-llama/Llama-3.1-8B"),
    _r("qwen2-7b", "Qwen/Qwen2-7B-Instruct"),
    _r("qwen2-7b-sw16", "Qwen/Qwen2-7B-Instruct", "shrunk, sliding enabled W=16 (real: off)",
       changes={"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 14}),
    _r("qwen3-8b", "Qwen/Qwen3-8B"),
    _r("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"),
    _r("qwen3-next-80b-a3b", "Qwen/Qwen3-Next-80B-A3B-Thinking"),
    _r("jamba-1.5-mini", "ai21labs/AI21-Jamba-1.5-Mini", "shrunk, heads 4/1 (real 32/8), SSM width follows hidden",
       heads=4, kv_heads=1),
    _r("olmo2-7b", "allenai/OLMo-2-1124-7B"),
    _r("santacoder", "bigcode/gpt_bigcode-santacoder", "shrunk, heads 2 (real 16)", heads=2),
    _r("starcoder2-7b", "bigcode/starcoder2-7b"),
    _r("starcoder2-7b-w32", "bigcode/starcoder2-7b", "shrunk, window 32 (real 4096)", changes={"sliding_window": 32}),
    _r("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite"),
    _r("deepseek-v3", "deepseek-ai/DeepSeek-V3", "shrunk, heads 16 (real 128; MLA caches no heads)"),
    _r("kimi-k2", "moonshotai/Kimi-K2-Instruct", "shrunk, as deepseek_v3, heads 16 (real 64)"),
    _r("gemma-2-9b", "google/gemma-2-9b"),
    _r("gemma-2-9b-w32", "google/gemma-2-9b", "shrunk, window 32 (real 4096)", changes={"sliding_window": 32}),
    _r("gemma-2b", "google/gemma-2b"),
    _r("gemma-3-1b", "google/gemma-3-1b-it"),
    _r("gemma-3-4b", "google/gemma-3-4b-it"),
    _r("llama-4-scout", "meta-llama/Llama-4-Scout-17B-16E-Instruct"),
    _r("llama-4-scout-c16", "meta-llama/Llama-4-Scout-17B-16E-Instruct", "shrunk, chunk 16 (real 8192)",
       changes={"attention_chunk_size": 16}),
    _r("phi-3-mini", "microsoft/Phi-3-mini-4k-instruct"),
    _r("phi-3.5-mini-w32", "microsoft/Phi-3.5-mini-instruct", "shrunk, window 32 (real 262144), default RoPE "
       "(longrope's factors are sized by hidden / heads)", changes={"sliding_window": 32, "rope_scaling": None}),
    _r("phi-2", "microsoft/phi-2"),
    _r("mistral-7b-v0.1", "mistralai/Mistral-7B-v0.1"),
    _r("mistral-7b-v0.1-w32", "mistralai/Mistral-7B-v0.1", "shrunk, window 32 (real 4096)",
       changes={"sliding_window": 32}),
    _r("mistral-7b-v0.3", "mistralai/Mistral-7B-Instruct-v0.3"),
    _r("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1"),
    _r("gpt2", "openai-community/gpt2", "shrunk, hidden real (768: head_dim follows hidden / heads)"),
    _r("gpt-oss-20b", "openai/gpt-oss-20b"),
    _r("mamba-2.8b", "state-spaces/mamba-2.8b-hf", "shrunk, SSM width follows hidden"),
    _r("falcon-mamba-7b", "tiiuae/falcon-mamba-7b", "shrunk, SSM width follows hidden"),
    _r("falcon-7b", "tiiuae/falcon-7b-instruct", "shrunk, heads 2 (real 71), multi_query", heads=2),
    _r("falcon-40b", "tiiuae/falcon-40b-instruct", "shrunk, heads 4/2 (real 128/8), new_decoder_architecture",
       heads=4, kv_heads=2),
    _r("gpt-j-6b", "EleutherAI/gpt-j-6b", "shrunk, heads 2 (real 16)", heads=2),
    _r("pythia-1b", "EleutherAI/pythia-1b", "shrunk, heads 2 (real 8)", heads=2),
]
# Bundled families transformers 5.24 does not ship natively: recorded, never run with remote code.
CPU_UNSUPPORTED = [
    ("chatglm3-6b", "THUDM/chatglm3-6b"),
    ("glm-4-9b", "THUDM/glm-4-9b-chat"),
    ("phi-3-small", "microsoft/Phi-3-small-8k-instruct"),
]
# Every layer plain full attention (or MLA): what transformers' QuantizedCache accepts.
FULL_ATTENTION = {"llama-3.1-8b", "qwen2-7b", "qwen3-8b", "qwen3-30b-a3b", "olmo2-7b", "santacoder",
                  "deepseek-v2-lite", "deepseek-v3", "kimi-k2", "gemma-2b", "phi-2", "mistral-7b-v0.3",
                  "mixtral-8x7b", "gpt2", "falcon-7b", "falcon-40b", "gpt-j-6b", "pythia-1b"}
WINDOW_VARIANT = {"qwen2-7b-sw16", "starcoder2-7b-w32", "gemma-2-9b-w32", "llama-4-scout-c16", "phi-3.5-mini-w32",
                  "mistral-7b-v0.1-w32"}


# One static case per distinct layer mix (the static rules differ by layer kind, not by family); the window
# variants run static already.
STATIC = {"llama-3.1-8b", "qwen3-30b-a3b", "qwen3-next-80b-a3b", "jamba-1.5-mini", "deepseek-v2-lite", "gemma-3-1b",
          "mamba-2.8b", "falcon-40b", "gpt2", "phi-3-mini"}
QUANTO = {"llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v2-lite", "falcon-40b", "gpt2", "pythia-1b", "santacoder",
          "phi-2", "olmo2-7b"}
# Recipes present only for one long-prompt case (their family runs in full through a smaller sibling).
WINDOW_ONLY = {"gemma-3-4b"}
ONE_CASE = {"kimi-k2"}


def cpu_cases() -> list[Case]:
    by_key = {r.key: r for r in CPU_RECIPES}
    cases: list[Case] = []
    for r in CPU_RECIPES:
        if r.key in WINDOW_ONLY:
            continue
        if r.key in WINDOW_VARIANT:
            # prompt past the window (prefill pins all P tokens), then decode; and one crossing while decoding
            cases.append(Case(r, "dynamic", 2, 40, 5, "fp32", note="prompt past the shrunk window"))
            cases.append(Case(r, "dynamic", 1, 12, 8, "bf16", note="crosses the shrunk window while decoding"))
            cases.append(Case(r, "static", 1, 40, 3, "fp32", note="static: min(W, max_cache_len) tokens"))
            continue
        cases.append(Case(r, "dynamic", 1, 24, 6, "fp32"))
        if r.key in ONE_CASE:
            continue
        cases.append(Case(r, "dynamic", 2, 17, 5, "bf16"))
        if r.key in STATIC:
            cases.append(Case(r, "static", 1, 20, 4, "fp32"))
        if r.key in QUANTO:
            cases.append(Case(r, "quantized", 1, 32, 12, "fp32", quant=Quant("quanto", 4, 64, 8)))
    q = [("llama-3.1-8b", Quant("hqq", 4, 64, 8), "bf16"), ("qwen3-8b", Quant("hqq", 8, 64, 8), "fp32"),
         ("qwen2-7b", Quant("quanto", 2, 64, 8), "bf16"), ("deepseek-v2-lite", Quant("hqq", 4, 64, 8), "fp32"),
         ("mistral-7b-v0.3", Quant("fp8", 8), "bf16"), ("mixtral-8x7b", Quant("quanto", 4, 32, 4), "bf16")]
    for key, quant, dtype in q:
        cases.append(Case(by_key[key], "quantized", 2, 16, 10, dtype, quant=quant))
    # real windows crossed where a CPU can afford it
    cases += [
        Case(by_key["gpt-oss-20b"], "dynamic", 1, 140, 3, "fp32", note="prompt past the real window (128)"),
        Case(by_key["gpt-oss-20b"], "dynamic", 2, 124, 7, "bf16", note="crosses the real window (128) while decoding"),
        Case(by_key["gpt-oss-20b"], "static", 1, 130, 3, "fp32", note="static sliding layers: min(W, M)"),
        Case(by_key["gemma-3-1b"], "dynamic", 1, 520, 3, "bf16", note="prompt past the real window (512)"),
        Case(by_key["gemma-3-4b"], "dynamic", 1, 1030, 3, "bf16", note="prompt past the real window (1024)"),
        Case(by_key["phi-3-mini"], "dynamic", 1, 2050, 3, "bf16", note="prompt past the real window (2047)"),
        Case(by_key["gpt2"], "dynamic", 3, 33, 4, "fp16"),
        Case(by_key["falcon-7b"], "dynamic", 2, 9, 4, "fp16"),
    ]
    return _keep(cases)


# ---------------------------------------------------------------- gpu

GPU_RECIPES = [
    Recipe("llama-3.1-8b", "meta-llama/Llama-3.1-8B"),
    Recipe("qwen3-8b", "Qwen/Qwen3-8B"),
    Recipe("mistral-7b-v0.1", "mistralai/Mistral-7B-v0.1"),
    Recipe("gemma-2-9b", "google/gemma-2-9b"),
    Recipe("gpt-oss-20b", "openai/gpt-oss-20b"),
    Recipe("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite"),
    Recipe("phi-3-mini", "microsoft/Phi-3-mini-4k-instruct"),
    Recipe("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"),
]
GPU_PROMPTS = (1024, 8192, 32768)
GPU_BATCHES = (1, 8)
GPU_NEW_TOKENS = 16


def gpu_cases() -> list[Case]:
    by_key = {r.key: r for r in GPU_RECIPES}
    cases: list[Case] = []
    for tier, prompt in enumerate(GPU_PROMPTS):
        for r in GPU_RECIPES:
            for batch in GPU_BATCHES:
                cases.append(Case(r, "dynamic", batch, prompt, GPU_NEW_TOKENS, "bf16", tier=tier))
    llama, mistral, gemma = by_key["llama-3.1-8b"], by_key["mistral-7b-v0.1"], by_key["gemma-2-9b"]
    extra = [
        Case(llama, "static", 1, 8192, GPU_NEW_TOKENS, "bf16"),
        Case(gemma, "static", 1, 8192, GPU_NEW_TOKENS, "bf16"),
        Case(llama, "quantized", 1, 8192, GPU_NEW_TOKENS, "bf16", quant=Quant("quanto", 4, 64, 128)),
        Case(llama, "quantized", 1, 8192, GPU_NEW_TOKENS, "bf16", quant=Quant("hqq", 4, 64, 128)),
        Case(llama, "offloaded", 1, 8192, GPU_NEW_TOKENS, "bf16"),
        Case(mistral, "offloaded_static", 1, 8192, GPU_NEW_TOKENS, "bf16"),
    ]
    cases += [replace(c, tier=1) for c in extra]
    order = {r.key: i for i, r in enumerate(GPU_RECIPES)}
    # 1k for every model, then 8k, then 32k; within a tier one model's cases run together (one build each)
    cases.sort(key=lambda c: (c.tier, order[c.recipe.key]))
    return _keep(cases)


def suite_cases(name: str) -> list[Case]:
    return {"smoke": smoke_cases, "cpu": cpu_cases, "gpu": gpu_cases}[name]()


def unsupported_records(name: str) -> list[dict]:
    """Bundled families the suite cannot run (no native transformers class), recorded as skipped."""
    if name != "cpu":
        return []
    return [{"id": f"{key}/unsupported", "model": key, "source": source, "status": "skipped",
             "reason": "transformers 5.24 has no native class for this model_type and the harness never runs "
                       "remote code (kvplan still estimates it from the config)"} for key, source in CPU_UNSUPPORTED]
