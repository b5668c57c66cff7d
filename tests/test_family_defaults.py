"""kvplan/data/family_defaults.json is transformers' own config-class defaults, as tools/gen_family_defaults.py
reads them: kvplan fills an absent config.json key the way transformers would (MistralConfig: sliding_window 4096).
A stale or hand-edited entry fails here, per model type."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import gen_family_defaults

STORED = json.loads((REPO / "kvplan" / "data" / "family_defaults.json").read_text())


def test_written_by_the_installed_transformers():
    transformers = pytest.importorskip("transformers")
    assert STORED["_transformers_version"] == transformers.__version__


def test_every_listed_family_is_stored():
    from transformers import CONFIG_MAPPING

    assert {t for t in gen_family_defaults.MODEL_TYPES if t in CONFIG_MAPPING} == set(STORED) - {"_transformers_version"}


@pytest.mark.parametrize("model_type", sorted(set(STORED) - {"_transformers_version"}))
def test_defaults_equal_transformers(model_type):
    assert STORED[model_type] == gen_family_defaults.defaults_for(model_type)


def test_mistral_window_default_is_transformers_4096():
    # the case the table exists for: Mistral-7B-v0.1's config.json has "sliding_window": 4096 written out, but a
    # config without it gets MistralConfig's default, which kvplan must apply too
    assert STORED["mistral"]["sliding_window"] == 4096
