"""kvplan: exact KV-cache memory from a Hugging Face config.json.

    >>> import kvplan
    >>> est = kvplan.estimate("meta-llama/Llama-3.1-8B", seq_len=4096, batch_size=1)
    >>> est.kv_cache_bytes
    536870912

Never imports torch, transformers or streamlit.
"""

from .config import Overrides, parse_config
from .dtypes import resolve_dtype
from .errors import ConfigError, KVPlanError, ModelNotAvailableError, UnsupportedArchitectureError, WorkloadError
from .estimate import Estimate, GroupRow, estimate
from .library import bundled_ids, load_model
from .model import ModelSpec

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
    "estimate",
    "fewest_gpus",
    "load_model",
    "parse_config",
    "plan",
    "resolve_dtype",
]

# The planner pulls in the weights model and the GPU catalog: imported on first use, so that
# `import kvplan` and `kvplan estimate` stay light.
_LAZY = {"Plan": "planner", "plan": "planner", "fewest_gpus": "planner"}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'kvplan' has no attribute {name!r}")
