"""Issue #24 items 2 and 3: layouts as deployed (TP a power of two dividing the heads inside a node, PP over whole
nodes, EP for MoE), the plain fewest-GPU count beside them, and the fixes vLLM itself would suggest."""

from __future__ import annotations

import json

import pytest

from kvplan.cli import main
from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.gpus import resolve_gpu
from kvplan.planning.layouts import candidate_layouts, deployable, node_size, tp_sizes
from kvplan.planning.planner import plan
from kvplan.planning.search import fixes

H100_BYTES = 85_029_158_912   # torch's total_memory for an H100 80GB HBM3 (79.19 GiB), kvplan/data/gpus.json


def test_deepseek_v3_on_h100s_is_tp8_pp2_over_two_whole_nodes():
    """The issue's case: TP 1 x PP 11 on 11 H100s (three stages on a second node) was the answer; people run
    TP 8 x PP 2. One node cannot hold it at vLLM's 0.92: the whole model's weights are 673,363,472,736 B (the
    config rule, the test_truth figure) and 8 x 0.92 x 85,029,158,912 B = 625,814,609,592 B is less, so two
    whole nodes of 8 are the fewest; the fewest in any layout (11) is shown beside it."""
    assert 673_363_472_736 > 8 * 0.92 * H100_BYTES
    choice = deployable("deepseek-ai/DeepSeek-V3", gpu="H100")
    p = choice.plan
    assert (p.num_gpus, p.tensor_parallel_size, p.pipeline_parallel_size, p.data_parallel_size) == (16, 8, 2, 1)
    assert p.fits and choice.nodes == 2 and choice.gpus_per_node == 8
    assert p.weights_rule_bytes == 673_363_472_736
    beside = choice.summary()["fewest_any_layout"]
    assert beside["num_gpus"] == 11 and beside["layout"] == "TP 1 x PP 11" and beside["nodes"] == 2
    assert any("the fewest GPUs in any layout: 11 (TP 1 x PP 11" in n for n in p.notes)
    # EP where it helps: on the same 16 GPUs TP 2 x DP 8 engines with --enable-expert-parallel hold more, each
    # engine its own pool (the MLA latent replicated over 2 ranks, not 8): shown beside, not chosen
    ep = choice.summary()["expert_parallel_alternative"]
    assert ep["num_gpus"] == 16 and ep["total_concurrency"] > p.max_concurrency
    assert ep["flags"].endswith("--enable-expert-parallel") and choice.expert_parallel.fits
    assert ep["tensor_parallel_size"] * ep["data_parallel_size"] == 16


def test_llama_70b_on_h100s_is_a_tp_that_divides_its_64_heads():
    """Llama-3.1-70B at its 131,072 tokens: TP 1 x PP 3 is the fewest in any layout; the recommendation is one
    node, PP 1, TP a power of two dividing the 64 heads (and the 8 KV heads)."""
    choice = deployable("meta-llama/Llama-3.1-70B", gpu="H100")
    p = choice.plan
    tp = p.tensor_parallel_size
    assert 64 % tp == 0 and tp & (tp - 1) == 0 and 8 % tp == 0
    assert p.pipeline_parallel_size == 1 and p.num_gpus == tp and p.num_gpus <= 8 and p.fits
    assert (tp, choice.nodes) == (4, 1)
    # TP 2 (the next power of two down) does not fit: two GPUs hold 141 GB of bf16 weights at 0.92 of 79.19 GiB
    assert not plan("meta-llama/Llama-3.1-70B", gpu="H100", tp=2).fits
    assert choice.fewest.num_gpus == 3 and choice.fewest.pipeline_parallel_size == 3


def test_tp_sizes_follow_vllms_head_rules():
    """vLLM 0.33 config/model.py verify_with_parallel_config: heads % TP == 0; linear.py QKVParallelLinear: KV heads
    divide TP or TP divides them. Qwen2.5-7B has 28 heads and 4 KV heads: 28 % 8 = 4, so TP 8 is out."""
    assert tp_sizes(load_model("Qwen/Qwen2.5-7B"), 8) == [1, 2, 4]
    assert tp_sizes(load_model("meta-llama/Llama-3.1-70B"), 8) == [1, 2, 4, 8]
    assert tp_sizes(load_model("meta-llama/Llama-3.1-70B"), 4) == [1, 2, 4]


def test_layouts_past_one_node_are_whole_nodes():
    """Past one node every count is a multiple of the node: 16, 24, 32 on nodes of 8; 12, 16 on nodes of 4."""
    llama = load_model("meta-llama/Llama-3.1-70B")
    counts = [c for c, _, _ in candidate_layouts(llama, 8, 32, ep_variants=False)]
    assert counts == [1, 2, 4, 8, 16, 24, 32]
    counts4 = [c for c, _, _ in candidate_layouts(llama, 4, 16, ep_variants=False)]
    assert counts4 == [1, 2, 4, 8, 12, 16]
    # Qwen2.5-7B tops out at TP 4 (28 heads): a node of 8 is TP 4 x PP 2
    qwen = {c: layouts for c, layouts, _ in candidate_layouts(load_model("Qwen/Qwen2.5-7B"), 8, 8, ep_variants=False)}
    assert qwen[8] == [{"tp": 4, "pp": 2}]


def test_node_size_from_the_catalog_and_the_flag():
    assert resolve_gpu("H100").gpus_per_node == 8 and resolve_gpu("T4").gpus_per_node == 8
    assert resolve_gpu("GH200").gpus_per_node == 1
    assert node_size("H100", 4) == 4 and node_size("GH200", None) == 1
    with pytest.raises(WorkloadError):
        node_size("H100", 0)


def test_gpus_per_node_sets_the_node(capsys):
    """Nodes of 4 H100s: DeepSeek-V3 needs 12 (TP 4 x PP 3): 8 x 0.92 x 85,029,158,912 B is under its weights,
    so two nodes of 4 are too few."""
    assert main(["plan", "deepseek-ai/DeepSeek-V3", "--fewest-gpus", "--gpus-per-node", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["num_gpus"], data["tensor_parallel_size"], data["pipeline_parallel_size"]) == (12, 4, 3)
    assert data["layout"]["gpus_per_node"] == 4 and data["layout"]["nodes"] == 3


def test_cli_shows_the_fewest_count_beside_the_layout(capsys):
    assert main(["plan", "deepseek-ai/DeepSeek-V3", "--fewest-gpus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "16 x H100-SXM" in lines[0] and "TP 8 x PP 2" in lines[0]
    assert lines[1].startswith("layout: TP 8 x PP 2 on 16 GPUs (2 nodes of 8)")
    assert lines[2].startswith("fewest GPUs in any layout: 11 (TP 1 x PP 11, 2 nodes")
    assert main(["plan", "deepseek-ai/DeepSeek-V3", "--fewest-gpus", "--any-layout", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["num_gpus"], data["pipeline_parallel_size"]) == (11, 11) and "layout" not in data
    assert main(["plan", "deepseek-ai/DeepSeek-V3", "--any-layout"]) == 2   # it goes with --fewest-gpus


def test_more_gpus_fix_is_a_deployable_layout():
    """DeepSeek-V3 on one node of H100s does not fit; the fix offered is TP 8 x PP 2, not TP 1 x PP 11."""
    found = fixes("deepseek-ai/DeepSeek-V3", gpu="H100", num_gpus=8)
    assert found[0][1] == "--tp 8 --pp 2"
    assert "the fewest in any layout is 11 (TP 1 x PP 11" in found[0][0]


def test_fewer_max_num_seqs_where_activations_bind():
    """gpt-oss-120b at 131,072 tokens on one H100 is short at vLLM's 1,024 sequences; the sampler's profile run
    and buffers scale with max_num_seqs (the V2 sampler buffers: 893,489,152 B at
    1,024 sequences = 1,024 x the 872,548 B of one), so fewer sequences fit. The fix is planned: at 64 it fits, at 128 (the next power of two up) it does not."""
    settings = dict(gpu="H100", max_model_len=131072)
    found = dict((flag, text) for text, flag in fixes("openai/gpt-oss-120b", **settings))
    assert "--max-num-seqs 64" in found and "at most 64 requests run at once" in found["--max-num-seqs 64"]
    assert plan("openai/gpt-oss-120b", max_num_seqs=64, **settings).fits
    assert not plan("openai/gpt-oss-120b", max_num_seqs=128, **settings).fits
    # the higher utilization fix still holds (test_card_dtype pins its margin)
    assert "--gpu-memory-utilization 0.95" in found


def test_fewer_seqs_is_not_offered_where_the_weights_bind():
    """Llama-3.1-405B on one H100: its 812 GB of weights are the problem; fewer sequences free at most the
    sampler's ~1 GiB, no count fits, so no --max-num-seqs fix."""
    found = [flag for _, flag in fixes("meta-llama/Llama-3.1-405B", gpu="H100", max_model_len=8192)]
    assert not any(f.startswith("--max-num-seqs") for f in found)


def test_expert_parallel_only_where_it_helps():
    """A dense model gets no EP layout; a MoE that fits one GPU (Qwen3-30B-A3B on an H100) needs none."""
    assert deployable("meta-llama/Llama-3.1-70B", gpu="H100").expert_parallel is None
    small = deployable("Qwen/Qwen3-30B-A3B", gpu="H100")
    assert small.plan.num_gpus == 1 and small.expert_parallel is None
    ep_counts = {c: ep for c, _, ep in candidate_layouts(load_model("Qwen/Qwen3-235B-A22B"), 8, 8, ep_variants=True)}
    assert ep_counts[8] == [{"tp": t, "pp": 1, "dp": 8 // t, "expert_parallel": True} for t in (1, 2, 4)]


def test_cli_shows_the_expert_parallel_alternative(capsys):
    assert main(["plan", "deepseek-ai/DeepSeek-V3", "--fewest-gpus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3].startswith("expert parallel on the same 16 GPUs: TP ") and "--enable-expert-parallel" in lines[3]
