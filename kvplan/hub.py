"""Fetching config.json from the Hugging Face Hub with the real `huggingface_hub` client.

Imported lazily (only when a model is neither bundled nor local), so estimates never pay for it.
Each Hub failure becomes one ModelNotAvailableError / ConfigError sentence that says what to do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import ConfigError, ModelNotAvailableError


def fetch_config(repo_id: str, *, revision: str | None = None, token: str | bool | None = None) -> dict[str, Any]:
    """Download (or read from the Hub cache) `config.json` of `repo_id` and parse it as JSON data.

    `token=None` lets huggingface_hub use HF_TOKEN or the saved login. HF_HUB_OFFLINE=1 serves the
    cache only. The repository's code (auto_map, modeling files) is never downloaded or run.
    """
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HFValidationError,
        HTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    offline = bool(constants.HF_HUB_OFFLINE) or _env_true("HF_HUB_OFFLINE")
    at = f" at revision {revision!r}" if revision else ""
    try:
        path = hf_hub_download(repo_id, "config.json", revision=revision, token=token, local_files_only=offline)
    except GatedRepoError:  # a RepositoryNotFoundError: must come first
        raise ModelNotAvailableError(f"{repo_id} is gated: accept its license on huggingface.co and set HF_TOKEN "
                                     "(or pass the config.json path)") from None
    except RepositoryNotFoundError:
        raise ModelNotAvailableError(f"{repo_id} was not found on the Hub: check the id (private repos need "
                                     "HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise ModelNotAvailableError(f"{repo_id} has no revision {revision!r}: pass an existing branch, tag or "
                                     "commit") from None
    except LocalEntryNotFoundError:  # an EntryNotFoundError: must come first
        how = "HF_HUB_OFFLINE is set" if offline else "the Hub could not be reached"
        raise ModelNotAvailableError(f"{repo_id}/config.json{at} is not in the Hub cache and {how}: connect once, "
                                     "or pass the config.json path") from None
    except EntryNotFoundError:
        raise ConfigError(f"{repo_id}{at} has no config.json (GGUF-only or not a transformers model): pass a "
                          "config.json path") from None
    except HFValidationError as exc:
        raise ModelNotAvailableError(f"{repo_id!r} is not a valid Hub id ({_first_line(exc)}): use org/name") from None
    except (HTTPError, OSError) as exc:  # transport failures, 5xx, proxies
        raise ModelNotAvailableError(f"could not fetch {repo_id} from the Hub ({_first_line(exc)}): retry, or set "
                                     "HF_HUB_OFFLINE=1 to use the cache") from None
    from .library import read_config_file

    return read_config_file(Path(path))


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:160] if text else type(exc).__name__
