"""The one set of defaults every face plans with: the CLI's flags, the API's keyword arguments and the app's widgets
all read them here, so the same model with nothing else chosen is the same plan everywhere (issue #24: the CLI
planned Llama-3.1-8B at its 131,072-token context and the Capacity page at 8,192, and the page's greyed slider said
0.90 while the plan used vLLM 0.33's 0.92).

A default that depends on the plan (the context, SGLang's memory fraction, vLLM's batch limits) is None here and
decided by the engine's planner; `DEFAULTS` says each one in words, for the help texts. `cli_command` writes the
`kvplan plan` line for a set of settings, so the app can show what the CLI would print for the same inputs.
"""

from __future__ import annotations

import shlex

from .engines.sglang_pool import DEFAULT_VERSION as SGLANG_LATEST
from .engines.unread import release_text
from .engines.vllm_profile import ENGINE_CONSTANTS, LATEST as VLLM_LATEST, default_utilization, parse_version

ENGINE = "vllm"
GPU = "H100-SXM"            # the catalog's name; "H100-80GB" and "H100" are its aliases (kvplan/data/gpus.json)
NUM_GPUS = 1
PIPELINE_STAGES = 1
KV_DTYPE = "auto"           # the model's dtype (the engine's `auto`)
DTYPE = "auto"              # the config's dtype, cast where the card lacks it (inputs.model_dtype)
BATCH_SIZE = 1              # `kvplan estimate --batch-size`, the app's sidebar batch
MAX_MODEL_LEN = None        # the model's own context length (inputs.resolve_max_len: what the engine derives)
LATEST = {"vllm": VLLM_LATEST, "sglang": SGLANG_LATEST}
# transformers' generate has no memory fraction of its own: kvplan plans it within 90 % of the card
HF_UTILIZATION = 0.9


def engine_version(engine: str) -> str | None:
    """The release whose accounting a plan follows when none is named: the latest kvplan read (None for hf)."""
    return release_text(LATEST[engine]) if engine in LATEST else None


def utilization(engine: str, version: str | tuple[int, int, int] | None = None) -> float | None:
    """The memory fraction a plan uses when none is given: vLLM's default for the version (0.92 from 0.20, 0.9
    before: vllm/config/cache.py `gpu_memory_utilization`), None for SGLang (it picks mem_fraction_static from the
    card's memory and TP, `sglang_pool`), HF_UTILIZATION for transformers."""
    if engine == "vllm":
        return default_utilization(version if isinstance(version, tuple) else parse_version(version))
    return None if engine == "sglang" else HF_UTILIZATION


def _vllm_utilization_text() -> str:
    table = ENGINE_CONSTANTS["default_gpu_memory_utilization"]
    newest, *older = sorted(table, reverse=True)
    return f"vLLM {table[newest]:.2f}" + "".join(f" ({table[v]:.2f} before {release_text(newest)})" for v in older[:1])


DEFAULTS = {   # each default in words, as the CLI's --help and the app's help texts say it
    "engine": ENGINE,
    "gpu": GPU,
    "num_gpus": f"{NUM_GPUS}",
    "max_model_len": "the model's context length (its config's, as the engine derives it)",
    "gpu_memory_utilization": f"{_vllm_utilization_text()}; SGLang from the card's memory and TP",
    "engine_version": f"the latest releases kvplan read, vLLM {release_text(VLLM_LATEST)} and SGLang "
                      f"{release_text(SGLANG_LATEST)}",
    "kv_dtype": "auto (the model's dtype)",
    "batch": "vLLM's max_num_seqs and max_num_batched_tokens for this GPU; SGLang sizes its batch from the pool",
}

# plan() keyword -> the `kvplan plan` flag that sets it, in the order the CLI's --help lists them
_FLAGS = (("engine", "--engine"), ("gpu", "--gpu"), ("num_gpus", "--num-gpus"), ("tp", "--tp"), ("pp", "--pp"),
          ("dp", "--dp"), ("max_model_len", "--max-model-len"), ("gpu_memory_utilization", "--gpu-memory-utilization"),
          ("kv_dtype", "--kv-dtype"), ("engine_version", "--engine-version"), ("block_size", "--block-size"),
          ("max_num_seqs", "--max-num-seqs"), ("max_num_batched_tokens", "--max-num-batched-tokens"))
_SWITCHES = (("expert_parallel", "--enable-expert-parallel"), ("enforce_eager", "--enforce-eager"),
             ("language_model_only", "--language-model-only"))
_UNSET = {"engine": ENGINE, "gpu": GPU, "num_gpus": NUM_GPUS, "pp": PIPELINE_STAGES, "dp": 1, "kv_dtype": KV_DTYPE}


def cli_command(model: str, **settings) -> str:
    """The `kvplan plan` line that plans `model` with these plan() settings: a setting at its default is left out,
    so the line is what a user types (`kvplan plan meta-llama/Llama-3.1-8B` for the defaults)."""
    words = ["kvplan", "plan", model]
    engine = settings.get("engine") or ENGINE
    for key, flag in _FLAGS:
        value = settings.get(key)
        if value is None or value == _UNSET.get(key) or (key == "engine_version" and value == engine_version(engine)):
            continue
        words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    words += [flag for key, flag in _SWITCHES if settings.get(key)]
    if settings.get("nvls") is False:
        words.append("--no-nvls")
    if spec := settings.get("speculative"):
        words += ["--speculative", spec["method"], "--num-speculative-tokens", str(spec["num_speculative_tokens"])]
        words += ["--draft-model", spec["model"]] if spec.get("model") else []
    if lora := settings.get("lora"):
        words += ["--max-loras", str(lora["max_loras"]), "--max-lora-rank", str(lora["max_lora_rank"])]
    return shlex.join(words)
