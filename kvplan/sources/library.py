"""The bundled library: the real config.json files in `model_configs/` and the checkpoint records beside them.

An id resolves the way people write it (`meta-llama/Llama-3.1-8B`, any case, or `Llama-3.1-8B` alone when one
bundled id ends with it); an id kvplan does not bundle is answered with the closest ones it does. A bundled model
needs no network, gated or not. The records in `model_configs/checkpoints/` hold a checkpoint's header summary (or
its total bytes), never its weights (`tools/gen_checkpoint_records.py` writes them).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from ..errors import ConfigError
from ..model.checkpoint import COMPONENTS, DTYPE_BITS, CheckpointTotal, CheckpointWeights, WeightRow, is_usize
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


class PartialCopy(NamedTuple):
    """What a bundled config that is not the Hub file verbatim lacks, and how that moves kvplan's figures
    (`kvplan/data/partial_configs.json`, one entry per row model_configs/SOURCES.md marks partial)."""

    lacks: str
    effect: str
    warn: bool  # True: a figure moves by what `effect` bounds (a warning); False: none moves (a note)

    def sentence(self, model_id: str) -> str:
        return f"the bundled config.json of {model_id} is {self.lacks}, so {self.effect}"


@lru_cache(maxsize=1)
def partial_copies() -> dict[str, PartialCopy]:
    """Bundled id -> its PartialCopy, for the bundled configs that are not verbatim Hub files."""
    path = Path(__file__).resolve().parent.parent / "data" / "partial_configs.json"
    entries = json.loads(path.read_text(encoding="utf-8"))
    return {k: PartialCopy(v["lacks"], v["effect"], v["warn"]) for k, v in entries.items() if not k.startswith("_")}


def partial_copy(model_id: str) -> PartialCopy | None:
    """The PartialCopy of a bundled id (as `find_bundled` spells it), or None for a verbatim copy."""
    return partial_copies().get(model_id)


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
                      r.attention, r.kv] for r in weights.rows]}


def from_record(data: Mapping[str, Any], label: str) -> CheckpointWeights | CheckpointTotal:
    """A bundled record, each field exactly what `record_json` writes (int() made 1.9 a 1 and "7" a 7)."""
    bad = ConfigError(f"{label} is not a kvplan checkpoint record: restore it from the repository")
    if data.get("kind") in ("index", "file_sizes", "quoted", "tensor_table"):
        total, texts = data.get("total_bytes"), [data.get(k, "") for k in ("what", "source", "explained")]
        if not is_usize(total) or not all(isinstance(t, str) for t in texts):
            raise bad
        return CheckpointTotal(total, *texts)
    rows, files = data.get("rows"), data.get("files")
    if not isinstance(rows, list) or not is_usize(files) or not isinstance(data.get("source"), str):
        raise bad
    weights = CheckpointWeights(source=data["source"], rows=tuple(_row(r, bad) for r in rows), files=files)
    if weights.stored_bytes != data.get("stored_bytes"):
        raise ConfigError(f"{label} does not add up to its stored_bytes: restore it from the repository")
    return weights


def _row(row: Any, bad: ConfigError) -> WeightRow:
    """[component, layer, replicated, dtype, castable, tensors, bytes, expert, attention, kv] of `record_json` (a
    record written before the kv flag has 9)."""
    if not isinstance(row, list) or len(row) not in (9, 10):
        raise bad
    component, layer, replicated, dtype, castable, tensors, size, expert, attention, *kv = row
    if component not in COMPONENTS or dtype not in DTYPE_BITS or not (is_usize(layer) or layer == -1) \
            or not all(isinstance(b, bool) for b in (replicated, castable, expert, attention, *kv)) \
            or not (is_usize(tensors) and is_usize(size)):
        raise bad
    return WeightRow(component, layer, replicated, dtype, castable, tensors, size, expert, attention, *kv)
