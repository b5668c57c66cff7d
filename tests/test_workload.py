"""Issue #12 (item 6): capacity at a request mix, the roofline throughput there, and its cost."""

from __future__ import annotations

import json

import pytest

from kvplan.cli import main
from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.planning.engines.vllm import max_concurrency_at
from kvplan.planning.planner import plan
from kvplan.planning.workload import RequestMix, workload_plan

LLAMA70 = "meta-llama/Llama-3.1-70B"


@pytest.fixture(scope="module")
def seventy():
    model = load_model(LLAMA70)
    return model, plan(model, gpu="H100-80GB", num_gpus=4, max_model_len=32768)


def test_llama_70b_on_4_h100_at_a_realistic_mix(seventy):
    """Acceptance: 2,000-token prompts and 500-token outputs on 4 x H100 (TP 4, vLLM 0.33): as many requests at
    once as the pool's blocks hold at cdiv(2,500, 16) = 157 blocks each (vLLM's rule for one full-attention group),
    against num_blocks / cdiv(32,768, 16) at max_model_len; throughput and cost from the roofline at that batch."""
    model, p = seventy
    w = workload_plan(model, p, RequestMix(2000, 500), gpu_price_per_hour=2.99)
    assert w.concurrent_requests == round(p.num_blocks / 157, 4) == round(max_concurrency_at(p, 2500, model), 4)
    # 2,048 = cdiv(32,768, 16) blocks for a max_model_len request
    assert w.limited_by == "KV pool" and p.max_concurrency == round(p.num_blocks / 2048, 4)
    assert 170 < w.concurrent_requests < 190     # a 13.7 GiB pool a rank: the scale the plan's budget gives
    # The roofline by hand, its inputs written out: 70,553,706,496 parameters (transformers' count of
    # Llama-3.1-70B, tests/test_weights.py) x 2 B; 80 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 327,680 B of KV
    # a token; H100 SXM 3.35 TB/s and 989.5 dense bf16 TFLOP/s (data/gpus.json), 4 ranks, mbu 0.7, mfu 0.5.
    batch = int(w.concurrent_requests)
    assert batch == 179
    step_s = (70_553_706_496 * 2 + 327_680 * 2500 * batch) / (3.35e12 * 4 * 0.7)     # one decode step, 179 reads
    assert w.output_tokens_per_s == pytest.approx(batch / step_s) == pytest.approx(5835.11, abs=0.01)
    assert w.requests_per_s == pytest.approx(w.output_tokens_per_s / 500)
    assert w.cost_per_million_output_tokens == pytest.approx(4 * 2.99 / (w.output_tokens_per_s * 3600) * 1e6)
    # TTFT of one 2,000-token prompt: 2 x params x 2,000 + attention 80 x 2 x 64 heads x (128 + 128) x 2,000^2 / 2
    prefill = 2 * 70_553_706_496 * 2000 + 80 * 2 * 64 * 256 * 2000 * 2000 // 2
    assert w.ttft_s == pytest.approx(prefill / (989.5e12 * 4 * 0.5)) == pytest.approx(0.14525, abs=1e-5)
    assert len(w.formula) == 4 and w.formula[-1].startswith("cost per 1M output tokens = 4 GPUs x $2.99")
    assert any("upper bound" in n for n in w.notes)


def test_p95_and_the_seat_limit(seventy):
    model, p = seventy
    w = workload_plan(model, p, RequestMix(2000, 500, prompt_p95=8000, output_p95=1500))
    # p95 context 8,000 + 1,500
    assert w.p95_context == 9500 and w.concurrent_requests_p95 == round(max_concurrency_at(p, 9500, model), 4)
    short = workload_plan(model, p, RequestMix(10, 10))
    assert short.concurrent_requests == p.max_num_seqs and short.limited_by == "max_num_seqs"


def test_sglang_dp_and_refusals(seventy):
    model, p = seventy
    sgl = plan(model, engine="sglang", gpu="H100-80GB", num_gpus=4, max_model_len=32768)
    w = workload_plan(model, sgl, RequestMix(2000, 500))
    assert w.concurrent_requests == round(min(sgl.kv_cache_tokens / 2500, sgl.max_num_seqs), 4)
    one = plan("Qwen/Qwen3-30B-A3B", gpu="H100-80GB", max_model_len=32768)
    two = plan("Qwen/Qwen3-30B-A3B", gpu="H100-80GB", max_model_len=32768, dp=2, expert_parallel=True)
    qwen = load_model("Qwen/Qwen3-30B-A3B")
    rate1 = workload_plan(qwen, one, RequestMix(1000, 200)).output_tokens_per_s
    rate2 = workload_plan(qwen, two, RequestMix(1000, 200)).output_tokens_per_s
    assert rate2 > 1.5 * rate1                                         # two engines
    with pytest.raises(WorkloadError, match="longer than the plan's context"):
        workload_plan(model, p, RequestMix(30000, 5000))
    with pytest.raises(WorkloadError, match="does not fit"):
        workload_plan(model, plan(model, gpu="H100-80GB", max_model_len=32768), RequestMix(100, 100))
    with pytest.raises(WorkloadError, match="p95 prompt is shorter"):
        RequestMix(2000, 500, prompt_p95=100)
    with pytest.raises(WorkloadError, match="GPU price"):
        workload_plan(model, p, RequestMix(100, 100), gpu_price_per_hour=-1)
    with pytest.raises(WorkloadError, match="output mean"):
        RequestMix(100, 0)


def test_cli_workload_lines_and_json(capsys):
    args = ["plan", LLAMA70, "--gpu", "H100-80GB", "--num-gpus", "4", "--max-model-len", "32768",
            "--prompt-mean", "2000", "--output-mean", "500", "--gpu-price", "2.99"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "workload: 2,000 prompt + 500 output tokens per request" in out
    p = plan(LLAMA70, gpu="H100-80GB", num_gpus=4, max_model_len=32768)
    concurrent = round(p.num_blocks / 157, 4)    # cdiv(2,500, 16) blocks a request
    assert f"concurrent requests  {concurrent:,.2f} (limited by the KV pool)" in out and "per million output tokens" in out
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"]["concurrent_requests"] == concurrent and data["workload"]["gpu_price_per_hour"] == 2.99
    assert main(["plan", LLAMA70, "--prompt-mean", "100"]) == 2
    assert "needs both --prompt-mean and --output-mean" in capsys.readouterr().err
    assert main(["plan", LLAMA70, "--gpu-price", "2"]) == 2
    assert "--gpu-price prices a workload" in capsys.readouterr().err
