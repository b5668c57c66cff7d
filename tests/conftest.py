"""Fixtures shared by the test modules that drive the web app, and the mutation runs' fresh caches."""

from __future__ import annotations

import os
import sys

import pytest


def _kept_size(cached) -> int | None:
    """An lru_cache's maxsize (None where the object with a cache_clear is not functools')."""
    parameters = getattr(cached, "cache_parameters", None)
    return parameters().get("maxsize") if callable(parameters) else None


@pytest.fixture(autouse=True)
def _fresh_caches_under_mutmut():
    """Under mutmut (tools/mutation.py; it sets MUTANT_UNDER_TEST) every kvplan lru_cache starts each test empty.
    mutmut 3.8.1 runs a mutant only against the tests that reached its function in the clean "stats" run
    (mutation/trampoline.py record_trampoline_hit), in a fork of the process that run filled the caches in: behind a
    cached caller, vllm_cudagraph.capture_sizes (lru_cache), `_grid` was reached by the first test alone, and its
    mutant x__grid__mutmut_3 (1, 2, 4 -> 2, 2, 4) stayed alive though tests/test_mut_vllm_plan kills it applied by hand.
    The tables read once from kvplan/data (lru_cache(maxsize=1): gpus.json, the conformance record, the traits) are
    kept: they are files, not results of a mutated module, and reloading them each test only slowed the shards.
    Outside mutmut nothing is cleared: the suite runs as users' processes do."""
    if "MUTANT_UNDER_TEST" in os.environ:
        for name, module in list(sys.modules.items()):
            if name == "kvplan" or name.startswith("kvplan."):
                for obj in list(vars(module).values()):
                    if callable(getattr(obj, "cache_clear", None)) and _kept_size(obj) != 1:
                        obj.cache_clear()
    yield


@pytest.fixture
def offline_app(monkeypatch, tmp_path):
    """st.cache_data outlives AppTest instances in one process; the Hub is never reached from tests."""
    import streamlit as st  # only the app's tests pay for the import

    st.cache_data.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    yield
    st.cache_data.clear()
