"""kvplan's error types. Every message is one sentence that says what to do next."""

from __future__ import annotations


class KVPlanError(Exception):
    """Base class: anything kvplan raises on purpose. The CLI turns it into exit code 2."""


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
