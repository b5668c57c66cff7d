"""The bundled library: the real config.json files in `model_configs/` and the checkpoint records beside them.

An id resolves the way people write it (`meta-llama/Llama-3.1-8B`, any case, or `Llama-3.1-8B` alone when one
bundled id ends with it); an id kvplan does not bundle is answered with the closest ones it does. A bundled model
needs no network, gated or not. The records in `model_configs/checkpoints/` hold a checkpoint's header summary (or
its total bytes), never its weights (`tools/gen_checkpoint_records.py` writes them).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..errors import ConfigError
from ..model.checkpoint import DTYPE_BITS, CheckpointTotal, CheckpointWeights, WeightRow
from .files import read_config_file


def library_dir() -> Path:
    """The bundled `model_configs/`: package data `kvplan/model_configs/` when installed from a wheel, the
    repository's top-level folder in a checkout or an editable install (one copy; pyproject maps it)."""
    package = Path(__file__).resolve().parent.parent
    installed = package / "model_configs"
    return installed if installed.is_dir() else package.parent / "model_configs"


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


def find_bundled(name: str) -> tuple[str, Path] | None:
    """(the bundled id, its config.json) for a name, or None when kvplan does not bundle it."""
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


def closest_ids(text: str) -> str:
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


def checkpoint_record(name: str) -> CheckpointWeights | CheckpointTotal | str:
    """The bundled record of a bundled model's checkpoint, or the sentence saying kvplan bundles none."""
    model_id, config_path = find_bundled(name)
    path = config_path.parent / "checkpoints" / config_path.name
    if not path.is_file():
        return (f"kvplan bundles no checkpoint record for {model_id} (model_configs/checkpoints/README.md says "
                "why): the weights come from the config rule; pass the downloaded checkpoint folder for its "
                "exact bytes")
    return from_record(read_config_file(path), str(path))


def record_json(weights: CheckpointWeights) -> dict[str, Any]:
    """The bundled record: the header summary, no weights."""
    return {"source": weights.source, "files": weights.files, "stored_bytes": weights.stored_bytes,
            "rows": [[r.component, r.layer, r.replicated, r.dtype, r.castable, r.tensors, r.bytes, r.expert,
                      r.attention] for r in weights.rows]}


def from_record(data: Mapping[str, Any], label: str) -> CheckpointWeights | CheckpointTotal:
    if data.get("kind") in ("index", "file_sizes", "quoted"):
        try:
            return CheckpointTotal(int(data["total_bytes"]), str(data["what"]), str(data["source"]),
                                   str(data.get("explained", "")))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{label} is not a kvplan checkpoint record: restore it from the repository") from None
    try:
        rows = tuple(WeightRow(str(c), int(l), bool(rep), str(d), bool(cast), int(n), int(b),
                               bool(rest[0]) if rest else False, bool(rest[1]) if len(rest) > 1 else False)
                     for c, l, rep, d, cast, n, b, *rest in data["rows"])
        weights = CheckpointWeights(source=str(data["source"]), rows=rows, files=int(data["files"]))
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{label} is not a kvplan checkpoint record: restore it from the repository") from None
    if weights.stored_bytes != data.get("stored_bytes") or any(r.dtype not in DTYPE_BITS for r in rows):
        raise ConfigError(f"{label} does not add up to its stored_bytes: restore it from the repository")
    return weights

