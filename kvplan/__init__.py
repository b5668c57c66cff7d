"""kvplan: exact KV-cache memory from a Hugging Face config.json.

    >>> import kvplan
    >>> est = kvplan.estimate("meta-llama/Llama-3.1-8B", seq_len=4096, batch_size=1)
    >>> est.kv_cache_bytes
    536870912

Never imports torch, transformers or streamlit.
"""

from .cache.estimate import Estimate, GroupRow, estimate
from .config.load import load_model
from .config.parse import parse_config
from .config.reader import Overrides
from .dtypes import resolve_dtype
from .errors import ConfigError, KVPlanError, ModelNotAvailableError, UnsupportedArchitectureError, WorkloadError
from .model.spec import ModelSpec
from .sources.library import bundled_ids

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Estimate",
    "GroupRow",
    "KVPlanError",
    "ModelNotAvailableError",
    "ModelSpec",
    "Overrides",
    "Plan",
    "UnsupportedArchitectureError",
    "WorkloadError",
    "__version__",
    "bundled_ids",
    "deployable",
    "estimate",
    "fewest_gpus",
    "load_model",
    "parse_config",
    "plan",
    "plan_fixes",
    "recommend",
    "resolve_dtype",
]

# The planner pulls in the weights model and the GPU catalog: imported on first use, so that
# `import kvplan` and `kvplan estimate` stay light.
_LAZY = {"Plan": "planning.result", "plan": "planning.planner", "fewest_gpus": "planning.search",
         "plan_fixes": "planning.fix_plans", "deployable": "planning.layouts", "recommend": "planning.recommend"}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'kvplan' has no attribute {name!r}")
