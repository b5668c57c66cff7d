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
    "UnsupportedArchitectureError",
    "WorkloadError",
    "__version__",
    "bundled_ids",
    "estimate",
    "load_model",
    "parse_config",
    "resolve_dtype",
]
