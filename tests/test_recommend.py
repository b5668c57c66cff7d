"""Issue #24 item 4: `kvplan recommend`, the cheapest catalog setup for a workload, checked by brute force: every
priced catalog GPU, every TP x PP up to two nodes, every batch cap, every replica count, with the step and prefill
times from `plan_speed` (the roofline the Capacity page shows) rather than recommend's own linear terms."""

from __future__ import annotations

import json
from math import ceil

import pytest

import kvplan
from kvplan.cli import main
from kvplan.config.load import load_model
from kvplan.errors import WorkloadError
from kvplan.gpus import list_gpus
from kvplan.planning.planner import plan
from kvplan.planning.recommend import recommend
from kvplan.planning.speed import plan_speed
from kvplan.planning.workload import RequestMix, _held

LLAMA = "meta-llama/Llama-3.1-8B"
# inputs: 2,000-token prompts, 500-token outputs
MIX = RequestMix(2000, 500)


def _brute_force(model, mix: RequestMix, rate: float, tpot_s: float | None, ttft_s: float | None,
                 layouts) -> tuple[float, str]:
    """The cheapest (USD per hour, setup) over every priced GPU and layout, by the rules written out here:
    rate(b) = b / (O x step(b) + b x prefill), TPOT(b) = step(b) + b x prefill / O, replicas = ceil(rate / rate(b)).
    Both grow with b (step(b) does), so the best cap of a layout is the largest whose TPOT meets the target: found
    by bisection over 1..the KV pool's and max_num_seqs' bound."""
    best = (float("inf"), "")
    length = 3072   # 2,500 tokens rounded up to 1,024, as recommend's default
    for gpu in (g for g in list_gpus() if g.price_per_hour is not None):
        for tp, pp in layouts:
            try:
                p = plan(model, gpu=gpu, tp=tp, pp=pp, max_model_len=length)
            except WorkloadError:
                continue
            if not p.fits:
                continue
            prefill = plan_speed(model, p, mix.prompt_mean, 1, context_len=mix.mean_context).ttft_s
            if ttft_s is not None and prefill > ttft_s:
                continue

            def tpot(b):
                step = plan_speed(model, p, mix.prompt_mean, b, context_len=mix.mean_context).time_per_output_token_s
                return step, step + b * prefill / mix.output_mean

            low, high = 0, min(int(_held(model, p, mix.mean_context)), p.max_num_seqs)
            while low < high:   # the largest b with TPOT(b) within the target
                mid = (low + high + 1) // 2
                if tpot_s is None or tpot(mid)[1] <= tpot_s:
                    low = mid
                else:
                    high = mid - 1
            if low < 1:
                continue
            step = tpot(low)[0]
            per_replica = low / (mix.output_mean * step + low * prefill)
            cost = ceil(rate / per_replica - 1e-9) * p.num_gpus * gpu.price_per_hour
            best = min(best, (round(cost, 6), f"{gpu.name} TP {tp} x PP {pp} b {low}"))
    return best


DEPLOYABLE = [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2)]
ANY = [(tp, pp) for tp in (1, 2, 4, 8) for pp in (1, 2, 3, 4) if tp * pp <= 16]


@pytest.mark.parametrize("tpot_s, ttft_s", [
    (None, None),      # the acceptance command: no latency target
    (0.030, 0.200),    # a chat target: the batch cap binds on every GPU
])
def test_no_cheaper_catalog_setup_meets_the_targets(tpot_s, ttft_s):
    model = load_model(LLAMA)
    found = recommend(model, MIX, 10, tpot_s=tpot_s, ttft_s=ttft_s)
    best = found.cheapest[0]
    cost, where = _brute_force(model, MIX, 10, tpot_s, ttft_s, DEPLOYABLE)
    assert best.cost_per_hour == pytest.approx(cost, abs=1e-6), where
    # over every TP x PP, deployable or not: nothing cheaper either (extra stages never lower the step time)
    any_cost, any_where = _brute_force(model, MIX, 10, tpot_s, ttft_s, ANY)
    assert best.cost_per_hour <= any_cost + 1e-6, any_where
    assert (tpot_s is None or best.tpot_s <= tpot_s) and (ttft_s is None or best.ttft_s <= ttft_s)
    assert best.requests_per_s >= 10


def test_cli_acceptance_command(capsys):
    """`kvplan recommend meta-llama/Llama-3.1-8B --prompt-mean 2000 --output-mean 500 --rate 10 --json`: the
    cheapest setup over the catalog with its plan, command and cost (its speed: benchmarks/bench_recommend.py)."""
    code = main(["recommend", LLAMA, "--prompt-mean", "2000", "--output-mean", "500", "--rate", "10", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    best = data["cheapest"][0]
    assert best["cost_per_hour"] == pytest.approx(best["replicas"] * best["gpus_per_replica"]
                                                  * best["price_per_gpu_hour"])
    # $ per 1M output tokens: 10 requests/s x 500 tokens = 5,000 tokens/s = 18,000,000 an hour
    assert best["cost_per_million_output_tokens"] == pytest.approx(best["cost_per_hour"] / 18)
    assert best["command"].startswith(f"vllm serve {LLAMA} --tensor-parallel-size {best['tensor_parallel_size']}")
    assert f"--max-num-seqs {best['max_num_seqs']}" in best["command"]
    assert best["plan"]["kv_pool_bytes"] > 0 and best["plan"]["kvplan_command"].startswith("kvplan plan ")
    assert data["searched"]["gpus"] == len(list_gpus())
    assert data["pareto"][0]["cost_per_hour"] == best["cost_per_hour"]
    costs = [s["cost_per_hour"] for s in data["pareto"]]
    latencies = [s["e2e_latency_s"] for s in data["pareto"]]
    assert costs == sorted(costs) and latencies == sorted(latencies, reverse=True)


def test_the_plan_of_the_answer_is_its_command():
    """The setup's kvplan command re-plans to the figures it carries (the re-plan at its batch cap)."""
    best = recommend(LLAMA, MIX, 10).cheapest[0]
    p = plan(LLAMA, gpu=best.gpu, tp=best.tensor_parallel_size, pp=best.pipeline_parallel_size,
             max_model_len=best.max_model_len, max_num_seqs=best.max_num_seqs)
    assert p.fits and p.kv_pool_bytes == best.plan["kv_pool_bytes"]
    assert p.vllm_command in best.command


def test_a_gpu_without_a_price_is_shown_without_cost_or_priced_when_given():
    found = recommend(LLAMA, MIX, 10, gpus=["L40S", "H100"])
    assert [s.gpu for s in found.unpriced] == ["L40S"] and found.unpriced[0].cost_per_hour is None
    assert [s.gpu for s in found.cheapest] == ["H100-SXM"]
    priced = recommend(LLAMA, MIX, 10, gpus=["L40S"], prices={"L40S": 0.5})
    assert priced.cheapest[0].gpu == "L40S" and priced.cheapest[0].price_source == "given"
    assert priced.cheapest[0].cost_per_hour == pytest.approx(priced.cheapest[0].total_gpus * 0.5)


def test_the_h200_nvl_has_no_price_so_it_is_listed_without_cost():
    """The H200 NVL holds what an H200 holds (the same 139.80 GiB) but no price list kvplan reads has it: it is among
    the unpriced GPUs, its setup shown without cost, until a price is given."""
    found = recommend(LLAMA, MIX, 10, gpus=["H200 NVL", "H200"])
    assert [s.gpu for s in found.unpriced] == ["H200-NVL"] and found.unpriced[0].cost_per_hour is None
    assert found.unpriced[0].price_source == "no price: give one per GPU-hour"
    assert [s.gpu for s in found.cheapest] == ["H200"] and found.cheapest[0].price_per_gpu_hour == 3.99
    priced = recommend(LLAMA, MIX, 10, gpus=["H200 NVL"], prices={"H200NVL": 2.0})
    assert priced.unpriced == [] and priced.cheapest[0].gpu == "H200-NVL"
    assert priced.cheapest[0].cost_per_hour == pytest.approx(priced.cheapest[0].total_gpus * 2.0)


def test_budget_and_targets_filter():
    cheap = recommend(LLAMA, MIX, 10).cheapest[0]
    assert recommend(LLAMA, MIX, 10, budget_per_hour=cheap.cost_per_hour - 0.01).cheapest == []
    # a TPOT no GPU can meet at batch 1: Llama-3.1-8B reads 16 GB a step, B200's 8 TB/s x 0.7 x TP 8 is 0.36 ms
    assert recommend(LLAMA, MIX, 10, tpot_s=0.0001).cheapest == []


def test_moe_on_h100s_uses_whole_nodes():
    """DeepSeek-V3 at 2,000 + 500 on H100s: one node cannot hold it (test_layouts), so a replica is two whole
    nodes: TP 8 x PP 2, or TP x DP engines with EP over the 16 GPUs."""
    found = recommend("deepseek-ai/DeepSeek-V3", MIX, 1, gpus=["H100"])
    best = found.cheapest[0]
    assert best.gpus_per_replica == 16 and best.nodes_per_replica == 2
    assert best.tensor_parallel_size * best.pipeline_parallel_size * best.data_parallel_size == 16


@pytest.mark.parametrize("argv, fragment", [
    (["--rate", "0"], "request rate must be a positive"),
    (["--rate", "10", "--gpu-price", "H100"], "GPU=USD"),
    (["--rate", "10", "--gpu-price", "Z9000=1"], "Z9000"),
    (["--rate", "10", "--gpu-price", "H100=0"], "GPU price must be"),
    (["--rate", "10", "--gpus", "Z9000"], "Z9000"),
    (["--rate", "10", "--top", "0"], "--top"),
])
def test_cli_bad_input_is_one_line(capsys, argv, fragment):
    code = main(["recommend", LLAMA, "--prompt-mean", "2000", "--output-mean", "500", *argv])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and err.count("\n") == 1


def test_api_exports_recommend():
    assert kvplan.recommend is recommend
    assert kvplan.deployable("deepseek-ai/DeepSeek-V3", gpu="H100").plan.num_gpus == 16


def test_dp_engines_each_serve_their_batch():
    """A TP 8 x DP 2 replica with EP is two vLLM engines, each running --max-num-seqs requests: its rate is twice
    one engine's, b / (O x step + b x prefill), the figures its formula prints."""
    found = recommend("deepseek-ai/DeepSeek-V3", MIX, 2, gpus=["H100"])
    dp = [s for s in found.cheapest + found.pareto if s.data_parallel_size == 2]
    assert dp, "the EP layout is among the answers"
    s = dp[0]
    prefill = s.ttft_s   # no p95: the TTFT prefill is the mean prompt's
    assert s.requests_per_s_per_replica == pytest.approx(
        2 * s.max_num_seqs / (500 * s.step_time_s + s.max_num_seqs * prefill))
    assert "--data-parallel-size 2 --enable-expert-parallel" in s.command


def test_sglang_commands_cap_running_requests():
    """SGLang's batch cap is --max-running-requests (srt/server_args.py, 0.5.23), not vLLM's --max-num-seqs."""
    best = recommend(LLAMA, MIX, 10, engine="sglang", gpus=["H100"]).cheapest[0]
    assert best.command.startswith("python -m sglang.launch_server")
    assert f"--max-running-requests {best.max_num_seqs}" in best.command and "--max-num-seqs" not in best.command


def test_gpus_per_node_bounds_the_tp_of_a_replica():
    """Nodes of 2 H100s: no replica runs TP past 2 (TP stays inside a node), so Llama-3.1-70B replicas are TP 2 or
    TP 2 x PP n over whole nodes."""
    found = recommend("meta-llama/Llama-3.1-70B", MIX, 5, gpus=["H100"], gpus_per_node=2)
    for s in found.cheapest + found.pareto:
        assert s.tensor_parallel_size <= 2 and (s.gpus_per_replica <= 2 or s.gpus_per_replica % 2 == 0)
    eight = recommend("meta-llama/Llama-3.1-70B", MIX, 5, gpus=["H100"])
    assert max(s.tensor_parallel_size for s in eight.pareto) > 2   # nodes of 8 allow wider TP on the front


def test_app_prices_a_gpu_the_catalog_has_none_for():
    from kvplan.planning.recommend import parse_prices

    assert parse_prices(["L40S=0.86", " ", "h100 = 2.5"]) == {"L40S": 0.86, "H100-SXM": 2.5}
    assert main(["recommend", LLAMA, "--prompt-mean", "2000", "--output-mean", "500", "--rate", "10",
                 "--tpot-ms", "0.1"]) == 3   # nothing meets 0.1 ms: the documented exit 3
