"""kvplan's error types. Every message is one sentence that says what to do next."""

from __future__ import annotations

import reprlib
from typing import Any

# A message is one line a person reads: past this many characters it keeps its start and its end (what to do)
# around an ellipsis. The values it quotes are cut first, by `shown`; this is the guard for a path or a name that
# was not.
MAX_MESSAGE_CHARS = 1_000


class KVPlanError(Exception):
    """Base class: anything kvplan raises on purpose. The CLI turns it into exit code 2."""

    def __init__(self, message: str = ""):
        super().__init__(bounded(str(message)))


def bounded(text: str) -> str:
    """A message of at most MAX_MESSAGE_CHARS: its start and its end (what to do) around an ellipsis."""
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:700] + "…" + text[-(MAX_MESSAGE_CHARS - 701):]


class ConfigError(KVPlanError):
    """The config.json is malformed or lacks a field that sizes the cache.

    `field` names the missing concept and `flag` the CLI override that supplies it.
    """

    def __init__(self, message: str, *, field: str | None = None, flag: str | None = None):
        super().__init__(message)
        self.field = field
        self.flag = flag


class UnsupportedArchitectureError(ConfigError):
    """The config describes something kvplan cannot size honestly (e.g. an encoder-only model)."""


class ModelNotAvailableError(KVPlanError):
    """The model id could not be resolved: not bundled, not a path, and the Hub said no."""


class WorkloadError(KVPlanError):
    """A workload setting is out of range (negative length, unknown dtype, cache that cannot apply)."""


class PlanInvariantError(KVPlanError):
    """A plan broke a rule every answer keeps (a fraction outside (0, 1], a negative figure, a FITS that does not
    fit): a bug in kvplan, raised instead of returning an impossible answer."""


class _Shown(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        # str() of a 5,000-digit int raises ValueError, and a 400-digit one is no help
        if abs(x) < 10**15:
            return f"{x:,}"
        return f"{'a negative' if x < 0 else 'an'} integer of {x.bit_length():,} bits"


_SHOWN = _Shown()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.fillvalue = 3, 60, 60, "…"
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 6


def shown(value: Any) -> str:
    """A value quoted in a one-line message: its repr cut to about 60 characters with "…", three levels deep at most
    (a 3 MB string in a config gave a 3 MB error line, a list nested 2,000 deep a RecursionError from repr), and a
    huge integer by its size."""
    text = _SHOWN.repr(value)
    return text if len(text) <= 80 else text[:79] + "…"
