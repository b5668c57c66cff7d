"""Fetching config.json from the Hugging Face Hub with the real `huggingface_hub` client.

Imported lazily (only when a model is neither bundled nor local), so estimates never pay for it.
Only `config.json` is ever requested, and where it has no quantization_config the `hf_quant_config.json` vLLM reads
beside it (ModelOpt's, JSON data): never modeling code, whatever its `auto_map` names.
Each Hub failure becomes one ModelNotAvailableError / ConfigError sentence that says what to do (`explain`); the
guards every Hub call takes (`check_env`, `check_token`, `with_deadline`, `quiet_hub_logs`) serve the checkpoint's
headers too (`hub_headers`).
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from inspect import signature
from pathlib import Path
from typing import Any, Iterator

from ..errors import ConfigError, KVPlanError, ModelNotAvailableError, shown

CONFIG_FILE = "config.json"
# One HEAD for a file of a few KB: 5 s is plenty (huggingface_hub's default is 10 s); HF_HUB_ETAG_TIMEOUT wins.
ETAG_TIMEOUT_S = 5.0
# The whole fetch (HEAD + GET of a few KB) takes well under a second; 30 s also covers a slow link.
FETCH_DEADLINE_S = 30.0


def fetch_config(repo_id: str, *, revision: str | None = None, token: str | bool | None = None,
                 cache_fallback: bool = True) -> dict[str, Any]:
    """Download (or read from the Hub cache) `config.json` of `repo_id` and parse it as JSON data.

    `token=None` lets huggingface_hub use HF_TOKEN or the saved login. HF_HUB_OFFLINE=1 serves the
    cache only (HF_HUB_CACHE / HF_HOME say where it is). The repository's code is never downloaded or run.
    Online, the Hub is always asked first: a refusal (401/403, gated, not found) is an error even when the
    cache holds a copy, so a gated config fetched once with a good token is never served without it.
    `cache_fallback=False` (the shared web app) never serves the cache without the Hub's yes: no copy
    during an outage, nothing offline.
    """
    check_env()
    offline = is_offline()
    check_token(token)
    try:
        with quiet_hub_logs():
            path = with_deadline(lambda: _download(repo_id, revision, token, offline, cache_fallback), repo_id)
    except KVPlanError:
        raise
    except Exception as exc:
        error = explain(exc, repo_id, revision, offline)
        if error is None:
            raise
        raise error from None
    from .files import QUANT_FILE, read_config_file, with_quant_file

    return with_quant_file(read_config_file(Path(path)),
                           lambda: _fetch_beside(repo_id, QUANT_FILE, revision, token, offline, cache_fallback))


def _fetch_beside(repo_id: str, filename: str, revision: str | None, token: str | bool | None, offline: bool,
                  cache_fallback: bool) -> dict[str, Any] | None:
    """A JSON file beside config.json (ModelOpt's hf_quant_config.json), parsed, or None where the repository has
    none: the Hub answers EntryNotFound, or offline (or in an outage, where config.json came from the cache too)
    the cache holds no copy, as vLLM's file_or_path_exists finds none there. Downloaded with its config.json, an
    existing file is in the cache with it; only a config.json cached alone (by an older kvplan, or another
    client) and served in an outage misses it. Any other failure is the one kvplan error `explain` gives."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    from .files import read_config_file

    if offline:  # the cache's copy, or none (never fetched, or the Hub's EntryNotFound recorded in .no_exist)
        cached = try_to_load_from_cache(repo_id, filename, revision=revision)
        return read_config_file(Path(cached)) if isinstance(cached, str) else None
    try:
        with quiet_hub_logs():
            path = with_deadline(lambda: _download(repo_id, revision, token, offline, cache_fallback, filename),
                                 repo_id, filename)
    except KVPlanError:
        raise
    except LocalEntryNotFoundError:  # an EntryNotFoundError (hf_hub_download after a failed HEAD): test it first
        raise ModelNotAvailableError(f"{repo_id}/{filename}{_at(revision)} is not in the Hub cache and the Hub could "
                                     "not be reached: check your connection and retry, or pass the checkpoint "
                                     "folder") from None
    except EntryNotFoundError:
        return None
    except Exception as exc:
        if cache_fallback and is_outage(exc):  # served as config.json is: the cache's copy, or the config alone
            cached = try_to_load_from_cache(repo_id, filename, revision=revision)
            return read_config_file(Path(cached)) if isinstance(cached, str) else None
        error = explain(exc, repo_id, revision, offline)
        if error is None:
            raise
        raise error from None
    return read_config_file(Path(path))


def is_offline() -> bool:
    """huggingface_hub's own rule, read now rather than at its import (a caller may set the variable later)."""
    check_env()
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return bool(constants.HF_HUB_OFFLINE) or flag.strip().upper() in ("1", "ON", "YES", "TRUE")


def check_env() -> None:
    """huggingface_hub reads these with int() at import: 'abc' would be a traceback from inside its constants."""
    for name in ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT"):
        value = os.environ.get(name)
        if value is not None and not value.strip().isdigit():
            raise ModelNotAvailableError(f"{name}={value[:40]!r} is not a whole number of seconds: set it to one "
                                         "(e.g. 10) or unset it")


def check_token(token: str | bool | None) -> None:
    """A token goes into an HTTP header, which takes printable ASCII only (httpx would raise UnicodeEncodeError)."""
    if token is None or token is True:
        from huggingface_hub import get_token

        token = get_token()
    if isinstance(token, str) and not (token.isascii() and token.isprintable()):
        raise ModelNotAvailableError("the Hugging Face token (HF_TOKEN or the one given) holds non-ASCII or control "
                                     "characters, which no token has: copy it again from huggingface.co/settings/tokens")


def with_deadline(fetch, repo_id: str, what: str = CONFIG_FILE, deadline_s: float | None = None):
    """`fetch()` bounded in wall-clock time. httpx's timeouts are per read, so an endpoint that sends one byte a
    second never trips them; past FETCH_DEADLINE_S the worker thread is abandoned (it is a daemon) and kvplan
    reports the failure at once."""
    box: dict[str, Any] = {}

    def work():
        try:
            box["value"] = fetch()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="kvplan-hub-fetch", daemon=True)
    worker.start()
    deadline_s = FETCH_DEADLINE_S if deadline_s is None else deadline_s
    worker.join(deadline_s)
    if worker.is_alive():
        raise ModelNotAvailableError(f"the Hub took more than {deadline_s:g} s to send {repo_id}/{what}: "
                                     "check your connection (and HF_ENDPOINT) and retry, or pass a local path")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _download(repo_id: str, revision: str | None, token: str | bool | None, offline: bool,
              cache_fallback: bool = True, filename: str = CONFIG_FILE) -> str:
    from huggingface_hub import _CACHED_NO_EXIST, hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(repo_id, filename, revision=revision)
    if offline:
        if not cache_fallback:
            raise ModelNotAvailableError("this app cannot ask the Hub (HF_HUB_OFFLINE is set), and it serves no cached "
                                         "copy it cannot check: pick a bundled model or upload the config.json")
        if cached is _CACHED_NO_EXIST:  # the Hub said so on an earlier online call
            raise _no_config(repo_id, revision)
        return hf_hub_download(repo_id, filename, revision=revision, token=token, local_files_only=True)
    timeout = _etag_timeout()
    try:
        size = _probe(repo_id, revision, token, timeout, filename)
    except Exception as exc:
        if cache_fallback and isinstance(cached, str) and is_outage(exc):
            return cached  # what hf_hub_download does for an unreachable Hub, without its 23 s of retries
        raise
    _check_size(size, repo_id, filename)
    quiet = {"tqdm_class": _no_progress_bar()} if "tqdm_class" in signature(hf_hub_download).parameters else {}
    return hf_hub_download(repo_id, filename, revision=revision, token=token, etag_timeout=timeout, **quiet)


def _probe(repo_id: str, revision: str | None, token: str | bool | None, timeout: float,
           filename: str = CONFIG_FILE) -> int | None:
    """One HEAD without retries, before every online download: the file's size, or the Hub's refusal.

    hf_hub_download retries an unreachable Hub (or a 5xx) 5 times with backoff, 1+2+4+8+8 = 23 s, and falls back
    to its cache after any failed HEAD, a 401 or 403 included: a gated config one token fetched would be served
    to every other token. Hub errors (gated, not found, ...) raise here exactly as hf_hub_download raises them.
    """
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url

    meta = get_hf_file_metadata(hf_hub_url(repo_id, filename, revision=revision), token=token, timeout=timeout)
    if meta.commit_hash is None or meta.etag is None:  # a captive portal or a proxy that is not the Hub
        raise ModelNotAvailableError(f"{constants.ENDPOINT} did not answer like the Hugging Face Hub for {repo_id} "
                                     "(no X-Repo-Commit or ETag header): check HF_ENDPOINT and your proxy settings")
    return meta.size


def is_outage(exc: Exception) -> bool:
    """The Hub could not answer (connection, timeout, 5xx, 429, a proxy): not a refusal of this token."""
    from huggingface_hub.errors import HfHubHTTPError, HTTPError

    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        return status is not None and (status >= 500 or status == 429)
    return isinstance(exc, (HTTPError, OSError, ModelNotAvailableError))


def _check_size(size: int | None, repo_id: str, filename: str = CONFIG_FILE) -> None:
    from .files import MAX_CONFIG_BYTES

    if size is not None and size > MAX_CONFIG_BYTES:  # refused before a byte of it reaches the cache
        raise ConfigError(f"{repo_id}/{filename} on the Hub is {size:,} bytes, too large for a config.json (limit "
                          f"{MAX_CONFIG_BYTES:,}): pass the model's config.json path")


def _etag_timeout() -> float:
    from huggingface_hub import constants

    if constants.HF_HUB_ETAG_TIMEOUT != constants.DEFAULT_ETAG_TIMEOUT:  # as hf_hub_download does
        return constants.HF_HUB_ETAG_TIMEOUT
    return ETAG_TIMEOUT_S


def _no_progress_bar() -> type:
    """A config.json is a few KB: a progress bar on stderr would be noise around kvplan's output.

    hf_hub_download takes `tqdm_class` since huggingface_hub 1.x (not 1.0.0); without it, no bar is asked for.
    """
    from huggingface_hub.utils import tqdm

    class NoProgressBar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return NoProgressBar


def _no_config(repo_id: str, revision: str | None) -> ConfigError:
    return ConfigError(f"{repo_id}{_at(revision)} has no config.json (GGUF-only, or not a transformers model): "
                       "pass a config.json path")


def explain(exc: Exception, repo_id: str, revision: str | None, offline: bool,
             instead: str = "the config.json path") -> KVPlanError | None:
    """The one kvplan error for a huggingface_hub failure, or None for anything unforeseen (left to propagate).
    `instead`: what the user can pass instead of the Hub id (the checkpoint reader: the local checkpoint folder)."""
    from huggingface_hub.errors import (DisabledRepoError, EntryNotFoundError, GatedRepoError, HfHubHTTPError,
                                        HFValidationError, HTTPError, LocalEntryNotFoundError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    at = _at(revision)
    if isinstance(exc, GatedRepoError):  # a RepositoryNotFoundError: test it first
        return ModelNotAvailableError(f"{repo_id} is gated: accept its license on huggingface.co and set HF_TOKEN to "
                                      f"a token of that account, or pass {instead}")
    if isinstance(exc, RepositoryNotFoundError):
        return ModelNotAvailableError(f"{repo_id} was not found on the Hub: check the id, and set HF_TOKEN if the "
                                      "repository is private")
    if isinstance(exc, RevisionNotFoundError):
        return ModelNotAvailableError(f"{repo_id} has no revision {shown(revision)}: pass an existing branch, tag or "
                                      "commit")
    if isinstance(exc, LocalEntryNotFoundError):  # an EntryNotFoundError: test it first
        if offline:
            return ModelNotAvailableError(f"{repo_id}/config.json{at} is not in the Hub cache and HF_HUB_OFFLINE is "
                                          f"set: fetch it once online, or pass {instead}")
        return ModelNotAvailableError(f"{repo_id}/config.json{at} is not in the Hub cache and the Hub could not be "
                                      f"reached: check your connection and retry, or pass {instead}")
    if isinstance(exc, EntryNotFoundError):
        return _no_config(repo_id, revision)
    if isinstance(exc, HFValidationError):
        return ModelNotAvailableError(f"{shown(repo_id)} is not a valid Hub id ({_first_line(exc)}): use org/name")
    if isinstance(exc, DisabledRepoError):
        return ModelNotAvailableError(f"{repo_id} is disabled on the Hub: pass {instead}")
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        status = exc.response.status_code
        if status in (401, 403):
            return ModelNotAvailableError(f"the Hub refused access to {repo_id} (HTTP {status}): check that HF_TOKEN "
                                          "is valid and can read this repository")
        return ModelNotAvailableError(f"the Hub answered HTTP {status} for {repo_id}: retry later, or pass {instead}")
    if isinstance(exc, (HTTPError, OSError)):  # httpx2.ConnectError / timeouts are HTTPError, not OSError
        return ModelNotAvailableError(f"could not reach the Hub for {repo_id} ({_first_line(exc)}): check your "
                                      f"connection (and HF_ENDPOINT) and retry, or pass {instead}")
    return None


def _at(revision: str | None) -> str:
    return f" at revision {shown(revision)}" if revision else ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:160] if text else type(exc).__name__


_quiet_lock = threading.Lock()
_quiet_users = 0
_saved_level = logging.NOTSET


@contextmanager
def quiet_hub_logs() -> Iterator[None]:
    """Hold back huggingface_hub's WARNING and ERROR log lines while kvplan calls it.

    Its retry loop logs "'[Errno -2] Name or service not known' thrown while requesting HEAD ..." and
    "Retrying in 1s [Retry 1/5]." to stderr; kvplan reports the failure once, as its own error. A user who
    asked for more (HF_HUB_VERBOSITY=info or debug) keeps it. The level is process-wide while held.
    """
    global _quiet_users, _saved_level
    logger = logging.getLogger("huggingface_hub")
    with _quiet_lock:
        if _quiet_users == 0:
            _saved_level = logger.level
            if logger.getEffectiveLevel() >= logging.WARNING:
                logger.setLevel(logging.CRITICAL)
        _quiet_users += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_users -= 1
            if _quiet_users == 0:
                logger.setLevel(_saved_level)
