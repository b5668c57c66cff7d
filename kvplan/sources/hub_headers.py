"""A Hub checkpoint's safetensors headers, read with huggingface_hub's own `get_safetensors_metadata`.

The client asks for `model.safetensors` (one file) or `model.safetensors.index.json` and then the first
100 KB of each shard (an HTTP range request): the headers, never the weights. DeepSeek-V3's 163 shards cost
163 small requests. Offline (HF_HUB_OFFLINE=1), the headers are read from the shards the Hub cache already
holds, as huggingface_hub lays them out. Each failure is one kvplan sentence that says what to do.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError, KVPlanError, ModelNotAvailableError
from ..model.checkpoint import CheckpointWeights
from .hub import check_env, check_token, explain, is_offline, is_outage, quiet_hub_logs, with_deadline
from .safetensors import INDEX_FILE, SINGLE_FILE, header_tensors, index_shards, read_header, summarise

# A header is at most a few MB and the client fetches shards 8 at a time: 90 s covers hundreds of shards.
HEADERS_DEADLINE_S = 90.0


def fetch_checkpoint(repo_id: str, num_layers: int, *, revision: str | None = None, token: str | bool | None = None,
                     cache_fallback: bool = True, hidden: int | None = None) -> CheckpointWeights:
    """The checkpoint summary of `repo_id`, or a ModelNotAvailableError / ConfigError saying why there is none."""
    check_env()
    check_token(token)
    at = f" (revision {revision})" if revision else ""
    if is_offline():
        if not cache_fallback:
            raise ModelNotAvailableError("this app cannot ask the Hub for the checkpoint's headers (HF_HUB_OFFLINE "
                                         "is set): the weights come from the config rule")
        return _from_cache(repo_id, revision, num_layers, offline=True, hidden=hidden)
    try:
        with quiet_hub_logs():
            meta = with_deadline(lambda: _metadata(repo_id, revision, token), repo_id, "safetensors headers",
                                  HEADERS_DEADLINE_S)
    except KVPlanError:
        raise
    except Exception as exc:
        if cache_fallback and is_outage(exc):
            return _from_cache(repo_id, revision, num_layers, offline=False, hidden=hidden)
        raise _weights_error(exc, repo_id, revision) from None
    tensors = []
    for filename, file_meta in sorted(meta.files_metadata.items()):
        header = {name: {"dtype": t.dtype, "shape": t.shape, "data_offsets": t.data_offsets}
                  for name, t in file_meta.tensors.items()}
        tensors += header_tensors(header, f"{repo_id}/{filename}")
    return CheckpointWeights(source=f"safetensors headers of {repo_id} on the Hub{at}",
                             rows=summarise(tensors, num_layers, hidden), files=len(meta.files_metadata))


def _metadata(repo_id: str, revision: str | None, token: str | bool | None):
    from huggingface_hub import HfApi

    return HfApi().get_safetensors_metadata(repo_id, revision=revision, token=token)


def _weights_error(exc: Exception, repo_id: str, revision: str | None) -> KVPlanError:
    from huggingface_hub.errors import NotASafetensorsRepoError, SafetensorsParsingError

    if isinstance(exc, NotASafetensorsRepoError):
        return ModelNotAvailableError(f"{repo_id} has no safetensors checkpoint on the Hub (no {SINGLE_FILE} or "
                                      f"{INDEX_FILE}; .bin or GGUF only): the weights come from the config rule")
    if isinstance(exc, SafetensorsParsingError):
        return ConfigError(f"a safetensors header of {repo_id} could not be parsed ({str(exc).splitlines()[0][:120]}):"
                           " the weights come from the config rule")
    explained = explain(exc, repo_id, revision, offline=False, instead="the local checkpoint folder")
    if explained is None:
        return ModelNotAvailableError(f"reading the safetensors headers of {repo_id} failed "
                                      f"({type(exc).__name__}): the weights come from the config rule")
    return explained


def _from_cache(repo_id: str, revision: str | None, num_layers: int, offline: bool,
                hidden: int | None = None) -> CheckpointWeights:
    """Headers of the shards a previous download left in the Hub cache (snapshots/<commit>/...)."""
    from huggingface_hub import try_to_load_from_cache

    why = "HF_HUB_OFFLINE is set" if offline else "the Hub could not be reached"
    index = try_to_load_from_cache(repo_id, INDEX_FILE, revision=revision)
    names = index_shards(Path(index), f"the cached {INDEX_FILE} of {repo_id}") if isinstance(index, str) \
        else [SINGLE_FILE]
    paths = [try_to_load_from_cache(repo_id, name, revision=revision) for name in names]
    if not all(isinstance(p, str) for p in paths):
        raise ModelNotAvailableError(f"the safetensors shards of {repo_id} are not in the Hub cache and {why}: the "
                                     "weights come from the config rule (download the checkpoint for exact bytes)")
    tensors = []
    for name, path in zip(names, paths):
        tensors += header_tensors(read_header(Path(path)), f"{repo_id}/{name}")
    return CheckpointWeights(source=f"safetensors headers of {repo_id} in the Hub cache",
                             rows=summarise(tensors, num_layers, hidden), files=len(names))
