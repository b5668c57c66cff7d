"""Mamba-2 conv state under tensor parallelism: when TP does not divide n_groups, vLLM and SGLang replicate the
groups so that every rank holds the groups its heads read (vLLM 0.33 model_executor/layers/mamba/mamba_utils.py
`extra_groups_for_head_shards`: tp - n_groups; SGLang 0.5.23 configs/mamba_utils.py `Mamba2StateShape.create`),
and the rank's conv channels are (inner + 2 x (n_groups + extra) x state) / tp."""

from __future__ import annotations

import json

import pytest

from kvplan.config.load import load_model
from kvplan.planning.engines.sglang_layers import state_bytes_per_request
from kvplan.planning.engines.vllm_kv import rank_layer_specs
from kvplan.sources.library import library_dir

NAME = "nvidia/Nemotron-H-56B-Base-8K"   # 256 Mamba heads x 64 = 16,384 inner channels, 8 groups of state 256


def _model(groups: int):
    data = json.loads((library_dir() / (NAME.replace("/", "__", 1) + ".json")).read_text())
    return load_model({**data, "n_groups": groups}, name=f"nemotron-h-56b-{groups}-groups")


def _vllm_state(model, tp: int) -> int:
    (spec,) = {x for x in rank_layer_specs(model, range(model.num_layers), tp, 2, 2) if x.kind == "mamba"}
    return spec.state_bytes


# (groups, tp, the rank's conv channels by the engines' formula); SSM state 256 / tp heads x 64 x 256
CASES = [
    (8, 8, (16_384 + 2 * 8 * 256) // 8),           # 8 groups over 8 ranks: 2,560, nothing replicated
    (8, 16, (16_384 + 2 * (8 + 8) * 256) // 16),   # 8 more groups: 1,536 a rank, not 20,480 // 16 = 1,280
    (1, 2, (16_384 + 2 * (1 + 1) * 256) // 2),     # one group (Falcon-H1, Granite-4.0-H): 8,704, not 8,448
    (1, 1, 16_384 + 2 * 256),                      # TP 1: the config's own width
]


@pytest.mark.parametrize("groups, tp, channels", CASES)
def test_mamba2_groups_replicated_over_tp(groups, tp, channels):
    model = _model(groups)
    ssm = 256 // tp * 64 * 256
    # vLLM: kernel - 1 = 3 conv columns in the model dtype, the SSM state in the model dtype (no mamba_ssm_dtype)
    assert _vllm_state(model, tp) == channels * 3 * 2 + ssm * 2
    # SGLang: conv in bfloat16, the SSM state in float32 by default; 54 Mamba layers
    layers = sum(1 for layer in model.layers for x in layer if x.kind == "state")
    assert layers == 54
    assert state_bytes_per_request(model, range(model.num_layers), tp, (0, 5, 23)) == layers * (
        channels * 3 * 2 + ssm * 4)
