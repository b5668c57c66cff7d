"""The fixes of a plan that does not fit as data: each (sentence, flags) pair `search.fixes` gives, with the plan()
settings its flags set and the figures of the plan they give (fits, KV tokens, concurrency, GPUs, layout), for the
API and the CLI's --json (issue #24: the JSON's `fixes` were prose only).

Each fix is planned again from its own flags, so what the JSON says a flag gives is what `kvplan plan ... FLAGS`
prints: Mixtral-8x7B on one H100 at 32,768 tokens, `--kv-dtype fp8` -> {"kv_dtype": "fp8"}, its plan's tokens.
"""

from __future__ import annotations

from ..config.load import as_model
from ..errors import KVPlanError
from ..model.spec import ModelSpec
from .planner import plan
from .result import FixPlan, Plan
from .search import fixes

# flag -> plan() keyword where the CLI's name is not the keyword with '-' as '_'
_KEYWORDS = {"enable_expert_parallel": "expert_parallel", "no_nvls": "nvls"}
_SWITCH_VALUES = {"no_nvls": False}   # a flag without a value sets True, these False
_LAYOUT = ("num_gpus", "tp", "pp")    # a fix that sets one of them replaces the layout asked for


def flag_settings(flags: str) -> dict:
    """`--tp 2 --pp 1` -> {"tp": 2, "pp": 1}; `--gpu-memory-utilization 0.95` -> {"gpu_memory_utilization": 0.95};
    a flag with no value (`--enable-expert-parallel`) is a switch."""
    words, out = flags.split(), {}
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name = word[2:].replace("-", "_")
        value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None
        out[_KEYWORDS.get(name, name)] = _SWITCH_VALUES.get(name, True) if value is None else _number(value)
    return out


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def planned(model: ModelSpec, found: list[tuple[str, str]], **settings) -> list[FixPlan]:
    """Each fix of `found` (search.fixes' pairs for these settings) with the plan its flags give."""
    out = []
    for change, flags in found:
        given = flag_settings(flags)
        base = {k: v for k, v in settings.items() if not (set(given) & set(_LAYOUT) and k in _LAYOUT)}
        try:
            p = plan(model, **{**base, **given})
        except (KVPlanError, TypeError) as exc:   # TypeError: a flag plan() has no keyword for
            out.append(FixPlan(change=change, flags=flags, settings=given, error=str(exc)))
            continue
        out.append(FixPlan(change=change, flags=flags, settings=given, **_figures(p)))
    return out


def _figures(p: Plan) -> dict:
    return dict(fits=p.fits, num_gpus=p.num_gpus, tensor_parallel_size=p.tensor_parallel_size,
                pipeline_parallel_size=p.pipeline_parallel_size, data_parallel_size=p.data_parallel_size,
                max_model_len=p.max_model_len, gpu_memory_utilization=p.gpu_memory_utilization,
                kv_cache_dtype=p.kv_cache_dtype, kv_cache_tokens=p.kv_cache_tokens,
                max_concurrency=p.max_concurrency, command=p.command)


def plan_fixes(model: ModelSpec | str, current: Plan | None = None, **settings) -> list[FixPlan]:
    """The nearest changes that make a plan fit, each with its flags, settings and resulting plan figures; []
    for a plan that fits. `current`: the plan of these settings, when the caller has it."""
    model = as_model(model)
    return planned(model, fixes(model, current, **settings), **settings)
