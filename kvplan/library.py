"""Where a model's config comes from: the bundled library, a local file or folder, or the Hub."""

from __future__ import annotations

import dataclasses
import errno
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from .config import Overrides, parse_config
from .config_file import MAX_CONFIG_BYTES, parse_json_bytes, read_config_file
from .errors import ModelNotAvailableError
from .model import ModelSpec

# the config-file reader lives in kvplan.config_file (kvplan.hub uses it too); its names stay importable from here
__all__ = ["HUB_ID", "MAX_CONFIG_BYTES", "bundled_ids", "bundled_index", "library_dir", "load_model",
           "parse_json_bytes", "read_config_file", "with_checkpoint"]

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[\w.\-]{1,96}$")


def library_dir() -> Path:
    """The bundled `model_configs/`: package data `kvplan/model_configs/` when installed from a wheel, the
    repository's top-level folder in a checkout or an editable install (one copy; pyproject maps it)."""
    here = Path(__file__).resolve().parent
    installed = here / "model_configs"
    return installed if installed.is_dir() else here.parent / "model_configs"


@lru_cache(maxsize=1)
def bundled_index() -> dict[str, Path]:
    """Lower-cased HF id -> file. `meta-llama__Llama-3.1-8B.json` is `meta-llama/Llama-3.1-8B`."""
    index = {}
    for path in sorted(library_dir().glob("*.json")):
        index[path.stem.replace("__", "/", 1).lower()] = path
    return index


def bundled_ids() -> list[str]:
    """The bundled model ids, with their Hub capitalisation."""
    return [path.stem.replace("__", "/", 1) for path in bundled_index().values()]


def _find_bundled(name: str) -> tuple[str, Path] | None:
    index = bundled_index()
    key = name.strip().lower()
    if key in index:
        path = index[key]
        return path.stem.replace("__", "/", 1), path
    if "/" not in key:  # "Llama-3.1-8B" alone, when exactly one bundled id ends with it
        matches = [p for k, p in index.items() if k.split("/", 1)[1] == key]
        if len(matches) == 1:
            return matches[0].stem.replace("__", "/", 1), matches[0]
    return None




def load_model(
    source: str | Path | Mapping[str, Any],
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    overrides: Overrides | None = None,
    name: str | None = None,
    weights: str = "auto",
) -> ModelSpec:
    """Resolve `source` to a ModelSpec.

    Order: a config dict; a bundled model id (no network, works for gated models); a path to a
    config.json or a folder holding one; otherwise a Hub id fetched with `huggingface_hub`
    (`revision`, `token`, `HF_TOKEN`, `HF_HUB_OFFLINE` and the Hub cache honoured).

    `weights`: "auto" attaches the checkpoint's own tensor bytes where they can be read (the bundled record,
    the safetensors headers in the folder, or on the Hub) and says why not in `checkpoint_note`; "checkpoint"
    makes their absence an error; "config" never looks (the config rule only).
    """
    if weights not in WEIGHT_SOURCES:
        raise ModelNotAvailableError(f"unknown weights source {weights!r}: use one of {', '.join(WEIGHT_SOURCES)}")
    model = _load_config(source, revision, token, overrides, name)
    if weights == "config" or (isinstance(source, Mapping) and weights == "auto"):
        return model
    if overrides is not None and any(v is not None for v in dataclasses.astuple(overrides)):
        why = "the overrides change the model's sizes, so its checkpoint's bytes do not apply"
        if weights == "checkpoint":
            raise ModelNotAvailableError(f"{why}, and weights from the checkpoint were asked for: drop the overrides")
        return dataclasses.replace(model, checkpoint_note=f"{why}: the weights come from the config rule")
    return with_checkpoint(model, source, revision, token, weights == "checkpoint")


def with_checkpoint(model: ModelSpec, source, revision=None, token=None, required: bool = False,
                    cache_fallback: bool = True) -> ModelSpec:
    """The model with its checkpoint summary, or (not `required`) with the one-line reason there is none.
    `cache_fallback=False` (the shared web app): Hub headers only with the Hub's yes for this token."""
    from . import checkpoint
    from .errors import KVPlanError

    try:
        found = _find_checkpoint(model, source, revision, token, cache_fallback)
    except KVPlanError as exc:
        if required:
            raise
        return dataclasses.replace(model, checkpoint_note=str(exc))
    if isinstance(found, str):
        if required:
            raise ModelNotAvailableError(found)
        return dataclasses.replace(model, checkpoint_note=found)
    if isinstance(found, checkpoint.CheckpointTotal):  # a total, no tensors: the rule keeps the per-GPU shares
        if required:
            raise ModelNotAvailableError(f"kvplan's record of {model.name}'s checkpoint holds its total bytes only "
                                         f"({found.what}): pass the downloaded checkpoint folder for its tensors")
        return dataclasses.replace(model, checkpoint_total=found, checkpoint_note=(
            f"kvplan bundles the checkpoint's total, not its tensors: {found.total_bytes:,} B ({found.what}; "
            f"{found.source})"))
    return dataclasses.replace(model, checkpoint=found)


def _find_checkpoint(model: ModelSpec, source, revision, token, cache_fallback: bool = True):
    """A CheckpointWeights, or a sentence saying there is none to read."""
    from . import checkpoint

    layers = len(model.arch.layers) if model.arch is not None else model.num_layers
    hidden = model.arch.hidden if model.arch is not None else None
    if isinstance(source, Mapping):
        return "a config given as data has no checkpoint: pass the model's folder or Hub id for its tensor bytes"
    if model.source == "bundled":
        model_id, config_path = _find_bundled(str(source))
        path = config_path.parent / "checkpoints" / config_path.name
        if not path.is_file():
            return (f"kvplan bundles no checkpoint record for {model_id} (model_configs/checkpoints/README.md says "
                    "why): the weights come from the config rule; pass the downloaded checkpoint folder for its "
                    "exact bytes")
        return checkpoint.from_record(read_config_file(path), str(path))
    if model.source == "hub":
        from .hub_weights import fetch_checkpoint

        return fetch_checkpoint(str(source).strip(), layers, revision=revision, token=token, hidden=hidden,
                                cache_fallback=cache_fallback)
    folder = Path(model.source).parent
    found = checkpoint.read_folder(folder, layers, hidden)
    return found or (f"{folder} holds no .safetensors files: the weights come from the config rule (download the "
                     "checkpoint there for its exact bytes)")


WEIGHT_SOURCES = ("auto", "checkpoint", "config")


def _load_config(source, revision, token, overrides, name) -> ModelSpec:
    if isinstance(source, Mapping):
        return parse_config(source, name=name or "custom", source="dict", overrides=overrides)
    text = str(source).strip()
    if not text:
        raise ModelNotAvailableError("no model given: pass a bundled id (see `kvplan models`), a config.json path "
                                     "or a Hub id")
    bundled = _find_bundled(text)
    if bundled:
        _no_revision(revision, f"{bundled[0]} is bundled")
        model_id, path = bundled
        return parse_config(read_config_file(path), name=name or model_id, source="bundled", overrides=overrides)
    path = Path(text).expanduser()
    if _exists(path):
        _no_revision(revision, f"{_shorten(text)} is a local path")
        return _load_path(path, name, overrides)
    if _is_loop(path):
        raise ModelNotAvailableError(f"{_shorten(text)} is a symlink loop (its links point at each other): point it "
                                     "at the real config.json or its folder")
    if text.endswith(".json") or text.startswith((".", "/", "~")) or "\\" in text:
        raise ModelNotAvailableError(f"no such file or folder: {_shorten(text)}: check the path")
    if not HUB_ID.match(text):
        raise ModelNotAvailableError(f"{_shorten(text)!r} is not a bundled model, a file or a Hub id like org/name: "
                                     + (f"{_closest(text)}; " if _closest(text) else "")
                                     + "run `kvplan models` for the bundled ones")
    from .hub import fetch_config

    try:
        data = fetch_config(text, revision=revision, token=token)
    except ModelNotAvailableError as exc:
        near = _closest(text)
        if not near:
            raise
        raise ModelNotAvailableError(f"{exc}; {near}") from None
    return parse_config(data, name=name or text, source="hub", overrides=overrides)


def _closest(text: str) -> str:
    """The bundled ids a mistyped or unbundled name is closest to ('Llama-3.1-8B-Instruct' -> meta-llama/Llama-3.1-8B;
    'meta-llama/Lama-3.1-8B' -> the same), as a clause; '' when none is near."""
    import difflib

    ids = bundled_ids()
    lowered = {i.lower(): i for i in ids}
    key = text.strip().lower()
    names = {i.split("/", 1)[-1].lower(): i for i in ids}
    tail = key.split("/", 1)[-1]
    found = sorted((i for n, i in names.items() if len(n) >= 6 and tail.startswith(n)), key=len, reverse=True)
    found += difflib.get_close_matches(key, list(lowered), n=3, cutoff=0.8)
    found += [names[n] for n in difflib.get_close_matches(tail, list(names), n=3, cutoff=0.75)]
    unique = list(dict.fromkeys(lowered.get(f, f) for f in found))[:3]
    return f"bundled ids close to it: {', '.join(unique)}" if unique else ""


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


def _load_path(path: Path, name: str | None, overrides: Overrides | None) -> ModelSpec:
    if path.is_dir():
        candidate = path / "config.json"
        if not candidate.is_file():
            raise ModelNotAvailableError(f"{path} has no config.json: pass the folder that holds the model's "
                                         "config.json, or the file itself")
        path = candidate
    # "./config.json" is named after the folder that holds it, as a Hub id is after its repository
    label = name or (path.resolve().parent.name if path.name == "config.json" else path.stem)
    return parse_config(read_config_file(path), name=label, source=str(path), overrides=overrides)
