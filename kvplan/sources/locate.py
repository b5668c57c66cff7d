"""Finding a model's sources: its config.json (a dict given, a bundled id, a local file or folder, or a Hub id, in
that order) and, beside it, its checkpoint's bytes (the bundled record, the folder's safetensors headers, or the
Hub's). Both come back as data: parsing the config is `kvplan.config`'s, which calls these once per model
(`kvplan.config.load`)."""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import ModelNotAvailableError
from ..model.checkpoint import CheckpointTotal, CheckpointWeights
from .files import QUANT_FILE, read_config_file, with_quant_file
from .library import checkpoint_record, closest_ids, find_bundled

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[\w.\-]{1,96}$")


@dataclass(frozen=True)
class FoundConfig:
    """A config.json as data, the name its model goes by, and where it came from: "dict", "bundled", "hub" or the
    local file's path (`ModelSpec.source`)."""

    data: Mapping[str, Any]
    name: str
    source: str


def find_config(source: str | Path | Mapping[str, Any], revision: str | None = None,
                token: str | bool | None = None, name: str | None = None) -> FoundConfig:
    """The config `source` names, read as data; a ModelNotAvailableError (or ConfigError) saying what to pass
    instead when there is none."""
    if isinstance(source, Mapping):
        return FoundConfig(source, name or "custom", "dict")
    text = str(source).strip()
    if not text:
        raise ModelNotAvailableError("no model given: pass a bundled id (see `kvplan models`), a config.json path "
                                     "or a Hub id")
    bundled = find_bundled(text)
    if bundled:
        _no_revision(revision, f"{bundled[0]} is bundled")
        model_id, path = bundled
        return FoundConfig(read_config_file(path), name or model_id, "bundled")
    path = Path(text).expanduser()
    if _exists(path):
        _no_revision(revision, f"{_shorten(text)} is a local path")
        return _local_config(path, name)
    if _is_loop(path):
        raise ModelNotAvailableError(f"{_shorten(text)} is a symlink loop (its links point at each other): point it "
                                     "at the real config.json or its folder")
    if text.endswith(".json") or text.startswith((".", "/", "~")) or "\\" in text:
        raise ModelNotAvailableError(f"no such file or folder: {_shorten(text)}: check the path")
    if not HUB_ID.match(text):
        raise ModelNotAvailableError(f"{_shorten(text)!r} is not a bundled model, a file or a Hub id like org/name: "
                                     + (f"{closest_ids(text)}; " if closest_ids(text) else "")
                                     + "run `kvplan models` for the bundled ones")
    from .hub import fetch_config

    try:
        data = fetch_config(text, revision=revision, token=token)
    except ModelNotAvailableError as exc:
        near = closest_ids(text)
        if not near:
            raise
        raise ModelNotAvailableError(f"{exc}; {near}") from None
    return FoundConfig(data, name or text, "hub")


def find_checkpoint(found_in: str, source, num_layers: int, hidden: int | None, revision=None, token=None,
                    cache_fallback: bool = True) -> CheckpointWeights | CheckpointTotal | str:
    """The checkpoint beside a config found in `found_in` (`FoundConfig.source`): its header summary or bundled
    record, or a sentence saying there is none to read. `num_layers` and `hidden` place each tensor (a layer past
    the model's is MTP; a norm over the hidden size is replicated)."""
    if isinstance(source, Mapping):
        return "a config given as data has no checkpoint: pass the model's folder or Hub id for its tensor bytes"
    if found_in == "bundled":
        return checkpoint_record(str(source))
    if found_in == "hub":
        from .hub_headers import fetch_checkpoint

        return fetch_checkpoint(str(source).strip(), num_layers, revision=revision, token=token, hidden=hidden,
                                cache_fallback=cache_fallback)
    from .safetensors import read_folder

    folder = Path(found_in).parent
    found = read_folder(folder, num_layers, hidden)
    return found or (f"{folder} holds no .safetensors files: the weights come from the config rule (download the "
                     "checkpoint there for its exact bytes)")


def _no_revision(revision: str | None, what: str) -> None:
    """A revision names a Hub commit: with a bundled id or a path it used to go to the Hub unasked, or be ignored."""
    if revision is not None:
        raise ModelNotAvailableError(f"--revision applies to Hub ids only, and {what}: leave out --revision, or pass "
                                     "the config.json of that revision as a path")


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the file system, an embedded NUL: not a path
        return False


def _is_loop(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    except ValueError:
        return False
    return False


def _shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _local_config(path: Path, name: str | None) -> FoundConfig:
    if path.is_dir():
        candidate = path / "config.json"
        if not candidate.is_file():
            raise ModelNotAvailableError(f"{path} has no config.json: pass the folder that holds the model's "
                                         "config.json, or the file itself")
        path = candidate
    # "./config.json" is named after the folder that holds it, as a Hub id is after its repository
    label = name or (path.resolve().parent.name if path.name == "config.json" else path.stem)
    quant = path.parent / QUANT_FILE  # a checkpoint folder's, as vLLM reads it: beside a config.json only
    data = with_quant_file(read_config_file(path), lambda: read_config_file(quant)
                           if path.name == "config.json" and quant.is_file() else None)
    return FoundConfig(data, label, str(path))
