"""app_pages.charts and app_pages.support: the data behind every chart and table of the web app equals the API's."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import kvplan
from app_pages import charts
from app_pages import support as sup
from app_pages import validation_data as val
from kvplan.planning.engines.vllm import max_concurrency_at
from kvplan.planning.planner import plan
from kvplan.units import GiB, fmt_bytes, fmt_gb, fmt_int


@pytest.fixture(scope="module")
def llama8b():
    return kvplan.load_model("meta-llama/Llama-3.1-8B")


@pytest.fixture(scope="module")
def gemma():
    return kvplan.load_model("google/gemma-2-9b")


# ---------------------------------------------------------------------------------------------- KV vs context


@pytest.mark.parametrize("seq_len, max_pos, expected_top", [
    (8192, 131072, 524288),          # 4 x the model's max position
    (1000, None, 4096),              # 4 x the context, the chosen context included
    (1 << 30, None, 1 << 30),        # beyond the 16M cap: the chosen context still shows
])
def test_context_grid(seq_len, max_pos, expected_top):
    grid = charts.context_grid(seq_len, max_pos)
    assert grid[0] == 128 and max(grid) == expected_top and seq_len in grid and grid == sorted(set(grid))


def test_kv_vs_context_frame_equals_estimate(gemma):
    frame = charts.kv_vs_context_frame(gemma, [128, 4096, 32768], 2)
    for n, kv in zip(frame["context"], frame["kv_bytes"]):
        assert kv == kvplan.estimate(gemma, int(n), 2).kv_cache_bytes
    assert list(frame["size"]) == [fmt_bytes(b) for b in frame["kv_bytes"]]
    assert frame["kv_gib"].iloc[-1] == frame["kv_bytes"].iloc[-1] / GiB


def test_kv_vs_context_frame_static_cache_grows_with_context(llama8b):
    frame = charts.kv_vs_context_frame(llama8b, [1024, 8192], 1, cache="static", max_cache_len=2048)
    assert frame["kv_bytes"].iloc[0] == kvplan.estimate(llama8b, 1024, cache="static", max_cache_len=2048).kv_cache_bytes
    assert frame["kv_bytes"].iloc[1] == kvplan.estimate(llama8b, 8192, cache="static", max_cache_len=8192).kv_cache_bytes


def test_gpu_lines_use_physical_memory():
    lines = charts.gpu_lines(["H100", "RTX 4090"])
    assert list(lines["gpu"]) == ["H100-SXM", "RTX-4090"]
    assert lines["memory_bytes"].iloc[0] == kvplan.gpus.resolve_gpu("H100").memory_bytes
    assert f"{lines['memory_gib'].iloc[0]:.2f}" == "79.19"


def test_kv_vs_context_figure_traces(gemma):
    frame = charts.kv_vs_context_frame(gemma, [128, 1024, 8192])
    fig = charts.kv_vs_context_figure(frame, charts.gpu_lines(["H100-SXM", "L4"]), 1024)
    names = [t.name for t in fig.data]
    assert names[0] == "KV cache" and "H100-SXM · 79.19 GiB" in names and "1,024 tokens" in names
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert list(fig.data[0].y) == list(frame["kv_gib"])
    json.loads(fig.to_json())


# n, and the label the chart's axis prints for it: inputs and their formatting, not kvplan figures
@pytest.mark.parametrize("n, label", [(128, "128"), (1024, "1k"), (131072, "128k"), (1 << 20, "1M"), (1000, "1,000")])
def test_token_label(n, label):
    assert charts.token_label(n) == label


# ---------------------------------------------------------------------------------------------- per layer


@pytest.mark.parametrize("text, indices", [("0-3,5,7", [0, 1, 2, 3, 5, 7]), ("4", [4]), ("", [])])
def test_parse_ranges(text, indices):
    assert charts.parse_ranges(text) == indices


@pytest.mark.parametrize("model_id, kinds", [
    ("google/gemma-2-9b", {"sliding": 21, "full": 21}),
    ("deepseek-ai/DeepSeek-V3", {"mla": 61}),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", {"state": 36, "full": 12}),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", {"chunked": 36, "full": 12}),
])
def test_per_layer_frame_sums_to_the_estimate(model_id, kinds):
    model = kvplan.load_model(model_id)
    est = kvplan.estimate(model, 16384, 2)
    frame = charts.per_layer_frame(est)
    assert frame.groupby("kind").size().to_dict() == kinds
    assert frame["bytes"].sum() == est.kv_cache_bytes - est.bookkeeping_bytes
    fig = charts.per_layer_figure(frame)
    assert {t.name for t in fig.data} == set(kinds) and fig.layout.barmode == "stack"


# ---------------------------------------------------------------------------------------------- capacity


def test_memory_stack_frame_adds_up_to_the_gpu(llama8b):
    p = plan(llama8b, gpu="H100-SXM", max_model_len=8192)
    frame = charts.memory_stack_frame(p)
    parts = dict(zip(frame["part"], frame["bytes"]))
    assert parts["weights"] == p.weights_bytes and parts["KV pool"] == p.kv_pool_bytes
    assert sum(parts.values()) == p.gpu_memory_bytes
    fig = charts.memory_stack_figure(frame, p)
    assert [t.name for t in fig.data][:len(frame)] == list(frame["part"])
    assert parts["CUDA graphs (estimate)"] == p.extra["CUDA graphs (estimate)"]   # vLLM 0.33's own line


def test_sglang_stack_counts_its_reserve_once():
    """Issue #12: SGLang's activation figure is its (1 - mem_fraction_static) reserve, and the chart added a
    (1 - utilization) share on top: an 86.7 GiB stack on a 79.26 GiB card. Now the stack is the card."""
    p = plan("google/gemma-3-27b-it", engine="sglang", gpu="H100-SXM", tp=8, max_model_len=8192)
    parts = dict(zip(*[charts.memory_stack_frame(p)[c] for c in ("part", "bytes")]))
    assert sum(parts.values()) == p.gpu_memory_bytes and "held back (1 - utilization)" not in parts
    assert parts["rest of the card"] < 1 * GiB  # the CUDA context and load extras, not a second reserve


def test_speed_notes_mention_moe_only_for_moe(llama8b):
    dense = sup.plan_speed(llama8b, plan(llama8b, gpu="H100-SXM", max_model_len=8192), 2048, 1)
    assert not any("MoE" in n for n in dense.notes)
    moe_model = kvplan.load_model("Qwen/Qwen3-30B-A3B")
    moe = sup.plan_speed(moe_model, plan(moe_model, gpu="H100-SXM", max_model_len=8192), 2048, 1)
    assert any(n.startswith("MoE: only the routed experts") for n in moe.notes)


def test_memory_stack_frame_clips_a_negative_pool():
    p = plan("meta-llama/Llama-3.1-405B", gpu="H100-SXM", max_model_len=8192)
    assert not p.fits and p.kv_pool_bytes == 0 and p.shortfall_bytes > p.weights_bytes - p.gpu_memory_bytes
    assert charts.memory_stack_frame(p).set_index("part").loc["KV pool", "bytes"] == 0


def test_concurrency_frame_equals_planner(llama8b):
    p = plan(llama8b, gpu="H100-SXM", max_model_len=32768)
    contexts = charts.concurrency_contexts(p.max_model_len)
    # 256 the first context the chart draws, 32,768 the plan's max_model_len (the input above)
    assert contexts[0] == 256 and contexts[-1] == 32768
    frame = charts.concurrency_frame(p, llama8b, contexts)
    assert list(frame["max_concurrency"]) == [max_concurrency_at(p, n, llama8b) for n in contexts]
    assert frame["max_concurrency"].iloc[-1] == pytest.approx(p.max_concurrency, rel=1e-4)
    charts.concurrency_figure(frame, p.max_model_len)


# ---------------------------------------------------------------------------------------------- app_support


def test_headline_formats_the_estimate(llama8b):
    est = kvplan.estimate(llama8b, 4096, 1)
    values = [m.value for m in sup.headline(est)]
    assert values == [fmt_bytes(est.kv_cache_bytes), fmt_gb(est.kv_cache_bytes), fmt_int(est.kv_cache_bytes),
                      "131,072 B"]
    assert values[:3] == ["512.00 MiB", "0.54 GB", "536,870,912"]


def test_group_table_and_exports(gemma):
    est = kvplan.estimate(gemma, 8192, 2)
    table = sup.group_table(est)
    assert list(table["bytes"]) == [g.bytes for g in est.groups]
    assert "formula" not in sup.group_table(est, formula=False)
    assert json.loads(sup.estimate_json(est))["kv_cache_bytes"] == est.kv_cache_bytes
    rows = pd.read_csv(pd.io.common.StringIO(sup.estimate_csv(est)))
    assert rows["bytes"].iloc[-1] == est.kv_cache_bytes and rows["kind"].iloc[-1] == "total"


def test_workload_zero_means_default(llama8b):
    w = sup.Workload(8192, 1, "auto", "static", 0, 0)
    assert w.kwargs() == dict(kv_dtype=None, cache="static", max_cache_len=None, prompt_len=None)
    # a static cache sized to the workload's 8,192-token sequence (the Workload above)
    assert sup.run_estimate(llama8b, w).max_cache_len == 8192


def test_plan_exports_and_verdict(llama8b):
    p = plan(llama8b, gpu="H100-SXM", max_model_len=8192)
    fits, sentence = sup.verdict(p)
    assert fits and sentence.startswith("Fits on 1 x H100-SXM") and fmt_int(p.kv_cache_tokens) in sentence
    assert json.loads(sup.plan_json(p))["kv_pool_bytes"] == p.kv_pool_bytes
    assert "kv_cache_tokens," + str(p.kv_cache_tokens) in sup.plan_csv(p)
    assert sup.serve_command(p) == p.vllm_command
    big = plan("meta-llama/Llama-3.1-405B", gpu="H100-SXM", max_model_len=8192)
    fits, sentence = sup.verdict(big)
    assert not fits and sentence.startswith("Does not fit")


def test_sglang_command():
    p = plan("meta-llama/Llama-3.1-8B", engine="sglang", gpu="H100-SXM", max_model_len=8192, kv_dtype="fp8")
    command = sup.serve_command(p)
    assert command == p.vllm_command  # the app shows the CLI's line (it used to build its own, with --tp)
    assert command.startswith("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --tp-size 1")
    assert "--context-length 8192" in command and "--kv-cache-dtype fp8_e4m3" in command


def test_model_compute_and_speed(llama8b):
    mc = sup.model_compute(llama8b)
    # Llama-3.1-8B: transformers' LlamaForCausalLM count (tests/test_weights.py works it by hand)
    assert mc.total_params == mc.active_params == 8_030_261_248
    assert mc.attn_flops_per_token_pair == 32 * 2 * 32 * (128 + 128)
    p = plan(llama8b, gpu="H100-SXM", max_model_len=8192)
    s = sup.plan_speed(llama8b, p, 2048, 1)
    # by hand: one decode step reads 8,030,261,248 x 2 B of weights + 131,072 B x 8,192 tokens of KV at
    # 3.35 TB/s x mbu 0.7; the prefill is 2 x params x 2,048 + 32 x 2 x 32 x 256 x 2,048^2 / 2 at 989.5 TFLOP/s x 0.5
    step_bytes = 8_030_261_248 * 2 + 131_072 * 8192
    assert s.decode_bytes_per_step == step_bytes == 17_134_264_320
    assert s.time_per_output_token_s == pytest.approx(step_bytes / (3.35e12 * 0.7)) == pytest.approx(7.3067e-3, rel=1e-4)
    prefill = 2 * 8_030_261_248 * 2048 + 32 * 2 * 32 * 256 * 2048 * 2048 // 2
    # the prefill FLOPs by hand, as the comment above writes them
    assert s.prefill_flops == prefill and s.ttft_s == pytest.approx(prefill / (989.5e12 * 0.5))
    assert s.tokens_per_s_total == pytest.approx(1 / s.time_per_output_token_s)


def test_moe_speed_reads_active_weights_only():
    model = kvplan.load_model("Qwen/Qwen3-30B-A3B")
    mc = sup.model_compute(model)
    assert mc.active_params < mc.total_params / 5
    assert mc.active_weight_bytes < mc.weight_bytes / 5


def test_naive_vs_real_llama2_70b():
    model = kvplan.load_model(sup.LEARN_MODEL)
    table = sup.naive_vs_real(model, sup.LEARN_CONTEXTS, "fp16")
    # the Learn page's contexts (app_pages/support.py LEARN_CONTEXTS): inputs
    assert list(table["tokens"]) == [100, 1_000, 4_000, 8_192]
    assert list(table["real bytes"]) == [2 * 80 * 8 * 128 * n * 2 for n in sup.LEARN_CONTEXTS]
    assert (table["naive MHA bytes"] == 8 * table["real bytes"]).all()
    at = sup.naive_vs_real_at(model, 4096)
    # Llama-2-70b at 4,096 tokens in fp16: 80 x 8 KV heads x 128 x 2 x 2 B x 4,096 = 1,342,177,280; MHA 8x
    assert (at.real_bytes, at.naive_bytes, at.times) == (1_342_177_280, 8 * 1_342_177_280, "8x")


def test_step_cost_is_linear_with_cache_quadratic_without(llama8b):
    a, b = sup.step_cost(llama8b, 1000), sup.step_cost(llama8b, 2000)
    mc = sup.model_compute(llama8b)
    assert b.flops_with_cache - a.flops_with_cache == mc.attn_flops_per_token_pair * 1000
    assert a.flops_without_cache == 2 * mc.active_params * 1000 + mc.attn_flops_per_token_pair * 1000 * 1000 // 2
    assert a.kv_bytes == kvplan.estimate(llama8b, 1000).kv_cache_bytes


@pytest.mark.parametrize("seconds, text", [(2.5, "2.50 s"), (0.0123, "12.3 ms"), (0.0000123, "12 µs")])
def test_fmt_seconds(seconds, text):
    assert sup.fmt_seconds(seconds) == text


# ---------------------------------------------------------------------------------------------- model sources


@pytest.mark.parametrize("text", ["", "   ", "not a hub id", "../../etc/passwd", "a/b/c", "validation/vllm_calibration.csv"])
def test_hub_loader_refuses_non_ids_and_local_paths(text, monkeypatch):
    monkeypatch.chdir(sup.ROOT)
    with pytest.raises(kvplan.ModelNotAvailableError):
        sup.load_hub_model(text)


def test_hub_loader_offline_unknown_id_is_a_message(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(kvplan.KVPlanError):
        sup.load_hub_model("nobody-here/no-such-model-xyz")


def test_upload_parses_json_only():
    raw = (sup.ROOT / "model_configs" / "meta-llama__Llama-3.1-8B.json").read_bytes()
    model = sup.load_uploaded_config(raw, "config.json")
    # Llama-3.1-8B at 4,096 tokens: 32 x 2 x 8 x 128 x 2 B x 4,096 = 536,870,912
    assert kvplan.estimate(model, 4096).kv_cache_bytes == 536_870_912
    for bad in (b"{not json", b"[1, 2]", b"\xff\xfe", b" " * (sup.MAX_UPLOAD_BYTES + 1)):
        with pytest.raises(kvplan.ConfigError):
            sup.load_uploaded_config(bad, "config.json")


# ---------------------------------------------------------------------------------------------- validation files


def test_reports_missing_folder_is_empty(tmp_path):
    reports = val.read_reports(tmp_path / "nope")
    assert reports.rows.empty and not reports.problems


def test_reports_read_aliases_and_bad_files(tmp_path):
    (tmp_path / "run-a").mkdir()
    (tmp_path / "run-a" / "report.json").write_text(json.dumps({
        "device": "NVIDIA H200", "versions": {"torch": "2.13.0", "transformers": "5.24.0"},
        "results": [{"model": "m", "cache": "dynamic", "predicted_bytes": 100, "measured_bytes": 100},
                    {"model_id": "m", "cache_strategy": "static", "predicted": "110", "measured": 100},
                    {"model": "m", "note": "no numbers"}]}))
    (tmp_path / "run-b").mkdir()
    (tmp_path / "run-b" / "report.json").write_text("{broken")
    (tmp_path / "run-c").mkdir()
    (tmp_path / "run-c" / "report.json").write_text(json.dumps([{"model": "n", "cache": "dynamic",
                                                                  "predicted_bytes": 5, "measured_bytes": 4}]))
    reports = val.read_reports(tmp_path)
    assert len(reports.rows) == 3 and reports.problems == ("run-b/report.json could not be read (JSONDecodeError)",)
    assert list(reports.rows["error_pct"]) == [0.0, 10.0, 25.0]
    assert reports.runs.iloc[0]["versions"] == "torch 2.13.0, transformers 5.24.0"
    summary = val.report_summary(reports.rows)
    assert summary.set_index(["model", "cache"]).loc[("m", "dynamic"), "exact"] == 1
    fig = charts.validation_figure(reports.rows, "measured_bytes", "predicted_bytes", "cache")
    assert {t.name for t in fig.data} == {"dynamic", "static", "predicted = measured"}


def test_calibration_summary_matches_the_committed_markdown():
    frame = val.read_calibration(sup.ROOT / "validation" / "vllm_calibration.csv")
    summary = val.calibration_summary(frame).set_index("metric")
    md = (sup.ROOT / "validation" / "vllm_calibration.md").read_text()
    for metric, row in summary.iterrows():
        line = next(l for l in md.splitlines() if l.startswith(f"| {metric} | "))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert int(cells[1]) == row["rows"]
        assert [float(c) for c in cells[2:5]] == pytest.approx(
            [row["median |error| %"], row["mean |error| %"], row["max |error| %"]], abs=0.011)
    part, unit = val.calibration_metric(frame, "tokens")
    assert unit == "tokens" and set(part["metric"]) == {"tokens"}
    assert val.calibration_intro(sup.ROOT / "validation" / "vllm_calibration.md").startswith("Source:")


def test_reports_read_the_harness_format(tmp_path):
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "report.json").write_text(json.dumps({
        "environment": {"device": "cuda", "gpu": "NVIDIA H200", "torch": "2.13.0", "transformers": "5.24.0",
                        "kvplan": "0.1.0", "hqq": None},
        "cases": [{"source": "google/gemma-2-9b", "model": "gemma-2-9b", "variant": "shrunk", "cache": "dynamic",
                   "kv_dtype": None, "dtype": "bfloat16", "seq_len": 31, "batch_size": 2,
                   "predicted_kv_bytes": 1000, "measured_kv_bytes": 990, "status": "mismatch"},
                  {"source": "google/gemma-2-9b", "cache": "static", "status": "oom", "predicted_kv_bytes": 5,
                   "measured_kv_bytes": None}]}))
    reports = val.read_reports(tmp_path)
    [row] = reports.rows.to_dict("records")
    assert (row["model"], row["variant"], row["kv_dtype"], row["status"], row["device"]) == (
        "google/gemma-2-9b", "shrunk", "bfloat16", "mismatch", "NVIDIA H200")
    assert row["error_bytes"] == 10 and row["error_pct"] == pytest.approx(100 * 10 / 990)
    run = reports.runs.iloc[0]
    assert (run["cases"], run["measured"], run["versions"]) == (2, 1, "kvplan 0.1.0, torch 2.13.0, transformers 5.24.0")


def test_space_for_time(tmp_path):
    assert val.read_space_for_time(tmp_path) == []
    (tmp_path / "r").mkdir()
    data = {"environment": {"device": "cpu", "torch": "2.13.0", "transformers": "5.24.0"},
            "model": {"model_type": "gpt2", "n_layer": 6, "params": 1_234_567},
            "points": [{"context": 32, "cached_s": 0.001, "recompute_s": 0.002},
                       {"context": 64, "cached_s": 0.0011, "recompute_s": 0.0041}],
            "fits": {"cached_per_token_exponent": 0.14, "recompute_total_exponent": 2.03}}
    (tmp_path / "r" / "space_for_time.json").write_text(json.dumps(data))
    [(run, read)] = val.read_space_for_time(tmp_path)
    frame = val.space_for_time_frame(read)
    assert run == "r" and list(frame.columns) == ["context", "cached_s", "recompute_s"]
    facts = val.space_for_time_facts(read)
    assert facts[:2] == ["time per token with the cache grows as L^0.14",
                         "total time for L tokens recomputing grows as L^2.03"]
    assert "params 1,234,567" in facts[2] and "torch 2.13.0" in facts[2]
    fig = charts.space_for_time_figure(frame)
    assert [t.name for t in fig.data] == ["recompute the prefix", "with the KV cache"]
    assert list(fig.data[1].y) == pytest.approx([1.0, 1.1])
    assert val.space_for_time_frame({"other": 1}) is None
    assert charts.space_for_time_figure(pd.DataFrame({"x": [1]})) is None
