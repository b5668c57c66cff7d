"""A Hub checkpoint's safetensors headers, read by range requests: the headers, never the weights.

kvplan asks for the first 100 KB of `model.safetensors` (one file), or reads `model.safetensors.index.json` (at most
`files.INDEX.max_bytes`, held in memory, never written to the Hub cache the web app's visitors share) and then the
first 100 KB of each shard it names, 8 at a time; a longer header takes a second request, up to huggingface_hub's
own 25 MB cap. DeepSeek-V3's 163 shards cost 164 small requests. Each header is checked as safetensors checks it
(`safetensors.header_tensors`), against the file size the Hub gives in its Content-Range. Offline (HF_HUB_OFFLINE=1),
the headers are read from the shards the Hub cache already holds, as huggingface_hub lays them out. Each failure is
one kvplan sentence that says what to do, and no progress bar reaches stderr.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError, KVPlanError, ModelNotAvailableError, shown
from ..model.checkpoint import CheckpointWeights
from .files import INDEX, parse_json_bytes, read_config_file
from .hub import check_env, check_token, explain, is_offline, is_outage, quiet_hub_logs, with_deadline
from .safetensors import (INDEX_FILE, SINGLE_FILE, MAX_TENSORS, complete, header_tensors, index_shards, inside,
                          parse_header, read_header, summarise)

# A header is at most a few MB and shards are read 8 at a time: 90 s covers hundreds of shards.
HEADERS_DEADLINE_S = 90.0
FIRST_BYTES = 100_000        # what huggingface_hub's parse_safetensors_file_metadata asks for first
MAX_HUB_HEADER_BYTES = 25_000_000   # huggingface_hub's SAFETENSORS_MAX_HEADER_LENGTH
ERROR_BODY_BYTES = 65_536    # enough of an error answer for its message
WORKERS = 8
_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")


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
            files = with_deadline(lambda: _from_hub(repo_id, revision, token), repo_id, "safetensors headers",
                                  HEADERS_DEADLINE_S)
    except KVPlanError:
        raise
    except Exception as exc:
        if cache_fallback and is_outage(exc):
            return _from_cache(repo_id, revision, num_layers, offline=False, hidden=hidden)
        raise _weights_error(exc, repo_id, revision) from None
    return _summary(files, f"safetensors headers of {repo_id} on the Hub{at}", num_layers, hidden)


def _summary(files: list[tuple[str, list]], source: str, num_layers: int, hidden: int | None) -> CheckpointWeights:
    tensors = [t for _, found in files for t in found]
    if len(tensors) > MAX_TENSORS:
        raise ConfigError(f"{source} hold more than {MAX_TENSORS:,} tensors, more than any checkpoint: the weights "
                          "come from the config rule")
    found = CheckpointWeights(source=source, rows=summarise(tensors, num_layers, hidden), files=len(files))
    return complete(found, num_layers, f"the checkpoint ({source})")


def _from_hub(repo_id: str, revision: str | None, token: str | bool | None) -> list[tuple[str, list]]:
    """(file, its tensors) for the single file or each shard of the index."""
    from huggingface_hub.errors import EntryNotFoundError

    get = _Getter(repo_id, revision, token)
    try:
        return [(SINGLE_FILE, get.tensors(SINGLE_FILE))]
    except EntryNotFoundError:
        pass
    try:
        raw, _ = get.bytes(INDEX_FILE, INDEX.max_bytes, whole=True)
    except EntryNotFoundError:
        raise ModelNotAvailableError(f"{repo_id} has no safetensors checkpoint on the Hub (no {SINGLE_FILE} or "
                                     f"{INDEX_FILE}; .bin or GGUF only): the weights come from the config "
                                     "rule") from None
    label = f"{repo_id}/{INDEX_FILE} on the Hub"
    names = index_shards(parse_json_bytes(raw, label, INDEX), label)

    def shard(name: str) -> tuple[str, list]:
        try:
            return name, get.tensors(name)
        except EntryNotFoundError:  # was "has no config.json"
            raise ModelNotAvailableError(f"{repo_id} on the Hub lacks the shard {shown(name)} its {INDEX_FILE} names: "
                                         "the checkpoint there is incomplete, so the weights come from the config rule "
                                         "(or pass a complete local checkpoint folder)") from None

    return _in_threads(shard, names)


class _Getter:
    """Ranged GETs of one repository's files with huggingface_hub's session, headers and typed errors, each read
    at most to the bytes it needs whatever the server sends or claims."""

    def __init__(self, repo_id: str, revision: str | None, token: str | bool | None):
        from huggingface_hub.utils import build_hf_headers

        self.repo_id, self.revision = repo_id, revision
        self.auth = build_hf_headers(token=token)

    def tensors(self, filename: str) -> list:
        """A shard's checked tensors: its first 100 KB, and the rest of its header when that is longer."""
        label = f"{self.repo_id}/{filename} on the Hub"
        start, total = self.bytes(filename, FIRST_BYTES)
        length = int.from_bytes(start[:8], "little") if len(start) >= 8 else -1
        if total is None or not 2 <= length <= min(MAX_HUB_HEADER_BYTES, total - 8):
            raise ConfigError(f"{label} does not start like a safetensors file (8 bytes of header length, then that "
                              "much JSON, within the file's size): the weights come from the config rule")
        if 8 + length > len(start):
            start, _ = self.bytes(filename, 8 + length)
        if len(start) < 8 + length:
            raise ConfigError(f"{label} was cut short inside its header: retry, or the weights come from the config "
                              "rule")
        return header_tensors(parse_header(start[8:8 + length], label), label, total - 8 - length)

    def bytes(self, filename: str, limit: int, whole: bool = False) -> tuple[bytes, int | None]:
        """The first `limit` bytes of a file and its size (None when the server says neither in Content-Range nor
        in Content-Length); `whole`: the file must fit in `limit` (the index), else a ConfigError before it is
        read."""
        from huggingface_hub import constants, hf_hub_url
        from huggingface_hub.utils import get_session

        url = hf_hub_url(self.repo_id, filename, revision=self.revision)
        headers = self.auth if whole else {**self.auth, "Range": f"bytes=0-{limit - 1}"}
        with get_session().stream("GET", url, headers=headers, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
            if response.status_code >= 400:
                _raise_for_status(response)
            total = _size(response.headers, response.status_code)
            if whole and total is not None and total > limit:
                raise ConfigError(f"{self.repo_id}/{filename} on the Hub is {total:,} bytes, larger than "
                                  f"{INDEX.noun} can be ({limit:,}): the weights come from the config rule")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > limit:
                    if whole:
                        raise ConfigError(f"{self.repo_id}/{filename} on the Hub is larger than {INDEX.noun} can be "
                                          f"({limit:,} bytes): the weights come from the config rule")
                    break
        return bytes(body[:limit]), total


def _size(headers: Any, status: int) -> int | None:
    """A file's size: the total of a 206's `Content-Range: bytes 0-99999/16060522496`, or a 200's Content-Length."""
    if status == 206:
        match = _RANGE.match(headers.get("Content-Range", "").strip())
        return int(match.group(3)) if match and match.group(1) == "0" and len(match.group(3)) < 20 else None
    length = headers.get("Content-Length", "").strip()
    return int(length) if length.isdigit() and len(length) < 20 else None


def _raise_for_status(response) -> None:
    """huggingface_hub's own error for an answer >= 400 (GatedRepoError, EntryNotFoundError, ...), from at most
    64 KB of its body: hf_raise_for_status reads a streamed body whole."""
    import httpx2
    from huggingface_hub.utils import hf_raise_for_status

    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) >= ERROR_BODY_BYTES:
            break
    hf_raise_for_status(httpx2.Response(response.status_code, headers=response.headers,
                                        content=bytes(body[:ERROR_BODY_BYTES]), request=response.request))


def _in_threads(work: Callable[[str], Any], items: list[str]) -> list:
    """`work` over `items`, WORKERS at a time, in order. Daemon threads: when the deadline abandons a trickling
    Hub, nothing holds the process open at exit (a ThreadPoolExecutor joins its threads there)."""
    results: list = [None] * len(items)
    errors: list[BaseException] = []
    queue = iter(enumerate(items))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                job = None if errors else next(queue, None)
            if job is None:
                return
            try:
                results[job[0]] = work(job[1])
            except BaseException as exc:  # handed to the caller's thread
                with lock:
                    errors.append(exc)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(WORKERS, len(items)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _weights_error(exc: Exception, repo_id: str, revision: str | None) -> KVPlanError:
    explained = explain(exc, repo_id, revision, offline=False, instead="the local checkpoint folder")
    if explained is None:
        return ModelNotAvailableError(f"reading the safetensors headers of {repo_id} failed "
                                      f"({type(exc).__name__}): the weights come from the config rule")
    return explained


def _from_cache(repo_id: str, revision: str | None, num_layers: int, offline: bool,
                hidden: int | None = None) -> CheckpointWeights:
    """Headers of the shards a previous download left in the Hub cache (snapshots/<commit>/...), each a file of
    the repository's own cache folder."""
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.file_download import repo_folder_name

    why = "HF_HUB_OFFLINE is set" if offline else "the Hub could not be reached"
    root = (Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")).resolve()
    index = try_to_load_from_cache(repo_id, INDEX_FILE, revision=revision)
    label = f"the cached {INDEX_FILE} of {repo_id}"
    names = index_shards(read_config_file(inside(Path(index), root, label), INDEX), label) \
        if isinstance(index, str) else [SINGLE_FILE]
    paths = [try_to_load_from_cache(repo_id, name, revision=revision) for name in names]
    if not all(isinstance(p, str) for p in paths):
        raise ModelNotAvailableError(f"the safetensors shards of {repo_id} are not in the Hub cache and {why}: the "
                                     "weights come from the config rule (download the checkpoint for exact bytes)")
    files = []
    for name, path in zip(names, paths):
        header, data_bytes = read_header(inside(Path(path), root, f"the cached {shown(name)} of {repo_id}"))
        files.append((name, header_tensors(header, f"{repo_id}/{name}", data_bytes)))
    return _summary(files, f"safetensors headers of {repo_id} in the Hub cache", num_layers, hidden)
