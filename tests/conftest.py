"""Fixtures shared by the test modules that drive the web app."""

from __future__ import annotations

import pytest


@pytest.fixture
def offline_app(monkeypatch, tmp_path):
    """st.cache_data outlives AppTest instances in one process; the Hub is never reached from tests."""
    import streamlit as st  # only the app's tests pay for the import

    st.cache_data.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    yield
    st.cache_data.clear()
