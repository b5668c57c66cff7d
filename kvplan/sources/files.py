"""Reading a config.json as data, and nothing else: a size cap, regular files only, JSON only (no code, no
pickle), text that any UTF-8 output can hold. The one reader for bundled files, local paths, uploads and the Hub
(`library`, `locate` and `hub` all use it; `kvplan.config.reader` checks a dict given directly the same way)."""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import ConfigError

MAX_CONFIG_BYTES = 4 * 2**20  # real config.json files are < 100 KB; refuse anything absurd before parsing


@dataclass(frozen=True)
class JsonKind:
    """What a JSON file is to kvplan: its cap, its name in a message, and what to do when it is refused."""

    max_bytes: int
    noun: str
    advice: str


CONFIG = JsonKind(MAX_CONFIG_BYTES, "a config.json", "pass the model's config.json")
# DeepSeek-V3's index names 91,000 tensors in 9 MB, an int4 Kimi-K2's about 20 MB: a 60 MB index is no index
INDEX = JsonKind(32 * 2**20, "a safetensors index", "re-download it, or pass the config.json alone")


# ModelOpt 0.29 and before (nvidia/Qwen3-235B-A22B-NVFP4, nvidia/DeepSeek-V3.1-NVFP4, ...) write the quantization
# to this file beside config.json, none in config.json; vLLM reads it when config.json has no quantization_config
# (0.27.1 transformers_utils/config.py), so its weights are NVFP4 and its kv_cache_quant_algo counts
QUANT_FILE = "hf_quant_config.json"


def with_quant_file(data: dict[str, Any], read: Any) -> dict[str, Any]:
    """`data` with the checkpoint's hf_quant_config.json as its quantization_config, as vLLM reads it: only when
    config.json has none (absent or null). `read()` gives the file's data, or None where there is no such file."""
    if data.get("quantization_config") is not None:
        return data
    quant = read()
    return data if quant is None else {**data, "quantization_config": quant}


def read_config_file(path: Path, kind: JsonKind = CONFIG) -> dict[str, Any]:
    """Parse a config.json (or another JSON file of `kind`) as JSON data only (no code, no pickle), with a size cap.

    Regular files only: a named pipe would block until a writer came, `/dev/zero` never ends. The file is opened
    without blocking, checked with fstat, and read for at most `kind.max_bytes` + 1 bytes whatever it claims.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise _unreadable(path, exc) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise ConfigError(f"{path} is a folder: pass the config.json inside it")
        raise ConfigError(f"{path} is not a regular file (a pipe, socket or device): {kind.advice}")
    with os.fdopen(fd, "rb") as f:
        try:
            raw = f.read(kind.max_bytes + 1)
        except OSError as exc:
            raise _unreadable(path, exc) from None
    return parse_json_bytes(raw, str(path), kind)


def _unreadable(path: Path, exc: OSError) -> ConfigError:
    if exc.errno == errno.ELOOP:
        return ConfigError(f"{path} is a symlink loop (its links point at each other): point it at the real "
                           "config.json")
    if exc.errno == errno.EISDIR:
        return ConfigError(f"{path} is a folder: pass the config.json inside it")
    return ConfigError(f"cannot read {path} ({exc.strerror or exc}): check the path and its permissions")


def parse_json_bytes(raw: bytes, label: str, kind: JsonKind = CONFIG) -> dict[str, Any]:
    if len(raw) > kind.max_bytes:
        raise ConfigError(f"{label} is larger than {kind.max_bytes:,} bytes, too large for {kind.noun}: "
                          f"{kind.advice}")
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise ConfigError(f"{label} is not UTF-8 text: {kind.advice}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{label} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
                          f"{kind.advice}") from None
    except RecursionError:
        raise ConfigError(f"{label} is nested too deeply to be {kind.noun}: {kind.advice}") from None
    except ValueError:  # an integer literal over Python's 4,300-digit limit
        raise ConfigError(f"{label} holds a number too long to parse: {kind.advice}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{label} holds a JSON {type(data).__name__}, not an object: {kind.advice}")
    check_text(data, label)
    return data


def check_text(data: Any, label: str = "the config") -> None:
    """Refuse text no UTF-8 output can hold: JSON's "\\ud800" escape decodes to a lone surrogate, which reached
    every face (a name, a note, a warning) and raised UnicodeEncodeError when printed or dumped as JSON."""
    stack = [(None, data)]
    while stack:  # a loop, not recursion: a dict built in Python may nest deeper than the stack
        key, value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((k if key is None else key, v) for k, v in value.items())
            stack.extend((k if key is None else key, k) for k in value)
        elif isinstance(value, (list, tuple)):
            stack.extend((key, v) for v in value)
        elif isinstance(value, str) and not value.isascii() and not is_utf8(value):
            where = f"field {str(key)[:40]!r}" if isinstance(key, str) and is_utf8(key) else "a field name"
            raise ConfigError(f"{label} holds text that is not valid Unicode in {where} (a lone surrogate such as "
                              "\\ud800): fix the config.json")


def is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
